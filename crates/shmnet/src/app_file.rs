//! `shmnet app send-file` and `shmnet app recv-file`: seed 002's ftp, a file over one TCP
//! connection of the server structure, to or from anything that speaks TCP (`nc`, `socat`,
//! another shmnet). Progress goes to standard error once a second; the report, readable or
//! `--json`, to standard output.
//!
//! With `--kernel` the same program moves the file over the Linux kernel's TCP instead (the
//! baseline `shmnet lab servers` compares with: one program, one chunk size, one clock, only
//! the sockets differ).

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
    /// Use the Linux kernel's TCP instead of a shmnet server (the baseline). "Sent" then
    /// means the receiver closed its end after the last byte (the kernel has no linger that
    /// reports), an end-to-end confirmation at least as strong as shmnet's.
    #[arg(long, conflicts_with = "socket")]
    kernel: bool,
    /// Bytes per write on the connection, 1 to 16 MiB (the file is still read in large
    /// blocks): ttcp's `-l`, e.g. 10 to send the file as 10-byte messages.
    #[arg(long, default_value_t = CHUNK, value_parser = chunk, value_name = "BYTES")]
    write_size: usize,
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
    /// Use the Linux kernel's TCP instead of a shmnet server (the baseline), listening on
    /// every address of this network namespace.
    #[arg(long, conflicts_with = "socket")]
    kernel: bool,
    /// Bytes per read from the connection, 1 to 16 MiB (the file is still written in large
    /// blocks): ttcp's `-l` on receive.
    #[arg(long, default_value_t = CHUNK, value_parser = chunk, value_name = "BYTES")]
    read_size: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// `--write-size` and `--read-size`: 1 byte to 16 MiB.
fn chunk(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=16 << 20).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: a number of bytes from 1 to 16,777,216")),
    }
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

/// Copies `input` (read in [`CHUNK`]s) to `s` in writes of `a.write_size`, showing
/// progress; returns the bytes sent.
fn pump_out(input: &mut dyn Read, s: &mut dyn Write, a: &SendFileArgs) -> Result<u64> {
    let mut progress = Progress::new(a.json);
    let mut buf = vec![0u8; CHUNK.max(a.write_size)];
    let mut bytes = 0u64;
    loop {
        let n = input.read(&mut buf).context("reading the file")?;
        if n == 0 {
            return Ok(bytes);
        }
        for piece in buf[..n].chunks(a.write_size) {
            s.write_all(piece)
                .with_context(|| format!("sending to {}", a.addr))?;
        }
        bytes += n as u64;
        progress.tick(bytes);
    }
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
    let connect_timeout = Duration::try_from_secs_f64(a.connect_timeout)
        .context("--connect-timeout: a number of seconds, more than 0")?;
    if a.kernel {
        return send_file_kernel(&a, &mut *input, connect_timeout);
    }
    let client = Client::connect(&a.socket).context("attaching to the server")?;
    let mut s = client
        .tcp_connect(a.addr, connect_timeout)
        .with_context(|| format!("connecting to {}", a.addr))?;
    let start = Instant::now();
    let bytes = pump_out(&mut *input, &mut s, &a)?;
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

/// `shmnet app send-file --kernel`: the same transfer over the kernel's TCP. The end of the
/// file is a `shutdown(SHUT_WR)`; "sent" once the receiver has closed its end (its FIN
/// follows every byte it read), within `--linger`.
fn send_file_kernel(a: &SendFileArgs, input: &mut dyn Read, timeout: Duration) -> Result<()> {
    let mut s = std::net::TcpStream::connect_timeout(&a.addr.into(), timeout)
        .with_context(|| format!("connecting to {} (kernel TCP)", a.addr))?;
    let start = Instant::now();
    let bytes = pump_out(input, &mut s, a)?;
    s.shutdown(std::net::Shutdown::Write)
        .context("ending the stream")?;
    let linger = Duration::try_from_secs_f64(a.linger)
        .context("--linger: a number of seconds, 0 or more")?;
    s.set_read_timeout(Some(linger.max(Duration::from_millis(1))))
        .context("setting the linger time")?;
    let mut rest = [0u8; 4096];
    loop {
        match s.read(&mut rest) {
            Ok(0) => return report(bytes, start, a.addr, a.json, "sent"),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                bail!(
                    "{} did not close its end within --linger {} s after the last byte",
                    a.addr,
                    a.linger
                )
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("the connection to {} failed after the last byte", a.addr)
                });
            }
        }
    }
}

/// `shmnet app recv-file`.
pub fn recv_file(a: RecvFileArgs) -> Result<()> {
    if a.kernel {
        return recv_file_kernel(&a);
    }
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
        Some(t) => match l.accept_timeout(
            Duration::try_from_secs_f64(t).context("--timeout: a number of seconds, 0 or more")?,
        )? {
            Some(s) => s,
            None => bail!("no connection came within {t} s"),
        },
        None => l.accept().context("waiting for a connection")?,
    };
    l.close().context("closing the listener")?;
    let peer = s.peer_addr();
    let start = Instant::now();
    let bytes = pump_in(&mut s, peer, &a)?;
    s.close().context("closing the connection")?;
    received(bytes, start, peer, &a)
}

/// Copies the stream `s` from `peer`, in reads of `a.read_size`, into `a.out` (written in
/// [`CHUNK`]s) until its end; returns the bytes.
fn pump_in(s: &mut dyn Read, peer: SocketAddrV4, a: &RecvFileArgs) -> Result<u64> {
    let mut out: Box<dyn Write> = if a.out.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::BufWriter::with_capacity(
            CHUNK,
            std::fs::File::create(&a.out)
                .with_context(|| format!("creating {}", a.out.display()))?,
        ))
    };
    let mut progress = Progress::new(a.json);
    let mut buf = vec![0u8; a.read_size];
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
    Ok(bytes)
}

/// The report of a receipt: to standard error when the file went to standard output.
fn received(bytes: u64, start: Instant, peer: SocketAddrV4, a: &RecvFileArgs) -> Result<()> {
    if a.out.as_os_str() == "-" {
        // The report would mix with the file's bytes: standard error instead.
        eprintln!("received {bytes} bytes from {peer}");
        return Ok(());
    }
    report(bytes, start, peer, a.json, "received")
}

/// `shmnet app recv-file --kernel`: the same over the kernel's TCP.
fn recv_file_kernel(a: &RecvFileArgs) -> Result<()> {
    let l = std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, a.port))
        .with_context(|| format!("listening on TCP port {} (kernel TCP)", a.port))?;
    let port = l.local_addr().context("reading the listening port")?.port();
    if a.port == 0 {
        println!("port {port}");
        let _ = std::io::stdout().flush();
    }
    if !a.json {
        eprintln!("listening on TCP port {port} (kernel TCP)");
    }
    let (mut s, peer) = match a.timeout {
        None => l.accept().context("waiting for a connection")?,
        Some(t) => {
            let limit = Duration::try_from_secs_f64(t)
                .context("--timeout: a number of seconds, 0 or more")?;
            // Woken by the connection itself (no polling interval): the clock starts at
            // accept as it does for shmnet's listener.
            let mut fd = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&l),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = libc::c_int::try_from(limit.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: poll on one pollfd we own, naming the listener's open descriptor.
            let ready = unsafe { libc::poll(&mut fd, 1, ms) };
            if ready < 0 {
                return Err(std::io::Error::last_os_error()).context("waiting for a connection");
            }
            if ready == 0 {
                bail!("no connection came within {t} s");
            }
            l.accept().context("accepting the connection")?
        }
    };
    drop(l);
    let std::net::SocketAddr::V4(peer) = peer else {
        bail!("a connection from {peer}: IPv4 only");
    };
    let start = Instant::now();
    let bytes = pump_in(&mut s, peer, a)?;
    drop(s);
    received(bytes, start, peer, a)
}
