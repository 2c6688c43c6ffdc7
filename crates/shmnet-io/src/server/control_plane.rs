//! The control plane: a thread of its own that accepts connections on the control socket,
//! greets applications, registers their memory regions, and answers Bind, Close and Stats —
//! off the data plane's path.
//!
//! It never touches the data plane's state. What needs it (an application's rings to serve,
//! a port to bind, the counters) goes to the data plane as a [`Command`] through an
//! in-process queue: the data plane notices a command with one relaxed load per round, and
//! an eventfd wakes it if it sleeps. Replies come back on a channel of their own.
//!
//! Abuse it survives (each refusal is counted in [`ControlCounters`]):
//! - more than `max_connections` connections: the next is told so and closed;
//! - a connection that says nothing for `hello_timeout`: closed;
//! - the process's fd limit: `accept` fails with EMFILE. The listener rests a moment (the
//!   connection waits in the backlog, no spinning), and a reserve fd kept for the purpose is
//!   given up to take one pending connection: a `Stats` request on it is answered, anything
//!   else is told to come back later — so `shmnet stats` answers even then;
//! - oversized or malformed messages: refused with an error message naming the problem;
//! - descriptors attached to any message but `Register` (or more than one to it): closed at
//!   once and counted;
//! - registrations past the application's limits, of unsealed or odd-sized memfds:
//!   refused, counted in the registration table's `refused`.
//!
//! Registered regions live in the [`RegionTable`] (seed 004's host-side table), keyed by
//! the application's number ([`Pch`]), which the control plane assigns at attach and frees
//! when the application goes — after the table has forgotten it.
//!
//! Every connection's peer credentials (pid, uid) are read with `SO_PEERCRED` when it is
//! accepted and recorded with the application.

use super::region_app::RegionApp;
use super::stats::{ControlCounters, ServerStats};
use super::transport::{AppTransport, IpcApp, ShmApp};
use crate::control::{self, PROTOCOL_VERSION, Request, Response};
use crate::driver_host::DriverThreadStats;
use crate::spec::Isolation;
use crate::windows;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use shmnet_chan::Window;
use shmnet_chan::handles::{Pch, Perms, RegionId, RegionTable, TableLimits};
use shmnet_chan::handoff::send_window;
use shmnet_chan::signal::{EventFd, Signal};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the control plane waits for the data plane to answer a request. The data plane
/// never blocks, so only a stopping or starved one is this late: 2 s was, once, on a 2-CPU
/// machine with a CPU hog and a few dozen busy threads beside it (tcp_hostile).
const REPLY_PATIENCE: Duration = Duration::from_secs(10);
/// How long the listener rests after `accept` ran out of file descriptors.
const FD_REST: Duration = Duration::from_millis(20);
/// Pending connections answered through the reserve fd per round at the fd limit.
const FD_SHED_PER_ROUND: usize = 256;

/// Limits on what clients may do to the control plane.
#[derive(Clone, Copy, Debug)]
pub struct ControlLimits {
    /// Connections open at once (applications, stats askers, not yet greeted).
    pub max_connections: usize,
    /// How long a new connection may take to say Hello (or ask for Stats).
    pub hello_timeout: Duration,
    /// What each application may register.
    pub regions: TableLimits,
}

impl Default for ControlLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            hello_timeout: Duration::from_secs(5),
            regions: TableLimits::default(),
        }
    }
}

/// A request from the control plane to the data plane.
pub(crate) enum Command {
    /// Serve a new application.
    Attach {
        id: u64,
        pch: Pch,
        pid: i32,
        uid: u32,
        transport: Box<dyn AppTransport>,
    },
    /// Bind a UDP port for an application.
    Bind {
        id: u64,
        port: u16,
        reply: mpsc::SyncSender<Response>,
    },
    /// Change an application's UDP socket's multicast state.
    Multicast {
        id: u64,
        socket: u32,
        op: shmnet_stack::MulticastOp,
        reply: mpsc::SyncSender<Response>,
    },
    /// Listen on a TCP port for an application.
    TcpListen {
        id: u64,
        port: u16,
        backlog: u32,
        reply: mpsc::SyncSender<Response>,
    },
    /// Open a TCP connection for an application.
    TcpConnect {
        id: u64,
        to: std::net::SocketAddrV4,
        reply: mpsc::SyncSender<Response>,
    },
    /// The application is about to fork: share its TCP sockets with the child to come.
    Fork {
        id: u64,
        sockets: Vec<u32>,
        reply: mpsc::SyncSender<Response>,
    },
    /// Bytes application `id` gives back to its connections, in order (`Request::Unread`).
    Unread {
        id: u64,
        parts: Vec<(u32, Vec<u8>)>,
        reply: mpsc::SyncSender<Response>,
    },
    /// A fork's ticket is held by a control connection made for the child: no expiry.
    HoldTicket { ticket: u64, uid: u32 },
    /// That connection closed: the ticket goes, adopted or not.
    DropTicket { ticket: u64 },
    /// A forked child takes its parent's sockets.
    Adopt {
        id: u64,
        ticket: u64,
        reply: mpsc::SyncSender<Response>,
    },
    /// Close one of its sockets.
    Close {
        id: u64,
        socket: u32,
        reply: mpsc::SyncSender<Response>,
    },
    /// The application hung up: take back what it held, drop its lines; answer when done
    /// (only then may its regions be unmapped and its number reused).
    Detach {
        id: u64,
        reply: mpsc::SyncSender<()>,
    },
    /// Drop every line of an application and bump its generation (its registrations are
    /// about to change); answer when done.
    ForgetLines {
        pch: Pch,
        reply: mpsc::SyncSender<()>,
    },
    /// Every counter.
    Stats {
        reply: mpsc::SyncSender<Box<ServerStats>>,
    },
    /// Start filling `ring` for control connection `id`'s capture; `reply`: whether it
    /// started (not too many running).
    Capture {
        id: u64,
        spec: crate::capture::CaptureSpec,
        ring: Box<crate::capture::RingWriter>,
        reply: mpsc::SyncSender<bool>,
    },
    /// Connection `id`'s capture is over (its reader hung up).
    StopCapture { id: u64 },
    /// Application `id`'s connection is now used by process `pid` (a forked child).
    SetPid { id: u64, pid: i32 },
    /// A page of the sockets listing, from cursor `from` (`shmnet sockets`).
    Sockets {
        from: u64,
        reply: mpsc::SyncSender<Box<super::listing::SocketsPage>>,
    },
    /// The driver process went away.
    DriverGone,
}

/// The data plane's end of the command queue.
pub(crate) struct Inbox {
    rx: mpsc::Receiver<Command>,
    pending: Arc<AtomicUsize>,
    wake: Arc<EventFd>,
}

impl Inbox {
    /// Whether a command is waiting (one relaxed load).
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed) != 0
    }

    /// The next command, if any.
    pub(crate) fn take(&mut self) -> Option<Command> {
        let c = self.rx.try_recv().ok()?;
        self.pending.fetch_sub(1, Ordering::Relaxed);
        Some(c)
    }

    /// Readable while a command's wake-up is pending.
    pub(crate) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.fd()
    }

    /// Consumes pending wake-ups (after a sleep).
    pub(crate) fn clear_wake(&self) {
        Signal::clear(&*self.wake);
    }
}

/// The control plane's end of the command queue.
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<Command>,
    pending: Arc<AtomicUsize>,
    wake: Arc<EventFd>,
}

impl Outbox {
    /// Queues `c` and wakes the data plane. `false` if the data plane is gone.
    pub(crate) fn send(&self, c: Command) -> bool {
        if self.tx.send(c).is_err() {
            return false;
        }
        self.pending.fetch_add(1, Ordering::Release);
        self.wake.raise();
        true
    }

    /// Sends a command carrying `reply` and waits for the answer: [`REPLY_PATIENCE`] at
    /// most, and no longer once `stop` is raised (the server's owner, stopping, may be the
    /// thread that steps the data plane: it would never answer).
    fn ask<T>(
        &self,
        stop: &EventFd,
        make: impl FnOnce(mpsc::SyncSender<T>) -> Command,
    ) -> Option<T> {
        let (reply, answer) = mpsc::sync_channel(1);
        if !self.send(make(reply)) {
            return None;
        }
        let deadline = Instant::now() + REPLY_PATIENCE;
        loop {
            match answer.recv_timeout(Duration::from_millis(50)) {
                Ok(t) => return Some(t),
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            let mut fds = [PollFd::from_borrowed_fd(stop.fd(), PollFlags::IN)];
            let now = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let stopping = rustix::event::poll(&mut fds, Some(&now)).unwrap_or(0) > 0;
            if stopping || Instant::now() >= deadline {
                return None;
            }
        }
    }
}

/// A command queue between the two planes.
pub(crate) fn command_queue() -> std::io::Result<(Outbox, Inbox)> {
    let (tx, rx) = mpsc::channel();
    let pending = Arc::new(AtomicUsize::new(0));
    let wake = Arc::new(EventFd::new()?);
    Ok((
        Outbox {
            tx,
            pending: pending.clone(),
            wake: wake.clone(),
        },
        Inbox { rx, pending, wake },
    ))
}

/// What the control plane thread is given.
pub(crate) struct ControlSpec {
    pub(crate) listener: OwnedFd,
    pub(crate) data: Arc<Window>,
    pub(crate) ipc: bool,
    pub(crate) isolation: crate::spec::Isolation,
    pub(crate) on_miss: crate::spec::OnMiss,
    pub(crate) limits: ControlLimits,
    pub(crate) outbox: Outbox,
    pub(crate) counters: Arc<Mutex<ControlCounters>>,
    /// A driver process's control socket, and where its counters go.
    pub(crate) driver: Option<(OwnedFd, Arc<Mutex<DriverThreadStats>>)>,
    /// Every application's registered regions.
    pub(crate) table: Arc<Mutex<RegionTable>>,
    /// The interface's address, told to each application in its `Welcome`.
    pub(crate) address: std::net::Ipv4Addr,
    /// Its prefix length, told beside it.
    pub(crate) prefix: u8,
}

/// The running control plane.
pub(crate) struct ControlHandle {
    stop: Arc<EventFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlHandle {
    /// Starts the control plane thread.
    pub(crate) fn start(spec: ControlSpec) -> std::io::Result<Self> {
        let stop = Arc::new(EventFd::new()?);
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("shmnet-control".into())
            .spawn(move || ControlPlane::new(spec, stop2).run())?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread: every connection closes (applications see the server go).
    pub(crate) fn stop(&mut self) {
        self.stop.raise();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ControlHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where a connection is in its life.
enum Stage {
    /// Accepted; has not said Hello.
    Greeting,
    /// An attached application.
    App,
    /// A packet capture's reader (`shmnet capture`): the capture runs while it is open.
    Capture,
}

struct Conn {
    fd: OwnedFd,
    id: u64,
    pid: i32,
    uid: u32,
    since: Instant,
    stage: Stage,
    /// Its application number once attached.
    pch: Option<Pch>,
    /// The fork ticket this connection was made for ([`Request::ForChild`]).
    for_child: Option<u64>,
}

/// Application numbers: the lowest free one first, so they stay small and are reused.
#[derive(Default)]
struct Pchs {
    next: u16,
    freed: std::collections::BTreeSet<u16>,
}

impl Pchs {
    fn take(&mut self) -> Option<Pch> {
        if let Some(n) = self.freed.pop_first() {
            return Some(Pch(n));
        }
        if self.next > Pch::MAX {
            return None;
        }
        self.next += 1;
        Some(Pch(self.next - 1))
    }

    fn give_back(&mut self, p: Pch) {
        self.freed.insert(p.0);
    }
}

struct ControlPlane {
    spec: ControlSpec,
    stop: Arc<EventFd>,
    conns: Vec<Conn>,
    next_id: u64,
    /// Kept open to be given up when `accept` runs out of fds.
    reserve: Option<control::FdReserve>,
    listener_rests_until: Option<Instant>,
    buf: Vec<u8>,
    pchs: Pchs,
    closer: FdCloser,
    /// Applications that hung up and are departing in the data plane: their numbers and
    /// regions are given up when it says they have gone.
    departing: Vec<Departure>,
}

/// An application the data plane is letting go (its last requests served first); the
/// control plane goes on serving everyone else meanwhile.
struct Departure {
    pch: Option<Pch>,
    gone: mpsc::Receiver<()>,
}

/// Closes descriptors applications sent, off the control thread: the last close of a file
/// can block (a FUSE file's flush, a lingering socket), and an application must not be able
/// to stall the control plane by sending one.
struct FdCloser {
    tx: Option<mpsc::Sender<OwnedFd>>,
}

impl FdCloser {
    fn new() -> Self {
        let (tx, rx) = mpsc::channel::<OwnedFd>();
        let started = std::thread::Builder::new()
            .name("shmnet-fd-closer".into())
            .spawn(move || rx.into_iter().for_each(drop));
        Self {
            tx: started.ok().map(|_| tx),
        }
    }

    /// Closes `fd` on the closer thread (here, if it could not start).
    fn close(&self, fd: OwnedFd) {
        if let Some(tx) = &self.tx {
            if let Err(mpsc::SendError(fd)) = tx.send(fd) {
                drop(fd);
            }
        }
    }
}

impl ControlPlane {
    fn new(spec: ControlSpec, stop: Arc<EventFd>) -> Self {
        Self {
            spec,
            stop,
            conns: Vec::new(),
            next_id: 1,
            reserve: control::FdReserve::new().ok(),
            listener_rests_until: None,
            // One byte more than the largest message, to tell a message that fills the
            // buffer from one that was truncated.
            buf: vec![0u8; control::MAX_MSG + 1],
            pchs: Pchs::default(),
            closer: FdCloser::new(),
            departing: Vec::new(),
        }
    }

    /// Gives up the numbers and regions of the applications that have gone. One the data
    /// plane will never answer for (it has stopped) keeps its regions mapped and its number
    /// taken, rather than unmapped under a translation.
    fn settle_departures(&mut self) {
        let mut i = 0;
        while i < self.departing.len() {
            let d = &self.departing[i];
            // The data plane always answers, however late (a starved machine): giving up
            // on it would keep the regions mapped and the number taken for good. Only a
            // data plane that has stopped never will.
            let released = match d.gone.try_recv() {
                Ok(()) => true,
                Err(mpsc::TryRecvError::Empty) => {
                    i += 1;
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => false,
            };
            let d = self.departing.swap_remove(i);
            if let (true, Some(p)) = (released, d.pch) {
                self.table().forget(p);
                self.pchs.give_back(p);
            }
        }
    }

    fn count(&self, f: impl FnOnce(&mut ControlCounters)) {
        if let Ok(mut c) = self.spec.counters.lock() {
            f(&mut c);
        }
    }

    fn run(mut self) {
        loop {
            self.settle_departures();
            let now = Instant::now();
            if self.listener_rests_until.is_some_and(|t| now >= t) {
                self.listener_rests_until = None;
            }
            let deadline = self
                .conns
                .iter()
                .filter(|c| matches!(c.stage, Stage::Greeting))
                .map(|c| c.since + self.spec.limits.hello_timeout)
                .chain(self.listener_rests_until)
                .min();
            let mut wait = deadline.map_or(Duration::from_secs(1), |d| {
                d.saturating_duration_since(now)
                    .max(Duration::from_millis(1))
            });
            if !self.departing.is_empty() {
                // Nothing wakes this thread when the data plane lets an application go.
                wait = wait.min(Duration::from_millis(2));
            }
            let (stop, listener, driver, ready) = {
                let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3 + self.conns.len());
                fds.push(PollFd::from_borrowed_fd(self.stop.fd(), PollFlags::IN));
                let listening = self.listener_rests_until.is_none();
                if listening {
                    fds.push(PollFd::new(&self.spec.listener, PollFlags::IN));
                }
                let driver_at = fds.len();
                if let Some((fd, _)) = &self.spec.driver {
                    fds.push(PollFd::new(fd, PollFlags::IN));
                }
                let conns_at = fds.len();
                for c in &self.conns {
                    fds.push(PollFd::new(&c.fd, PollFlags::IN));
                }
                let ts = Timespec {
                    tv_sec: wait.as_secs() as _,
                    tv_nsec: wait.subsec_nanos() as _,
                };
                let _ = rustix::event::poll(&mut fds, Some(&ts));
                let hit = |f: &PollFd<'_>| !f.revents().is_empty();
                let stop = hit(&fds[0]);
                let listener = listening && hit(&fds[1]);
                let driver = self.spec.driver.is_some() && hit(&fds[driver_at]);
                let ready: Vec<u64> = fds[conns_at..]
                    .iter()
                    .zip(&self.conns)
                    .filter(|(f, _)| hit(f))
                    .map(|(_, c)| c.id)
                    .collect();
                (stop, listener, driver, ready)
            };
            if stop {
                self.hear_the_driver_out();
                break;
            }
            if driver {
                self.watch_driver();
            }
            for id in ready {
                self.serve(id);
            }
            if listener {
                self.accept();
            }
            self.expire();
            let open = self.conns.len() as u64;
            self.count(|c| c.open = open);
        }
        // Dropping the connections closes them: applications see the server go.
    }

    /// The server is stopping: tells a driver process so (our end of its control socket
    /// stops writing, which it reads as the server going) and reads its last word — its
    /// final counters, which it sends as it stops — so the server's final report has them,
    /// not those of up to 100 ms before. Waits a second at most.
    fn hear_the_driver_out(&mut self) {
        let Some((fd, _)) = &self.spec.driver else {
            return;
        };
        let _ = rustix::net::shutdown(fd, rustix::net::Shutdown::Write);
        let deadline = Instant::now() + Duration::from_secs(1);
        while let Some((fd, _)) = &self.spec.driver {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let ts = Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            if rustix::event::poll(&mut fds, Some(&ts)).unwrap_or(0) == 0 {
                continue;
            }
            // Reads what came; at the driver's end of file it forgets the driver.
            self.watch_driver();
        }
    }

    /// Reads a driver process's counters; notices its death.
    fn watch_driver(&mut self) {
        let Some((fd, stats)) = &self.spec.driver else {
            return;
        };
        loop {
            match control::recv_raw(fd, &mut self.buf) {
                Ok(Some(n)) => {
                    if let Ok(Request::DriverStats(st)) = serde_json::from_slice(&self.buf[..n]) {
                        if let Ok(mut s) = stats.lock() {
                            *s = *st;
                        }
                    }
                }
                Ok(None) => return,
                Err(_) => break,
            }
        }
        self.spec.driver = None;
        self.spec.outbox.send(Command::DriverGone);
    }

    fn accept(&mut self) {
        loop {
            match control::accept(&self.spec.listener) {
                Ok(Some(fd)) => self.admit(fd),
                Ok(None) => return,
                Err(control::ControlError::OutOfFds(_)) => {
                    self.count(|c| c.fd_exhausted += 1);
                    self.out_of_fds();
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// `accept` ran out of fds. The reserve fd takes the pending connections one at a time:
    /// a `Stats` request already waiting on one is answered, every other connection is told
    /// the server is out of fds and closed at once (no waiting on a silent peer). Then the
    /// listener rests a moment (a connection that keeps it readable must not make us spin).
    fn out_of_fds(&mut self) {
        self.listener_rests_until = Some(Instant::now() + FD_REST);
        for _ in 0..FD_SHED_PER_ROUND {
            let Some(reserve) = &mut self.reserve else {
                return;
            };
            let Ok(Some((fd, _))) = reserve.accept_with_reserve(&self.spec.listener) else {
                break;
            };
            self.answer_and_close(
                fd,
                Duration::from_millis(1),
                "the shmnet server is out of file descriptors: try again later, or raise its limit (ulimit -n)"
                    .into(),
            );
            if let Some(r) = &mut self.reserve {
                if r.refill().is_err() {
                    break;
                }
            }
        }
    }

    /// A connection the server will not keep: a `Stats` request it sends within `patience`
    /// (`shmnet stats` asks as soon as it has connected) is answered; otherwise it is told
    /// `refusal`. Then it is closed.
    fn answer_and_close(&mut self, fd: OwnedFd, patience: Duration, refusal: String) {
        let answer = match wait_message(&fd, &mut self.buf, Instant::now() + patience) {
            Some(Request::Stats) => self.stats_response(),
            Some(Request::Sockets { from }) => self.sockets_response(from),
            _ => Response::Error(refusal),
        };
        let _ = control::send(&fd, &answer);
    }

    fn admit(&mut self, fd: OwnedFd) {
        self.count(|c| c.accepted += 1);
        if self.conns.len() >= self.spec.limits.max_connections {
            // Full. A `shmnet stats` asker still gets its answer (it asks at once); anyone
            // else is told why and closed.
            self.count(|c| c.refused_full += 1);
            let refusal = format!(
                "the shmnet server already has {} connections (its --max-connections): close some, or raise the limit",
                self.conns.len()
            );
            self.answer_and_close(fd, Duration::from_millis(10), refusal);
            return;
        }
        // Each message then says who sent it (`note_sender`).
        let _ = control::pass_credentials(&fd);
        let (pid, uid) = match control::peer_credentials(&fd) {
            Ok(c) => (c.pid as i32, c.uid),
            Err(_) => (0, u32::MAX),
        };
        let id = self.next_id;
        self.next_id += 1;
        self.conns.push(Conn {
            fd,
            id,
            pid,
            uid,
            since: Instant::now(),
            stage: Stage::Greeting,
            pch: None,
            for_child: None,
        });
    }

    /// Closes connections that did not say Hello in time.
    fn expire(&mut self) {
        let limit = self.spec.limits.hello_timeout;
        let before = self.conns.len();
        self.conns.retain(|c| {
            // A connection a parent made for its child waits as long as the child lives.
            !(matches!(c.stage, Stage::Greeting)
                && c.for_child.is_none()
                && c.since.elapsed() >= limit)
        });
        let expired = (before - self.conns.len()) as u64;
        if expired > 0 {
            self.count(|c| c.hello_timeouts += expired);
        }
    }

    /// Reads and answers everything connection `id` has sent; closes it on hang-up.
    fn serve(&mut self, id: u64) {
        loop {
            let Some(i) = self.conns.iter().position(|c| c.id == id) else {
                return;
            };
            let (n, fd) = match control::recv_raw_with_fd_cred(&self.conns[i].fd, &mut self.buf) {
                Ok(Some((n, fd, extra, cred))) => {
                    if extra > 0 {
                        self.count(|c| c.stray_fds += extra as u64);
                    }
                    if let Some(c) = cred {
                        self.note_sender(i, c);
                    }
                    (n, fd)
                }
                Ok(None) => return,
                Err(_) => {
                    self.hang_up(i);
                    return;
                }
            };
            let answer = if n > control::MAX_MSG {
                self.count(|c| c.bad_messages += 1);
                Some(Response::Error(format!(
                    "control messages are at most {} bytes",
                    control::MAX_MSG
                )))
            } else {
                match serde_json::from_slice::<Request>(&self.buf[..n]) {
                    Ok(Request::Register { read, write }) => {
                        Some(self.register(i, fd, Perms { read, write }))
                    }
                    Ok(Request::Unread { parts }) => Some(self.unread(i, fd, parts)),
                    Ok(Request::Capture(spec)) => {
                        if let Some(fd) = fd {
                            self.count(|c| c.stray_fds += 1);
                            self.closer.close(fd);
                        }
                        match self.capture(i, spec) {
                            Ok(()) => None,
                            Err(e) => Some(Response::Error(e)),
                        }
                    }
                    Ok(req) => {
                        if let Some(fd) = fd {
                            self.count(|c| c.stray_fds += 1);
                            self.closer.close(fd);
                        }
                        self.handle(i, req)
                    }
                    Err(e) => {
                        self.count(|c| c.bad_messages += 1);
                        Some(Response::Error(format!("malformed request: {e}")))
                    }
                }
            };
            if let Some(a) = answer {
                if control::send(&self.conns[i].fd, &a).is_err() {
                    self.hang_up(i);
                    return;
                }
            }
        }
    }

    /// The kernel says who sent connection `i`'s last message. A forked child that took
    /// over the connection its parent opened for it sends with its own pid (peer
    /// credentials name whoever connected): the connection, and its application as
    /// `shmnet sockets` and `shmnet stats` show it, are the child's from then on.
    fn note_sender(&mut self, i: usize, cred: rustix::net::UCred) {
        let pid = cred.pid.as_raw_nonzero().get();
        let c = &mut self.conns[i];
        if pid == c.pid || cred.uid.as_raw() != c.uid {
            return;
        }
        c.pid = pid;
        if matches!(c.stage, Stage::App) {
            let id = c.id;
            self.spec.outbox.send(Command::SetPid { id, pid });
        }
    }

    /// Starts a capture for connection `i` and sends its ring; the error says why not.
    fn capture(&mut self, i: usize, spec: crate::capture::CaptureSpec) -> Result<(), String> {
        let c = &self.conns[i];
        if !matches!(c.stage, Stage::Greeting) {
            self.count(|c| c.bad_messages += 1);
            return Err("a capture comes on a connection of its own, first".into());
        }
        // SAFETY: geteuid has no preconditions.
        let own = unsafe { libc::geteuid() };
        if c.uid != 0 && c.uid != own {
            return Err(format!(
                "only root or the server's own user (uid {own}) may capture: it sees every application's traffic"
            ));
        }
        if let Some(f) = &spec.filter {
            f.check()
                .map_err(|e| format!("the filter is refused: {e}"))?;
        }
        let ring = crate::capture::RingWriter::create(spec.ring_bytes)
            .map_err(|e| format!("cannot make the capture ring: {e}"))?;
        let theirs = rustix::io::fcntl_dupfd_cloexec(ring.fd(), 0)
            .map_err(|e| format!("cannot make the capture ring: {e}"))?;
        let id = c.id;
        let started = self
            .spec
            .outbox
            .ask(&self.stop, |reply| Command::Capture {
                id,
                spec,
                ring: Box::new(ring),
                reply,
            })
            .ok_or("the server is stopping")?;
        if !started {
            return Err(format!(
                "{} captures run already: stop one first",
                crate::capture::MAX_CAPTURES
            ));
        }
        self.conns[i].stage = Stage::Capture;
        let answer = Response::Capture {
            reasons: super::capturing::drop_reasons(),
        };
        if control::send_with_fd(&self.conns[i].fd, &answer, theirs.as_fd()).is_err() {
            self.hang_up(i);
        }
        Ok(())
    }

    fn hang_up(&mut self, i: usize) {
        let c = self.conns.swap_remove(i);
        if matches!(c.stage, Stage::Capture) {
            self.spec.outbox.send(Command::StopCapture { id: c.id });
        }
        if let Some(ticket) = c.for_child {
            self.spec.outbox.send(Command::DropTicket { ticket });
        }
        if matches!(c.stage, Stage::App) {
            // The data plane serves what the application queued, then drops its lines and
            // generation: only then may its regions be unmapped and its number go to another
            // application (`settle_departures`).
            let (reply, gone) = mpsc::sync_channel(1);
            if self.spec.outbox.send(Command::Detach { id: c.id, reply }) {
                self.departing.push(Departure { pch: c.pch, gone });
            }
            // Else the data plane has stopped: its regions stay mapped and its number taken.
            self.count(|k| k.detached += 1);
        } else if let Some(p) = c.pch {
            self.table().forget(p);
            self.pchs.give_back(p);
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, RegionTable> {
        self.spec
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Register`: maps the memfd that came with the request as a region of connection
    /// `i`'s application.
    /// `Request::Unread`: the bytes read from the memfd attached, checked against what the
    /// parts say, and handed to the data plane.
    fn unread(&mut self, i: usize, fd: Option<OwnedFd>, parts: Vec<(u32, u32)>) -> Response {
        let id = self.conns[i].id;
        if !matches!(self.conns[i].stage, Stage::App) {
            if let Some(fd) = fd {
                self.closer.close(fd);
            }
            self.count(|c| c.bad_messages += 1);
            return Response::Error("say Hello first".into());
        }
        let Some(fd) = fd else {
            self.count(|c| c.bad_messages += 1);
            return Response::Error(
                "Unread carries the bytes in a memfd: attach it to the message (SCM_RIGHTS)".into(),
            );
        };
        let bytes = read_unread(fd.as_fd(), &parts);
        self.closer.close(fd);
        let Some(bytes) = bytes else {
            self.count(|c| c.bad_messages += 1);
            return Response::Error(format!(
                "Unread's memfd must hold the parts' bytes (at most {} in all)",
                MAX_UNREAD
            ));
        };
        let mut at = 0;
        let parts = parts
            .iter()
            .map(|&(socket, len)| {
                let part = bytes[at..at + len as usize].to_vec();
                at += len as usize;
                (socket, part)
            })
            .collect();
        self.spec
            .outbox
            .ask(&self.stop, |reply| Command::Unread { id, parts, reply })
            .unwrap_or_else(|| Response::Error("the server is stopping".into()))
    }

    fn register(&mut self, i: usize, fd: Option<OwnedFd>, perms: Perms) -> Response {
        let Some(pch) = self.conns[i].pch else {
            self.count(|c| c.bad_messages += 1);
            return Response::Error("say Hello first".into());
        };
        let Some(fd) = fd else {
            self.count(|c| c.bad_messages += 1);
            return Response::Error(
                "Register carries the region's memfd: attach it to the message (SCM_RIGHTS)".into(),
            );
        };
        // The table checks the seals before anything else: `F_GET_SEALS` answers for a
        // memfd and refuses anything else without asking its file system (a hostile FUSE
        // file cannot stall this thread there). The descriptor is closed on the closer
        // thread, for the same reason.
        let r = self.table().register(pch, fd.as_fd(), perms);
        self.closer.close(fd);
        match r {
            Ok(id) => {
                // Lines the data plane cached as "nothing there" for this region number
                // before it existed must go.
                if !self.forget_lines(pch) {
                    return Response::Error("the server is stopping".into());
                }
                Response::Registered {
                    region: id.0,
                    bytes: self.table().region_bytes(pch, id).unwrap_or(0),
                }
            }
            Err(e) => Response::Error(format!("cannot register the region: {e}")),
        }
    }

    /// Has the data plane drop every line of `pch` (and bump its generation); whether it
    /// answered.
    fn forget_lines(&self, pch: Pch) -> bool {
        self.spec
            .outbox
            .ask(&self.stop, |reply| Command::ForgetLines { pch, reply })
            .is_some()
    }

    fn handle(&mut self, i: usize, req: Request) -> Option<Response> {
        if matches!(self.conns[i].stage, Stage::Capture) {
            self.count(|c| c.bad_messages += 1);
            return Some(Response::Error(
                "a capture's connection takes no requests: open another".into(),
            ));
        }
        let id = self.conns[i].id;
        let attached = matches!(self.conns[i].stage, Stage::App);
        let gone = || Response::Error("the server is stopping".into());
        match req {
            Request::Hello { version } => {
                if version != PROTOCOL_VERSION {
                    self.count(|c| c.bad_messages += 1);
                    return Some(Response::Error(format!(
                        "protocol version {version} is not {PROTOCOL_VERSION}: run the same shmnet version on both sides"
                    )));
                }
                if attached {
                    self.count(|c| c.bad_messages += 1);
                    return Some(Response::Error("already attached".into()));
                }
                match self.attach(i) {
                    Ok(()) => None,
                    Err(e) => Some(Response::Error(format!("cannot attach: {e}"))),
                }
            }
            Request::Bind { port } if attached => Some(
                self.spec
                    .outbox
                    .ask(&self.stop, |reply| Command::Bind { id, port, reply })
                    .unwrap_or_else(gone),
            ),
            Request::TcpListen { port, backlog } if attached => Some(
                self.spec
                    .outbox
                    .ask(&self.stop, |reply| Command::TcpListen {
                        id,
                        port,
                        backlog,
                        reply,
                    })
                    .unwrap_or_else(gone),
            ),
            Request::TcpConnect { to } if attached => Some(
                self.spec
                    .outbox
                    .ask(&self.stop, |reply| Command::TcpConnect { id, to, reply })
                    .unwrap_or_else(gone),
            ),
            Request::Multicast { socket, op } if attached => Some(
                self.spec
                    .outbox
                    .ask(&self.stop, |reply| Command::Multicast {
                        id,
                        socket,
                        op,
                        reply,
                    })
                    .unwrap_or_else(gone),
            ),
            Request::Close { socket } if attached => Some(
                self.spec
                    .outbox
                    .ask(&self.stop, |reply| Command::Close { id, socket, reply })
                    .unwrap_or_else(gone),
            ),
            Request::Fork { sockets } if attached => Some(
                self.spec
                    .outbox
                    .ask(&self.stop, |reply| Command::Fork { id, sockets, reply })
                    .unwrap_or_else(gone),
            ),
            Request::ForChild { ticket } if !attached && self.conns[i].for_child.is_none() => {
                self.conns[i].for_child = Some(ticket);
                let uid = self.conns[i].uid;
                self.spec.outbox.send(Command::HoldTicket { ticket, uid });
                None
            }
            Request::ForChild { .. } => {
                self.count(|c| c.bad_messages += 1);
                Some(Response::Error(
                    "ForChild comes first, once, on a connection made for a forked child".into(),
                ))
            }
            Request::Adopt { ticket } if attached => Some(
                self.spec
                    .outbox
                    .ask(&self.stop, |reply| Command::Adopt { id, ticket, reply })
                    .unwrap_or_else(gone),
            ),
            Request::Unregister { region } if attached => {
                let pch = self.conns[i]
                    .pch
                    .expect("attached applications have a number");
                // No translation of the region may outlive its mapping.
                if !self.forget_lines(pch) {
                    return Some(gone());
                }
                Some(match self.table().unregister(pch, RegionId(region)) {
                    Ok(()) => Response::Unregistered { region },
                    Err(e) => Response::Error(format!("cannot unregister region {region}: {e}")),
                })
            }
            Request::Register { .. } => unreachable!("served by `register`"),
            Request::Unread { .. } => unreachable!("served by `unread`"),
            Request::Capture(_) => unreachable!("served by `capture`"),
            Request::Bind { .. }
            | Request::Close { .. }
            | Request::Multicast { .. }
            | Request::Unregister { .. }
            | Request::TcpListen { .. }
            | Request::TcpConnect { .. }
            | Request::Fork { .. }
            | Request::Adopt { .. } => {
                self.count(|c| c.bad_messages += 1);
                Some(Response::Error("say Hello first".into()))
            }
            Request::Stats => Some(self.stats_response()),
            Request::Sockets { from } => Some(self.sockets_response(from)),
            Request::DriverHello { .. } | Request::DriverStats(_) => {
                self.count(|c| c.bad_messages += 1);
                Some(Response::Error(
                    "a driver attaches only while the server starts".into(),
                ))
            }
        }
    }

    fn sockets_response(&mut self, from: u64) -> Response {
        match self
            .spec
            .outbox
            .ask(&self.stop, |reply| Command::Sockets { from, reply })
        {
            Some(page) => {
                self.count(|c| c.sockets_answered += 1);
                Response::Sockets(page)
            }
            None => Response::Error(
                "the server's data plane did not answer in time: it may be stopping".into(),
            ),
        }
    }

    fn stats_response(&mut self) -> Response {
        match self
            .spec
            .outbox
            .ask(&self.stop, |reply| Command::Stats { reply })
        {
            Some(mut s) => {
                // The data plane answers commands in order: an application it no longer
                // lists has had its departure answered too. Settle it now, or the region
                // table would still show what it registered.
                self.settle_departures();
                self.count(|c| c.stats_answered += 1);
                let table = self.table();
                s.regions = table.stats();
                for a in &mut s.apps {
                    if let Some(pch) = self.conns.iter().find(|c| c.id == a.id).and_then(|c| c.pch)
                    {
                        a.pch = Some(pch.0);
                        (a.regions, a.registered_bytes) = table.usage(pch);
                    }
                }
                drop(table);
                Response::Stats(s)
            }
            None => Response::Error(
                "the server's data plane did not answer in time: it may be stopping".into(),
            ),
        }
    }

    /// Gives connection `i` its windows (or, in `ipc`, its data socket) and hands its side
    /// of them to the data plane.
    fn attach(&mut self, i: usize) -> Result<(), AttachError> {
        let pch = self.pchs.take().ok_or(AttachError::NoNumber)?;
        let r = self.attach_as(i, pch);
        match r {
            Ok(()) => self.conns[i].pch = Some(pch),
            Err(_) => self.pchs.give_back(pch),
        }
        r
    }

    fn attach_as(&mut self, i: usize, pch: Pch) -> Result<(), AttachError> {
        let conn = &self.conns[i];
        let transport: Box<dyn AppTransport> = if self.spec.ipc {
            let (ours, theirs) = rustix::net::socketpair(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::SEQPACKET,
                rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
                None,
            )
            .map_err(std::io::Error::from)?;
            control::send(
                &conn.fd,
                &Response::Welcome {
                    version: PROTOCOL_VERSION,
                    data_window: 0,
                    app_window: 0,
                    ipc: true,
                    isolated: false,
                    address: Some(self.spec.address),
                    prefix: Some(self.spec.prefix),
                },
            )?;
            control::send_fd(&conn.fd, theirs.as_fd())?;
            Box::new(IpcApp::new(ours))
        } else if self.spec.isolation == Isolation::Regions {
            // Only the application's own rings: no data window, no pool of the server's.
            let win = Window::create(&windows::region_window_spec())?;
            control::send(
                &conn.fd,
                &Response::Welcome {
                    version: PROTOCOL_VERSION,
                    data_window: 0,
                    app_window: win.size(),
                    ipc: false,
                    isolated: true,
                    address: Some(self.spec.address),
                    prefix: Some(self.spec.prefix),
                },
            )?;
            send_window(&conn.fd, &win)?;
            Box::new(RegionApp::new(win, pch, self.spec.on_miss)?)
        } else {
            let win = Window::create(&windows::app_window_spec())?;
            control::send(
                &conn.fd,
                &Response::Welcome {
                    version: PROTOCOL_VERSION,
                    data_window: self.spec.data.size(),
                    app_window: win.size(),
                    ipc: false,
                    isolated: false,
                    address: Some(self.spec.address),
                    prefix: Some(self.spec.prefix),
                },
            )?;
            send_window(&conn.fd, &self.spec.data)?;
            send_window(&conn.fd, &win)?;
            let total = self.spec.data.buffers().geometry().total();
            Box::new(ShmApp::new(
                win,
                self.spec.data.buffer_limits(),
                total,
                pch,
            )?)
        };
        let (id, pid, uid) = (conn.id, conn.pid, conn.uid);
        self.spec.outbox.send(Command::Attach {
            id,
            pch,
            pid,
            uid,
            transport,
        });
        self.conns[i].stage = Stage::App;
        self.count(|c| c.attached += 1);
        Ok(())
    }
}

/// Why an application could not attach.
#[derive(Debug, thiserror::Error)]
enum AttachError {
    #[error("{} applications are attached, as many as can be numbered", Pch::MAX as u32 + 1)]
    NoNumber,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Control(#[from] control::ControlError),
    #[error("creating its window: {0}")]
    Window(shmnet_chan::window::CreateError),
    #[error("taking its window's ends: {0}")]
    Handle(shmnet_chan::window::HandleError),
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<shmnet_chan::window::HandleError> for AttachError {
    fn from(e: shmnet_chan::window::HandleError) -> Self {
        Self::Handle(e)
    }
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<shmnet_chan::window::CreateError> for AttachError {
    fn from(e: shmnet_chan::window::CreateError) -> Self {
        Self::Window(e)
    }
}

/// Waits for one message on a non-blocking socket until `deadline`.
pub(crate) fn wait_message<T: serde::de::DeserializeOwned>(
    fd: &OwnedFd,
    buf: &mut [u8],
    deadline: Instant,
) -> Option<T> {
    loop {
        match control::recv_raw(fd, buf) {
            Ok(Some(n)) => return serde_json::from_slice(&buf[..n]).ok(),
            Ok(None) => {}
            Err(_) => return None,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }
}

/// Most bytes one `Request::Unread` gives back: what an application may have taken off
/// every connection's receive buffer, with room to spare.
const MAX_UNREAD: usize = 64 << 20;

/// The bytes of `parts` from memfd `fd` (checked to be a memfd first, as regions are, so
/// that no other kind of file can stall this thread); `None` if it is not one, or holds
/// fewer bytes than the parts say, or they pass [`MAX_UNREAD`].
fn read_unread(fd: rustix::fd::BorrowedFd<'_>, parts: &[(u32, u32)]) -> Option<Vec<u8>> {
    rustix::fs::fcntl_get_seals(fd).ok()?;
    let want = parts
        .iter()
        .try_fold(0usize, |n, &(_, len)| n.checked_add(len as usize))?;
    if want > MAX_UNREAD {
        return None;
    }
    let mut bytes = vec![0u8; want];
    let mut got = 0;
    while got < want {
        let n = rustix::io::pread(fd, &mut bytes[got..], got as u64).ok()?;
        if n == 0 {
            return None;
        }
        got += n;
    }
    Some(bytes)
}
