//! The time-stamp counter: reading it the right way, and calibrating it.
//!
//! A timing window opens with `lfence; rdtsc` (earlier instructions finish before the read)
//! and closes with `rdtscp; lfence` (the timed instructions finish before the read, and later
//! ones do not start before it). An empty window still costs something — on the machines
//! shmnet was developed on about 52 ticks, with the counter advancing in steps of about 26 —
//! so [`Calibration`] measures that overhead and the counter's step, and every figure built
//! from windows subtracts the overhead and quotes medians. On a virtual machine the TSC does
//! not count core cycles: figures say "ticks", not "cycles".

use std::time::{Duration, Instant};

/// Reads the TSC at the start of a timing window.
#[inline(always)]
pub fn start() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` and `rdtsc` have no memory effects and exist on every x86_64 CPU.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    fallback_ns()
}

/// Reads the TSC at the end of a timing window.
#[inline(always)]
pub fn stop() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rdtscp` and `lfence` have no memory effects; `rdtscp` writes the processor id
    // into a local we own.
    unsafe {
        let mut aux = 0u32;
        let t = core::arch::x86_64::__rdtscp(&mut aux);
        core::arch::x86_64::_mm_lfence();
        t
    }
    #[cfg(not(target_arch = "x86_64"))]
    fallback_ns()
}

#[cfg(not(target_arch = "x86_64"))]
fn fallback_ns() -> u64 {
    use std::sync::OnceLock;
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// What the counter costs and how fast it runs, measured on this machine now.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Calibration {
    /// TSC ticks per nanosecond of wall-clock time.
    pub ticks_per_ns: f64,
    /// Median ticks of an empty `start`/`stop` window (subtract it from every window).
    pub empty_window_ticks: u64,
    /// The counter's step: the smallest increase between two successive reads that differ.
    /// (Not the smallest difference between two windows' lengths: where the step is not a
    /// whole number of ticks, as the 24.46 of a 2.445 GHz counter advanced at 100 MHz, two
    /// windows can differ by 1 tick without the counter ever advancing by 1.)
    pub step_ticks: u64,
}

impl Calibration {
    /// Measures the counter against the wall clock for `span` and times `samples` empty
    /// windows.
    pub fn measure(span: Duration, samples: usize) -> Self {
        let mut empties: Vec<u64> = (0..samples.max(1))
            .map(|_| {
                let a = start();
                let b = stop();
                b.wrapping_sub(a)
            })
            .collect();
        empties.sort_unstable();
        let step_ticks = counter_step(1000);
        let w0 = Instant::now();
        let t0 = start();
        while w0.elapsed() < span {
            std::hint::spin_loop();
        }
        let t1 = stop();
        let ns = w0.elapsed().as_nanos() as f64;
        Self {
            ticks_per_ns: (t1.wrapping_sub(t0)) as f64 / ns,
            empty_window_ticks: empties[empties.len() / 2],
            step_ticks,
        }
    }

    /// Converts ticks to nanoseconds.
    pub fn ns(&self, ticks: f64) -> f64 {
        ticks / self.ticks_per_ns
    }
}

/// Reads the TSC with no fence: for [`counter_step`], whose successive reads must come
/// closer together than the counter's step (a fenced read can take two steps in a VM).
#[inline(always)]
fn read_unfenced() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rdtsc` has no memory effects and exists on every x86_64 CPU.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    fallback_ns()
}

/// The counter's step, from `advances` (at least 2) increases between successive reads that
/// differ. Where the counter advances in steps (24.46 ticks at 2.445 GHz on a 100 MHz
/// counter), every increase is close to a whole number of steps, and the step is the
/// smallest increase. Where it advances by 1 tick, successive reads are as far apart as a
/// read costs (20–40 ticks), their increases scatter over every value in between, and the
/// smallest increase is the read's cost, not the step: then the step is 1.
pub fn counter_step(advances: usize) -> u64 {
    let mut last = read_unfenced();
    let mut increases = Vec::with_capacity(advances.max(2));
    while increases.len() < advances.max(2) {
        let now = read_unfenced();
        if now != last {
            increases.push(now.wrapping_sub(last));
            last = now;
        }
    }
    step_of(&increases)
}

/// [`counter_step`]'s reading of a set of increases (see there).
fn step_of(increases: &[u64]) -> u64 {
    let Some(&least) = increases.iter().min() else {
        return 1;
    };
    if least <= 2 {
        return least.max(1);
    }
    // The mean of the one-step increases estimates the step to a fraction of a tick.
    let one_step: Vec<f64> = increases
        .iter()
        .filter(|&&v| (v as f64) < 1.5 * least as f64)
        .map(|&v| v as f64)
        .collect();
    let step = one_step.iter().sum::<f64>() / one_step.len() as f64;
    let on_a_multiple = increases
        .iter()
        .filter(|&&v| {
            let k = (v as f64 / step).round().max(1.0);
            (v as f64 - k * step).abs() <= 1.5
        })
        .count();
    if on_a_multiple * 100 >= increases.len() * 95 {
        least
    } else {
        1
    }
}

/// Register additions in one [`throughput_probe`].
pub const PROBE_ADDS: u64 = 20_000;

/// Ticks for [`PROBE_ADDS`] register additions in four independent chains: a window bound
/// by how many instructions the core issues per cycle, not by any latency. A core of its
/// own runs it at 3–4 additions a cycle; when a sibling hyperthread (on a VM, often another
/// guest's) is busy on the same core, the issue slots are shared and it takes up to twice
/// as long, while a dependent chain ([`core_cycles_per_tick`]) does not notice. Compared
/// with the fastest probe of the same run, it tells the moments when this thread had the
/// core to itself from those when it did not.
pub fn throughput_probe() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let (mut a, mut b, mut c, mut d) = (1u64, 2u64, 3u64, 4u64);
        let t0 = start();
        for _ in 0..PROBE_ADDS / 8 {
            // SAFETY: register-only arithmetic; no memory or stack is touched.
            unsafe {
                core::arch::asm!(
                    "add {a}, 1", "add {b}, 1", "add {c}, 1", "add {d}, 1",
                    "add {a}, 1", "add {b}, 1", "add {c}, 1", "add {d}, 1",
                    a = inout(reg) a, b = inout(reg) b, c = inout(reg) c, d = inout(reg) d,
                    options(nomem, nostack),
                );
            }
        }
        let t1 = stop();
        std::hint::black_box((a, b, c, d));
        t1.wrapping_sub(t0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut x = [1u64, 2, 3, 4];
        let t0 = start();
        for _ in 0..PROBE_ADDS / 4 {
            for v in x.iter_mut() {
                *v = std::hint::black_box(*v).wrapping_add(1);
            }
        }
        let t1 = stop();
        std::hint::black_box(x);
        t1.wrapping_sub(t0)
    }
}

/// Core clock cycles per TSC tick, from a chain of dependent 64-bit integer multiplies
/// (`imul r64, r64`: 3 cycles of latency on every x86-64 core since Intel's Core 2 and AMD's
/// K8 — the one assumption), the median of `samples` chains of 100,000 multiplies. A VM's
/// TSC runs at a fixed rate while the core's clock moves with turbo, so this is what turns
/// ticks into cycles *now*; `None` off x86-64.
pub fn core_cycles_per_tick(samples: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        const CHAIN: u64 = 100_000;
        const IMUL_LATENCY: f64 = 3.0;
        let mut per = Vec::with_capacity(samples.max(1));
        for _ in 0..samples.max(1) {
            let mut x: u64 = 3;
            let t0 = start();
            for _ in 0..CHAIN / 10 {
                // SAFETY: register-only arithmetic; no memory, stack or flags are relied on.
                unsafe {
                    core::arch::asm!(
                        "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}",
                        "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}",
                        "imul {x}, {x}", "imul {x}, {x}",
                        x = inout(reg) x,
                        options(nomem, nostack),
                    );
                }
            }
            let t1 = stop();
            std::hint::black_box(x);
            per.push(t1.wrapping_sub(t0) as f64 / CHAIN as f64);
        }
        let ticks_per_imul = median(&mut per);
        (ticks_per_imul > 0.0).then(|| IMUL_LATENCY / ticks_per_imul)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = samples;
        None
    }
}

/// The median of `v` (sorted in place); 0 for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Pins the calling thread to `cpu`. Returns false (and leaves it unpinned) if it cannot.
pub fn pin_to(cpu: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_core_clock_is_measured_against_the_counter() {
        if let Some(r) = core_cycles_per_tick(5) {
            assert!(r.is_finite() && r > 0.0, "{r}");
        }
    }

    #[test]
    fn median_of_odd_and_even_lengths() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn the_counter_advances_and_calibrates_to_a_positive_rate() {
        let c = Calibration::measure(Duration::from_millis(5), 100);
        assert!(c.ticks_per_ns > 0.0);
        assert!(c.step_ticks >= 1);
    }

    #[test]
    fn a_stepping_counter_gives_its_step_and_a_ticking_one_gives_1() {
        // 24.46-tick steps read as 24 or 25 ticks, several steps now and then.
        let stepping: Vec<u64> = (0..200u64)
            .map(|i| {
                let k = 1 + i % 3;
                ((i + k) as f64 * 24.46) as u64 - (i as f64 * 24.46) as u64
            })
            .collect();
        assert_eq!(step_of(&stepping), 24);
        // A 1-tick counter read every 20–40 ticks: increases scatter over every value.
        let ticking: Vec<u64> = (0..200u64).map(|i| 20 + (i * 7) % 21).collect();
        assert_eq!(step_of(&ticking), 1);
        assert_eq!(step_of(&[1, 1, 2]), 1);
        assert_eq!(step_of(&[]), 1);
        let a = start();
        std::thread::sleep(Duration::from_millis(1));
        assert!(stop() > a);
    }
}
