//! # shmnet-chan: the shared-memory channel
//!
//! The parties of shmnet — packet driver, protocol server, applications — talk only through
//! *windows*: memfd-backed regions holding a header, descriptor queues, buffer pools and
//! counters. This crate builds them and nothing else; it knows nothing of packets. It is
//! seed 002's shared-memory device interface ("A Shared Memory Device Architecture" through
//! "Free Space") rebuilt with today's atomics:
//!
//! - [`window`]: create a sealed memfd (4 KiB, 2 MiB huge or transparent huge pages), map it
//!   between guard pages, or open one a peer passed, checking seals, size, magic, version and
//!   the whole layout before use. [`handoff`] passes it over a Unix socket.
//! - [`ring`]: SPSC descriptor rings — free-running `u32` indices on separate cache lines, a
//!   cached copy of the peer's index, burst calls, and need-wakeup in both directions over
//!   counting [`signal`]s: an idle consumer sleeps until the producer publishes, a producer
//!   of a full ring sleeps until the consumer frees room.
//! - [`pool`]: N pools of fixed-size buffers, each with its own lock and free list (LIFO,
//!   FIFO or random), try-lock allocation for the driver, a deferred-free queue, reference
//!   counts, chains, and a waiters flag.
//! - [`faithful`]: the seed's own mechanisms beside ours — its asymmetric Peterson mutex and
//!   its double sub-queues with the Enable protocol — for the loom models and the benchmark.
//! - [`chain`]: walking a chain a peer may have built — validated segments, bounded against
//!   cycles, typed errors — and copying its bytes out.
//!
//! ## Why hand-written
//!
//! The queue, the pools and their wake-up protocol are the subject of the work: their memory
//! ordering, cache-line placement and behaviour under a hostile peer are what shmnet
//! measures and documents. General crates (rtrb, crossbeam) assume a trusted peer in the same
//! address space; here every index in shared memory may be a lie. `rtrb` and DPDK's
//! `rte_ring` are the baselines the benchmark measures this ring against.
//!
//! ## The rule for shared memory
//!
//! No pointer lives in a window, only offsets and indices, and every one read from shared
//! memory is checked against the party's own private copy of the layout before use. A buggy
//! or hostile peer can make this side count an error; it cannot make it read or write outside
//! the window, panic, or wait forever.
//!
//! Under `--cfg loom` only the algorithms compile (ring, pools, heap-backed constructors), so
//! the loom models in `tests/loom.rs` can check them.

#![warn(missing_docs)]

pub mod buffer_layout;
pub mod chain;
pub mod desc;
pub mod faithful;
pub mod heap;
pub mod pool;
pub mod ring;
pub mod signal;
mod sync;

#[cfg(not(loom))]
pub mod coherence;
#[cfg(not(loom))]
pub mod handles;
#[cfg(not(loom))]
pub mod handoff;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
mod mapping;
#[cfg(not(loom))]
pub mod window;

pub use buffer_layout::BufferLayout;
pub use chain::{ChainError, Segment, Segments};
pub use desc::{BufIdx, Desc, NO_BUF};
pub use pool::{AllocPolicy, Buffers, DriverPools, PoolGeometry, Releaser, ServerPools};
pub use ring::{Consumer, DescLimits, Producer, RingStats};
pub use signal::{Signal, WaitOutcome};
pub use sync::CacheLine;

#[cfg(not(loom))]
pub use layout::{ChannelSpec, Layout, PageSize, PoolSpec, RingSpec};
#[cfg(not(loom))]
pub use window::{Window, WindowStats};
