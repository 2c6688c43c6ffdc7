//! The pool is TCP's memory: every queued byte, either way, lies in a pool buffer (the
//! receive queue in the buffers the driver filled, the send queue in buffers the
//! application's bytes were written into). What a connection may queue therefore depends on
//! how much of the pool is free, in the bands of [`PoolLevel`] — after Linux's `tcp_mem`
//! (below its pressure mark anything goes; above it buffers shrink; past its hard limit no
//! socket may charge more), with one difference: a pool is a fixed set of buffers that the
//! driver needs to receive into and every ACK, RST and UDP datagram needs to be sent from,
//! so the last thirty-second of it is never given to TCP's queues at all.
//!
//! Without these bands, applications that never read with writers flooding them held the
//! whole pool: eight such pairs on a 4,096-buffer pool (half of it lent to the never-readers
//! as chains, the rest in the writers' send queues and the never-readers' receive queues)
//! left no buffer for anyone else's datagram, ACK or RST — `tcp_hostile`'s never-readers.
//!
//! The bands, by the share of the pool free:
//!
//! | free | level | what the stack does |
//! |---|---|---|
//! | ≥ ½ | `Ample` | buffers may grow (autotuning) |
//! | ≥ ¼ | `Normal` | nothing grows |
//! | ≥ ⅛ | `Pressure` | a grown buffer counts as its configured size |
//! | ≥ 1/32 | `Scarce` | each connection queues at most [`FLOOR_SEGMENTS`] segments a direction; out-of-order segments are dropped |
//! | ≥ 1/64 | `Exhausted` | arriving payload is dropped and counted (`pool_drops`), but for the segment that fills the hole in front of a connection's out-of-order bytes; a connection's send queue takes up to [`SEND_FLOOR_SEGMENTS`] segments |
//! | less | `Reserved` | the driver's and the ACKs' reserve: no queue takes another buffer, and a connection that gets a segment drops what it holds out of order (RFC 2018 lets a receiver renege on what it SACKed; Linux's `tcp_prune_ofo_queue`), counted (`ooo_pruned`) |
//!
//! The floor is what keeps an honest connection going while others hold the pool: its
//! window and its send queue shrink to a few segments instead of to nothing. What a
//! connection queued before the level fell stays (a window offered is a promise; bytes
//! queued are the application's); the bands bound what is added.
//!
//! The send floor and the reserve are what keep one application's connections from
//! wedging the server (found by a hostile tester: an echo server under `shmnet run` that
//! writes before it reads again, fed by 200 connections at once). Their unread bytes filled
//! the pool; the echo's writes then found no room, so it never read again; and with no
//! buffer left to receive an ACK into or send one from, nothing moved at all, for every
//! application. Now receive queues stop a thirty-second short of the end, where every
//! connection may still send a couple of segments — each answered by an ACK, received into
//! the reserve, that frees them — so a writer blocked on its writes moves on, reads, and
//! frees the pool, as Linux guarantees every socket its `tcp_wmem` minimum. (Slowly, when
//! hundreds of connections share that band; sharing the pool fairly between applications
//! is not built: docs/tcp.md.)

use crate::buf::BufferPool;

/// Segments each connection may queue in each direction while the pool is scarce: enough
/// to keep a connection moving (a window of this many segments per round trip), few enough
/// that many connections cannot take the last of the pool with it.
pub const FLOOR_SEGMENTS: u32 = 8;

/// Segments each connection may queue to send while the pool is exhausted: some progress
/// for every writer, whatever the receive queues hold (module docs).
pub const SEND_FLOOR_SEGMENTS: u32 = 2;

/// How much of the pool is free, in the bands the stack's memory rules act on (module
/// docs). Ordered from most free to least.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum PoolLevel {
    /// Half of the pool or more is free.
    #[default]
    Ample,
    /// A quarter to a half.
    Normal,
    /// An eighth to a quarter.
    Pressure,
    /// A thirty-second to an eighth.
    Scarce,
    /// A sixty-fourth to a thirty-second.
    Exhausted,
    /// Less than a sixty-fourth: the reserve no queue takes from.
    Reserved,
}

impl PoolLevel {
    /// The level of `pool` now (one read of its free count).
    pub fn of<P: BufferPool + ?Sized>(pool: &P) -> Self {
        Self::from_counts(pool.free_count(), pool.total())
    }

    /// The level of a pool of `total` buffers with `free` of them free.
    pub fn from_counts(free: usize, total: usize) -> Self {
        let free = free as u128;
        let total = total as u128;
        if free * 2 >= total {
            Self::Ample
        } else if free * 4 >= total {
            Self::Normal
        } else if free * 8 >= total {
            Self::Pressure
        } else if free * 32 >= total {
            Self::Scarce
        } else if free * 64 >= total {
            Self::Exhausted
        } else {
            Self::Reserved
        }
    }

    /// Whether buffers may grow (autotuning).
    pub fn may_grow(self) -> bool {
        self == Self::Ample
    }

    /// Whether a grown buffer counts as its configured size.
    pub fn under_pressure(self) -> bool {
        self >= Self::Pressure
    }

    /// Whether segments that arrive out of order are dropped rather than held.
    pub fn drops_out_of_order(self) -> bool {
        self >= Self::Scarce
    }

    /// The most bytes one connection may hold received in order at this level
    /// (`u32::MAX`: only its buffer bounds it), for segments of `smss` bytes.
    pub fn queue_cap(self, smss: u16) -> u32 {
        match self {
            Self::Ample | Self::Normal | Self::Pressure => u32::MAX,
            Self::Scarce => FLOOR_SEGMENTS * u32::from(smss),
            Self::Exhausted | Self::Reserved => 0,
        }
    }

    /// The most bytes one connection may hold queued to send at this level: as received,
    /// but for the exhausted pool's send floor.
    pub fn send_cap(self, smss: u16) -> u32 {
        match self {
            Self::Exhausted => SEND_FLOOR_SEGMENTS * u32::from(smss),
            other => other.queue_cap(smss),
        }
    }

    /// Whether even the segment that fills a hole is refused, and what is held out of
    /// order is given up.
    pub fn reserved(self) -> bool {
        self == Self::Reserved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bands_follow_the_free_share() {
        let level = |free| PoolLevel::from_counts(free, 4096);
        assert_eq!(level(4096), PoolLevel::Ample);
        assert_eq!(level(2048), PoolLevel::Ample);
        assert_eq!(level(2047), PoolLevel::Normal);
        assert_eq!(level(1024), PoolLevel::Normal);
        assert_eq!(level(1023), PoolLevel::Pressure);
        assert_eq!(level(512), PoolLevel::Pressure);
        assert_eq!(level(511), PoolLevel::Scarce);
        assert_eq!(level(128), PoolLevel::Scarce);
        assert_eq!(level(127), PoolLevel::Exhausted);
        assert_eq!(level(64), PoolLevel::Exhausted);
        assert_eq!(level(63), PoolLevel::Reserved);
        assert_eq!(level(0), PoolLevel::Reserved);
        // A pool of nothing is exhausted only in name: nothing is ever queued in it.
        assert_eq!(PoolLevel::from_counts(0, 0), PoolLevel::Ample);
    }

    #[test]
    fn caps_shrink_with_the_level() {
        assert_eq!(PoolLevel::Pressure.queue_cap(1460), u32::MAX);
        assert_eq!(PoolLevel::Scarce.queue_cap(1460), 8 * 1460);
        assert_eq!(PoolLevel::Exhausted.queue_cap(1460), 0);
        assert_eq!(PoolLevel::Exhausted.send_cap(1460), 2 * 1460);
        assert_eq!(PoolLevel::Reserved.send_cap(1460), 0);
        assert_eq!(PoolLevel::Scarce.send_cap(1460), 8 * 1460);
        assert!(PoolLevel::Pressure.under_pressure() && !PoolLevel::Normal.under_pressure());
        assert!(PoolLevel::Ample.may_grow() && !PoolLevel::Normal.may_grow());
    }
}
