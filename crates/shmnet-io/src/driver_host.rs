//! The driver's side of the `server` and `ipc` structures: the loop that moves frames
//! between a device and the data window (as a thread of the server, or as a process of its
//! own attached through the control socket), and its `ipc` twin that copies every frame
//! through a socket instead.

use crate::control::{self, ControlError, PROTOCOL_VERSION, Request, Response};
use crate::driver::{Driver, DriverStats, Families, Family, RxFrame, ServedPools};
use crate::faithful_link::{FaithfulDriverEnds, FaithfulDriverStats};
use crate::spec::DriverSetup;
use crate::windows::{IN_ARP, IN_IP, OUT};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::{AsFd, OwnedFd};
use shmnet_chan::{Consumer, Desc, DriverPools, Producer, Window};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The driver's counters, as the server loop sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DriverThreadStats {
    /// The driver's own counters.
    pub driver: DriverStats,
    /// Frames dropped because an IN queue was full.
    pub in_queue_full: u64,
    /// CPU microseconds the driver thread used (user + system), filled in when it stops (a
    /// driver process's are its parent's to read from `wait`).
    #[serde(default)]
    pub cpu_us: u64,
    /// Why the driver stopped, if it gave up (its device failed for good).
    #[serde(default)]
    pub stopped: Option<String>,
    /// `--sync faithful`: the driver's side of seed 002's queues.
    #[serde(default)]
    pub faithful: Option<FaithfulDriverStats>,
}

/// CPU seconds (user + system) used by `who`: `libc::RUSAGE_THREAD` (the calling thread),
/// `RUSAGE_SELF` (this process) or `RUSAGE_CHILDREN` (its reaped children).
pub fn rusage_cpu_s(who: libc::c_int) -> f64 {
    // SAFETY: `getrusage` writes one `rusage` into the zeroed value we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The driver's ends of the data window.
pub(crate) struct DriverEnds {
    pools: DriverPools,
    in_ip: Producer,
    in_arp: Producer,
    out: Consumer,
}

impl DriverEnds {
    /// The driver's ends of a window this process made (taken once: cannot fail).
    pub(crate) fn take(data: &Window) -> Self {
        Self::try_take(data).expect("the driver's ends of a fresh window are taken once")
    }

    /// The driver's ends of a window another party handed over: its header is that party's
    /// word, and a window without the rings a driver needs is refused, not trusted.
    pub(crate) fn try_take(data: &Window) -> Result<Self, shmnet_chan::window::HandleError> {
        Ok(Self {
            pools: data.driver_pools()?,
            in_ip: data.producer(IN_IP)?,
            in_arp: data.producer(IN_ARP)?,
            out: data.consumer(OUT)?,
        })
    }
}

/// The driver's ends of its IN and OUT queues, whichever kind joins it to the server: the
/// loop in [`drive`] is the same for both.
pub(crate) trait DriverQueues {
    /// The pools the driver fills and frees.
    fn pools(&mut self) -> &mut DriverPools;
    /// Frames both IN queues can take now without dropping one.
    fn in_room(&mut self) -> usize {
        self.in_room_of(Family::Ipv4)
            .min(self.in_room_of(Family::Arp))
    }
    /// Frames the IN queue of `family` can take now.
    fn in_room_of(&mut self, family: Family) -> usize;
    /// Appends `frames` to the IN queue of `family`; returns how many it took (the caller
    /// releases the rest).
    fn enqueue_in(&mut self, family: Family, frames: &[Desc]) -> usize;
    /// Takes up to `out.len()` frames to transmit.
    fn dequeue_out(&mut self, out: &mut [Desc]) -> usize;
    /// Sleeps until the device or the server has something (`full`: the IN queues had no
    /// room, so the device is left alone).
    fn sleep<D: Driver>(&mut self, driver: &D, full: bool);
    /// Adds the queues' own counters to the driver's.
    fn publish(&self, _stats: &mut DriverThreadStats) {}
    /// Announces that the driver is about to sleep on the OUT queue; false if it has work
    /// already (then do not sleep, and do not call `out_finish_wait`).
    fn out_prepare_wait(&mut self) -> bool;
    /// What a driver sleeping on the OUT queue polls.
    fn out_wake_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>>;
    /// Ends a sleep `out_prepare_wait` announced.
    fn out_finish_wait(&mut self);
}

impl DriverQueues for DriverEnds {
    fn pools(&mut self) -> &mut DriverPools {
        &mut self.pools
    }

    fn in_room_of(&mut self, family: Family) -> usize {
        match family {
            Family::Ipv4 | Family::Ipv6 => self.in_ip.free_slots() as usize,
            Family::Arp => self.in_arp.free_slots() as usize,
        }
    }

    fn enqueue_in(&mut self, family: Family, frames: &[Desc]) -> usize {
        match family {
            Family::Ipv4 | Family::Ipv6 => self.in_ip.enqueue_burst(frames),
            Family::Arp => self.in_arp.enqueue_burst(frames),
        }
    }

    fn dequeue_out(&mut self, out: &mut [Desc]) -> usize {
        self.out.dequeue_burst(out)
    }

    fn sleep<D: Driver>(&mut self, driver: &D, full: bool) {
        sleep_driver(driver, self, full)
    }

    fn out_prepare_wait(&mut self) -> bool {
        self.out.prepare_wait()
    }

    fn out_wake_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.out.wake_fd()
    }

    fn out_finish_wait(&mut self) {
        self.out.finish_wait()
    }
}

/// How soon a driver whose faithful IN queue was full looks again: seed 002's queues have
/// no room event (its driver dropped what did not fit), so the device's frames wait there
/// and the driver looks again this soon.
const FAITHFUL_FULL_RECHECK: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 200_000,
};

impl DriverQueues for FaithfulDriverEnds {
    fn pools(&mut self) -> &mut DriverPools {
        &mut self.pools
    }

    fn in_room_of(&mut self, family: Family) -> usize {
        match family {
            Family::Ipv4 | Family::Ipv6 => self.in_ip.free_hint() as usize,
            Family::Arp => self.in_arp.free_hint() as usize,
        }
    }

    fn enqueue_in(&mut self, family: Family, frames: &[Desc]) -> usize {
        let q = match family {
            Family::Ipv4 | Family::Ipv6 => &mut self.in_ip,
            Family::Arp => &mut self.in_arp,
        };
        match q.enqueue_burst(frames) {
            shmnet_chan::faithful::Pushed::Took(k) => k,
            // Both sub-queues held by the server: the seed's driver drops (counted there as
            // `busy`, here also as a full IN queue).
            shmnet_chan::faithful::Pushed::Busy => 0,
        }
    }

    fn dequeue_out(&mut self, out: &mut [Desc]) -> usize {
        self.out.dequeue_burst(out)
    }

    fn sleep<D: Driver>(&mut self, driver: &D, full: bool) {
        if !self.out.prepare_wait() {
            return;
        }
        let timeout = if full {
            FAITHFUL_FULL_RECHECK
        } else {
            idle_timeout(driver, IDLE_CAP)
        };
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(2);
        if let Some(fd) = self.out.wake_fd() {
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
        if !full {
            if let Some(fd) = driver.rx_fd() {
                fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
            }
        }
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
        self.out.finish_wait();
    }

    fn publish(&self, stats: &mut DriverThreadStats) {
        stats.faithful = Some(self.stats());
    }

    fn out_prepare_wait(&mut self) -> bool {
        self.out.prepare_wait()
    }

    fn out_wake_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.out.wake_fd()
    }

    fn out_finish_wait(&mut self) {
        self.out.finish_wait()
    }
}

/// How long an idle driver loop may sleep: at most `cap`, and for a device without an fd
/// that knows when it will have frames (a paced softnic's next message), no longer than its
/// hint. Everything else that has work for the loop wakes it — the server (the OUT ring's
/// eventfd, or the IN rings' room eventfd when they were full) and a device with an fd — so
/// [`IDLE_CAP`] only bounds how stale the published counters and the stop flag get. (A
/// gated softnic says nothing: its gate opens with an application's bind, at most that
/// late.)
fn idle_timeout<D: Driver>(driver: &D, cap: std::time::Duration) -> Timespec {
    let t = match (driver.rx_fd(), driver.idle_hint()) {
        (None, Some(h)) => h.min(cap),
        _ => cap,
    };
    Timespec {
        tv_sec: 0,
        tv_nsec: t.subsec_nanos() as _,
    }
}

/// The longest idle sleep of a driver loop.
const IDLE_CAP: std::time::Duration = std::time::Duration::from_millis(100);

/// The `ipc` driver loop's idle sleep within [`IPC_BUSY_SPELL`] of its last frame: it keeps
/// the loop of the message-based baseline as it was measured (that loop learns of room in the
/// server's socket and of a freed pool buffer from no eventfd).
const IPC_BUSY_CAP: std::time::Duration = std::time::Duration::from_micros(200);

/// A driver process attached to its server: greeted, told its device ([`DriverSetup`]), and
/// holding the data window; [`AttachedDriver::run`] drives the device once the server says
/// start. Dropping it hangs up: the server then reports the driver gone.
pub struct AttachedDriver {
    pub(crate) ctl: OwnedFd,
    pub(crate) data: Window,
    /// `--sync faithful`: seed 002's queues, sent after the data window.
    pub(crate) faithful: Option<crate::faithful_link::FaithfulShared>,
    /// The families the server takes (the others are shed).
    pub(crate) families: Families,
}

/// Attaches a driver process to the server at `socket`: says `DriverHello`, and receives the
/// `Welcome`, the spec of the device to drive, and the data window. The caller opens the
/// device the setup names and calls [`AttachedDriver::run`] (or [`AttachedDriver::fail`]
/// if it cannot).
pub fn attach_driver_process(
    socket: &std::path::Path,
) -> Result<(AttachedDriver, DriverSetup), ControlError> {
    greet(control::connect(socket)?, None, None)
}

/// A driver's side of the attach handshake over `ctl` (connected either way): says
/// `DriverHello` (with the device's `mac` if the driver is a shared one, which the server
/// does not know), and receives the `Welcome`, the setup and the data window. With a
/// `deadline` (a shared driver greeting a server it does not know) each message must come
/// by then; `ctl` must then block with a receive timeout, which bounds the window's receive.
pub(crate) fn greet(
    ctl: OwnedFd,
    mac: Option<[u8; 6]>,
    deadline: Option<std::time::Instant>,
) -> Result<(AttachedDriver, DriverSetup), ControlError> {
    control::send(
        &ctl,
        &Request::DriverHello {
            version: PROTOCOL_VERSION,
            mac,
        },
    )?;
    let next = |ctl: &OwnedFd| match deadline {
        Some(d) => recv_by(ctl, d),
        None => control::recv_blocking::<Response>(ctl.as_fd()),
    };
    match next(&ctl)? {
        Response::Welcome { .. } => {}
        Response::Error(e) => return Err(ControlError::Malformed(e)),
        other => {
            return Err(ControlError::Malformed(format!(
                "expected Welcome, got {other:?}"
            )));
        }
    }
    let setup = match next(&ctl)? {
        Response::Driver(setup) => *setup,
        other => {
            return Err(ControlError::Malformed(format!(
                "expected the driver's setup, got {other:?}"
            )));
        }
    };
    let data = shmnet_chan::handoff::recv_window(&ctl)
        .map_err(|e| ControlError::Malformed(e.to_string()))?;
    let faithful = match setup.sync {
        crate::server::SyncMode::Modern => None,
        crate::server::SyncMode::Faithful => {
            let fds = shmnet_chan::handoff::recv_fds(&ctl, crate::faithful_link::HANDOFF_GREETING)
                .map_err(|e| ControlError::Malformed(e.to_string()))?;
            Some(
                crate::faithful_link::FaithfulShared::open(fds)
                    .map_err(|e| ControlError::Malformed(e.to_string()))?,
            )
        }
    };
    Ok((
        AttachedDriver {
            ctl,
            data,
            faithful,
            families: setup.families,
        },
        setup,
    ))
}

/// Receives one message on `ctl`, waiting until `deadline` at most.
fn recv_by(ctl: &OwnedFd, deadline: std::time::Instant) -> Result<Response, ControlError> {
    loop {
        if let Some(m) = control::recv::<Response>(ctl)? {
            return Ok(m);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(ControlError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer said nothing in time",
            )));
        }
        let mut fds = [rustix::event::PollFd::new(
            ctl,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }
}

/// The body of a driver process whose device is already open: attaches to the server at
/// `socket` (ignoring the setup it sends), then [`AttachedDriver::run`]s `driver`.
pub fn run_driver_process<D: Driver>(
    driver: D,
    socket: &std::path::Path,
) -> Result<(), ControlError> {
    attach_driver_process(socket)?.0.run(driver)
}

impl AttachedDriver {
    /// Tells the server the device could not be opened (`why`, shown in its stats and its
    /// exit message), and hangs up.
    pub fn fail(self, why: &str) {
        let st = DriverThreadStats {
            stopped: Some(format!(
                "the driver process could not open its device: {why}"
            )),
            ..DriverThreadStats::default()
        };
        let _ = control::send(&self.ctl, &Request::DriverStats(Box::new(st)));
    }

    /// Tells the server the device is open, waits for the word to start, then moves frames between `driver` and the data window
    /// until the server goes away (its control socket hangs up), sending its counters every
    /// 100 ms.
    pub fn run<D: Driver>(self, driver: D) -> Result<(), ControlError> {
        let Self {
            ctl,
            data,
            faithful,
            families,
        } = self;
        // Ready: the device is open. The server waits for this word before it says it runs.
        control::send(
            &ctl,
            &Request::DriverStats(Box::new(DriverThreadStats {
                driver: driver.stats(),
                ..DriverThreadStats::default()
            })),
        )?;
        match control::recv_blocking::<Response>(ctl.as_fd())? {
            Response::Start => {}
            other => {
                return Err(ControlError::Malformed(format!(
                    "expected Start, got {other:?}"
                )));
            }
        }
        let bad_window = |e: shmnet_chan::window::HandleError| {
            ControlError::Malformed(format!("the server's data window: {e}"))
        };
        match faithful {
            Some(f) => {
                let pools = data.driver_pools().map_err(bad_window)?;
                drive_process(
                    driver,
                    &ctl,
                    f.driver_ends(pools, data.buffer_limits()),
                    families,
                );
            }
            None => {
                let ends = DriverEnds::try_take(&data).map_err(bad_window)?;
                drive_process(driver, &ctl, ends, families)
            }
        }
        Ok(())
    }
}

/// A driver process's loop over its queues `ends`, with the watcher thread that reports its
/// counters and stops it when the server is gone.
fn drive_process<D: Driver, Q: DriverQueues>(
    driver: D,
    ctl: &OwnedFd,
    ends: Q,
    families: Families,
) {
    let stop = AtomicBool::new(false);
    let stats = Mutex::new(DriverThreadStats::default());
    std::thread::scope(|s| {
        s.spawn(|| {
            // The watcher: reports counters, and stops the driver when the server is gone.
            loop {
                let mut fds = [PollFd::new(ctl, PollFlags::IN)];
                let ts = Timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                };
                let ready = rustix::event::poll(&mut fds, Some(&ts)).unwrap_or(0);
                let hup = ready > 0 && control::recv::<Response>(ctl).is_err();
                let st = stats.lock().map(|s| s.clone()).unwrap_or_default();
                if hup || control::send(ctl, &Request::DriverStats(Box::new(st))).is_err() {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
        });
        drive(driver, ends, families, &stop, &stats);
        stop.store(true, Ordering::Relaxed);
    });
    // The last word: the final counters, and why the driver stopped if it gave up.
    let last = stats.lock().map(|s| s.clone()).unwrap_or_default();
    let _ = control::send(ctl, &Request::DriverStats(Box::new(last)));
}

/// Sleeps until the device or the server has something. With the IN queues full, the
/// device is left alone (its frames wait there) and the driver sleeps until the server
/// frees room: it announces that on the full rings and the server's dequeue raises their
/// room eventfd — no timed polling to see whether room appeared. The timeout only bounds how
/// stale the published counters and the stop flag can get (or, for a device without an fd,
/// follows its own hint).
fn sleep_driver<D: Driver>(driver: &D, ends: &mut DriverEnds, full: bool) {
    if !ends.out.prepare_wait() {
        return;
    }
    let mut armed = [false; 2];
    let mut room_now = false;
    if full {
        for (k, p) in [&mut ends.in_ip, &mut ends.in_arp].into_iter().enumerate() {
            if p.free_slots() == 0 {
                if p.prepare_wait_room() {
                    armed[k] = true;
                } else {
                    room_now = true;
                }
            }
        }
    }
    if !room_now {
        let timeout = if full {
            Timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            }
        } else {
            idle_timeout(driver, IDLE_CAP)
        };
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
        if let Some(fd) = ends.out.wake_fd() {
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
        if !full {
            if let Some(fd) = driver.rx_fd() {
                fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
            }
        }
        for (k, p) in [&ends.in_ip, &ends.in_arp].into_iter().enumerate() {
            if let (true, Some(fd)) = (armed[k], p.room_fd()) {
                fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
            }
        }
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
    }
    ends.out.finish_wait();
    for (k, p) in [&mut ends.in_ip, &mut ends.in_arp].into_iter().enumerate() {
        if armed[k] {
            p.finish_wait_room();
        }
    }
}

/// The driver thread: device → IN queues, OUT queue → device, the frames of `families`
/// only (the rest are shed). Never waits on the server.
pub(crate) fn drive<D: Driver, Q: DriverQueues>(
    mut driver: D,
    mut ends: Q,
    families: Families,
    stop: &AtomicBool,
    shared: &Mutex<DriverThreadStats>,
) {
    let mut rx: Vec<RxFrame> = Vec::with_capacity(32);
    let mut ip = Vec::with_capacity(32);
    let mut arp = Vec::with_capacity(32);
    let mut out = [Desc::default(); 32];
    let mut out_idx = Vec::with_capacity(32);
    let mut in_full = 0u64;
    let mut rounds = 0u64;
    let mut gave_up = None;
    while !stop.load(Ordering::Relaxed) {
        rx.clear();
        // Take from the device only what the IN queues can hold: frames left in the device
        // are the device's to drop (and count), and a frame taken is not dropped for want
        // of queue space after its buffer was filled (on the rings never; on seed 002's
        // queues only when the server holds both sub-queues, which it never does).
        let room = ends.in_room();
        // Called even with no room (max 0): the device does its health checks there.
        let mut served = ServedPools {
            pools: ends.pools(),
            families,
        };
        if let Err(e) = driver.rx_burst(&mut served, &mut rx, room.min(32)) {
            // The device gave up for good (the `Driver` contract): stop, and say why.
            gave_up = Some(format!("the device failed: {e}"));
            break;
        }
        ip.clear();
        arp.clear();
        for f in &rx {
            let d = Desc::new(f.buf, f.len);
            match f.family {
                Family::Ipv4 | Family::Ipv6 => ip.push(d),
                Family::Arp => arp.push(d),
            }
        }
        for (family, frames) in [(Family::Ipv4, &ip), (Family::Arp, &arp)] {
            if frames.is_empty() {
                continue;
            }
            let placed = ends.enqueue_in(family, frames);
            for d in &frames[placed..] {
                in_full += 1;
                ends.pools().release(d.buf);
            }
        }
        let n = ends.dequeue_out(&mut out);
        if n > 0 {
            out_idx.clear();
            out_idx.extend(out[..n].iter().map(|d| d.buf));
            let _ = driver.tx_burst(ends.pools(), &out_idx);
        }
        rounds += 1;
        let idle = rx.is_empty() && n == 0;
        if idle || rounds % 64 == 0 {
            if let Ok(mut s) = shared.lock() {
                s.driver = driver.stats();
                s.in_queue_full = in_full;
                ends.publish(&mut s);
            }
        }
        if idle {
            ends.sleep(&driver, room == 0);
        }
    }
    // The buffers the device held between calls (AF_XDP's fill ring) go back to the pools.
    driver.release_held(ends.pools());
    if let Ok(mut s) = shared.lock() {
        s.driver = driver.stats();
        s.in_queue_full = in_full;
        ends.publish(&mut s);
        s.cpu_us = (rusage_cpu_s(libc::RUSAGE_THREAD) * 1e6) as u64;
        s.stopped = gave_up;
    }
}

/// How long after its last frame the `ipc` driver loop keeps looking again within 200 µs.
const IPC_BUSY_SPELL: std::time::Duration = std::time::Duration::from_millis(20);

/// How soon an `ipc` party whose socket was full looks again (see `drive_ipc`).
pub(crate) const IPC_BLOCKED_RECHECK: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 200_000,
};

/// The driver thread of the `ipc` structure: every received frame is copied into a packet
/// on `sock` (and its buffer freed at once); every packet from `sock` is copied into a buffer
/// and transmitted — the message-based device interface seed 002 replaced.
pub(crate) fn drive_ipc<D: Driver>(
    mut driver: D,
    mut pools: DriverPools,
    sock: OwnedFd,
    stop: &AtomicBool,
    shared: &Mutex<DriverThreadStats>,
) {
    let mut rx: Vec<RxFrame> = Vec::with_capacity(32);
    let mut tx = Vec::with_capacity(32);
    let mut dropped = 0u64;
    let mut rounds = 0u64;
    // Frames the server's socket could not take yet: the device keeps them, in order, so
    // the comparison with the shared queues is lossless.
    let mut pending: std::collections::VecDeque<RxFrame> = std::collections::VecDeque::new();
    let mut gave_up = None;
    let mut last_work = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        rx.clear();
        if pending.is_empty() {
            if let Err(e) = driver.rx_burst(&mut pools, &mut rx, 32) {
                gave_up = Some(format!("the device failed: {e}"));
                break;
            }
            pending.extend(rx.iter().copied());
        }
        let mut blocked = false;
        while let Some(f) = pending.front().copied() {
            // SAFETY: the driver owns the buffer it filled until it releases it below.
            let bytes = unsafe { pools.buffers().data(f.buf) }
                .ok()
                .zip(pools.buffers().off_len(f.buf))
                .and_then(|(d, (off, len))| {
                    d.get(usize::from(off)..usize::from(off) + usize::from(len))
                });
            match bytes.map(|b| control::send_raw(&sock, &[b])) {
                Some(Ok(true)) => {}
                Some(Ok(false)) => {
                    blocked = true;
                    break;
                }
                _ => dropped += 1,
            }
            pending.pop_front();
            pools.release(f.buf);
        }
        tx.clear();
        while tx.len() < 32 {
            let Some(b) = pools.alloc() else { break };
            // SAFETY: the buffer was just allocated to us.
            let Ok(dst) = (unsafe { pools.buffers().data_mut(b) }) else {
                pools.release(b);
                break;
            };
            match control::recv_raw(&sock, dst) {
                Ok(Some(n)) => {
                    let _ = pools.buffers().set_off_len(b, 0, n as u16);
                    tx.push(b);
                }
                _ => {
                    pools.release(b);
                    break;
                }
            }
        }
        if !tx.is_empty() {
            let _ = driver.tx_burst(&mut pools, &tx);
        }
        rounds += 1;
        let idle = rx.is_empty() && tx.is_empty();
        if !idle {
            last_work = std::time::Instant::now();
        }
        if idle || rounds % 64 == 0 {
            if let Ok(mut s) = shared.lock() {
                s.driver = driver.stats();
                s.in_queue_full = dropped;
            }
        }
        if idle || blocked {
            let mut fds = vec![PollFd::new(&sock, PollFlags::IN)];
            if blocked {
                fds[0] = PollFd::new(&sock, PollFlags::IN | PollFlags::OUT);
            }
            if let Some(fd) = driver.rx_fd() {
                fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
            }
            // A full socket: the kernel's POLLOUT for an AF_UNIX socket whose peer drains
            // it does not reliably wake a poller here, so look again soon (the `ipc`
            // structure is the message-passing baseline: it pays for this, not the others).
            let ts = if blocked {
                IPC_BLOCKED_RECHECK
            } else if last_work.elapsed() < IPC_BUSY_SPELL {
                idle_timeout(&driver, IPC_BUSY_CAP)
            } else {
                // Nothing for a while (a softnic waiting for its first application, an
                // idle interface): sleep as the other structures do.
                idle_timeout(&driver, IDLE_CAP)
            };
            let _ = rustix::event::poll(&mut fds, Some(&ts));
        }
    }
    driver.release_held(&mut pools);
    if let Ok(mut s) = shared.lock() {
        s.driver = driver.stats();
        s.in_queue_full = dropped;
        s.cpu_us = (rusage_cpu_s(libc::RUSAGE_THREAD) * 1e6) as u64;
        s.stopped = gave_up;
    }
}
