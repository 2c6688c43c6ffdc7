//! `shmnet app send-file` and `shmnet app recv-file`: seed 002's ftp, a file over one TCP
//! connection of the server structure, to or from anything that speaks TCP (`nc`, `socat`,
//! another shmnet). Progress goes to standard error once a second; the report, readable or
//! `--json`, to standard output.

use anyhow::{Context, Result, bail};
use clap::Args;
use shmnet_io::client::{Client, Linger};
use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct SendFileArgs {
    /// Where to send it: the receiver's IPv4 address and TCP port.
    addr: SocketAddrV4,
    /// The file to send (`-`: standard input).
    file: PathBuf,
    /// Give up connecting after this many seconds.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    connect_timeout: f64,
    /// After the last byte, wait this many seconds at most for the receiver to acknowledge
    /// every byte and the end of the file (`SO_LINGER`); fail if it has not.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    linger: f64,
    /// The server's control socket (default: the one `shmnet serve` uses by default).
    #[arg(long, default_value_os_t = shmnet_io::control::default_socket())]
    socket: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RecvFileArgs {
    /// The TCP port to listen on (0: a free ephemeral port, printed once listening).
    port: u16,
    /// Where to write what arrives (`-`: standard output).
    out: PathBuf,
    /// Give up if no connection comes within this many seconds (default: wait forever).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// The server's control socket (default: the one `shmnet serve` uses by default).
    #[arg(long, default_value_os_t = shmnet_io::control::default_socket())]
    socket: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Bytes moved per read or write.
const CHUNK: usize = 256 * 1024;

/// Prints progress on standard error once a second.
struct Progress {
    start: Instant,
    last: Instant,
    quiet: bool,
}

impl Progress {
    fn new(quiet: bool) -> Self {
        let now = Instant::now();
        Self {
            start: now,
            last: now,
            quiet,
        }
    }

    fn tick(&mut self, bytes: u64) {
        if self.quiet || self.last.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last = Instant::now();
        let s = self.start.elapsed().as_secs_f64();
        eprintln!(
            "{:.1} MiB in {s:.1} s ({:.1} MiB/s)",
            bytes as f64 / (1 << 20) as f64,
            bytes as f64 / (1 << 20) as f64 / s.max(1e-9)
        );
    }
}

/// The report of a transfer.
#[derive(serde::Serialize)]
struct Report {
    bytes: u64,
    seconds: f64,
    mbyte_per_s: f64,
    gbit_per_s: f64,
    peer: String,
}

fn report(bytes: u64, start: Instant, peer: SocketAddrV4, json: bool, verb: &str) -> Result<()> {
    let seconds = start.elapsed().as_secs_f64();
    let r = Report {
        bytes,
        seconds,
        mbyte_per_s: bytes as f64 / 1e6 / seconds.max(1e-9),
        gbit_per_s: bytes as f64 * 8.0 / 1e9 / seconds.max(1e-9),
        peer: peer.to_string(),
    };
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{verb} {bytes} bytes {} {peer} in {seconds:.3} s: {:.1} MB/s, {:.2} Gbit/s",
            if verb == "sent" { "to" } else { "from" },
            r.mbyte_per_s,
            r.gbit_per_s
        );
    }
    Ok(())
}

/// `shmnet app send-file`.
pub fn send_file(a: SendFileArgs) -> Result<()> {
    let mut input: Box<dyn Read> = if a.file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(
            std::fs::File::open(&a.file)
                .with_context(|| format!("opening {}", a.file.display()))?,
        )
    };
    let client = Client::connect(&a.socket).context("attaching to the server")?;
    let mut s = client
        .tcp_connect(a.addr, Duration::from_secs_f64(a.connect_timeout))
        .with_context(|| format!("connecting to {}", a.addr))?;
    let start = Instant::now();
    let mut progress = Progress::new(a.json);
    let mut buf = vec![0u8; CHUNK];
    let mut bytes = 0u64;
    loop {
        let n = input.read(&mut buf).context("reading the file")?;
        if n == 0 {
            break;
        }
        s.write_all(&buf[..n])
            .with_context(|| format!("sending to {}", a.addr))?;
        bytes += n as u64;
        progress.tick(bytes);
    }
    // The end of the file follows the last byte; report only once the receiver has
    // acknowledged all of it (the server would deliver it without us, but "sent" should
    // mean "arrived").
    let linger = Duration::try_from_secs_f64(a.linger)
        .context("--linger: a number of seconds, 0 or more")?;
    match s.close_linger(linger).context("closing the connection")? {
        Linger::Acknowledged => report(bytes, start, a.addr, a.json, "sent"),
        Linger::Failed(f) => bail!(
            "the connection to {} failed ({f}) before the receiver acknowledged every byte",
            a.addr
        ),
        Linger::TimedOut => bail!(
            "{} did not acknowledge every byte within --linger {} s (the connection goes on \
             closing in the server)",
            a.addr,
            a.linger
        ),
    }
}

/// `shmnet app recv-file`.
pub fn recv_file(a: RecvFileArgs) -> Result<()> {
    let client = Client::connect(&a.socket).context("attaching to the server")?;
    let l = client
        .tcp_listen(a.port, 1)
        .with_context(|| format!("listening on TCP port {}", a.port))?;
    if a.port == 0 {
        // On stdout, alone on its line, for whoever started us to read.
        println!("port {}", l.port());
        let _ = std::io::stdout().flush();
    }
    if !a.json {
        eprintln!("listening on TCP port {}", l.port());
    }
    let mut s = match a.timeout {
        Some(t) => match l.accept_timeout(Duration::from_secs_f64(t))? {
            Some(s) => s,
            None => bail!("no connection came within {t} s"),
        },
        None => l.accept().context("waiting for a connection")?,
    };
    l.close().context("closing the listener")?;
    let peer = s.peer_addr();
    let mut out: Box<dyn Write> = if a.out.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::BufWriter::with_capacity(
            CHUNK,
            std::fs::File::create(&a.out)
                .with_context(|| format!("creating {}", a.out.display()))?,
        ))
    };
    let start = Instant::now();
    let mut progress = Progress::new(a.json);
    let mut buf = vec![0u8; CHUNK];
    let mut bytes = 0u64;
    loop {
        let n = s
            .read(&mut buf)
            .with_context(|| format!("receiving from {peer}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).context("writing the file")?;
        bytes += n as u64;
        progress.tick(bytes);
    }
    out.flush().context("writing the file")?;
    drop(out);
    s.close().context("closing the connection")?;
    if a.out.as_os_str() == "-" {
        // The report would mix with the file's bytes: standard error instead.
        eprintln!("received {bytes} bytes from {peer}");
        return Ok(());
    }
    report(bytes, start, peer, a.json, "received")
}
