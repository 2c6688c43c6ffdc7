//! UDP sockets: a bounded queue of received messages, each still in the buffer chain it
//! arrived in, and the copy out at `recv`, buffer by buffer, through a [`RecvHook`].

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use crate::buf::{BufIdx, BufferPool, chain_segments};

/// A handle on a bound UDP socket of one [`crate::Interface`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SocketHandle(pub(crate) usize);

/// A received message waiting on a socket: `len` payload bytes in the chain at `head`
/// (`bufs` buffers, the first narrowed past the UDP header).
///
/// Whoever takes a `Message` out of a socket (see [`crate::Interface::udp_recv_chain`])
/// owns its buffers and must free the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// First buffer of the chain.
    pub head: BufIdx,
    /// Payload bytes.
    pub len: usize,
    /// Buffers in the chain.
    pub bufs: usize,
    /// The sender.
    pub src: SocketAddrV4,
}

/// Called around the copy of each buffer at `recv`, so that an instrument (the residency
/// probe) can time each copy. Both methods default to nothing and are inlined, so
/// [`NoHook`] costs nothing.
pub trait RecvHook {
    /// Whether the hook wants to be called at all: a copy-out path that must do extra work
    /// to show a hook the bytes (the client's, which reads them from a shared window) skips
    /// it when this is false. Constant per type, so it folds away.
    #[inline(always)]
    fn active(&self) -> bool {
        true
    }
    /// Immediately before `data` (the bytes of buffer `buf` about to be copied) is copied
    /// out. The bytes may live in memory another process can write: treat them as untrusted.
    #[inline(always)]
    fn on_buffer(&mut self, buf: BufIdx, data: &[u8]) {
        let _ = (buf, data);
    }
    /// Immediately after that copy.
    #[inline(always)]
    fn after_buffer(&mut self, buf: BufIdx, data: &[u8]) {
        let _ = (buf, data);
    }
    /// After the last buffer of a message (the next one starts another). Called by copiers
    /// that copy whole messages for someone else (the server's copy into an isolated
    /// application's buffer); a receiver that owns the loop knows its message ends itself.
    #[inline(always)]
    fn end_message(&mut self) {}
}

/// The hook that does nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHook;

impl RecvHook for NoHook {
    #[inline(always)]
    fn active(&self) -> bool {
        false
    }
}

/// What `recv` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvInfo {
    /// Bytes copied into the caller's buffer.
    pub len: usize,
    /// Bytes the message had (more than `len` if the caller's buffer was too short: the
    /// rest is discarded, as for a UDP `recv` with `MSG_TRUNC`).
    pub msg_len: usize,
    /// The sender.
    pub src: SocketAddrV4,
}

/// A bound UDP socket.
///
/// Invariant: `queue.len() <= limit`; every queued message's chain is owned by the socket;
/// `queued_bufs` is the sum of the queued messages' buffers.
#[derive(Debug)]
pub struct UdpSocket {
    pub(crate) local: SocketAddrV4,
    pub(crate) queue: VecDeque<Message>,
    pub(crate) limit: usize,
    /// Pool buffers the queued messages hold.
    pub(crate) queued_bufs: usize,
    /// Messages refused because the queue was full.
    pub(crate) overflows: u64,
    /// Host-local flow control (`iface::local_udp`): datagrams sent to this socket through
    /// the loopback and not arrived yet, when that count last moved, and whether senders
    /// are held back.
    pub(crate) from_host: crate::iface::LocalInbound,
    /// ICMP errors about datagrams it sent, oldest first, at most [`UDP_ERRORS_KEPT`]
    /// (the oldest goes first); empty, and unallocated, until one comes. Always empty
    /// unless `keeps_errors`.
    pub(crate) errors: VecDeque<UdpError>,
    /// Whether its owner reads its ICMP errors
    /// ([`crate::Interface::udp_keep_errors`]); off, they are counted and forgotten.
    pub(crate) keeps_errors: bool,
    /// Its groups, and how it sends to groups.
    pub(crate) multicast: crate::iface::SocketMulticast,
}

/// An ICMP destination-unreachable about a datagram a UDP socket sent: what could not be
/// reached, and the datagram's destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpError {
    /// What is unreachable (port: `ECONNREFUSED`; host: `EHOSTUNREACH`; net:
    /// `ENETUNREACH`).
    pub what: crate::icmp::Unreachable,
    /// Where the datagram was going.
    pub to: SocketAddrV4,
}

/// ICMP errors a UDP socket keeps unread at most: a peer's errors come at the rate it is
/// sent to, and an application that does not look at them must not grow the socket.
pub const UDP_ERRORS_KEPT: usize = 8;

impl UdpSocket {
    pub(crate) fn new(local: SocketAddrV4, limit: usize) -> UdpSocket {
        UdpSocket {
            local,
            queue: VecDeque::with_capacity(limit.min(1024)),
            limit,
            queued_bufs: 0,
            overflows: 0,
            from_host: Default::default(),
            errors: VecDeque::new(),
            keeps_errors: false,
            multicast: Default::default(),
        }
    }

    /// Queue a message; `Err(msg)` (not queued) if the queue is full.
    pub(crate) fn push(&mut self, msg: Message) -> Result<(), Message> {
        if self.queue.len() >= self.limit {
            self.overflows += 1;
            return Err(msg);
        }
        self.queued_bufs += msg.bufs;
        self.queue.push_back(msg);
        Ok(())
    }

    /// Take the oldest message.
    pub(crate) fn pop(&mut self) -> Option<Message> {
        let msg = self.queue.pop_front()?;
        self.queued_bufs = self.queued_bufs.saturating_sub(msg.bufs);
        Some(msg)
    }
}

/// Copy `msg` into `dst` buffer by buffer, calling the hook around each non-empty copy,
/// then free its chain. Returns the bytes copied.
pub fn copy_out<P: BufferPool + ?Sized, H: RecvHook + ?Sized>(
    pool: &mut P,
    msg: &Message,
    dst: &mut [u8],
    hook: &mut H,
) -> usize {
    // What will be copied: the message, cut to the caller's buffer.
    let want = msg.len.min(dst.len());
    let dst = &mut dst[..want];
    let mut at = 0;
    for (idx, seg) in chain_segments(pool, msg.head, msg.bufs) {
        let k = seg.len().min(want - at);
        if k > 0 {
            hook.on_buffer(idx, &seg[..k]);
            dst[at..at + k].copy_from_slice(&seg[..k]);
            hook.after_buffer(idx, &seg[..k]);
            at += k;
        }
        if at == want {
            break;
        }
    }
    pool.free_chain(msg.head);
    at
}

/// A fast hasher for the demultiplexing map, whose keys (local address and port) are chosen
/// by local binds, not by the network, so a keyed (DoS-resistant) hash buys nothing there.
#[derive(Clone, Copy, Debug, Default)]
pub struct DemuxHasher(u64);

impl std::hash::Hasher for DemuxHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        // FxHash's step.
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }

    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.write_u64(n as u64);
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.write_u64(n as u64);
    }
}

/// The demultiplexing key: local address and port packed into one word.
#[inline]
pub(crate) fn demux_key(addr: std::net::Ipv4Addr, port: u16) -> u64 {
    ((u32::from(addr) as u64) << 16) | port as u64
}
