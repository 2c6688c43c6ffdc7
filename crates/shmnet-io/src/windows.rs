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

/// Data window ring: IPv4 frames, driver → server (the seed's IN queue for one family).
pub const IN_IPV4: usize = 0;
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
