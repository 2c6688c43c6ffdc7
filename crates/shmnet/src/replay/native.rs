//! Timing the rows natively on a core that may not be this thread's alone.
//!
//! A virtual CPU is often one hyperthread of a physical core whose sibling runs someone
//! else's guest. While the sibling is busy the two share the core's issue slots, and code
//! that retires several instructions a cycle — every row of [`shmnet_stack::rows`] does —
//! runs up to twice as slowly, with nothing inside the guest to show it: no steal time, no
//! change of clock (a dependent multiply chain keeps its pace). On the 2-vCPU AMD EPYC VM
//! of 2026-12-07 one row's median moved by up to 2.2× from one process to the next, and
//! within one process the rows flipped between two levels every few hundred milliseconds,
//! in step with [`tsc::throughput_probe`] (about 4,300 ticks with the core to itself,
//! 8,600–9,900 shared). Timed one after another, each row caught a different mix, so the
//! rows did not keep their order and no model of them could.
//!
//! So the rows are timed together, in rounds. A round takes the probe, times [`CHUNK`]
//! steps of every row in turn, and takes the probe again; the round's probe is the slower
//! of the two, and a round is *quiet* when its probe is within [`QUIET_SLACK`] of the
//! fastest round's (so at least one round is always quiet). A row's
//! figure is from its steps in quiet rounds: the core as this thread has it alone,
//! the same for every row. Rounds go on until the quiet ones hold the steps asked for, or
//! [`MAX_ROUNDS_FACTOR`] times the rounds that would have held them; with fewer, the figure
//! is from the quiet steps there are, and [`Contention`] says how many. The same estimate
//! over every round is kept beside it (`measured_all_rounds`).
//!
//! On a machine whose cores are never shared every round is quiet and this is the plain
//! estimate over `steps` timed messages.
//!
//! # The estimate: a trimmed mean, less the empty window's
//!
//! A row's figure is the mean of its windows with the lowest and the highest tenth left
//! out ([`TRIM`]), less the same estimate of an empty window timed in the same rounds (one
//! after every eighth step). Not the median: where the counter advances in steps (about
//! 24.5 ticks on the AMD VM, a 100 MHz counter scaled to 2.45 GHz), every window is a whole
//! number of steps and so is the median — a row that takes 230 ticks reads 221 or 245, and
//! on that VM one row's median moved by a step from run to run, 11 % of the smallest rows.
//! A window starts at a random phase of the counter's step, so the mean over windows is
//! the true length (the step dithers it). Leaving out a tenth at each end keeps an
//! interrupt or a shared round's tail out, and costs at most a tenth of a step of bias
//! where one of two adjacent readings is rarer than a tenth (an interquartile mean, tried
//! first, costs up to a quarter of a step). Where the counter advances by one tick this is
//! within a tick of the median.

use anyhow::{Context, Result, bail};
use shmnet_lab::tsc;
use shmnet_stack::rows::{Row, RowSpec};

use super::rows::Steps;

/// Timed steps of each row in one round.
pub const CHUNK: u64 = 50;

/// A round is quiet when its probes take at most this multiple of the run's fastest probe.
/// A shared core doubles the probe; 1.25 keeps a quiet round's ordinary jitter (a few per
/// cent) in and a shared one out.
pub const QUIET_SLACK: f64 = 1.25;

/// At most this many times the rounds that would hold the steps asked for if every round
/// were quiet (so a run on a busy host ends: about 0.5 s of rounds with `--quick`, 5 s
/// without, on the machine above).
pub const MAX_ROUNDS_FACTOR: u64 = 20;

/// Probes taken at each end of a round (their median is the round's figure at that end).
const PROBES: usize = 3;

/// One row's native timing, ticks per message (the empty window's estimate subtracted).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct RowTiming {
    /// The trimmed mean over the quiet rounds' steps (the module's docs). Not a median:
    /// it need not lie between `p25` and `p75`.
    pub ticks: f64,
    /// Their 25th percentile.
    pub p25: f64,
    /// Their 75th percentile.
    pub p75: f64,
    /// The trimmed mean over every round's steps, quiet or not.
    pub all_rounds: f64,
}

/// How much of the run this thread had its core to itself.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Contention {
    /// Rounds run.
    pub rounds: u64,
    /// Rounds whose probe (the slower of its two ends) was within [`QUIET_SLACK`] of the
    /// fastest round's.
    pub quiet_rounds: u64,
    /// Steps per row the figures are from (quiet rounds × [`CHUNK`]).
    pub quiet_steps: u64,
    /// The fastest round's probe, ticks for [`tsc::PROBE_ADDS`] additions.
    pub probe_fastest_ticks: u64,
    /// The median probe over every round.
    pub probe_median_ticks: u64,
    /// [`QUIET_SLACK`].
    pub quiet_slack: f64,
    /// The empty window's trimmed mean over the quiet rounds, ticks (subtracted from
    /// every row's).
    pub empty_window_ticks: f64,
}

/// The median of [`PROBES`] probes.
fn probe() -> u64 {
    let mut p = [0u64; PROBES];
    for v in &mut p {
        *v = tsc::throughput_probe();
    }
    p.sort_unstable();
    p[PROBES / 2]
}

fn is_quiet(probe: u64, fastest: u64) -> bool {
    probe as f64 <= fastest as f64 * QUIET_SLACK
}

/// The `p` quantile of sorted `v` (0 for an empty one).
fn quantile(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p) as usize] as f64
}

/// The share of the windows left out at each end of the trimmed mean.
pub const TRIM: f64 = 0.1;

/// The mean of sorted `v` with the lowest and highest [`TRIM`] of its values left out
/// (0 for an empty `v`; the one value for a single one). It lies between `v`'s
/// [`TRIM`] and `1 − TRIM` quantiles.
fn trimmed_mean(v: &[u64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let cut = (v.len() as f64 * TRIM) as usize;
    let mid = &v[cut..v.len() - cut];
    mid.iter().map(|&x| x as f64).sum::<f64>() / mid.len() as f64
}

/// The windows of the rounds `quiet` marks (every round with `all`), sorted; `windows`
/// holds [`CHUNK`] per round.
fn of_rounds(windows: &[u64], quiet: &[bool], all: bool) -> Vec<u64> {
    let mut v: Vec<u64> = windows
        .chunks(CHUNK as usize)
        .zip(quiet)
        .filter(|(_, q)| all || **q)
        .flat_map(|(c, _)| c.iter().copied())
        .collect();
    v.sort_unstable();
    v
}

/// Times `specs` together in rounds (see the module's docs): each row warmed by
/// `steps.warmup` untimed messages, then rounds of [`CHUNK`] timed messages each, with
/// [`CHUNK`] empty windows a round spread among them. The figures are in `specs`' order.
/// Fails if a row cannot be built or a timed step does not complete.
pub fn measure_rows(
    specs: &[RowSpec],
    size: usize,
    steps: Steps,
) -> Result<(Vec<RowTiming>, Contention)> {
    let mut rows = specs
        .iter()
        .map(|&s| Row::new(s, size).with_context(|| format!("setting up {}", s.name())))
        .collect::<Result<Vec<Row>>>()?;
    for row in &mut rows {
        for _ in 0..steps.warmup {
            row.prepare();
            row.step();
            row.finish();
        }
    }
    let wanted = steps.measured.div_ceil(CHUNK).max(1);
    let max_rounds = wanted * MAX_ROUNDS_FACTOR;
    // probes[r] = the slower of round r's two ends; samples[i][r*CHUNK..][..CHUNK] = row i's
    // windows in round r (the empty window not subtracted); empties[r*CHUNK..][..CHUNK] the
    // empty windows of round r (one after every rows.len()-th step of the round).
    let mut probes: Vec<u64> = Vec::with_capacity(max_rounds as usize);
    let mut samples: Vec<Vec<u64>> = (0..rows.len())
        .map(|_| Vec::with_capacity((max_rounds * CHUNK) as usize))
        .collect();
    let mut empties: Vec<u64> = Vec::with_capacity((max_rounds * CHUNK) as usize);
    let mut fastest = u64::MAX;
    while (probes.len() as u64) < max_rounds {
        let before = probe();
        let n_rows = rows.len() as u64;
        for (i, (row, out)) in rows.iter_mut().zip(&mut samples).enumerate() {
            for k in 0..CHUNK {
                row.prepare();
                let t0 = tsc::start();
                let ok = row.step();
                let t1 = tsc::stop();
                row.finish();
                if !ok {
                    bail!("a measured step of {} did not complete", row.spec().name());
                }
                out.push(t1.wrapping_sub(t0));
                // Every n_rows-th of the round's n_rows × CHUNK steps: exactly CHUNK a
                // round, so that `of_rounds` can tell the rounds apart.
                if (i as u64 * CHUNK + k) % n_rows == 0 {
                    let e0 = tsc::start();
                    let e1 = tsc::stop();
                    empties.push(e1.wrapping_sub(e0));
                }
            }
        }
        let after = probe();
        let round = before.max(after);
        fastest = fastest.min(round);
        probes.push(round);
        let quiet = probes.iter().filter(|&&p| is_quiet(p, fastest)).count() as u64;
        if quiet >= wanted {
            break;
        }
    }
    let quiet: Vec<bool> = probes.iter().map(|&p| is_quiet(p, fastest)).collect();
    let quiet_rounds = quiet.iter().filter(|&&q| q).count() as u64;
    let empty = trimmed_mean(&of_rounds(&empties, &quiet, false));
    let empty_all = trimmed_mean(&of_rounds(&empties, &quiet, true));
    let timings = samples
        .iter()
        .map(|windows| {
            let mine = of_rounds(windows, &quiet, false);
            let every = of_rounds(windows, &quiet, true);
            RowTiming {
                ticks: (trimmed_mean(&mine) - empty).max(0.0),
                p25: (quantile(&mine, 0.25) - empty).max(0.0),
                p75: (quantile(&mine, 0.75) - empty).max(0.0),
                all_rounds: (trimmed_mean(&every) - empty_all).max(0.0),
            }
        })
        .collect();
    let mut sorted = probes.clone();
    sorted.sort_unstable();
    Ok((
        timings,
        Contention {
            rounds: probes.len() as u64,
            quiet_rounds,
            quiet_steps: quiet_rounds * CHUNK,
            probe_fastest_ticks: fastest,
            probe_median_ticks: quantile(&sorted, 0.5) as u64,
            quiet_slack: QUIET_SLACK,
            empty_window_ticks: empty,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmnet_stack::rows::{MESSAGE_BYTES, ROWS};

    #[test]
    fn every_row_is_timed_from_at_least_the_steps_of_one_quiet_round() {
        let steps = Steps {
            warmup: 5,
            measured: 2 * CHUNK,
            traced: 0,
        };
        let (t, c) = measure_rows(&ROWS, MESSAGE_BYTES, steps).unwrap();
        assert_eq!(t.len(), ROWS.len());
        // The fastest round is quiet by definition, so there is always one.
        assert!(c.quiet_rounds >= 1 && c.quiet_rounds <= c.rounds);
        assert_eq!(c.quiet_steps, c.quiet_rounds * CHUNK);
        assert!(c.rounds <= 2 * MAX_ROUNDS_FACTOR);
        assert!(c.probe_fastest_ticks > 0 && c.probe_fastest_ticks <= c.probe_median_ticks);
        assert!(c.empty_window_ticks > 0.0);
        for r in &t {
            assert!(r.ticks > 0.0, "{r:?}");
            assert!(r.p25 <= r.p75, "{r:?}");
        }
    }

    #[test]
    fn the_trimmed_mean_sees_between_the_counters_steps_and_past_the_tails() {
        // A window of 229 ticks on a counter of 24-tick steps reads 221 or 245, two to
        // one: the median is one of them, the trimmed mean within a tenth of a step of 229.
        let mut v: Vec<u64> = (0..999)
            .map(|i| if i % 3 == 0 { 245 } else { 221 })
            .collect();
        v.sort_unstable();
        assert_eq!(quantile(&v, 0.5), 221.0);
        let iqm = trimmed_mean(&v);
        assert!((iqm - 229.0).abs() < 2.4, "{iqm}");
        // An interrupt's tail and a fast outlier do not move it.
        v.extend([100_000, 100_000, 5]);
        v.sort_unstable();
        assert!((trimmed_mean(&v) - iqm).abs() < 1.0);
        assert_eq!(trimmed_mean(&[]), 0.0);
        assert_eq!(trimmed_mean(&[7]), 7.0);
    }

    #[test]
    fn a_round_is_quiet_within_the_slack_of_the_fastest() {
        assert!(is_quiet(100, 100));
        assert!(is_quiet(125, 100));
        assert!(!is_quiet(126, 100));
        assert!(!is_quiet(200, 100));
    }
}
