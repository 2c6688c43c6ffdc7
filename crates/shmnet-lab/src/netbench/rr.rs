//! `shmnet rr`: request–response, the analog of seed 002's X11perf dot test — small requests
//! each answered by a reply, with 1 and with 16 in flight; transactions per second and the
//! latency distribution (HdrHistogram, from every transaction's own time).
//!
//! Every structure times the same kind of requester: an application, which times each
//! transaction from just before its request is sent to just after the call that received the
//! reply returned, and a responder application that echoes — both on the same host, talking
//! through a loopback wire (see the `requester` module):
//!
//! | structure | requester | wire |
//! |---|---|---|
//! | `kernel` | a process with a UDP socket, to the echo process's socket | `lo` |
//! | `server`, `server-thread`, `server-process`, `ipc` | a process using the shmnet client API, attached to the same `shmnet serve` as the echo process | a loopback softnic |
//! | `inline` | the inline thread itself (no second process), beside the built-in echo | a loopback softnic |
//!
//! So a request goes requester → stack (UDP/IP out) → wire → stack (in) → echo, and the
//! reply the same way back, in every structure: each pays its stack twice per direction.

use super::{CellError, Launch, Proto, Roles, Structure, cpu_by_party, losses, start};
use crate::bench::corelat;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::fmt;

/// What to run.
#[derive(Clone, Debug)]
pub struct RrOptions {
    /// How to start the parties.
    pub launch: Launch,
    /// Structures, in order.
    pub structures: Vec<Structure>,
    /// Requests in flight, each a separate cell.
    pub outstanding: Vec<u32>,
    /// Request (and reply) bytes.
    pub size: usize,
    /// Transactions per cell (else `seconds`).
    pub count: Option<u64>,
    /// Seconds per cell. Over TCP (`launch.proto`) one connection per cell, no Nagle:
    /// requests and replies are `size`-byte pieces of its two streams.
    pub seconds: f64,
}

/// One cell's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RrRow {
    /// Structure.
    pub structure: Structure,
    /// UDP or TCP.
    pub proto: Proto,
    /// Requests in flight.
    pub outstanding: u32,
    /// Request bytes.
    pub size: usize,
    /// Transactions completed per second.
    pub transactions_per_s: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Largest latency, µs.
    pub max_us: f64,
    /// CPU seconds per transaction, every party.
    pub cpu_s_per_txn: f64,
    /// CPU microseconds per transaction, by party (as ttcp's `cpu_us_per_msg_by_party`:
    /// `shmnet serve` split into server, driver where it is a party of its own, and the rest).
    pub cpu_us_per_txn_by_party: BTreeMap<String, f64>,
    /// Voluntary context switches (sleeps) per transaction, every party.
    pub sleeps_per_txn: f64,
    /// Requests sent.
    pub sent: u64,
    /// Replies received.
    pub received: u64,
    /// Requests without a reply.
    pub lost: u64,
    /// Where: every nonzero loss counter.
    pub lost_where: BTreeMap<String, u64>,
    /// Lost requests no counter accounts for.
    pub unaccounted: u64,
    /// Transactions timed (every reply, unless the sample area filled).
    pub samples: usize,
    /// This cell's transactions/s ÷ the `kernel` cell's at the same requests in flight,
    /// same run (0 without a kernel cell).
    pub txn_over_kernel: f64,
    /// This cell's p50 ÷ the `kernel` cell's (0 without a kernel cell).
    pub p50_over_kernel: f64,
    /// The two CPUs' core-to-core round trip just before the cell, ns (which placement of a
    /// virtual machine's vCPUs it ran in: [`corelat`]); `None` on one CPU.
    pub core_rtt_ns_before: Option<f64>,
    /// The same just after the cell.
    pub core_rtt_ns_after: Option<f64>,
    /// Both round trips were measured and show one placement.
    pub placement_stable: bool,
}

impl RrRow {
    /// Where the cell ran, for comparing it with another ([`corelat::comparable`]; `inline`
    /// runs on one thread).
    fn placement(&self) -> corelat::CellPlacement {
        corelat::CellPlacement {
            stable: self.placement_stable,
            rtt_ns: self.core_rtt_ns(),
            one_thread: self.structure == Structure::Inline,
        }
    }

    /// The cell's core-to-core round trip (mean of before and after), if measured.
    pub fn core_rtt_ns(&self) -> Option<f64> {
        corelat::mean_rtt(self.core_rtt_ns_before, self.core_rtt_ns_after)
    }
}

/// Everything one `shmnet rr` run measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RrReport {
    /// One row per cell.
    pub rows: Vec<RrRow>,
    /// Issue 14's targets, where the kernel and `server` both ran.
    pub targets: Vec<RrTarget>,
    /// Cells that failed to run, with why.
    pub failed: Vec<String>,
    /// UDP or TCP.
    pub proto: Proto,
    /// The MTU of shmnet's wire.
    pub mtu: usize,
    /// The shmnet structures' cache maintenance of frames (seed 003's methods).
    pub buffers: shmnet_chan::coherence::BufferModes,
    /// Where it ran.
    pub machine: crate::machine::Machine,
}

/// Runs every cell.
pub fn run(o: &RrOptions, progress: &mut dyn FnMut(&str)) -> RrReport {
    let cpus = corelat::pick_cpus();
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for &outstanding in &o.outstanding {
        for &structure in &o.structures {
            let label = format!(
                "rr {} {} in flight {}",
                o.launch.proto.name(),
                outstanding,
                structure.name()
            );
            progress(&label);
            let before = corelat::round_trip_ns(cpus);
            let measured = cell(o, structure, outstanding, &mut |n, t| {
                progress(&format!(
                    "{label}: {n} transactions, {:.0}/s",
                    n as f64 / t.max(1e-9)
                ));
            });
            let after = corelat::round_trip_ns(cpus);
            match measured {
                Ok(mut r) => {
                    r.core_rtt_ns_before = before;
                    r.core_rtt_ns_after = after;
                    r.placement_stable = corelat::one_placement(&[before, after]);
                    rows.push(r)
                }
                Err(e) => failed.push(format!("{label}: {e}")),
            }
        }
    }
    let kernel: Vec<(u32, f64, f64)> = rows
        .iter()
        .filter(|r| r.structure == Structure::Kernel)
        .map(|r| (r.outstanding, r.transactions_per_s, r.p50_us))
        .collect();
    for r in &mut rows {
        if let Some(&(_, t, p)) = kernel.iter().find(|k| k.0 == r.outstanding) {
            r.txn_over_kernel = r.transactions_per_s / t.max(1e-12);
            r.p50_over_kernel = r.p50_us / p.max(1e-12);
        }
    }
    RrReport {
        // The issues' targets are UDP's.
        targets: match o.launch.proto {
            Proto::Udp => targets(&rows),
            Proto::Tcp => Vec::new(),
        },
        rows,
        failed,
        proto: o.launch.proto,
        mtu: o.launch.mtu,
        buffers: o.launch.buffers,
        machine: crate::machine::Machine::this(),
    }
}

/// A target of the issue, checked against the kernel in the same run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RrTarget {
    /// Requests in flight.
    pub outstanding: u32,
    /// What is compared.
    pub what: String,
    /// The figure.
    pub measured: f64,
    /// What it must reach (`at_most`: at most, else at least).
    pub required: f64,
    /// Whether the figure must stay at or below `required`.
    pub at_most: bool,
    /// Whether it did (`false` when not `judged`).
    pub met: bool,
    /// The two cells compared ran in one placement of the CPUs, each throughout (see
    /// ttcp's targets): `false`, and the figure mixes two machines.
    pub judged: bool,
    /// The first cell's core-to-core round trip, ns: which placement the verdict holds for.
    pub core_rtt_ns: Option<f64>,
}

impl RrTarget {
    /// A target comparing `a` with `b`: judged only where they compare like with like.
    fn new(
        outstanding: u32,
        what: &str,
        measured: f64,
        required: f64,
        at_most: bool,
        a: &RrRow,
        b: &RrRow,
    ) -> Self {
        let judged = corelat::comparable(a.placement(), b.placement());
        let ok = if at_most {
            measured <= required
        } else {
            measured >= required
        };
        Self {
            outstanding,
            what: what.into(),
            measured,
            required,
            at_most,
            met: judged && ok,
            judged,
            core_rtt_ns: a.core_rtt_ns(),
        }
    }
}

/// Issue 14's targets: `server` (driver polled) p50 ≤ the kernel's at 1 in flight, and ≥ 2×
/// the kernel's transactions/s at 16 in flight; issue 15's: `server-regions` within 10 % of
/// `server`.
fn targets(rows: &[RrRow]) -> Vec<RrTarget> {
    let find = |s, n| rows.iter().find(|r| r.structure == s && r.outstanding == n);
    let mut out = Vec::new();
    if let (Some(server), Some(kernel)) = (find(Structure::Server, 1), find(Structure::Kernel, 1)) {
        let ratio = server.p50_us / kernel.p50_us.max(1e-9);
        out.push(RrTarget::new(
            1,
            "server p50 ÷ kernel p50",
            ratio,
            1.0,
            true,
            server,
            kernel,
        ));
    }
    if let (Some(server), Some(kernel)) = (find(Structure::Server, 16), find(Structure::Kernel, 16))
    {
        let ratio = server.transactions_per_s / kernel.transactions_per_s.max(1e-9);
        out.push(RrTarget::new(
            16,
            "server txn/s ÷ kernel txn/s",
            ratio,
            2.0,
            false,
            server,
            kernel,
        ));
    }
    // Issue 15: through registered regions, p50 no more than 10 % above and transactions/s
    // no more than 10 % below `server` with shared windows.
    for n in [1, 16] {
        if let (Some(shared), Some(regions)) = (
            find(Structure::Server, n),
            find(Structure::ServerRegions, n),
        ) {
            let (what, ratio, required, at_most) = if n == 1 {
                (
                    "server-regions p50 ÷ server p50",
                    regions.p50_us / shared.p50_us.max(1e-9),
                    1.1,
                    true,
                )
            } else {
                (
                    "server-regions txn/s ÷ server txn/s",
                    regions.transactions_per_s / shared.transactions_per_s.max(1e-9),
                    0.9,
                    false,
                )
            };
            out.push(RrTarget::new(
                n, what, ratio, required, at_most, shared, regions,
            ));
        }
    }
    out
}

fn cell(
    o: &RrOptions,
    structure: Structure,
    outstanding: u32,
    progress: &mut dyn FnMut(u64, f64),
) -> Result<RrRow, CellError> {
    let running = start(
        &o.launch,
        structure,
        &Roles::RequestResponse(outstanding),
        o.size,
        0,
        o.count.unwrap_or(0),
        // The echo's socket queue holds every request in flight.
        (outstanding as usize).max(64),
    )?;
    let seconds = o.count.is_none().then_some(o.seconds);
    let out = super::run(running, seconds, progress)?;
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| CellError::Histogram(e.to_string()))?;
    for &ns in &out.samples {
        let _ = h.record(u64::from(ns).max(1));
    }
    let us = |q: f64| {
        if h.is_empty() {
            0.0
        } else {
            h.value_at_quantile(q) as f64 / 1e3
        }
    };
    let lost_where = losses(&out.parties);
    let lost = out.sent.saturating_sub(out.received);
    let n = out.received.max(1) as f64;
    Ok(RrRow {
        structure,
        proto: o.launch.proto,
        outstanding,
        size: o.size,
        transactions_per_s: out.received as f64 / out.seconds,
        p50_us: us(0.5),
        p99_us: us(0.99),
        max_us: if h.is_empty() {
            0.0
        } else {
            h.max() as f64 / 1e3
        },
        cpu_s_per_txn: out.parties.iter().map(|p| p.cpu_s).sum::<f64>() / n,
        cpu_us_per_txn_by_party: cpu_by_party(&out.parties, n),
        sleeps_per_txn: out
            .parties
            .iter()
            .map(|p| p.voluntary_switches)
            .sum::<u64>() as f64
            / n,
        sent: out.sent,
        received: out.received,
        lost,
        unaccounted: lost.saturating_sub(lost_where.values().sum()),
        lost_where,
        samples: out.samples.len(),
        txn_over_kernel: 0.0,
        p50_over_kernel: 0.0,
        core_rtt_ns_before: None,
        core_rtt_ns_after: None,
        placement_stable: false,
    })
}

impl fmt::Display for RrReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "rr over {} on {} ({} CPUs){}",
            match self.proto {
                Proto::Udp => "UDP",
                Proto::Tcp => "TCP",
            },
            self.machine.cpu,
            self.machine.cpus,
            match self.proto {
                Proto::Udp => "",
                Proto::Tcp => ": one connection per cell, TCP_NODELAY, both ends on this host",
            }
        )?;
        if !self.buffers.is_none() {
            writeln!(
                f,
                "shmnet's frames kept coherent by hand (seed 003): {} (where nc has no copy to replace, UDP and buffers lent to the application, it cleans as ch does: docs/buffers.md)",
                self.buffers
            )?;
        }
        writeln!(
            f,
            "{:>9} {:<14} {:>10} {:>8} {:>9} {:>8} {:>9} {:>11} {:>7} {:>6}  CPU µs/txn by party",
            "in flight",
            "struct",
            "txn/s",
            "÷kernel",
            "p50 µs",
            "÷kernel",
            "p99 µs",
            "CPU µs/txn",
            "sleeps",
            "lost"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>9} {:<14} {:>10.0} {:>8.2} {:>9.1} {:>8.2} {:>9.1} {:>11.2} {:>7.2} {:>6}  {}",
                r.outstanding,
                r.structure.name(),
                r.transactions_per_s,
                r.txn_over_kernel,
                r.p50_us,
                r.p50_over_kernel,
                r.p99_us,
                r.cpu_s_per_txn * 1e6,
                r.sleeps_per_txn,
                r.lost,
                r.cpu_us_per_txn_by_party
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        for e in &self.failed {
            writeln!(f, "FAILED {e}")?;
        }
        if !self.targets.is_empty() {
            writeln!(f, "targets (same run):")?;
            for t in &self.targets {
                writeln!(
                    f,
                    "  {:>3} in flight  {} = {:.2} (need {} {}) {}{}",
                    t.outstanding,
                    t.what,
                    t.measured,
                    if t.at_most { "≤" } else { "≥" },
                    t.required,
                    corelat::verdict(t.judged, t.met),
                    t.core_rtt_ns
                        .map_or(String::new(), |ns| format!(", core-to-core {ns:.0} ns"))
                )?;
            }
        }
        Ok(())
    }
}
