//! The processes of a `ttcp` or `rr` cell other than `shmnet serve`: each a body, named by a
//! typed [`WorkerSpec`] (which the harness hands to the hidden `shmnet party` command, and
//! the hidden `shmnet worker` command builds from its options), driven by the cell's
//! [`Scoreboard`], printing one JSON object on standard output when the harness says quit.
//!
//! Every sender and receiver does the same work whatever the structure: a receiver copies
//! each message out into its own buffer (as `recv` does) and counts it; a sender writes the
//! message's sequence number into its first 8 bytes and sends it. Nothing checks the bytes:
//! the tests of each structure do that; this measures.

use super::requester::Requester;
use super::tcp;
use crate::scoreboard::{Permit, Scoreboard, ScoreboardError};
use crate::softnic_roles::{BenchSoftnic, bench_softnic};
use serde_json::{Value, json};
use shmnet_chan::coherence::BufferModes;
use shmnet_io::client::{Client, ClientError};
use shmnet_io::driver::softnic::{SoftnicConfig, SoftnicError};
use shmnet_io::inline::{App, Inline, ServeConfig, ServeError};
use shmnet_io::spec::BenchRole;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The UDP port the receiving application binds in the shmnet structures.
pub const APP_PORT: u16 = 5001;
/// The shmnet server's own address (`shmnet serve --ip`, and the inline stack's): where an
/// rr requester sends, over the loopback.
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The simulated peer (softnic) in the shmnet structures: where a sending application sends.
pub const PEER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000);
/// The port a sending application (and an rr requester) sends from.
pub const SOURCE_PORT: u16 = 40001;

/// How long a receiver waits for a message before looking at the board again.
pub(super) const POLL: Duration = Duration::from_millis(20);

/// What went wrong in a worker: one line for the harness to quote, naming the step that
/// failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A call on a kernel UDP socket failed.
    #[error("{what}: {source}")]
    Socket {
        /// The step: "UDP socket", "connect", ….
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// Receiving on a kernel UDP socket failed.
    #[error("recv: {0}")]
    Recv(std::io::Error),
    /// The receiver (or echo) never said which port it listens on.
    #[error("the receiver never published its port")]
    NoPort,
    /// The server could not be attached to in 10 s.
    #[error("attaching to the server at {}: {source}", socket.display())]
    Attach {
        /// Its control socket.
        socket: PathBuf,
        /// Why, the last time it was tried.
        source: ClientError,
    },
    /// The server refused the application's port.
    #[error("binding UDP port {port}: {source}")]
    Bind {
        /// The port.
        port: u16,
        /// Why.
        source: ClientError,
    },
    /// The sending application's first message (which teaches the server the peer's
    /// address) could not be sent.
    #[error("first send: {0}")]
    FirstSend(ClientError),
    /// The server closed the application's connection or died.
    #[error("the server went away")]
    ServerGone,
    /// A capture could not start.
    #[error("starting the capture: {0}")]
    Capture(#[from] shmnet_io::capture::StartError),
    /// Receiving through the server failed.
    #[error("recv: {0}")]
    ShmRecv(ClientError),
    /// The inline worker's softnic could not be made.
    #[error(transparent)]
    Softnic(#[from] SoftnicError),
    /// The inline worker's stack could not be made.
    #[error(transparent)]
    Inline(#[from] ServeError),
    /// The cell's scoreboard could not be opened.
    #[error("opening the scoreboard: {0}")]
    Board(#[from] ScoreboardError),
    /// A TCP call through the server failed.
    #[error("TCP {what}: {source}")]
    ShmTcp {
        /// The step: "connect", "read", ….
        what: &'static str,
        /// Why.
        source: ClientError,
    },
    /// A TCP call on the inline worker's stack failed.
    #[error("TCP {what}: {source}")]
    InlineTcp {
        /// The step.
        what: &'static str,
        /// Why.
        source: shmnet_stack::tcp::TcpError,
    },
    /// The peer closed the connection while replies were still due.
    #[error("the connection ended while replies were due")]
    Closed,
    /// The inline worker's window would not hand out its pools.
    #[error("opening the window's pools: {0}")]
    Pools(shmnet_chan::window::HandleError),
}

/// One party of a cell other than `shmnet serve`: its board and its job.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkerSpec {
    /// The cell's scoreboard.
    pub board: PathBuf,
    /// What it does.
    pub job: WorkerJob,
}

/// What a worker does; each job carries what it needs (the shmnet applications their
/// server's control socket).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerJob {
    /// [`capture_reader`]: a `shmnet capture` of the cell's server, read and discarded.
    Capture {
        /// The server's control socket.
        socket: PathBuf,
        /// What it captures.
        spec: shmnet_io::capture::CaptureSpec,
    },
    /// [`kernel_recv`].
    KernelRecv,
    /// [`kernel_send`] of `size`-byte messages.
    KernelSend {
        /// Message bytes.
        size: usize,
    },
    /// [`kernel_echo`].
    KernelEcho,
    /// [`kernel_rr`].
    KernelRr {
        /// Request bytes.
        size: usize,
        /// Requests in flight.
        outstanding: u32,
    },
    /// [`shm_recv`].
    ShmRecv {
        /// The server's control socket.
        socket: PathBuf,
    },
    /// [`shm_send`].
    ShmSend {
        /// The server's control socket.
        socket: PathBuf,
        /// Message bytes.
        size: usize,
    },
    /// [`shm_echo`].
    ShmEcho {
        /// The server's control socket.
        socket: PathBuf,
    },
    /// [`shm_rr`].
    ShmRr {
        /// The server's control socket.
        socket: PathBuf,
        /// Request bytes.
        size: usize,
        /// Requests in flight.
        outstanding: u32,
    },
    /// [`super::tcp::kernel_tcp_recv`].
    KernelTcpRecv {
        /// Message bytes (a whole message is counted received when its last byte is).
        size: usize,
    },
    /// [`super::tcp::kernel_tcp_send`].
    KernelTcpSend {
        /// Message bytes.
        size: usize,
    },
    /// [`super::tcp::kernel_tcp_echo`].
    KernelTcpEcho,
    /// [`super::tcp::kernel_tcp_rr`].
    KernelTcpRr {
        /// Request bytes.
        size: usize,
        /// Requests in flight.
        outstanding: u32,
    },
    /// [`super::tcp::shm_tcp_recv`].
    ShmTcpRecv {
        /// The server's control socket.
        socket: PathBuf,
        /// Message bytes.
        size: usize,
    },
    /// [`super::tcp::shm_tcp_send`].
    ShmTcpSend {
        /// The server's control socket.
        socket: PathBuf,
        /// Message bytes.
        size: usize,
    },
    /// [`super::tcp::shm_tcp_echo`].
    ShmTcpEcho {
        /// The server's control socket.
        socket: PathBuf,
    },
    /// [`super::tcp::shm_tcp_rr`].
    ShmTcpRr {
        /// The server's control socket.
        socket: PathBuf,
        /// Request bytes.
        size: usize,
        /// Requests in flight.
        outstanding: u32,
    },
    /// [`super::tcp::inline_tcp`].
    InlineTcp {
        /// Which workload ([`InlineJob::Stream`] or [`InlineJob::RequestResponse`]).
        job: InlineJob,
        /// Message bytes.
        size: usize,
        /// Checksums (UDP's, and TCP's: the wire is a loopback).
        checksum: bool,
        /// The loopback wire's MTU.
        mtu: usize,
        /// The stack's buffer methods.
        #[serde(default)]
        buffers: BufferModes,
    },
    /// [`inline`].
    Inline {
        /// Which workload.
        job: InlineJob,
        /// Message bytes.
        size: usize,
        /// UDP checksums.
        checksum: bool,
        /// Socket queue limit.
        rx_queue: usize,
        /// The stack's buffer methods.
        #[serde(default)]
        buffers: BufferModes,
    },
}

/// Runs the worker `spec` names: opens its board and does its job. On failure it tells the
/// other parties to leave too (the board's quit) and returns the error for the harness to
/// quote.
pub fn run(spec: &WorkerSpec) -> Result<Value> {
    let board = Arc::new(Scoreboard::open(&spec.board)?);
    let out = match &spec.job {
        WorkerJob::Capture { socket, spec } => capture_reader(&board, socket, spec),
        WorkerJob::KernelRecv => kernel_recv(&board),
        WorkerJob::KernelSend { size } => kernel_send(&board, *size),
        WorkerJob::KernelEcho => kernel_echo(&board),
        WorkerJob::KernelRr { size, outstanding } => kernel_rr(&board, *size, *outstanding),
        WorkerJob::ShmRecv { socket } => shm_recv(&board, socket),
        WorkerJob::ShmSend { socket, size } => shm_send(&board, socket, *size),
        WorkerJob::ShmEcho { socket } => shm_echo(&board, socket),
        WorkerJob::ShmRr {
            socket,
            size,
            outstanding,
        } => shm_rr(&board, socket, *size, *outstanding),
        WorkerJob::Inline {
            job,
            size,
            checksum,
            rx_queue,
            buffers,
        } => inline(board.clone(), *job, *size, *checksum, *rx_queue, *buffers),
        WorkerJob::KernelTcpRecv { size } => tcp::kernel_tcp_recv(&board, *size),
        WorkerJob::KernelTcpSend { size } => tcp::kernel_tcp_send(&board, *size),
        WorkerJob::KernelTcpEcho => tcp::kernel_tcp_echo(&board),
        WorkerJob::KernelTcpRr { size, outstanding } => {
            tcp::kernel_tcp_rr(&board, *size, *outstanding)
        }
        WorkerJob::ShmTcpRecv { socket, size } => tcp::shm_tcp_recv(&board, socket, *size),
        WorkerJob::ShmTcpSend { socket, size } => tcp::shm_tcp_send(&board, socket, *size),
        WorkerJob::ShmTcpEcho { socket } => tcp::shm_tcp_echo(&board, socket),
        WorkerJob::ShmTcpRr {
            socket,
            size,
            outstanding,
        } => tcp::shm_tcp_rr(&board, socket, *size, *outstanding),
        WorkerJob::InlineTcp {
            job,
            size,
            checksum,
            mtu,
            buffers,
        } => tcp::inline_tcp(board.clone(), *job, *size, *checksum, *mtu, *buffers),
    };
    if out.is_err() {
        // Let the others leave too: the harness reports this party's error.
        board.set_quit();
    }
    out
}

/// What a worker returns.
pub type Result<T> = std::result::Result<T, WorkerError>;

/// The error of step `what` on a kernel socket.
pub(super) fn socket_error(what: &'static str) -> impl FnOnce(std::io::Error) -> WorkerError {
    move |source| WorkerError::Socket { what, source }
}

/// A sender held back by the window: spin briefly, then yield, then sleep a little (the
/// receiver's progress has no file descriptor to wait on).
pub(super) struct Backoff(pub(super) u32);

impl Backoff {
    pub(super) fn wait(&mut self) {
        self.0 += 1;
        if self.0 < 64 {
            std::hint::spin_loop();
        } else if self.0 < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(5));
        }
    }
}

/// A message of `size` bytes for sequence number `seq`.
pub(super) fn stamp(buf: &mut [u8], seq: u64) {
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
}

pub(super) fn wait_for_quit(board: &Scoreboard) {
    while !board.quitting() {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn udp_socket() -> Result<UdpSocket> {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(socket_error("UDP socket"))
}

/// Asks for a receive buffer of `bytes` (beyond `rmem_max` when allowed to: root); returns
/// what the kernel granted.
fn grow_rcvbuf(sock: &UdpSocket, bytes: i32) -> i32 {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    let set = |opt| {
        // SAFETY: a valid socket and a pointer to an int of the stated size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        }
    };
    if set(libc::SO_RCVBUFFORCE) != 0 {
        set(libc::SO_RCVBUF);
    }
    let mut got: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: as above, with room for the answer.
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut i32).cast(),
            &mut len,
        )
    };
    got
}

/// The kernel's count of datagrams it dropped for the UDP socket bound to `port` on
/// loopback (the `drops` column of `/proc/net/udp`: receive buffer full).
fn kernel_socket_drops(port: u16) -> u64 {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0)
}

/// `kernel` receiver: a Linux UDP socket on loopback; publishes its port, counts what
/// arrives, and at the end the kernel's drop count for it.
pub fn kernel_recv(board: &Scoreboard) -> Result<Value> {
    let sock = udp_socket()?;
    let rcvbuf = grow_rcvbuf(&sock, 8 << 20);
    sock.set_read_timeout(Some(POLL))
        .map_err(socket_error("setting the receive timeout"))?;
    let port = sock
        .local_addr()
        .map_err(socket_error("reading the socket's port"))?
        .port();
    board.set_port(port);
    board.add_ready();
    let mut buf = vec![0u8; 65_536];
    let (mut n, mut bytes) = (0u64, 0u64);
    while !board.quitting() {
        match sock.recv(&mut buf) {
            Ok(len) => {
                n += 1;
                bytes += len as u64;
                board.set_received(n);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(WorkerError::Recv(e)),
        }
    }
    Ok(json!({"received": n, "bytes": bytes, "rcvbuf": rcvbuf,
        "lost": {"kernel: socket receive buffer full": kernel_socket_drops(port)}}))
}

/// `kernel` sender: sends `size`-byte messages to the receiver's port as the board allows.
pub fn kernel_send(board: &Scoreboard, size: usize) -> Result<Value> {
    let sock = udp_socket()?;
    let port = wait_port(board)?;
    sock.connect((Ipv4Addr::LOCALHOST, port))
        .map_err(socket_error("connect"))?;
    board.add_ready();
    let mut msg = vec![0x5au8; size];
    let (mut sent, mut seen, mut errors) = (0u64, 0u64, 0u64);
    let mut backoff = Backoff(0);
    loop {
        match board.permit(sent, &mut seen) {
            Permit::Go => {
                backoff.0 = 0;
                stamp(&mut msg, sent);
                if sock.send(&msg).is_err() {
                    errors += 1;
                }
                sent += 1;
                board.set_sent(sent);
            }
            Permit::Wait => backoff.wait(),
            Permit::Done => break,
        }
    }
    board.set_sent(sent);
    board.set_sender_finished();
    wait_for_quit(board);
    Ok(json!({"sent": sent, "lost": {"kernel: send failed": errors}}))
}

pub(super) fn wait_port(board: &Scoreboard) -> Result<u16> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let p = board.port();
        if p != 0 {
            return Ok(p);
        }
        if Instant::now() > deadline || board.quitting() {
            return Err(WorkerError::NoPort);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `kernel` rr server: echoes every datagram to its sender.
pub fn kernel_echo(board: &Scoreboard) -> Result<Value> {
    let sock = udp_socket()?;
    sock.set_read_timeout(Some(POLL))
        .map_err(socket_error("setting the receive timeout"))?;
    let port = sock
        .local_addr()
        .map_err(socket_error("reading the socket's port"))?
        .port();
    board.set_port(port);
    board.add_ready();
    let mut buf = vec![0u8; 65_536];
    let (mut n, mut failed) = (0u64, 0u64);
    while !board.quitting() {
        if let Ok((len, from)) = sock.recv_from(&mut buf) {
            n += 1;
            if sock.send_to(&buf[..len], from).is_err() {
                failed += 1;
            }
        }
    }
    Ok(
        json!({"echoed": n, "lost": {"kernel: socket receive buffer full": kernel_socket_drops(port),
        "kernel: echo send failed": failed}}),
    )
}

/// Waits for the harness's `go` (or `quit`).
pub(super) fn wait_for_go(board: &Scoreboard) {
    while !board.go() && !board.quitting() {
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// `kernel` rr requester: a UDP socket connected to the echo server's port (see
/// `Requester`).
pub fn kernel_rr(board: &Scoreboard, size: usize, outstanding: u32) -> Result<Value> {
    let sock = udp_socket()?;
    let port = wait_port(board)?;
    sock.connect((Ipv4Addr::LOCALHOST, port))
        .map_err(socket_error("connect"))?;
    sock.set_read_timeout(Some(POLL))
        .map_err(socket_error("setting the receive timeout"))?;
    board.add_ready();
    wait_for_go(board);
    let mut r = Requester::new(board, size, outstanding);
    r.run(
        |req| Ok::<_, WorkerError>(sock.send(req).is_ok()),
        |buf| Ok(sock.recv(buf).ok()),
    )?;
    r.finish();
    wait_for_quit(board);
    Ok(r.report())
}

/// Attaches to the server, trying again for a while: its control socket exists before its
/// driver process has attached, and until then it turns applications away.
pub(super) fn connect(socket: &Path) -> Result<Client> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Client::connect(socket) {
            Ok(c) => return Ok(c),
            Err(source) if Instant::now() > deadline => {
                return Err(WorkerError::Attach {
                    socket: socket.to_path_buf(),
                    source,
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Binds `port` for the application.
fn bind(client: &Client, port: u16) -> Result<shmnet_io::client::UdpSocket> {
    client
        .udp_bind(port)
        .map_err(|source| WorkerError::Bind { port, source })
}

/// `server`/`ipc` receiving application: binds [`APP_PORT`] and takes every message with
/// one copy of its bytes, as the kernel's receiver does (its `recv` copies each one into
/// the application's buffer):
///
/// - with shared windows (and in `ipc`), the message lies in the server's pool buffers,
///   which must go back: the application copies it out (`recv`);
/// - isolated (`server-regions`), the server has already copied it into a buffer of the
///   application's own region — that was the one copy, done on the trusted side — and the
///   application takes it there (`recv_in_place`). Copying it out once more would be a
///   second copy no isolated application needs (docs/isolation.md measures that choice).
///
/// Neither receiver does anything more with the bytes than that one copy.
pub fn shm_recv(board: &Scoreboard, socket: &Path) -> Result<Value> {
    let client = connect(socket)?;
    let sock = bind(&client, APP_PORT)?;
    let in_place = client.is_isolated();
    board.add_ready();
    let mut buf = vec![0u8; 65_536];
    let (mut n, mut bytes) = (0u64, 0u64);
    while !board.quitting() {
        let got = if in_place {
            sock.recv_in_place_timeout(POLL, |d| (d.len(), d.source()))
        } else {
            sock.recv_timeout(&mut buf, POLL)
        };
        match got {
            Ok((len, _)) => {
                n += 1;
                bytes += len as u64;
                board.set_received(n);
            }
            Err(ClientError::TimedOut) => {}
            Err(ClientError::ServerGone) => break,
            Err(e) => return Err(WorkerError::ShmRecv(e)),
        }
    }
    Ok(json!({"received": n, "bytes": bytes}))
}

/// A capture of the cell's server (`shmnet bench capture`): starts it, says it is ready,
/// and reads every record as `shmnet capture` does (its naps when the ring is empty),
/// discarding it, until the board says quit.
pub fn capture_reader(
    board: &Scoreboard,
    socket: &Path,
    spec: &shmnet_io::capture::CaptureSpec,
) -> Result<Value> {
    use shmnet_io::capture::{Naps, Next, Session};
    let mut s = Session::start(socket, spec)?;
    board.add_ready();
    let (mut frames, mut bytes) = (0u64, 0u64);
    let mut naps = Naps::default();
    while !board.quitting() {
        match s.ring.read() {
            Next::Frame(_, data) => {
                naps.frame();
                frames += 1;
                bytes += data.len() as u64;
            }
            Next::Empty => naps.wait(&s.ring),
            Next::Stopped => break,
        }
    }
    Ok(json!({"captured": frames, "captured_bytes": bytes, "capture_lost": s.ring.lost()}))
}

/// `server`/`ipc` sending application: sends `size`-byte messages to [`PEER`] as the board
/// allows. One message first (before it says it is ready) so that the server has the
/// peer's Ethernet address before the run starts.
pub fn shm_send(board: &Scoreboard, socket: &Path, size: usize) -> Result<Value> {
    let client = connect(socket)?;
    let sock = bind(&client, SOURCE_PORT)?;
    let mut msg = vec![0x5au8; size];
    stamp(&mut msg, u64::MAX);
    sock.send_to(&msg, PEER).map_err(WorkerError::FirstSend)?;
    std::thread::sleep(Duration::from_millis(100));
    board.add_ready();
    let (mut sent, mut seen, mut failed) = (0u64, 0u64, 0u64);
    let mut backoff = Backoff(0);
    loop {
        match board.permit(sent, &mut seen) {
            Permit::Go => {
                backoff.0 = 0;
                stamp(&mut msg, sent);
                match sock.send_to(&msg, PEER) {
                    Ok(()) => {}
                    Err(ClientError::ServerGone) => return Err(WorkerError::ServerGone),
                    Err(_) => failed += 1,
                }
                sent += 1;
                board.set_sent(sent);
            }
            Permit::Wait => backoff.wait(),
            Permit::Done => break,
        }
    }
    board.set_sent(sent);
    board.set_sender_finished();
    wait_for_quit(board);
    Ok(json!({"sent": sent, "lost": {"app: send failed (no send buffer in 10 s)": failed}}))
}

/// `server`/`ipc` rr application: echoes every datagram on [`APP_PORT`] to its sender.
pub fn shm_echo(board: &Scoreboard, socket: &Path) -> Result<Value> {
    let client = connect(socket)?;
    let sock = bind(&client, APP_PORT)?;
    board.add_ready();
    let mut buf = vec![0u8; 65_536];
    let (mut n, mut failed) = (0u64, 0u64);
    while !board.quitting() {
        match sock.recv_timeout(&mut buf, POLL) {
            Ok((len, from)) => {
                n += 1;
                if sock.send_to(&buf[..len], from).is_err() {
                    failed += 1;
                }
            }
            Err(ClientError::TimedOut) => {}
            Err(ClientError::ServerGone) => break,
            Err(e) => return Err(WorkerError::ShmRecv(e)),
        }
    }
    Ok(json!({"echoed": n, "lost": {"app: echo send failed": failed}}))
}

/// `server`/`ipc` rr requester: an application of the same server as the echo, sending to
/// the server's own address at [`APP_PORT`] over the loopback, with the client API as
/// [`shm_echo`] uses it (see `Requester`).
pub fn shm_rr(board: &Scoreboard, socket: &Path, size: usize, outstanding: u32) -> Result<Value> {
    let client = connect(socket)?;
    let sock = bind(&client, SOURCE_PORT)?;
    let echo = SocketAddrV4::new(SERVER_IP, APP_PORT);
    board.add_ready();
    wait_for_go(board);
    let mut r = Requester::new(board, size, outstanding);
    r.run(
        |req| match sock.send_to(req, echo) {
            Ok(()) => Ok(true),
            Err(ClientError::ServerGone) => Err(WorkerError::ServerGone),
            Err(_) => Ok(false),
        },
        |buf| match sock.recv_timeout(buf, POLL) {
            Ok((len, _)) => Ok(Some(len)),
            Err(ClientError::TimedOut) => Ok(None),
            Err(ClientError::ServerGone) => Err(WorkerError::ServerGone),
            Err(e) => Err(WorkerError::ShmRecv(e)),
        },
    )?;
    r.finish();
    wait_for_quit(board);
    Ok(r.report())
}

/// What the `inline` worker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InlineJob {
    /// softnic sends, the built-in application receives (ttcp rx).
    Receive,
    /// The built-in application sends, softnic sinks (ttcp tx).
    Transmit,
    /// A requester in this thread asks the built-in echo application, over a loopback
    /// softnic (rr).
    RequestResponse {
        /// Requests in flight.
        outstanding: u32,
    },
    /// TCP only: a sender in this thread streams to a receiver in this thread over one
    /// connection through a loopback softnic (ttcp `--proto tcp`).
    Stream,
}

/// `inline`: driver, stack and application in this one thread.
pub fn inline(
    board: Arc<Scoreboard>,
    job: InlineJob,
    size: usize,
    checksum: bool,
    rx_queue: usize,
    buffers: BufferModes,
) -> Result<Value> {
    let (role, apps) = match job {
        // The harness sends a stream to `WorkerJob::InlineTcp`, with its MTU; here the
        // Ethernet-sized wire a UDP cell has.
        InlineJob::Stream => return tcp::inline_tcp(board, job, size, checksum, 1500, buffers),
        InlineJob::Receive => (BenchRole::Send, vec![App::Sink(APP_PORT)]),
        InlineJob::Transmit => (BenchRole::Sink, vec![App::Sink(SOURCE_PORT)]),
        InlineJob::RequestResponse { .. } => (
            BenchRole::Loopback,
            vec![App::Echo(APP_PORT), App::Caller(SOURCE_PORT)],
        ),
    };
    let nic = bench_softnic(
        SoftnicConfig {
            size,
            checksum,
            dst_ports: vec![APP_PORT],
            ip: SERVER_IP,
            peer_ip: *PEER.ip(),
            src_port: PEER.port(),
            ..SoftnicConfig::default()
        },
        board.clone(),
        role,
    )?;
    let cfg = ServeConfig {
        ip: SERVER_IP,
        checksum,
        rx_queue_limit: rx_queue,
        apps,
        loopback: role == BenchRole::Loopback,
        buffers,
        cache: crate::cacheinfo::geometry(),
        ..ServeConfig::default()
    };
    let mut server = Inline::new(nic, &cfg)?;
    let lost = match job {
        InlineJob::RequestResponse { outstanding } => {
            inline_rr(&board, &mut server, size, outstanding)
        }
        _ => inline_ttcp(&board, &mut server, job, size),
    };
    let stack: serde_json::Map<String, Value> = server
        .stack_stats()
        .fields()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into()))
        .collect();
    let mut out = json!({
        "apps": server.app_stats(),
        "stack": stack,
        "driver": server.driver_stats(),
    });
    if let (Some(out), Value::Object(own)) = (out.as_object_mut(), lost) {
        out.extend(own);
    }
    Ok(out)
}

/// ttcp in the inline thread: softnic sends and the built-in sink receives, or the other way
/// round. Returns the sender's count and losses.
fn inline_ttcp(
    board: &Scoreboard,
    server: &mut Inline<BenchSoftnic>,
    job: InlineJob,
    size: usize,
) -> Value {
    let mut msg = vec![0x5au8; size];
    let transmit = job == InlineJob::Transmit;
    if transmit {
        // Learn the peer's Ethernet address before the run.
        stamp(&mut msg, u64::MAX);
        let _ = server.send_to(SOURCE_PORT, &msg, PEER);
        for _ in 0..100 {
            server.step();
        }
    }
    board.add_ready();
    let (mut sent, mut seen, mut failed) = (0u64, 0u64, 0u64);
    // The built-in application is the sender of a transmit run; it says when it finished.
    let mut finished = !transmit;
    let mut rounds = 0u64;
    loop {
        if !finished {
            for _ in 0..32 {
                match board.permit(sent, &mut seen) {
                    Permit::Go => {}
                    Permit::Wait => break,
                    Permit::Done => {
                        finished = true;
                        break;
                    }
                }
                stamp(&mut msg, sent);
                if server.send_to(SOURCE_PORT, &msg, PEER).is_err() {
                    failed += 1;
                }
                sent += 1;
            }
            // `sent` is published once per batch; the last one, then the word that it is final.
            board.set_sent(sent);
            if finished {
                board.set_sender_finished();
            }
        }
        let work = server.step();
        if job == InlineJob::Receive {
            board.set_received(server.app_stats().messages);
        }
        // Look at the quit word now and then: it is the harness's line, not ours.
        rounds += 1;
        if (work == 0 || rounds % 1024 == 0) && board.quitting() {
            break;
        }
        if work == 0 && !board.go() {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    if transmit {
        json!({"sent": sent, "lost": {"app: send failed": failed}})
    } else {
        json!({})
    }
}

/// rr in the inline thread: the requester sends to the echo application of the same stack at
/// our own address; request and reply each go out through the loopback softnic and come back
/// in. Returns the requester's report.
fn inline_rr(
    board: &Scoreboard,
    server: &mut Inline<BenchSoftnic>,
    size: usize,
    outstanding: u32,
) -> Value {
    board.add_ready();
    wait_for_go(board);
    let echo = SocketAddrV4::new(SERVER_IP, APP_PORT);
    let mut r = Requester::new(board, size, outstanding);
    let mut reply = vec![0u8; 65_536];
    let mut finished = false;
    let mut rounds = 0u64;
    loop {
        while let Some(req) = r.request() {
            if server.send_to(SOURCE_PORT, req, echo).is_err() {
                r.send_failed();
            }
        }
        let work = server.step();
        while let Ok(Some((len, _))) = server.recv_from(SOURCE_PORT, &mut reply) {
            r.reply(&reply[..len]);
        }
        if !finished && r.finished() {
            r.finish();
            finished = true;
        }
        rounds += 1;
        if (work == 0 || rounds % 1024 == 0) && board.quitting() {
            break;
        }
        if work == 0 && finished {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    r.report()
}
