//! The `server` structure: the protocol server in its own process, its driver as a thread
//! beside it, and applications as separate processes — seed 002's protocol server with a
//! shared-memory device interface.
//!
//! ```text
//! driver thread ──IN_IPV4/IN_ARP──► server loop ──RX (per app)──► application process
//!               ◄──────OUT────────             ◄──REQ, RET──────
//!        \____ data window: packet buffers, mapped by everyone ____/
//! ```
//!
//! The server loop is one thread. It sleeps only when every queue it consumes is empty and
//! no control socket has anything to say, waiting on all their eventfds and sockets at once
//! (the rings' multi-wait), so a busy server makes no system calls and an idle one burns no
//! CPU.
//!
//! An application's window and every buffer it was handed are the server's to take back: the
//! server records each chain it delivers until the application returns it, and when the
//! application's control socket hangs up (it exited, or was killed) the server frees those
//! chains, closes its sockets and drops its window. A return of a chain the application was
//! never given is refused and counted.

use crate::control::{self, ControlError, PROTOCOL_VERSION, Request, Response};
use crate::driver::{Driver, Family};
use crate::driver_host::{DriverEnds, drive, drive_ipc};
pub use crate::driver_host::{DriverThreadStats, run_driver_process, rusage_cpu_s};
use crate::inline::ServeConfig;
use crate::pool::ChanPool;
use crate::windows::{self, IN_ARP, IN_IPV4, OUT, REQ, RET, RX, SEND_HEADER};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::{AsFd, OwnedFd};
use shmnet_chan::handoff::send_window;
use shmnet_chan::{Consumer, Desc, DriverPools, NO_BUF, PageSize, Producer, Window};
use shmnet_stack::{BufIdx, BufferPool, Config, EthernetAddress, Interface, SocketHandle};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `ipc`: frames the server holds for a driver socket that is full, at most.
const IPC_TX_PENDING: usize = 1024;

/// Options of the server structure.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Address, pools, checksums, queue limits (its `apps` are ignored: applications attach).
    pub serve: ServeConfig,
    /// Where the control socket listens.
    pub socket: PathBuf,
    /// How the data window is paged.
    pub page: PageSize,
    /// The `ipc` structure: frames between driver and server, and datagrams between server
    /// and applications, cross as copied messages over Unix sockets instead of shared queues.
    pub ipc: bool,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The data window could not be made.
    #[error("creating the data window: {0}")]
    Window(#[from] shmnet_chan::window::CreateError),
    /// The control socket could not be made.
    #[error("control socket: {0}")]
    Control(#[from] ControlError),
}

/// Counters of one attached application, as the server sees it.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AppCounters {
    /// Messages delivered to its receive queue.
    pub delivered: u64,
    /// Chains it gave back.
    pub returned: u64,
    /// Returns refused (a chain it was not holding).
    pub bad_returns: u64,
    /// Datagrams it sent.
    pub sent: u64,
    /// Sends refused (bad header, unbound socket, stack error).
    pub bad_sends: u64,
}

struct AppConn {
    ctl: OwnedFd,
    attached: Option<Attached>,
    /// An application of the `ipc` structure: its sockets (socket number → stack socket).
    ipc: Option<Vec<Option<SocketHandle>>>,
    dead: bool,
    counters: AppCounters,
}

impl AppConn {
    /// Its sockets (socket number → stack socket), once it has said Hello.
    fn sockets_mut(&mut self) -> Option<&mut Vec<Option<SocketHandle>>> {
        match (&mut self.attached, &mut self.ipc) {
            (Some(a), _) => Some(&mut a.sockets),
            (None, ipc) => ipc.as_mut(),
        }
    }

    fn sockets(&self) -> Option<&Vec<Option<SocketHandle>>> {
        self.attached
            .as_ref()
            .map(|a| &a.sockets)
            .or(self.ipc.as_ref())
    }
}

struct Attached {
    win: Window,
    req: Consumer,
    rx: Producer,
    ret: Consumer,
    send_bufs: DriverPools,
    /// Socket number → stack socket.
    sockets: Vec<Option<SocketHandle>>,
    /// Heads of chains delivered and not yet returned.
    outstanding: HashSet<u32>,
}

/// The server loop's state.
pub struct Server {
    data: Window,
    pool: ChanPool,
    in_ipv4: Consumer,
    in_arp: Consumer,
    out: Producer,
    iface: Interface,
    listener: OwnedFd,
    socket_path: PathBuf,
    apps: Vec<AppConn>,
    driver: DriverHost,
    driver_stats: Arc<Mutex<DriverThreadStats>>,
    tx: Vec<BufIdx>,
    scratch: Vec<u8>,
    out_full: u64,
    /// The `ipc` structure: the server's end of the driver's socket.
    ipc_driver: Option<OwnedFd>,
    /// `ipc`: frames or datagrams that could not be sent because a socket was full.
    ipc_drops: u64,
    epoch: Instant,
}

impl Server {
    /// Creates the data window and the control socket, and starts `driver` on a thread of
    /// this process (`--driver-thread`).
    pub fn start<D: Driver + 'static>(
        driver: D,
        opts: &ServerOptions,
    ) -> Result<Self, ServerError> {
        let mac = driver.mac();
        let mut s = Self::create(mac, opts)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, stats) = (stop.clone(), s.driver_stats.clone());
        let handle = if opts.ipc {
            let (ours, theirs) = rustix::net::socketpair(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::SEQPACKET,
                rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
                None,
            )
            .map_err(|e| ControlError::Io(e.into()))?;
            s.ipc_driver = Some(ours);
            let pools = s.data.driver_pools().expect("fresh window");
            std::thread::Builder::new()
                .name("shmnet-driver".into())
                .spawn(move || drive_ipc(driver, pools, theirs, &stop2, &stats))
        } else {
            let ends = DriverEnds::take(&s.data);
            std::thread::Builder::new()
                .name("shmnet-driver".into())
                .spawn(move || drive(driver, ends, &stop2, &stats))
        }
        .expect("spawn the driver thread");
        s.driver = DriverHost::Thread {
            handle: Some(handle),
            stop,
        };
        Ok(s)
    }

    /// Creates the data window and the control socket, starts the driver process with
    /// `spawn` (given the control socket's path; the process must call
    /// [`run_driver_process`]), and waits up to `patience` for it to attach. `mac` is the
    /// device's address, which the stack answers for.
    pub fn start_with_driver_process(
        mac: [u8; 6],
        opts: &ServerOptions,
        spawn: impl FnOnce(&std::path::Path) -> std::io::Result<std::process::Child>,
        patience: Duration,
    ) -> Result<Self, ServerError> {
        let mut s = Self::create(mac, opts)?;
        let mut child = spawn(&s.socket_path).map_err(ControlError::Io)?;
        let deadline = Instant::now() + patience;
        let ctl = loop {
            if let Some(fd) = control::accept(&s.listener)? {
                match wait_message::<Request>(&fd, deadline) {
                    Ok(Request::DriverHello { version }) if version == PROTOCOL_VERSION => {
                        break fd;
                    }
                    // Not the driver (an application too early): turn it away.
                    _ => {
                        let _ = control::send(
                            &fd,
                            &Response::Error("the server is starting: try again".into()),
                        );
                        continue;
                    }
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(ControlError::Malformed(format!(
                    "the driver process exited ({status}) before attaching"
                ))
                .into());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(ControlError::Malformed(
                    "the driver process did not attach in time".into(),
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        control::send(
            &ctl,
            &Response::Welcome {
                version: PROTOCOL_VERSION,
                data_window: s.data.size(),
                app_window: 0,
                ipc: false,
            },
        )?;
        send_window(&ctl, &s.data).map_err(ControlError::Io)?;
        s.driver = DriverHost::Process {
            ctl,
            child: Some(child),
            started: false,
            gone: false,
        };
        Ok(s)
    }

    fn create(mac: [u8; 6], opts: &ServerOptions) -> Result<Self, ServerError> {
        let data = Window::create(&windows::data_window_spec(opts.serve.pools, opts.page))?;
        let listener = control::listen(&opts.socket)?;
        let mut cfg = Config::new(EthernetAddress(mac), opts.serve.ip, opts.serve.prefix);
        cfg.udp_rx_checksum = opts.serve.checksum;
        cfg.udp_tx_checksum = opts.serve.checksum;
        cfg.rx_queue_limit = opts.serve.rx_queue_limit;
        cfg.loopback = opts.serve.loopback;
        Ok(Self {
            pool: ChanPool::new(data.server_pools().expect("fresh window")),
            in_ipv4: data.consumer(IN_IPV4).expect("fresh window"),
            in_arp: data.consumer(IN_ARP).expect("fresh window"),
            out: data.producer(OUT).expect("fresh window"),
            data,
            iface: Interface::new(cfg),
            listener,
            socket_path: opts.socket.clone(),
            apps: Vec::new(),
            driver: DriverHost::None,
            driver_stats: Arc::new(Mutex::new(DriverThreadStats::default())),
            tx: Vec::new(),
            scratch: vec![0u8; 65_536],
            out_full: 0,
            ipc_driver: None,
            ipc_drops: 0,
            epoch: Instant::now(),
        })
    }

    /// The driver process's pid, if the driver runs as a process that is still there.
    pub fn driver_pid(&self) -> Option<u32> {
        match &self.driver {
            DriverHost::Process { child: Some(c), .. } => Some(c.id()),
            _ => None,
        }
    }

    /// Tells a driver process to start moving frames (a driver thread always runs).
    pub fn start_driver(&mut self) {
        if let DriverHost::Process { ctl, started, .. } = &mut self.driver {
            if !*started {
                *started = control::send(&*ctl, &Response::Start).is_ok();
            }
        }
    }

    /// Reads a driver process's messages; notices its death.
    fn watch_driver(&mut self) {
        let DriverHost::Process {
            ctl, child, gone, ..
        } = &mut self.driver
        else {
            return;
        };
        if *gone {
            return;
        }
        loop {
            match control::recv::<Request>(&*ctl) {
                Ok(Some(Request::DriverStats(st))) => {
                    if let Ok(mut s) = self.driver_stats.lock() {
                        *s = st;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    *gone = true;
                    if let Some(mut c) = child.take() {
                        let _ = c.wait();
                    }
                    // What the driver had queued for us is still good. What it held (frames
                    // between device and queue, frames taken off OUT) is lost with it: the
                    // pools show the shortfall. The OUT queue restarts empty.
                    self.out.resync();
                    break;
                }
            }
        }
    }

    fn now(&self) -> shmnet_stack::Instant {
        shmnet_stack::Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Whether the driver has stopped (its thread ended, or its process went away).
    pub fn driver_stopped(&self) -> bool {
        match &self.driver {
            DriverHost::None => true,
            DriverHost::Thread { handle, .. } => handle.as_ref().is_none_or(|t| t.is_finished()),
            DriverHost::Process { gone, .. } => *gone,
        }
    }

    /// Applications attached now.
    pub fn apps_attached(&self) -> usize {
        self.apps
            .iter()
            .filter(|a| a.attached.is_some() || a.ipc.is_some())
            .count()
    }

    /// Sockets bound by attached applications.
    pub fn sockets_bound(&self) -> usize {
        self.apps
            .iter()
            .map(|a| a.sockets().map_or(0, |s| s.iter().flatten().count()))
            .sum()
    }

    /// The data window.
    pub fn data_window(&self) -> &Window {
        &self.data
    }

    /// One round of the loop. Returns how much work it found (0: idle).
    pub fn step(&mut self) -> usize {
        self.watch_driver();
        let now = self.now();
        let mut work = 0;
        let mut batch = [Desc::default(); 32];
        for family in [Family::Ipv4, Family::Arp] {
            let ring = match family {
                Family::Ipv4 => &mut self.in_ipv4,
                Family::Arp => &mut self.in_arp,
            };
            let n = ring.dequeue_burst(&mut batch);
            work += n;
            for d in &batch[..n] {
                self.iface
                    .receive(&mut self.pool, BufIdx(d.buf), now, &mut self.tx);
            }
        }
        work += self.receive_ipc_frames(now);
        work += self.accept();
        for i in 0..self.apps.len() {
            work += self.serve_app(i, now);
        }
        self.reap();
        self.iface.poll(&mut self.pool, now, &mut self.tx);
        work += self.flush_tx();
        self.pool.pools().drain_deferred(64);
        work
    }

    /// `ipc`: frames from the driver's socket, each received straight into a pool buffer.
    fn receive_ipc_frames(&mut self, now: shmnet_stack::Instant) -> usize {
        let Some(sock) = &self.ipc_driver else {
            return 0;
        };
        let mut n = 0;
        while n < 32 {
            let Some(b) = self.pool.alloc() else {
                // No buffer: take the frame off the socket anyway and drop it.
                match control::recv_raw(sock, &mut self.scratch) {
                    Ok(Some(_)) => {
                        self.ipc_drops += 1;
                        n += 1;
                        continue;
                    }
                    _ => break,
                }
            };
            let got = control::recv_raw(sock, self.pool.data_mut(b));
            match got {
                Ok(Some(len)) if len <= self.pool.capacity() => {
                    self.pool.set_off(b, 0);
                    self.pool.set_len(b, len as u16);
                    self.iface.receive(&mut self.pool, b, now, &mut self.tx);
                    n += 1;
                }
                _ => {
                    self.pool.free(b);
                    break;
                }
            }
        }
        n
    }

    fn flush_tx(&mut self) -> usize {
        if self.tx.is_empty() {
            return 0;
        }
        if let Some(sock) = &self.ipc_driver {
            // Frames the driver's socket cannot take now wait here, in order (as the ipc
            // driver keeps what the server's socket cannot take), up to a bound.
            let mut done = 0;
            for &b in &self.tx {
                let bytes = shmnet_stack::buf::valid(&self.pool, b);
                match control::send_raw(sock, &[bytes]) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(_) => self.ipc_drops += 1,
                }
                self.pool.free(b);
                done += 1;
            }
            self.tx.drain(..done);
            let excess = self.tx.len().saturating_sub(IPC_TX_PENDING);
            for b in self.tx.drain(..excess) {
                self.pool.free(b);
                self.ipc_drops += 1;
            }
            return done;
        }
        let descs: Vec<Desc> = self
            .tx
            .iter()
            .map(|b| Desc::new(b.0, u32::from(self.pool.len(*b))))
            .collect();
        let placed = self.out.enqueue_burst(&descs);
        for d in &descs[placed..] {
            self.out_full += 1;
            self.pool.free(BufIdx(d.buf));
        }
        let n = self.tx.len();
        self.tx.clear();
        n
    }

    fn accept(&mut self) -> usize {
        let mut n = 0;
        while let Ok(Some(ctl)) = control::accept(&self.listener) {
            self.apps.push(AppConn {
                ctl,
                attached: None,
                ipc: None,
                dead: false,
                counters: AppCounters::default(),
            });
            n += 1;
        }
        n
    }

    fn serve_app(&mut self, i: usize, now: shmnet_stack::Instant) -> usize {
        let mut work = 0;
        // Control requests (and, in the ipc structure, datagrams to send).
        loop {
            let n = match control::recv_raw(&self.apps[i].ctl, &mut self.scratch) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(_) => {
                    // Gone — but what it queued before it went (sends, returns) still
                    // counts: serve its rings once more below, then reap it.
                    self.apps[i].dead = true;
                    break;
                }
            };
            work += 1;
            if self.scratch.first() == Some(&control::TAG_SEND) {
                self.ipc_send(i, n, now);
                continue;
            }
            let resp = match serde_json::from_slice::<Request>(&self.scratch[..n]) {
                Ok(req) => self.handle_request(i, req),
                Err(e) => Some(Response::Error(format!("malformed request: {e}"))),
            };
            if let Some(r) = resp {
                if control::send(&self.apps[i].ctl, &r).is_err() {
                    self.apps[i].dead = true;
                    break;
                }
            }
        }
        if self.apps[i].ipc.is_some() {
            if self.apps[i].dead {
                return work;
            }
            return work + self.ipc_deliver(i);
        }
        let AppConn {
            attached,
            counters: c,
            dead,
            ..
        } = &mut self.apps[i];
        let Some(a) = attached.as_mut() else {
            return work;
        };
        // Returns.
        let mut batch = [Desc::default(); 32];
        loop {
            let n = a.ret.dequeue_burst(&mut batch);
            if n == 0 {
                break;
            }
            work += n;
            for d in &batch[..n] {
                if a.outstanding.remove(&d.buf) {
                    c.returned += 1;
                    self.pool.free_chain(BufIdx(d.buf));
                } else {
                    c.bad_returns += 1;
                }
            }
        }
        // Sends.
        loop {
            let n = a.req.dequeue_burst(&mut batch);
            if n == 0 {
                break;
            }
            work += n;
            for d in &batch[..n] {
                let sent = read_send(&a.win, d, &mut self.scratch).and_then(|(dst, len)| {
                    let h = a.sockets.get(d.aux as usize).copied().flatten()?;
                    self.iface
                        .udp_send_to(
                            &mut self.pool,
                            h,
                            &self.scratch[..len],
                            dst,
                            now,
                            &mut self.tx,
                        )
                        .ok()
                });
                match sent {
                    Some(()) => c.sent += 1,
                    None => c.bad_sends += 1,
                }
                a.send_bufs.release(d.buf);
            }
        }
        if *dead {
            return work;
        }
        // Deliveries: as many queued messages as the application's receive queue takes.
        let mut room = a.rx.free_slots();
        for (sock, h) in a.sockets.iter().enumerate() {
            let Some(h) = *h else { continue };
            while room > 0 {
                let Ok(Some(msg)) = self.iface.udp_recv_chain(h) else {
                    break;
                };
                let d = windows::rx_desc(msg.head.0, msg.len as u32, sock as u16, msg.src);
                if a.rx.enqueue(d).is_err() {
                    // Cannot happen (we counted the room); never leak the chain if it does.
                    self.pool.free_chain(msg.head);
                    break;
                }
                a.outstanding.insert(msg.head.0);
                c.delivered += 1;
                room -= 1;
                work += 1;
            }
        }
        work
    }

    /// `ipc`: a datagram the application sent in a packet (`n` bytes in the scratch buffer).
    fn ipc_send(&mut self, i: usize, n: usize, now: shmnet_stack::Instant) {
        let app = &mut self.apps[i];
        let ok = control::parse_ipc_header(&self.scratch[..n]).and_then(|(_, sock, dst)| {
            let h = app
                .ipc
                .as_ref()?
                .get(usize::from(sock))
                .copied()
                .flatten()?;
            self.iface
                .udp_send_to(
                    &mut self.pool,
                    h,
                    &self.scratch[control::IPC_HEADER..n],
                    dst,
                    now,
                    &mut self.tx,
                )
                .ok()
        });
        match ok {
            Some(()) => app.counters.sent += 1,
            None => app.counters.bad_sends += 1,
        }
    }

    /// `ipc`: copies each queued message into a packet and sends it; a message the socket
    /// cannot take now stays queued (peeked, not taken).
    fn ipc_deliver(&mut self, i: usize) -> usize {
        let mut work = 0;
        let app = &mut self.apps[i];
        let Some(sockets) = &app.ipc else { return 0 };
        for (sock, h) in sockets.iter().enumerate() {
            let Some(h) = *h else { continue };
            while let Ok(Some(msg)) = self.iface.udp_peek(h) {
                let len = copy_chain(&self.pool, &msg, &mut self.scratch);
                let hdr = control::ipc_header(control::TAG_DELIVER, sock as u16, msg.src);
                match control::send_raw(&app.ctl, &[&hdr, &self.scratch[..len]]) {
                    Ok(true) => {
                        if let Ok(Some(m)) = self.iface.udp_recv_chain(h) {
                            self.pool.free_chain(m.head);
                        }
                        app.counters.delivered += 1;
                        work += 1;
                    }
                    Ok(false) => break,
                    Err(_) => {
                        app.dead = true;
                        return work;
                    }
                }
            }
        }
        work
    }

    fn handle_request(&mut self, i: usize, req: Request) -> Option<Response> {
        match req {
            Request::Hello { version } => {
                if version != PROTOCOL_VERSION {
                    return Some(Response::Error(format!(
                        "protocol version {version} is not {PROTOCOL_VERSION}: run the same shmnet version on both sides"
                    )));
                }
                if self.apps[i].attached.is_some() || self.apps[i].ipc.is_some() {
                    return Some(Response::Error("already attached".into()));
                }
                if self.ipc_driver.is_some() {
                    self.apps[i].ipc = Some(Vec::new());
                    return Some(Response::Welcome {
                        version: PROTOCOL_VERSION,
                        data_window: 0,
                        app_window: 0,
                        ipc: true,
                    });
                }
                match self.attach(i) {
                    Ok(()) => None,
                    Err(e) => Some(Response::Error(e)),
                }
            }
            Request::Bind { port } => {
                let Some(sockets) = self.apps[i].sockets_mut() else {
                    return Some(Response::Error("say Hello first".into()));
                };
                match self.iface.udp_bind_port(port) {
                    Ok(h) => {
                        sockets.push(Some(h));
                        Some(Response::Bound {
                            socket: (sockets.len() - 1) as u32,
                            port: self.iface.udp_local_addr(h).map_or(port, |a| a.port()),
                        })
                    }
                    Err(e) => Some(Response::Error(format!("cannot bind UDP port {port}: {e}"))),
                }
            }
            Request::Close { socket } => {
                let Some(sockets) = self.apps[i].sockets_mut() else {
                    return Some(Response::Error("say Hello first".into()));
                };
                match sockets.get_mut(socket as usize).and_then(Option::take) {
                    Some(h) => {
                        let _ = self.iface.udp_close(&mut self.pool, h);
                        Some(Response::Closed { socket })
                    }
                    None => Some(Response::Error(format!("no socket {socket}"))),
                }
            }
            Request::Stats => Some(Response::Stats(self.stats_json())),
            Request::DriverHello { .. } | Request::DriverStats(_) => Some(Response::Error(
                "a driver attaches only while the server starts".into(),
            )),
        }
    }

    /// Creates the application's window, answers its Hello, and hands over both windows.
    fn attach(&mut self, i: usize) -> Result<(), String> {
        let win = Window::create(&windows::app_window_spec()).map_err(|e| e.to_string())?;
        let data_limits = self.data.buffer_limits();
        let attached = Attached {
            req: win.consumer(REQ).map_err(|e| e.to_string())?,
            rx: win.producer(RX).map_err(|e| e.to_string())?,
            ret: win
                .consumer_with_limits(RET, data_limits)
                .map_err(|e| e.to_string())?,
            send_bufs: win.driver_pools().map_err(|e| e.to_string())?,
            sockets: Vec::new(),
            outstanding: HashSet::new(),
            win,
        };
        let ctl = &self.apps[i].ctl;
        let welcome = Response::Welcome {
            version: PROTOCOL_VERSION,
            data_window: self.data.size(),
            app_window: attached.win.size(),
            ipc: false,
        };
        control::send(ctl, &welcome).map_err(|e| e.to_string())?;
        send_window(ctl, &self.data).map_err(|e| e.to_string())?;
        send_window(ctl, &attached.win).map_err(|e| e.to_string())?;
        self.apps[i].attached = Some(attached);
        Ok(())
    }

    /// Takes back everything dead applications held.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.apps.len() {
            if !self.apps[i].dead {
                i += 1;
                continue;
            }
            let app = self.apps.swap_remove(i);
            for h in app.ipc.into_iter().flatten().flatten() {
                let _ = self.iface.udp_close(&mut self.pool, h);
            }
            if let Some(a) = app.attached {
                for head in a.outstanding {
                    self.pool.free_chain(BufIdx(head));
                }
                for h in a.sockets.into_iter().flatten() {
                    let _ = self.iface.udp_close(&mut self.pool, h);
                }
            }
        }
    }

    /// Sleeps until a queue, a control socket or the timers have work, at most `at_most`.
    pub fn idle(&mut self, at_most: Duration) {
        let wait = match self.iface.poll_at() {
            Some(t) => {
                Duration::from_nanos(t.nanos().saturating_sub(self.now().nanos())).min(at_most)
            }
            None => at_most,
        };
        // Announce sleep on every ring we consume; if one already has work, do not sleep.
        let mut armed = 0;
        let mut all_armed = true;
        for c in self.consumers_mut() {
            if c.prepare_wait() {
                armed += 1;
            } else {
                all_armed = false;
                break;
            }
        }
        if all_armed {
            let mut fds: Vec<PollFd<'_>> = self
                .consumers()
                .filter_map(|c| c.wake_fd())
                .map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
                .collect();
            fds.push(PollFd::new(&self.listener, PollFlags::IN));
            if let Some(sock) = &self.ipc_driver {
                // Frames waiting for room in the driver's socket: wake when it has some.
                let out = if self.tx.is_empty() {
                    PollFlags::empty()
                } else {
                    PollFlags::OUT
                };
                fds.push(PollFd::new(sock, PollFlags::IN | out));
            }
            if let DriverHost::Process {
                ctl, gone: false, ..
            } = &self.driver
            {
                fds.push(PollFd::new(ctl, PollFlags::IN));
            }
            for a in &self.apps {
                fds.push(PollFd::new(&a.ctl, PollFlags::IN));
            }
            let ts = Timespec {
                tv_sec: wait.as_secs() as _,
                tv_nsec: wait.subsec_nanos() as _,
            };
            let _ = rustix::event::poll(&mut fds, Some(&ts));
        }
        for c in self.consumers_mut().take(armed) {
            c.finish_wait();
        }
    }

    /// Every ring the server consumes, in a fixed order.
    fn consumers_mut(&mut self) -> impl Iterator<Item = &mut Consumer> {
        [&mut self.in_ipv4, &mut self.in_arp].into_iter().chain(
            self.apps
                .iter_mut()
                .filter_map(|a| a.attached.as_mut())
                .flat_map(|a| [&mut a.req, &mut a.ret]),
        )
    }

    fn consumers(&self) -> impl Iterator<Item = &Consumer> {
        [&self.in_ipv4, &self.in_arp].into_iter().chain(
            self.apps
                .iter()
                .filter_map(|a| a.attached.as_ref())
                .flat_map(|a| [&a.req, &a.ret]),
        )
    }

    /// Every counter, as JSON (what `shmnet stats` prints).
    pub fn stats_json(&self) -> serde_json::Value {
        let stack: serde_json::Map<String, serde_json::Value> = self
            .iface
            .stats()
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into()))
            .collect();
        let driver = self
            .driver_stats
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        let apps: Vec<serde_json::Value> = self
            .apps
            .iter()
            .filter(|a| a.attached.is_some() || a.ipc.is_some())
            .map(|a| {
                serde_json::json!({
                    "attached": a.attached.is_some() || a.ipc.is_some(),
                    "sockets": a.attached.as_ref().map_or(0, |x| x.sockets.iter().flatten().count()),
                    "holding": a.attached.as_ref().map_or(0, |x| x.outstanding.len()),
                    "window_bytes": a.attached.as_ref().map_or(0, |x| x.win.size()),
                    "window": a.attached.as_ref().map(|x| x.win.stats()),
                    "counters": a.counters,
                })
            })
            .collect();
        let app_bytes: usize = self
            .apps
            .iter()
            .filter_map(|a| a.attached.as_ref())
            .map(|a| a.win.size())
            .sum();
        serde_json::json!({
            "structure": if self.ipc_driver.is_some() { "ipc" } else { "server" },
            "ipc_drops": self.ipc_drops,
            "socket": self.socket_path,
            "uptime_s": self.epoch.elapsed().as_secs_f64(),
            "memory": {
                "data_window_bytes": self.data.size(),
                "app_windows_bytes": app_bytes,
                "regions": self.data.layout().regions,
            },
            "data_window": self.data.stats(),
            "driver": driver,
            "driver_running": !self.driver_stopped(),
            "driver_placement": match self.driver {
                DriverHost::None => "none",
                DriverHost::Thread { .. } => "thread",
                DriverHost::Process { .. } => "process",
            },
            "out_queue_full": self.out_full,
            "stack": stack,
            "apps": apps,
        })
    }

    /// Stops the driver (thread: joined; process: its control socket closes and it exits)
    /// and removes the control socket.
    pub fn shutdown(&mut self) {
        match std::mem::replace(&mut self.driver, DriverHost::None) {
            DriverHost::Thread { handle, stop } => {
                stop.store(true, Ordering::Relaxed);
                if let Some(t) = handle {
                    let _ = t.join();
                }
            }
            DriverHost::Process { ctl, child, .. } => {
                drop(ctl);
                if let Some(mut c) = child {
                    let deadline = Instant::now() + Duration::from_secs(2);
                    while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            DriverHost::None => {}
        }
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Copies the bytes of `msg`'s chain into `dst` without freeing it; returns the length.
fn copy_chain(pool: &ChanPool, msg: &shmnet_stack::Message, dst: &mut [u8]) -> usize {
    let mut at = 0;
    let mut cur = Some(msg.head);
    for _ in 0..msg.bufs {
        let Some(b) = cur else { break };
        let bytes = shmnet_stack::buf::valid(pool, b);
        let take = bytes.len().min(dst.len() - at);
        dst[at..at + take].copy_from_slice(&bytes[..take]);
        at += take;
        cur = pool.next(b);
    }
    at
}

/// Reads a send request: the destination header and the payload of the chain at `d.buf` in
/// the application's window, into `out`. `None` if the chain is malformed.
fn read_send(win: &Window, d: &Desc, out: &mut [u8]) -> Option<(std::net::SocketAddrV4, usize)> {
    let bufs = win.buffers();
    let total = bufs.geometry().total();
    let len = d.len as usize;
    if len > out.len() {
        return None;
    }
    let mut hdr = [0u8; SEND_HEADER];
    let mut cur = d.buf;
    let mut copied = 0;
    let mut first = true;
    for _ in 0..total {
        if cur == NO_BUF || copied == len {
            break;
        }
        let (off, blen) = bufs.off_len(cur)?;
        let (mut off, mut blen) = (usize::from(off), usize::from(blen));
        if first {
            if blen < SEND_HEADER {
                return None;
            }
            bufs.read(cur, off, &mut hdr).ok()?;
            off += SEND_HEADER;
            blen -= SEND_HEADER;
            first = false;
        }
        let take = blen.min(len - copied);
        bufs.read(cur, off, &mut out[copied..copied + take]).ok()?;
        copied += take;
        cur = bufs.next(cur).unwrap_or(NO_BUF);
    }
    (copied == len && !first).then(|| (windows::decode_dst(&hdr), len))
}

/// Where the driver runs.
enum DriverHost {
    /// Not started (or shut down).
    None,
    /// A thread of this process.
    Thread {
        handle: Option<JoinHandle<()>>,
        stop: Arc<AtomicBool>,
    },
    /// A process of its own, attached through the control socket.
    Process {
        ctl: OwnedFd,
        child: Option<std::process::Child>,
        started: bool,
        gone: bool,
    },
}

/// Waits for one message on a non-blocking socket until `deadline`.
fn wait_message<T: serde::de::DeserializeOwned>(
    fd: &OwnedFd,
    deadline: Instant,
) -> Result<T, ControlError> {
    loop {
        if let Some(m) = control::recv(fd)? {
            return Ok(m);
        }
        if Instant::now() > deadline {
            return Err(ControlError::Malformed("no message in time".into()));
        }
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }
}

/// Reads a server's counters over its control socket (for `shmnet stats`).
pub fn query_stats(socket: &std::path::Path) -> Result<serde_json::Value, ControlError> {
    let (fd, _server) = control::connect_checked(socket)?;
    control::send(&fd, &Request::Stats)?;
    match control::recv_blocking::<Response>(fd.as_fd())? {
        Response::Stats(v) => Ok(v),
        Response::Error(e) => Err(ControlError::Malformed(e)),
        other => Err(ControlError::Malformed(format!(
            "unexpected answer {other:?}"
        ))),
    }
}
