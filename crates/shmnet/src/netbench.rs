//! `shmnet ttcp`, `shmnet rr`, and the hidden `shmnet party` their cells start (and
//! `shmnet worker`, the same workers from command-line options).

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use shmnet_lab::netbench::rr::{RrOptions, RrReport};
use shmnet_lab::netbench::ttcp::{Dir, TtcpOptions, TtcpReport};
use shmnet_lab::netbench::worker::{self, InlineJob, WorkerJob, WorkerSpec};
use shmnet_lab::netbench::{Launch, Proto, Structure};
use shmnet_lab::plot::{Bar, Group, Panel};
use std::path::PathBuf;

fn list<T: std::str::FromStr<Err = String>>(s: &str) -> Result<Vec<T>, String> {
    s.split(',').map(|x| x.trim().parse()).collect()
}

fn sizes(s: &str) -> Result<Vec<usize>, String> {
    let v: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse().map_err(|_| format!("bad size {x:?}")))
        .collect::<Result<_, _>>()?;
    if let Some(bad) = v.iter().find(|&&z| z == 0 || z > 65_507) {
        return Err(format!("a UDP message holds 1 to 65,507 bytes, not {bad}"));
    }
    Ok(v)
}

/// The most bytes of one ttcp write over TCP.
const MAX_TCP_WRITE: usize = 16 << 20;

/// ttcp's `--size`: any positive sizes here; the range is the protocol's (checked in
/// [`ttcp`]).
fn write_sizes(s: &str) -> Result<Vec<usize>, String> {
    let v: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse().map_err(|_| format!("bad size {x:?}")))
        .collect::<Result<_, _>>()?;
    if let Some(bad) = v.iter().find(|&&z| z == 0 || z > MAX_TCP_WRITE) {
        return Err(format!(
            "a message (a UDP datagram, or one TCP write) holds 1 to {MAX_TCP_WRITE} bytes, not {bad}"
        ));
    }
    Ok(v)
}

/// Every structure, each placement of the server's driver included.
const DEFAULT_STRUCTURES: &str =
    "kernel,ipc,server,server-thread,server-process,server-regions,inline";

#[derive(Args)]
pub struct TtcpArgs {
    /// Structures to compare: kernel (Linux UDP over loopback), ipc (shmnet, messages copied
    /// through sockets), server (shmnet, shared windows, the driver polled by the server's
    /// loop), server-thread (the driver a thread of the server), server-process (the driver a
    /// process of its own), server-faithful (as server-thread, joined by seed 002's own queues:
    /// `--sync faithful`; not in the default list), server-regions (as server, under
    /// `--isolation regions`: the application maps only its own memory), inline (one
    /// process).
    #[arg(long, default_value = DEFAULT_STRUCTURES, value_parser = list::<Structure>)]
    structure: std::vec::Vec<Structure>,
    /// The transport: udp (each message one datagram; a cell per direction, the shmnet
    /// structures' wire a softnic that sends or sinks) or tcp (each message one write of
    /// --size bytes on one TCP connection from a sender application to a receiver
    /// application, both on this host over a loopback wire — the kernel's over 127.0.0.1,
    /// shmnet's a loopback softnic — so every structure runs both ends' protocol work;
    /// --dir and --window do not apply: TCP's flow control is the window).
    #[arg(long, default_value = "udp", value_parser = |s: &str| s.parse::<Proto>())]
    proto: Proto,
    /// Bytes per message (comma-separated): UDP payloads of 1 to 65,507 bytes (default
    /// 10,1024,8192,14792), or TCP writes (default 8192,65536).
    #[arg(long, value_parser = write_sizes)]
    size: Option<std::vec::Vec<usize>>,
    /// Directions: tx (application → wire), rx (wire → application). UDP only.
    #[arg(long, default_value = "tx,rx", value_parser = list::<Dir>)]
    dir: std::vec::Vec<Dir>,
    /// Messages per cell (instead of --seconds).
    #[arg(long, conflicts_with = "seconds")]
    count: Option<u64>,
    /// Seconds per cell (default 2; 0.25 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// A quarter second per cell (and about a second for the hand-off probe): the whole
    /// table in about half a minute.
    #[arg(long)]
    quick: bool,
    /// The sender's window in messages (default: 1 MiB of messages, 8 to 256).
    #[arg(long)]
    window: Option<u64>,
    /// Checksums on in the shmnet structures: UDP's, and TCP's over the loopback wire
    /// (loopback computes none, so off by default).
    #[arg(long)]
    checksum: bool,
    /// Over TCP: the MTU of shmnet's loopback wire, 576 to 32,694 bytes (default 16,384).
    /// Linux's lo has an MTU of 65,536, so the kernel carries a stream in segments of up to
    /// 64 KiB; shmnet's segments are one pool buffer each, which grows with the MTU. Give
    /// 1,500 to measure an Ethernet-sized wire.
    #[arg(long, value_name = "BYTES")]
    mtu: Option<usize>,
    /// Seed 003's cache maintenance of the shmnet structures' frames, per direction:
    /// send=MODE,recv=MODE with MODE one of ch (clean each line with clflushopt), ch-all (the
    /// seed's whole-cache clean), cs (software clean: junk reads in the frame's sets), nc
    /// (bypass: non-temporal stores on send; streaming loads and eviction on receive) or none
    /// (the default: x86's DMA is coherent). See docs/buffers.md.
    #[arg(
        long,
        value_name = "send=MODE,recv=MODE",
        default_value = "send=none,recv=none"
    )]
    buffers: shmnet_chan::coherence::BufferModes,
    /// Print one JSON object (rows as the issue names them, and everything else).
    #[arg(long)]
    json: bool,
    /// Draw the bars, normalised to the fastest structure per size, into this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
}

/// `shmnet bench handoff`.
#[derive(Args)]
pub struct HandoffArgs {
    /// 3 runs of about 80 ms per size (about a second in all) instead of 5 of 200 ms.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// UDP payload bytes per message (comma-separated).
    #[arg(long, default_value = "10,1024,8192,14792", value_parser = sizes)]
    size: std::vec::Vec<usize>,
}

/// `shmnet bench handoff`: the cross-core hand-off limit.
pub fn bench_handoff(a: HandoffArgs) -> Result<()> {
    use shmnet_lab::bench::handoff;
    let opts = handoff::HandoffOptions::new(a.quick, a.size, None)?;
    let mut wrong = 0;
    crate::emit(a.json, |progress| {
        let r = handoff::run(&opts, progress);
        wrong = r.wrong_messages;
        r
    })?;
    if wrong > 0 {
        bail!("the hand-off probe delivered {wrong} message(s) wrong, so its figures are void");
    }
    Ok(())
}

#[derive(Args)]
pub struct RrArgs {
    /// Structures to compare (as for ttcp: kernel, ipc, server, server-thread,
    /// server-process, server-regions, inline).
    #[arg(long, default_value = DEFAULT_STRUCTURES, value_parser = list::<Structure>)]
    structure: std::vec::Vec<Structure>,
    /// The transport: udp (each request and reply one datagram) or tcp (one connection per
    /// cell with TCP_NODELAY, requests and replies --size-byte pieces of its two streams;
    /// the kernel over 127.0.0.1, shmnet over a loopback softnic, requester and echo both
    /// applications).
    #[arg(long, default_value = "udp", value_parser = |s: &str| s.parse::<Proto>())]
    proto: Proto,
    /// Requests in flight (comma-separated; each is a cell). Default 1,16 over UDP, 1 over
    /// TCP.
    #[arg(long)]
    outstanding: Option<String>,
    /// Request and reply bytes.
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// Transactions per cell (instead of --seconds).
    #[arg(long, conflicts_with = "seconds")]
    count: Option<u64>,
    /// Seconds per cell (default 2; 0.25 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// A quarter second per cell.
    #[arg(long)]
    quick: bool,
    /// Checksums on in the shmnet structures (UDP's, and TCP's over the loopback wire).
    #[arg(long)]
    checksum: bool,
    /// Over TCP: the MTU of shmnet's loopback wire, 576 to 32,694 bytes (default 16,384).
    /// Linux's lo has an MTU of 65,536, so the kernel carries a stream in segments of up to
    /// 64 KiB; shmnet's segments are one pool buffer each, which grows with the MTU. Give
    /// 1,500 to measure an Ethernet-sized wire.
    #[arg(long, value_name = "BYTES")]
    mtu: Option<usize>,
    /// Seed 003's cache maintenance of the shmnet structures' frames, per direction:
    /// send=MODE,recv=MODE with MODE one of ch (clean each line with clflushopt), ch-all (the
    /// seed's whole-cache clean), cs (software clean: junk reads in the frame's sets), nc
    /// (bypass: non-temporal stores on send; streaming loads and eviction on receive) or none
    /// (the default: x86's DMA is coherent). See docs/buffers.md.
    #[arg(
        long,
        value_name = "send=MODE,recv=MODE",
        default_value = "send=none,recv=none"
    )]
    buffers: shmnet_chan::coherence::BufferModes,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn launch(
    checksum: bool,
    proto: Proto,
    mtu: Option<usize>,
    buffers: shmnet_chan::coherence::BufferModes,
) -> Result<Launch> {
    let mtu = match (proto, mtu) {
        (Proto::Udp, Some(_)) => {
            bail!("--mtu applies to --proto tcp only (UDP cells use softnic's 1,500-byte wire)")
        }
        (Proto::Udp, None) => 1500,
        (Proto::Tcp, None) => shmnet_lab::netbench::TCP_LOOPBACK_MTU,
        (Proto::Tcp, Some(m)) => {
            if !(shmnet_io::spec::MIN_MTU..=shmnet_io::spec::MAX_MTU).contains(&m) {
                return Err(shmnet_io::spec::SpecError::Mtu(m).into());
            }
            m
        }
    };
    shmnet_lab::netbench::short_timer_slack();
    Ok(Launch {
        exe: std::env::current_exe().context("finding this program to start the parties")?,
        checksum,
        proto,
        mtu,
        buffers,
        capture: None,
    })
}

fn seconds(given: Option<f64>, quick: bool) -> Result<f64> {
    let s = given.unwrap_or(if quick { 0.25 } else { 2.0 });
    if !(s > 0.0 && s.is_finite()) {
        bail!("--seconds must be a positive number of seconds");
    }
    Ok(s)
}

pub fn ttcp(a: TtcpArgs) -> Result<()> {
    if a.window == Some(0) {
        eprintln!(
            "note: --window 0 lets the sender run unchecked: expect losses, each counted where it happened"
        );
    }
    let sizes = match (a.proto, a.size) {
        (Proto::Udp, None) => vec![10, 1024, 8192, 14_792],
        (Proto::Tcp, None) => vec![8192, 65_536],
        (Proto::Udp, Some(v)) => {
            if let Some(bad) = v.iter().find(|&&z| z > 65_507) {
                bail!(
                    "a UDP message holds 1 to 65,507 bytes, not {bad} (over TCP, use --proto tcp)"
                );
            }
            v
        }
        (Proto::Tcp, Some(v)) => v,
    };
    let opts = TtcpOptions {
        launch: launch(a.checksum, a.proto, a.mtu, a.buffers)?,
        structures: a.structure,
        sizes,
        dirs: a.dir,
        count: a.count,
        seconds: seconds(a.seconds, a.quick)?,
        window: a.window,
        quick: a.quick,
    };
    let plot = a.plot.clone();
    let json = a.json;
    let mut report = None;
    crate::emit(json, |progress| {
        let r = shmnet_lab::netbench::ttcp::run(&opts, progress);
        report = Some(r.clone());
        r
    })?;
    let report = report.expect("emit ran the benchmark");
    if let Some(path) = plot {
        draw_ttcp(&report, &path)?;
        if !json {
            println!("plot: {}", path.display());
        }
    }
    if !report.failed.is_empty() {
        bail!("{} cell(s) failed (see above)", report.failed.len());
    }
    Ok(())
}

fn draw_ttcp(report: &TtcpReport, path: &std::path::Path) -> Result<()> {
    let panels: Vec<Panel> = [Dir::Tx, Dir::Rx, Dir::Stream]
        .into_iter()
        .filter(|d| report.rows.iter().any(|r| r.dir == *d))
        .map(|d| {
            let mut sizes: Vec<usize> = report
                .rows
                .iter()
                .filter(|r| r.dir == d)
                .map(|r| r.size)
                .collect();
            sizes.dedup();
            Panel {
                title: match d {
                    Dir::Tx => "ttcp transmit".into(),
                    Dir::Rx => "ttcp receive".into(),
                    Dir::Stream => "ttcp over TCP".into(),
                },
                groups: sizes
                    .into_iter()
                    .map(|size| Group {
                        label: format!("{size} B"),
                        bars: report
                            .rows
                            .iter()
                            .filter(|r| r.dir == d && r.size == size)
                            .map(|r| Bar {
                                series: r.structure.name().into(),
                                value: r.msgs_per_s,
                            })
                            .collect(),
                    })
                    .collect(),
            }
        })
        .collect();
    shmnet_lab::plot::normalized_bars(
        path,
        "shmnet ttcp: messages/s by structure",
        "relative to the fastest",
        &panels,
        &|v| {
            if v >= 1e6 {
                format!("{:.1}M", v / 1e6)
            } else {
                format!("{:.0}k", v / 1e3)
            }
        },
    )
    .with_context(|| format!("drawing {}", path.display()))
}

/// Most requests in flight: every request and its reply fit the loopback wire's backlog at
/// once, so the shmnet structures never refuse one the kernel would carry.
const MAX_OUTSTANDING: u32 = (shmnet_io::driver::softnic::LOOPBACK_BACKLOG / 2) as u32;

pub fn rr(a: RrArgs) -> Result<()> {
    let outstanding: Vec<u32> = a
        .outstanding
        .as_deref()
        .unwrap_or(match a.proto {
            Proto::Udp => "1,16",
            Proto::Tcp => "1",
        })
        .split(',')
        .map(|x| x.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .ok()
        .filter(|v: &Vec<u32>| v.iter().all(|&n| (1..=MAX_OUTSTANDING).contains(&n)))
        .with_context(|| {
            format!(
                "--outstanding takes numbers from 1 to {MAX_OUTSTANDING}, like 1,16 (the loopback wire holds {} frames: a request and a reply each)",
                shmnet_io::driver::softnic::LOOPBACK_BACKLOG
            )
        })?;
    if !(8..=1472).contains(&a.size) {
        bail!("--size must be 8 to 1,472 bytes (the sequence number takes 8; one frame)");
    }
    let opts = RrOptions {
        launch: launch(a.checksum, a.proto, a.mtu, a.buffers)?,
        structures: a.structure,
        outstanding,
        size: a.size,
        count: a.count,
        seconds: seconds(a.seconds, a.quick)?,
    };
    let mut failed = 0;
    crate::emit(a.json, |progress| {
        let r: RrReport = shmnet_lab::netbench::rr::run(&opts, progress);
        failed = r.failed.len();
        r
    })?;
    if failed > 0 {
        bail!("{failed} cell(s) failed (see above)");
    }
    Ok(())
}

/// The hidden `shmnet worker` command: one party of a ttcp or rr cell, from options (the
/// harness itself starts `shmnet party` with a [`WorkerSpec`]).
#[derive(Args)]
pub struct WorkerArgs {
    /// Which party.
    #[arg(value_enum)]
    job: WorkerKind,
    /// The cell's scoreboard.
    #[arg(long)]
    board: PathBuf,
    /// Message bytes.
    #[arg(long, default_value_t = 10)]
    size: usize,
    /// rr: requests in flight.
    #[arg(long, default_value_t = 1)]
    outstanding: u32,
    /// server/ipc: the server's control socket.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// inline: rx, tx or rr:N.
    #[arg(long, default_value = "rx")]
    job_kind: String,
    /// inline: socket queue limit.
    #[arg(long, default_value_t = 64)]
    rx_queue: usize,
    /// inline: UDP checksums.
    #[arg(long)]
    checksum: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum WorkerKind {
    KernelRecv,
    KernelSend,
    KernelEcho,
    KernelRr,
    ShmRecv,
    ShmSend,
    ShmEcho,
    ShmRr,
    Inline,
}

impl WorkerArgs {
    /// The worker these options describe.
    fn to_spec(&self) -> Result<WorkerSpec> {
        let socket = || {
            self.socket
                .clone()
                .context("this worker needs --socket (the server's control socket)")
        };
        let (size, outstanding) = (self.size, self.outstanding);
        let job = match self.job {
            WorkerKind::KernelRecv => WorkerJob::KernelRecv,
            WorkerKind::KernelSend => WorkerJob::KernelSend { size },
            WorkerKind::KernelEcho => WorkerJob::KernelEcho,
            WorkerKind::KernelRr => WorkerJob::KernelRr { size, outstanding },
            WorkerKind::ShmRecv => WorkerJob::ShmRecv { socket: socket()? },
            WorkerKind::ShmSend => WorkerJob::ShmSend {
                socket: socket()?,
                size,
            },
            WorkerKind::ShmEcho => WorkerJob::ShmEcho { socket: socket()? },
            WorkerKind::ShmRr => WorkerJob::ShmRr {
                socket: socket()?,
                size,
                outstanding,
            },
            WorkerKind::Inline => WorkerJob::Inline {
                job: match self.job_kind.as_str() {
                    "rx" => InlineJob::Receive,
                    "tx" => InlineJob::Transmit,
                    other => match other.strip_prefix("rr:").and_then(|n| n.parse().ok()) {
                        Some(outstanding) => InlineJob::RequestResponse { outstanding },
                        None => bail!("unknown inline job {other:?}: rx, tx or rr:N"),
                    },
                },
                size,
                checksum: self.checksum,
                rx_queue: self.rx_queue,
                buffers: Default::default(),
            },
        };
        Ok(WorkerSpec {
            board: self.board.clone(),
            job,
        })
    }
}

/// The hidden `shmnet worker` command.
pub fn worker(a: WorkerArgs) -> Result<()> {
    run_worker(&a.to_spec()?)
}

/// Runs one worker of a cell and prints its JSON report.
pub fn run_worker(spec: &WorkerSpec) -> Result<()> {
    // One line, as the harness quotes it (the error names its step and says why).
    let v = worker::run(spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("{v}");
    Ok(())
}
