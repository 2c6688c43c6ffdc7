//! The timing model: what a reference costs, in ticks.
//!
//! A reference is split into the cache lines it touches (at the first level's line size).
//! Each line access costs
//!
//! * the **latency of the level that served it**: `hit_ticks` of the first cache on its
//!   path that held the line, or `memory.ticks` when none did. Latencies are whole, as the
//!   processor sees them (seed 001's "L1: 2, L2: 14, memory: 145 cycles"), not increments;
//! * plus `memory.dirty_ticks - memory.ticks` if a dirty line was written back to memory
//!   while serving it (so a fill whose victim was dirty costs `memory.dirty_ticks`: seed
//!   000's 18 / 23-cycle clean / dirty line fills). Write-backs between cache levels are free
//!   (buffered);
//! * plus, for each TLB level searched, the ticks of the level that held the translation,
//!   or the TLB's `miss_ticks` for a walk;
//! * a write that a write-through cache absorbs (hit or no-allocate miss) costs that cache's
//!   `hit_ticks`: a write buffer is assumed, never full;
//! * a line access to an uncacheable address costs `memory.uncached_read_ticks` (reads and
//!   fetches) or `uncached_write_ticks` (whole latency, whatever its bytes) plus its
//!   translation; no cache is involved.
//!
//! A cache-maintenance reference costs `maintenance.line_ticks` per line it covers (plus its
//! translation) or, for a clean-all, `maintenance.walk_ticks` per cache line examined, plus
//! `maintenance.writeback_ticks` per dirty line it writes to memory (write-backs into a lower
//! cache are free, as above).
//!
//! Left out: overlap between misses (non-blocking caches, prefetchers), bus and DRAM bank
//! contention, DMA, instruction execution beyond its fetches. See `docs/sim.md`.

/// Precomputed costs for one path (instruction or data) through the hierarchy.
///
/// Invariant: `served[i]` is the latency of a line served by the path's level `i`, and
/// `served[depth]` that of a line served by memory.
#[derive(Debug, Clone)]
pub(crate) struct PathCosts {
    pub(crate) served: Vec<f64>,
    pub(crate) dirty_extra: f64,
}
