//! Synthetic traces: packet copies (the speed benchmark's workload) and seed 000's residency
//! workload (a sender fills buffers, a load generator disturbs the cache, the application
//! copies the buffers out), plus the analysis the residency experiment uses: the overhead of
//! each run of one party's references.
//!
//! Generators call `emit(party, op, addr, size)` for each reference, so the same trace can go
//! to a [`TraceWriter`](crate::TraceWriter), a Dinero writer or straight into a
//! [`Simulator`]. They are deterministic for a given seed.

use crate::sim::Simulator;
use crate::trace::{Op, Party, TraceError, TraceSource};

/// Where the packet-copy workload's code lives.
pub const CODE_BASE: u64 = 0x0040_0000;
/// Where its buffer pool starts.
pub const POOL_BASE: u64 = 0x1000_0000;
/// Where the application's buffer starts.
pub const APP_BASE: u64 = 0x2000_0000;

/// The packet-copy workload: per packet, a run of instruction fetches in a small code
/// region (the stack's receive path), then a 1,480-byte payload copied word by word from a
/// buffer picked at random in a pool of 2 KiB buffers into an application buffer.
#[derive(Debug, Clone)]
pub struct PacketCopies {
    /// Buffers in the pool.
    pub pool_buffers: u64,
    /// Bytes per pool buffer.
    pub buffer_bytes: u64,
    /// Payload bytes copied per packet.
    pub payload: u64,
    /// Bytes per load and per store of the copy.
    pub word: u32,
    /// Bytes of the application's (circular) buffer.
    pub app_bytes: u64,
    /// Bytes of code the fetches wander over.
    pub code_bytes: u64,
    /// Instruction fetches (4 bytes each) per packet.
    pub fetches_per_packet: u64,
    /// Seed of the buffer choice.
    pub seed: u64,
}

impl Default for PacketCopies {
    fn default() -> Self {
        PacketCopies {
            pool_buffers: 512,
            buffer_bytes: 2048,
            payload: 1480,
            word: 8,
            app_bytes: 64 << 10,
            code_bytes: 16 << 10,
            fetches_per_packet: 48,
            seed: 1,
        }
    }
}

impl PacketCopies {
    /// Emits exactly `refs` references.
    pub fn generate<E>(
        &self,
        refs: u64,
        mut emit: impl FnMut(Party, Op, u64, u32) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let mut left = refs;
        let mut app_off = 0u64;
        let words = self.payload / u64::from(self.word);
        let code_words = self.code_bytes / 4;
        while left > 0 {
            let pc = CODE_BASE
                + rng.u64(..code_words.saturating_sub(self.fetches_per_packet).max(1)) * 4;
            for i in 0..self.fetches_per_packet.min(left) {
                emit(Party::Stack, Op::Ifetch, pc + i * 4, 4)?;
            }
            left = left.saturating_sub(self.fetches_per_packet);
            let buf = POOL_BASE + rng.u64(..self.pool_buffers) * self.buffer_bytes;
            let mut i = 0;
            while i < words && left > 0 {
                let off = i * u64::from(self.word);
                emit(Party::Application, Op::Read, buf + off, self.word)?;
                left -= 1;
                if left > 0 {
                    let dst = APP_BASE + (app_off + off) % self.app_bytes;
                    emit(Party::Application, Op::Write, dst, self.word)?;
                    left -= 1;
                }
                i += 1;
            }
            app_off = (app_off + self.payload) % self.app_bytes;
        }
        Ok(())
    }
}

/// Seed 000's residency workload, for one buffer after another: the sender (party
/// [`Party::Driver`]) writes a payload into an mbuf, the load generator ([`Party::Load`])
/// touches `load_touches` random words of a `load_bytes` region (a fraction of them writes),
/// optionally a word in the buffer's page but not in its lines is read ("TLB forced",
/// [`Party::Other`]), and the application ([`Party::Application`]) loads the payload word by
/// word. The application's runs of references are what [`burst_overheads`] measures.
#[derive(Debug, Clone)]
pub struct Residency {
    /// Buffers to copy out.
    pub buffers: u64,
    /// Payload bytes per buffer.
    pub payload: u64,
    /// Bytes per word.
    pub word: u32,
    /// Buffers in the pool (2 KiB slots, two per 4 KiB page).
    pub pool_buffers: u64,
    /// Every other buffer starts this many bytes into its slot (0 = all aligned), so that
    /// both 46-line and 47-line buffers occur.
    pub misalign: u64,
    /// Bytes of the load generator's state.
    pub load_bytes: u64,
    /// Words it touches between a buffer's arrival and its copy-out.
    pub load_touches: u64,
    /// The fraction of those touches that are writes.
    pub load_write_fraction: f64,
    /// Touch the buffer's page (not its lines) just before the copy.
    pub force_tlb: bool,
    /// Seed.
    pub seed: u64,
}

impl Default for Residency {
    fn default() -> Self {
        Residency {
            buffers: 200,
            payload: 1460,
            word: 4,
            pool_buffers: 64,
            misalign: 16,
            load_bytes: 4 << 20,
            load_touches: 80_000,
            load_write_fraction: 0.0,
            force_tlb: true,
            seed: 7,
        }
    }
}

/// Where the residency workload's pool starts.
pub const MBUF_BASE: u64 = 0x3000_0000;
/// Where its load generator's state starts.
pub const LOAD_BASE: u64 = 0x4000_0000;

impl Residency {
    /// Emits the whole workload.
    pub fn generate<E>(
        &self,
        mut emit: impl FnMut(Party, Op, u64, u32) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let w = u64::from(self.word);
        let words = self.payload.div_ceil(w);
        let load_words = (self.load_bytes / w).max(1);
        for b in 0..self.buffers {
            let slot = MBUF_BASE + (b % self.pool_buffers) * 2048;
            let start = slot + if b % 2 == 1 { self.misalign } else { 0 };
            for i in 0..words {
                emit(Party::Driver, Op::Write, start + i * w, self.word)?;
            }
            for _ in 0..self.load_touches {
                let a = LOAD_BASE + rng.u64(..load_words) * w;
                let op = if rng.f64() < self.load_write_fraction {
                    Op::Write
                } else {
                    Op::Read
                };
                emit(Party::Load, op, a, self.word)?;
            }
            if self.force_tlb {
                // The last word of the other 2 KiB half of the page: same page, none of the
                // buffer's lines (nor of a buffer in the other half).
                let other = slot ^ 2048;
                emit(Party::Other, Op::Read, other + 2048 - w, self.word)?;
            }
            for i in 0..words {
                emit(Party::Application, Op::Read, start + i * w, self.word)?;
            }
        }
        Ok(())
    }
}

/// Runs `source` through `sim` and returns, for each maximal run of consecutive references
/// by `party`, its overhead: the run's ticks minus `hit_ticks` per reference (seed 000's
/// "overhead cycles" of a copy-out when `hit_ticks` is the first level's hit cost).
pub fn burst_overheads(
    sim: &mut Simulator,
    source: &mut dyn TraceSource,
    party: Party,
    hit_ticks: f64,
) -> Result<Vec<f64>, TraceError> {
    let mut out = Vec::new();
    let mut batch = Vec::with_capacity(crate::sim::BATCH);
    let mut current: Option<f64> = None;
    loop {
        source.next_batch(&mut batch, crate::sim::BATCH)?;
        if batch.is_empty() {
            break;
        }
        for r in &batch {
            let t = sim.access_ref(r);
            if r.party == party {
                *current.get_or_insert(0.0) += t - hit_ticks;
            } else if let Some(o) = current.take() {
                out.push(o);
            }
        }
    }
    out.extend(current);
    Ok(out)
}
