//! Core-to-core round trip: how long one cache line takes to go from one CPU to another and
//! back, measured right now.
//!
//! Why it exists: on a virtual machine the hypervisor places the vCPUs on physical cores and
//! may move them while we run. On the AMD EPYC VM shmnet was measured on, two vCPUs sharing a
//! core complex pass a line there and back in about 50–110 ns; placed on different complexes,
//! in about 450 ns — and the placement flips within seconds. Everything that moves data
//! between two cores (the hand-off probe, the `server` structure) runs up to eight times
//! slower in the far placement, while single-core work (`memcpy`, the `inline` structure)
//! does not change. A ratio between a cross-core figure and anything else is therefore only
//! meaningful when both were measured in the same placement: this probe tells which one a
//! measurement ran in, cheaply enough (about 2 ms) to take before and after every cell.
//!
//! How: two threads pinned to the two CPUs hand a counter back and forth through one
//! cache-line-aligned atomic (each waits for the other's value, then writes the next), in
//! batches of [`ROUNDS_PER_BATCH`] round trips timed by [`Instant`]; the median batch is the
//! figure. Written here rather than taken from a crate because it is a dozen lines and its
//! pinning and batching must match the hand-off probe's.

use crate::tsc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Round trips per timed batch.
pub const ROUNDS_PER_BATCH: u64 = 1000;
/// Timed batches (the median is reported).
pub const BATCHES: usize = 5;
/// A waiter that sees no progress for this long gives up (the other thread was descheduled
/// for good, e.g. both CPUs are one): the probe reports nothing rather than hang.
const PATIENCE: Duration = Duration::from_millis(200);

/// Two placements differ when their round trips differ by more than this factor (the near
/// and far placements seen differ by 4–5×; noise within one is well under 1.5×).
pub const SAME_PLACEMENT: f64 = 1.5;

#[repr(align(64))]
struct Line(AtomicU64);

/// The median round trip in nanoseconds between `cpus[0]` and `cpus[1]`, or `None` when the
/// two are the same CPU, a thread could not be pinned, or a thread stalled (the figure would
/// be a scheduler's, not the caches').
pub fn round_trip_ns(cpus: [usize; 2]) -> Option<f64> {
    if cpus[0] == cpus[1] {
        return None;
    }
    let line = Line(AtomicU64::new(0));
    let total = ROUNDS_PER_BATCH * BATCHES as u64;
    // Each side waits for the value the other wrote last: odd values are the pinger's,
    // even ones the ponger's. `false` from a side: it stalled or was not pinned.
    let wait_for = |want: u64| {
        let start = Instant::now();
        let mut spins = 0u32;
        while line.0.load(Ordering::Acquire) != want {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 && start.elapsed() > PATIENCE {
                return false;
            }
        }
        true
    };
    std::thread::scope(|s| {
        let ponger = s.spawn(|| {
            if !tsc::pin_to(cpus[1]) {
                line.0.store(u64::MAX, Ordering::Release);
                return false;
            }
            for i in 0..total {
                if !wait_for(2 * i + 1) {
                    return false;
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
            true
        });
        let pinger = s.spawn(|| {
            if !tsc::pin_to(cpus[0]) {
                return None;
            }
            let mut batches = Vec::with_capacity(BATCHES);
            for b in 0..BATCHES as u64 {
                let t0 = Instant::now();
                for i in b * ROUNDS_PER_BATCH..(b + 1) * ROUNDS_PER_BATCH {
                    line.0.store(2 * i + 1, Ordering::Release);
                    if !wait_for(2 * i + 2) {
                        // Let the ponger see something it does not wait for, and stop.
                        line.0.store(u64::MAX, Ordering::Release);
                        return None;
                    }
                }
                batches.push(t0.elapsed().as_nanos() as f64 / ROUNDS_PER_BATCH as f64);
            }
            Some(tsc::median(&mut batches))
        });
        let ns = pinger.join().ok().flatten();
        let ponged = ponger.join().unwrap_or(false);
        ns.filter(|_| ponged)
    })
}

/// Whether round trips `a` and `b` (ns) were taken in the same placement of the two CPUs.
pub fn same_placement(a: f64, b: f64) -> bool {
    a > 0.0 && b > 0.0 && a.max(b) / a.min(b) <= SAME_PLACEMENT
}

/// A cell's round trip: the mean of the ones taken before and after it, if both were.
pub fn mean_rtt(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some((before? + after?) / 2.0)
}

/// Whether every round trip was measured and all show one placement.
pub fn one_placement(rtts: &[Option<f64>]) -> bool {
    let got: Vec<f64> = rtts.iter().flatten().copied().collect();
    if got.len() != rtts.len() || got.is_empty() {
        return false;
    }
    let lo = got.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = got.iter().copied().fold(0.0, f64::max);
    same_placement(lo, hi)
}

/// Where one benchmark cell ran, as far as comparing it with another goes.
#[derive(Clone, Copy, Debug)]
pub struct CellPlacement {
    /// Its round trips before and after (and around any probe of its own) showed one
    /// placement.
    pub stable: bool,
    /// Its round trip (mean of before and after), if measured.
    pub rtt_ns: Option<f64>,
    /// All its work ran on one thread: its figures do not depend on the placement.
    pub one_thread: bool,
}

/// Whether two cells' figures compare like with like: each ran in one placement throughout,
/// and the same one — except that a cell whose work ran on one thread compares with anything
/// measured in one placement.
pub fn comparable(a: CellPlacement, b: CellPlacement) -> bool {
    match (a.one_thread, b.one_thread) {
        (true, true) => true,
        (true, false) => b.stable,
        (false, true) => a.stable,
        (false, false) => {
            a.stable
                && b.stable
                && matches!((a.rtt_ns, b.rtt_ns), (Some(x), Some(y)) if same_placement(x, y))
        }
    }
}

/// A target's verdict as the reports print it.
pub fn verdict(judged: bool, met: bool) -> &'static str {
    match (judged, met) {
        (false, _) => {
            "NOT JUDGED (the CPUs' placement changed between the cells compared, or was not measured)"
        }
        (true, true) => "MET",
        (true, false) => "NOT MET",
    }
}

/// The CPUs the calling thread may run on, lowest first (none if they cannot be read).
pub fn allowed_cpus() -> Vec<usize> {
    rustix::thread::sched_getaffinity(None)
        .map(|set| {
            (0..rustix::thread::CpuSet::MAX_CPU)
                .filter(|&c| set.is_set(c))
                .collect()
        })
        .unwrap_or_default()
}

/// The CPUs the cross-core probes use: the first two this thread may run on, or the one it
/// may (both the same: nothing crosses a core).
pub fn pick_cpus() -> [usize; 2] {
    match allowed_cpus().as_slice() {
        [] => [0, 0],
        [one] => [*one, *one],
        [a, b, ..] => [*a, *b],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_is_measured_between_two_cpus_and_refused_on_one() {
        assert_eq!(round_trip_ns([0, 0]), None);
        let cpus = pick_cpus();
        if cpus[0] == cpus[1] {
            eprintln!("SKIP: only one CPU available");
            return;
        }
        // A stalled thread (a busy machine) yields None; anything measured is positive.
        if let Some(ns) = round_trip_ns(cpus) {
            assert!(ns > 0.0, "{ns}");
        }
    }

    #[test]
    fn placements_compare_by_ratio() {
        assert!(same_placement(100.0, 140.0));
        assert!(!same_placement(100.0, 450.0));
        assert!(!same_placement(0.0, 100.0));
        assert!(one_placement(&[Some(70.0), Some(90.0)]));
        assert!(!one_placement(&[Some(70.0), Some(450.0)]));
        assert!(!one_placement(&[Some(70.0), None]));
        assert!(!one_placement(&[]));
    }

    #[test]
    fn cells_compare_only_within_one_placement_unless_single_threaded() {
        let cell = |stable, rtt, one_thread| CellPlacement {
            stable,
            rtt_ns: Some(rtt),
            one_thread,
        };
        assert!(comparable(cell(true, 70.0, false), cell(true, 80.0, false)));
        assert!(!comparable(
            cell(true, 70.0, false),
            cell(true, 450.0, false)
        ));
        assert!(!comparable(
            cell(false, 70.0, false),
            cell(true, 70.0, false)
        ));
        assert!(comparable(
            cell(true, 70.0, false),
            cell(false, 450.0, true)
        ));
        assert!(!comparable(
            cell(false, 70.0, false),
            cell(true, 70.0, true)
        ));
    }
}
