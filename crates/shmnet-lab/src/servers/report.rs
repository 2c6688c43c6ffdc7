//! report.md, report.json and the bar charts of `shmnet lab servers`, beside the shape of
//! seed 002's own figures.

use super::spread::Spread;
use super::{Bench, Cpus, Row, ServersError, ServersReport};
use crate::netbench::Structure;
use crate::plot::{Bar, Group, Panel, PlotError, Scale};
use std::fmt::Write as _;
use std::path::Path;

/// What seed 002 published, as ratios to its kernel (OSF/1) read from its text: the
/// message-based single server (`ipc`) and the shared-memory server (`server`).
struct SeedShape {
    bench: &'static str,
    ipc: &'static str,
    server: &'static str,
}

const SEED: [SeedShape; 7] = [
    SeedShape {
        bench: "ttcp transmit, 10 B / 1 KB / 8 KB",
        ipc: "< 1/3",
        server: "about half the gap recovered",
    },
    SeedShape {
        bench: "ttcp receive, 10 B",
        ipc: "< 1/5",
        server: "1.1 (the one win over the kernel)",
    },
    SeedShape {
        bench: "ttcp receive, 1 KB",
        ipc: "about 1/3",
        server: "just over 1/2",
    },
    SeedShape {
        bench: "ttcp receive, 8 KB",
        ipc: "a little under 1/2",
        server: "a little above ipc",
    },
    SeedShape {
        bench: "ftp transmit",
        ipc: "0.25",
        server: "0.45",
    },
    SeedShape {
        bench: "ftp receive",
        ipc: "just over 0.4",
        server: "just over 0.5",
    },
    SeedShape {
        bench: "x11perf -dot",
        ipc: "about 0.5",
        server: "about 0.75",
    },
];

/// The seed's shared-memory server ÷ its kernel, read from its text, for the rows measured
/// between two machines: ttcp transmit "recovered about half" of a gap from under 1/3
/// (1/3 + 1/2 × 2/3 ≈ 0.67); receive 1.1 at 10 B, "just over half" at 1 KB, "a little
/// faster than" an ipc at a little under 1/2 at 8 KB; ftp 0.45 and 0.5; x11perf 0.75.
fn seed_server_over_kernel(bench: Bench, size: Option<usize>) -> Option<f64> {
    match (bench, size) {
        // "All three systems perform poorly on very small packets, yet still the OSF/1
        // system is more than twice as fast as the other two."
        (Bench::TtcpTransmit, Some(10)) => Some(0.45),
        (Bench::TtcpTransmit, _) => Some(0.67),
        (Bench::TtcpReceive, Some(10)) => Some(1.1),
        (Bench::TtcpReceive, _) => Some(0.5),
        (Bench::FtpTransmit, _) => Some(0.45),
        (Bench::FtpReceive, _) => Some(0.5),
        (Bench::X11Dot, _) => Some(0.75),
        (Bench::Ttcp, _) => None,
    }
}

/// Writes report.md, report.json and the charts into `dir`.
pub(super) fn write(r: &ServersReport, dir: &Path) -> Result<(), ServersError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ServersError::Io { path, source }
    };
    let json = dir.join("report.json");
    std::fs::write(&json, serde_json::to_vec_pretty(r)?).map_err(io(&json))?;
    let charts = charts(r, dir);
    let md = markdown(r, &charts);
    std::fs::write(&r.report, md).map_err(io(&r.report))?;
    Ok(())
}

/// One chart per benchmark family; the file name, or why it was not drawn.
fn charts(r: &ServersReport, dir: &Path) -> Vec<(String, Result<(), PlotError>)> {
    let families: [(&str, &[Bench], &str); 4] = [
        (
            "ttcp.png",
            &[Bench::Ttcp],
            "ttcp over TCP, one host (seed 002's TTCP)",
        ),
        (
            "ttcp-veth.png",
            &[Bench::TtcpTransmit, Bench::TtcpReceive],
            "ttcp across a veth pair, transmit and receive (seed 002's TTCP)",
        ),
        (
            "ftp.png",
            &[Bench::FtpTransmit, Bench::FtpReceive],
            "ftp across a veth pair (seed 002's FTP)",
        ),
        (
            "x11perf.png",
            &[Bench::X11Dot],
            "x11perf -dot across a veth pair (seed 002's X11perf)",
        ),
    ];
    let mut out = Vec::new();
    for (file, benches, title) in families {
        let panels: Vec<Panel> = [Cpus::One, Cpus::Two]
            .into_iter()
            .map(|cpus| {
                let mut groups: Vec<Group> = Vec::new();
                for row in r
                    .rows
                    .iter()
                    .filter(|x| x.cpus == cpus && benches.contains(&x.bench))
                {
                    let label = match (row.bench, row.size) {
                        (Bench::TtcpTransmit, Some(s)) => format!("tx {s} B"),
                        (Bench::TtcpReceive, Some(s)) => format!("rx {s} B"),
                        (_, Some(s)) => format!("{s} B"),
                        (b, None) => b.name().to_string(),
                    };
                    let bar = Bar {
                        series: row.structure.name().into(),
                        value: row.value.as_ref().map_or(0.0, |v| v.mean),
                    };
                    match groups.iter_mut().find(|g| g.label == label) {
                        Some(g) => g.bars.push(bar),
                        None => groups.push(Group {
                            label,
                            bars: vec![bar],
                        }),
                    }
                }
                Panel {
                    title: cpus.name().into(),
                    groups,
                }
            })
            .filter(|p| !p.groups.is_empty())
            .collect();
        if panels.is_empty() {
            continue;
        }
        let unit = benches[0].unit();
        let drawn = crate::plot::bars(
            &dir.join(file),
            title,
            &format!("{unit}, mean of the repetitions ÷ the group's largest"),
            &panels,
            &|v| human(v),
            Scale::Group,
        );
        out.push((file.to_string(), drawn));
    }
    out
}

/// A row's benchmark, with its message size if it has one.
fn label(r: &Row) -> String {
    match r.size {
        Some(s) => format!("{} {s} B", r.bench.name()),
        None => r.bench.name().to_string(),
    }
}

/// A figure for a table: an SI suffix (k, M, G) and a few decimals.
pub fn human(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.3}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.3}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".to_string(), |x| format!("{x:.digits$}"))
}

/// The table of one benchmark's rows.
fn table(md: &mut String, rows: &[&Row]) {
    let ttcp = rows.iter().any(|r| r.bench == Bench::Ttcp);
    let unit = rows.first().map_or("", |r| r.unit);
    if ttcp {
        md.push_str(&format!(
            "| CPUs | size | structure | {unit}: mean ± sd (min–max) | n | ÷ kernel | gap recovered | sleeps/msg | CPU µs/msg | lost |\n\
             |---|---:|---|---|---:|---:|---:|---:|---:|---:|\n"
        ));
    } else {
        md.push_str(&format!(
            "| CPUs | benchmark | structure | {unit}: mean ± sd (min–max) | n | ÷ kernel | gap recovered | bytes/frame sent | bytes/frame received |\n\
             |---|---|---|---|---:|---:|---:|---:|---:|\n"
        ));
    }
    for r in rows {
        let value = r.value.as_ref().map_or("did not run".to_string(), |v| {
            format!(
                "{} ± {} ({}–{})",
                human(v.mean),
                human(v.sd),
                human(v.min),
                human(v.max)
            )
        });
        let n = r.value.as_ref().map_or(0, |v| v.n);
        if ttcp {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {value} | {n} | {} | {} | {} | {} | {} |",
                r.cpus.name(),
                r.size.unwrap_or(0),
                r.structure.name(),
                opt(r.over_kernel, 2),
                opt(r.gap_recovered, 2),
                opt(r.sleeps_per_msg.as_ref().map(|s| s.mean), 3),
                opt(r.cpu_us_per_msg.as_ref().map(|s| s.mean), 2),
                r.lost,
            );
        } else {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {value} | {n} | {} | {} | {} | {} |",
                r.cpus.name(),
                label(r),
                r.structure.name(),
                opt(r.over_kernel, 2),
                opt(r.gap_recovered, 2),
                opt(r.wire_bytes_per_frame_sent.as_ref().map(|s| s.mean), 0),
                opt(r.wire_bytes_per_frame_received.as_ref().map(|s| s.mean), 0),
            );
        }
    }
    let failures: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.failures.iter().map(move |f| {
                format!(
                    "- {} {} {}: {f}",
                    r.cpus.name(),
                    label(r),
                    r.structure.name()
                )
            })
        })
        .collect();
    if !failures.is_empty() {
        md.push_str("\nRepetitions that failed:\n\n");
        md.push_str(&failures.join("\n"));
        md.push('\n');
    }
    md.push('\n');
}

fn find(
    r: &ServersReport,
    bench: Bench,
    cpus: Cpus,
    size: Option<usize>,
    s: Structure,
) -> Option<&Row> {
    r.rows
        .iter()
        .find(|x| x.bench == bench && x.cpus == cpus && x.size == size && x.structure == s)
}

/// The seed's two surprises, checked with the counters that decide them.
fn surprises(md: &mut String, r: &ServersReport) {
    md.push_str("## The seed's two surprises, checked\n\n");
    for cpus in [Cpus::One, Cpus::Two] {
        let get = |size, s| find(r, Bench::Ttcp, cpus, Some(size), s);
        let (Some(k10), Some(s10)) = (get(10, Structure::Kernel), get(10, Structure::Server))
        else {
            continue;
        };
        let sleeps = |x: &Row| x.sleeps_per_msg.as_ref().map_or(f64::NAN, |s| s.mean);
        let _ = writeln!(
            md,
            "- **10-byte messages beat the kernel by avoiding wake-ups?** ({}) server {}× the kernel; \
             sleeps per message: kernel {:.3}, server {:.3}; CPU µs per message: kernel {}, server {}. {}",
            cpus.name(),
            opt(s10.over_kernel, 2),
            sleeps(k10),
            sleeps(s10),
            opt(k10.cpu_us_per_msg.as_ref().map(|s| s.mean), 2),
            opt(s10.cpu_us_per_msg.as_ref().map(|s| s.mean), 2),
            match (
                s10.over_kernel.is_some_and(|o| o > 1.0),
                sleeps(s10) < sleeps(k10)
            ) {
                (true, true) =>
                    "Yes, as in the seed: the server passes the kernel, and its parties sleep less often per message than the kernel's.",
                (true, false) =>
                    "The server passes the kernel, but not by sleeping less: its parties sleep as often per message.",
                (false, true) =>
                    "No: its parties sleep less often per message, but the server does not pass the kernel.",
                (false, false) =>
                    "No: the server neither passes the kernel nor sleeps less often per message.",
            }
        );
        if let (Some(s1), Some(k8), Some(s8)) = (
            get(1024, Structure::Server),
            get(8192, Structure::Kernel),
            get(8192, Structure::Server),
        ) {
            let lost: u64 = r
                .rows
                .iter()
                .filter(|x| x.bench == Bench::Ttcp && x.cpus == cpus && x.size == Some(8192))
                .map(|x| x.lost)
                .sum();
            let _ = writeln!(
                md,
                "- **Why do 8 KB messages fall back?** ({}) server ÷ kernel {} at 1 KB, {} at 8 KB; \
                 messages lost at 8 KB over every repetition and structure: {lost} (over TCP a \
                 frame a full pool drops is retransmitted: it would show as time, not loss); CPU \
                 µs per message at 8 KB: kernel {}, server {}.",
                cpus.name(),
                opt(s1.over_kernel, 2),
                opt(s8.over_kernel, 2),
                opt(k8.cpu_us_per_msg.as_ref().map(|s| s.mean), 2),
                opt(s8.cpu_us_per_msg.as_ref().map(|s| s.mean), 2),
            );
        }
    }
    for cpus in [Cpus::One, Cpus::Two] {
        let ratio = |size| {
            find(r, Bench::TtcpReceive, cpus, Some(size), Structure::Server)
                .and_then(|x| x.over_kernel)
        };
        if let (Some(small), Some(large)) = (ratio(10), ratio(8192)) {
            let _ = writeln!(
                md,
                "- Across the veth pair, receive apart as the seed measured it ({}): server ÷ \
                 kernel {small:.2} at 10 B, {large:.2} at 8 KB.",
                cpus.name()
            );
        }
    }
    md.push('\n');
}

/// Why a `server` row sits where it does, from the counters beside it: for ttcp on one host
/// the sleeps and CPU per message of every party, across the veth pair the bytes per frame
/// each way (and, for small messages, the kernel's system call per message).
fn why(r: &ServersReport, row: &Row) -> String {
    let kernel = find(r, row.bench, row.cpus, row.size, Structure::Kernel);
    let mean = |x: Option<&Spread>| opt(x.map(|s| s.mean), 3);
    if row.bench == Bench::Ttcp {
        return format!(
            "sleeps per message {} (kernel {}), CPU µs per message {} (kernel {})",
            mean(row.sleeps_per_msg.as_ref()),
            mean(kernel.and_then(|k| k.sleeps_per_msg.as_ref())),
            opt(row.cpu_us_per_msg.as_ref().map(|s| s.mean), 2),
            opt(
                kernel
                    .and_then(|k| k.cpu_us_per_msg.as_ref())
                    .map(|s| s.mean),
                2
            ),
        );
    }
    let per = |x: Option<&Row>, sent: bool| {
        opt(
            x.and_then(|x| {
                if sent {
                    x.wire_bytes_per_frame_sent.as_ref()
                } else {
                    x.wire_bytes_per_frame_received.as_ref()
                }
            })
            .map(|s| s.mean),
            0,
        )
    };
    let mut w = format!(
        "bytes per frame the measured side handed the veth pair: kernel {}, server {}; Linux \
         handed back: {} to the kernel, {} to the server",
        per(kernel, true),
        per(Some(row), true),
        per(kernel, false),
        per(Some(row), false),
    );
    if matches!(row.bench, Bench::TtcpTransmit | Bench::TtcpReceive)
        && row.size.is_some_and(|s| s <= 1024)
    {
        w.push_str(
            "; and each message is a system call on the kernel's socket but a call into memory \
             the application shares with the server for shmnet's client",
        );
    }
    w
}

/// Where ours and the seed's shapes differ, with the counters that say why.
fn differences(md: &mut String, r: &ServersReport) {
    md.push_str("## Where the shape differs from the seed's, and why\n\n");
    md.push_str(
        "The seed's server sat between ipc and the kernel on every row but one (it passed the \
         kernel by 10 % on 10-byte receives). Every `server` row here outside that shape, or \
         below the seed's own ratio to its kernel:\n\n",
    );
    let mut said = false;
    for row in r.rows.iter().filter(|x| x.structure == Structure::Server) {
        let ipc = find(r, row.bench, row.cpus, row.size, Structure::Ipc);
        let (Some(this), Some(ipc_over)) = (row.over_kernel, ipc.and_then(|i| i.over_kernel))
        else {
            continue;
        };
        let place = match row.size {
            Some(s) => format!("{} {s} B on {}", row.bench.name(), row.cpus.name()),
            None => format!("{} on {}", row.bench.name(), row.cpus.name()),
        };
        let shape = if ipc_over > 1.1 {
            format!(
                "ipc passes the kernel too ({ipc_over:.2}×; server {this:.2}×), so the gap \
                 measure has no meaning here"
            )
        } else if this < ipc_over {
            format!("the server is slower than ipc ({this:.2}× against {ipc_over:.2}×)")
        } else if let Some(g) = row.gap_recovered.filter(|g| *g > 1.0) {
            format!("the server passes the kernel ({this:.2}×; gap recovered {g:.2})")
        } else if let Some(seed) =
            seed_server_over_kernel(row.bench, row.size).filter(|&seed| this < seed)
        {
            format!(
                "the server reaches {this:.2}× the kernel where the seed's reached {seed:.2}×{}",
                row.gap_recovered
                    .map(|g| format!(" (gap recovered {g:.2})"))
                    .unwrap_or_default()
            )
        } else {
            continue;
        };
        said = true;
        let _ = writeln!(md, "- {place}: {shape} — {}.", why(r, row));
    }
    if r.rows.iter().any(|x| x.bench != Bench::Ttcp) {
        md.push_str(
            "\nAcross the veth pair the kernel hands the wire GSO segments of up to 64 KiB (veth \
             neither segments nor checksums them: the bytes per frame above), while shmnet's \
             AF_PACKET driver hands it frames of at most 1,514 bytes, each copied through the \
             packet ring and carried by the kernel's packet path one at a time — and each is a \
             TCP segment Linux's receiver processes alone. What Linux sends back arrives as \
             super-frames either way; the kernel's stack takes each whole, shmnet's driver cuts \
             it into wire frames first (`gso_split` in `shmnet stats`). The seed's Ethernet had \
             no offloads, so its kernel paid per frame too; an AF_XDP driver (issue 21) takes \
             the copy away, not the frame count.\n",
        );
    }
    if !said {
        md.push_str("None.\n");
    }
    md.push('\n');
}

/// Seed 002's synchronisation beside the rings: `server-faithful` ÷ `server-thread`.
fn sync_beside(md: &mut String, r: &ServersReport) {
    if r.sync.is_empty() {
        return;
    }
    md.push_str(
        "## The seed's synchronisation beside ours\n\n\
         Both rows run the shared-memory server with its driver on a thread of the server \
         process; `server-thread` joins them by the channel's wait-free rings (eventfd \
         wake-ups announced by the sleeper), `server-faithful` by seed 002's own queues \
         (`--sync faithful`: asymmetric Peterson mutexes from 32-bit loads and stores, two \
         sub-queues with the Enable protocol, a condition variable over counting events). \
         Above 1: the seed's queues were faster.\n\n\
         | benchmark | CPUs | faithful ÷ modern | CPU µs/msg (modern → faithful) | sleeps/msg (modern → faithful) |\n\
         |---|---|---|---|---|\n",
    );
    let pair = |p: Option<(f64, f64)>, digits: usize| {
        p.map_or("–".to_string(), |(m, f)| {
            format!("{m:.digits$} → {f:.digits$}")
        })
    };
    for c in &r.sync {
        let bench = match c.size {
            Some(s) => format!("{} {s} B", c.bench.name()),
            None => c.bench.name().to_string(),
        };
        let _ = writeln!(
            md,
            "| {bench} | {} | {:.2} | {} | {} |",
            c.cpus.name(),
            c.faithful_over_modern,
            pair(c.cpu_us_per_msg, 2),
            pair(c.sleeps_per_msg, 3),
        );
    }
    md.push('\n');
}

/// report.md.
fn markdown(r: &ServersReport, charts: &[(String, Result<(), PlotError>)]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Seed 002's benchmarks, run as it ran them\n\n\
         `shmnet lab servers{}` on {} ({} CPUs, Linux {}{}), {} repetitions of every row, \
         {:.0} s. The kernel and the message-based interface (`ipc`) are measured in the same \
         run; every ratio is within the run.\n",
        if r.quick { " --quick" } else { "" },
        r.machine.cpu,
        r.machine.cpus,
        r.machine.kernel,
        if r.machine.virtualized {
            ", a virtual machine"
        } else {
            ""
        },
        r.repetitions,
        r.seconds
    );
    md.push_str(
        "**Gap recovered** is the seed's summary measure: `(server − ipc) ÷ (kernel − ipc)` on the \
         means — 0 at the message-based interface, 1 at the kernel, above 1 past it (– when the \
         two baselines are within 10 % of each other). On one CPU every party (the kernel's two \
         processes, or shmnet's server and applications) takes turns on one core, as on the \
         seed's uniprocessor 386.\n\n",
    );
    md.push_str("## What the seed measured (ratios to its kernel, OSF/1)\n\n| benchmark | ipc (OSF single server) | server (shared memory) |\n|---|---|---|\n");
    for s in SEED {
        let _ = writeln!(md, "| {} | {} | {} |", s.bench, s.ipc, s.server);
    }
    md.push('\n');
    for (benches, heading, note) in [
        (
            &[Bench::Ttcp][..],
            "## ttcp over TCP, one host",
            "One connection per cell, each message one write of its size, both ends the \
             structure's (the kernel's over 127.0.0.1, shmnet's over a loopback wire of MTU \
             16,384 B): each cell is the seed's transmit and receive at once.",
        ),
        (
            &[Bench::TtcpTransmit, Bench::TtcpReceive][..],
            "## ttcp across a veth pair, transmit and receive",
            "As between the seed's two machines: the measured side writes the stream in messages \
             of each size (`shmnet app send-file --write-size`) to Debian's `nc -l` writing \
             /dev/null, or reads it in reads of each size (`recv-file --read-size`) from `nc -N`; \
             the file behind it is read in large blocks, so the file system stays out of the \
             way. `--kernel` for the kernel row.",
        ),
        (
            &[Bench::FtpTransmit, Bench::FtpReceive][..],
            "## ftp across a veth pair",
            "A file read from disk (the page cache after the first read) sent by `shmnet app \
             send-file` to Debian's `nc -l` writing /dev/null in the other namespace, and sent \
             back by `nc -N` to `shmnet app recv-file` writing /dev/null; `--kernel` for the \
             kernel row. MTU 1,500 B; the kernel keeps veth's default offloads.",
        ),
        (
            &[Bench::X11Dot][..],
            "## x11perf -dot across a veth pair",
            "Debian's Xvfb in the other namespace listening on TCP; the unmodified `x11perf -dot` \
             on the kernel's sockets, or under `shmnet run` (the sockets library) through the \
             server under test. x11perf's own repetitions.",
        ),
    ] {
        let rows: Vec<&Row> = r
            .rows
            .iter()
            .filter(|x| benches.contains(&x.bench))
            .collect();
        let _ = writeln!(md, "{heading}\n\n{note}\n");
        if let Some(s) = r
            .skipped
            .iter()
            .find(|s| s.benches.iter().any(|b| benches.contains(b)))
        {
            let _ = writeln!(md, "**Skipped:** {}\n", s.why);
        }
        if rows.is_empty() {
            continue;
        }
        table(&mut md, &rows);
        let file = match benches[0] {
            Bench::Ttcp => "ttcp.png",
            Bench::TtcpTransmit | Bench::TtcpReceive => "ttcp-veth.png",
            Bench::X11Dot => "x11perf.png",
            Bench::FtpTransmit | Bench::FtpReceive => "ftp.png",
        };
        match charts.iter().find(|(f, _)| f == file) {
            Some((f, Ok(()))) => {
                let _ = writeln!(md, "![{heading}]({f})\n");
            }
            Some((_, Err(e))) => {
                let _ = writeln!(md, "(chart not drawn: {e})\n");
            }
            None => {}
        }
    }
    surprises(&mut md, r);
    differences(&mut md, r);
    sync_beside(&mut md, r);
    md.push_str("## Not built yet\n\n");
    if r.not_built.is_empty() {
        md.push_str("Nothing: every row seed 002's benchmarks name runs.\n");
    }
    for n in &r.not_built {
        let _ = writeln!(md, "- {n}");
    }
    if !r.failures.is_empty() {
        md.push_str("\n## Failures\n\n");
        for f in &r.failures {
            let _ = writeln!(md, "- {f}");
        }
    }
    md.push_str("\nEvery figure is also in report.json.\n");
    md
}

#[cfg(test)]
mod tests {
    use super::super::{Collected, Samples, rows};
    use super::*;

    /// One row's figures: bench, size, structure, the six values' mean, bytes per frame sent
    /// and received.
    type Cell = (Bench, Option<usize>, Structure, f64, f64, f64);

    /// A report of the given rows.
    fn report(cells: &[Cell]) -> ServersReport {
        let mut c = Collected::default();
        for &(bench, size, structure, v, sent, received) in cells {
            let s: &mut Samples = c.at((bench, Cpus::Two, size, structure));
            s.values = vec![v * 0.9, v * 1.1, v, v, v, v];
            s.wire_sent = vec![sent];
            s.wire_received = vec![received];
        }
        ServersReport {
            machine: crate::machine::Machine::this(),
            repetitions: 6,
            quick: true,
            rows: rows(c.rows),
            sync: Vec::new(),
            skipped: Vec::new(),
            not_built: Vec::new(),
            failures: Vec::new(),
            file_bytes: 0,
            seconds: 1.0,
            report: "report.md".into(),
        }
    }

    #[test]
    fn each_shape_that_is_not_the_seeds_is_named_with_its_counters() {
        use Structure::{Ipc, Kernel, Server};
        let r = report(&[
            // ipc passes the kernel: the measure has no meaning.
            (Bench::TtcpReceive, Some(10), Kernel, 12.0, 66.0, 40_000.0),
            (Bench::TtcpReceive, Some(10), Ipc, 89.0, 66.0, 50_000.0),
            (Bench::TtcpReceive, Some(10), Server, 205.0, 66.0, 44_000.0),
            // The seed's shape: nothing to say.
            (Bench::FtpReceive, None, Kernel, 800.0, 66.0, 30_000.0),
            (Bench::FtpReceive, None, Ipc, 200.0, 66.0, 60_000.0),
            (Bench::FtpReceive, None, Server, 500.0, 66.0, 60_000.0),
            // Far below the kernel across the pair: the bytes per frame say why.
            (Bench::FtpTransmit, None, Kernel, 943.0, 55_067.0, 66.0),
            (Bench::FtpTransmit, None, Ipc, 99.0, 1514.0, 66.0),
            (Bench::FtpTransmit, None, Server, 155.0, 1513.0, 66.0),
        ]);
        let mut md = String::new();
        differences(&mut md, &r);
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with("- ")).collect();
        assert_eq!(lines.len(), 2, "{md}");
        assert!(
            lines[0].starts_with("- ttcp receive 10 B on two CPUs: ipc passes the kernel too")
                && lines[0].contains("system call"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with(
                "- ftp transmit on two CPUs: the server reaches 0.16× the kernel where the seed's reached 0.45×"
            )
                && lines[1].contains("kernel 55067, server 1513"),
            "{}",
            lines[1]
        );
    }

    /// Each row measured both ways gets its ratio; a row measured one way gets none.
    #[test]
    fn the_two_synchronisations_are_compared_row_by_row() {
        use Structure::{ServerFaithful, ServerThread};
        let mut r = report(&[
            (Bench::Ttcp, Some(10), ServerThread, 2.0, 0.0, 0.0),
            (Bench::Ttcp, Some(10), ServerFaithful, 3.0, 0.0, 0.0),
            (Bench::Ttcp, Some(1024), ServerThread, 5.0, 0.0, 0.0),
            (Bench::X11Dot, None, ServerThread, 4.0, 0.0, 0.0),
            (Bench::X11Dot, None, ServerFaithful, 2.0, 0.0, 0.0),
        ]);
        r.sync = super::super::sync_compared(&r.rows);
        let got: Vec<(Bench, Option<usize>, f64)> = r
            .sync
            .iter()
            .map(|c| (c.bench, c.size, c.faithful_over_modern))
            .collect();
        assert_eq!(
            got,
            vec![(Bench::Ttcp, Some(10), 1.5), (Bench::X11Dot, None, 0.5)]
        );
        let mut md = String::new();
        sync_beside(&mut md, &r);
        assert!(md.contains("| ttcp 10 B | two CPUs | 1.50 |"), "{md}");
        assert!(md.contains("| x11perf -dot | two CPUs | 0.50 |"), "{md}");
    }

    #[test]
    fn human_figures_keep_three_digits() {
        assert_eq!(human(263_500_000.0), "263.500M");
        assert_eq!(human(12_345.0), "12.3k");
        assert_eq!(human(943.4), "943");
        assert_eq!(human(4.014), "4.01");
    }
}
