//! shmnet-stack: the protocol server's stack — Ethernet II, ARP, IPv4 with fragmentation and
//! reassembly, ICMP (echo, port unreachable), UDP sockets and TCP ([`tcp`], docs/tcp.md) —
//! over buffer chains; and, given an IPv6 address, enough IPv6 to be resolved and pinged
//! (neighbour discovery and ICMPv6 echo, [`ipv6`]).
//!
//! # Shape
//!
//! The stack is *sans-I/O*, in the manner of quinn-proto: it has no threads, makes no
//! system calls and reads no clock. The caller owns the device and the clock and drives an
//! [`Interface`]:
//!
//! * [`Interface::receive`] takes one received frame (a pool buffer) and the current
//!   [`Instant`]; frames to transmit in answer (ARP replies, ICMP, frames released by an ARP
//!   answer) are handed to a [`TxSink`];
//! * [`Interface::poll`] runs the timers (reassembly timeouts, ARP retries and expiry);
//!   [`Interface::poll_at`] says when it next has work;
//! * [`Interface::udp_bind`], [`Interface::udp_recv`], [`Interface::udp_recv_chain`] and
//!   [`Interface::udp_send_to`] are UDP's socket calls; [`Interface::tcp_listen`],
//!   [`Interface::tcp_accept`], [`Interface::tcp_connect`], [`Interface::tcp_send`],
//!   [`Interface::tcp_recv`], [`Interface::tcp_shutdown`] and [`Interface::tcp_close`]
//!   TCP's (its answers to received segments go out at the next `poll`).
//!
//! # Memory
//!
//! The stack owns no packet memory. Every buffer comes from a [`BufferPool`] passed into
//! each call — a [`HeapPool`] in tests, benchmarks and fuzzing, shmnet-chan's shared-memory
//! pools in the server. A buffer is addressed by a [`BufIdx`] and has a header (`next`,
//! `off`, `len`); see [`buf`]. This is what the source documents are about (seed 000,
//! section 2): a 14,792-byte UDP message arrives as ten fragments in ten buffers, reassembly
//! links those buffers into a chain (narrowing each to its payload), UDP queues that chain on
//! the socket, and only `recv` copies the bytes — buffer by buffer, through a
//! [`RecvHook`] so the residency probe can time each copy.
//!
//! Buffer conservation is the central invariant: a buffer handed to the stack is either held
//! (a fragment in the reassembly table, a message on a socket queue, a frame waiting for
//! ARP), handed back to the caller (transmit, `recv_chain`), or freed. Every refused frame
//! is counted in [`Stats`] under a name. No input makes the stack panic.
//!
//! # Why smoltcp's wire module, and not the rest of smoltcp
//!
//! Headers are read and written with smoltcp's `wire` module: checked `Packet<T>` views whose
//! accessors cannot run past the buffer, and `Repr` emitters — well-tested code rather than
//! hand-written offsets. Reassembly, the neighbour cache's pending queue and the sockets are
//! our own: smoltcp's socket layer and fragment assembler copy payload into buffers they own
//! (contiguous ring buffers), whereas ours must keep data in the pool buffers the driver
//! filled — in memory shared with other processes — and link them into chains without
//! copying.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod arp;
pub mod bench;
pub mod buf;
pub mod checksum;
pub mod eth;
pub mod frag;
pub mod fuzzing;
pub mod icmp;
pub mod iface;
pub mod igmp;
pub mod ipv4;
pub mod ipv6;
pub mod reasm;
pub mod rows;
pub mod socket;
pub mod stats;
pub mod tcp;
pub mod tcp_bench;
pub mod udp;

/// The wire layer in one place, for every party that reads or writes frames (the stack
/// itself, the drivers, the lab's instruments): the header views and emitters of each
/// protocol, built on smoltcp's `wire` module, and the one Internet-checksum implementation.
/// A driver that sorts, checks, builds or patches frames does it with these, so the stack
/// and its drivers agree on every field by construction.
pub mod wire {
    pub use crate::checksum::{self, Sum};
    pub use crate::{arp, eth, icmp, ipv4, ipv6, udp};
    pub use smoltcp::wire::{ArpOperation, ArpRepr, EthernetAddress, EthernetProtocol, IpProtocol};
}

pub use buf::{BufIdx, BufferPool, DEFAULT_BUF_CAPACITY, HeapPool};
pub use iface::{
    BindError, Config, Interface, MulticastError, MulticastOp, RecvError, SendError, TxSink,
};
pub use smoltcp::wire::EthernetAddress;
pub use socket::{Message, NoHook, RecvHook, RecvInfo, SocketHandle};
pub use stats::Stats;

/// A point in time, in nanoseconds from an origin the caller chooses (monotonic), up to
/// `u64::MAX - 1` (later instants saturate there: 584 years).
///
/// Held as nanoseconds + 1 in a `NonZeroU64`, so that `Option<Instant>` is 8 bytes, not
/// 16: a TCP connection keeps eight of them (its timers), and its state has a budget of
/// 512 bytes (docs/tcp.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(core::num::NonZeroU64);

impl Default for Instant {
    fn default() -> Self {
        Self::ZERO
    }
}

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant::from_nanos(0);

    /// `ns` nanoseconds after the origin.
    pub const fn from_nanos(ns: u64) -> Instant {
        match core::num::NonZeroU64::new(ns.saturating_add(1)) {
            Some(v) => Instant(v),
            None => unreachable!(),
        }
    }

    /// `ms` milliseconds after the origin.
    pub const fn from_millis(ms: u64) -> Instant {
        Instant::from_nanos(ms.saturating_mul(1_000_000))
    }

    /// `s` seconds after the origin.
    pub const fn from_secs(s: u64) -> Instant {
        Instant::from_nanos(s.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds after the origin.
    pub const fn nanos(self) -> u64 {
        self.0.get() - 1
    }

    /// This instant plus `d` (saturating).
    pub fn after(self, d: core::time::Duration) -> Instant {
        Instant::from_nanos(
            self.nanos()
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}
