//! Datagrams lent where they lie, for [`super::UdpSocket::recv_in_place`].
//!
//! `recv` copies a datagram into the caller's buffer. An application that only reads its
//! datagrams (parses, sums, forwards) need not: it can borrow them where they are, for the
//! length of a closure, and the library gives the memory back when the closure returns.
//!
//! - Under `--isolation regions` the datagram lies in a receive buffer of the
//!   application's own region, where the server copied it (the one copy on the way from
//!   the driver, done on the trusted side): one contiguous slice.
//! - Under `--isolation shared` it lies in the driver's pool buffers, in the data window: a
//!   chain of segments (a datagram larger than one pool buffer is several).
//! - In the `ipc` structure it came in a packet on a socket: the packet's bytes.
//!
//! Whatever lends them, the bytes are the server's work and are checked as such: the
//! bounds of every segment were validated before the closure sees it, and an isolated
//! application's buffer is lent only if it was posted (a server naming one buffer twice
//! is refused). Their contents are data, to be treated as untrusted like any datagram's —
//! and, since the memory is shared with the server, as bytes a misbehaving server could
//! change while they are borrowed: parse what you need once (or copy it), do not check a
//! field and read it again. An honest server writes nothing it has delivered.

use shmnet_chan::Buffers;
use shmnet_stack::{BufIdx, RecvHook};
use std::net::SocketAddrV4;

/// A received datagram, borrowed where it lies (see the module docs).
pub struct Lent<'a> {
    source: SocketAddrV4,
    len: usize,
    bytes: Bytes<'a>,
}

/// Where the bytes lie.
enum Bytes<'a> {
    /// One contiguous run: a posted receive buffer, or an `ipc` packet. `BufIdx` names the
    /// buffer for an instrument ([`RecvHook`]).
    Whole(BufIdx, &'a [u8]),
    /// A chain of pool buffers at `head`, `len` bytes long at most, owned by the application
    /// until it is returned (after the closure).
    Chain { bufs: &'a Buffers, head: BufIdx },
}

impl<'a> Lent<'a> {
    /// A datagram in one contiguous run (`buf` names it for an instrument).
    pub(super) fn whole(buf: BufIdx, data: &'a [u8], source: SocketAddrV4) -> Self {
        Self {
            source,
            len: data.len(),
            bytes: Bytes::Whole(buf, data),
        }
    }

    /// The datagram of `len` bytes in the chain at `head` of `bufs`, which the caller owns
    /// while this lives. A chain that ends short (or at a bad link) lends what it has:
    /// [`Lent::len`] counts the bytes its segments really hold.
    pub(super) fn chain(bufs: &'a Buffers, head: BufIdx, len: usize, source: SocketAddrV4) -> Self {
        let mut lent = Self {
            source,
            len,
            bytes: Bytes::Chain { bufs, head },
        };
        lent.len = lent.indexed_segments().map(|(_, s)| s.len()).sum();
        lent
    }

    /// Who sent it.
    pub fn source(&self) -> SocketAddrV4 {
        self.source
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (a datagram may be).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its bytes in one slice, if they lie in one run (always under `--isolation regions`
    /// and in `ipc`; under `--isolation shared` only for a datagram of one pool buffer).
    pub fn contiguous(&self) -> Option<&[u8]> {
        match self.bytes {
            Bytes::Whole(_, data) => Some(data),
            Bytes::Chain { .. } => {
                let mut segs = self.segments();
                let first = segs.next().unwrap_or_default();
                segs.next().is_none().then_some(first)
            }
        }
    }

    /// Its bytes, run by run, in order.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.indexed_segments().map(|(_, s)| s)
    }

    /// Copies as much as fits into `buf`; returns how many bytes were copied.
    pub fn copy_to(&self, buf: &mut [u8]) -> usize {
        self.copy_to_with(buf, &mut shmnet_stack::NoHook)
    }

    /// As [`Lent::copy_to`], calling `hook` around the copy of each buffer (the residency
    /// probe times each one).
    pub(super) fn copy_to_with<H: RecvHook + ?Sized>(&self, buf: &mut [u8], hook: &mut H) -> usize {
        let mut copied = 0;
        for (idx, data) in self.indexed_segments() {
            if copied == buf.len() {
                break;
            }
            let n = data.len().min(buf.len() - copied);
            let (src, dst) = (&data[..n], &mut buf[copied..copied + n]);
            if hook.active() {
                hook.on_buffer(idx, src);
                dst.copy_from_slice(src);
                hook.after_buffer(idx, src);
            } else {
                dst.copy_from_slice(src);
            }
            copied += n;
        }
        copied
    }

    /// Its runs with the buffer each lies in.
    fn indexed_segments(&self) -> impl Iterator<Item = (BufIdx, &[u8])> + '_ {
        let (whole, chain) = match self.bytes {
            Bytes::Whole(idx, data) => (Some((idx, data)), None),
            Bytes::Chain { bufs, head } => (None, Some((bufs, head))),
        };
        // The chain lies in shared memory: shmnet-chan's walk validates each link and
        // range once; a bad one (or the chain's end) ends the walk.
        let walk = chain.into_iter().flat_map(move |(bufs, head)| {
            bufs.segments(head, self.len)
                .map_while(Result::ok)
                .map_while(move |seg| {
                    // SAFETY: the application owns the chain while it is lent (it is returned
                    // only after the borrow of `self` ends).
                    let data = unsafe { bufs.segment_bytes(seg) }.ok()?;
                    Some((seg.idx(), data))
                })
        });
        whole.into_iter().chain(walk)
    }
}

impl std::fmt::Debug for Lent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent")
            .field("source", &self.source)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}
