//! `shmnet`: the command line. Thin: parses arguments and calls the crates.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

mod app;
mod app_file;
mod bench_capture;
mod bench_multicast;
mod bench_shared;
mod capture;
mod iface_lock;
mod lab;
mod metrics;
mod netbench;
mod programs;
mod replay;
mod run;
mod running;
mod serve;
mod sim;
mod sockets;
mod sockperf;
mod top;

#[derive(Parser)]
#[command(
    name = "shmnet",
    version,
    about = "A user-level network protocol server over shared memory, and the instruments that show whether packet data stays in the cache",
    long_about = "shmnet runs a packet driver, a protocol server and applications as parties that share \
memory windows (memfd regions holding descriptor queues and buffer pools), so packet data stays \
where the wire put it until the application reads it.\n\n\
This build has the shared-memory channel, the protocol stack, the inline, server and ipc \
structures, the benchmarks that compare them with the kernel, and seed 000's residency lab. \
Start with:\n  \
shmnet lab --quick             how much packet data is still in the cache at copy-out\n  \
shmnet bench chan --quick      the queue against rtrb and rte_ring, and the pools\n  \
shmnet bench stack --quick     the stack's receive and send paths against memcpy\n  \
shmnet bench handles --quick   a handle translation against a plain bounds check\n  \
shmnet ttcp --quick            streaming throughput: kernel, ipc, server (each driver placement), inline\n  \
shmnet rr --quick              request-response latency and rate, same structures"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure shmnet's parts against baselines run in the same process and moment.
    #[command(subcommand)]
    Bench(Bench),
    /// Run the protocol server: a packet driver, the protocol stack, and UDP applications.
    ///
    /// Three structures place the same parties differently (--structure):
    ///   inline   driver, stack and built-in applications (--echo, --sink) in one thread: the
    ///            monolithic kernel path. Sleeps on the device when idle.
    ///   server   the driver, the protocol server and each application as processes sharing
    ///            memory windows; applications attach with `shmnet app` through the control
    ///            socket (--socket). The driver runs where --placement says: polled by the
    ///            server's own loop (the default), a thread of the server, or a process.
    ///   ipc      as server, but every frame and datagram is copied through Unix sockets:
    ///            the baseline the shared windows replace.
    ///
    /// The device (--driver): softnic, a software sender (see --softnic-*), or
    /// af_packet:IFACE, a real interface (root or CAP_NET_RAW; shmnet answers ARP, ping and
    /// UDP for --ip, which the kernel must not also hold). One server per interface: a second
    /// one refuses to start unless --force. Ctrl-C or SIGTERM stops it in order: the control
    /// socket is removed and the final counters printed.
    ///
    /// Examples:
    ///   shmnet serve --sink 5001                          softnic sends 100,000 14,792-byte messages to a checking sink
    ///   shmnet serve --sink 5001 --softnic-dma nt         the same, the "device" writing around the cache
    ///   shmnet serve --driver af_packet:veth0 --ip 10.77.0.1/24 --echo 7
    ///   shmnet serve --structure server --driver af_packet:veth0 --ip 10.77.0.1/24 &
    ///   shmnet app echo --port 7                          driver, server, application: 3 processes
    ///   shmnet serve --structure server &  shmnet app sink --port 5001
    ///                                                     softnic sends once the sink binds 5001
    ///   shmnet serve --structure ipc &  shmnet app sink --port 5001
    ///                                                     the same, copied through Unix sockets
    ///   shmnet stats                                      every counter of a running server
    ///
    /// README.md's "Serving a real interface" sets up a pair of network namespaces to try
    /// the af_packet examples in.
    #[command(verbatim_doc_comment)]
    Serve(Box<serve::ServeArgs>),
    /// An application for a server started with --structure server.
    #[command(subcommand)]
    App(app::AppCmd),
    /// Run an unmodified program with its IPv4 TCP sockets on a shmnet server.
    Run(run::RunArgs),
    /// One device shared by several protocol servers, each taking its own families.
    ///
    /// `shmnet driver --listen PATH --device IFACE` opens IFACE and waits for servers:
    /// each `shmnet serve --structure server --attach PATH --family ipv4|ipv6|both`
    /// hands the driver its data window, and gets every frame of its families (ARP goes
    /// with IPv4). A server that dies, even by kill -9, frees its families: the others go
    /// on, and a new server may take them. Two servers cannot take the same family.
    ///
    /// Example (IPv4 and IPv6 served by two processes on one veth end):
    ///   shmnet driver --listen /tmp/v0.drv --device v0 &
    ///   shmnet serve --structure server --attach /tmp/v0.drv --family ipv4 --ip 10.0.0.1/24 --socket /tmp/four.sock &
    ///   shmnet serve --structure server --attach /tmp/v0.drv --family ipv6 --ip6 fd00::1/64 --socket /tmp/six.sock &
    ///
    /// (Without --listen it is the driver process that `shmnet serve --placement process`
    /// starts for itself.)
    #[command(verbatim_doc_comment)]
    Driver(serve::DriverProcessArgs),
    /// Print the live counters of a running server: every queue, pool and layer, and the
    /// memory its windows hold.
    Stats(app::StatsArgs),
    /// List a running server's sockets as `ss -tunap` lists the kernel's: state, queues,
    /// addresses, and the applications holding each (pid, uid, the socket's number);
    /// connections their applications closed (TIME-WAIT, a FIN still unacknowledged) are
    /// listed without one.
    ///
    /// Examples:
    ///   shmnet sockets                               every socket of the default server
    ///   shmnet sockets -tl                           TCP listeners only
    ///   shmnet sockets -ti --socket /tmp/s1.sock     connections with cwnd, RTT, RTO, retransmits
    ///   shmnet sockets --json | jq '.sockets[] | select(.state == "established")'
    #[command(verbatim_doc_comment)]
    Sockets(sockets::SocketsArgs),
    /// Capture what crosses a running server, with tcpdump's habits: frames taken from the
    /// driver (rx), handed to it (tx), or refused by the stack with the reason (drop), to
    /// a pcapng file or standard output, or one line per frame. The server copies frames
    /// into a ring it never waits for: what the capture cannot keep up with is counted as
    /// lost, never held back. Root or the server's own user only.
    ///
    /// Examples:
    ///   shmnet capture                                   a line per frame, until Ctrl-C
    ///   shmnet capture -w trace.pcapng -c 1000 tcp port 5001
    ///   shmnet capture -w - | tshark -r -                 into tshark as it happens
    ///   shmnet capture --point drop -w drops.pcapng       refused frames, the reason as a comment
    #[command(verbatim_doc_comment)]
    Capture(capture::CaptureArgs),
    /// A live view of a running server, refreshed every second: frames and bits per
    /// second through the driver, ring and pool fill, drops by reason, each application's
    /// traffic, wake-ups and CPU, the server's CPU. q, Esc or Ctrl-C quits; works over ssh.
    Top(top::TopArgs),
    /// Streaming throughput by structure (seed 002's ttcp): kernel, ipc, server (its driver
    /// polled by the server's loop), server-thread, server-process (the driver a thread or a
    /// process of its own), inline × message sizes × directions, with the kernel and memcpy
    /// measured in the same run.
    ///
    /// Each cell starts its parties as processes (the kernel's sender and receiver; or
    /// `shmnet serve` with softnic as the wire, and an application), runs for --seconds,
    /// and reports messages/s, payload Gbit/s, CPU per message from every party (wait4;
    /// `shmnet serve`'s split into its server loop and its driver thread or process),
    /// sleeps (voluntary context switches) per message, and every lost message with where
    /// it was lost. The sender keeps a window of messages in flight (UDP has none; seed 002's
    /// ttcp ran over TCP), the same for every structure.
    ///
    /// Examples:
    ///   shmnet ttcp --quick                           the whole table in about half a minute
    ///   shmnet ttcp --structure kernel,server --size 10 --dir rx
    ///   shmnet ttcp --structure server,server-thread,server-process --size 14792
    ///                                                 the server's driver in each place
    ///   shmnet ttcp --structure server-thread,server-faithful --proto tcp --size 1024
    ///                                                 seed 002's queues beside the rings
    ///   shmnet ttcp --json --plot ttcp.png            rows as JSON, bars like the seed's figures
    #[command(verbatim_doc_comment)]
    Ttcp(netbench::TtcpArgs),
    /// Request–response by structure (seed 002's X11perf dot analog): 32-byte requests each
    /// echoed back, 1 and 16 in flight, in the same structures and placements as ttcp;
    /// transactions/s, p50/p99 latency, and CPU per transaction by party.
    ///
    /// Examples:
    ///   shmnet rr --quick
    ///   shmnet rr --structure kernel,server --outstanding 1 --seconds 5 --json
    #[command(verbatim_doc_comment)]
    Rr(netbench::RrArgs),
    /// This machine's Table 1 (seed 000): timer cost and step, line loads from L1, L2, the
    /// last level and memory (clean and dirty victims), TLB misses on 4 KiB and 2 MiB pages,
    /// memcpy bandwidth, and what loading one packet buffer costs from each place.
    ///
    /// Examples:
    ///   shmnet calibrate
    ///   shmnet calibrate --json > table1.json     for `shmnet residency --calibration`
    #[command(verbatim_doc_comment)]
    Calibrate(lab::CalibrateArgs),
    /// Seed 000's experiment: time the load of every buffer at copy-out and histogram how
    /// much of it was still in the cache.
    ///
    /// softnic sends 14,792-byte messages (ten 1,480-byte IP fragments) through the stack to
    /// a socket; the application copies each out, and the probe times the load of each data
    /// buffer just before, minus the same load from L1. Output: the seed's summary rows (%
    /// buffers totally within cache, below a 100 % clean miss, below/above a 100 % dirty
    /// miss, average overhead ticks per word), the histogram, and the distribution by
    /// fragment position with Kolmogorov–Smirnov tests between positions.
    ///
    /// Exit status 3 when the marks cannot tell the cache from memory on this machine (the
    /// output says so, and the JSON's "degenerate" is set): the percentages then mean nothing.
    ///
    /// Examples:
    ///   shmnet residency                                   inline, 2 ms gap
    ///   shmnet residency --gap 0 --queue 16                saturated, a deeper queue
    ///   shmnet residency --structure server --cores split --plot hist.png
    ///   shmnet residency --load 256 --json                 with the synthetic application
    #[command(verbatim_doc_comment)]
    Residency(lab::ResidencyArgs),
    /// Seed 000's tables on this machine in one run: calibration (Table 1), structures ×
    /// gap (Table 2), TLB forcing and checksum (Table 3), queue and load (Table 4), and the
    /// seed's rules (LIFO buffers, 2 MiB pages, one context) plus cached vs non-temporal DMA.
    ///
    /// Writes DIR/report.md with the tables and figures, a PNG of histograms per table, and
    /// every run's JSON. Under a minute; --quick a few seconds on an idle machine. 2 MiB
    /// pages need reserved huge pages (scripts/lab reserves them when run as root); without
    /// them that run says why.
    ///
    /// Exit status: 0 when every run ran and the calibrated marks tell the cache from
    /// memory; 3 when they cannot (the report and the JSON's "degenerate" say so, and the
    /// percentages mean nothing on this machine); 4 when some run failed (listed in
    /// "failed"); 1 when nothing could be written.
    ///
    /// Examples:
    ///   shmnet lab --quick
    ///   shmnet lab --out /tmp/lab && less /tmp/lab/report.md
    #[command(verbatim_doc_comment)]
    Lab(lab::LabArgs),
    /// Simulate caches and TLBs from memory-reference traces (seed 001's simulator): the
    /// machines of the seeds (hp720-1993, sgi-r4400-1994) and this one (from
    /// `shmnet calibrate --json`). Run `shmnet sim run --help` for the trace formats.
    #[command(subcommand)]
    Sim(sim::SimCmd),
    /// One party of a ttcp or rr cell, from options.
    #[command(hide = true)]
    Worker(netbench::WorkerArgs),
    /// One party of a ttcp or rr cell (started by them): reads its spec, one JSON object,
    /// from standard input.
    #[command(hide = true)]
    Party,
}

#[derive(Subcommand)]
enum Bench {
    /// The SPSC descriptor queue against rtrb and DPDK's rte_ring, and pool alloc+free by
    /// policy (LIFO, FIFO) and path (server, driver).
    ///
    /// Producer and consumer are pinned to two CPUs and move 16-byte descriptors through
    /// 1024-slot queues in bursts of 1, 8 and 32; figures are TSC ticks and nanoseconds per
    /// element (medians over repetitions). The rte_ring baseline runs the C harness built by
    /// scripts/build-rte-ring-bench (Debian's dpdk-dev); without it that row is skipped and a
    /// note says so.
    ///
    /// Beside them, seed 002's own queues (faithful-in: driver → server, faithful-out:
    /// server → driver; two sub-queues under its asymmetric Peterson mutex), with what their
    /// protocols did per 1,000 elements; the queues again with both parties on one CPU and
    /// with a busy thread on the driver's CPU; and an uncontended lock+unlock of seed 002's
    /// mutex against a compare-and-swap lock. See docs/channel.md.
    Chan(ChanArgs),
    /// The protocol stack's receive path (parse, reassemble, demultiplex, queue, copy out)
    /// and send path, for 10 B, 1 KB, 8 KB and 14,792 B UDP messages with the checksum off
    /// and on, beside a memcpy of the same bytes measured in the same run.
    Stack(QuickArgs),
    /// The cross-core hand-off limit the server structure is measured against: a producer
    /// thread on one CPU writes each message's frames into buffers of a LIFO pool (the
    /// server's data-window geometry, MTU fragments of 2 KiB buffers) and hands them over an
    /// SPSC ring to a consumer on another CPU, which copies the payload out and hands the
    /// buffers back. Messages/s and payload Gbit/s per size, median of runs of a fixed time.
    /// With one CPU available both threads share it, and the output says so.
    Handoff(netbench::HandoffArgs),
    /// What translating an application's handle costs the data plane: a lookup-cache hit
    /// (seed 004's cache of C entries in lines of L, A ways) per descriptor for A = 1, 2, 4
    /// and 8, beside the plain bounds check of a flat table, measured in the same run.
    Handles(QuickArgs),
    /// TCP's receive path: a 64 KiB window of full-sized segments on an established
    /// connection, from the frames in pool buffers to the bytes in the application's buffer
    /// (checksum off and on), beside a memcpy of the same 64 KiB in the same run.
    Tcp(QuickArgs),
    /// TCP connections set up and torn down per second (connect + accept + close, both ends
    /// closing in order) through the server structure — a listener and a connector
    /// application — beside the kernel over 127.0.0.1, in the same run.
    TcpSetup(QuickArgs),
    /// Unmodified programs under `shmnet run` against Linux's loopback, in the same run:
    /// iperf3 (one TCP stream, Gbit/s) and sockperf (TCP ping-pong p50), both ends on this
    /// host — shmnet's on one server with `--driver loopback` — and what the sockets
    /// library costs a call on a kernel descriptor. Needs iperf3, sockperf and the library
    /// (cargo build --release -p shmnet-preload).
    Programs(programs::ProgramsArgs),
    /// One driver shared by several protocol servers (`shmnet driver --listen`): sockperf
    /// UDP ping-pong from a peer namespace over veth to Linux (the baseline), to a server
    /// with a driver process of its own, to one attached to a shared driver, and to the
    /// same while an IPv6 server beside it on that driver is flooded with ping -6 -f.
    /// Needs root and sockperf.
    SharedDriver(bench_shared::SharedDriverArgs),
    /// IPv4 multicast against Linux's: sockperf ping-pong from a peer namespace over veth
    /// to a group (both ends joined, every message multicast) and, beside it, to the
    /// measured side's address — Linux's sockperf server against the same server
    /// unmodified under `shmnet run`. Needs root and sockperf.
    Multicast(bench_multicast::MulticastArgs),
    /// What `shmnet capture` costs the traffic it watches: UDP ttcp cells of the server
    /// structure (10 B and 14,792 B, receive and transmit) with no capture, with a capture
    /// whose filter matches nothing, and with one keeping every frame; each round's
    /// variants against its own `off`.
    Capture(bench_capture::CaptureBenchArgs),
    /// The interposition probe `bench programs` runs with and without the library.
    #[command(hide = true)]
    InterposeProbe,
}

/// The options of a benchmark that runs in one process.
#[derive(Args)]
struct QuickArgs {
    /// Fewer repetitions per figure (seconds instead of tens of seconds).
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ChanArgs {
    /// 10^6 elements and 3 repetitions per cell instead of 10^7 and 5 (seconds instead of about a minute).
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Elements per repetition.
    #[arg(long)]
    count: Option<u64>,
    /// Repetitions per cell (the median is reported).
    #[arg(long)]
    reps: Option<u32>,
    /// Producer and consumer CPUs.
    #[arg(long, value_name = "P,C", default_value = "0,1", value_parser = parse_cpus)]
    cpus: (usize, usize),
    /// The rte_ring harness (default: $SHMNET_RTE_RING_BENCH, else target/rte_ring_bench).
    #[arg(long, value_name = "PATH")]
    rte_ring_bench: Option<PathBuf>,
}

fn parse_cpus(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("expected two CPU numbers like 0,1, got {s:?}"))?;
    let p = a
        .trim()
        .parse()
        .map_err(|_| format!("bad CPU number {a:?}"))?;
    let c = b
        .trim()
        .parse()
        .map_err(|_| format!("bad CPU number {b:?}"))?;
    if p == c {
        return Err("producer and consumer need different CPUs".into());
    }
    Ok((p, c))
}

pub(crate) fn spinner(hidden: bool) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// Runs a benchmark `run` (told `quick`, reporting its steps on a spinner), then prints its
/// report: one JSON object with `json`, else the report's readable form.
pub(crate) fn report_bench<R: serde::Serialize + std::fmt::Display>(
    quick: bool,
    json: bool,
    run: impl FnOnce(bool, &mut dyn FnMut(&str)) -> anyhow::Result<R>,
) -> anyhow::Result<()> {
    let pb = spinner(false);
    let report = run(quick, &mut |step| pb.set_message(step.to_string()));
    pb.finish_and_clear();
    let report = report?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}

/// A progress bar on stderr for a run whose fraction done is known (positions 0..=1000).
pub(crate) fn progress_bar() -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(1000);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {percent:>3}% {msg}")
            .expect("a valid template"),
    );
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

fn bench_chan(a: ChanArgs) -> Result<()> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if a.cpus.0.max(a.cpus.1) >= cpus {
        bail!(
            "this machine has {cpus} CPUs; pick two below {cpus} with --cpus P,C (the benchmark needs two)"
        );
    }
    if let Some(p) = &a.rte_ring_bench {
        if !p.is_file() {
            bail!(
                "{} does not exist: build it with scripts/build-rte-ring-bench",
                p.display()
            );
        }
    }
    let opts = shmnet_lab::bench::chan::ChanOptions {
        quick: a.quick,
        count: a.count,
        reps: a.reps,
        cpus: a.cpus,
        rte_ring_bench: a.rte_ring_bench,
    };
    emit(a.json, |progress| {
        shmnet_lab::bench::chan::run(&opts, progress)
    })
}

fn bench_stack(a: QuickArgs) -> Result<()> {
    let mut incomplete = Vec::new();
    emit(a.json, |progress| {
        let report = shmnet_lab::bench::stack::run(a.quick, progress);
        incomplete = report.incomplete();
        report
    })?;
    if !incomplete.is_empty() {
        bail!(
            "the stack benchmark timed failing messages, so its figures are void: {}",
            incomplete.join("; ")
        );
    }
    Ok(())
}

fn bench_handles(a: QuickArgs) -> Result<()> {
    let mut error = None;
    emit(a.json, |progress| {
        let report = shmnet_lab::bench::handles::run(a.quick, progress);
        error.clone_from(&report.error);
        report
    })?;
    match error {
        Some(e) => bail!("the handles benchmark could not run: {e}"),
        None => Ok(()),
    }
}

fn bench_tcp(a: QuickArgs) -> Result<()> {
    let mut complete = true;
    emit(a.json, |progress| {
        let report = shmnet_stack::tcp_bench::run(a.quick, progress);
        complete = report.rows.iter().all(|r| r.verified == r.windows);
        report
    })?;
    if !complete {
        bail!("the TCP benchmark lost or corrupted data: its figures are not valid");
    }
    Ok(())
}

fn bench_tcp_setup(a: QuickArgs) -> Result<()> {
    let mut failed = Vec::new();
    emit(a.json, |progress| {
        let report = shmnet_lab::tcp_setup::run(a.quick, progress);
        failed = report
            .rows
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", r.structure)))
            .collect();
        report
    })?;
    if !failed.is_empty() {
        bail!("cells failed: {}", failed.join("; "));
    }
    Ok(())
}

/// Runs a benchmark with a progress spinner on stderr, then prints its report: one JSON
/// object with `json`, else the human tables.
pub(crate) fn emit<R: serde::Serialize + std::fmt::Display>(
    json: bool,
    run: impl FnOnce(&mut dyn FnMut(&str)) -> R,
) -> Result<()> {
    let pb = spinner(false);
    let report = run(&mut |step| pb.set_message(step.to_string()));
    pb.finish_and_clear();
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).context("serialising the report")?
        );
    } else {
        print!("{report}");
    }
    Ok(())
}

/// The hidden `shmnet party` command: runs the party whose spec is on standard input.
fn party() -> Result<()> {
    use shmnet_lab::netbench::PartySpec;
    // The first JSON object only, not to the end of input: the switch partner reads its
    // hand-offs from the same input after it (serde_json reads no byte past an object's
    // closing brace, and what std's buffer holds beyond it stays there for the party).
    let spec: PartySpec = serde_json::Deserializer::from_reader(std::io::stdin())
        .into_iter()
        .next()
        .unwrap_or_else(|| {
            Err(serde::de::Error::custom(
                "standard input ended before a spec",
            ))
        })
        .context(
            "reading the party's spec: `shmnet party` takes one JSON PartySpec on standard input (ttcp, rr and the lab start it)",
        )?;
    match spec {
        PartySpec::Serve(s) => serve::run(*s),
        PartySpec::Worker(w) => netbench::run_worker(&w),
        PartySpec::Switch(s) => shmnet_lab::residency::switch::partner(
            s,
            &mut std::io::stdin(),
            &mut std::io::stdout().lock(),
        )
        .context("the residency lab's switch partner"),
    }
}

/// Runs the command; an error is printed as one line (`shmnet: what went wrong: why`) and
/// ends the program with status 1, or with its own status for results that were written but
/// do not hold ([`lab::Unsound`]: 3 degenerate marks, 4 failed lab runs).
fn main() -> std::process::ExitCode {
    match dispatch() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmnet: {e:#}");
            let code = e
                .downcast_ref::<lab::Unsound>()
                .map_or(1, lab::Unsound::exit_code);
            std::process::ExitCode::from(code)
        }
    }
}

fn dispatch() -> Result<()> {
    // Die quietly when the reader of our output goes away (`shmnet stats | head`), as Unix
    // tools do, instead of panicking on a failed print.
    // SAFETY: restoring a signal's default disposition at the start of `main`, before any
    // thread exists, races with nothing.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if let Some(a) = replay::rows::worker_args() {
        return replay::rows::row_worker(a);
    }
    match Cli::parse().command {
        Command::Bench(Bench::Chan(a)) => bench_chan(a),
        Command::Bench(Bench::Stack(a)) => bench_stack(a),
        Command::Bench(Bench::Handoff(a)) => netbench::bench_handoff(a),
        Command::Bench(Bench::Handles(a)) => bench_handles(a),
        Command::Bench(Bench::Tcp(a)) => bench_tcp(a),
        Command::Bench(Bench::TcpSetup(a)) => bench_tcp_setup(a),
        Command::Bench(Bench::Programs(a)) => programs::bench(a),
        Command::Bench(Bench::InterposeProbe) => programs::interpose_probe(),
        Command::Bench(Bench::SharedDriver(a)) => bench_shared::bench(a),
        Command::Bench(Bench::Multicast(a)) => bench_multicast::bench(a),
        Command::Bench(Bench::Capture(a)) => bench_capture::bench(a),
        Command::Serve(a) => serve::run(a.to_spec()?),
        Command::App(c) => app::run(c),
        Command::Run(a) => run::run(a),
        Command::Stats(a) => app::stats(a),
        Command::Sockets(a) => sockets::run(a),
        Command::Capture(a) => capture::run(a),
        Command::Top(a) => top::run(a),
        Command::Driver(a) => serve::run_driver(a),
        Command::Ttcp(a) => netbench::ttcp(a),
        Command::Rr(a) => netbench::rr(a),
        Command::Worker(a) => netbench::worker(a),
        Command::Party => party(),
        Command::Calibrate(a) => lab::calibrate(a),
        Command::Residency(a) => lab::residency(a),
        Command::Lab(a) => lab::lab(a),
        Command::Sim(c) => sim::run(c),
    }
}
