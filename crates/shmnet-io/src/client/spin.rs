//! How an application waiting for a delivery spins before it sleeps, and when it stops.
//!
//! Spinning pays on a machine with a CPU to spare: on a VM a sleep and the wake-up that ends
//! it cost the waker as much as the sleeper (an eventfd write that must interrupt a halted
//! vCPU), so a request-response client that spins through the server's few microseconds
//! sleeps once per hundred transactions instead of twice per transaction. It costs dearly
//! when the spinner shares its CPU with a party that has work: a streaming receiver that
//! spins on the core its sender was woken on takes the sender's time, the sender writes
//! less, and the receiver spins longer — measured on two vCPUs, the TCP stream at 8 KiB
//! writes fell from 50 to 20 Gbit/s in about half the runs, the receiver burning 40 % of the
//! machine in this loop.
//!
//! The spinner yields the CPU every few looks anyway; the yield tells it whether anyone else
//! wanted the CPU. A `sched_yield` with no other runnable task returns in well under a
//! microsecond; one that let another task run returns after that task's turn. So the gauge
//! keeps the fastest yield it has seen (the machine's own cost, never a constant) and calls a
//! yield that took [`CONTENDED_FACTOR`] times that *contended*: the waiter then sleeps at
//! once, leaving the CPU to the party that has work. A false alarm (an interrupt during the
//! yield) only makes that one wait sleep early, as a plain blocking read does.

use std::time::Instant;

/// A yield this many times slower than the fastest one seen let another task run.
pub(super) const CONTENDED_FACTOR: u64 = 16;

/// The fastest `sched_yield` this application has seen, in nanoseconds.
#[derive(Debug)]
pub(super) struct YieldGauge {
    fastest_ns: u64,
}

impl Default for YieldGauge {
    fn default() -> Self {
        Self {
            fastest_ns: u64::MAX,
        }
    }
}

impl YieldGauge {
    /// Yields the CPU; returns whether another task ran meanwhile (the yield took at least
    /// [`CONTENDED_FACTOR`] times the fastest seen). The first yield only calibrates.
    pub(super) fn yield_was_contended(&mut self) -> bool {
        let t0 = Instant::now();
        std::thread::yield_now();
        let took = t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        let contended = took / CONTENDED_FACTOR >= self.fastest_ns.max(1);
        self.fastest_ns = self.fastest_ns.min(took);
        contended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_yield_calibrates_and_is_never_contended() {
        let mut g = YieldGauge::default();
        assert!(!g.yield_was_contended());
        assert!(g.fastest_ns < u64::MAX);
    }

    #[test]
    fn a_yield_that_let_another_thread_run_is_contended() {
        // Pin this thread and a busy one to one CPU: our yields then give it its turn.
        // Where pinning is refused (a cpuset without CPU 0), there is nothing to measure.
        let cpu0 = {
            let mut set = rustix::thread::CpuSet::new();
            set.set(0);
            set
        };
        if rustix::thread::sched_setaffinity(None, &cpu0).is_err() {
            eprintln!("skipped: cannot pin to CPU 0");
            return;
        }
        let mut g = YieldGauge::default();
        for _ in 0..1_000 {
            g.yield_was_contended();
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let busy = std::thread::spawn(move || {
            let _ = rustix::thread::sched_setaffinity(None, &cpu0);
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let contended = (0..200).filter(|_| g.yield_was_contended()).count();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.join().unwrap();
        assert!(
            contended > 0,
            "no yield of 200 beside a busy thread on the same CPU looked contended"
        );
    }
}
