//! The data plane: one loop over the driver's frames, the applications' rings and the
//! stack's timers.
//!
//! Invariants (the hot path is sacred):
//! - while any queue has work, a round makes no system call (the `ipc` structure aside,
//!   whose whole point is that it copies through sockets), takes no lock a peer can hold and
//!   allocates nothing — commands from the control plane are noticed through one relaxed
//!   load of a counter, not a socket;
//! - everything moves in bursts: rings are read and written [`BURST`] descriptors at a time,
//!   deliveries to an application are published once per batch (one wake-up at most);
//! - it sleeps only in [`DataPlane::idle`], after announcing sleep on every ring it consumes
//!   and re-checking them (the rings' prepare-to-sleep protocol), on one `poll` over their
//!   eventfds, the control plane's eventfd and the device's fd.

use super::control_plane::{Command, Inbox};
use super::forks::{Forks, StackSock};
use super::handles::HandleCtx;
use super::sockets::{AppSocket, Sockets};
use super::stats::{AppCounters, AppStats, DataPlaneCounters, MemoryStats, ServerStats};
use super::transport::{AppTransport, BURST, Round, TcpLent};
use crate::control::{self, Response};
use crate::driver::{Driver, RxFrame};
use crate::driver_host::DriverThreadStats;
use crate::pool::ChanPool;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::OwnedFd;
use shmnet_chan::handles::Pch;
use shmnet_chan::{Consumer, Desc, DriverPools, Producer, Window};
use shmnet_stack::{BufIdx, BufferPool, Interface};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a departing application's parked TCP sends are waited for without progress
/// (under `--isolation regions`, for the lines they missed on). Each line that arrives lets
/// some sends out and starts the wait again: a writer that parked megabytes over hundreds
/// of lines needs many. The data plane serves everyone else meanwhile: a departure is a
/// state of the application ([`Departing`]), not a wait of the loop.
const DETACH_MISS_PATIENCE: Duration = Duration::from_secs(1);

/// The longest an application may take to depart, however much progress its parked sends
/// make (an application that closed its control socket but still writes its rings would
/// otherwise never go).
pub(crate) const DETACH_LIMIT: Duration = Duration::from_secs(5);

/// `ipc`: frames the server holds for a driver socket that is full, at most.
const IPC_TX_PENDING: usize = 1024;

/// How the data plane reaches the driver. (One per server: the size of the ring variant
/// does not matter, and keeping it inline saves an indirection on every round.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum DriverLink {
    /// The loop polls the device itself: no queue, no other thread (as TAS and Snap poll
    /// their NIC queues).
    Polled(Box<Polled>),
    /// IN and OUT rings in the data window, to a driver thread or process.
    Rings {
        in_ip: Consumer,
        in_arp: Consumer,
        out: Producer,
    },
    /// `ipc`: every frame copied through a socket to a driver thread.
    Ipc(OwnedFd),
    /// `--sync faithful`: seed 002's own IN and OUT queues, to a driver thread or process.
    Faithful(crate::faithful_link::FaithfulServerEnds),
}

/// A driver polled by the data plane.
pub(crate) struct Polled {
    pub(crate) driver: Box<dyn Driver>,
    pub(crate) pools: DriverPools,
    /// The families the server takes (the driver sheds the rest).
    families: crate::driver::Families,
    frames: Vec<RxFrame>,
    out: Vec<u32>,
    /// Set when the device gave up.
    stopped: Option<String>,
}

impl Polled {
    pub(crate) fn new(
        driver: Box<dyn Driver>,
        pools: DriverPools,
        families: crate::driver::Families,
    ) -> Self {
        Self {
            driver,
            pools,
            families,
            frames: Vec::with_capacity(BURST),
            out: Vec::with_capacity(BURST),
            stopped: None,
        }
    }
}

impl Drop for Polled {
    /// The buffers the device held between calls (AF_XDP's fill ring) go back to the pools.
    fn drop(&mut self) {
        self.driver.release_held(&mut self.pools);
    }
}

/// One attached application.
struct AppSlot {
    id: u64,
    /// Its application number: the `app` of its handles.
    pch: Pch,
    pid: i32,
    uid: u32,
    transport: Box<dyn AppTransport>,
    /// Socket number → stack socket.
    sockets: Sockets,
    counters: AppCounters,
    /// Set once it hung up: its last requests are being served.
    departing: Option<Departing>,
}

/// An application that hung up. What it queued before it went still counts (as the kernel
/// sends what a process wrote before it exited): its rings are served, without deliveries,
/// round after round, until they are empty and nothing of it is parked — or parked sends
/// made no progress for [`DETACH_MISS_PATIENCE`], or [`DETACH_LIMIT`] passed. Then
/// everything it held comes back, its sockets close (those with sends left behind are
/// reset) and the control plane is answered (only then may its regions be unmapped).
struct Departing {
    since: Instant,
    /// When its requests last made progress.
    progress: Instant,
    /// Whether the last round found none of its requests to serve.
    quiet: bool,
    reply: std::sync::mpsc::SyncSender<()>,
}

/// What the data plane reports about the driver's health.
pub(crate) struct DriverWatch {
    /// Counters written by a driver thread, or by the control plane for a driver process.
    pub(crate) stats: Arc<Mutex<DriverThreadStats>>,
    /// Cleared when the driver stops (its thread ended, its process went away).
    pub(crate) alive: Arc<AtomicBool>,
    /// `polled`, `thread` or `process`.
    pub(crate) placement: &'static str,
}

/// The data plane's state.
pub(crate) struct DataPlane {
    data: Arc<Window>,
    pool: ChanPool,
    iface: Interface,
    link: DriverLink,
    apps: Vec<AppSlot>,
    tx: Vec<BufIdx>,
    out_descs: [Desc; BURST],
    scratch: Box<[u8]>,
    batch: [Desc; BURST],
    inbox: Inbox,
    epoch: Instant,
    counters: DataPlaneCounters,
    out_full: u64,
    ipc_drops: u64,
    ipc_pending_full: bool,
    pub(crate) driver: DriverWatch,
    pub(crate) socket: std::path::PathBuf,
    pub(crate) control: Arc<Mutex<super::stats::ControlCounters>>,
    handles: HandleCtx,
    /// The instrument around copies into posted buffers ([`super::Server::probe_copies`]).
    copy_probe: Option<Box<dyn super::CopyProbe>>,
    /// Pool buffers lent to applications as TCP chains, and their bound.
    tcp_lent: TcpLent,
    /// TCP sockets shared by `fork`, and the tickets of forks whose child has not come.
    forks: Forks,
    /// `shmnet capture`s running ([`super::capturing`]).
    captures: super::capturing::Captures,
}

impl DataPlane {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        data: Arc<Window>,
        iface: Interface,
        link: DriverLink,
        inbox: Inbox,
        driver: DriverWatch,
        socket: std::path::PathBuf,
        control: Arc<Mutex<super::stats::ControlCounters>>,
        handles: HandleCtx,
    ) -> Self {
        let pool = ChanPool::new(data.server_pools().expect("a fresh data window"));
        let geo = pool.buffers().geometry();
        let pool_total = geo.pools * geo.per_pool;
        Self {
            pool,
            data,
            iface,
            link,
            apps: Vec::new(),
            tx: Vec::with_capacity(4 * BURST),
            out_descs: [Desc::default(); BURST],
            scratch: vec![0u8; 65_536 + control::IPC_HEADER].into_boxed_slice(),
            batch: [Desc::default(); BURST],
            inbox,
            epoch: Instant::now(),
            counters: DataPlaneCounters::default(),
            out_full: 0,
            ipc_drops: 0,
            ipc_pending_full: false,
            driver,
            socket,
            control,
            handles,
            copy_probe: None,
            tcp_lent: TcpLent {
                bufs: 0,
                cap: pool_total / 2,
            },
            forks: Forks::default(),
            captures: Default::default(),
        }
    }

    /// The stack's clock: the coarse monotonic clock (a few milliseconds of resolution,
    /// far finer than any of the stack's timers, and several times cheaper to read than the
    /// precise one on a VM — it is read every round).
    fn now(&self) -> shmnet_stack::Instant {
        shmnet_stack::Instant::from_nanos(crate::coarse_clock::now().as_nanos() as u64)
    }

    /// One round. Returns how much work it found (0: idle).
    pub(crate) fn step(&mut self) -> usize {
        self.counters.rounds += 1;
        let mut work = 0;
        if self.inbox.pending() {
            work += self.apply_commands();
        }
        let now = self.now();
        work += self.receive_frames(now);
        let tx_room = self.tx_room();
        let mut r = Round {
            iface: &mut self.iface,
            pool: &mut self.pool,
            tx: &mut self.tx,
            now,
            scratch: &mut self.scratch,
            handles: &mut self.handles,
            copy_probe: self.copy_probe.as_deref_mut(),
            tcp_lent: &mut self.tcp_lent,
            forks: &mut self.forks,
            last_call: false,
            tx_room,
        };
        // Lines the miss thread served while we slept go in before the sends that wait for them.
        r.handles.install_served();
        let mut departing = false;
        for app in &mut self.apps {
            // A departed application reads no more completions: its last requests must not
            // wait for room in its RX.
            r.last_call = app.departing.is_some();
            let took = app
                .transport
                .take(&mut r, &mut app.sockets, &mut app.counters);
            if let Some(d) = &mut app.departing {
                departing = true;
                d.quiet = took == 0;
                if took > 0 {
                    d.progress = Instant::now();
                }
            }
            work += took;
        }
        r.last_call = false;
        r.handles.kick();
        for app in self.apps.iter_mut().filter(|a| a.departing.is_none()) {
            work += app
                .transport
                .deliver(&mut r, &mut app.sockets, &mut app.counters);
        }
        if departing {
            self.settle_departures();
        }
        if !self.forks.is_idle() {
            self.settle_forks();
        }
        self.iface.poll(&mut self.pool, now, &mut self.tx);
        work += self.transmit_frames();
        self.pool.pools().drain_deferred(64);
        if work > 0 {
            self.counters.busy_rounds += 1;
        }
        work
    }

    /// Frames from the driver into the stack.
    fn receive_frames(&mut self, now: shmnet_stack::Instant) -> usize {
        let abandoned = self.faithful_abandoned();
        match &mut self.link {
            DriverLink::Polled(p) => {
                if p.stopped.is_some() {
                    return 0;
                }
                p.frames.clear();
                let mut served = crate::driver::ServedPools {
                    pools: &mut p.pools,
                    families: p.families,
                };
                if let Err(e) = p.driver.rx_burst(&mut served, &mut p.frames, BURST) {
                    p.stopped = Some(format!("the device failed: {e}"));
                    self.driver.alive.store(false, Ordering::Relaxed);
                }
                self.captures.receive_batch(
                    &mut self.iface,
                    &mut self.pool,
                    &mut self.tx,
                    p.frames.iter().map(|f| BufIdx(f.buf)),
                    now,
                );
                self.counters.polled_rx += p.frames.len() as u64;
                p.frames.len()
            }
            DriverLink::Rings { in_ip, in_arp, .. } => {
                let mut work = 0;
                for ring in [in_ip, in_arp] {
                    let n = ring.dequeue_burst(&mut self.batch);
                    work += n;
                    self.captures.receive_batch(
                        &mut self.iface,
                        &mut self.pool,
                        &mut self.tx,
                        self.batch[..n].iter().map(|d| BufIdx(d.buf)),
                        now,
                    );
                }
                work
            }
            // A driver process that died may have died inside a sub-queue's mutex: the
            // queues are left alone from then on (each entry would spin to the give-up).
            // What it had queued is lost with it, as what it held is.
            DriverLink::Faithful(_) if abandoned => 0,
            DriverLink::Faithful(q) => {
                let mut work = 0;
                for c in [&mut q.in_ip, &mut q.in_arp] {
                    let n = c.dequeue_burst(&mut self.batch);
                    work += n;
                    self.captures.receive_batch(
                        &mut self.iface,
                        &mut self.pool,
                        &mut self.tx,
                        self.batch[..n].iter().map(|d| BufIdx(d.buf)),
                        now,
                    );
                }
                work
            }
            DriverLink::Ipc(sock) => {
                let mut n = 0;
                while n < BURST {
                    let Some(b) = self.pool.alloc() else {
                        // No buffer: take the frame off the socket anyway and drop it.
                        match control::recv_raw(&*sock, &mut self.scratch) {
                            Ok(Some(_)) => {
                                self.ipc_drops += 1;
                                n += 1;
                                continue;
                            }
                            _ => break,
                        }
                    };
                    match control::recv_raw(&*sock, self.pool.data_mut(b)) {
                        Ok(Some(len)) if len <= self.pool.capacity() => {
                            self.pool.set_off(b, 0);
                            self.pool.set_len(b, len as u16);
                            self.captures.receive_batch(
                                &mut self.iface,
                                &mut self.pool,
                                &mut self.tx,
                                std::iter::once(b),
                                now,
                            );
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
        }
    }

    /// Frames the driver takes now without dropping one: the polled device's own count, or
    /// the OUT ring's free slots (`usize::MAX`: no bound known).
    fn tx_room(&mut self) -> usize {
        match &mut self.link {
            DriverLink::Polled(p) if p.stopped.is_none() => {
                p.driver.tx_room().unwrap_or(usize::MAX)
            }
            DriverLink::Rings { out, .. } => out.free_slots() as usize,
            DriverLink::Faithful(q) => q.out.free_hint() as usize,
            _ => usize::MAX,
        }
    }

    /// Frames the stack emitted, to the driver.
    fn transmit_frames(&mut self) -> usize {
        if self.tx.is_empty() {
            return 0;
        }
        self.captures.tap_tx(&self.pool, &self.tx);
        let n = self.tx.len();
        let abandoned = self.faithful_abandoned();
        let mut busy = false;
        match &mut self.link {
            DriverLink::Polled(p) => {
                for chunk in self.tx.chunks(BURST) {
                    p.out.clear();
                    p.out.extend(chunk.iter().map(|b| b.0));
                    if p.stopped.is_some() {
                        for &b in &p.out {
                            p.pools.release(b);
                        }
                        self.out_full += p.out.len() as u64;
                    } else {
                        // Errors are counted by the driver (`tx_errors`); every buffer is
                        // released either way.
                        let _ = p.driver.tx_burst(&mut p.pools, &p.out);
                    }
                }
                self.tx.clear();
            }
            DriverLink::Rings { out, .. } => {
                for chunk in self.tx.chunks(BURST) {
                    let descs = &mut self.out_descs[..chunk.len()];
                    for (d, b) in descs.iter_mut().zip(chunk) {
                        *d = Desc::new(b.0, u32::from(self.pool.len(*b)));
                    }
                    let placed = out.enqueue_burst(descs);
                    for d in &descs[placed..] {
                        self.out_full += 1;
                        self.pool.free(BufIdx(d.buf));
                    }
                }
                self.tx.clear();
            }
            DriverLink::Faithful(_) if abandoned => {
                self.out_full += self.tx.len() as u64;
                for b in self.tx.drain(..) {
                    self.pool.free(b);
                }
            }
            DriverLink::Faithful(q) => {
                for chunk in self.tx.chunks(BURST) {
                    let descs = &mut self.out_descs[..chunk.len()];
                    for (d, b) in descs.iter_mut().zip(chunk) {
                        *d = Desc::new(b.0, u32::from(self.pool.len(*b)));
                    }
                    // The server is OUT's spinning side: it is refused only after a holder
                    // kept the lock past the spin limit (a driver stopped inside it). Then
                    // the rest of the round is dropped rather than spun on chunk by chunk.
                    let placed = match (busy, q.out.enqueue_burst(descs)) {
                        (true, _) => 0,
                        (false, shmnet_chan::faithful::Pushed::Took(k)) => k,
                        (false, shmnet_chan::faithful::Pushed::Busy) => {
                            busy = true;
                            0
                        }
                    };
                    for d in &descs[placed..] {
                        self.out_full += 1;
                        self.pool.free(BufIdx(d.buf));
                    }
                }
                self.tx.clear();
            }
            DriverLink::Ipc(sock) => {
                // Frames the driver's socket cannot take now wait here, in order, up to a
                // bound.
                let mut done = 0;
                for &b in &self.tx {
                    let bytes = shmnet_stack::buf::valid(&self.pool, b);
                    match control::send_raw(&*sock, &[bytes]) {
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
                self.ipc_pending_full = !self.tx.is_empty();
                return done;
            }
        }
        n
    }

    /// Applies what the control plane asked for.
    fn apply_commands(&mut self) -> usize {
        let mut n = 0;
        while let Some(cmd) = self.inbox.take() {
            n += 1;
            self.counters.commands += 1;
            match cmd {
                Command::Attach {
                    id,
                    pch,
                    pid,
                    uid,
                    transport,
                } => self.apps.push(AppSlot {
                    id,
                    pch,
                    pid,
                    uid,
                    transport,
                    sockets: Sockets::new(id),
                    counters: AppCounters::default(),
                    departing: None,
                }),
                Command::Bind { id, port, reply } => {
                    let resp = self.bind(id, port);
                    let _ = reply.send(resp);
                }
                Command::Multicast {
                    id,
                    socket,
                    op,
                    reply,
                } => {
                    let resp = self.multicast(id, socket, op);
                    let _ = reply.send(resp);
                }
                Command::TcpListen {
                    id,
                    port,
                    backlog,
                    reply,
                } => {
                    let resp = self.tcp_listen(id, port, backlog);
                    let _ = reply.send(resp);
                }
                Command::TcpConnect { id, to, reply } => {
                    let resp = self.tcp_connect(id, to);
                    let _ = reply.send(resp);
                }
                Command::Close { id, socket, reply } => {
                    let resp = self.close(id, socket);
                    let _ = reply.send(resp);
                }
                Command::Fork { id, sockets, reply } => {
                    let resp = self.fork(id, &sockets);
                    let _ = reply.send(resp);
                }
                Command::Unread { id, parts, reply } => {
                    let resp = self.unread(id, parts);
                    let _ = reply.send(resp);
                }
                Command::HoldTicket { ticket, uid } => self.forks.hold(ticket, uid),
                Command::DropTicket { ticket } => {
                    let gone = self.forks.drop_ticket(ticket);
                    self.release_orphans(gone);
                    self.settle_forks();
                }
                Command::Adopt { id, ticket, reply } => {
                    let resp = self.adopt(id, ticket);
                    let _ = reply.send(resp);
                }
                Command::Detach { id, reply } => self.begin_detach(id, reply),
                Command::ForgetLines { pch, reply } => {
                    self.handles.forget_lines(pch);
                    let _ = reply.send(());
                }
                Command::Stats { reply } => {
                    let _ = reply.send(Box::new(self.stats()));
                }
                Command::Capture {
                    id,
                    spec,
                    ring,
                    reply,
                } => {
                    let _ = reply.send(self.captures.start(id, spec, *ring));
                }
                Command::StopCapture { id } => self.captures.stop(id),
                Command::SetPid { id, pid } => {
                    if let Some(a) = self.app_mut(id) {
                        a.pid = pid;
                    }
                }
                Command::Sockets { from, reply } => {
                    let apps: Vec<super::listing::AppView<'_>> = self
                        .apps
                        .iter()
                        .map(|a| super::listing::AppView {
                            pid: a.pid,
                            uid: a.uid,
                            sockets: &a.sockets,
                        })
                        .collect();
                    let page = super::listing::page(&self.iface, &apps, from);
                    let _ = reply.send(Box::new(page));
                }
                Command::DriverGone => {
                    self.driver.alive.store(false, Ordering::Relaxed);
                    if let DriverLink::Rings { out, .. } = &mut self.link {
                        // What the driver had queued for us is still good. What it held
                        // (frames between device and queue, frames taken off OUT) is lost
                        // with it: the pools show the shortfall. OUT restarts empty.
                        out.resync();
                    }
                }
            }
        }
        n
    }

    fn app_mut(&mut self, id: u64) -> Option<&mut AppSlot> {
        self.apps.iter_mut().find(|a| a.id == id)
    }

    fn bind(&mut self, id: u64, port: u16) -> Response {
        let Some(app) = self.apps.iter_mut().find(|a| a.id == id) else {
            return Response::Error("say Hello first".into());
        };
        match self.iface.udp_bind_port(port) {
            // Its ICMP errors reach the application (a connected socket's `ECONNREFUSED`).
            Ok(h) => match app.sockets.insert(AppSocket::Udp(h)).inspect(|_| {
                let _ = self.iface.udp_keep_errors(h);
            }) {
                Some(socket) => Response::Bound {
                    socket: u32::from(socket),
                    // Port 0 asked for any free port: say which one it got.
                    port: self.iface.udp_local_addr(h).map_or(port, |a| a.port()),
                },
                None => {
                    let _ = self.iface.udp_close(&mut self.pool, h);
                    Response::Error("65,536 sockets are open: close some first".into())
                }
            },
            Err(e) => Response::Error(format!("cannot bind UDP port {port}: {e}")),
        }
    }

    fn tcp_listen(&mut self, id: u64, port: u16, backlog: u32) -> Response {
        let Some(app) = self.apps.iter_mut().find(|a| a.id == id) else {
            return Response::Error("say Hello first".into());
        };
        let backlog = backlog.clamp(1, 65_535);
        match self.iface.tcp_listen(port, backlog) {
            Ok(l) => match app.sockets.insert(AppSocket::Listener {
                l,
                owed: None,
                backlog: backlog as u16,
                unclaimed: 0,
                dormant: false,
            }) {
                Some(socket) => Response::TcpSocket {
                    socket: u32::from(socket),
                    port: self.iface.tcp_listen_port(l).unwrap_or(port),
                },
                None => {
                    let now = self.now();
                    let _ = self
                        .iface
                        .tcp_unlisten(&mut self.pool, l, now, &mut self.tx);
                    Response::Error("65,536 sockets are open: close some first".into())
                }
            },
            Err(e) => Response::Error(format!("cannot listen on TCP port {port}: {e}")),
        }
    }

    fn tcp_connect(&mut self, id: u64, to: std::net::SocketAddrV4) -> Response {
        let now = self.now();
        let Some(app) = self.apps.iter_mut().find(|a| a.id == id) else {
            return Response::Error("say Hello first".into());
        };
        match self
            .iface
            .tcp_connect(&mut self.pool, to, now, &mut self.tx)
        {
            Ok(h) => {
                let port = self.iface.tcp_info(h).map_or(0, |i| i.local.port());
                match app.sockets.insert_tcp(h, false) {
                    Some(socket) => Response::TcpSocket {
                        socket: u32::from(socket),
                        port,
                    },
                    None => {
                        let _ = self.iface.tcp_abort(&mut self.pool, h, now, &mut self.tx);
                        Response::Error("65,536 sockets are open: close some first".into())
                    }
                }
            }
            Err(e) => Response::Error(format!("cannot connect to {to}: {e}")),
        }
    }

    /// Application `id` is about to fork: a ticket for the TCP sockets numbered `sockets`
    /// ([`super::forks`]).
    fn fork(&mut self, id: u64, sockets: &[u32]) -> Response {
        let now = Instant::now();
        let Some(app) = self.apps.iter_mut().find(|a| a.id == id) else {
            return Response::Error("say Hello first".into());
        };
        let held = app.sockets.fork_share(sockets);
        let ticket = self.forks.fork(app.uid, held, now);
        self.settle_forks();
        Response::Forked { ticket }
    }

    /// Application `id` gives bytes back to its connections (`Request::Unread`).
    fn unread(&mut self, id: u64, parts: Vec<(u32, Vec<u8>)>) -> Response {
        let Some(app) = self.apps.iter().find(|a| a.id == id) else {
            return Response::Error("say Hello first".into());
        };
        let mut refused = Vec::new();
        for (socket, bytes) in parts {
            let taken = app.sockets.tcp(socket as usize).is_some_and(|h| {
                self.iface
                    .tcp_unread(&mut self.pool, h, &bytes)
                    .unwrap_or(false)
            });
            if !taken {
                refused.push(socket);
            }
        }
        Response::Unread { refused }
    }

    /// Forked child `id` takes the sockets of ticket `secret`.
    fn adopt(&mut self, id: u64, secret: u64) -> Response {
        self.expire_forks();
        let Some(i) = self.apps.iter().position(|a| a.id == id) else {
            return Response::Error("say Hello first".into());
        };
        let Some(held) = self.forks.take_ticket(secret, self.apps[i].uid) else {
            return Response::Error(format!(
                "no fork ticket {secret:#x} for this user: a child adopts its parent's sockets once, within {} s of the fork",
                crate::control::FORK_TICKET_LIFETIME.as_secs()
            ));
        };
        let mut sockets = Vec::with_capacity(held.len());
        let mut orphans = Vec::new();
        for h in &held {
            let Some(n) = self.apps[i].sockets.insert_adopted(h) else {
                if self.forks.drop_hold(h.sock) {
                    orphans.push(h.sock);
                }
                continue;
            };
            self.forks.held_to_entry(h.sock);
            let (listener, port, peer, connecting) = match h.sock {
                StackSock::Listen(l) => (
                    true,
                    self.iface.tcp_listen_port(l).unwrap_or(0),
                    std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
                    false,
                ),
                StackSock::Conn(c) => {
                    let info = self.iface.tcp_info(c).ok();
                    (
                        false,
                        info.map_or(0, |i| i.local.port()),
                        info.map_or(
                            std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
                            |i| i.remote,
                        ),
                        !h.said_connected,
                    )
                }
            };
            sockets.push(crate::control::AdoptedSocket {
                parent: u32::from(h.parent),
                socket: u32::from(n),
                listener,
                port,
                peer,
                connecting,
            });
        }
        self.release_orphans(orphans);
        self.settle_forks();
        Response::Adopted { sockets }
    }

    /// Lets go of the holds of expired fork tickets, releasing what nobody holds any more.
    fn expire_forks(&mut self) {
        let gone = self.forks.expire(Instant::now());
        self.release_orphans(gone);
    }

    /// Releases in the stack sockets that no application and no ticket refers to any more
    /// (closed in order, as the kernel closes a socket whose last descriptor goes).
    fn release_orphans(&mut self, gone: Vec<StackSock>) {
        let now = self.now();
        for s in gone {
            let _ = match s {
                StackSock::Conn(h) => self.iface.tcp_close(&mut self.pool, h, now, &mut self.tx),
                StackSock::Listen(l) => {
                    self.iface
                        .tcp_unlisten(&mut self.pool, l, now, &mut self.tx)
                }
            };
        }
    }

    /// After a change of who claims a shared socket: every entry that refers to it is
    /// silenced or woken as [`Forks::dormant`] says; expired tickets are let go.
    fn settle_forks(&mut self) {
        if self
            .forks
            .next_expiry()
            .is_some_and(|t| t <= Instant::now())
        {
            self.expire_forks();
        }
        for sock in self.forks.take_changed() {
            let forks = &self.forks;
            for app in &mut self.apps {
                app.sockets
                    .set_dormant(sock, |a, n| forks.dormant(sock, a, n));
            }
        }
    }

    /// A UDP socket's multicast change (its IGMP report goes at the next poll).
    fn multicast(&mut self, id: u64, socket: u32, op: shmnet_stack::MulticastOp) -> Response {
        let now = self.now();
        let Some(app) = self.apps.iter().find(|a| a.id == id) else {
            return Response::Error("say Hello first".into());
        };
        let refused = match app.sockets.get(socket as usize) {
            Some(AppSocket::Udp(h)) => self.iface.udp_multicast(h, op, now).err(),
            _ => Some(shmnet_stack::MulticastError::InvalidHandle),
        };
        Response::Multicast { socket, refused }
    }

    fn close(&mut self, id: u64, socket: u32) -> Response {
        let Some(app) = self.app_mut(id) else {
            return Response::Error("say Hello first".into());
        };
        match app.sockets.take_udp(socket as usize) {
            Some(h) => {
                let _ = self.iface.udp_close(&mut self.pool, h);
                Response::Closed { socket }
            }
            None => Response::Error(format!("no socket {socket}")),
        }
    }

    /// The application hung up: it departs ([`Departing`]); the control plane is answered
    /// when it has gone (at once if it is not attached).
    fn begin_detach(&mut self, id: u64, reply: std::sync::mpsc::SyncSender<()>) {
        let Some(app) = self.apps.iter_mut().find(|a| a.id == id) else {
            let _ = reply.send(());
            return;
        };
        let now = Instant::now();
        app.departing = Some(Departing {
            since: now,
            progress: now,
            quiet: false,
            reply,
        });
    }

    /// Lets the departing applications that are done go ([`Departing`]).
    fn settle_departures(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.apps.len() {
            let app = &mut self.apps[i];
            // Quiet is not done while requests wait on its ring: a round whose driver had no
            // room took none of them (found: 1 MB written, closed and exited, then the FIN
            // went without a byte, under 20 senders at once).
            let waiting = app.departing.is_some() && app.transport.requests_waiting();
            let done = app.departing.as_ref().is_some_and(|d| {
                (d.quiet && !waiting && app.transport.parked() == 0)
                    || now.duration_since(d.progress) > DETACH_MISS_PATIENCE
                    || now.duration_since(d.since) > DETACH_LIMIT
            });
            if done {
                let app = self.apps.swap_remove(i);
                self.finish_detach(app);
            } else {
                i += 1;
            }
        }
    }

    /// Everything a departed application held comes back and its sockets close; what of
    /// its sends could not be carried out is lost, and those connections are reset.
    fn finish_detach(&mut self, mut app: AppSlot) {
        let now = self.now();
        let mut r = Round {
            iface: &mut self.iface,
            pool: &mut self.pool,
            tx: &mut self.tx,
            now,
            scratch: &mut self.scratch,
            handles: &mut self.handles,
            copy_probe: self.copy_probe.as_deref_mut(),
            tcp_lent: &mut self.tcp_lent,
            forks: &mut self.forks,
            last_call: true,
            tx_room: usize::MAX,
        };
        let mut abort = Vec::new();
        app.transport.parked_sockets(&mut abort);
        let udp = app.sockets.close_all(&mut r, &abort);
        app.transport.reclaim(&mut self.pool, &mut self.tcp_lent);
        for h in udp {
            let _ = self.iface.udp_close(&mut self.pool, h);
        }
        // Its registrations are unmapped once the control plane hears this: nothing may
        // point there.
        self.handles.forget_lines(app.pch);
        if let Some(d) = app.departing {
            let _ = d.reply.send(());
        }
    }

    /// Sleeps until a ring, the control plane, the device or the stack's timers have work,
    /// at most `at_most`.
    pub(crate) fn idle(&mut self, at_most: Duration) {
        if self.inbox.pending() {
            return;
        }
        let mut wait = match self.iface.poll_at() {
            Some(t) => {
                Duration::from_nanos(t.nanos().saturating_sub(self.now().nanos())).min(at_most)
            }
            None => at_most,
        };
        if let Some(t) = self.forks.next_expiry() {
            // A fork's ticket that expires lets go of sockets nobody else holds.
            wait = wait.min(t.saturating_duration_since(Instant::now()));
        }
        if let DriverLink::Polled(p) = &self.link {
            if p.stopped.is_none() && p.driver.rx_fd().is_none() {
                // A device without an fd (softnic) says how long it will be quiet; one that
                // says nothing has nothing coming until something else wakes us.
                if let Some(h) = p.driver.idle_hint() {
                    wait = wait.min(h);
                }
            }
        }
        // A full `ipc` socket: its POLLOUT does not reliably wake us (see `drive_ipc`).
        // A departing application's parked sends wait for lines nothing announces.
        if self.ipc_pending_full
            || self
                .apps
                .iter()
                .any(|a| a.transport.blocked() || a.departing.is_some())
        {
            let t = crate::driver_host::IPC_BLOCKED_RECHECK;
            wait = wait.min(Duration::from_nanos(t.tv_nsec as u64));
        }
        // Announce sleep on every ring we consume; if one already has work, do not sleep.
        let Some(armed) = self.arm() else {
            return;
        };
        let abandoned = self.faithful_abandoned();
        {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(8 + 2 * self.apps.len());
            fds.push(PollFd::from_borrowed_fd(
                self.inbox.wake_fd(),
                PollFlags::IN,
            ));
            match &self.link {
                DriverLink::Polled(p) => {
                    if let (None, Some(fd)) = (&p.stopped, p.driver.rx_fd()) {
                        fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
                    }
                }
                DriverLink::Rings { in_ip, in_arp, .. } => {
                    for c in [in_ip, in_arp] {
                        if let Some(fd) = c.wake_fd() {
                            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
                        }
                    }
                }
                DriverLink::Faithful(_) if abandoned => {}
                DriverLink::Faithful(q) => {
                    // One event for both IN queues.
                    if let Some(fd) = q.in_ip.wake_fd() {
                        fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
                    }
                }
                DriverLink::Ipc(sock) => {
                    let out = if self.ipc_pending_full {
                        PollFlags::OUT
                    } else {
                        PollFlags::empty()
                    };
                    fds.push(PollFd::new(sock, PollFlags::IN | out));
                }
            }
            for a in &self.apps {
                a.transport.wait_fds(&mut fds);
            }
            let ts = Timespec {
                tv_sec: wait.as_secs() as _,
                tv_nsec: wait.subsec_nanos() as _,
            };
            let _ = rustix::event::poll(&mut fds, Some(&ts));
        }
        self.counters.sleeps += 1;
        self.disarm(armed);
        self.inbox.clear_wake();
    }

    /// Arms every consumed ring; `None` (all disarmed again) if one has work. Returns how
    /// many applications were armed.
    fn arm(&mut self) -> Option<usize> {
        if let DriverLink::Rings { in_ip, in_arp, .. } = &mut self.link {
            if !in_ip.prepare_wait() {
                return None;
            }
            if !in_arp.prepare_wait() {
                in_ip.finish_wait();
                return None;
            }
        }
        let abandoned = self.faithful_abandoned();
        if let DriverLink::Faithful(q) = &mut self.link {
            // Queues left alone after their driver process died are not waited on (their
            // leftovers would keep the loop awake for ever).
            if !abandoned && !q.prepare_wait() {
                return None;
            }
        }
        for i in 0..self.apps.len() {
            if !self.apps[i].transport.prepare_sleep() {
                self.disarm(i);
                return None;
            }
        }
        Some(self.apps.len())
    }

    /// Withdraws the sleep announcements of the driver's rings and the first `apps`
    /// applications.
    fn disarm(&mut self, apps: usize) {
        if let DriverLink::Rings { in_ip, in_arp, .. } = &mut self.link {
            in_ip.finish_wait();
            in_arp.finish_wait();
        }
        if let DriverLink::Faithful(q) = &mut self.link {
            q.finish_wait();
        }
        for a in self.apps.iter_mut().take(apps) {
            a.transport.finish_sleep();
        }
    }

    /// Whether seed 002's queues are left alone: their driver process is gone, perhaps
    /// inside one of their mutexes. (A driver thread that ended left them cleanly: what it
    /// queued is still taken.)
    fn faithful_abandoned(&self) -> bool {
        matches!(self.link, DriverLink::Faithful(_))
            && !self.driver.alive.load(Ordering::Relaxed)
            && self.driver.placement == super::Placement::Process.name()
    }

    /// The lookup cache's side of the data plane (recording traces).
    pub(crate) fn handles_mut(&mut self) -> &mut HandleCtx {
        &mut self.handles
    }

    /// Where the instrument around copies into posted buffers is kept.
    pub(crate) fn copy_probe_mut(&mut self) -> &mut Option<Box<dyn super::CopyProbe>> {
        &mut self.copy_probe
    }

    /// Whether this is the `ipc` structure (its rounds are system calls).
    pub(crate) fn is_ipc(&self) -> bool {
        matches!(self.link, DriverLink::Ipc(_))
    }

    /// Applications attached now.
    pub(crate) fn apps_attached(&self) -> usize {
        self.apps.len()
    }

    /// Sockets bound by attached applications.
    pub(crate) fn sockets_bound(&self) -> usize {
        self.apps.iter().map(|a| a.sockets.count()).sum()
    }

    /// Whether the driver has stopped.
    pub(crate) fn driver_stopped(&self) -> bool {
        !self.driver.alive.load(Ordering::Relaxed)
    }

    /// Every counter.
    pub(crate) fn stats(&self) -> ServerStats {
        let mut driver = self
            .driver
            .stats
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        let mut driver_stopped = driver.stopped.clone();
        if let DriverLink::Polled(p) = &self.link {
            driver.driver = p.driver.stats();
            driver_stopped = p.stopped.clone();
        }
        if driver_stopped.is_none() && self.driver_stopped() {
            driver_stopped = Some("the driver went away".into());
        }
        let app_windows_bytes = self
            .apps
            .iter()
            .map(|a| a.transport.window().map_or(0, Window::size))
            .sum();
        let apps: Vec<AppStats> = self
            .apps
            .iter()
            .take(super::stats::APPS_LISTED)
            .map(|a| AppStats {
                id: a.id,
                pid: a.pid,
                uid: a.uid,
                transport: a.transport.kind().into(),
                sockets: a.sockets.count(),
                holding: a.transport.holding(),
                window_bytes: a.transport.window().map_or(0, Window::size),
                rings: a.transport.window().map_or(Vec::new(), |w| w.stats().rings),
                counters: AppCounters {
                    wakeups: a.transport.wakeups(),
                    tcp_bad_ops: a.sockets.refusals.bad_ops,
                    tcp_parked: a.transport.parked() as u64,
                    ..a.counters.clone()
                },
                ..AppStats::default()
            })
            .collect();
        let (lookup, misses) = self.handles.stats();
        ServerStats {
            structure: if matches!(self.link, DriverLink::Ipc(_)) {
                "ipc"
            } else {
                "server"
            }
            .into(),
            driver_placement: self.driver.placement.into(),
            sync: match self.link {
                DriverLink::Faithful(_) => super::SyncMode::Faithful,
                _ => super::SyncMode::Modern,
            }
            .name()
            .into(),
            faithful: match &self.link {
                DriverLink::Faithful(q) => Some(q.stats()),
                _ => None,
            },
            socket: self.socket.clone(),
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            memory: MemoryStats {
                data_window_bytes: self.data.size(),
                app_windows_bytes,
            },
            data_window: Some(self.data.stats()),
            driver,
            driver_running: !self.driver_stopped(),
            driver_stopped,
            out_queue_full: self.out_full,
            ipc_drops: self.ipc_drops,
            stack: self.iface.stats().clone(),
            tcp: self.iface.tcp_counters().clone(),
            tcp_memory: self.iface.tcp_memory(),
            forks: self.forks.counters(),
            capture: self.captures.counters(),
            data_plane: self.counters.clone(),
            control: self.control.lock().map(|c| c.clone()).unwrap_or_default(),
            regions: Default::default(),
            lookup,
            misses,
            apps,
            apps_total: self.apps.len(),
        }
    }

    /// The polled driver, once the loop stops (to read its final counters).
    pub(crate) fn polled_driver_stats(&self) -> Option<crate::driver::DriverStats> {
        match &self.link {
            DriverLink::Polled(p) => Some(p.driver.stats()),
            _ => None,
        }
    }
}
