//! The `server` structure: the protocol server in its own process, applications as separate
//! processes — seed 002's protocol server with a shared-memory device interface — and its
//! `ipc` twin, where everything crosses as copied messages instead.
//!
//! ```text
//! driver ──IN_IP/IN_ARP──► data plane ──RX (per app)──► application process
//!        ◄──────OUT────────  (one loop) ◄──REQ, RET──────
//!                                ▲ commands (attach, bind, close, stats, detach)
//!                          control plane thread ◄── control socket ── applications, `shmnet stats`
//!        \____ data window: packet buffers, mapped by driver, server and applications ____/
//! ```
//!
//! - `data_plane`: the loop over rings and pools — no system call, lock or allocation
//!   while there is work; one armed wait when there is none.
//! - `control_plane`: accepting, greeting, binding, counting — a thread of its own, so the
//!   data plane never calls `accept` or reads a socket to find out there is nothing to do.
//! - `transport`: how datagrams reach one application (`shm` rings sharing the data window,
//!   or `ipc` packets); `region_app`: the default, `--isolation regions`, where an
//!   application maps only its own rings and registered regions and every descriptor is a
//!   handle checked by the lookup cache (`handles`, with its miss thread).
//! - The driver runs where [`Placement`] says: polled by the data plane's own loop (no
//!   queue between them), a thread beside it, or a process of its own attached through the
//!   control socket.
//!
//! An application's window and every buffer it was handed are the server's to take back:
//! the server records each chain it delivers until the application returns it, and when the
//! application's control socket hangs up (it exited, or was killed) the server frees those
//! chains, closes its sockets and drops its window. A return of a chain the application was
//! never given is refused and counted.

mod capturing;
pub use capturing::CaptureCounters;
mod control_plane;
mod data_plane;
mod forks;
mod handles;
mod held;
pub mod listing;
mod region_app;
mod sockets;
mod stalled;
mod stats;
pub mod tap_cost;
mod transport;

pub use crate::driver_host::{
    AttachedDriver, DriverThreadStats, attach_driver_process, run_driver_process, rusage_cpu_s,
};
pub use control_plane::ControlLimits;
pub use forks::ForkCounters;
pub use handles::{HandleRef, HandleTrace};
pub use stats::{
    AppCounters, AppStats, ControlCounters, DataPlaneCounters, MemoryStats, ServerStats,
};

use crate::control::{self, ControlError, PROTOCOL_VERSION, Request, Response};
use crate::driver::Driver;
use crate::driver_host::{DriverEnds, drive, drive_ipc};
use crate::faithful_link::FaithfulShared;
use crate::inline::ServeConfig;
use crate::spec::{DriverSetup, DriverSpec};
use crate::windows::{self, IN_ARP, IN_IP, OUT};
use control_plane::{ControlHandle, ControlSpec, command_queue, wait_message};
use data_plane::{DataPlane, DriverLink, DriverWatch, Polled};
use rustix::fd::{AsFd, OwnedFd};
use shmnet_chan::handles::{CacheGeometry, RegionTable};
use shmnet_chan::handoff::send_window;
use shmnet_chan::{PageSize, Window};
use shmnet_stack::Interface;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle data plane keeps polling before it sleeps (see [`Server::idle`]).
pub const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(50);

/// Where the driver runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Polled by the server's own loop: no queue, no other thread.
    #[default]
    Polled,
    /// A thread of the server process, joined by the IN and OUT queues.
    Thread,
    /// A process of its own, attached through the control socket (seed 002's layout).
    Process,
}

impl Placement {
    /// Its name, as `--placement` takes it and the stats show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Polled => "polled",
            Self::Thread => "thread",
            Self::Process => "process",
        }
    }
}

/// How the driver and the server share their IN and OUT queues (`--sync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// The channel's wait-free single-producer rings in the data window, with eventfd
    /// wake-ups announced by the sleeper.
    #[default]
    Modern,
    /// Seed 002's own: two sub-queues per queue under asymmetric Peterson mutexes, the
    /// Enable protocol, and a consumer-idle condition variable over counting events
    /// ([`crate::faithful_link`]). Needs a driver apart from the loop: a thread
    /// ([`Placement::Thread`]) or a process ([`Placement::Process`]).
    Faithful,
}

impl SyncMode {
    /// Its name, as `--sync` takes it and the stats show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Modern => "modern",
            Self::Faithful => "faithful",
        }
    }
}

/// An instrument the data plane calls around each buffer it copies into an application's
/// posted buffer ([`Server::probe_copies`]): any [`RecvHook`](shmnet_stack::RecvHook) that
/// can move to the data plane's thread. `Any`, so its owner can have it back as what it is.
pub trait CopyProbe: shmnet_stack::RecvHook + Send + std::any::Any {}

impl<T: shmnet_stack::RecvHook + Send + std::any::Any> CopyProbe for T {}

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
    /// [`Server::start`]: poll the driver in the server's loop, or run it on a thread
    /// (`Process` is [`Server::start_with_driver_process`]'s). The `ipc` structure always
    /// runs it on a thread.
    pub placement: Placement,
    /// How the driver's IN and OUT queues synchronise (`Faithful` needs a driver thread or
    /// process).
    pub sync: SyncMode,
    /// What each application may see: the data window (`Shared`) or only its own regions.
    pub isolation: crate::spec::Isolation,
    /// `Regions`: what a lookup-cache miss does to a request.
    pub on_miss: crate::spec::OnMiss,
    /// What clients may do to the control plane.
    pub limits: ControlLimits,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The data window could not be made.
    #[error("creating the data window: {0}")]
    Window(shmnet_chan::window::CreateError),
    /// The control socket could not be made.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A thread or eventfd could not be made.
    #[error("starting the server's threads: {0}")]
    Io(std::io::Error),
    /// The driver process did not attach, or could not open its device.
    #[error("{0}")]
    DriverProcess(String),
    /// `--sync faithful` was asked for where there is no driver apart from the loop.
    #[error(
        "--sync faithful joins a driver to the server by seed 002's queues: use --structure server with --placement thread or process, not {0}"
    )]
    FaithfulNeedsDriver(&'static str),
    /// Seed 002's queues could not be made.
    #[error(transparent)]
    Faithful(#[from] crate::faithful_link::FaithfulError),
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<std::io::Error> for ServerError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<shmnet_chan::window::CreateError> for ServerError {
    fn from(e: shmnet_chan::window::CreateError) -> Self {
        Self::Window(e)
    }
}

/// Where the driver runs, and how to stop it.
enum DriverHost {
    /// Polled by the data plane (or not started, or shut down).
    InLoop,
    /// A thread of this process.
    Thread {
        handle: Option<JoinHandle<()>>,
        stop: Arc<AtomicBool>,
    },
    /// A process of its own; `start` is a second handle on its control socket (the control
    /// plane reads the first) to tell it to begin.
    Process {
        start: OwnedFd,
        child: Option<std::process::Child>,
        started: bool,
    },
}

/// The protocol server: its data plane (stepped by the caller's thread), its control plane
/// thread, and its driver.
pub struct Server {
    dp: DataPlane,
    control: Option<ControlHandle>,
    driver: DriverHost,
    data: Arc<Window>,
    socket_path: PathBuf,
    /// Whether [`Server::idle`] has spun since the last work.
    spun: bool,
}

impl Server {
    /// Creates the data window and the control socket, and runs `driver` where
    /// `opts.placement` says (polled by the server's loop, or a thread of this process).
    pub fn start<D: Driver + 'static>(
        driver: D,
        opts: &ServerOptions,
    ) -> Result<Self, ServerError> {
        let placement = if opts.ipc {
            Placement::Thread
        } else {
            opts.placement
        };
        if opts.sync == SyncMode::Faithful && (opts.ipc || placement != Placement::Thread) {
            return Err(ServerError::FaithfulNeedsDriver(match placement {
                _ if opts.ipc => "the ipc structure",
                Placement::Process => {
                    "Server::start (a driver process is start_with_driver_process's)"
                }
                _ => "--placement polled",
            }));
        }
        let data = Arc::new(Window::create(&windows::data_window_spec(
            opts.serve.pools,
            opts.page,
        ))?);
        let listener = control::listen(&opts.socket)?;
        let iface = interface(driver.mac(), opts);
        let families = opts.serve.families;
        let stats = Arc::new(Mutex::new(DriverThreadStats::default()));
        let alive = Arc::new(AtomicBool::new(true));
        let (link, host) = if opts.ipc {
            let (ours, theirs) = rustix::net::socketpair(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::SEQPACKET,
                rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
                None,
            )
            .map_err(std::io::Error::from)?;
            let pools = data.driver_pools().expect("a fresh window");
            let host = driver_thread(&stats, &alive, move |stop, stats| {
                drive_ipc(driver, pools, theirs, stop, stats)
            })?;
            (DriverLink::Ipc(ours), host)
        } else if placement == Placement::Polled {
            let pools = data.driver_pools().expect("a fresh window");
            (
                DriverLink::Polled(Box::new(Polled::new(Box::new(driver), pools, families))),
                DriverHost::InLoop,
            )
        } else if opts.sync == SyncMode::Faithful {
            let shared = FaithfulShared::create()?;
            let limits = data.buffer_limits();
            let pools = data.driver_pools().expect("a fresh window");
            let theirs = shared.driver_ends(pools, limits);
            let host = driver_thread(&stats, &alive, move |stop, stats| {
                drive(driver, theirs, families, stop, stats)
            })?;
            (DriverLink::Faithful(shared.server_ends(limits)), host)
        } else {
            let ends = DriverEnds::take(&data);
            let host = driver_thread(&stats, &alive, move |stop, stats| {
                drive(driver, ends, families, stop, stats)
            })?;
            (rings(&data), host)
        };
        let watch = DriverWatch {
            stats,
            alive,
            placement: placement.name(),
        };
        Self::assemble(data, listener, iface, link, watch, host, None, opts)
    }

    /// Creates the data window and the control socket, starts the driver process with
    /// `spawn` (given the control socket's path; the process must call
    /// [`attach_driver_process`] or [`run_driver_process`]), and waits up to `patience` for
    /// it to attach; then tells it its device, `driver` (with `opts`' address and checksum
    /// rule, as a [`DriverSetup`]). `mac` is the device's address, which the stack answers
    /// for.
    pub fn start_with_driver_process(
        mac: [u8; 6],
        opts: &ServerOptions,
        driver: &DriverSpec,
        spawn: impl FnOnce(&std::path::Path) -> std::io::Result<std::process::Child>,
        patience: Duration,
    ) -> Result<Self, ServerError> {
        let data = Arc::new(Window::create(&windows::data_window_spec(
            opts.serve.pools,
            opts.page,
        ))?);
        let listener = control::listen(&opts.socket)?;
        let mut child = spawn(&opts.socket).map_err(ControlError::Io)?;
        let deadline = Instant::now() + patience;
        let mut buf = vec![0u8; control::MAX_MSG + 1];
        let ctl = loop {
            if let Some(fd) = control::accept(&listener)? {
                match wait_message::<Request>(&fd, &mut buf, deadline) {
                    Some(Request::DriverHello { version, .. }) if version == PROTOCOL_VERSION => {
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
                return Err(ServerError::DriverProcess(format!(
                    "the driver process exited ({status}) before attaching"
                )));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ServerError::DriverProcess(
                    "the driver process did not attach in time".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        Self::hand_over(
            data,
            listener,
            ctl,
            Some(child),
            mac,
            opts,
            driver,
            deadline,
        )
    }

    /// Creates the data window and the control socket, and attaches to the shared driver
    /// (`shmnet driver --listen`) listening at `driver_socket`: it says its device's MAC
    /// address, then takes the window and hands this server the frames of
    /// `opts.serve.families` — refusing (within `patience`) if another server already
    /// takes one of them. The driver outlives this server; this server sees it go as it
    /// sees a driver process go.
    pub fn attach_to_driver(
        opts: &ServerOptions,
        driver_socket: &std::path::Path,
        patience: Duration,
    ) -> Result<Self, ServerError> {
        // Only a driver run by this user (or root) is given the window: it sees every frame.
        let (ctl, _) = control::connect_checked(driver_socket)?;
        // Non-blocking, as an accepted driver process's socket is: the control plane reads
        // the driver's counters until there are none left, then goes back to its loop.
        rustix::io::ioctl_fionbio(&ctl, true).map_err(std::io::Error::from)?;
        let deadline = Instant::now() + patience;
        let mut buf = vec![0u8; control::MAX_MSG + 1];
        let mac = match wait_message::<Request>(&ctl, &mut buf, deadline) {
            Some(Request::DriverHello {
                version,
                mac: Some(mac),
            }) if version == PROTOCOL_VERSION => mac,
            _ => {
                return Err(ServerError::DriverProcess(format!(
                    "{} is not a shared driver of this version (start one with `shmnet driver --listen`)",
                    driver_socket.display()
                )));
            }
        };
        let data = Arc::new(Window::create(&windows::data_window_spec(
            opts.serve.pools,
            opts.page,
        ))?);
        let listener = control::listen(&opts.socket)?;
        let spec = DriverSpec::AfPacket {
            iface: String::new(),
            access: crate::spec::Access::Packet,
            give_up_after_s: 0.0,
            impair: None,
        };
        Self::hand_over(data, listener, ctl, None, mac, opts, &spec, deadline)
    }

    /// The rest of a driver process's start, once it said hello on `ctl`: tells it its
    /// setup, hands it the data window (and seed 002's queues), waits for its word that the
    /// device is open, and assembles the server. `child` is the driver process if this
    /// server started it (killed if it fails).
    #[allow(clippy::too_many_arguments)]
    fn hand_over(
        data: Arc<Window>,
        listener: OwnedFd,
        ctl: OwnedFd,
        mut child: Option<std::process::Child>,
        mac: [u8; 6],
        opts: &ServerOptions,
        driver: &DriverSpec,
        deadline: Instant,
    ) -> Result<Self, ServerError> {
        let kill = |child: &mut Option<std::process::Child>| {
            if let Some(c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
        };
        let faithful = match opts.sync {
            SyncMode::Faithful => Some(FaithfulShared::create()?),
            SyncMode::Modern => None,
        };
        let mut buf = vec![0u8; control::MAX_MSG + 1];
        let sent = (|| -> Result<(), ControlError> {
            control::send(
                &ctl,
                &Response::Welcome {
                    version: PROTOCOL_VERSION,
                    data_window: data.size(),
                    app_window: 0,
                    ipc: false,
                    isolated: false,
                    address: None,
                    prefix: None,
                },
            )?;
            let setup = DriverSetup {
                driver: driver.clone(),
                ip: opts.serve.ip,
                checksum: opts.serve.checksum,
                mtu: opts.serve.mtu,
                sync: opts.sync,
                families: opts.serve.families,
                ip6: opts.serve.ipv6.map(|(ip, _)| ip),
            };
            control::send(&ctl, &Response::Driver(Box::new(setup)))?;
            send_window(&ctl, &data).map_err(ControlError::Io)?;
            if let Some(f) = &faithful {
                shmnet_chan::handoff::send_fds(
                    &ctl,
                    crate::faithful_link::HANDOFF_GREETING,
                    &f.fds(),
                )
                .map_err(ControlError::Io)?;
            }
            Ok(())
        })();
        // The driver opens its device now; its first counters say it did (or why not). A
        // shared driver that refuses this server says why and hangs up, perhaps before it
        // took all of the above: its last word is still there to read.
        let first = match (wait_message::<Request>(&ctl, &mut buf, deadline), sent) {
            (Some(Request::DriverStats(st)), _) if st.stopped.is_some() => {
                kill(&mut child);
                return Err(ServerError::DriverProcess(st.stopped.unwrap_or_default()));
            }
            (Some(Request::DriverStats(st)), Ok(())) => *st,
            (_, Err(e)) => {
                kill(&mut child);
                return Err(e.into());
            }
            (_, Ok(())) => {
                kill(&mut child);
                return Err(ServerError::DriverProcess(
                    "the driver process did not open its device in time".into(),
                ));
            }
        };
        let start = ctl.try_clone()?;
        let watch = DriverWatch {
            stats: Arc::new(Mutex::new(first)),
            alive: Arc::new(AtomicBool::new(true)),
            placement: Placement::Process.name(),
        };
        let driver_ctl = Some((ctl, watch.stats.clone()));
        let host = DriverHost::Process {
            start,
            child,
            started: false,
        };
        let iface = interface(mac, opts);
        let link = match &faithful {
            Some(f) => DriverLink::Faithful(f.server_ends(data.buffer_limits())),
            None => rings(&data),
        };
        Self::assemble(data, listener, iface, link, watch, host, driver_ctl, opts)
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        data: Arc<Window>,
        listener: OwnedFd,
        iface: Interface,
        link: DriverLink,
        watch: DriverWatch,
        driver: DriverHost,
        driver_ctl: Option<(OwnedFd, Arc<Mutex<DriverThreadStats>>)>,
        opts: &ServerOptions,
    ) -> Result<Self, ServerError> {
        let (outbox, inbox) = command_queue()?;
        let counters = Arc::new(Mutex::new(ControlCounters::default()));
        let table = Arc::new(Mutex::new(RegionTable::new(
            opts.limits.regions,
            CacheGeometry::SEED_BEST,
        )));
        let handles = handles::HandleCtx::start(CacheGeometry::SEED_BEST, table.clone())?;
        let dp = DataPlane::new(
            data.clone(),
            iface,
            link,
            inbox,
            watch,
            opts.socket.clone(),
            counters.clone(),
            handles,
        );
        let control = ControlHandle::start(ControlSpec {
            listener,
            data: data.clone(),
            ipc: opts.ipc,
            isolation: opts.isolation,
            on_miss: opts.on_miss,
            limits: opts.limits,
            outbox,
            counters,
            driver: driver_ctl,
            table,
            address: opts.serve.ip,
            prefix: opts.serve.prefix,
        })?;
        Ok(Self {
            dp,
            control: Some(control),
            driver,
            data,
            socket_path: opts.socket.clone(),
            spun: false,
        })
    }

    /// The driver process's pid, if the driver runs as a process that is still there.
    pub fn driver_pid(&self) -> Option<u32> {
        match &self.driver {
            DriverHost::Process { child: Some(c), .. } => Some(c.id()),
            _ => None,
        }
    }

    /// Tells a driver process to start moving frames (a driver thread or a polled driver
    /// always runs).
    pub fn start_driver(&mut self) {
        if let DriverHost::Process { start, started, .. } = &mut self.driver {
            if !*started {
                *started = control::send(&*start, &Response::Start).is_ok();
            }
        }
    }

    /// Whether the driver has stopped (its thread ended, its process went away, or its
    /// device gave up).
    pub fn driver_stopped(&self) -> bool {
        self.dp.driver_stopped()
    }

    /// Applications attached now.
    pub fn apps_attached(&self) -> usize {
        self.dp.apps_attached()
    }

    /// Sockets bound by attached applications.
    pub fn sockets_bound(&self) -> usize {
        self.dp.sockets_bound()
    }

    /// The data window.
    pub fn data_window(&self) -> &Window {
        &self.data
    }

    /// Starts recording every handle page the data plane translates, up to `capacity`
    /// references (the room is taken now; the data path only pushes into it). For the
    /// lab's traces of shmnet's own runs.
    pub fn record_handles(&mut self, capacity: usize) {
        self.dp.handles_mut().record(capacity);
    }

    /// Stops recording and returns the handle pages translated since
    /// [`Server::record_handles`].
    pub fn take_handle_trace(&mut self) -> HandleTrace {
        self.dp.handles_mut().take_trace()
    }

    /// Installs `probe` around every copy of a received datagram into a buffer an isolated
    /// application posted (`--isolation regions`: the one copy on its way, done here, on the
    /// trusted side — seed 000's copy, which the residency probe times). With shared windows
    /// the server copies nothing on receive and the probe is never called.
    pub fn probe_copies(&mut self, probe: Box<dyn CopyProbe>) {
        *self.dp.copy_probe_mut() = Some(probe);
    }

    /// Removes and returns the probe [`Server::probe_copies`] installed (to be downcast,
    /// through `Box<dyn Any>`, to what was installed).
    pub fn take_copy_probe(&mut self) -> Option<Box<dyn CopyProbe>> {
        self.dp.copy_probe_mut().take()
    }

    /// One round of the data plane. Returns how much work it found (0: idle).
    pub fn step(&mut self) -> usize {
        let n = self.dp.step();
        if n > 0 {
            self.spun = false;
        }
        n
    }

    /// Sleeps until a queue, the control plane, the device or the timers have work, at
    /// most `at_most`.
    ///
    /// Before it sleeps it keeps polling for [`SPIN_BEFORE_SLEEP`] (the `ipc` structure
    /// excepted, whose rounds are system calls): on a VM a sleep and its wake-up cost tens
    /// of microseconds, more than the gap between the messages of a conversation, so a
    /// server that slept at every pause would add that to each round trip. Spinning stops
    /// at the first work found; an idle server spins once after its last work, then only
    /// sleeps.
    pub fn idle(&mut self, at_most: Duration) {
        if !self.dp.is_ipc() && !self.spun {
            self.spun = true;
            let until = Instant::now() + SPIN_BEFORE_SLEEP;
            // The clock is read every 16 rounds: on a VM a read costs as much as a round.
            'spin: loop {
                for _ in 0..16 {
                    if self.dp.step() > 0 {
                        return;
                    }
                    std::hint::spin_loop();
                }
                if Instant::now() >= until {
                    break 'spin;
                }
                // Let a party that shares this CPU (an application, on a small machine) run:
                // its work is what the spin is waiting for.
                std::thread::yield_now();
            }
        }
        self.dp.idle(at_most);
    }

    /// Every counter.
    pub fn stats(&self) -> ServerStats {
        self.dp.stats()
    }

    /// Every counter, as JSON (what `shmnet stats` prints).
    pub fn stats_json(&self) -> serde_json::Value {
        serde_json::to_value(self.stats()).unwrap_or_default()
    }

    /// Stops the control plane (every connection closes), stops the driver (thread:
    /// joined; process: its control socket closes and it exits), and removes the control
    /// socket.
    pub fn shutdown(&mut self) {
        if let Some(mut c) = self.control.take() {
            c.stop();
        }
        match std::mem::replace(&mut self.driver, DriverHost::InLoop) {
            DriverHost::Thread { handle, stop } => {
                stop.store(true, Ordering::Relaxed);
                if let Some(t) = handle {
                    let _ = t.join();
                }
            }
            DriverHost::Process { start, child, .. } => {
                drop(start);
                if let Some(mut c) = child {
                    let deadline = Instant::now() + Duration::from_secs(2);
                    while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let _ = c.kill();
                    let _ = c.wait();
                }
                self.dp.driver.alive.store(false, Ordering::Relaxed);
            }
            DriverHost::InLoop => {
                if let Some(s) = self.dp.polled_driver_stats() {
                    if let Ok(mut st) = self.dp.driver.stats.lock() {
                        st.driver = s;
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Runs a driver loop `body` on a thread of its own, with the stop flag the host raises and
/// the counters it publishes; `alive` is cleared when the loop ends.
fn driver_thread(
    stats: &Arc<Mutex<DriverThreadStats>>,
    alive: &Arc<AtomicBool>,
    body: impl FnOnce(&AtomicBool, &Mutex<DriverThreadStats>) + Send + 'static,
) -> std::io::Result<DriverHost> {
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, stats, alive) = (stop.clone(), stats.clone(), alive.clone());
    let handle = std::thread::Builder::new()
        .name("shmnet-driver".into())
        .spawn(move || {
            body(&stop2, &stats);
            alive.store(false, Ordering::Relaxed);
        })?;
    Ok(DriverHost::Thread {
        handle: Some(handle),
        stop,
    })
}

/// The stack, configured from `opts`, answering for `mac`.
fn interface(mac: [u8; 6], opts: &ServerOptions) -> Interface {
    Interface::new(opts.serve.stack_config(mac))
}

/// The server's ends of the IN and OUT rings.
fn rings(data: &Window) -> DriverLink {
    DriverLink::Rings {
        in_ip: data.consumer(IN_IP).expect("a fresh window"),
        in_arp: data.consumer(IN_ARP).expect("a fresh window"),
        out: data.producer(OUT).expect("a fresh window"),
    }
}

/// Reads a server's counters over its control socket (for `shmnet stats`).
///
/// A server out of file descriptors (or connections) answers a `Stats` request only if it
/// has arrived when the server looks, a millisecond after it accepts, and otherwise refuses
/// and closes: on a busy machine the request can be that late. Such a refusal is tried
/// again, for 2 s at most, before it is returned.
pub fn query_stats(socket: &std::path::Path) -> Result<ServerStats, ControlError> {
    match ask_admitted(socket, &Request::Stats)? {
        Response::Stats(v) => Ok(*v),
        other => Err(unexpected(other)),
    }
}

/// Every socket of the server at `socket` (`shmnet sockets`), page by page
/// ([`listing`]); retried as [`query_stats`] is.
pub fn query_sockets(socket: &std::path::Path) -> Result<Vec<listing::SocketEntry>, ControlError> {
    let mut all = Vec::new();
    let mut from = 0;
    // Bounded: a cursor only moves forward, and a server holds at most 2^32 slots and
    // 65,536 sockets per application; a server that answered the same cursor twice would
    // otherwise be asked for ever.
    loop {
        let page = match ask_admitted(socket, &Request::Sockets { from })? {
            Response::Sockets(p) => *p,
            other => return Err(unexpected(other)),
        };
        all.extend(page.entries);
        match page.next {
            Some(next) if next > from => from = next,
            Some(_) => {
                return Err(ControlError::Malformed(
                    "the server's sockets listing did not move forward".into(),
                ));
            }
            None => return Ok(all),
        }
    }
}

fn unexpected(r: Response) -> ControlError {
    match r {
        Response::Error(e) => ControlError::Malformed(e),
        other => ControlError::Malformed(format!("unexpected answer {other:?}")),
    }
}

/// Asks `req` on a connection of its own, and returns the answer. A server full of
/// connections (or out of descriptors) answers `Stats` and `Sockets` only when the request
/// has arrived a millisecond after it accepts, and otherwise refuses and closes: an error
/// or a hang-up is tried again for 2 s before it is returned.
fn ask_admitted(socket: &std::path::Path, req: &Request) -> Result<Response, ControlError> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let asked = (|| {
            let fd = control::connect(socket)?;
            control::send(&fd, req)?;
            control::recv_blocking::<Response>(fd.as_fd())
        })();
        let refused = match asked {
            Ok(Response::Error(e)) => ControlError::Malformed(e),
            Ok(r) => return Ok(r),
            Err(e @ ControlError::HungUp) => e,
            Err(e) => return Err(e),
        };
        if Instant::now() >= deadline {
            return Err(refused);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
