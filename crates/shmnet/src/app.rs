//! `shmnet app`: applications for the server structure, and `shmnet stats`.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use shmnet_io::client::{Client, ClientError};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum AppCmd {
    /// Receive and discard datagrams on a port (copying each out, as `recv` does), then
    /// report messages per second.
    Sink(AppArgs),
    /// Send every datagram back to its sender.
    Echo(AppArgs),
    /// Send a file over TCP (seed 002's ftp) to ADDR:PORT — another shmnet, `nc -l`,
    /// `socat` — showing progress, then the rate.
    SendFile(crate::app_file::SendFileArgs),
    /// Listen on a TCP port and write the first connection's bytes to a file, showing
    /// progress, then the rate (`nc HOST PORT < FILE` sends one).
    RecvFile(crate::app_file::RecvFileArgs),
}

#[derive(Args)]
pub struct AppArgs {
    /// The UDP port to bind (0: a free ephemeral port, printed once bound).
    #[arg(long)]
    port: u16,
    /// Stop after this many messages, however long they take (default: until the server
    /// goes away, Ctrl-C, or --timeout).
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this many seconds of silence (default: never).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// The server's control socket (default: the one `shmnet serve` uses by default).
    #[arg(long, default_value_os_t = shmnet_io::control::default_socket())]
    socket: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: AppCmd) -> Result<()> {
    let (echo, a) = match cmd {
        AppCmd::Sink(a) => (false, a),
        AppCmd::Echo(a) => (true, a),
        AppCmd::SendFile(a) => return crate::app_file::send_file(a),
        AppCmd::RecvFile(a) => return crate::app_file::recv_file(a),
    };
    let client = Client::connect(&a.socket).context("attaching to the server")?;
    let sock = client
        .udp_bind(a.port)
        .with_context(|| format!("binding UDP port {}", a.port))?;
    let port = sock.port();
    let (data, own) = client.window_sizes();
    if !a.json {
        eprintln!(
            "attached to {}: port {port} bound; mapping {:.1} MiB of data window and {:.1} MiB of our own",
            a.socket.display(),
            data as f64 / (1 << 20) as f64,
            own as f64 / (1 << 20) as f64
        );
    }
    if a.port == 0 {
        // On stdout, alone on its line, for whoever started us to read.
        println!("port {port}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    let silence = a.timeout.map(Duration::from_secs_f64);
    // Wake up now and then to notice Ctrl-C and SIGTERM, which end the run with its report.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    ctrlc::set_handler(move || s2.store(true, std::sync::atomic::Ordering::Relaxed))
        .context("installing the SIGINT/SIGTERM handler")?;
    let tick = Duration::from_millis(200);
    let mut buf = vec![0u8; 65_536];
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let why = loop {
        if a.count.is_some_and(|c| n >= c) {
            break "count reached";
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break "stopped by a signal";
        }
        if silence.is_some_and(|s| last.elapsed() >= s) {
            break "--timeout of silence";
        }
        let wait = silence.map_or(tick, |s| s.saturating_sub(last.elapsed()).min(tick));
        match sock.recv_timeout(&mut buf, wait) {
            Ok((len, from)) => {
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
                n += 1;
                bytes += len as u64;
                if echo {
                    sock.send_to(&buf[..len], from)?;
                }
            }
            Err(ClientError::TimedOut) => continue,
            Err(ClientError::ServerGone) => break "the server went away",
            Err(e) => return Err(e.into()),
        }
    };
    // From the first message to the last: with fewer than two there is no rate (0).
    let secs = first.map_or(0.0, |f| (last - f).as_secs_f64());
    let rate = |x: f64| if n > 1 && secs > 0.0 { x / secs } else { 0.0 };
    let (msgs_per_s, gbit_per_s) = (rate(n as f64), rate(bytes as f64 * 8.0) / 1e9);
    if a.json {
        println!(
            "{}",
            serde_json::json!({"messages": n, "bytes": bytes, "seconds": secs,
                "msgs_per_s": msgs_per_s, "gbit_per_s": gbit_per_s, "stopped": why})
        );
    } else {
        println!(
            "{n} messages, {bytes} bytes in {secs:.3} s: {msgs_per_s:.0} msgs/s, {gbit_per_s:.2} Gbit/s ({why})"
        );
    }
    Ok(())
}

#[derive(Args)]
pub struct StatsArgs {
    /// The server's control socket (default: the one `shmnet serve` uses by default).
    #[arg(long, default_value_os_t = shmnet_io::control::default_socket())]
    socket: PathBuf,
    /// Print every counter as JSON.
    #[arg(long)]
    json: bool,
}

pub fn stats(a: StatsArgs) -> Result<()> {
    let v = shmnet_io::server::query_stats(&a.socket)
        .with_context(|| format!("asking the server at {}", a.socket.display()))?;
    if a.json {
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let (data, apps) = (v.memory.data_window_bytes, v.memory.app_windows_bytes);
    println!(
        "{} structure up {:.1} s, driver {} ({}); windows: data {:.1} MiB + apps {:.2} MiB = {:.1} MiB (a default server fits in 64 MiB)",
        v.structure,
        v.uptime_s,
        v.driver_placement,
        match (&v.driver_stopped, v.driver_running) {
            (Some(why), _) => format!("stopped: {why}"),
            (None, true) => "running".into(),
            (None, false) => "stopped".into(),
        },
        mib(data),
        mib(apps),
        mib(data + apps),
    );
    println!("driver: {}", serde_json::to_string(&v.driver)?);
    if let Some(w) = &v.data_window {
        for (r, name) in w.rings.iter().zip(["in ipv4", "in arp", "out"]) {
            println!("queue {name:8}: {}", serde_json::to_string(r)?);
        }
        println!("pools: {}", serde_json::to_string(&w.pools)?);
    }
    let nz: Vec<String> = v
        .stack
        .fields()
        .into_iter()
        .filter(|(_, n)| *n != 0)
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    println!("stack: {}", nz.join(" "));
    println!("control: {}", serde_json::to_string(&v.control)?);
    println!("captures: {}", serde_json::to_string(&v.capture)?);
    println!(
        "registered regions: {} ({:.1} MiB), {} pages pinned, {} refused",
        v.regions.regions,
        v.regions.bytes as f64 / (1 << 20) as f64,
        v.regions.pinned_pages,
        v.regions.refused
    );
    println!(
        "lookup cache: {}; misses: {}",
        serde_json::to_string(&v.lookup)?,
        serde_json::to_string(&v.misses)?
    );
    for (i, app) in v.apps.iter().enumerate() {
        println!(
            "app {i}: pid {} uid {} ({}), sockets {} holding {} regions {} ({} B) counters {}",
            app.pid,
            app.uid,
            app.transport,
            app.sockets,
            app.holding,
            app.regions,
            app.registered_bytes,
            serde_json::to_string(&app.counters)?
        );
    }
    Ok(())
}
