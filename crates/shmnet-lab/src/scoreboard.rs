//! The scoreboard of one benchmark run: a page of counters shared by every process of a
//! `shmnet ttcp` or `shmnet rr` cell (harness, sender, receiver — whichever structure they
//! belong to).
//!
//! It carries what the parties of a run must agree on and nothing else:
//!
//! - **start and stop**: nobody sends before `go`; the sender starts no new message after
//!   `stop` or once it has sent `limit` messages; everyone leaves at `quit`;
//! - **the window**: the sender keeps at most `window` messages between its `sent` and the
//!   receiver's `received` (0: no limit). This stands in for the window of the TCP connection
//!   seed 002's ttcp ran over: shmnet speaks UDP, and without a window a fast sender measures
//!   only how fast the slower party drops. Every structure, the kernel's included, gets the
//!   same window through this same page, so none pays for flow control and none is spared it;
//! - **counts**: `sent` (written only by the sender) and `received` (only by the receiver),
//!   and the sender's word that it has **finished**: it sends nothing more, and `sent` is
//!   final (a sender may publish `sent` in batches while it runs; the harness reads the counts
//!   only once it has finished);
//! - **latency samples** of a request–response run (`rr`), nanoseconds, written by the party
//!   that times the transactions and read by the harness after the run;
//! - the receiver's **port**, when it is chosen by the kernel (the `kernel` structure).
//!
//! The page is a file mapped shared (in `/dev/shm` when there is one): the harness creates
//! it and passes its path to the processes it starts. Everything in it is read as untrusted:
//! a process that scribbles on it can make a run stall or stop early, never make a reader
//! fault or panic (the sample count is clamped to the mapping, the header is checked at
//! open).

use rustix::fd::AsFd;
use rustix::mm::{MapFlags, ProtFlags};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"SHMNTBRD");
const VERSION: u64 = 2;
/// Bytes before the samples: the header and one 64-byte line per hot word.
const HEADER: usize = 1024;

/// Word offsets (in u64s). Each word a different party writes sits on a line of its own.
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const SAMPLE_CAP: usize = 2;
    pub const WINDOW: usize = 3;
    pub const LIMIT: usize = 4;
    pub const GO: usize = 8;
    pub const STOP: usize = 9;
    pub const QUIT: usize = 10;
    pub const PORT: usize = 11;
    pub const READY: usize = 12;
    pub const SENT: usize = 16;
    pub const RECEIVED: usize = 24;
    pub const SAMPLES_WRITTEN: usize = 32;
    pub const SENDER_FINISHED: usize = 40;
}

/// What a sender may do next: softnic's own answer type (a benchmark sender is a softnic
/// paced by this board, see [`crate::softnic_roles`]).
pub use shmnet_io::driver::softnic::Permit;

/// Why a scoreboard could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum ScoreboardError {
    /// The file could not be created, sized, opened or mapped.
    #[error("scoreboard {path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        err: std::io::Error,
    },
    /// The file is not a scoreboard of this version.
    #[error("{0} is not a shmnet scoreboard (bad magic, version or size)")]
    NotAScoreboard(String),
}

/// A mapped scoreboard. Cheap to share between threads (`Arc`); every access is atomic.
pub struct Scoreboard {
    base: NonNull<u8>,
    len: usize,
    /// Sample slots that lie inside the mapping (from the header, clamped at open).
    cap: usize,
}

// SAFETY: the mapping lives as long as the value, and every access to it is through atomics.
unsafe impl Send for Scoreboard {}
// SAFETY: as above: shared access is only through atomic loads, stores and RMWs.
unsafe impl Sync for Scoreboard {}

impl Scoreboard {
    /// Creates the scoreboard file at `path` (replacing any) for a run with this `window`
    /// (0: none), message `limit` (0: none) and room for `samples` latency samples.
    pub fn create(
        path: &Path,
        window: u64,
        limit: u64,
        samples: usize,
    ) -> Result<Self, ScoreboardError> {
        let io = |err| ScoreboardError::Io {
            path: path.display().to_string(),
            err,
        };
        let len = HEADER + samples * 4;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io)?;
        file.set_len(len as u64).map_err(io)?;
        let board = Self::map(&file, len, samples).map_err(io)?;
        board.word(at::VERSION).store(VERSION, Ordering::Relaxed);
        board
            .word(at::SAMPLE_CAP)
            .store(samples as u64, Ordering::Relaxed);
        board.word(at::WINDOW).store(window, Ordering::Relaxed);
        board.word(at::LIMIT).store(limit, Ordering::Relaxed);
        board.word(at::MAGIC).store(MAGIC, Ordering::Release);
        Ok(board)
    }

    /// Opens the scoreboard a harness created at `path`.
    pub fn open(path: &Path) -> Result<Self, ScoreboardError> {
        let io = |err| ScoreboardError::Io {
            path: path.display().to_string(),
            err,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len() as usize;
        if len < HEADER {
            return Err(ScoreboardError::NotAScoreboard(path.display().to_string()));
        }
        let mut board = Self::map(&file, len, 0).map_err(io)?;
        if board.word(at::MAGIC).load(Ordering::Acquire) != MAGIC
            || board.word(at::VERSION).load(Ordering::Relaxed) != VERSION
        {
            return Err(ScoreboardError::NotAScoreboard(path.display().to_string()));
        }
        let claimed = board.word(at::SAMPLE_CAP).load(Ordering::Relaxed);
        board.cap = usize::try_from(claimed)
            .unwrap_or(usize::MAX)
            .min((len - HEADER) / 4);
        Ok(board)
    }

    fn map(file: &std::fs::File, len: usize, cap: usize) -> std::io::Result<Self> {
        // SAFETY: a fresh shared mapping of `len` bytes of `file`, which is at least `len`
        // long; nothing else in this process refers to the address range.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                file.as_fd(),
                0,
            )
        }?;
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(std::io::ErrorKind::OutOfMemory)?;
        Ok(Self { base, len, cap })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!((i + 1) * 8 <= HEADER);
        // SAFETY: `i` is one of the constant offsets in `at`, all inside the header, which
        // lies inside the mapping (checked at create/open); the mapping is page-aligned so
        // every word is 8-byte aligned; it lives as long as `self`.
        unsafe { &*self.base.as_ptr().add(i * 8).cast::<AtomicU64>() }
    }

    fn sample(&self, i: usize) -> Option<&AtomicU32> {
        (i < self.cap).then(|| {
            // SAFETY: `i < cap`, and `cap` slots of 4 bytes after the header lie inside the
            // mapping (clamped at open); 4-byte aligned since the header is 1024 bytes.
            unsafe { &*self.base.as_ptr().add(HEADER + i * 4).cast::<AtomicU32>() }
        })
    }

    /// The sender's window (0: none).
    pub fn window(&self) -> u64 {
        self.word(at::WINDOW).load(Ordering::Relaxed)
    }

    /// Messages the sender sends at most (0: no limit).
    pub fn limit(&self) -> u64 {
        self.word(at::LIMIT).load(Ordering::Relaxed)
    }

    /// Starts the run.
    pub fn set_go(&self) {
        self.word(at::GO).store(1, Ordering::Release);
    }

    /// Whether the run has started.
    pub fn go(&self) -> bool {
        self.word(at::GO).load(Ordering::Acquire) != 0
    }

    /// Tells the sender to start no new message.
    pub fn set_stop(&self) {
        self.word(at::STOP).store(1, Ordering::Release);
    }

    /// Whether the sender was told to stop.
    pub fn stopping(&self) -> bool {
        self.word(at::STOP).load(Ordering::Acquire) != 0
    }

    /// Tells every party to leave.
    pub fn set_quit(&self) {
        self.word(at::QUIT).store(1, Ordering::Release);
    }

    /// Whether the parties should leave.
    pub fn quitting(&self) -> bool {
        self.word(at::QUIT).load(Ordering::Acquire) != 0
    }

    /// A party says it is ready (bound, attached).
    pub fn add_ready(&self) {
        self.word(at::READY).fetch_add(1, Ordering::AcqRel);
    }

    /// Parties that said they are ready.
    pub fn ready(&self) -> u64 {
        self.word(at::READY).load(Ordering::Acquire)
    }

    /// The receiver publishes the port it was given.
    pub fn set_port(&self, port: u16) {
        self.word(at::PORT)
            .store(u64::from(port), Ordering::Release);
    }

    /// The receiver's port (0: not yet known).
    pub fn port(&self) -> u16 {
        self.word(at::PORT).load(Ordering::Acquire) as u16
    }

    /// The sender publishes how many messages it has sent.
    pub fn set_sent(&self, n: u64) {
        self.word(at::SENT).store(n, Ordering::Release);
    }

    /// Messages sent.
    pub fn sent(&self) -> u64 {
        self.word(at::SENT).load(Ordering::Acquire)
    }

    /// The sender says it has finished: it sends nothing more, and the `sent` it published
    /// before this call is final.
    pub fn set_sender_finished(&self) {
        self.word(at::SENDER_FINISHED).store(1, Ordering::Release);
    }

    /// Whether the sender has finished (and `sent` is final).
    pub fn sender_finished(&self) -> bool {
        self.word(at::SENDER_FINISHED).load(Ordering::Acquire) != 0
    }

    /// The receiver publishes how many messages it has received.
    pub fn set_received(&self, n: u64) {
        self.word(at::RECEIVED).store(n, Ordering::Release);
    }

    /// Messages received.
    pub fn received(&self) -> u64 {
        self.word(at::RECEIVED).load(Ordering::Acquire)
    }

    /// Whether a sender that has sent `sent` messages, and last saw the receiver at
    /// `*seen_received`, may send another. Re-reads `received` only when the window looks
    /// full (so a sender with room does not pull the receiver's line across on every
    /// message).
    pub fn permit(&self, sent: u64, seen_received: &mut u64) -> Permit {
        if self.stopping() || (self.limit() != 0 && sent >= self.limit()) {
            return Permit::Done;
        }
        if !self.go() {
            return Permit::Wait;
        }
        let window = self.window();
        if window == 0 {
            return Permit::Go;
        }
        if sent.saturating_sub(*seen_received) >= window {
            *seen_received = self.received();
            if sent.saturating_sub(*seen_received) >= window {
                return Permit::Wait;
            }
        }
        Permit::Go
    }

    /// Records one latency sample (dropped, but counted, when the sample area is full).
    pub fn record_sample(&self, nanos: u64) {
        let i = self
            .word(at::SAMPLES_WRITTEN)
            .fetch_add(1, Ordering::Relaxed) as usize;
        if let Some(s) = self.sample(i) {
            s.store(nanos.min(u64::from(u32::MAX)) as u32, Ordering::Relaxed);
        }
    }

    /// Samples recorded (some may not have fitted).
    pub fn samples_recorded(&self) -> u64 {
        self.word(at::SAMPLES_WRITTEN).load(Ordering::Acquire)
    }

    /// The samples that fitted, in nanoseconds.
    pub fn samples(&self) -> Vec<u32> {
        let n = (self.samples_recorded() as usize).min(self.cap);
        (0..n)
            .filter_map(|i| self.sample(i))
            .map(|s| s.load(Ordering::Relaxed))
            .collect()
    }
}

impl std::fmt::Debug for Scoreboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoreboard")
            .field("window", &self.window())
            .field("limit", &self.limit())
            .field("go", &self.go())
            .field("stop", &self.stopping())
            .field("sent", &self.sent())
            .field("received", &self.received())
            .finish_non_exhaustive()
    }
}

impl Drop for Scoreboard {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no reference into it outlives
        // `self` (every accessor borrows `self`).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A fresh path for a scoreboard: in `/dev/shm` if it exists (memory, never disk), else
/// the temporary directory.
pub fn temp_path(tag: &str) -> std::path::PathBuf {
    let dir = Path::new("/dev/shm");
    let dir = if dir.is_dir() {
        dir.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    dir.join(format!("shmnet-{tag}-{}-{nanos}.board", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Removed(std::path::PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn the_window_holds_the_sender_back_until_the_receiver_catches_up() {
        let path = temp_path("test-window");
        let _rm = Removed(path.clone());
        let board = Scoreboard::create(&path, 4, 10, 16).unwrap();
        let peer = Scoreboard::open(&path).unwrap();
        let mut seen = 0;
        assert_eq!(peer.permit(0, &mut seen), Permit::Wait, "before go");
        board.set_go();
        for sent in 0..4 {
            assert_eq!(peer.permit(sent, &mut seen), Permit::Go);
        }
        assert_eq!(peer.permit(4, &mut seen), Permit::Wait, "window full");
        board.set_received(1);
        assert_eq!(peer.permit(4, &mut seen), Permit::Go);
        assert_eq!(peer.permit(10, &mut seen), Permit::Done, "limit");
        board.set_stop();
        assert_eq!(peer.permit(5, &mut seen), Permit::Done, "stopped");
        assert!(!board.sender_finished());
        peer.set_sent(7);
        peer.set_sender_finished();
        assert!(board.sender_finished());
        assert_eq!(board.sent(), 7, "final once finished");
    }

    #[test]
    fn samples_beyond_the_area_are_counted_not_written() {
        let path = temp_path("test-samples");
        let _rm = Removed(path.clone());
        let board = Scoreboard::create(&path, 0, 0, 3).unwrap();
        for ns in [5, 6, 7, 8, 9] {
            board.record_sample(ns);
        }
        let reader = Scoreboard::open(&path).unwrap();
        assert_eq!(reader.samples(), vec![5, 6, 7]);
        assert_eq!(reader.samples_recorded(), 5);
    }

    #[test]
    fn a_file_that_is_not_a_scoreboard_is_refused_and_a_lying_header_is_clamped() {
        let path = temp_path("test-bad");
        let _rm = Removed(path.clone());
        std::fs::write(&path, vec![0u8; 2048]).unwrap();
        assert!(matches!(
            Scoreboard::open(&path),
            Err(ScoreboardError::NotAScoreboard(_))
        ));
        std::fs::write(&path, [1u8; 10]).unwrap();
        assert!(Scoreboard::open(&path).is_err());
        let board = Scoreboard::create(&path, 0, 0, 2).unwrap();
        board
            .word(at::SAMPLE_CAP)
            .store(u64::MAX, Ordering::Relaxed);
        board
            .word(at::SAMPLES_WRITTEN)
            .store(u64::MAX, Ordering::Relaxed);
        let reader = Scoreboard::open(&path).unwrap();
        assert_eq!(reader.samples().len(), 2, "clamped to the file");
        reader.record_sample(1); // must not write outside the mapping
    }
}
