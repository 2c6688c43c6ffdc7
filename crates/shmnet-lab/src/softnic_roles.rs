//! softnic's parts in a benchmark run (`shmnet ttcp`, `shmnet rr`), played against the run's
//! [`Scoreboard`].
//!
//! softnic itself knows nothing of boards: it exposes a [`Pacer`] (may traffic start, may
//! the next message start, a message left, a datagram was sunk), and the roles here are one
//! pacer, [`BoardPacer`], that answers those hooks from the board:
//!
//! - [`BenchRole::Send`], the streaming sender (ttcp receive): sends once the board says go,
//!   keeps to its window, stops at its limit or stop, publishes `sent` after every message
//!   and its final count with `sender_finished`;
//! - [`BenchRole::Sink`], the receiving peer (ttcp transmit): sends nothing, and publishes the
//!   UDP datagrams transmitted to it since go as `received`;
//! - [`BenchRole::Loopback`], the wire of a request–response run (rr): softnic's own loopback
//!   mode ([`SoftnicConfig::loopback`]), which counts nothing on the board.
//!
//! In a run the board decides when sending ends, so a role's softnic ignores `count`.

use crate::scoreboard::{Scoreboard, ScoreboardError};
use shmnet_io::driver::softnic::{Pacer, Permit, Softnic, SoftnicConfig, SoftnicError};
use shmnet_io::spec::{BenchPart, BenchRole};
use std::sync::Arc;
use std::time::Duration;

/// How soon a sender held back by the window looks at the board again: the receiver's
/// progress comes with no file descriptor to wait on.
pub const SENDER_RECHECK: Duration = Duration::from_micros(5);

/// A softnic playing its part in a run (see [`bench_softnic`]).
pub type BenchSoftnic = Softnic<BoardPacer>;

/// Why a softnic could not take its part in a run.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// The run's scoreboard could not be opened.
    #[error("opening the benchmark scoreboard: {0}")]
    Board(#[from] ScoreboardError),
    /// softnic refused its configuration.
    #[error("configuring softnic: {0}")]
    Softnic(#[from] SoftnicError),
}

/// softnic's hooks answered from a run's board, as its `role` says.
pub struct BoardPacer {
    board: Arc<Scoreboard>,
    role: BenchRole,
    /// Send: the receiver's count as last read (see [`Scoreboard::permit`]).
    seen_received: u64,
    /// Sink: UDP datagrams sunk so far (the device's total).
    sunk: u64,
    /// Sink: `sunk` when the run started (what came before is not the run's).
    sink_base: Option<u64>,
}

impl BoardPacer {
    /// `role` played against `board`.
    pub fn new(board: Arc<Scoreboard>, role: BenchRole) -> Self {
        Self {
            board,
            role,
            seen_received: 0,
            sunk: 0,
            sink_base: None,
        }
    }

    /// The run's board.
    pub fn board(&self) -> &Arc<Scoreboard> {
        &self.board
    }

    /// The part it plays.
    pub fn role(&self) -> BenchRole {
        self.role
    }
}

impl Pacer for BoardPacer {
    #[inline]
    fn sends(&self) -> bool {
        self.role == BenchRole::Send
    }

    #[inline]
    fn ready(&mut self) -> bool {
        if !self.board.go() {
            return false;
        }
        self.sink_base.get_or_insert(self.sunk);
        true
    }

    #[inline]
    fn permit(&mut self, sent: u64) -> Permit {
        match self.role {
            BenchRole::Send => self.board.permit(sent, &mut self.seen_received),
            BenchRole::Sink | BenchRole::Loopback => Permit::Done,
        }
    }

    #[inline]
    fn sent(&mut self, sent: u64) {
        if self.role == BenchRole::Send {
            self.board.set_sent(sent);
        }
    }

    #[inline]
    fn finished(&mut self, sent: u64) {
        if self.role == BenchRole::Send {
            self.board.set_sent(sent);
            self.board.set_sender_finished();
        }
    }

    #[inline]
    fn sunk(&mut self, total: u64) {
        self.sunk = total;
        if let (BenchRole::Sink, Some(base)) = (self.role, self.sink_base) {
            self.board.set_received(total - base);
        }
    }

    #[inline]
    fn recheck(&self) -> Option<Duration> {
        (self.role == BenchRole::Send).then_some(SENDER_RECHECK)
    }
}

/// softnic configured as `cfg` says, playing `role` against `board`: paced by the board
/// (its `count` ignored), and a loopback if the role is one.
pub fn bench_softnic(
    cfg: SoftnicConfig,
    board: Arc<Scoreboard>,
    role: BenchRole,
) -> Result<BenchSoftnic, SoftnicError> {
    Softnic::with_pacer(for_role(cfg, role), BoardPacer::new(board, role))
}

/// `cfg` for a softnic playing `role`: the board ends the run, and a loopback is one.
fn for_role(cfg: SoftnicConfig, role: BenchRole) -> SoftnicConfig {
    SoftnicConfig {
        count: None,
        loopback: role == BenchRole::Loopback,
        ..cfg
    }
}

/// softnic as a runner opens it: configured as `cfg` says and, if `bench` is set, playing
/// its part in that run (the board opened here). Without a part it is unpaced (`None`).
pub fn open_softnic(
    cfg: SoftnicConfig,
    bench: Option<&BenchPart>,
) -> Result<Softnic<Option<BoardPacer>>, RoleError> {
    let Some(part) = bench else {
        return Ok(Softnic::with_pacer(cfg, None)?);
    };
    let board = Arc::new(Scoreboard::open(&part.board)?);
    Ok(Softnic::with_pacer(
        for_role(cfg, part.role),
        Some(BoardPacer::new(board, part.role)),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmnet_chan::heap::heap_pools;
    use shmnet_chan::{AllocPolicy, DriverPools, PoolGeometry};
    use shmnet_io::driver::Driver;

    fn pools() -> (shmnet_chan::ServerPools, DriverPools) {
        heap_pools(
            PoolGeometry {
                pools: 2,
                per_pool: 64,
                data_size: 2048,
                free_cap: 64,
                policy: AllocPolicy::Lifo,
            },
            None,
        )
    }

    fn board(window: u64, limit: u64) -> (Arc<Scoreboard>, std::path::PathBuf) {
        let path = crate::scoreboard::temp_path("softnic-role-test");
        let b = Scoreboard::create(&path, window, limit, 64).unwrap();
        (Arc::new(b), path)
    }

    /// A UDP frame (IPv4 header, 8 bytes of UDP, 4 of payload) in a fresh buffer.
    fn udp_frame(drv: &mut DriverPools) -> u32 {
        let mut f = vec![0u8; 14 + 20 + 8 + 4];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[14 + 9] = 17;
        let b = drv.alloc().unwrap();
        drv.buffers().write(b, 0, &f).unwrap();
        drv.buffers().set_off_len(b, 0, f.len() as u16).unwrap();
        b
    }

    #[test]
    fn as_a_sender_it_waits_for_go_keeps_to_the_window_and_stops_at_the_limit() {
        let (b, path) = board(3, 5);
        let cfg = SoftnicConfig {
            size: 10,
            count: Some(1),
            ..SoftnicConfig::default()
        };
        let mut nic = bench_softnic(cfg, b.clone(), BenchRole::Send).unwrap();
        let (_server, mut drv) = pools();
        let mut out = Vec::new();
        assert_eq!(
            nic.rx_burst(&mut drv, &mut out, 32).unwrap(),
            0,
            "before go"
        );
        b.set_go();
        assert_eq!(
            nic.rx_burst(&mut drv, &mut out, 32).unwrap(),
            3,
            "the window (the count is the board's, not the config's)"
        );
        assert_eq!(b.sent(), 3);
        assert!(!b.sender_finished());
        assert_eq!(nic.idle_hint(), Some(SENDER_RECHECK), "look again soon");
        b.set_received(3);
        assert_eq!(
            nic.rx_burst(&mut drv, &mut out, 32).unwrap(),
            2,
            "the limit"
        );
        assert!(nic.done());
        assert!(b.sender_finished(), "it says so, its count final");
        assert_eq!(b.sent(), 5);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn as_a_sink_it_counts_from_go() {
        let (_server, mut drv) = pools();
        let (b, path) = board(0, 0);
        let mut sink = bench_softnic(SoftnicConfig::default(), b.clone(), BenchRole::Sink).unwrap();
        assert!(sink.done(), "a sink sends nothing");
        let send_one = |sink: &mut BenchSoftnic, drv: &mut DriverPools| {
            let f = udp_frame(drv);
            sink.tx_burst(drv, &[f]).unwrap();
        };
        let mut out = Vec::new();
        send_one(&mut sink, &mut drv); // before the run: not counted
        b.set_go();
        sink.rx_burst(&mut drv, &mut out, 32).unwrap();
        send_one(&mut sink, &mut drv);
        send_one(&mut sink, &mut drv);
        assert_eq!(b.received(), 2);
        assert_eq!(sink.idle_hint(), None, "a sink is never in a hurry");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn as_a_loopback_it_hands_frames_back_and_counts_nothing_on_the_board() {
        let (_server, mut drv) = pools();
        let (b, path) = board(0, 0);
        let part = BenchPart {
            board: path.clone(),
            role: BenchRole::Loopback,
        };
        let mut nic = open_softnic(SoftnicConfig::default(), Some(&part)).unwrap();
        assert!(nic.done(), "a loopback sends nothing of its own");
        let f = udp_frame(&mut drv);
        nic.tx_burst(&mut drv, &[f]).unwrap();
        let mut out = Vec::new();
        assert_eq!(nic.rx_burst(&mut drv, &mut out, 32).unwrap(), 1);
        assert_eq!(out[0].buf, f, "the same buffer, back");
        assert_eq!((b.sent(), b.received()), (0, 0));
        drv.release(f);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn without_a_part_it_is_unpaced() {
        let cfg = SoftnicConfig {
            size: 10,
            count: Some(2),
            ..SoftnicConfig::default()
        };
        let mut nic = open_softnic(cfg, None).unwrap();
        let (_server, mut drv) = pools();
        let mut out = Vec::new();
        assert_eq!(nic.rx_burst(&mut drv, &mut out, 32).unwrap(), 2);
        assert!(nic.done());
    }

    #[test]
    fn a_missing_board_is_a_clear_error() {
        let part = BenchPart {
            board: "/nonexistent/shmnet.board".into(),
            role: BenchRole::Send,
        };
        let err = open_softnic(SoftnicConfig::default(), Some(&part))
            .err()
            .expect("no board there");
        assert!(matches!(err, RoleError::Board(_)), "{err}");
    }
}
