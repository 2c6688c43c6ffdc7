//! Packet capture from a running server (`shmnet capture`): the frames that cross a chosen
//! point — taken from the driver, handed to the driver, refused by the stack with its
//! reason — copied by the data plane into a ring in shared memory that the capture client
//! reads and writes out as pcapng.
//!
//! **Bounded, never back-pressure.** The ring is a single-producer single-consumer byte
//! ring in a memfd the server creates for each capture and hands over (`SCM_RIGHTS`): the
//! data plane writes a record when it has room and otherwise counts it lost
//! ([`RingHeader::lost`]); it never waits for the reader. With no capture running the
//! data plane tests one empty list per batch of frames and copies nothing.
//!
//! **Untrusted reader.** The reader writes two words the server reads: `tail`, how far it
//! has read, and `parked`, whether it sleeps on the ring ([`RingReader::park`]). A `tail`
//! behind the last one read or past what was written stops that capture (the server can no
//! longer tell free space from data); a `parked` the reader keeps setting costs the server
//! at most one `futex` wake per batch that kept a frame. Nothing the reader writes can make
//! the server write outside the ring.
//!
//! Layout: a 4 KiB header ([`RingHeader`]), then `capacity` bytes of records, each
//! [`RECORD_HEADER`] bytes of [`RecordHeader`] and the frame's first `caplen` bytes, padded
//! to 8. A record never wraps: where one would, a [`Point::Skip`] record fills the ring's
//! end and the next starts at offset 0.

pub mod filter;

use rustix::fd::{AsFd, OwnedFd};
use rustix::mm::{MapFlags, ProtFlags};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use filter::{Filter, FilterError};

/// Where a frame was captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Point {
    /// Filler at the ring's end (never a frame).
    Skip = 0,
    /// Taken from the driver (received from the device).
    Rx = 1,
    /// Handed to the driver (sent to the device).
    Tx = 2,
    /// Received and refused by the stack; the record says why.
    Drop = 3,
}

impl Point {
    fn of(b: u8) -> Option<Point> {
        Some(match b {
            0 => Point::Skip,
            1 => Point::Rx,
            2 => Point::Tx,
            3 => Point::Drop,
            _ => return None,
        })
    }
}

/// What a capture asks for (the `Capture` request).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureSpec {
    /// Frames from the driver.
    pub rx: bool,
    /// Frames to the driver.
    pub tx: bool,
    /// Frames the stack refused, with the reason.
    pub drops: bool,
    /// Bytes kept of each frame at most (tcpdump's `-s`; 0 means [`MAX_SNAPLEN`]).
    pub snaplen: u32,
    /// Only the frames that pass.
    pub filter: Option<Filter>,
    /// Bytes of the ring (rounded to whole pages, within [`MIN_RING`] and [`MAX_RING`]).
    pub ring_bytes: u64,
}

/// Bytes kept of a frame at most.
pub const MAX_SNAPLEN: u32 = 65_535;
/// The smallest ring.
pub const MIN_RING: u64 = 64 << 10;
/// The largest ring.
pub const MAX_RING: u64 = 256 << 20;
/// Captures running at once, at most, per server.
pub const MAX_CAPTURES: usize = 4;

const PAGE: u64 = 4096;
const HEADER: u64 = PAGE;
const MAGIC: u64 = u64::from_le_bytes(*b"shmncap2");

/// Bytes of a record's header.
pub const RECORD_HEADER: usize = 24;

/// The ring's header, at the start of the memfd.
#[repr(C)]
pub struct RingHeader {
    magic: AtomicU64,
    capacity: AtomicU64,
    /// Bytes written, ever (the server's).
    head: AtomicU64,
    /// Bytes read, ever (the reader's).
    tail: AtomicU64,
    /// Frames the capture matched and could not keep: the ring was full (the server's).
    pub lost: AtomicU64,
    /// Set by the server when it stopped writing (the reader stopped it, or it was
    /// refused).
    stopped: AtomicU64,
    /// 1 while the reader sleeps on it (a futex word; the reader's). The server wakes a
    /// parked reader once after a batch in which it kept a frame, so a capture that keeps
    /// nothing (a filter that matches nothing, or no traffic) costs no wake-ups at all,
    /// and one that keeps frames costs at most one per park ([`Naps`]).
    parked: AtomicU32,
}

/// A record's header, as read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Where.
    pub point: Point,
    /// For [`Point::Drop`], the reason's index in [`crate::control::Response::Capture`]'s
    /// `reasons` (0: none).
    pub reason: u16,
    /// Bytes of the frame on the wire.
    pub orig_len: u32,
    /// Bytes kept.
    pub caplen: u32,
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: u64,
}

/// Why a capture ring could not be made or mapped.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A system call failed.
    #[error("{what}: {err}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The kernel's answer.
        err: std::io::Error,
    },
    /// The memfd is not a capture ring of this version.
    #[error("the descriptor the server sent is not a capture ring of this version")]
    NotARing,
}

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> CaptureError {
    move |e| CaptureError::Sys {
        what,
        err: e.into(),
    }
}

/// A mapped capture ring: the server's end ([`RingWriter`]) or the reader's
/// ([`RingReader`]).
struct Mapped {
    base: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: plain shared memory reached through atomics (the header) and bounded copies
// (the records); no thread-bound state.
unsafe impl Send for Mapped {}

impl Mapped {
    fn map(fd: impl AsFd, len: usize) -> Result<Self, CaptureError> {
        // SAFETY: a fresh shared mapping of `len` bytes of the memfd, owned by the value
        // returned; nothing else refers to that address range.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(sys("mapping the capture ring"))?;
        let base = std::ptr::NonNull::new(p.cast()).ok_or(CaptureError::NotARing)?;
        Ok(Self { base, len })
    }

    fn header(&self) -> &RingHeader {
        // SAFETY: the mapping is at least HEADER bytes, page-aligned, and RingHeader is
        // atomics only: any bytes are a valid value of it.
        unsafe { &*self.base.as_ptr().cast::<RingHeader>() }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: HEADER < len (checked when made or mapped).
        unsafe { self.base.as_ptr().add(HEADER as usize) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made, unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// The server's end of a capture ring.
pub struct RingWriter {
    map: Mapped,
    fd: OwnedFd,
    capacity: u64,
    /// Bytes written, ever (the copy of `head` only this side writes).
    head: u64,
    /// The reader's `tail` as last read: it must only move forward.
    tail: u64,
    broken: bool,
    /// A frame was kept since the last [`RingWriter::wake_if_parked`].
    kept: bool,
}

/// What writing a record did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrote {
    /// The record is in the ring.
    Kept,
    /// No room: counted in `lost`.
    Lost,
    /// The reader's `tail` is impossible: the capture is over.
    Broken,
}

impl RingWriter {
    /// A new ring of about `bytes` (see [`CaptureSpec::ring_bytes`]).
    pub fn create(bytes: u64) -> Result<Self, CaptureError> {
        let capacity = bytes.clamp(MIN_RING, MAX_RING).div_ceil(PAGE) * PAGE;
        let fd = rustix::fs::memfd_create(
            "shmnet-capture",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )
        .map_err(sys("memfd_create"))?;
        rustix::fs::ftruncate(&fd, HEADER + capacity).map_err(sys("sizing the capture ring"))?;
        rustix::fs::fcntl_add_seals(
            &fd,
            rustix::fs::SealFlags::SHRINK
                | rustix::fs::SealFlags::GROW
                | rustix::fs::SealFlags::SEAL,
        )
        .map_err(sys("sealing the capture ring"))?;
        let map = Mapped::map(&fd, (HEADER + capacity) as usize)?;
        let h = map.header();
        h.capacity.store(capacity, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(Self {
            map,
            fd,
            capacity,
            head: 0,
            tail: 0,
            broken: false,
            kept: false,
        })
    }

    /// The memfd, for the reader.
    pub fn fd(&self) -> rustix::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Frames lost so far.
    pub fn lost(&self) -> u64 {
        self.map.header().lost.load(Ordering::Relaxed)
    }

    /// Whether the reader has not broken the ring.
    pub fn write_ok(&self) -> bool {
        !self.broken
    }

    /// Marks the ring stopped (the reader sees it after what was written).
    pub fn stop(&self) {
        self.map.header().stopped.store(1, Ordering::Release);
        self.wake();
    }

    /// The end of a batch: wakes the reader if it is parked and a frame was kept since the
    /// last call. Without a kept frame, one test; with one, a fence and a load, and a
    /// `futex` wake only for a parked reader.
    #[inline]
    pub fn wake_if_parked(&mut self) {
        if std::mem::take(&mut self.kept) {
            self.wake();
        }
    }

    fn wake(&self) {
        let parked = &self.map.header().parked;
        // Pairs with the fence in `RingReader::park`: either the reader sees `head` moved,
        // or this sees it parked.
        std::sync::atomic::fence(Ordering::SeqCst);
        if parked.load(Ordering::Relaxed) != 0 && parked.swap(0, Ordering::Relaxed) != 0 {
            // Never blocks; an error (none is possible on a mapped word) only leaves the
            // reader to its timeout.
            let _ = rustix::thread::futex::wake(parked, rustix::thread::futex::Flags::empty(), 1);
        }
    }

    /// Writes one record: `frame`'s first `caplen` bytes (at most its length).
    pub fn write(&mut self, h: RecordHeader, frame: &[u8]) -> Wrote {
        if self.broken {
            return Wrote::Broken;
        }
        let caplen = (h.caplen as usize).min(frame.len());
        let need = (RECORD_HEADER + caplen).div_ceil(8) as u64 * 8;
        let tail = self.map.header().tail.load(Ordering::Acquire);
        if tail < self.tail || tail > self.head {
            self.broken = true;
            self.stop();
            return Wrote::Broken;
        }
        self.tail = tail;
        let at = self.head % self.capacity;
        // A record never wraps: the ring's end is skipped if it would.
        let skip = if at + need > self.capacity {
            self.capacity - at
        } else {
            0
        };
        if self.head + skip + need - tail > self.capacity {
            self.map.header().lost.fetch_add(1, Ordering::Relaxed);
            return Wrote::Lost;
        }
        if skip > 0 {
            self.put_header(
                at,
                RecordHeader {
                    point: Point::Skip,
                    reason: 0,
                    orig_len: 0,
                    caplen: 0,
                    ts_ns: 0,
                },
                skip as u32,
            );
            self.head += skip;
        }
        let at = self.head % self.capacity;
        self.put_header(
            at,
            RecordHeader {
                caplen: caplen as u32,
                ..h
            },
            need as u32,
        );
        // SAFETY: `at + need <= capacity`, so `RECORD_HEADER + caplen` bytes from `at` lie
        // in the data area; the reader does not read past `head`, published below.
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                self.map.data().add(at as usize + RECORD_HEADER),
                caplen,
            );
        }
        self.head += need;
        self.map.header().head.store(self.head, Ordering::Release);
        self.kept = true;
        Wrote::Kept
    }

    /// Writes a record header of `span` bytes in all at `at` (which holds `span` bytes of
    /// room; a skip's span may be as small as 8, then only its first word is written).
    fn put_header(&self, at: u64, h: RecordHeader, span: u32) {
        let mut b = [0u8; RECORD_HEADER];
        b[0..4].copy_from_slice(&span.to_le_bytes());
        b[4] = h.point as u8;
        b[6..8].copy_from_slice(&h.reason.to_le_bytes());
        b[8..12].copy_from_slice(&h.orig_len.to_le_bytes());
        b[12..16].copy_from_slice(&h.caplen.to_le_bytes());
        b[16..24].copy_from_slice(&h.ts_ns.to_le_bytes());
        let n = (span as usize).min(RECORD_HEADER);
        // SAFETY: `at + span <= capacity` (the caller's), and `n <= span`.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.map.data().add(at as usize), n) };
    }
}

/// The reader's end of a capture ring (`shmnet capture`).
pub struct RingReader {
    map: Mapped,
    capacity: u64,
    tail: u64,
}

/// What the reader found.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A frame: its header and bytes.
    Frame(RecordHeader, Vec<u8>),
    /// Nothing yet.
    Empty,
    /// The server stopped writing and everything was read.
    Stopped,
}

impl RingReader {
    /// Maps the ring the server sent.
    pub fn map(fd: OwnedFd) -> Result<Self, CaptureError> {
        let size = rustix::fs::fstat(&fd)
            .map_err(sys("sizing the capture ring"))?
            .st_size as u64;
        if size <= HEADER || size > HEADER + MAX_RING {
            return Err(CaptureError::NotARing);
        }
        let map = Mapped::map(&fd, size as usize)?;
        let h = map.header();
        let capacity = h.capacity.load(Ordering::Relaxed);
        if h.magic.load(Ordering::Acquire) != MAGIC || capacity + HEADER != size {
            return Err(CaptureError::NotARing);
        }
        Ok(Self {
            map,
            capacity,
            tail: 0,
        })
    }

    /// Frames the server could not keep so far.
    pub fn lost(&self) -> u64 {
        self.map.header().lost.load(Ordering::Relaxed)
    }

    /// Sleeps until the server keeps a frame or stops, or `timeout` passes (or a signal
    /// arrives); returns at once if there is something to read already.
    pub fn park(&self, timeout: std::time::Duration) {
        let h = self.map.header();
        h.parked.store(1, Ordering::Relaxed);
        // Pairs with the fence in `RingWriter::wake`.
        std::sync::atomic::fence(Ordering::SeqCst);
        if h.head.load(Ordering::Acquire) == self.tail && h.stopped.load(Ordering::Acquire) == 0 {
            let t = rustix::time::Timespec {
                tv_sec: timeout.as_secs() as i64,
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            // Returns on a wake, a timeout, a signal, or at once if the server cleared
            // the word first: each case is followed by a look at the ring.
            let _ = rustix::thread::futex::wait(
                &h.parked,
                rustix::thread::futex::Flags::empty(),
                1,
                Some(&t),
            );
        }
        h.parked.store(0, Ordering::Relaxed);
    }

    /// The next record.
    pub fn read(&mut self) -> Next {
        let h = self.map.header();
        let stopped = h.stopped.load(Ordering::Acquire) != 0;
        loop {
            let head = h.head.load(Ordering::Acquire);
            if head <= self.tail || head - self.tail > self.capacity {
                return if stopped { Next::Stopped } else { Next::Empty };
            }
            let at = (self.tail % self.capacity) as usize;
            let mut b = [0u8; RECORD_HEADER];
            let room = (self.capacity as usize - at).min(RECORD_HEADER);
            // SAFETY: `at + room <= capacity`, inside the data area; written before `head`.
            unsafe { std::ptr::copy_nonoverlapping(self.map.data().add(at), b.as_mut_ptr(), room) };
            let span = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")) as u64;
            if span < 8 || span > self.capacity - at as u64 {
                // Not a record the server writes: stop reading rather than guess.
                return Next::Stopped;
            }
            let point = Point::of(b[4]);
            self.tail += span;
            if point == Some(Point::Skip) {
                h.tail.store(self.tail, Ordering::Release);
                continue;
            }
            let Some(point) = point else {
                return Next::Stopped;
            };
            let rec = RecordHeader {
                point,
                reason: u16::from_le_bytes([b[6], b[7]]),
                orig_len: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
                caplen: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
                ts_ns: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
            };
            let caplen = (rec.caplen as usize).min(span as usize - RECORD_HEADER);
            let mut data = vec![0u8; caplen];
            // SAFETY: `at + RECORD_HEADER + caplen <= at + span <= capacity`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.map.data().add(at + RECORD_HEADER),
                    data.as_mut_ptr(),
                    caplen,
                )
            };
            h.tail.store(self.tail, Ordering::Release);
            return Next::Frame(rec, data);
        }
    }
}

/// How a reader waits when its ring is empty. While frames come it naps [`Naps::BUSY`]
/// (a timed sleep the server knows nothing of: it never makes a system call for a reader
/// that is keeping up). Once the ring has been empty for [`Naps::PARK_AFTER`] naps it
/// parks ([`RingReader::park`]) for up to [`Naps::PARKED`]: the server wakes it at the end
/// of the first batch that keeps a frame. An idle capture, or one whose filter matches
/// nothing, then wakes 10 times a second (to see whether it should stop), and the server
/// makes at most one wake-up call per park.
#[derive(Debug, Default)]
pub struct Naps {
    empty: u32,
}

impl Naps {
    /// The nap while frames come.
    pub const BUSY: std::time::Duration = std::time::Duration::from_millis(1);
    /// Empty naps before the reader parks.
    pub const PARK_AFTER: u32 = 50;
    /// The longest park.
    pub const PARKED: std::time::Duration = std::time::Duration::from_millis(100);

    /// A frame was read.
    pub fn frame(&mut self) {
        self.empty = 0;
    }

    /// The ring was empty: waits (naps or parks) before the next look.
    pub fn wait(&mut self, ring: &RingReader) {
        self.empty = self.empty.saturating_add(1);
        if self.empty > Self::PARK_AFTER {
            ring.park(Self::PARKED);
        } else {
            std::thread::sleep(Self::BUSY);
        }
    }
}

/// Why a capture could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The control socket failed.
    #[error("{0}")]
    Control(#[from] crate::control::ControlError),
    /// The server said no, and why.
    #[error("the server refused the capture: {0}")]
    Refused(String),
    /// The ring it sent could not be mapped.
    #[error("{0}")]
    Ring(#[from] CaptureError),
    /// The answer came without its ring.
    #[error("the server's answer came without its capture ring")]
    NoRing,
}

/// A running capture, as its reader holds it: the ring, the names of the drop reasons,
/// and the control connection whose closing ends it.
pub struct Session {
    ctl: OwnedFd,
    /// The ring.
    pub ring: RingReader,
    /// The drop reasons a record's `reason` indexes (0: none).
    pub reasons: Vec<String>,
}

impl Session {
    /// Starts a capture on the server at `socket`.
    pub fn start(socket: &std::path::Path, spec: &CaptureSpec) -> Result<Session, StartError> {
        use crate::control::{self, Request, Response};
        let ctl = control::connect(socket)?;
        control::send(&ctl, &Request::Capture(spec.clone()))?;
        let mut buf = vec![0u8; control::MAX_MSG];
        let (n, fd) = loop {
            let mut fds = [rustix::event::PollFd::new(
                &ctl,
                rustix::event::PollFlags::IN,
            )];
            let _ = rustix::event::poll(&mut fds, None);
            if let Some((n, fd, _)) = control::recv_raw_with_fd(&ctl, &mut buf)? {
                break (n, fd);
            }
        };
        if n == 0 {
            return Err(control::ControlError::HungUp.into());
        }
        let resp: Response = serde_json::from_slice(&buf[..n.min(buf.len())])
            .map_err(|e| control::ControlError::Malformed(e.to_string()))?;
        match (resp, fd) {
            (Response::Capture { reasons }, Some(fd)) => Ok(Session {
                ring: RingReader::map(fd)?,
                ctl,
                reasons,
            }),
            (Response::Capture { .. }, None) => Err(StartError::NoRing),
            (Response::Error(e), _) => Err(StartError::Refused(e)),
            (other, _) => Err(StartError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// Whether the server has gone (its end of the control connection closed).
    pub fn server_gone(&self) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            &self.ctl,
            rustix::event::PollFlags::IN,
        )];
        matches!(rustix::event::poll(&mut fds, Some(&rustix::time::Timespec::default())), Ok(n) if n > 0)
            && fds[0].revents().intersects(
                rustix::event::PollFlags::HUP
                    | rustix::event::PollFlags::IN
                    | rustix::event::PollFlags::ERR,
            )
    }

    /// The reason a drop record names.
    pub fn reason(&self, code: u16) -> &str {
        self.reasons
            .get(usize::from(code))
            .map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(point: Point, len: u32, ts: u64) -> RecordHeader {
        RecordHeader {
            point,
            reason: 0,
            orig_len: len,
            caplen: len,
            ts_ns: ts,
        }
    }

    fn reader_of(w: &RingWriter) -> RingReader {
        let fd = rustix::io::fcntl_dupfd_cloexec(w.fd(), 0).unwrap();
        RingReader::map(fd).unwrap()
    }

    #[test]
    fn records_come_back_in_order_across_the_wrap_and_a_full_ring_counts_its_losses() {
        let mut w = RingWriter::create(MIN_RING).unwrap();
        let mut r = reader_of(&w);
        let mut sent = 0u64;
        let mut got = 0u64;
        // 1,000-byte frames through a 64 KiB ring, read every few: it wraps many times.
        for i in 0..2_000u64 {
            let frame = vec![(i % 251) as u8; 1_000];
            assert_eq!(w.write(rec(Point::Rx, 1_000, i), &frame), Wrote::Kept);
            sent += 1;
            if i % 7 == 6 {
                while let Next::Frame(h, data) = r.read() {
                    assert_eq!(h.ts_ns, got);
                    assert_eq!(data, vec![(got % 251) as u8; 1_000]);
                    got += 1;
                }
            }
        }
        while let Next::Frame(..) = r.read() {
            got += 1;
        }
        assert_eq!(got, sent);
        // Nobody reads: the ring fills, and the rest is counted, never waited for.
        let mut lost = 0;
        for i in 0..200 {
            if w.write(rec(Point::Tx, 1_000, i), &[0u8; 1_000]) == Wrote::Lost {
                lost += 1;
            }
        }
        assert!(lost > 100, "{lost}");
        assert_eq!(w.lost(), lost);
        assert_eq!(r.lost(), lost);
        w.stop();
        let mut left = 0;
        loop {
            match r.read() {
                Next::Frame(..) => left += 1,
                Next::Stopped => break,
                Next::Empty => panic!("stopped, and still empty"),
            }
        }
        assert_eq!(left, 200 - lost);
    }

    #[test]
    fn a_reader_that_writes_an_impossible_tail_ends_its_capture() {
        let mut w = RingWriter::create(MIN_RING).unwrap();
        assert_eq!(w.write(rec(Point::Rx, 10, 0), &[1; 10]), Wrote::Kept);
        w.map.header().tail.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(w.write(rec(Point::Rx, 10, 0), &[1; 10]), Wrote::Broken);
        assert_eq!(w.write(rec(Point::Rx, 10, 0), &[1; 10]), Wrote::Broken);
    }

    /// A parked reader is woken by the end of a batch that kept a frame, well before its
    /// timeout; a batch that kept nothing leaves it parked for the whole timeout.
    #[test]
    fn a_parked_reader_wakes_only_for_a_kept_frame() {
        let mut w = RingWriter::create(MIN_RING).unwrap();
        let mut r = reader_of(&w);
        // `park` on a thread of its own, the writer's side here; the reader comes back.
        let parked = |r: RingReader, w: &mut RingWriter, timeout, keep: bool| {
            let t0 = std::time::Instant::now();
            let t = std::thread::spawn(move || {
                r.park(timeout);
                r
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            if keep {
                assert_eq!(w.write(rec(Point::Rx, 60, 1), &[7u8; 60]), Wrote::Kept);
            }
            w.wake_if_parked();
            let r = t.join().unwrap();
            (r, t0.elapsed())
        };
        // Nothing kept: the end of a batch makes no wake-up, the park lasts its timeout.
        let short = std::time::Duration::from_millis(200);
        let (back, took) = parked(r, &mut w, short, false);
        assert!(took >= short, "woken with nothing kept");
        // A frame kept: woken long before a timeout no test would wait out.
        let long = std::time::Duration::from_secs(60);
        let (back, took) = parked(back, &mut w, long, true);
        assert!(took < long / 2, "a kept frame did not wake the reader");
        r = back;
        // Something to read already: no park at all.
        let t0 = std::time::Instant::now();
        r.park(long);
        assert!(t0.elapsed() < long / 2);
        assert!(matches!(r.read(), Next::Frame(..)));
    }

    #[test]
    fn caplen_cuts_the_frame() {
        let mut w = RingWriter::create(MIN_RING).unwrap();
        let mut r = reader_of(&w);
        let mut h = rec(Point::Drop, 1_500, 9);
        h.caplen = 64;
        h.reason = 3;
        w.write(h, &[7u8; 1_500]);
        match r.read() {
            Next::Frame(got, data) => {
                assert_eq!(got.caplen, 64);
                assert_eq!(got.orig_len, 1_500);
                assert_eq!(got.reason, 3);
                assert_eq!(data.len(), 64);
            }
            other => panic!("{other:?}"),
        }
    }
}
