//! The windows of the `server` structure and what their descriptors mean.
//!
//! - The **data window** holds the packet buffers. The server creates it; the driver fills
//!   its buffers; every application maps it too, so a message it receives is read where the
//!   driver put it (the copy at `recv` is the only one).
//! - Each application gets an **app window** of its own: its request, delivery and return
//!   queues, and a small pool of send buffers.

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

/// The socket and source of a delivery descriptor.
pub fn rx_meta(d: &Desc) -> (u16, SocketAddrV4) {
    (
        d.flags as u16,
        SocketAddrV4::new(Ipv4Addr::from(d.aux), (d.flags >> 16) as u16),
    )
}
