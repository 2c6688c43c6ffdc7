//! Seed 001's eight latency rows as workloads: TCP and UDP, send and receive, checksum off
//! and on, each one message's path through this stack, so that the same path can be timed
//! natively and traced (valgrind lackey) for the simulator (`shmnet sim validate`).
//!
//! A [`Row`] is driven in three steps per message, and only the middle one is the row:
//!
//! * [`Row::prepare`] (not the row): what a real system did before the path began — for a
//!   receive, the peer sends the message and the driver copies its frame into a pool buffer
//!   (seed 001's "latency through the stack" starts when the packet is in memory);
//! * [`Row::step`] (the row): send — the application's call ([`Interface::udp_send_to`] or
//!   [`Interface::tcp_send`]) until the frame is handed to the driver; receive —
//!   [`Interface::receive`] of the frame (checks, the checksum when on, demultiplexing,
//!   TCP's sequence processing and any ACK it sends at once) and the application's read
//!   ([`Interface::udp_recv`] or [`Interface::tcp_recv`], the copy-out);
//! * [`Row::finish`] (not the row): the driver frees what was sent; for TCP the peer reads
//!   and acknowledges, so the window stays open and the next message takes the same path.
//!
//! Invariant: in the steady state every step does the same work — one message of
//! [`Row::size`] bytes in one frame — and says whether it completed; a step that did not
//! (a refused send, a message not delivered whole) makes the caller's figure void.
//!
//! The message is [`MESSAGE_BYTES`] long by default: one frame, large enough that the
//! checksum's share shows (the seed's rows differ by a factor of 2–5 with it on), small
//! enough that no row fragments or segments.

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::bench::{RX_HEADROOM, load};
use crate::buf::{BufIdx, BufferPool, HeapPool, valid};
use crate::iface::{Config, Interface};
use crate::socket::{NoHook, SocketHandle};
use crate::tcp::TcpHandle;
use crate::{EthernetAddress, Instant};

/// The default message size: one 1,024-byte payload, one frame.
pub const MESSAGE_BYTES: usize = 1024;

/// The largest message a row takes: one frame's payload at an Ethernet MTU (TCP's MSS).
pub const MAX_MESSAGE_BYTES: usize = 1460;

/// TCP or UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP on an established connection (no delay, so each message is one segment).
    Tcp,
    /// UDP.
    Udp,
}

/// Send or receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From the application's call to the frame handed to the driver.
    Send,
    /// From the frame in a pool buffer to the bytes in the application's buffer.
    Recv,
}

/// One of the eight rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RowSpec {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// Send or receive.
    pub direction: Direction,
    /// Checksums computed (send) or verified (receive).
    pub checksum: bool,
}

impl RowSpec {
    /// A short name: `tcp-send-cksum-off`, …
    pub fn name(&self) -> String {
        format!(
            "{}-{}-cksum-{}",
            match self.protocol {
                Protocol::Tcp => "tcp",
                Protocol::Udp => "udp",
            },
            match self.direction {
                Direction::Send => "send",
                Direction::Recv => "recv",
            },
            if self.checksum { "on" } else { "off" }
        )
    }

    /// The row named `name` (as [`RowSpec::name`] prints it).
    pub fn parse(name: &str) -> Option<RowSpec> {
        ROWS.into_iter().find(|r| r.name() == name)
    }
}

/// The eight rows in the seed's table order: TCP send, UDP send, TCP receive, UDP receive,
/// each checksum off then on.
pub const ROWS: [RowSpec; 8] = {
    const fn r(protocol: Protocol, direction: Direction, checksum: bool) -> RowSpec {
        RowSpec {
            protocol,
            direction,
            checksum,
        }
    }
    use Direction::{Recv, Send};
    use Protocol::{Tcp, Udp};
    [
        r(Tcp, Send, false),
        r(Tcp, Send, true),
        r(Udp, Send, false),
        r(Udp, Send, true),
        r(Tcp, Recv, false),
        r(Tcp, Recv, true),
        r(Udp, Recv, false),
        r(Udp, Recv, true),
    ]
};

/// Why a row could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    /// The message does not fit one frame.
    #[error("a row's message is 1 to {MAX_MESSAGE_BYTES} bytes (one frame); {0} was asked for")]
    Size(usize),
    /// The TCP connection between the two interfaces did not open.
    #[error("the row's TCP connection did not open")]
    Connect,
    /// A socket could not be bound.
    #[error("the row's socket could not be bound")]
    Bind,
}

const A_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const B_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 5001;

/// How far the clock moves in [`Row::finish`]: past the receiver's delayed-ACK timer, so
/// each message is acknowledged before the next.
const FINISH_ADVANCE_NS: u64 = 50_000_000;

/// One side: its interface and pool.
struct Side {
    ifc: Interface,
    pool: HeapPool,
}

fn side(
    mac: EthernetAddress,
    ip: Ipv4Addr,
    peer_mac: EthernetAddress,
    peer_ip: Ipv4Addr,
    checksum: bool,
) -> Side {
    let mut c = Config::new(mac, ip, 24);
    c.udp_rx_checksum = checksum;
    c.udp_tx_checksum = checksum;
    c.tcp.rx_checksum = checksum;
    c.tcp.tx_checksum = checksum;
    c.tcp.nodelay = true;
    let mut ifc = Interface::new(c);
    ifc.add_neighbor(peer_ip, peer_mac, Instant::ZERO);
    Side {
        ifc,
        pool: HeapPool::with_count(256),
    }
}

/// Copies frames from one side's pool into fresh buffers of the other's (the wire and the
/// receiving driver), freeing the originals.
fn carry(from: &mut HeapPool, frames: &mut Vec<BufIdx>, to: &mut HeapPool) -> Vec<BufIdx> {
    let mut out = Vec::with_capacity(frames.len());
    for f in frames.drain(..) {
        let bytes = valid(from, f);
        if let Some(b) = to.alloc_with(RX_HEADROOM, bytes) {
            out.push(b);
        }
        from.free_chain(f);
    }
    out
}

/// The sockets a row uses.
enum Sockets {
    Udp {
        /// The sender's socket (on `a`).
        tx: SocketHandle,
        /// The receiver's socket (on `b`).
        rx: SocketHandle,
    },
    Tcp {
        /// The connection's end on `a` (the sender).
        tx: TcpHandle,
        /// Its end on `b` (the receiver).
        rx: TcpHandle,
    },
}

/// A row's workload: two interfaces, `a` sending to `b`, and the state between steps.
pub struct Row {
    spec: RowSpec,
    a: Side,
    b: Side,
    sockets: Sockets,
    now: Instant,
    data: Vec<u8>,
    user: Vec<u8>,
    /// Frames waiting for the next step (a receive row's loaded frame) or for `finish`.
    pending: Vec<BufIdx>,
    /// Frames a step handed to the driver.
    out: Vec<BufIdx>,
    /// Steps that completed / were taken.
    completed: u64,
    steps: u64,
}

impl Row {
    /// Sets up `spec` for messages of `size` bytes: both interfaces, the sockets, and for TCP
    /// an established connection.
    pub fn new(spec: RowSpec, size: usize) -> Result<Row, RowError> {
        if size == 0 || size > MAX_MESSAGE_BYTES {
            return Err(RowError::Size(size));
        }
        let mut a = side(A_MAC, A_IP, B_MAC, B_IP, spec.checksum);
        let mut b = side(B_MAC, B_IP, A_MAC, A_IP, spec.checksum);
        let mut now = Instant::from_secs(1);
        let sockets = match spec.protocol {
            Protocol::Udp => Sockets::Udp {
                tx: a.ifc.udp_bind_port(5000).map_err(|_| RowError::Bind)?,
                rx: b.ifc.udp_bind_port(PORT).map_err(|_| RowError::Bind)?,
            },
            Protocol::Tcp => {
                let l = b.ifc.tcp_listen(PORT, 4).map_err(|_| RowError::Bind)?;
                let mut out = Vec::new();
                let tx = a
                    .ifc
                    .tcp_connect(&mut a.pool, SocketAddrV4::new(B_IP, PORT), now, &mut out)
                    .map_err(|_| RowError::Connect)?;
                for _ in 0..4 {
                    exchange(&mut a, &mut b, &mut out, now);
                    now = Instant::from_nanos(now.nanos() + 1_000);
                }
                let rx = b
                    .ifc
                    .tcp_accept(l)
                    .ok()
                    .flatten()
                    .ok_or(RowError::Connect)?;
                Sockets::Tcp { tx, rx }
            }
        };
        Ok(Row {
            spec,
            a,
            b,
            sockets,
            now,
            data: (0..size).map(|i| (i * 7) as u8).collect(),
            user: vec![0; MAX_MESSAGE_BYTES],
            pending: Vec::new(),
            out: Vec::new(),
            completed: 0,
            steps: 0,
        })
    }

    /// The row.
    pub fn spec(&self) -> RowSpec {
        self.spec
    }

    /// The message size.
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// Steps taken and steps that completed.
    pub fn counts(&self) -> (u64, u64) {
        (self.steps, self.completed)
    }

    /// Before a step (not part of the row): a receive row's message is sent by the peer and
    /// its frame copied into a pool buffer of the receiver.
    pub fn prepare(&mut self) {
        if self.spec.direction == Direction::Send {
            return;
        }
        let mut frames = Vec::new();
        match self.sockets {
            Sockets::Udp { tx, .. } => {
                let _ = self.a.ifc.udp_send_to(
                    &mut self.a.pool,
                    tx,
                    &self.data,
                    SocketAddrV4::new(B_IP, PORT),
                    self.now,
                    &mut frames,
                );
            }
            Sockets::Tcp { tx, .. } => {
                let _ =
                    self.a
                        .ifc
                        .tcp_send(&mut self.a.pool, tx, &self.data, self.now, &mut frames);
            }
        }
        for f in frames.drain(..) {
            let bytes = valid(&self.a.pool, f).to_vec();
            self.a.pool.free_chain(f);
            if let Some(b) = load(&mut self.b.pool, &bytes) {
                self.pending.push(b);
            }
        }
    }

    /// The row's path for one message; true when it completed (the message sent as one
    /// frame, or received whole).
    #[inline(never)]
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        let ok = match (self.spec.direction, &self.sockets) {
            (Direction::Send, Sockets::Udp { tx, .. }) => {
                let r = self.a.ifc.udp_send_to(
                    &mut self.a.pool,
                    *tx,
                    &self.data,
                    SocketAddrV4::new(B_IP, PORT),
                    self.now,
                    &mut self.out,
                );
                r.is_ok() && self.out.len() == 1
            }
            (Direction::Send, Sockets::Tcp { tx, .. }) => {
                let r =
                    self.a
                        .ifc
                        .tcp_send(&mut self.a.pool, *tx, &self.data, self.now, &mut self.out);
                r == Ok(self.data.len()) && self.out.len() == 1
            }
            (Direction::Recv, Sockets::Udp { rx, .. }) => {
                for f in self.pending.drain(..) {
                    self.b
                        .ifc
                        .receive(&mut self.b.pool, f, self.now, &mut self.out);
                }
                matches!(
                    self.b.ifc.udp_recv(&mut self.b.pool, *rx, &mut self.user, &mut NoHook),
                    Ok(Some(info)) if info.len == self.data.len()
                )
            }
            (Direction::Recv, Sockets::Tcp { rx, .. }) => {
                for f in self.pending.drain(..) {
                    self.b
                        .ifc
                        .receive(&mut self.b.pool, f, self.now, &mut self.out);
                }
                let n = self.b.ifc.tcp_recv(
                    &mut self.b.pool,
                    *rx,
                    &mut self.user,
                    self.now,
                    &mut self.out,
                );
                n == Ok(self.data.len())
            }
        };
        self.completed += u64::from(ok);
        ok
    }

    /// After a step (not part of the row): what was sent is freed or carried to the peer,
    /// and for TCP the receiver reads and acknowledges it; the clock moves on.
    pub fn finish(&mut self) {
        let mut back = Vec::new();
        match (self.spec.direction, &self.sockets) {
            (Direction::Send, Sockets::Udp { .. }) => {
                for f in self.out.drain(..) {
                    self.a.pool.free_chain(f);
                }
            }
            (Direction::Send, Sockets::Tcp { rx, .. }) => {
                let frames = carry(&mut self.a.pool, &mut self.out, &mut self.b.pool);
                for f in frames {
                    self.b.ifc.receive(&mut self.b.pool, f, self.now, &mut back);
                }
                while let Ok(n) =
                    self.b
                        .ifc
                        .tcp_recv(&mut self.b.pool, *rx, &mut self.user, self.now, &mut back)
                {
                    if n == 0 {
                        break;
                    }
                }
            }
            (Direction::Recv, _) => {
                // What the receiver sent during the step (TCP's ACKs) goes back to `a`.
                back.append(&mut self.out);
            }
        }
        self.now = Instant::from_nanos(self.now.nanos() + FINISH_ADVANCE_NS);
        // The neighbours stay fresh (as the peer's traffic keeps them on a real link), so
        // no step ever waits for ARP.
        self.a.ifc.add_neighbor(B_IP, B_MAC, self.now);
        self.b.ifc.add_neighbor(A_IP, A_MAC, self.now);
        self.b.ifc.poll(&mut self.b.pool, self.now, &mut back);
        let mut more = Vec::new();
        for f in carry(&mut self.b.pool, &mut back, &mut self.a.pool) {
            self.a.ifc.receive(&mut self.a.pool, f, self.now, &mut more);
        }
        self.a.ifc.poll(&mut self.a.pool, self.now, &mut more);
        for f in more.drain(..) {
            self.a.pool.free_chain(f);
        }
    }

    /// Buffers in use in both pools (constant in the steady state: nothing leaks).
    pub fn buffers_in_use(&self) -> usize {
        self.a.pool.in_use() + self.b.pool.in_use()
    }
}

/// Carries `out` (a's frames) to b and b's answers back, once (the handshake).
fn exchange(a: &mut Side, b: &mut Side, out: &mut Vec<BufIdx>, now: Instant) {
    let frames = carry(&mut a.pool, out, &mut b.pool);
    let mut back = Vec::new();
    for f in frames {
        b.ifc.receive(&mut b.pool, f, now, &mut back);
    }
    b.ifc.flush(&mut b.pool, now, &mut back);
    for f in carry(&mut b.pool, &mut back, &mut a.pool) {
        a.ifc.receive(&mut a.pool, f, now, out);
    }
    a.ifc.flush(&mut a.pool, now, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_completes_every_step_and_leaks_nothing() {
        for spec in ROWS {
            let mut row = Row::new(spec, MESSAGE_BYTES).unwrap();
            let mut in_use = None;
            // Past a minute of the rows' clock (the ARP cache's lifetime), as a long
            // measurement goes.
            for i in 0..3000 {
                row.prepare();
                assert!(row.step(), "{} step {i}", spec.name());
                row.finish();
                if i == 20 {
                    in_use = Some(row.buffers_in_use());
                }
            }
            assert_eq!(Some(row.buffers_in_use()), in_use, "{}", spec.name());
            assert_eq!(row.counts(), (3000, 3000));
        }
    }

    #[test]
    fn receive_rows_deliver_the_bytes_sent() {
        for spec in ROWS.into_iter().filter(|r| r.direction == Direction::Recv) {
            let mut row = Row::new(spec, 700).unwrap();
            row.prepare();
            assert!(row.step());
            assert_eq!(row.user[..700], row.data[..], "{}", spec.name());
        }
    }

    #[test]
    fn names_round_trip_and_sizes_are_checked() {
        for spec in ROWS {
            assert_eq!(RowSpec::parse(&spec.name()), Some(spec));
        }
        assert_eq!(ROWS.iter().filter(|r| r.checksum).count(), 4);
        assert!(matches!(Row::new(ROWS[0], 0), Err(RowError::Size(0))));
        assert!(matches!(
            Row::new(ROWS[0], MAX_MESSAGE_BYTES + 1),
            Err(RowError::Size(_))
        ));
    }
}
