//! The parties of `shmnet ttcp --proto tcp` and `shmnet rr --proto tcp`: one TCP connection
//! per cell, both of its ends on this host, so that every structure runs both ends' protocol
//! work (as the kernel does over `lo`):
//!
//! | structure | ends of the connection | wire |
//! |---|---|---|
//! | `kernel` | two processes with Linux TCP sockets (`TCP_NODELAY` in rr) | `lo` |
//! | `server`, `server-thread`, `server-process`, `server-regions`, `ipc` | two application processes of one `shmnet serve`, using the client API's TCP streams | a loopback softnic |
//! | `inline` | one process: softnic, the stack and both ends of the connection in one loop | a loopback softnic |
//!
//! In ttcp the sender writes `size`-byte messages (its first 8 bytes the sequence number)
//! as fast as the connection takes them; TCP's own flow control is the window (the board's
//! is off). The receiver reads with one copy into its own 64 KiB buffer, counts the bytes,
//! and publishes whole messages (bytes ÷ size) as received. In rr the requester writes a
//! request and the echo writes back every byte it reads; the requester cuts the reply
//! stream into `size`-byte replies (TCP keeps no message boundaries) and times each one.

use super::requester::Requester;
use super::worker::{
    APP_PORT, Backoff, InlineJob, POLL, Result, SERVER_IP, WorkerError, connect, socket_error,
    stamp, wait_for_go, wait_for_quit, wait_port,
};
use crate::scoreboard::{Permit, Scoreboard};
use crate::softnic_roles::{BenchSoftnic, bench_softnic};
use serde_json::{Value, json};
use shmnet_chan::{ChannelSpec, DriverPools, PageSize, PoolSpec, Window};
use shmnet_io::client::{ClientError, TcpStream as ShmStream};
use shmnet_io::driver::softnic::SoftnicConfig;
use shmnet_io::driver::{Driver, RxFrame};
use shmnet_io::inline::{ServeConfig, frame_buffer_size};
use shmnet_io::pool::ChanPool;
use shmnet_io::spec::BenchRole;
use shmnet_stack::tcp::{TcpError, TcpHandle};
use shmnet_stack::{BufIdx, Interface};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes a receiver (or an echo) reads at most per call.
const READ_BUF: usize = 64 * 1024;

/// How long a connecting party waits for the handshake.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// A receiver's count: bytes, and whole `size`-byte messages published on the board.
struct Count {
    size: u64,
    bytes: u64,
}

impl Count {
    fn new(size: usize) -> Self {
        Self {
            size: size.max(1) as u64,
            bytes: 0,
        }
    }

    fn add(&mut self, board: &Scoreboard, n: usize) {
        self.bytes += n as u64;
        board.set_received(self.bytes / self.size);
    }

    fn report(&self) -> Value {
        json!({"received_bytes": self.bytes, "received": self.bytes / self.size})
    }
}

/// Cuts a byte stream into `size`-byte replies (a TCP stream keeps no message boundaries).
struct Framer {
    size: usize,
    pending: Vec<u8>,
    start: usize,
}

impl Framer {
    fn new(size: usize) -> Self {
        Self {
            size,
            pending: Vec::new(),
            start: 0,
        }
    }

    /// Bytes that arrived.
    fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.pending.drain(..self.start);
            self.start = 0;
        }
        self.pending.extend_from_slice(bytes);
    }

    /// The next whole reply, copied into `out`: its length.
    fn next(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.pending.len() - self.start < self.size || out.len() < self.size {
            return None;
        }
        out[..self.size].copy_from_slice(&self.pending[self.start..self.start + self.size]);
        self.start += self.size;
        if self.start == self.pending.len() {
            self.pending.clear();
            self.start = 0;
        }
        Some(self.size)
    }
}

// ------------------------------------------------------------------------------- kernel

/// Accepts one connection on `l` (non-blocking), looking at the board between tries.
fn kernel_accept(board: &Scoreboard, l: &TcpListener) -> Result<Option<TcpStream>> {
    l.set_nonblocking(true)
        .map_err(socket_error("making the listener non-blocking"))?;
    while !board.quitting() {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)
                    .map_err(socket_error("making the stream blocking"))?;
                s.set_read_timeout(Some(POLL))
                    .map_err(socket_error("setting the receive timeout"))?;
                return Ok(Some(s));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(200))
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(WorkerError::Socket {
                    what: "accept",
                    source: e,
                });
            }
        }
    }
    Ok(None)
}

/// A listener on an ephemeral port of 127.0.0.1, published on the board.
fn kernel_listen(board: &Scoreboard) -> Result<TcpListener> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(socket_error("TCP listen"))?;
    let port = l
        .local_addr()
        .map_err(socket_error("reading the listener's port"))?
        .port();
    board.set_port(port);
    Ok(l)
}

/// Whether a read error only means nothing came within the poll period.
fn idle(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// `kernel` TCP receiver: accepts one connection on 127.0.0.1 and reads it to its end.
pub fn kernel_tcp_recv(board: &Scoreboard, size: usize) -> Result<Value> {
    let l = kernel_listen(board)?;
    board.add_ready();
    let mut count = Count::new(size);
    if let Some(mut s) = kernel_accept(board, &l)? {
        let mut buf = vec![0u8; READ_BUF];
        while !board.quitting() {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => count.add(board, n),
                Err(e) if idle(&e) => {}
                Err(e) => return Err(WorkerError::Recv(e)),
            }
        }
    }
    wait_for_quit(board);
    Ok(count.report())
}

/// `kernel` TCP sender: connects to the receiver and writes `size`-byte messages as the
/// board allows.
pub fn kernel_tcp_send(board: &Scoreboard, size: usize) -> Result<Value> {
    let port = wait_port(board)?;
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(socket_error("connect"))?;
    board.add_ready();
    let mut msg = vec![0x5au8; size];
    let (mut sent, mut seen) = (0u64, 0u64);
    let mut backoff = Backoff(0);
    loop {
        match board.permit(sent, &mut seen) {
            Permit::Go => {
                backoff.0 = 0;
                stamp(&mut msg, sent);
                if let Err(e) = s.write_all(&msg) {
                    if board.quitting() {
                        break;
                    }
                    return Err(WorkerError::Socket {
                        what: "write",
                        source: e,
                    });
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
    Ok(json!({"sent": sent, "sent_bytes": sent * size as u64}))
}

/// `kernel` TCP rr echo: accepts one connection (`TCP_NODELAY`) and writes back every byte
/// it reads.
pub fn kernel_tcp_echo(board: &Scoreboard) -> Result<Value> {
    let l = kernel_listen(board)?;
    board.add_ready();
    let mut echoed = 0u64;
    if let Some(mut s) = kernel_accept(board, &l)? {
        s.set_nodelay(true).map_err(socket_error("TCP_NODELAY"))?;
        let mut buf = vec![0u8; READ_BUF];
        while !board.quitting() {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    echoed += n as u64;
                }
                Err(e) if idle(&e) => {}
                Err(e) => return Err(WorkerError::Recv(e)),
            }
        }
    }
    wait_for_quit(board);
    Ok(json!({"echoed_bytes": echoed}))
}

/// `kernel` TCP rr requester: one connection to the echo, `TCP_NODELAY` (see `Requester`).
pub fn kernel_tcp_rr(board: &Scoreboard, size: usize, outstanding: u32) -> Result<Value> {
    let port = wait_port(board)?;
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(socket_error("connect"))?;
    s.set_nodelay(true).map_err(socket_error("TCP_NODELAY"))?;
    s.set_read_timeout(Some(POLL))
        .map_err(socket_error("setting the receive timeout"))?;
    let mut reader = s.try_clone().map_err(socket_error("cloning the stream"))?;
    board.add_ready();
    wait_for_go(board);
    let mut r = Requester::new(board, size, outstanding);
    let mut framer = Framer::new(size.max(8));
    let mut tmp = vec![0u8; READ_BUF];
    r.run(
        |req| Ok::<_, WorkerError>(s.write_all(req).is_ok()),
        |buf| {
            if let Some(n) = framer.next(buf) {
                return Ok(Some(n));
            }
            match reader.read(&mut tmp) {
                Ok(0) => Err(WorkerError::Closed),
                Ok(n) => {
                    framer.push(&tmp[..n]);
                    Ok(framer.next(buf))
                }
                Err(e) if idle(&e) => Ok(None),
                Err(e) => Err(WorkerError::Recv(e)),
            }
        },
    )?;
    r.finish();
    wait_for_quit(board);
    Ok(r.report())
}

// ------------------------------------------------------------------- server, ipc applications

/// The error of TCP step `what` through the server.
fn tcp_error(what: &'static str) -> impl FnOnce(ClientError) -> WorkerError {
    move |source| match source {
        ClientError::ServerGone => WorkerError::ServerGone,
        source => WorkerError::ShmTcp { what, source },
    }
}

/// Listens on [`APP_PORT`] through the server at `socket` (publishing it on the board),
/// says it is ready, and accepts one connection; `None` if the board said quit first.
fn shm_accept(board: &Scoreboard, client: &shmnet_io::client::Client) -> Result<Option<ShmStream>> {
    let l = client
        .tcp_listen(APP_PORT, 4)
        .map_err(tcp_error("TCP listen"))?;
    board.set_port(l.port());
    board.add_ready();
    while !board.quitting() {
        if let Some(s) = l.accept_timeout(POLL).map_err(tcp_error("accept"))? {
            return Ok(Some(s));
        }
    }
    Ok(None)
}

/// Connects to the listener the board names, at the server's own address.
fn shm_connect(board: &Scoreboard, client: &shmnet_io::client::Client) -> Result<ShmStream> {
    let port = wait_port(board)?;
    client
        .tcp_connect(SocketAddrV4::new(SERVER_IP, port), CONNECT_PATIENCE)
        .map_err(tcp_error("connect"))
}

/// `server`/`ipc` TCP receiving application: accepts one connection and reads it to its
/// end, each read one copy into its own buffer.
pub fn shm_tcp_recv(board: &Scoreboard, socket: &Path, size: usize) -> Result<Value> {
    let client = connect(socket)?;
    let mut count = Count::new(size);
    if let Some(mut s) = shm_accept(board, &client)? {
        let mut buf = vec![0u8; READ_BUF];
        while !board.quitting() {
            match s.read_timeout(&mut buf, POLL) {
                Ok(Some(0)) => break,
                Ok(Some(n)) => count.add(board, n),
                Ok(None) | Err(ClientError::TimedOut) => {}
                Err(ClientError::ServerGone) => break,
                Err(e) => return Err(tcp_error("read")(e)),
            }
        }
    }
    wait_for_quit(board);
    Ok(count.report())
}

/// `server`/`ipc` TCP sending application: connects to the receiver and writes
/// `size`-byte messages as the board allows.
pub fn shm_tcp_send(board: &Scoreboard, socket: &Path, size: usize) -> Result<Value> {
    let client = connect(socket)?;
    let mut s = shm_connect(board, &client)?;
    board.add_ready();
    let mut msg = vec![0x5au8; size];
    let (mut sent, mut seen) = (0u64, 0u64);
    let mut backoff = Backoff(0);
    loop {
        match board.permit(sent, &mut seen) {
            Permit::Go => {
                backoff.0 = 0;
                stamp(&mut msg, sent);
                match s.write_all(&msg) {
                    Ok(()) => {}
                    Err(_) if board.quitting() => break,
                    Err(e) => return Err(tcp_error("write")(e)),
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
    Ok(json!({"sent": sent, "sent_bytes": sent * size as u64}))
}

/// `server`/`ipc` TCP rr echo: accepts one connection (no Nagle) and writes back every
/// byte it reads.
pub fn shm_tcp_echo(board: &Scoreboard, socket: &Path) -> Result<Value> {
    let client = connect(socket)?;
    let mut echoed = 0u64;
    if let Some(mut s) = shm_accept(board, &client)? {
        s.set_nodelay(true).map_err(tcp_error("TCP_NODELAY"))?;
        let mut buf = vec![0u8; READ_BUF];
        while !board.quitting() {
            match s.read_timeout(&mut buf, POLL) {
                Ok(Some(0)) => break,
                Ok(Some(n)) => {
                    match s.write_all(&buf[..n]) {
                        Ok(()) => {}
                        Err(_) if board.quitting() => break,
                        Err(e) => return Err(tcp_error("echo write")(e)),
                    }
                    echoed += n as u64;
                }
                Ok(None) | Err(ClientError::TimedOut) => {}
                Err(ClientError::ServerGone) => break,
                Err(e) => return Err(tcp_error("read")(e)),
            }
        }
    }
    wait_for_quit(board);
    Ok(json!({"echoed_bytes": echoed}))
}

/// `server`/`ipc` TCP rr requester: an application of the same server as the echo,
/// connected to it over the loopback wire, no Nagle (see `Requester`).
pub fn shm_tcp_rr(
    board: &Scoreboard,
    socket: &Path,
    size: usize,
    outstanding: u32,
) -> Result<Value> {
    let client = connect(socket)?;
    let s = std::cell::RefCell::new(shm_connect(board, &client)?);
    s.borrow_mut()
        .set_nodelay(true)
        .map_err(tcp_error("TCP_NODELAY"))?;
    board.add_ready();
    wait_for_go(board);
    let mut r = Requester::new(board, size, outstanding);
    let mut framer = Framer::new(size.max(8));
    let mut tmp = vec![0u8; READ_BUF];
    r.run(
        |req| match s.borrow_mut().write_all(req) {
            Ok(()) => Ok(true),
            Err(ClientError::ServerGone) => Err(WorkerError::ServerGone),
            Err(_) => Ok(false),
        },
        |buf| {
            if let Some(n) = framer.next(buf) {
                return Ok(Some(n));
            }
            match s.borrow_mut().read_timeout(&mut tmp, POLL) {
                Ok(Some(0)) => Err(WorkerError::Closed),
                Ok(Some(n)) => {
                    framer.push(&tmp[..n]);
                    Ok(framer.next(buf))
                }
                Ok(None) | Err(ClientError::TimedOut) => Ok(None),
                Err(e) => Err(tcp_error("read")(e)),
            }
        },
    )?;
    r.finish();
    wait_for_quit(board);
    Ok(r.report())
}

// ----------------------------------------------------------------------------------- inline

/// Frames taken from the wire per burst.
const BURST: usize = 32;

/// The inline structure for TCP: a loopback softnic, a window's pools and one stack, driven
/// by this thread, with both ends of the connection as the caller's handles.
struct InlineTcp {
    nic: BenchSoftnic,
    dpools: DriverPools,
    pool: ChanPool,
    iface: Interface,
    rx: Vec<RxFrame>,
    tx: Vec<BufIdx>,
    tx_idx: Vec<u32>,
    epoch: Instant,
    /// The window the pools live in (kept for as long as they are used).
    _window: Window,
}

impl InlineTcp {
    fn new(
        board: Arc<Scoreboard>,
        checksum: bool,
        mtu: usize,
        buffers: shmnet_chan::coherence::BufferModes,
    ) -> Result<Self> {
        // The stack as `shmnet serve` configures it for a loopback softnic.
        let serve = ServeConfig {
            ip: SERVER_IP,
            prefix: 24,
            pools: PoolSpec {
                data_size: frame_buffer_size(mtu),
                ..PoolSpec::default()
            },
            checksum,
            loopback: true,
            mtu,
            buffers,
            cache: crate::cacheinfo::geometry(),
            ..ServeConfig::default()
        };
        let nic = bench_softnic(
            SoftnicConfig {
                checksum,
                ip: SERVER_IP,
                ..SoftnicConfig::default()
            },
            board,
            BenchRole::Loopback,
        )?;
        let window = Window::create(&ChannelSpec {
            rings: vec![],
            pools: serve.pools,
            page: PageSize::Small,
        })
        .map_err(shmnet_io::inline::ServeError::from)?;
        let dpools = window.driver_pools().map_err(WorkerError::Pools)?;
        let pool = ChanPool::new(window.server_pools().map_err(WorkerError::Pools)?);
        Ok(Self {
            iface: Interface::new(serve.stack_config(nic.mac())),
            nic,
            dpools,
            pool,
            rx: Vec::with_capacity(BURST),
            tx: Vec::new(),
            tx_idx: Vec::new(),
            epoch: Instant::now(),
            _window: window,
        })
    }

    fn now(&self) -> shmnet_stack::Instant {
        shmnet_stack::Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Hands what the stack queued to the wire.
    fn transmit(&mut self) -> usize {
        let n = self.tx.len();
        if n > 0 {
            self.tx_idx.clear();
            self.tx_idx.extend(self.tx.drain(..).map(|b| b.0));
            // A refused frame is counted by the driver and retransmitted by TCP.
            let _ = self.nic.tx_burst(&mut self.dpools, &self.tx_idx);
        }
        n
    }

    /// One round: what the caller queued out, every frame the wire holds through the stack
    /// (and the answers out), the timers. Returns the frames moved (0: idle).
    fn step(&mut self) -> usize {
        let mut work = self.transmit();
        loop {
            let now = self.now();
            self.rx.clear();
            // A driver error leaves nothing received this round; it shows in its counters.
            let _ = self.nic.rx_burst(&mut self.dpools, &mut self.rx, BURST);
            let n = self.rx.len();
            for f in &self.rx {
                self.iface
                    .receive(&mut self.pool, BufIdx(f.buf), now, &mut self.tx);
            }
            work += n + self.transmit();
            if n < BURST {
                break;
            }
        }
        let now = self.now();
        self.iface.poll(&mut self.pool, now, &mut self.tx);
        work += self.transmit();
        self.pool.pools().drain_deferred(64);
        work
    }

    /// Sends as much of `data` as the connection takes now: how many bytes.
    fn send(&mut self, h: TcpHandle, data: &[u8]) -> Result<usize> {
        let now = self.now();
        match self
            .iface
            .tcp_send(&mut self.pool, h, data, now, &mut self.tx)
        {
            Ok(n) => Ok(n),
            Err(TcpError::WouldBlock) => Ok(0),
            Err(e) => Err(WorkerError::InlineTcp {
                what: "send",
                source: e,
            }),
        }
    }

    /// Reads what arrived into `buf`: `Some(0)` at the end of the stream, `None` when
    /// nothing is there.
    fn recv(&mut self, h: TcpHandle, buf: &mut [u8]) -> Result<Option<usize>> {
        let now = self.now();
        match self
            .iface
            .tcp_recv(&mut self.pool, h, buf, now, &mut self.tx)
        {
            Ok(n) => Ok(Some(n)),
            Err(TcpError::WouldBlock) => Ok(None),
            Err(e) => Err(WorkerError::InlineTcp {
                what: "recv",
                source: e,
            }),
        }
    }

    /// Opens the connection to ourselves: (the connecting end, the accepted end), both
    /// without Nagle when `nodelay`.
    fn pair(&mut self, nodelay: bool) -> Result<(TcpHandle, TcpHandle)> {
        let e = |what| move |source| WorkerError::InlineTcp { what, source };
        let l = self.iface.tcp_listen(APP_PORT, 4).map_err(e("listen"))?;
        let now = self.now();
        let c = self
            .iface
            .tcp_connect(
                &mut self.pool,
                SocketAddrV4::new(SERVER_IP, APP_PORT),
                now,
                &mut self.tx,
            )
            .map_err(e("connect"))?;
        let deadline = Instant::now() + CONNECT_PATIENCE;
        let a = loop {
            self.step();
            if let Some(a) = self.iface.tcp_accept(l).map_err(e("accept"))? {
                break a;
            }
            if Instant::now() > deadline {
                return Err(WorkerError::InlineTcp {
                    what: "connect",
                    source: TcpError::NotConnected,
                });
            }
        };
        self.iface
            .tcp_set_nodelay(c, nodelay)
            .map_err(e("nodelay"))?;
        self.iface
            .tcp_set_nodelay(a, nodelay)
            .map_err(e("nodelay"))?;
        Ok((c, a))
    }

    /// The stack's, TCP's and the wire's counters.
    fn report(&self) -> Value {
        let stack: serde_json::Map<String, Value> = self
            .iface
            .stats()
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into()))
            .collect();
        json!({
            "stack": stack,
            "tcp": self.iface.tcp_counters(),
            "driver": self.nic.stats(),
        })
    }
}

/// `inline` over TCP: a loopback softnic, the stack and both ends of one connection in this
/// thread — ttcp's sender and receiver ([`InlineJob::Stream`]) or rr's requester and echo.
pub fn inline_tcp(
    board: Arc<Scoreboard>,
    job: InlineJob,
    size: usize,
    checksum: bool,
    mtu: usize,
    buffers: shmnet_chan::coherence::BufferModes,
) -> Result<Value> {
    let mut st = InlineTcp::new(board.clone(), checksum, mtu, buffers)?;
    let own = match job {
        InlineJob::RequestResponse { outstanding } => {
            inline_rr(&board, &mut st, size, outstanding)?
        }
        _ => inline_stream(&board, &mut st, size)?,
    };
    let mut out = st.report();
    if let (Some(out), Value::Object(own)) = (out.as_object_mut(), own) {
        out.extend(own);
    }
    Ok(out)
}

/// Waits for quit, stepping the stack now and then (what is in flight still settles).
fn idle_until_quit(board: &Scoreboard, st: &mut InlineTcp) {
    while !board.quitting() {
        if st.step() == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

fn inline_stream(board: &Scoreboard, st: &mut InlineTcp, size: usize) -> Result<Value> {
    let (c, a) = st.pair(false)?;
    board.add_ready();
    let mut msg = vec![0x5au8; size];
    let mut buf = vec![0u8; READ_BUF];
    let mut count = Count::new(size);
    let (mut sent, mut seen, mut at) = (0u64, 0u64, 0usize);
    let (mut finished, mut eof) = (false, false);
    let mut rounds = 0u64;
    loop {
        let mut work = 0;
        // The sender: whole messages, each started only when the board allows one.
        while !finished {
            if at == 0 {
                match board.permit(sent, &mut seen) {
                    Permit::Go => stamp(&mut msg, sent),
                    Permit::Wait => break,
                    Permit::Done => {
                        finished = true;
                        board.set_sent(sent);
                        board.set_sender_finished();
                        break;
                    }
                }
            }
            let n = st.send(c, &msg[at..])?;
            if n == 0 {
                break;
            }
            work += n;
            at += n;
            if at == size {
                at = 0;
                sent += 1;
                board.set_sent(sent);
            }
        }
        // The receiver: one copy of every byte into its buffer.
        while !eof {
            match st.recv(a, &mut buf)? {
                Some(0) => eof = true,
                Some(n) => {
                    work += n;
                    count.add(board, n);
                }
                None => break,
            }
        }
        work += st.step();
        rounds += 1;
        if (work == 0 || rounds % 1024 == 0) && board.quitting() {
            break;
        }
        if work == 0 && !board.go() {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    idle_until_quit(board, st);
    let mut out = count.report();
    out["sent"] = sent.into();
    out["sent_bytes"] = (sent * size as u64).into();
    Ok(out)
}

fn inline_rr(
    board: &Scoreboard,
    st: &mut InlineTcp,
    size: usize,
    outstanding: u32,
) -> Result<Value> {
    let (c, a) = st.pair(true)?;
    board.add_ready();
    wait_for_go(board);
    let mut r = Requester::new(board, size, outstanding);
    let mut framer = Framer::new(size.max(8));
    let mut buf = vec![0u8; READ_BUF];
    let mut reply = vec![0u8; READ_BUF];
    // Bytes each end has yet to send: the requester's requests, the echo's answers.
    let (mut to_echo, mut to_requester) = (Vec::new(), Vec::<u8>::new());
    let mut finished = false;
    let mut rounds = 0u64;
    let mut echoed = 0u64;
    loop {
        let mut work = 0;
        while let Some(req) = r.request() {
            to_echo.extend_from_slice(req);
        }
        if !to_echo.is_empty() {
            let n = st.send(c, &to_echo)?;
            to_echo.drain(..n);
            work += n;
        }
        // The echo: every byte back.
        while let Some(n) = st.recv(a, &mut buf)?.filter(|&n| n > 0) {
            to_requester.extend_from_slice(&buf[..n]);
            work += n;
        }
        if !to_requester.is_empty() {
            let n = st.send(a, &to_requester)?;
            to_requester.drain(..n);
            echoed += n as u64;
            work += n;
        }
        // The requester: replies cut from its stream.
        while let Some(n) = st.recv(c, &mut buf)?.filter(|&n| n > 0) {
            framer.push(&buf[..n]);
            work += n;
        }
        while let Some(n) = framer.next(&mut reply) {
            r.reply(&reply[..n]);
        }
        work += st.step();
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
    let mut out = r.report();
    out["echoed_bytes"] = echoed.into();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::Framer;

    #[test]
    fn a_framer_cuts_a_stream_into_replies_however_it_arrives() {
        let mut f = Framer::new(4);
        let mut out = [0u8; 8];
        f.push(&[1, 2, 3]);
        assert_eq!(f.next(&mut out), None);
        f.push(&[4, 5, 6, 7, 8, 9]);
        assert_eq!(f.next(&mut out), Some(4));
        assert_eq!(out[..4], [1, 2, 3, 4]);
        assert_eq!(f.next(&mut out), Some(4));
        assert_eq!(out[..4], [5, 6, 7, 8]);
        assert_eq!(f.next(&mut out), None);
        f.push(&[10, 11, 12]);
        assert_eq!(f.next(&mut out), Some(4));
        assert_eq!(out[..4], [9, 10, 11, 12]);
    }
}
