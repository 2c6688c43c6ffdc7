//! The windows of the `server` structure and what their descriptors mean.
//!
//! - The **data window** holds the packet buffers. The server creates it; the driver fills
//!   its buffers; every application maps it too, so a message it receives is read where the
//!   driver put it (the copy at `recv` is the only one).
//! - Each application gets an **app window** of its own: its request, delivery and return
//!   queues, and a small pool of send buffers.
//! - Under `--isolation regions` (docs/isolation.md) an application maps no data window: its
//!   **region window** holds only rings — requests, deliveries and completions, and two
//!   rings of posted receive buffers — and every descriptor on them names bytes of a region
//!   the application registered, by handle.

use shmnet_chan::{AllocPolicy, ChannelSpec, Desc, PageSize, PoolSpec, RingSpec};
use std::net::{Ipv4Addr, SocketAddrV4};

/// Data window ring: network-layer frames, driver → server (the seed's IN queue for one
/// family): IPv4 and IPv6, whichever of them the server takes.
pub const IN_IP: usize = 0;
/// Data window ring: ARP frames, driver → server.
pub const IN_ARP: usize = 1;
/// Data window ring: frames to transmit, server → driver (the OUT queue).
pub const OUT: usize = 2;

/// The data window for pools `pools`.
pub fn data_window_spec(pools: PoolSpec, page: PageSize) -> ChannelSpec {
    let ring = |capacity| RingSpec {
        capacity,
        wakeups: true,
    };
    ChannelSpec {
        rings: vec![ring(1024), ring(64), ring(1024)],
        pools,
        page,
    }
}

/// App window ring: requests (sends), application → server.
pub const REQ: usize = 0;
/// App window ring: received messages, server → application.
pub const RX: usize = 1;
/// App window ring: chains the application has read, application → server.
pub const RET: usize = 2;

/// Slots of each app ring.
pub const APP_RING: u32 = 256;

/// An application's window.
pub fn app_window_spec() -> ChannelSpec {
    let ring = RingSpec {
        capacity: APP_RING,
        wakeups: true,
    };
    ChannelSpec {
        rings: vec![ring; 3],
        pools: PoolSpec {
            pools: 1,
            buffers_per_pool: 256,
            data_size: 2048,
            policy: AllocPolicy::Lifo,
            ..PoolSpec::default()
        },
        page: PageSize::Small,
    }
}

/// Bytes at the start of a send chain's first buffer that carry the destination.
pub const SEND_HEADER: usize = 8;

/// Writes the destination header of a send.
pub fn encode_dst(dst: SocketAddrV4) -> [u8; SEND_HEADER] {
    let mut h = [0u8; SEND_HEADER];
    h[..4].copy_from_slice(&dst.ip().octets());
    h[4..6].copy_from_slice(&dst.port().to_be_bytes());
    h
}

/// Reads the destination header of a send.
pub fn decode_dst(h: &[u8; SEND_HEADER]) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::new(h[0], h[1], h[2], h[3]),
        u16::from_be_bytes([h[4], h[5]]),
    )
}

/// A delivery descriptor: chain `head` of `len` bytes for socket `socket` from `src`.
pub fn rx_desc(head: u32, len: u32, socket: u16, src: SocketAddrV4) -> Desc {
    Desc {
        buf: head,
        len,
        flags: u32::from(socket) | (u32::from(src.port()) << 16),
        aux: u32::from(*src.ip()),
    }
}

/// `REQ` flag: the descriptor names bytes of a registered region by handle (the datagram's
/// 8-byte destination header, then its payload), not a chain of send buffers.
pub const REQ_HANDLE: u32 = 1 << 31;
/// `RX` length bit: the descriptor is a send's completion, not a delivery (a delivery's
/// length is under 64 KiB).
pub const RX_DONE: u32 = 1 << 31;

/// What became of a send by handle, in its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SendStatus {
    /// Sent: the bytes are the application's again.
    Sent = 0,
    /// Its handle's line was not in the lookup cache: dropped, and the line is on its way;
    /// send it again.
    Miss = 1,
    /// The handle names bytes this application did not register for reading.
    Refused = 2,
    /// The socket is not bound, or the stack refused the datagram.
    Failed = 3,
}

/// A `REQ` descriptor for the `len` bytes at `off` of region `region`, sent on `socket`.
/// `None` if the offset does not fit (regions reach 16 TiB: 44 bits).
pub fn handle_desc(region: u16, off: u64, len: u32, socket: u16) -> Option<Desc> {
    if off >> 44 != 0 {
        return None;
    }
    Some(Desc {
        buf: off as u32,
        len,
        flags: REQ_HANDLE | u32::from(region) << 12 | (off >> 32) as u32,
        aux: u32::from(socket),
    })
}

/// The (region, offset) of a `REQ_HANDLE` descriptor.
pub fn handle_of(d: &Desc) -> (u16, u64) {
    (
        (d.flags >> 12) as u16,
        u64::from(d.flags & 0xfff) << 32 | u64::from(d.buf),
    )
}

/// The completion of send `d`, on `RX`.
pub fn done_desc(d: &Desc, status: SendStatus) -> Desc {
    Desc {
        buf: d.buf,
        len: RX_DONE | status as u32,
        flags: d.flags,
        aux: d.aux,
    }
}

/// The status of a completion (`None`: not a completion, or an unknown status).
pub fn done_status(d: &Desc) -> Option<SendStatus> {
    if d.len & RX_DONE == 0 {
        return None;
    }
    match d.len & !RX_DONE {
        0 => Some(SendStatus::Sent),
        1 => Some(SendStatus::Miss),
        2 => Some(SendStatus::Refused),
        3 => Some(SendStatus::Failed),
        _ => None,
    }
}

/// The socket and source of a delivery descriptor.
pub fn rx_meta(d: &Desc) -> (u16, SocketAddrV4) {
    (
        d.flags as u16,
        SocketAddrV4::new(Ipv4Addr::from(d.aux), (d.flags >> 16) as u16),
    )
}

/// Region window ring: empty receive buffers of the small class, application → server.
pub const POST_SMALL: usize = 2;
/// Region window ring: empty receive buffers of the large class, application → server.
pub const POST_LARGE: usize = 3;

/// Bytes of a small posted receive buffer: the 8-byte source, then up to 2,040 bytes of
/// datagram (every datagram of a 1,500-byte MTU).
pub const SMALL_POST: u32 = 2048;
/// Bytes of a large posted receive buffer: the source and the largest UDP datagram.
pub const LARGE_POST: u32 = 65_536;
/// Bytes at the start of a posted receive buffer that carry the datagram's source.
pub const RECV_HEADER: usize = 8;

/// The posted-buffer ring a datagram of `len` bytes is delivered from.
pub fn post_ring_for(len: usize) -> usize {
    if len + RECV_HEADER <= SMALL_POST as usize {
        POST_SMALL
    } else {
        POST_LARGE
    }
}

/// An application's window under `--isolation regions`: rings only (`REQ`, `RX`,
/// `POST_SMALL`, `POST_LARGE`). The window format always has a pool set; this one's single
/// 64-byte buffer is taken by neither side, so nothing the application writes there is read.
pub fn region_window_spec() -> ChannelSpec {
    let ring = RingSpec {
        capacity: APP_RING,
        wakeups: true,
    };
    ChannelSpec {
        rings: vec![ring; 4],
        pools: PoolSpec {
            pools: 1,
            buffers_per_pool: 1,
            data_size: 64,
            policy: AllocPolicy::Lifo,
            ..PoolSpec::default()
        },
        page: PageSize::Small,
    }
}

/// A `POST_*` descriptor: the `cap` bytes at `off` of region `region` may receive a
/// datagram. `None` if the offset does not fit (44 bits).
pub fn post_desc(region: u16, off: u64, cap: u32) -> Option<Desc> {
    handle_desc(region, off, cap, 0).map(|d| Desc {
        flags: d.flags & !REQ_HANDLE,
        ..d
    })
}

/// The (region, offset) a `POST_*` or region-window delivery descriptor names.
pub fn posted_handle(d: &Desc) -> (u16, u64) {
    // `handle_of` reads the region's 16 bits below the REQ_HANDLE flag.
    handle_of(d)
}

/// A region-window delivery: `len` bytes of datagram for `socket` in the posted buffer `post`
/// (its source in the buffer's first [`RECV_HEADER`] bytes).
pub fn region_rx_desc(post: &Desc, len: u32, socket: u16) -> Desc {
    Desc {
        buf: post.buf,
        len,
        flags: post.flags,
        aux: u32::from(socket),
    }
}

// ---------------------------------------------------------------------------------- TCP
//
// A TCP socket of an application (docs/tcp.md, "In the server") uses the rings as a UDP
// socket does — its bytes go out as sends and come in as deliveries — plus two kinds of
// descriptor of its own: operations on `REQ`, ordered with the sends before them (a close
// after a write closes after the write), and events on `RX`, ordered with the deliveries
// before them (end of stream after the last byte).

/// `REQ` flag: the descriptor is an operation on socket `aux` ([`TcpOp`] in `len`), not a
/// send. Never set with [`REQ_HANDLE`].
pub const REQ_OP: u32 = 1 << 30;

/// An operation on a TCP socket, carried on `REQ` (its code in `len`, its argument in
/// `buf`) or, in `ipc`, in a `TAG_OP` packet (code, then argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOp {
    /// No more data from us: a FIN follows what was sent (`shutdown(SHUT_WR)`).
    Shutdown,
    /// Let go of the socket: the connection closes in order after what was sent (a
    /// listener stops listening). The server answers with [`TcpEvent::Released`].
    Close,
    /// Let go of the socket with a reset (`SO_LINGER` of zero). Answered by `Released`.
    Abort,
    /// Let go of the socket as [`TcpOp::Close`] does, but the server keeps its number until
    /// the FIN is acknowledged or the connection ends (`SO_LINGER` with a time): `Released`
    /// then says every byte reached the peer, unless a `Failed` came before it. Bytes still
    /// unread, or arriving meanwhile, reset the connection (`Failed(Reset)`), as a close
    /// with unread bytes does (RFC 2525 §2.17).
    CloseLinger,
    /// Nagle's algorithm off (`TCP_NODELAY`).
    NoDelayOn,
    /// Nagle's algorithm on.
    NoDelayOff,
    /// Keepalive probes on (`SO_KEEPALIVE`).
    KeepaliveOn,
    /// Keepalive probes off.
    KeepaliveOff,
    /// The send buffer, bytes (`SO_SNDBUF`): on a connection from now on, on a listener
    /// for the connections it accepts from now on.
    SendBuffer(u32),
    /// The receive buffer, bytes (`SO_RCVBUF`), as [`TcpOp::SendBuffer`]; set on a listener
    /// it also chooses its connections' window scale.
    RecvBuffer(u32),
    /// On a listener: the application took one of the connections it announced
    /// (`accept`). The server announces at most the listen backlog's worth of connections
    /// not yet taken; the rest wait in the stack's accept queue, and past it SYNs are
    /// dropped (or answered with cookies), as a kernel's full backlog does.
    Claimed,
    /// The application uses the socket again after a `fork` shared it
    /// (`crate::client::Client::prepare_fork`): its bytes, events and connections come to
    /// this application from now on, not to the other holders (docs/preload.md, "fork").
    Resume,
}

impl TcpOp {
    /// The operation code `code` with argument `arg` names, if it names one.
    pub fn decode(code: u32, arg: u32) -> Option<Self> {
        Some(match code {
            1 => Self::Shutdown,
            2 => Self::Close,
            3 => Self::Abort,
            4 => Self::NoDelayOn,
            5 => Self::NoDelayOff,
            6 => Self::KeepaliveOn,
            7 => Self::KeepaliveOff,
            8 => Self::SendBuffer(arg),
            9 => Self::RecvBuffer(arg),
            10 => Self::CloseLinger,
            11 => Self::Claimed,
            12 => Self::Resume,
            _ => return None,
        })
    }

    /// The operation a `REQ` descriptor names (with [`REQ_OP`]), if it names one.
    pub fn of_desc(d: &Desc) -> Option<Self> {
        Self::decode(d.len, d.buf)
    }

    /// Its code.
    pub fn code(self) -> u32 {
        match self {
            Self::Shutdown => 1,
            Self::Close => 2,
            Self::Abort => 3,
            Self::NoDelayOn => 4,
            Self::NoDelayOff => 5,
            Self::KeepaliveOn => 6,
            Self::KeepaliveOff => 7,
            Self::SendBuffer(_) => 8,
            Self::RecvBuffer(_) => 9,
            Self::CloseLinger => 10,
            Self::Claimed => 11,
            Self::Resume => 12,
        }
    }

    /// Its argument (0 for an operation that takes none).
    pub fn arg(self) -> u32 {
        match self {
            Self::SendBuffer(n) | Self::RecvBuffer(n) => n,
            _ => 0,
        }
    }
}

/// The socket number the application's own events come on ([`TcpEvent::Opened`]): never
/// a socket's.
pub const APP_EVENTS: u16 = u16::MAX;

/// The operation code of a connect (its port shares `len`): see [`connect_desc`].
const OP_CONNECT: u32 = 0xc0;

/// A `REQ` descriptor opening a connection to `to`, named `ticket` until the server answers
/// with [`TcpEvent::Opened`] on [`APP_EVENTS`] (the ticket in `aux`, the address in `buf`,
/// the port beside the code in `len`).
pub fn connect_desc(ticket: u32, to: SocketAddrV4) -> Desc {
    Desc {
        buf: u32::from(*to.ip()),
        len: OP_CONNECT | u32::from(to.port()) << 16,
        flags: REQ_OP,
        aux: ticket,
    }
}

/// The ticket and address of a connect descriptor (`None`: not one).
pub fn connect_of(d: &Desc) -> Option<(u32, SocketAddrV4)> {
    (d.flags & REQ_OP != 0 && d.len & 0xffff == OP_CONNECT).then(|| {
        (
            d.aux,
            SocketAddrV4::new(Ipv4Addr::from(d.buf), (d.len >> 16) as u16),
        )
    })
}

/// Whether `d` is an `Abort` (which does not wait behind the socket's parked sends: it
/// drops them).
pub fn is_abort(d: &Desc) -> bool {
    d.flags & REQ_OP != 0 && TcpOp::of_desc(d) == Some(TcpOp::Abort)
}

/// A `REQ` descriptor for operation `op` on `socket`.
pub fn op_desc(socket: u16, op: TcpOp) -> Desc {
    Desc {
        buf: op.arg(),
        len: op.code(),
        flags: REQ_OP,
        aux: u32::from(socket),
    }
}

/// `RX` length bit: the descriptor is an event of socket `flags` (see [`TcpEvent`]), not a
/// delivery or a completion.
pub const RX_EVENT: u32 = 1 << 30;

/// Why a connection ended other than in order, as an event carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum TcpFailure {
    /// The peer reset it (`ECONNRESET`).
    Reset = 1,
    /// The peer refused to connect (`ECONNREFUSED`).
    Refused = 2,
    /// Retransmissions or keepalive probes went unanswered (`ETIMEDOUT`).
    TimedOut = 3,
    /// The server's stack could not carry it (no buffer, no route).
    Failed = 4,
    /// A "host unreachable" (or "administratively prohibited") answered its SYN
    /// (`EHOSTUNREACH`).
    HostUnreachable = 5,
    /// A "network unreachable" answered its SYN (`ENETUNREACH`).
    NetUnreachable = 6,
}

impl TcpFailure {
    /// The failure coded `code` (its discriminant); an unknown code is [`TcpFailure::Failed`].
    fn of_code(code: u32) -> TcpFailure {
        match code {
            1 => TcpFailure::Reset,
            2 => TcpFailure::Refused,
            3 => TcpFailure::TimedOut,
            5 => TcpFailure::HostUnreachable,
            6 => TcpFailure::NetUnreachable,
            _ => TcpFailure::Failed,
        }
    }
}

impl std::fmt::Display for TcpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Reset => "was reset by the peer",
            Self::Refused => "was refused: nothing listens there",
            Self::TimedOut => "timed out: the peer stopped answering",
            Self::Failed => "failed in the server's stack",
            Self::HostUnreachable => "failed: the host cannot be reached",
            Self::NetUnreachable => "failed: the network cannot be reached",
        })
    }
}

/// Something that happened to a TCP socket, delivered on `RX` in order with its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpEvent {
    /// A connection the application opened is established.
    Connected,
    /// A listener has a new connection: socket number `socket`, from `peer`.
    Accepted {
        /// The new connection's socket number.
        socket: u16,
        /// Who connected.
        peer: SocketAddrV4,
    },
    /// The peer sent its last byte (every byte before it was delivered).
    Eof,
    /// The connection ended badly; nothing more comes.
    Failed(TcpFailure),
    /// The server has let go of the socket after a `Close` or `Abort`: nothing more comes
    /// for this number, and the server may give it to a new socket.
    Released,
    /// A UDP socket's datagram to `peer` was answered by an ICMP destination-unreachable
    /// of a kind Linux reports to a connected socket (port: [`TcpFailure::Refused`]; host:
    /// [`TcpFailure::HostUnreachable`]; network: [`TcpFailure::NetUnreachable`]). Nothing
    /// ends: the socket works on, and the application decides whether to tell anyone.
    Unreachable {
        /// What could not be reached.
        failure: TcpFailure,
        /// Where the datagram was going.
        peer: SocketAddrV4,
    },
    /// On [`APP_EVENTS`]: the connect named `ticket` has socket number `socket` and local
    /// port `port` (its `Connected` or `Failed` follows on the socket), or (`socket` of
    /// [`APP_EVENTS`]) could not be opened at all.
    Opened {
        /// The connect's ticket.
        ticket: u32,
        /// Its socket number ([`APP_EVENTS`]: none, it failed).
        socket: u16,
        /// Its local port.
        port: u16,
    },
}

const EV_CONNECTED: u32 = 1;
const EV_ACCEPTED: u32 = 2;
const EV_EOF: u32 = 3;
const EV_FAILED: u32 = 4;
const EV_RELEASED: u32 = 5;
const EV_OPENED: u32 = 6;
const EV_UNREACHABLE: u32 = 7;

/// The `RX` descriptor of `ev` on `socket`: the kind in the low byte of `len` (beside
/// [`RX_EVENT`]), a port in its bits 8–23, a socket number in `buf`, an address or reason
/// in `aux`.
pub fn event_desc(socket: u16, ev: TcpEvent) -> Desc {
    let (kind, port, buf, aux) = match ev {
        TcpEvent::Connected => (EV_CONNECTED, 0, 0, 0),
        TcpEvent::Accepted { socket, peer } => (
            EV_ACCEPTED,
            peer.port(),
            u32::from(socket),
            u32::from(*peer.ip()),
        ),
        TcpEvent::Eof => (EV_EOF, 0, 0, 0),
        TcpEvent::Failed(f) => (EV_FAILED, 0, 0, f as u32),
        TcpEvent::Released => (EV_RELEASED, 0, 0, 0),
        TcpEvent::Unreachable { failure, peer } => (
            EV_UNREACHABLE,
            peer.port(),
            failure as u32,
            u32::from(*peer.ip()),
        ),
        TcpEvent::Opened {
            ticket,
            socket,
            port,
        } => (EV_OPENED, port, u32::from(socket), ticket),
    };
    Desc {
        buf,
        len: RX_EVENT | u32::from(port) << 8 | kind,
        flags: u32::from(socket),
        aux,
    }
}

/// The socket and event of an event descriptor; `None` if `d` is not one, or is malformed
/// (the server is not trusted either).
pub fn event_of(d: &Desc) -> Option<(u16, TcpEvent)> {
    if d.len & (RX_EVENT | RX_DONE) != RX_EVENT || d.flags > u32::from(u16::MAX) {
        return None;
    }
    let port = (d.len >> 8) as u16;
    let ev = match d.len & 0xff {
        EV_CONNECTED => TcpEvent::Connected,
        EV_ACCEPTED => TcpEvent::Accepted {
            socket: u16::try_from(d.buf).ok()?,
            peer: SocketAddrV4::new(Ipv4Addr::from(d.aux), port),
        },
        EV_EOF => TcpEvent::Eof,
        EV_FAILED => TcpEvent::Failed(TcpFailure::of_code(d.aux)),
        EV_RELEASED => TcpEvent::Released,
        EV_UNREACHABLE => TcpEvent::Unreachable {
            failure: match TcpFailure::of_code(d.buf) {
                f @ (TcpFailure::Refused
                | TcpFailure::HostUnreachable
                | TcpFailure::NetUnreachable) => f,
                _ => return None,
            },
            peer: SocketAddrV4::new(Ipv4Addr::from(d.aux), port),
        },
        EV_OPENED => TcpEvent::Opened {
            ticket: d.aux,
            socket: u16::try_from(d.buf).ok()?,
            port,
        },
        _ => return None,
    };
    Some((d.flags as u16, ev))
}

#[cfg(test)]
mod tcp_tests {
    use super::*;

    #[test]
    fn events_round_trip_and_junk_is_refused() {
        let peer = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 40_000);
        for ev in [
            TcpEvent::Connected,
            TcpEvent::Accepted { socket: 77, peer },
            TcpEvent::Eof,
            TcpEvent::Failed(TcpFailure::Reset),
            TcpEvent::Failed(TcpFailure::TimedOut),
            TcpEvent::Released,
            TcpEvent::Unreachable {
                failure: TcpFailure::Refused,
                peer,
            },
            TcpEvent::Unreachable {
                failure: TcpFailure::NetUnreachable,
                peer,
            },
            TcpEvent::Opened {
                ticket: 0xdead_beef,
                socket: 4,
                port: 50_000,
            },
        ] {
            assert_eq!(event_of(&event_desc(513, ev)), Some((513, ev)));
        }
        let junk = Desc {
            buf: 0,
            len: RX_EVENT | 99,
            flags: 1,
            aux: 0,
        };
        assert_eq!(event_of(&junk), None);
        assert_eq!(event_of(&Desc::new(3, 100)), None);
        for code in 1..=12 {
            let op = TcpOp::decode(code, 70_000).expect("a code");
            assert_eq!(op.code(), code);
            assert_eq!(TcpOp::of_desc(&op_desc(4, op)), Some(op));
        }
        assert_eq!(TcpOp::decode(9, 70_000), Some(TcpOp::RecvBuffer(70_000)));
        assert_eq!(TcpOp::decode(0, 0), None);
        assert_eq!(TcpOp::decode(10, 0), Some(TcpOp::CloseLinger));
        assert_eq!(TcpOp::decode(11, 0), Some(TcpOp::Claimed));
        assert_eq!(TcpOp::decode(12, 0), Some(TcpOp::Resume));
        assert_eq!(TcpOp::decode(13, 0), None);
        let to = SocketAddrV4::new(Ipv4Addr::new(192, 168, 1, 2), 443);
        let d = connect_desc(77, to);
        assert_eq!(connect_of(&d), Some((77, to)));
        assert_eq!(TcpOp::of_desc(&d), None);
        assert_eq!(connect_of(&op_desc(3, TcpOp::Close)), None);
    }
}
