//! TCP (RFC 9293): connections, listeners and their timers, sans-I/O like the rest of the
//! stack.
//!
//! [`Tcp`] is the table the [`crate::Interface`] keeps: connections in a slab addressed by
//! generation-checked [`TcpHandle`]s, a demultiplexing map from the 4-tuple, listeners with
//! their accept queues, and one timer queue for every connection's deadlines. [`conn::Conn`]
//! is one connection's control block and event processing; [`queue`] keeps its byte streams
//! in pool buffers; [`rtt`] and [`cc`] are the retransmission timer and NewReno.
//!
//! # Why our own engine
//!
//! smoltcp's TCP socket keeps its data in contiguous ring buffers it owns and copies every
//! payload into them. shmnet's point is that data stays in the buffers the driver filled —
//! in memory shared with other processes — so the receive queue is a chain of those buffers
//! and the send queue a chain of buffers the application wrote; the engine that manages
//! them has to be ours. Headers are still parsed and emitted with smoltcp's `wire` module.
//!
//! # What is built, and what is not yet
//!
//! Built: the state machine with simultaneous open, half-close and TIME-WAIT; RFC 6298's
//! timer with Karn's rule; NewReno (RFC 5681, 6582) and CUBIC (RFC 9438, the default) with
//! the initial window of RFC 6928; SACK with RFC 6675 recovery, DSACK and undo; loss found
//! by time (RACK's rule on sequence ranges) and tail-loss probes; window scaling,
//! timestamps and PAWS (RFC 7323); MSS and path-MTU discovery (RFC 1191, checked as RFC
//! 5927 says); delayed ACKs; Nagle with a no-delay switch; zero-window probes; keepalive;
//! RFC 5961's challenge ACKs; RFC 6528 initial sequence numbers; SYN cookies (RFC 4987); a
//! bounded out-of-order queue; send and receive buffer autotuning ([`autotune`]); a
//! departed application's bytes kept in [`spill`]s. docs/tcp.md lists what is not built yet
//! (zero-copy send, RACK's per-segment send times, a path MTU shared per destination).

pub mod autotune;
pub mod cc;
pub mod conn;
pub mod memory;
pub mod paths;
pub mod queue;
pub mod rtt;
pub mod sack;
pub mod seq;
pub mod spill;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::Instant;
use crate::buf::BufferPool;
use crate::socket::DemuxHasher;
pub use conn::{Conn, SegIn, SegOut, State};
pub use seq::Seq;

/// A connection's buffer (`SO_SNDBUF`, `SO_RCVBUF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// Bytes queued and not yet acknowledged, at most.
    Send,
    /// Bytes received and not yet read, at most: the most the window offers.
    Recv,
}

/// The smallest path MTU a "fragmentation needed" can lower a connection to (Linux's
/// `min_pmtu`): a forged message cannot shrink a connection's segments to a few bytes each
/// (RFC 5927 section 7.1). A path narrower than this gets segments fragmented on the way
/// no more, and loses them: as on Linux.
pub const MIN_PMTU: u16 = 552;

/// The smallest buffer a socket option can set (bytes); smaller requests are raised to it.
pub const MIN_BUFFER: u32 = 4 * 1024;

/// The largest buffer a socket option can set (bytes), the server-wide cap Linux keeps in
/// `net.core.rmem_max`/`wmem_max`: a connection's receive queue holds pool buffers, so one
/// connection may not take an unbounded share of the pool.
pub const MAX_BUFFER: u32 = 8 << 20;

/// A requested buffer size, kept within [`MIN_BUFFER`]..=[`MAX_BUFFER`]. Unlike Linux the
/// size is not doubled for bookkeeping: it counts payload bytes, which is what it bounds.
pub fn buffer_size(bytes: u32) -> u32 {
    bytes.clamp(MIN_BUFFER, MAX_BUFFER)
}

/// The send and receive buffer sizes a connection starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferSizes {
    /// `SO_SNDBUF`.
    pub send: u32,
    /// The application set `send` itself: it is not autotuned (`SOCK_SNDBUF_LOCK`).
    pub send_set: bool,
    /// `SO_RCVBUF`.
    pub recv: u32,
    /// The application set `recv` itself: it is not autotuned (Linux's
    /// `SOCK_RCVBUF_LOCK`).
    pub recv_set: bool,
}

impl BufferSizes {
    /// The sizes with `which` set to `bytes` (kept within the bounds).
    pub fn with(self, which: Buffer, bytes: u32) -> Self {
        let bytes = buffer_size(bytes);
        match which {
            Buffer::Send => Self {
                send: bytes,
                send_set: true,
                ..self
            },
            Buffer::Recv => Self {
                recv: bytes,
                recv_set: true,
                ..self
            },
        }
    }
}

/// Settings every connection starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// The MSS we announce and the most we send: the MTU less the IPv4 and TCP headers.
    pub mss: u16,
    /// Receive buffer per connection (bytes): the most we offer in the window, until
    /// autotuning grows it ([`autotune`]).
    pub rcv_buf: u32,
    /// The most autotuning grows a receive buffer to (6 MiB by default, Linux's
    /// `tcp_rmem[2]`); no more than `rcv_buf` turns it off. The window scale we offer is
    /// chosen for it.
    ///
    /// (It was off until a dead application's parked sends stopped going into the pool all
    /// at once, past every limit: beside a grown receive window they once took more buffers
    /// than the pool had, and bytes were lost. They wait in a [`spill`] now.)
    pub rcv_buf_max: u32,
    /// Send buffer per connection (bytes queued and not yet acknowledged), until
    /// autotuning grows it (see `snd_buf_max`).
    pub snd_buf: u32,
    /// The most autotuning grows a send buffer to (Linux's `tcp_wmem[2]`, 4 MiB): a writer
    /// held back by a full buffer while the congestion window has room gets twice the
    /// window. No more than `snd_buf` turns it off.
    pub snd_buf_max: u32,
    /// Connections start with Nagle off.
    pub nodelay: bool,
    /// Congestion avoidance: CUBIC (the default, as on Linux) or Reno.
    pub congestion: cc::Algorithm,
    /// Offer and accept SACK (RFC 2018).
    pub sack: bool,
    /// Offer and accept timestamps (RFC 7323).
    pub timestamps: bool,
    /// TIME-WAIT duration (2·MSL), microseconds. Linux waits 60 s.
    pub time_wait_us: u32,
    /// The secret of RFC 6528's initial sequence numbers.
    pub isn_secret: u128,
    /// Verify checksums of arriving segments.
    pub rx_checksum: bool,
    /// Compute checksums of the segments we send (else the field is zero). Off only on a
    /// device whose frames never reach a wire — a loopback — where Linux's `lo` does the
    /// same (it offloads the checksum and marks what it hands back as verified).
    pub tx_checksum: bool,
    /// Most connections the table holds (established, half-open and closing).
    pub max_connections: usize,
    /// Keepalive: silence before the first probe, microseconds (Linux: 2 hours).
    pub keepalive_idle_us: u64,
    /// Keepalive: between probes, microseconds (Linux: 75 s).
    pub keepalive_interval_us: u64,
    /// Keepalive: unanswered probes before the connection ends (Linux: 9).
    pub keepalive_probes: u8,
    /// When a listener answers SYNs with SYN cookies (RFC 4987) instead of keeping state.
    pub syn_cookies: SynCookies,
    /// Path-MTU discovery (RFC 1191, as Linux's `ip_no_pmtu_disc` 0): segments go with
    /// don't-fragment set, and a router's "fragmentation needed" about one of them lowers
    /// its connection's MSS (never below [`MIN_PMTU`]'s) — see [`conn::Conn::on_frag_needed`].
    /// Off: segments may be fragmented on the way, and such messages are ignored.
    pub pmtu_discovery: bool,
}

impl TcpConfig {
    /// The buffer sizes a connection starts with unless its socket sets its own.
    pub fn buffer_sizes(&self) -> BufferSizes {
        BufferSizes {
            send: self.snd_buf,
            send_set: false,
            recv: self.rcv_buf,
            recv_set: false,
        }
    }
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1460,
            rcv_buf: 256 * 1024,
            rcv_buf_max: 6 << 20,
            snd_buf_max: 4 << 20,
            snd_buf: 256 * 1024,
            nodelay: false,
            congestion: cc::Algorithm::Cubic,
            sack: true,
            timestamps: true,
            time_wait_us: 60_000_000,
            isn_secret: 0x5eed_7c9f_0000_0000_0000_0000_0000_0001,
            rx_checksum: true,
            tx_checksum: true,
            max_connections: 1 << 20,
            keepalive_idle_us: 7_200_000_000,
            keepalive_interval_us: 75_000_000,
            keepalive_probes: 9,
            syn_cookies: SynCookies::WhenFull,
            pmtu_discovery: true,
        }
    }
}

/// When a listener answers a SYN with a cookie instead of a half-open connection (Linux's
/// `tcp_syncookies` 0, 1, 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SynCookies {
    /// Never: a SYN beyond the backlog of half-open connections is dropped.
    Never,
    /// When the listener already holds `backlog` half-open connections (a SYN flood).
    #[default]
    WhenFull,
    /// For every SYN (no half-open state at all).
    Always,
}

/// The pool buffers TCP's queues hold, summed over every connection ([`Tcp::memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpMemory {
    /// Connections in the table.
    pub connections: u64,
    /// Buffers of bytes received in order, not yet read.
    pub rx_bufs: u64,
    /// Buffers of bytes received out of order.
    pub ooo_bufs: u64,
    /// Buffers of bytes queued to send, not yet acknowledged.
    pub tx_bufs: u64,
}

/// Why a connection ended other than by both sides closing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CloseReason {
    /// The peer answered our SYN with a RST, or a "port unreachable" came back for it
    /// (ECONNREFUSED).
    Refused,
    /// A "host unreachable" (or administratively prohibited) came back for our SYN
    /// (EHOSTUNREACH).
    HostUnreachable,
    /// A "network unreachable" came back for our SYN (ENETUNREACH).
    NetUnreachable,
    /// The peer reset an established connection (ECONNRESET).
    Reset,
    /// Retransmissions went unanswered (ETIMEDOUT).
    TimedOut,
    /// We reset it (the application aborted, or closed with unread data).
    Aborted,
}

/// Errors of the TCP calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TcpError {
    /// The handle names no connection (closed and freed, or never was).
    #[error("no such TCP connection")]
    InvalidHandle,
    /// Nothing to read, or no room to send, right now.
    #[error("the operation would block")]
    WouldBlock,
    /// The connection is not in a state that allows this (e.g. sending after shutdown).
    #[error("the connection is not open for this")]
    NotConnected,
    /// The connection ended.
    #[error("the connection ended: {0:?}")]
    Closed(CloseReason),
    /// The local port is taken.
    #[error("address in use")]
    AddressInUse,
    /// No ephemeral port is free towards this peer.
    #[error("no local port left")]
    NoPortsLeft,
    /// The address is not ours, or cannot be connected to.
    #[error("address not available")]
    AddressNotAvailable,
    /// The connection table is full.
    #[error("too many connections")]
    TableFull,
}

/// A connection, as the application names it: a slab index and the generation it was
/// created in, so a stale handle never reaches a newer connection in the same slot. The
/// default handle names nothing until a connection is made in slot 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TcpHandle {
    idx: u32,
    generation: u32,
}

impl TcpHandle {
    /// The slab index: which slot of the connection table it names (a tool's cursor;
    /// slots are reused, the generation tells their connections apart).
    pub fn index(self) -> u32 {
        self.idx
    }
}

/// A listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenHandle(u32);

macro_rules! tcp_counters {
    ($( $(#[$m:meta])* $name:ident ),* $(,)?) => {
        /// TCP's counters. Every segment TCP refuses is counted under one name (from
        /// `malformed` on). All are monotonically increasing.
        #[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        pub struct TcpCounters {
            $( $(#[$m])* pub $name: u64, )*
        }

        impl TcpCounters {
            /// Every counter with its name, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$( (stringify!($name), self.$name), )*]
            }

            /// The first counter at or after `first` (in declaration order) that differs
            /// from `before`'s: with `first` the first drop counter, the reason a frame
            /// handed over in between was refused. Allocates nothing.
            pub fn drop_since(&self, before: &Self, first: &str) -> Option<&'static str> {
                let mut from = false;
                $(
                    from |= stringify!($name) == first;
                    if from && self.$name != before.$name {
                        return Some(stringify!($name));
                    }
                )*
                None
            }
        }
    };
}

tcp_counters! {
    /// Segments received for TCP.
    segs_in,
    /// Segments sent.
    segs_out,
    /// Payload bytes the application read.
    bytes_in,
    /// Payload bytes sent (retransmissions included).
    bytes_out,
    /// Connections established by our SYN.
    active_opens,
    /// Connections established by a peer's SYN.
    passive_opens,
    /// RSTs sent.
    resets_sent,
    /// RSTs that reset a connection.
    resets_received,
    /// Segments retransmitted by the timer.
    rto_retransmits,
    /// Segments retransmitted on duplicate ACKs or partial ACKs.
    fast_retransmits,
    /// Duplicate ACKs received.
    dup_acks,
    /// Zero-window probes sent.
    window_probes,
    /// Keepalive probes sent.
    keepalive_probes,
    /// Connections ended by unanswered keepalive probes.
    keepalive_timeouts,
    /// Connections dropped after unanswered retransmissions.
    timeouts,
    /// Challenge ACKs sent (RFC 5961).
    challenge_acks,
    /// Challenge ACKs and ACKs for out-of-window segments not sent: one per half second
    /// per connection at most.
    oow_acks_limited,
    /// Receive buffers grown by autotuning (one count per growth).
    rcv_buf_grown,
    /// Send buffers grown by autotuning (one count per growth).
    snd_buf_grown,
    /// SYN-ACKs sent with a cookie (a listener's queue was full).
    syn_cookies_sent,
    /// Connections made from a returning cookie.
    syn_cookies_accepted,
    /// Valid SACK blocks received.
    sack_blocks,
    /// Recoveries entered on SACK information.
    sack_recoveries,
    /// Holes resent in SACK recovery.
    sack_retransmits,
    /// Segments held out of order.
    ooo_held,
    /// Tail-loss probes sent (no ACK for 2·SRTT with data out, outside recovery).
    tail_probes,
    /// Times SACK recovery took its resent holes as lost again (no ACK for 2·SRTT).
    lost_retransmits,
    /// DSACK blocks received (the peer got a segment twice, RFC 2883).
    dsacks_received,
    /// Recoveries undone: DSACKs showed every segment they resent had arrived, or the ACK
    /// past the one segment resent echoed an older timestamp (the path reordered).
    spurious_recoveries,
    /// Connections that saw their path reorder (a resend DSACKed, or a recovery undone):
    /// from then on they find losses by time only.
    reordering_detected,
    /// Times a router's "fragmentation needed" lowered a connection's MSS (path-MTU
    /// discovery, RFC 1191).
    pmtu_lowered,
    /// Bytes applications that went away had written past their connections' send buffers,
    /// kept in the stack's memory and sent as room appeared ([`spill`]).
    spilled,
    /// Segments whose payload was dropped because the pool was exhausted (less than a
    /// thirty-second free, [`memory`]) or, out of order, scarce: the peer sends them again.
    pool_drops,
    /// Times a connection's sends began to queue less than its buffer allowed because the
    /// pool was scarce or exhausted ([`memory`]): one count per episode, however often the
    /// application tries meanwhile. The rest waits for the pool to refill.
    pool_limited_sends,
    // ---- refusals
    /// Too short, bad offset, bad options or flags.
    malformed,
    /// Bad checksum.
    bad_checksum,
    /// Carried in IP fragments (not reassembled for TCP).
    fragmented,
    /// No connection or listener (answered with a RST unless it was one).
    no_socket,
    /// Outside the receive window (answered with an ACK).
    out_of_window,
    /// Data beyond the window we offered, cut off.
    beyond_window,
    /// Acknowledged data we never sent.
    ack_unsent,
    /// No ACK flag in a synchronized state.
    no_ack,
    /// Older timestamp than the last one echoed (RFC 7323 PAWS), answered with an ACK.
    paws_rejected,
    /// Out-of-order segment the queue had no room for.
    ooo_dropped,
    /// Out-of-order queues given up because the pool reached its reserve
    /// ([`memory::PoolLevel::Reserved`]): the peer sends those bytes again.
    ooo_pruned,
    /// SYN refused: the listener's queue was full (and SYN cookies are off).
    listen_overflow,
    /// ACKs to a listener whose cookie did not check out (answered with a RST).
    syn_cookies_failed,
    /// SYN refused: the connection table was full.
    table_full,
    /// No buffer for a segment to send.
    no_buffers,
    /// "Fragmentation needed" messages ignored (RFC 5927): for no connection of ours, for a
    /// sequence number not in flight, or saying an MTU no smaller than the one in use.
    frag_needed_ignored,
    /// Connections ended while opening (SYN-SENT) by a destination-unreachable message
    /// about their SYN, or because ARP never resolved its next hop, as Linux ends them
    /// (RFC 1122 4.2.3.9 leaves it to the stack).
    unreachable_aborts,
    /// Other destination-unreachable messages about TCP segments, ignored: for no
    /// connection of ours, not quoting its SYN, or for a connection already open (RFC 1122:
    /// a soft error there).
    unreachable_ignored,
    /// Bytes refused a spill: its own or every spill's bound was reached
    /// ([`spill::MAX_SPILL`], [`spill::MAX_SPILLED`]); their connection is reset.
    spill_refused,
    /// Spills given up after [`spill::SPILL_PATIENCE_NS`] without progress (the peer took
    /// nothing): their connections are reset.
    spills_abandoned,
}

/// What an application of a connection polls for: readable bytes, end of stream, failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpStatus {
    /// State.
    pub state: State,
    /// Bytes ready to read.
    pub readable: u32,
    /// The peer's FIN is in and every byte before it has been read.
    pub eof: bool,
    /// Why the connection ended, if it ended badly.
    pub error: Option<CloseReason>,
}

/// A connection's state as tools and tests see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpInfo {
    /// State.
    pub state: State,
    /// Our address.
    pub local: SocketAddrV4,
    /// The peer's.
    pub remote: SocketAddrV4,
    /// Congestion window (bytes).
    pub cwnd: u32,
    /// Slow-start threshold (bytes).
    pub ssthresh: u32,
    /// Smoothed RTT (µs).
    pub srtt_us: u32,
    /// Retransmission timeout (µs).
    pub rto_us: u32,
    /// The peer's window (bytes).
    pub snd_wnd: u32,
    /// MSS in use.
    pub mss: u16,
    /// The peer's window shift.
    pub snd_wscale: u8,
    /// Our window shift.
    pub rcv_wscale: u8,
    /// Bytes queued to send, not yet acknowledged.
    pub send_queued: u32,
    /// Bytes ready to read.
    pub readable: u32,
    /// Bytes held out of order.
    pub ooo_bytes: u32,
    /// Bytes sent and not yet acknowledged.
    pub in_flight: u32,
    /// Segments sent again.
    pub retransmits: u32,
    /// SACK agreed.
    pub sack: bool,
    /// Timestamps agreed.
    pub timestamps: bool,
}

/// A listener as tools see it (`shmnet sockets`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListenerInfo {
    /// The port.
    pub port: u16,
    /// Connections in the handshake or waiting for `accept`, at most.
    pub backlog: u32,
    /// Connections in SYN-RECEIVED.
    pub half_open: u32,
    /// Established connections waiting for `accept`.
    pub ready: u32,
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    conn: Option<Conn>,
}

#[derive(Debug)]
struct Listener {
    port: u16,
    backlog: u32,
    /// What its connections start with (set on the listener, as on Linux, they hold from
    /// the SYN on: the window scale follows the receive buffer).
    sizes: BufferSizes,
    /// Connections of this listener in SYN-RECEIVED.
    half_open: u32,
    /// Established connections waiting for `accept`.
    ready: VecDeque<u32>,
}

type Demux = HashMap<u64, u32, BuildHasherDefault<DemuxHasher>>;

/// The table of connections and listeners.
#[derive(Debug)]
pub struct Tcp {
    /// Settings.
    pub cfg: TcpConfig,
    /// Counters.
    pub counters: TcpCounters,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    demux: Demux,
    listeners: Vec<Option<Listener>>,
    listen_ports: HashMap<u16, u32>,
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    /// When the last cookie SYN-ACK went out: only then is an ACK to a listener checked
    /// as a cookie.
    last_cookie: Option<Instant>,
    /// Connections that received segments since the last flush (their answers wait for
    /// it, so a burst of segments is answered by one ACK).
    pending_out: Vec<u32>,
    next_ephemeral: u16,
    live: usize,
    /// Bytes autotuning added to connections' buffers, in all (each connection's share as
    /// it was last accounted in [`Tcp::finish`]).
    tuned_bytes: u64,
    /// Bytes applications that went away wrote past their connections' send buffers.
    pub(crate) spills: spill::Spills,
    /// When every spill is next tried again (`None`: no spill).
    pub(crate) spill_retry: Option<Instant>,
    /// Path MTUs routers told us of, per destination.
    pub(crate) paths: paths::Paths,
}

const EPHEMERAL_FIRST: u16 = 49152;

/// What became of an ACK checked as a returning cookie ([`Tcp::accept_cookie`]); each
/// refusal is counted where it is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CookieOutcome {
    /// A connection, established and waiting in the accept queue.
    Accepted(u32),
    /// Not a cookie of ours (or too old): a segment for no connection.
    Invalid,
    /// A good cookie, but the accept queue or the table is full: dropped.
    NoRoom,
}

/// What a listener does with a SYN ([`Tcp::on_syn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SynAnswer {
    /// A half-open connection and a SYN-ACK.
    HalfOpen,
    /// A cookie SYN-ACK and no state.
    Cookie,
    /// Nothing (counted as a listen overflow).
    Drop,
}

/// The MSS values a SYN cookie can encode (3 bits), as Linux's table: the largest at or
/// under the peer's is used.
pub const COOKIE_MSS: [u16; 8] = [536, 1200, 1360, 1440, 1460, 4312, 8940, 8960];

/// The 64-second time slot a cookie carries (5 bits: a cookie is good in its slot and the
/// next).
fn cookie_slot(now: Instant) -> u32 {
    ((now.nanos() / 64_000_000_000) & 31) as u32
}

/// The demultiplexing key of a connection: the peer's address and port, and our port (our
/// address is the interface's one).
fn key(remote: SocketAddrV4, local_port: u16) -> u64 {
    (u64::from(u32::from(*remote.ip())) << 32)
        | (u64::from(remote.port()) << 16)
        | u64::from(local_port)
}

impl Tcp {
    /// An empty table.
    pub fn new(cfg: TcpConfig) -> Tcp {
        Tcp {
            cfg,
            counters: TcpCounters::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            demux: Demux::default(),
            listeners: Vec::new(),
            listen_ports: HashMap::new(),
            timers: BinaryHeap::new(),
            pending_out: Vec::new(),
            last_cookie: None,
            next_ephemeral: EPHEMERAL_FIRST,
            live: 0,
            tuned_bytes: 0,
            spills: spill::Spills::default(),
            spill_retry: None,
            paths: paths::Paths::default(),
        }
    }

    /// Connections in the table (any state but freed).
    pub fn len(&self) -> usize {
        self.live
    }

    /// What the connections' queues hold of the pool now (a walk of the table: for stats,
    /// not the data path).
    pub fn memory(&self) -> TcpMemory {
        let mut m = TcpMemory::default();
        for c in self.slots.iter().filter_map(|s| s.conn.as_ref()) {
            let (rx, ooo, tx) = c.queue_bufs();
            m.connections += 1;
            m.rx_bufs += u64::from(rx);
            m.ooo_bufs += u64::from(ooo);
            m.tx_bufs += u64::from(tx);
        }
        m
    }

    /// Whether the table holds no connection.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// RFC 6528: ISN = M + F(4-tuple, secret), M a 4 µs clock, F a keyed hash (SipHash-1-3
    /// over the secret and the tuple: std's hasher with its fixed keys, keyed by feeding it
    /// the secret first).
    pub fn isn(&self, local: SocketAddrV4, remote: SocketAddrV4, now: Instant) -> Seq {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.cfg.isn_secret.hash(&mut h);
        local.hash(&mut h);
        remote.hash(&mut h);
        let f = h.finish() as u32;
        Seq(((now.nanos() / 4_000) as u32).wrapping_add(f))
    }

    /// The SYN-ACK that answers `syn` from `remote` without keeping state: its sequence
    /// number is a cookie (RFC 4987) encoding a 64-second time slot (5 bits), our choice
    /// among [`COOKIE_MSS`] for the peer's MSS (3 bits) and a keyed hash of the 4-tuple, the
    /// slot and the peer's ISN (24 bits). Options that need state (window scaling, SACK,
    /// timestamps) are not offered on it.
    pub(crate) fn cookie_synack(
        &mut self,
        l: u32,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        syn: &SegIn,
        now: Instant,
    ) -> SegOut {
        let recv = self.listener_sizes(l).recv;
        let peer_mss = syn.mss.unwrap_or(536).min(self.cfg.mss);
        let mss_idx = COOKIE_MSS.iter().rposition(|&m| m <= peer_mss).unwrap_or(0) as u32;
        let slot = cookie_slot(now);
        let hash = self.cookie_hash(local, remote, syn.seq, slot);
        let cookie = (slot << 27) | (mss_idx << 24) | hash;
        self.last_cookie = Some(now);
        SegOut {
            seq: Seq(cookie),
            ack: Some(syn.seq.add(1)),
            wnd: recv.min(0xffff) as u16,
            syn: true,
            mss: Some(self.cfg.mss),
            ..SegOut::default()
        }
    }

    fn cookie_hash(
        &self,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        peer_isn: Seq,
        slot: u32,
    ) -> u32 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.cfg.isn_secret, 0x0c00_c1e5_u32).hash(&mut h);
        (local, remote, peer_isn.0, slot).hash(&mut h);
        (h.finish() as u32) & 0x00ff_ffff
    }

    /// The connection a returning cookie makes: `ack` (the peer's ACK of our cookie
    /// SYN-ACK) checks out for this slot or the previous one, and listener `l` has room in
    /// its accept queue. The connection is ESTABLISHED and waits in the queue.
    pub(crate) fn accept_cookie(
        &mut self,
        l: u32,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        ack: &SegIn,
        now: Instant,
    ) -> CookieOutcome {
        let Some(cookie) = ack.ack.map(|a| a.sub(1).0) else {
            self.counters.syn_cookies_failed += 1;
            return CookieOutcome::Invalid;
        };
        let peer_isn = ack.seq.sub(1);
        let (slot, mss_idx, hash) = (cookie >> 27, (cookie >> 24) & 7, cookie & 0x00ff_ffff);
        let age = cookie_slot(now).wrapping_sub(slot) & 31;
        let ok = age <= 1
            && (mss_idx as usize) < COOKIE_MSS.len()
            && self.cookie_hash(local, remote, peer_isn, slot) == hash;
        if !ok {
            self.counters.syn_cookies_failed += 1;
            return CookieOutcome::Invalid;
        }
        let room = self
            .listeners
            .get(l as usize)
            .and_then(Option::as_ref)
            .is_some_and(|li| (li.ready.len() as u32) < li.backlog);
        if !room {
            self.counters.listen_overflow += 1;
            return CookieOutcome::NoRoom;
        }
        let mss = COOKIE_MSS[mss_idx as usize].min(self.cfg.mss);
        let sizes = self.listener_sizes(l);
        let mut c = Conn::from_cookie(
            local,
            remote,
            (Seq(cookie), peer_isn),
            mss,
            ack,
            sizes,
            &self.cfg,
        );
        self.fit_to_path(&mut c, now);
        c.accept = conn::Accept::Ready(l);
        let Some(idx) = self.insert(c) else {
            self.counters.table_full += 1;
            return CookieOutcome::NoRoom;
        };
        if let Some(Some(li)) = self.listeners.get_mut(l as usize) {
            li.ready.push_back(idx);
        }
        self.counters.syn_cookies_accepted += 1;
        CookieOutcome::Accepted(idx)
    }

    /// Whether a cookie went out recently enough for an ACK to be carrying one back (the
    /// two slots a cookie is good for, and one more so that a late one is counted as
    /// failed rather than taken for a stray ACK).
    pub(crate) fn cookies_recent(&self, now: Instant) -> bool {
        self.last_cookie
            .is_some_and(|t| now.nanos().saturating_sub(t.nanos()) < 192_000_000_000)
    }

    /// The connection behind `h`.
    pub fn get(&self, h: TcpHandle) -> Result<&Conn, TcpError> {
        self.slots
            .get(h.idx as usize)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.conn.as_ref())
            .ok_or(TcpError::InvalidHandle)
    }

    /// The connection behind `h`, to change.
    pub fn get_mut(&mut self, h: TcpHandle) -> Result<&mut Conn, TcpError> {
        self.slots
            .get_mut(h.idx as usize)
            .filter(|s| s.generation == h.generation)
            .and_then(|s| s.conn.as_mut())
            .ok_or(TcpError::InvalidHandle)
    }

    pub(crate) fn handle_of(&self, idx: u32) -> TcpHandle {
        TcpHandle {
            idx,
            generation: self.slots[idx as usize].generation,
        }
    }

    pub(crate) fn conn_at(&mut self, idx: u32) -> Option<&mut Conn> {
        self.slots.get_mut(idx as usize)?.conn.as_mut()
    }

    /// Connection `idx` with the settings and counters beside it (disjoint borrows).
    pub(crate) fn parts(&mut self, idx: u32) -> Option<(&mut Conn, &TcpConfig, &mut TcpCounters)> {
        let c = self.slots.get_mut(idx as usize)?.conn.as_mut()?;
        Some((c, &self.cfg, &mut self.counters))
    }

    /// The slab index of the connection `remote` → our `local_port`.
    pub(crate) fn lookup(&self, remote: SocketAddrV4, local_port: u16) -> Option<u32> {
        self.demux.get(&key(remote, local_port)).copied()
    }

    /// The listener on `port`.
    pub(crate) fn listener_on(&self, port: u16) -> Option<u32> {
        self.listen_ports.get(&port).copied()
    }

    /// What listener `l` does with a SYN now.
    pub(crate) fn on_syn(&self, l: u32) -> SynAnswer {
        let Some(li) = self.listeners.get(l as usize).and_then(Option::as_ref) else {
            return SynAnswer::Drop;
        };
        if li.ready.len() as u32 >= li.backlog {
            // Nobody could take the connection: as Linux does, the SYN is dropped (and
            // sent again by the peer later).
            return SynAnswer::Drop;
        }
        match self.cfg.syn_cookies {
            SynCookies::Always => SynAnswer::Cookie,
            SynCookies::WhenFull if li.half_open >= li.backlog => SynAnswer::Cookie,
            SynCookies::Never if li.half_open >= li.backlog => SynAnswer::Drop,
            _ => SynAnswer::HalfOpen,
        }
    }

    /// Put `conn` in the table; `None` when it is full.
    pub(crate) fn insert(&mut self, conn: Conn) -> Option<u32> {
        if self.live >= self.cfg.max_connections {
            return None;
        }
        let k = key(conn.remote, conn.local.port());
        if let conn::Accept::HalfOpen(l) = conn.accept {
            if let Some(Some(li)) = self.listeners.get_mut(l as usize) {
                li.half_open += 1;
            }
        }
        let idx = match self.free_slots.pop() {
            Some(i) => {
                let s = &mut self.slots[i as usize];
                s.generation = s.generation.wrapping_add(1);
                s.conn = Some(conn);
                i
            }
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    conn: Some(conn),
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.demux.insert(k, idx);
        self.live += 1;
        Some(idx)
    }

    /// After an event on connection `idx`, before its output is flushed: a handshake of a
    /// listener's that completed joins the accept queue; one that failed, or whose listener
    /// is gone, is orphaned (nobody will accept it) and reset if still open.
    pub(crate) fn settle<P: BufferPool + ?Sized>(&mut self, pool: &mut P, idx: u32) {
        let Some(c) = self
            .slots
            .get_mut(idx as usize)
            .and_then(|s| s.conn.as_mut())
        else {
            return;
        };
        let conn::Accept::HalfOpen(l) = c.accept else {
            return;
        };
        if c.state() == State::SynReceived {
            return;
        }
        let li = self.listeners.get_mut(l as usize).and_then(Option::as_mut);
        match li {
            Some(li) => {
                li.half_open = li.half_open.saturating_sub(1);
                if c.state() != State::Closed {
                    li.ready.push_back(idx);
                    c.accept = conn::Accept::Ready(l);
                    return;
                }
                c.accept = conn::Accept::Owned;
                c.orphan_and_abort(pool);
            }
            None => {
                c.accept = conn::Accept::Owned;
                c.orphan_and_abort(pool);
            }
        }
    }

    /// After connection `idx`'s output is flushed: free it when it is closed and nobody
    /// holds a handle, else keep its earliest deadline in the timer queue.
    pub(crate) fn finish<P: BufferPool + ?Sized>(&mut self, pool: &mut P, idx: u32) {
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            return;
        };
        let generation = slot.generation;
        let Some(c) = slot.conn.as_mut() else { return };
        // Every connection's tuned growth together stays within a thirty-second of the pool
        // (its buffers in MSS-sized segments): past it, this one gives the excess back. Each connection's own growth is bounded too (an eighth of the
        // pool a direction), but many growing at once would together hold it all — and the
        // configured sizes are already promised: four applications that never read, with
        // four writers flooding them, hold 80 % of a 4,096-buffer pool without any tuning
        // (tcp_hostile's never-readers); a quarter more exhausted it.
        let (was, now) = c.account_tuning(&self.cfg);
        self.tuned_bytes = (self.tuned_bytes + u64::from(now)).saturating_sub(u64::from(was));
        let budget = (pool.total() / 32) as u64 * u64::from(self.cfg.mss);
        if now > 0 && self.tuned_bytes > budget {
            let excess = u32::try_from(self.tuned_bytes - budget).unwrap_or(u32::MAX);
            c.untune(excess, &self.cfg);
            let (was, now) = c.account_tuning(&self.cfg);
            self.tuned_bytes = (self.tuned_bytes + u64::from(now)).saturating_sub(u64::from(was));
        }
        if c.state() == State::Closed {
            if c.orphaned() {
                self.free(pool, idx);
                return;
            }
            // Closed but its handle still held: segments for its 4-tuple are for no
            // connection now (answered with a RST, or a listener's new SYN).
            let k = key(c.remote, c.local.port());
            if self.demux.get(&k) == Some(&idx) {
                self.demux.remove(&k);
            }
        }
        if let Some(t) = c.next_timer() {
            if c.timer_armed.is_none_or(|a| t < a) {
                c.timer_armed = Some(t);
                self.timers.push(Reverse((t, idx, generation)));
            }
        }
    }

    fn free<P: BufferPool + ?Sized>(&mut self, pool: &mut P, idx: u32) {
        let Some(mut c) = self.slots[idx as usize].conn.take() else {
            return;
        };
        self.spills.drop_for(idx);
        c.clear(pool);
        self.tuned_bytes = self
            .tuned_bytes
            .saturating_sub(u64::from(c.account_tuning(&self.cfg).0));
        let k = key(c.remote, c.local.port());
        if self.demux.get(&k) == Some(&idx) {
            self.demux.remove(&k);
        }
        self.free_slots.push(idx);
        self.live -= 1;
    }

    /// Note that connection `idx` has output to flush (once per flush, however many
    /// segments it received).
    pub(crate) fn mark(&mut self, idx: u32) {
        if let Some(c) = self
            .slots
            .get_mut(idx as usize)
            .and_then(|s| s.conn.as_mut())
        {
            if !c.out_queued {
                c.out_queued = true;
                self.pending_out.push(idx);
            }
        }
    }

    /// The next connection marked for a flush, its mark cleared.
    pub(crate) fn next_marked(&mut self) -> Option<u32> {
        let idx = self.pending_out.pop()?;
        if let Some(c) = self
            .slots
            .get_mut(idx as usize)
            .and_then(|s| s.conn.as_mut())
        {
            c.out_queued = false;
        }
        Some(idx)
    }

    /// Pop the connections whose earliest deadline is at or before `now`.
    pub(crate) fn due(&mut self, now: Instant) -> Option<u32> {
        while let Some(&Reverse((t, idx, generation))) = self.timers.peek() {
            if t > now {
                return None;
            }
            self.timers.pop();
            let Some(slot) = self.slots.get_mut(idx as usize) else {
                continue;
            };
            if slot.generation != generation {
                continue;
            }
            let Some(c) = slot.conn.as_mut() else {
                continue;
            };
            if c.timer_armed != Some(t) {
                continue;
            }
            c.timer_armed = None;
            return Some(idx);
        }
        None
    }

    /// The earliest deadline in the timer queue; the origin (at once) while connections
    /// wait for a flush.
    pub fn poll_at(&self) -> Option<Instant> {
        if !self.pending_out.is_empty() {
            return Some(Instant::ZERO);
        }
        let timer = self.timers.peek().map(|r| r.0.0);
        [timer, self.spill_retry].into_iter().flatten().min()
    }

    /// Listen on `port` (0: a free ephemeral port, which [`Tcp::listen_port`] names) with an
    /// accept queue of `backlog`.
    pub fn listen(&mut self, port: u16, backlog: u32) -> Result<ListenHandle, TcpError> {
        let port = if port == 0 {
            let unspecified = SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0);
            self.ephemeral_port(unspecified)
                .ok_or(TcpError::NoPortsLeft)?
        } else {
            port
        };
        if self.listen_ports.contains_key(&port) {
            return Err(TcpError::AddressInUse);
        }
        let l = Listener {
            port,
            backlog: backlog.max(1),
            sizes: self.cfg.buffer_sizes(),
            half_open: 0,
            ready: VecDeque::new(),
        };
        let i = match self.listeners.iter().position(Option::is_none) {
            Some(i) => {
                self.listeners[i] = Some(l);
                i
            }
            None => {
                self.listeners.push(Some(l));
                self.listeners.len() - 1
            }
        };
        self.listen_ports.insert(port, i as u32);
        Ok(ListenHandle(i as u32))
    }

    /// Sets the buffer `which` of the connections listener `l` accepts from now on.
    pub fn set_listener_buffer(
        &mut self,
        l: ListenHandle,
        which: Buffer,
        bytes: u32,
    ) -> Result<(), TcpError> {
        let li = self
            .listeners
            .get_mut(l.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(TcpError::InvalidHandle)?;
        li.sizes = li.sizes.with(which, bytes);
        Ok(())
    }

    /// The buffer sizes listener `l`'s connections start with (the defaults if it is gone).
    pub(crate) fn listener_sizes(&self, l: u32) -> BufferSizes {
        self.listener(l)
            .map_or(self.cfg.buffer_sizes(), |li| li.sizes)
    }

    /// Listener `l`.
    fn listener(&self, l: u32) -> Result<&Listener, TcpError> {
        self.listeners
            .get(l as usize)
            .and_then(Option::as_ref)
            .ok_or(TcpError::InvalidHandle)
    }

    /// The next established connection of listener `l`, if one is waiting.
    pub fn accept(&mut self, l: ListenHandle) -> Result<Option<TcpHandle>, TcpError> {
        let li = self
            .listeners
            .get_mut(l.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(TcpError::InvalidHandle)?;
        let Some(idx) = li.ready.pop_front() else {
            return Ok(None);
        };
        if let Some(c) = self.conn_at(idx) {
            c.accept = conn::Accept::Owned;
        }
        Ok(Some(self.handle_of(idx)))
    }

    /// Connections waiting to be accepted.
    pub fn accept_queue_len(&self, l: ListenHandle) -> Result<usize, TcpError> {
        self.listeners
            .get(l.0 as usize)
            .and_then(Option::as_ref)
            .map(|l| l.ready.len())
            .ok_or(TcpError::InvalidHandle)
    }

    /// Listener `l` as tools see it.
    pub fn listener_info(&self, l: ListenHandle) -> Result<ListenerInfo, TcpError> {
        self.listeners
            .get(l.0 as usize)
            .and_then(Option::as_ref)
            .map(|l| ListenerInfo {
                port: l.port,
                backlog: l.backlog,
                half_open: l.half_open,
                ready: l.ready.len() as u32,
            })
            .ok_or(TcpError::InvalidHandle)
    }

    /// Every connection in the table, in any state, with its handle (slot order).
    pub fn connections(&self) -> impl Iterator<Item = (TcpHandle, &Conn)> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let c = s.conn.as_ref()?;
            Some((
                TcpHandle {
                    idx: i as u32,
                    generation: s.generation,
                },
                c,
            ))
        })
    }

    /// The port a listener listens on.
    pub fn listen_port(&self, l: ListenHandle) -> Result<u16, TcpError> {
        self.listeners
            .get(l.0 as usize)
            .and_then(Option::as_ref)
            .map(|l| l.port)
            .ok_or(TcpError::InvalidHandle)
    }

    /// Stop listening. Connections not yet accepted are reset (their indices returned, for
    /// the caller to flush their RSTs).
    pub fn unlisten<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        l: ListenHandle,
    ) -> Result<Vec<u32>, TcpError> {
        let li = self
            .listeners
            .get_mut(l.0 as usize)
            .and_then(Option::take)
            .ok_or(TcpError::InvalidHandle)?;
        self.listen_ports.remove(&li.port);
        let mut reset = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(c) = s.conn.as_mut() {
                if matches!(c.accept, conn::Accept::HalfOpen(x) | conn::Accept::Ready(x) if x == l.0)
                {
                    c.accept = conn::Accept::Owned;
                    c.orphan_and_abort(pool);
                    reset.push(i as u32);
                }
            }
        }
        Ok(reset)
    }

    /// A free local port for a connection to `remote`.
    pub(crate) fn ephemeral_port(&mut self, remote: SocketAddrV4) -> Option<u16> {
        let span = u32::from(u16::MAX - EPHEMERAL_FIRST) + 1;
        for _ in 0..span {
            let p = self.next_ephemeral;
            self.next_ephemeral = if p == u16::MAX {
                EPHEMERAL_FIRST
            } else {
                p + 1
            };
            if !self.listen_ports.contains_key(&p) && !self.demux.contains_key(&key(remote, p)) {
                return Some(p);
            }
        }
        None
    }

    /// Free every buffer and forget every connection and listener.
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        for s in &mut self.slots {
            if let Some(mut c) = s.conn.take() {
                c.clear(pool);
            }
            s.generation = s.generation.wrapping_add(1);
        }
        self.free_slots = (0..self.slots.len() as u32).rev().collect();
        self.demux.clear();
        self.listeners.clear();
        self.listen_ports.clear();
        self.timers.clear();
        self.pending_out.clear();
        self.live = 0;
        self.tuned_bytes = 0;
        self.spills.clear();
        self.spill_retry = None;
        self.paths.clear();
    }

    /// Keeps new connection `c` within the path MTU learnt for its peer, if any
    /// ([`paths`]).
    pub(crate) fn fit_to_path(&self, c: &mut Conn, now: Instant) {
        if let Some(mtu) = self.paths.mtu(*c.remote.ip(), now) {
            c.limit_to_path(mtu);
        }
    }

    /// Queues what connection `idx`'s send buffer has room for of its spill, if it has one
    /// (see [`spill`]); the spill's last byte queued, the shutdown or close that waited for it
    /// is done. A connection that can send no more loses its spill.
    pub(crate) fn refill<P: BufferPool + ?Sized>(&mut self, pool: &mut P, idx: u32, now: Instant) {
        if self.spills.is_empty() {
            return;
        }
        let base = self.cfg.snd_buf;
        let Some(c) = self
            .slots
            .get_mut(idx as usize)
            .and_then(|s| s.conn.as_mut())
        else {
            return;
        };
        if !matches!(
            c.state(),
            State::SynSent | State::SynReceived | State::Established | State::CloseWait
        ) {
            self.spills.drop_for(idx);
            return;
        }
        let ctr = &mut self.counters;
        match self.spills.drain(idx, now, |b| c.send(pool, b, base, ctr)) {
            Some(spill::After::Shutdown) => c.shutdown_write(),
            Some(spill::After::Close) => c.close(pool),
            Some(spill::After::Nothing) | None => {}
        }
    }

    /// Whether `ip` may be connected to.
    pub(crate) fn connectable(ip: Ipv4Addr) -> bool {
        !(ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget: at most 512 bytes of protocol state per established connection,
    /// excluding data buffers (Linux spends about 2 KiB per socket). A slot of the table is
    /// the connection and its generation.
    #[test]
    fn connection_state_fits_the_budget() {
        let conn = std::mem::size_of::<Conn>();
        let slot = std::mem::size_of::<Slot>();
        eprintln!("a connection is {conn} bytes, a table slot {slot}");
        assert!(conn <= 512, "a connection is {conn} bytes");
        assert!(slot <= 512, "a table slot is {slot} bytes");
    }
}
