//! One driver, several protocol servers: seed 002's first-level demultiplexing across
//! server processes. `shmnet driver --listen PATH` opens a device and listens; each server
//! that attaches (`shmnet serve --attach PATH`) hands the driver its data window and says
//! which families it takes ([`Families`]: IPv4 with ARP, IPv6, or both). Every frame the
//! device receives lands in the pools of the one server that takes its family, and goes to
//! that server's IN queue; each server's OUT queue is drained to the device.
//!
//! Isolation between the servers:
//! - Each server's frames live only in its own window: no server can see another's traffic,
//!   and the driver's buffers for a server come from that server's pools.
//! - A server that dies (even `kill -9`) hangs up its attach socket: the driver drops its
//!   attachment — its window, and with it every buffer the dead server held — and goes on
//!   feeding the others. Its families are free again; a server started anew attaches again.
//! - A server that stops reading fills its own IN queue: its frames are dropped and counted
//!   (`in_queue_full` in the stats it is sent), never held in the device where they would
//!   block the other servers' frames behind them (the single-server driver leaves them in
//!   the device instead, which is lossless there and would be head-of-line blocking here).
//!
//! The driver's data path stays what [`crate::driver_host`]'s is: no syscall while there is
//! work, no allocation (attachments arrive and leave on the control path, at most
//! [`MAX_SERVERS`]), no lock a server can hold (the rings are wait-free; seed 002's queues
//! give up at once on the driver's side).

use crate::control::{self, ControlError, Request, Response};
use crate::driver::{Driver, DriverStats, Families, Family, RxFrame, RxPools, classify};
use crate::driver_host::{AttachedDriver, DriverEnds, DriverQueues, DriverThreadStats};
use crate::faithful_link::FaithfulDriverEnds;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::{BorrowedFd, OwnedFd};
use shmnet_chan::{Desc, DriverPools, Window};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// The most servers one shared driver feeds at once (one per family today; room for
/// servers that split families further).
pub const MAX_SERVERS: usize = 8;

/// The most connections greeted or watched at once: every attached server, and a few
/// being greeted (a client that connects and says nothing holds one for
/// [`HANDSHAKE_PATIENCE`]).
const MAX_THREADS: usize = MAX_SERVERS + 8;

/// How long an attaching server may take over its handshake.
const HANDSHAKE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// What a shared driver did, for its final report (and its tests).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SharedDriverStats {
    /// The device's counters.
    pub driver: DriverStats,
    /// Servers that attached.
    pub attached: u64,
    /// Servers that went away (hung up, or died).
    pub detached: u64,
    /// Attach attempts refused: a family already taken, too many servers, a broken
    /// handshake.
    pub refused: u64,
    /// Servers attached now, with the families each takes.
    pub serving: Vec<ServedNow>,
}

/// One attached server, as the shared driver sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServedNow {
    /// Its families.
    pub families: Families,
    /// Frames handed to its IN queues.
    pub rx_frames: u64,
    /// Frames taken from its OUT queue.
    pub tx_frames: u64,
    /// Its frames dropped because its IN queue was full.
    pub in_queue_full: u64,
    /// Frames it queued to send that were not of its families (an IPv6 server's IPv4 or
    /// ARP, say), dropped: a server speaks for its own families only.
    pub tx_refused: u64,
}

/// The two kinds of queues a server may join the driver with.
enum Ends {
    Rings(DriverEnds),
    Faithful(FaithfulDriverEnds),
}

impl Ends {
    fn queues(&mut self) -> &mut dyn QueuesDyn {
        match self {
            Ends::Rings(e) => e,
            Ends::Faithful(e) => e,
        }
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Ends::Rings(e) => DriverQueues::out_wake_fd(e),
            Ends::Faithful(e) => DriverQueues::out_wake_fd(e),
        }
    }
}

/// [`DriverQueues`] without its generic `sleep`, so both kinds fit one list; the shared
/// loop sleeps on every server's OUT queue at once instead.
trait QueuesDyn {
    fn pools(&mut self) -> &mut DriverPools;
    fn in_room_of(&mut self, family: Family) -> usize;
    fn enqueue_in(&mut self, family: Family, frames: &[Desc]) -> usize;
    fn dequeue_out(&mut self, out: &mut [Desc]) -> usize;
    fn prepare_wait(&mut self) -> bool;
    fn finish_wait(&mut self);
}

macro_rules! queues_dyn {
    ($t:ty) => {
        impl QueuesDyn for $t {
            fn pools(&mut self) -> &mut DriverPools {
                DriverQueues::pools(self)
            }
            fn in_room_of(&mut self, family: Family) -> usize {
                DriverQueues::in_room_of(self, family)
            }
            fn enqueue_in(&mut self, family: Family, frames: &[Desc]) -> usize {
                DriverQueues::enqueue_in(self, family, frames)
            }
            fn dequeue_out(&mut self, out: &mut [Desc]) -> usize {
                DriverQueues::dequeue_out(self, out)
            }
            fn prepare_wait(&mut self) -> bool {
                DriverQueues::out_prepare_wait(self)
            }
            fn finish_wait(&mut self) {
                DriverQueues::out_finish_wait(self)
            }
        }
    };
}
queues_dyn!(DriverEnds);
queues_dyn!(FaithfulDriverEnds);

/// One attached server, as the drive loop holds it.
struct Attachment {
    families: Families,
    ends: Ends,
    /// Keeps the server's data window mapped while `ends` point into it (dropped after).
    _data: Window,
    /// Set by its watcher when the server hung up.
    gone: Arc<AtomicBool>,
    /// What its watcher sends the server every 100 ms.
    stats: Arc<Mutex<DriverThreadStats>>,
    /// Room left in its IN queues this burst: IP (IPv4 and IPv6) and ARP, each its own
    /// (a full ARP queue sheds no IP frame).
    room: [usize; 2],
    /// This burst's frames for it, by IN queue (the slots of `room`).
    queued: [Vec<Desc>; 2],
    counts: ServedNow,
}

/// A server's two IN queues, by the family that names each: IP (IPv4 and IPv6), then ARP.
const SLOTS: [Family; 2] = [Family::Ipv4, Family::Arp];

/// The slot of [`SLOTS`] a frame of `family` goes to.
fn slot(family: Family) -> usize {
    usize::from(family == Family::Arp)
}

/// The receive side's view of the attachments: each family's frames go into the pools of
/// the server that takes it, while its IN queues have room.
struct Router<'a> {
    atts: &'a mut [Attachment],
}

impl RxPools for Router<'_> {
    fn pools_for(&mut self, family: Family) -> Option<&mut DriverPools> {
        let a = self.atts.iter_mut().find(|a| a.families.contains(family))?;
        let room = &mut a.room[slot(family)];
        if *room == 0 {
            a.counts.in_queue_full += 1;
            return None;
        }
        *room -= 1;
        Some(a.ends.queues().pools())
    }

    fn single(&mut self) -> Option<&mut DriverPools> {
        match self.atts {
            [one] => Some(one.ends.queues().pools()),
            _ => None,
        }
    }
}

/// What happened to one attaching server (given to [`SharedDriver::on_event`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SharedDriverEvent {
    /// A server attached.
    Attached {
        /// Its number (counted from 1 by the driver, in order of connection).
        server: u64,
        /// The families it takes now.
        families: Families,
    },
    /// A server went away (hung up, exited or was killed); its families are free.
    Detached {
        /// Its number.
        server: u64,
    },
    /// An attach attempt was turned away.
    Refused {
        /// Its number.
        server: u64,
        /// Why.
        why: Refusal,
    },
}

/// Why a server was not attached.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Other attached servers already take one of its families.
    #[error("the shared driver already gives its {} frames to other servers: {}", .taken.name(), match .free {
        Some(f) => format!("give this one --family {}", f.name()),
        None => "stop one of them first, or give this server a device of its own".to_string(),
    })]
    FamilyTaken {
        /// The families the attached servers take.
        taken: Families,
        /// What is still free, if anything.
        free: Option<Families>,
    },
    /// It asked for no family at all.
    #[error("it takes no family: give it --family ipv4, ipv6 or both")]
    NoFamily,
    /// [`MAX_SERVERS`] are attached.
    #[error("the shared driver feeds {MAX_SERVERS} servers already")]
    Full,
    /// The handshake broke off or was malformed (`what` says where).
    #[error("its handshake failed: {0}")]
    Handshake(String),
}

/// Where a shared driver's events go.
type EventSink = Arc<dyn Fn(&SharedDriverEvent) + Send + Sync>;

/// The families attached servers take, shared by the handshake threads and the loop.
#[derive(Default)]
struct Claims {
    taken: Vec<(u64, Families)>,
}

/// A shared driver: the device, the servers attached to it, and the threads that greet
/// and watch them.
pub struct SharedDriver {
    listener: OwnedFd,
    mac: [u8; 6],
    claims: Arc<Mutex<Claims>>,
    counts: Arc<Counts>,
    events: EventSink,
    /// Greeter and watcher threads running.
    threads: Arc<std::sync::atomic::AtomicUsize>,
}

#[derive(Default)]
struct Counts {
    attached: AtomicU64,
    detached: AtomicU64,
    refused: AtomicU64,
}

/// Why a shared driver could not start.
#[derive(Debug, thiserror::Error)]
pub enum SharedDriverError {
    /// Its listening socket could not be made.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Its wake-up event could not be made.
    #[error("making the shared driver's wake-up event: {0}")]
    Io(#[from] std::io::Error),
    /// The device gave up for good.
    #[error("the device failed: {0}")]
    Device(String),
}

impl SharedDriver {
    /// Listens at `socket` for servers, which will be told `mac` (the device's address,
    /// which they answer for).
    pub fn listen(socket: &std::path::Path, mac: [u8; 6]) -> Result<Self, SharedDriverError> {
        Ok(Self {
            listener: control::listen(socket)?,
            mac,
            claims: Arc::default(),
            counts: Arc::default(),
            events: Arc::new(|_: &SharedDriverEvent| {}),
            threads: Arc::default(),
        })
    }

    /// What the thread greeting connection `id` needs of the driver.
    fn party(&self, id: u64) -> Party {
        Party {
            id,
            mac: self.mac,
            claims: self.claims.clone(),
            counts: self.counts.clone(),
            events: self.events.clone(),
        }
    }

    /// Calls `sink` for every server that attaches, goes, or is refused (from the threads
    /// that greet and watch them: it must not block for long).
    pub fn on_event(mut self, sink: impl Fn(&SharedDriverEvent) + Send + Sync + 'static) -> Self {
        self.events = Arc::new(sink);
        self
    }

    /// Drives `driver` for the servers that attach, until `stop` is set; `report` is kept
    /// up to date (every 100 ms at most while idle). Returns the final counters, or why the
    /// device gave up.
    pub fn run<D: Driver>(
        self,
        mut driver: D,
        stop: &AtomicBool,
        report: &Mutex<SharedDriverStats>,
    ) -> Result<SharedDriverStats, SharedDriverError> {
        let wake = Arc::new(
            rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
            )
            .map_err(std::io::Error::from)?,
        );
        let (tx, rx) = mpsc::channel::<Attachment>();
        let mut next_id = 0u64;
        // The greeters and watchers are not scoped (a silent client may hold one up for
        // as long as it stays connected): they stop on this flag, set when the loop ends.
        let quit = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| -> Result<SharedDriverStats, SharedDriverError> {
            // The acceptor: greets each server on a thread of its own (a slow or silent
            // client holds up no other), which then watches it.
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let mut fds = [PollFd::new(&self.listener, PollFlags::IN)];
                    let ts = Timespec {
                        tv_sec: 0,
                        tv_nsec: 100_000_000,
                    };
                    if rustix::event::poll(&mut fds, Some(&ts)).unwrap_or(0) == 0 {
                        continue;
                    }
                    let ctl = match control::accept(&self.listener) {
                        Ok(Some(ctl)) => ctl,
                        Ok(None) => continue,
                        // Out of fds (or worse): the connection stays queued and the listener
                        // readable; rest rather than spin beside the driver's loop.
                        Err(_) => {
                            std::thread::sleep(std::time::Duration::from_millis(100));
                            continue;
                        }
                    };
                    next_id += 1;
                    let id = next_id;
                    // Each connection holds a thread while it greets and, attached, while
                    // it is watched: past MAX_THREADS the newcomer is turned away at once.
                    if self.threads.load(Ordering::Relaxed) >= MAX_THREADS {
                        let party = self.party(id);
                        party.refuse(Some(&ctl), Refusal::Full);
                        continue;
                    }
                    let (tx, wake, quit) = (tx.clone(), wake.clone(), quit.clone());
                    let party = self.party(id);
                    let threads = self.threads.clone();
                    threads.fetch_add(1, Ordering::Relaxed);
                    let spawned = std::thread::Builder::new()
                        .name("shmnet-attach".into())
                        .spawn(move || {
                            party.greet_and_watch(ctl, &tx, &wake, &quit);
                            threads.fetch_sub(1, Ordering::Relaxed);
                        });
                    if spawned.is_err() {
                        self.threads.fetch_sub(1, Ordering::Relaxed);
                        self.counts.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            let out = drive_shared(&mut driver, &rx, &wake, &self, stop, report);
            stop.store(true, Ordering::Relaxed);
            quit.store(true, Ordering::Relaxed);
            out
        })
    }
}

/// A server's claim on its families, released when dropped.
struct ClaimGuard<'a>(&'a Party);

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.0.claims.lock() {
            c.taken.retain(|(i, _)| *i != self.0.id);
        }
    }
}

/// What a greeter thread knows of the driver: the attaching server's number, the MAC it
/// is told, the claims it joins, the counters and the events it reports.
struct Party {
    id: u64,
    mac: [u8; 6],
    claims: Arc<Mutex<Claims>>,
    counts: Arc<Counts>,
    events: EventSink,
}

impl Party {
    /// Counts and reports a refusal, and tells the server why if `ctl` still listens.
    fn refuse(&self, ctl: Option<&OwnedFd>, why: Refusal) {
        self.counts.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(ctl) = ctl {
            let st = DriverThreadStats {
                stopped: Some(why.to_string()),
                ..DriverThreadStats::default()
            };
            let _ = control::send(ctl, &Request::DriverStats(Box::new(st)));
        }
        (self.events)(&SharedDriverEvent::Refused {
            server: self.id,
            why,
        });
    }

    /// Claims `families` for this server, or says which attached server holds one of them;
    /// the claim is released when the guard drops (on every way out, a panic included).
    fn claim(&self, families: Families) -> Result<ClaimGuard<'_>, Refusal> {
        if families == Families::NONE {
            return Err(Refusal::NoFamily);
        }
        let mut c = self.claims.lock().map_err(|_| Refusal::Full)?;
        let taken = c
            .taken
            .iter()
            .fold(Families::NONE, |all, (_, f)| all.union(*f));
        if taken.overlaps(families) {
            return Err(Refusal::FamilyTaken {
                taken,
                free: Families::BOTH.minus(taken),
            });
        }
        if c.taken.len() >= MAX_SERVERS {
            return Err(Refusal::Full);
        }
        c.taken.push((self.id, families));
        Ok(ClaimGuard(self))
    }

    /// Greets one attaching server on `ctl`, claims its families, hands the attachment to
    /// the loop, then watches it: its counters go to the server every 100 ms, and its
    /// hang-up marks the attachment gone.
    fn greet_and_watch(
        self,
        ctl: OwnedFd,
        tx: &mpsc::Sender<Attachment>,
        wake: &OwnedFd,
        stop: &AtomicBool,
    ) {
        // The handshake reads the window's fds with plain blocking receives (as a driver
        // process does): the accepted socket blocks for it, each receive for
        // HANDSHAKE_PATIENCE at most.
        let blocking = rustix::io::ioctl_fionbio(&ctl, false).and_then(|()| {
            rustix::net::sockopt::set_socket_timeout(
                &ctl,
                rustix::net::sockopt::Timeout::Recv,
                Some(HANDSHAKE_PATIENCE),
            )
        });
        if let Err(e) = blocking {
            let why = Refusal::Handshake(std::io::Error::from(e).to_string());
            return self.refuse(Some(&ctl), why);
        }
        let deadline = std::time::Instant::now() + HANDSHAKE_PATIENCE;
        let (attached, _setup) =
            match crate::driver_host::greet(ctl, Some(self.mac), Some(deadline)) {
                Ok(a) => a,
                Err(e) => return self.refuse(None, Refusal::Handshake(e.to_string())),
            };
        let AttachedDriver {
            ctl,
            data,
            faithful,
            families,
        } = attached;
        let _claim = match self.claim(families) {
            Ok(c) => c,
            Err(why) => return self.refuse(Some(&ctl), why),
        };
        // Ready: the device is open (it has been since the driver started).
        if let Err(e) = control::send(&ctl, &Request::DriverStats(Box::default())) {
            return self.refuse(None, Refusal::Handshake(e.to_string()));
        }
        if !matches!(wait_start(&ctl, HANDSHAKE_PATIENCE), Some(Response::Start)) {
            let why = Refusal::Handshake("no word to start in time".into());
            return self.refuse(None, why);
        }
        let ends = match faithful {
            Some(f) => match data.driver_pools() {
                Ok(pools) => Ends::Faithful(f.driver_ends(pools, data.buffer_limits())),
                Err(e) => {
                    return self.refuse(Some(&ctl), Refusal::Handshake(e.to_string()));
                }
            },
            None => match DriverEnds::try_take(&data) {
                Ok(ends) => Ends::Rings(ends),
                Err(e) => return self.refuse(Some(&ctl), Refusal::Handshake(e.to_string())),
            },
        };
        let gone = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(DriverThreadStats::default()));
        let att = Attachment {
            families,
            ends,
            _data: data,
            gone: gone.clone(),
            stats: stats.clone(),
            room: [0; 2],
            queued: [Vec::with_capacity(32), Vec::with_capacity(32)],
            counts: ServedNow {
                families,
                ..ServedNow::default()
            },
        };
        if tx.send(att).is_err() {
            // The loop has ended: the driver is stopping.
            return;
        }
        (self.events)(&SharedDriverEvent::Attached {
            server: self.id,
            families,
        });
        let _ = rustix::io::write(wake, &1u64.to_ne_bytes());
        // The watcher.
        loop {
            let mut fds = [PollFd::new(&ctl, PollFlags::IN)];
            let ts = Timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            };
            let ready = rustix::event::poll(&mut fds, Some(&ts)).unwrap_or(0);
            let hup = ready > 0 && control::recv::<Response>(&ctl).is_err();
            let st = stats.lock().map(|s| s.clone()).unwrap_or_default();
            if hup
                || stop.load(Ordering::Relaxed)
                || control::send(&ctl, &Request::DriverStats(Box::new(st))).is_err()
            {
                break;
            }
        }
        gone.store(true, Ordering::Release);
        let _ = rustix::io::write(wake, &1u64.to_ne_bytes());
        drop(_claim);
        if !stop.load(Ordering::Relaxed) {
            (self.events)(&SharedDriverEvent::Detached { server: self.id });
        }
    }
}

/// Waits up to `patience` for the server's word to start.
fn wait_start(ctl: &OwnedFd, patience: std::time::Duration) -> Option<Response> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        let left = deadline.checked_duration_since(std::time::Instant::now())?;
        let mut fds = [PollFd::new(ctl, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        if rustix::event::poll(&mut fds, Some(&ts)).ok()? == 0 {
            return None;
        }
        match control::recv::<Response>(ctl) {
            Ok(Some(r)) => return Some(r),
            Ok(None) => continue,
            Err(_) => return None,
        }
    }
}

/// The shared driver's loop: device → each family's server, each server's OUT → device.
fn drive_shared<D: Driver>(
    driver: &mut D,
    arrivals: &mpsc::Receiver<Attachment>,
    wake: &OwnedFd,
    shared: &SharedDriver,
    stop: &AtomicBool,
    report: &Mutex<SharedDriverStats>,
) -> Result<SharedDriverStats, SharedDriverError> {
    let mut atts: Vec<Attachment> = Vec::with_capacity(MAX_SERVERS);
    let mut rx: Vec<RxFrame> = Vec::with_capacity(32);
    let mut out = [Desc::default(); 32];
    let mut out_idx: Vec<u32> = Vec::with_capacity(32);
    let mut rounds = 0u64;
    // Idle rounds in a row in which a server's OUT queue would not arm its wake-up.
    let mut restless = 0u32;
    let mut failed = None;
    while !stop.load(Ordering::Relaxed) {
        // Control events: servers that came, servers that went.
        update_attachments(arrivals, &mut atts, shared);
        for a in &mut atts {
            let q = a.ends.queues();
            a.room = SLOTS.map(|family| q.in_room_of(family));
        }
        rx.clear();
        // Called even with no server: the device does its health checks there.
        if let Err(e) = driver.rx_burst(&mut Router { atts: &mut atts }, &mut rx, 32) {
            failed = Some(e.to_string());
            break;
        }
        for f in &rx {
            let d = Desc::new(f.buf, f.len);
            if let Some(a) = atts.iter_mut().find(|a| a.families.contains(f.family)) {
                a.queued[slot(f.family)].push(d);
            }
        }
        let mut sent = 0;
        for a in &mut atts {
            for (family, frames) in SLOTS.into_iter().zip(&mut a.queued) {
                if frames.is_empty() {
                    continue;
                }
                let q = a.ends.queues();
                let placed = q.enqueue_in(family, frames);
                a.counts.rx_frames += placed as u64;
                for d in &frames[placed..] {
                    a.counts.in_queue_full += 1;
                    q.pools().release(d.buf);
                }
                frames.clear();
            }
            let q = a.ends.queues();
            let n = q.dequeue_out(&mut out);
            if n > 0 {
                out_idx.clear();
                for d in &out[..n] {
                    if sends_for(q.pools(), d.buf, a.families) {
                        out_idx.push(d.buf);
                    } else {
                        a.counts.tx_refused += 1;
                        q.pools().release(d.buf);
                    }
                }
                a.counts.tx_frames += out_idx.len() as u64;
                sent += n;
                if let Err(e) = driver.tx_burst(q.pools(), &out_idx) {
                    failed = Some(e.to_string());
                }
            }
        }
        if failed.is_some() {
            break;
        }
        rounds += 1;
        let idle = rx.is_empty() && sent == 0;
        if idle || rounds % 64 == 0 {
            publish(driver, &atts, shared, report);
        }
        if idle {
            // A nap taken for a restless server keeps the count: the next idle round naps
            // too, until there is real work.
            let napping = restless >= RESTLESS_ROUNDS;
            if !sleep_shared(driver, &mut atts, wake, napping) {
                restless += 1;
            } else if !napping {
                restless = 0;
            }
        } else {
            restless = 0;
        }
    }
    // Servers that arrived since the last round are counted and listed; those that hung up
    // are gone, not serving.
    update_attachments(arrivals, &mut atts, shared);
    publish(driver, &atts, shared, report);
    let last = report.lock().map(|r| r.clone()).unwrap_or_default();
    match failed {
        Some(e) => Err(SharedDriverError::Device(e)),
        None => Ok(last),
    }
}

/// Takes the servers whose handshake is done into the loop's list (counted `attached` here,
/// so that every server counted is listed until it goes), and drops those that hung up
/// (counted `detached`): their windows are unmapped with them.
fn update_attachments(
    arrivals: &mpsc::Receiver<Attachment>,
    atts: &mut Vec<Attachment>,
    shared: &SharedDriver,
) {
    while let Ok(a) = arrivals.try_recv() {
        atts.push(a);
        shared.counts.attached.fetch_add(1, Ordering::Relaxed);
    }
    let before = atts.len();
    atts.retain(|a| !a.gone.load(Ordering::Acquire));
    let gone = (before - atts.len()) as u64;
    shared.counts.detached.fetch_add(gone, Ordering::Relaxed);
}

/// Whether the frame in buffer `buf` is of `families`: demultiplexed by [`classify`], as
/// received frames are, from its first bytes read out of the server's memory (untrusted:
/// anything unreadable, short or of another family is refused).
fn sends_for(pools: &DriverPools, buf: u32, families: Families) -> bool {
    /// Enough for an Ethernet header and the longest smallest header `classify` asks for.
    const HEAD: usize = 14 + 40;
    let b = pools.buffers();
    let Some((off, len)) = b.off_len(buf) else {
        return false;
    };
    let mut head = [0u8; HEAD];
    let head = &mut head[..usize::from(len).min(HEAD)];
    b.read(buf, usize::from(off), head).is_ok()
        && classify(head).is_ok_and(|family| families.contains(family))
}

/// Updates every server's counters (which its watcher sends it) and the driver's report.
fn publish<D: Driver>(
    driver: &D,
    atts: &[Attachment],
    shared: &SharedDriver,
    report: &Mutex<SharedDriverStats>,
) {
    let dev = driver.stats();
    for a in atts {
        if let Ok(mut s) = a.stats.lock() {
            s.driver = dev.clone();
            s.in_queue_full = a.counts.in_queue_full;
            if let Ends::Faithful(f) = &a.ends {
                DriverQueues::publish(f, &mut s);
            }
        }
    }
    if let Ok(mut r) = report.lock() {
        r.driver = dev;
        r.attached = shared.counts.attached.load(Ordering::Relaxed);
        r.detached = shared.counts.detached.load(Ordering::Relaxed);
        r.refused = shared.counts.refused.load(Ordering::Relaxed);
        r.serving.clear();
        r.serving.extend(atts.iter().map(|a| a.counts.clone()));
    }
}

/// Idle rounds in a row after which a server whose OUT queue will not arm (it says it has
/// work, and gives none: its window's wake-up is gone, or it holds seed 002's lock) no
/// longer keeps the loop from sleeping: the loop then naps 1 ms at a time.
const RESTLESS_ROUNDS: u32 = 64;

/// Sleeps until the device, a server's OUT queue or a control event has something (or
/// 100 ms have passed: the stop flag and the counters stay that fresh). Returns without
/// sleeping when a queue has work as it is armed — unless `restless`, when it naps 1 ms
/// instead. Returns whether it slept.
fn sleep_shared<D: Driver>(
    driver: &D,
    atts: &mut [Attachment],
    wake: &OwnedFd,
    restless: bool,
) -> bool {
    let mut armed = 0;
    let mut work = false;
    for a in atts.iter_mut() {
        if a.ends.queues().prepare_wait() {
            armed += 1;
        } else {
            work = true;
            break;
        }
    }
    if !work || restless {
        // On the stack (the loop allocates nothing): the wake-up event, the device, and
        // each armed server's OUT queue.
        let mut fds: [PollFd<'_>; 2 + MAX_SERVERS] =
            std::array::from_fn(|_| PollFd::new(wake, PollFlags::IN));
        let mut n = 1;
        let wanted = driver
            .rx_fd()
            .into_iter()
            .chain(atts.iter().take(armed).filter_map(|a| a.ends.wake_fd()));
        for fd in wanted.take(fds.len() - 1) {
            fds[n] = PollFd::from_borrowed_fd(fd, PollFlags::IN);
            n += 1;
        }
        let ts = Timespec {
            tv_sec: 0,
            tv_nsec: if work { 1_000_000 } else { 100_000_000 },
        };
        let _ = rustix::event::poll(&mut fds[..n], Some(&ts));
        let mut drained = [0u8; 8];
        let _ = rustix::io::read(wake, &mut drained);
    }
    for a in atts.iter_mut().take(armed) {
        a.ends.queues().finish_wait();
    }
    !work || restless
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server speaks for its own families: what it queues to send is checked by the
    /// EtherType in its own (untrusted) memory.
    #[test]
    fn a_server_sends_only_frames_of_its_families() {
        let spec = crate::windows::data_window_spec(
            crate::inline::ServeConfig::default().pools,
            shmnet_chan::PageSize::Small,
        );
        let window = Window::create(&spec).unwrap();
        let mut pools = window.driver_pools().unwrap();
        // (EtherType, frame length): IPv4, ARP, IPv6, LLDP, and a runt.
        let frames = [
            (0x0800u16, 60usize),
            (0x0806, 42),
            (0x86dd, 80),
            (0x88cc, 60),
            (0x0800, 13),
        ];
        let mut bufs = Vec::new();
        for (ethertype, len) in frames {
            let buf = pools.alloc().unwrap();
            let mut bytes = vec![0u8; len];
            if len >= 14 {
                bytes[12..14].copy_from_slice(&ethertype.to_be_bytes());
            }
            pools.buffers().write(buf, 0, &bytes).unwrap();
            pools.buffers().set_off_len(buf, 0, len as u16).unwrap();
            bufs.push(buf);
        }
        let sends = |f: Families| {
            bufs.iter()
                .map(|&b| sends_for(&pools, b, f))
                .collect::<Vec<_>>()
        };
        assert_eq!(sends(Families::IPV4), [true, true, false, false, false]);
        assert_eq!(sends(Families::IPV6), [false, false, true, false, false]);
        assert_eq!(sends(Families::BOTH), [true, true, true, false, false]);
        assert!(
            !sends_for(&pools, u32::MAX, Families::BOTH),
            "a bad index is refused"
        );
    }
}
