//! `shmnet-sim`: a trace-driven cache and TLB simulator, for running shmnet's data path on
//! machines we do not have (seed 000's HP 9000/720, seed 001's SGI Challenge) and on this one.
//!
//! * [`Machine`] describes a machine as data: caches of any number of levels (split or
//!   unified first level; size, line, associativity from direct-mapped to fully associative;
//!   LRU, FIFO, seeded random or tree-PLRU replacement; write-back + write-allocate or
//!   write-through + no-write-allocate), TLBs of several page sizes with one or more levels,
//!   uncacheable address ranges ([`UncacheableRange`]), and the costs of each, of
//!   uncacheable accesses and of cache maintenance ([`MaintenanceConfig`]). Presets ship as files in `presets/` ([`machine::PRESETS`]);
//!   [`Machine::from_calibration_json`] builds this machine from `shmnet calibrate --json`.
//! * [`Simulator`] runs references through it: [`Simulator::access`] returns the ticks of one
//!   reference; [`Simulator::report`] gives per-cache [`CacheStats`] (with compulsory /
//!   capacity / conflict misses when [`Options::ccc`] is on), TLB and memory counts and total
//!   ticks, all `serde::Serialize`.
//! * [`trace`] reads Dinero IV `din`/`D` traces, valgrind lackey output and shmnet's own
//!   binary format (written by [`TraceWriter`]), streaming and without panicking on bad input.
//!   Besides reads, writes and fetches, an [`Op`] may be a cache-maintenance operation
//!   (clean, clean and invalidate, invalidate a line; clean the whole data cache: seed 003's
//!   coherence methods), in the binary format.
//! * [`sweep`] runs many first-level geometries over one pass of a trace (seed 001's size ×
//!   associativity sweeps); [`synth`] makes synthetic traces (packet copies for the speed
//!   benchmark, seed 000's residency workload); `plot` (feature `plot`) draws sweeps.
//!
//! The simulator is written here rather than borrowed (Dinero IV is C and reads only its
//! own text formats; the Rust cache simulators on crates.io model neither TLBs, nor dirty
//! victims' costs, nor per-party accounting) because it is the subject of the work: its
//! semantics are documented in [`sim`] and [`timing`], tested against hand-worked traces and
//! a deliberately simple reference model, and it must reproduce the seeds' figures. The
//! crate depends on nothing else in shmnet.
//!
//! See `docs/sim.md` for the user guide.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod bench;
pub mod config;
pub mod machine;
#[cfg(feature = "plot")]
pub mod plot;
pub mod sim;
mod store;
pub mod sweep;
pub mod synth;
pub mod timing;
mod tlb;
pub mod trace;

pub use config::{
    ByteSize, CacheConfig, ConfigError, Machine, MaintenanceConfig, MemoryConfig, PageRange,
    Replacement, Side, TlbConfig, TlbLevelConfig, UncacheableRange, Ways, WritePolicy,
};
pub use machine::MachineError;
pub use sim::{CacheStats, MaintenanceStats, MemoryStats, Options, Report, Simulator};
pub use tlb::TlbStats;
pub use trace::{Format, Op, Party, Ref, TraceError, TraceSource, TraceWriter};
