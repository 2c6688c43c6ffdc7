//! Seed 002's own synchronisation, built as the seed describes it, beside the channel's
//! default rings: the asymmetric Peterson mutex from 32-bit loads and stores
//! ([`mutex`]), and the IN/OUT queues made of two sub-queues with the Enable protocol and a
//! consumer-idle condition variable over counting events ([`queue`]).
//!
//! shmnet's parties use the wait-free SPSC [`crate::ring`]s by default; `shmnet serve --sync
//! faithful` joins the server and its driver (a thread, or a process sharing [`memory`]) by
//! these queues instead. They are model-checked (the loom models in `tests/loom.rs`) and
//! measured beside the rings (`shmnet bench chan`: ticks per element at bursts 1 and 32, across cores and
//! with both parties on one CPU, where a party is preempted inside its critical section).
//! `docs/channel.md` ("Seed 002's own synchronisation") says what the measurements and the
//! hardware of 2026 do to the seed's argument for a software mutex.

#[cfg(not(loom))]
pub mod memory;
pub mod mutex;
pub mod queue;

#[cfg(not(loom))]
pub use memory::{QueueMemory, QueueMemoryError};
pub use mutex::{AsymMutex, Entered, Side};
pub use queue::{
    ConsumerStats, Direction, FaithfulConsumer, FaithfulProducer, ProducerStats, Pushed,
    faithful_queue,
};
