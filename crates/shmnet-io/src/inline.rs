//! The `inline` structure: driver, stack and applications in one thread — the monolithic
//! kernel path, or a library OS. No queue between the parties: a received frame goes from
//! the driver straight into [`Interface::receive`], and the built-in applications read their
//! sockets in the same loop.
//!
//! The buffers still live in a shared window (the driver allocates them on its path, the
//! stack frees them on the server's), so the inline structure moves exactly the same bytes
//! as the others and differs only in where the parties run.

use crate::driver::{Driver, DriverStats, RxFrame, softnic};
use crate::pool::ChanPool;
use shmnet_chan::{ChannelSpec, DriverPools, PageSize, PoolSpec, Window};
use shmnet_stack::tcp::{ListenHandle, TcpError, TcpHandle};
use shmnet_stack::{
    BufIdx, Config, EthernetAddress, Interface, NoHook, RecvHook, SocketHandle, Stats,
};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// A built-in application: what runs on a bound UDP port inside the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum App {
    /// Sends every datagram back to its sender.
    Echo(u16),
    /// Reads and discards every datagram (copying it out, as `recv` does).
    Sink(u16),
    /// As `Sink`, and checks every byte against softnic's pattern of the given size.
    CheckedSink(u16, usize),
    /// Bound for the caller, who sends with [`Inline::send_to`] and receives with
    /// [`Inline::recv_from`] between steps (a benchmark's requester in this same thread).
    Caller(u16),
    /// Listens on a TCP port and sends every byte of every connection back; closes its
    /// side when the peer has closed and everything is echoed.
    TcpEcho(u16),
    /// Listens on a TCP port, reads and discards every byte, closes when the peer has.
    TcpSink(u16),
}

impl App {
    /// The UDP port it binds.
    pub fn port(&self) -> u16 {
        match *self {
            Self::Echo(p)
            | Self::Sink(p)
            | Self::CheckedSink(p, _)
            | Self::Caller(p)
            | Self::TcpEcho(p)
            | Self::TcpSink(p) => p,
        }
    }
}

/// What the server needs to know.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Our IPv4 address.
    pub ip: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// The router for destinations off the subnet (`None`: they are unreachable).
    pub gateway: Option<Ipv4Addr>,
    /// Our IPv6 address and its prefix length (`None`: no IPv6).
    pub ipv6: Option<(std::net::Ipv6Addr, u8)>,
    /// The families the server takes from its driver (IPv4 with ARP, IPv6, or both): the
    /// driver sheds the others, or hands them to the server that takes them.
    pub families: crate::driver::Families,
    /// The pools of the window the buffers live in.
    pub pools: PoolSpec,
    /// Verify and generate UDP checksums.
    pub checksum: bool,
    /// Messages a socket queue holds before it drops.
    pub rx_queue_limit: usize,
    /// The applications.
    pub apps: Vec<App>,
    /// The device is a loopback (see [`shmnet_stack::Config::loopback`]): our own address
    /// is a destination, reached without ARP.
    pub loopback: bool,
    /// The largest IP packet per frame; `pools` must hold a frame of it (see
    /// [`frame_buffer_size`]).
    pub mtu: usize,
    /// On a loopback: how long a UDP sender to one of our own full sockets is held back
    /// (see [`shmnet_stack::Config::udp_local_hold`]); `None`: never.
    pub udp_local_hold: Option<std::time::Duration>,
    /// How frames are kept coherent with the device by hand (seed 003's methods; see
    /// [`shmnet_stack::Config::buffers`]).
    pub buffers: shmnet_chan::coherence::BufferModes,
    /// The caches those methods are sized to.
    pub cache: shmnet_chan::coherence::CacheGeometry,
}

/// The pool buffer size that holds one frame of `mtu` (the Ethernet header and the stack's
/// room for TCP options beyond the 40 bytes of headers the MSS leaves out; at least the
/// 2,048 bytes every pool had before the MTU could be raised).
pub fn frame_buffer_size(mtu: usize) -> u32 {
    let need = mtu + shmnet_stack::eth::HEADER_LEN + 60;
    (need.div_ceil(64) * 64).max(2048) as u32
}

impl ServeConfig {
    /// The stack's configuration for a device with Ethernet address `mac`. TCP checksums
    /// follow `checksum` only on a loopback (whose frames never reach a wire, as Linux's `lo`
    /// offloads them); on any other device they are always made and checked — a zero UDP
    /// checksum is legal, a wrong TCP one is a dropped segment.
    pub fn stack_config(&self, mac: [u8; 6]) -> Config {
        let mut cfg = Config::new(EthernetAddress(mac), self.ip, self.prefix);
        cfg.gateway = self.gateway;
        cfg.ipv6 = self.ipv6.filter(|_| self.families.ipv6);
        cfg.udp_rx_checksum = self.checksum;
        cfg.udp_tx_checksum = self.checksum;
        cfg.rx_queue_limit = self.rx_queue_limit;
        cfg.loopback = self.loopback;
        cfg.udp_local_hold = self.udp_local_hold;
        cfg.set_mtu(self.mtu);
        let tcp_checksum = self.checksum || !self.loopback;
        cfg.tcp.rx_checksum = tcp_checksum;
        cfg.tcp.tx_checksum = tcp_checksum;
        cfg.tcp.isn_secret = isn_secret();
        cfg.buffers = self.buffers;
        cfg.cache = self.cache;
        cfg
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            ip: Ipv4Addr::new(10, 0, 0, 1),
            prefix: 24,
            gateway: None,
            ipv6: None,
            families: crate::driver::Families::IPV4,
            pools: PoolSpec::default(),
            checksum: true,
            rx_queue_limit: 64,
            apps: Vec::new(),
            loopback: false,
            mtu: 1500,
            udp_local_hold: Some(shmnet_stack::iface::UDP_LOCAL_HOLD),
            buffers: Default::default(),
            cache: Default::default(),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The window could not be made.
    #[error("creating the buffer window: {0}")]
    Window(shmnet_chan::window::CreateError),
    /// Two applications want one port.
    #[error("cannot bind UDP port {0}: {1}")]
    Bind(u16, shmnet_stack::BindError),
    /// Two TCP applications want one port.
    #[error("cannot listen on TCP port {0}: {1}")]
    Listen(u16, TcpError),
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<shmnet_chan::window::CreateError> for ServeError {
    fn from(e: shmnet_chan::window::CreateError) -> Self {
        Self::Window(e)
    }
}

/// What the built-in applications did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AppStats {
    /// Datagrams read.
    pub messages: u64,
    /// Payload bytes read.
    pub bytes: u64,
    /// Datagrams whose bytes did not match the expected pattern (checked sinks).
    pub corrupt: u64,
    /// Datagrams an echo could not send back.
    pub echo_failures: u64,
    /// TCP connections accepted.
    pub tcp_accepted: u64,
    /// TCP connections that ended with an error (reset, timed out).
    pub tcp_failed: u64,
    /// TCP payload bytes read.
    pub tcp_bytes: u64,
}

/// A built-in TCP application: its listener and its open connections.
struct TcpApp {
    echo: bool,
    listener: ListenHandle,
    conns: Vec<TcpPeer>,
}

/// One connection of a built-in TCP application. For an echo, `buf[sent..filled]` is what
/// it read and has not yet sent back; a sink's `buf` is empty.
struct TcpPeer {
    h: TcpHandle,
    buf: Vec<u8>,
    filled: usize,
    sent: usize,
}

/// Bytes an echo reads before it sends them back (its buffer, allocated per connection
/// when it is accepted).
const TCP_ECHO_CHUNK: usize = 64 * 1024;

/// Driver, stack and applications in one thread.
pub struct Inline<D: Driver> {
    driver: D,
    window: Window,
    dpools: DriverPools,
    /// The families it serves (the driver sheds the rest).
    families: crate::driver::Families,
    pool: ChanPool,
    iface: Interface,
    sockets: Vec<(App, SocketHandle)>,
    tcp_apps: Vec<TcpApp>,
    rx: Vec<RxFrame>,
    tx: Vec<BufIdx>,
    tx_idx: Vec<u32>,
    recv_buf: Vec<u8>,
    expect: Vec<u8>,
    apps: AppStats,
    epoch: Instant,
}

/// Frames taken from the driver per step.
const BURST: usize = 32;

/// [`Inline::idle`] yields instead of sleeping for waits shorter than this.
pub const SPIN_BELOW: Duration = Duration::from_micros(200);

impl<D: Driver> Inline<D> {
    /// Creates the window, the stack (with the driver's MAC) and binds the applications.
    pub fn new(driver: D, cfg: &ServeConfig) -> Result<Self, ServeError> {
        Self::with_page(driver, cfg, PageSize::Small)
    }

    /// As [`Inline::new`], with the buffer window on pages of the given size (the residency
    /// lab compares 4 KiB with 2 MiB pages, seed 000's "group TLB" rule).
    pub fn with_page(driver: D, cfg: &ServeConfig, page: PageSize) -> Result<Self, ServeError> {
        let window = Window::create(&ChannelSpec {
            rings: vec![],
            pools: cfg.pools,
            page,
        })?;
        let dpools = window.driver_pools().expect("fresh window");
        let pool = ChanPool::new(window.server_pools().expect("fresh window"));
        let mut iface = Interface::new(cfg.stack_config(driver.mac()));
        let mut sockets = Vec::new();
        let mut tcp_apps = Vec::new();
        for app in &cfg.apps {
            match *app {
                App::TcpEcho(port) | App::TcpSink(port) => {
                    let listener = iface
                        .tcp_listen(port, TCP_BACKLOG)
                        .map_err(|e| ServeError::Listen(port, e))?;
                    tcp_apps.push(TcpApp {
                        echo: matches!(app, App::TcpEcho(_)),
                        listener,
                        conns: Vec::new(),
                    });
                }
                _ => {
                    let h = iface
                        .udp_bind_port(app.port())
                        .map_err(|e| ServeError::Bind(app.port(), e))?;
                    sockets.push((*app, h));
                }
            }
        }
        Ok(Self {
            driver,
            window,
            dpools,
            families: cfg.families,
            pool,
            iface,
            sockets,
            tcp_apps,
            rx: Vec::with_capacity(BURST),
            tx: Vec::new(),
            tx_idx: Vec::new(),
            recv_buf: vec![0u8; 65_536],
            expect: Vec::new(),
            apps: AppStats::default(),
            epoch: Instant::now(),
        })
    }

    fn now(&self) -> shmnet_stack::Instant {
        shmnet_stack::Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// One round: a burst from the driver through the stack, the applications, the timers,
    /// and a burst to the driver. Returns how much work it found (0: idle).
    pub fn step(&mut self) -> usize {
        self.step_with(&mut NoHook, |_, _| {})
    }

    /// As [`Inline::step`], with an instrument on the applications' receive path: `hook` is
    /// called around the copy of every buffer at `recv` (the residency probe), and
    /// `on_message` is given the hook back and each received message's bytes after the copy
    /// (the residency lab's synthetic application load).
    pub fn step_with<H: RecvHook + ?Sized>(
        &mut self,
        hook: &mut H,
        mut on_message: impl FnMut(&mut H, &[u8]),
    ) -> usize {
        let now = self.now();
        let mut work = self.receive_burst(now);
        for i in 0..self.sockets.len() {
            let (app, h) = self.sockets[i];
            if matches!(app, App::Caller(_)) {
                continue;
            }
            while let Ok(Some(info)) =
                self.iface
                    .udp_recv(&mut self.pool, h, &mut self.recv_buf, hook)
            {
                work += 1;
                on_message(hook, &self.recv_buf[..info.len]);
                self.apps.messages += 1;
                self.apps.bytes += info.len as u64;
                match app {
                    App::Sink(_) | App::Caller(_) | App::TcpEcho(_) | App::TcpSink(_) => {}
                    App::CheckedSink(_, size) => {
                        let seq = self.recv_buf[..8.min(info.len)]
                            .iter()
                            .rev()
                            .fold(0u64, |a, &b| (a << 8) | u64::from(b));
                        softnic::expected_payload(seq, size, &mut self.expect);
                        if info.msg_len != size || self.recv_buf[..info.len] != self.expect[..] {
                            self.apps.corrupt += 1;
                        }
                    }
                    App::Echo(_) => {
                        let data = &self.recv_buf[..info.len];
                        if self
                            .iface
                            .udp_send_to(&mut self.pool, h, data, info.src, now, &mut self.tx)
                            .is_err()
                        {
                            self.apps.echo_failures += 1;
                        }
                    }
                }
            }
        }
        work += self.run_tcp_apps(now);
        self.iface.poll(&mut self.pool, now, &mut self.tx);
        if !self.tx.is_empty() {
            work += self.tx.len();
            self.tx_idx.clear();
            self.tx_idx.extend(self.tx.drain(..).map(|b| b.0));
            let _ = self.driver.tx_burst(&mut self.dpools, &self.tx_idx);
        }
        self.pool.pools().drain_deferred(64);
        work
    }

    /// A burst from the driver through the stack onto the sockets' queues. Returns the
    /// frames received.
    fn receive_burst(&mut self, now: shmnet_stack::Instant) -> usize {
        self.rx.clear();
        // A driver error (e.g. the interface went away) leaves nothing received this round;
        // it shows in the driver's counters.
        let mut served = crate::driver::ServedPools {
            pools: &mut self.dpools,
            families: self.families,
        };
        let _ = self.driver.rx_burst(&mut served, &mut self.rx, BURST);
        for f in &self.rx {
            self.iface
                .receive(&mut self.pool, BufIdx(f.buf), now, &mut self.tx);
        }
        self.rx.len()
    }

    /// What a device interrupt does in a monolithic kernel: a burst from the driver through
    /// the stack onto the sockets' queues, preempting the application, which is given
    /// nothing (what the stack answers goes out at the next [`Inline::step`]). For an
    /// instrument that runs an application's work in pieces and lets frames arrive between
    /// them, as seed 000's loaded BSD receiver did. Returns the frames received.
    pub fn interrupt(&mut self) -> usize {
        let now = self.now();
        self.receive_burst(now)
    }

    /// The applications' receive buffer: the last message given to an application by
    /// [`Inline::step_with`] lies in its first bytes (its `on_message` was told how many).
    pub fn app_buffer(&self) -> &[u8] {
        &self.recv_buf
    }

    /// The built-in TCP applications' turn: accept, read, echo, close. Returns the
    /// connections that had something to do.
    fn run_tcp_apps(&mut self, now: shmnet_stack::Instant) -> usize {
        let mut work = 0;
        for app in &mut self.tcp_apps {
            while let Ok(Some(h)) = self.iface.tcp_accept(app.listener) {
                self.apps.tcp_accepted += 1;
                let _ = self.iface.tcp_set_nodelay(h, true);
                app.conns.push(TcpPeer {
                    h,
                    buf: if app.echo {
                        vec![0; TCP_ECHO_CHUNK]
                    } else {
                        Vec::new()
                    },
                    filled: 0,
                    sent: 0,
                });
                work += 1;
            }
            let mut i = 0;
            while i < app.conns.len() {
                let p = &mut app.conns[i];
                let (busy, finished) = serve_tcp_peer(
                    &mut self.iface,
                    &mut self.pool,
                    p,
                    &mut self.recv_buf,
                    &mut self.apps,
                    now,
                    &mut self.tx,
                );
                work += usize::from(busy);
                if finished {
                    let _ = self.iface.tcp_close(&mut self.pool, p.h, now, &mut self.tx);
                    app.conns.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        work
    }

    /// Runs until `stop` says so, sleeping in [`Inline::idle`] when a step finds no work.
    pub fn run_until(&mut self, mut stop: impl FnMut(&Self) -> bool) {
        while !stop(self) {
            if self.step() == 0 {
                self.idle(Duration::from_millis(10));
            }
        }
    }

    /// Call after a [`Inline::step`] that found no work: sleeps until the driver may have
    /// frames, the stack's next timer (ARP retry, reassembly expiry) is due, or `max` has
    /// passed, whichever comes first. An idle server thus costs (almost) no CPU.
    ///
    /// - A driver with a receive fd (af_packet): `poll` on it.
    /// - A driver without one (softnic): its [`Driver::idle_hint`] — a paced softnic's next
    ///   frame, or nothing to wait for (`None`: sleep up to the limit). A wait under
    ///   [`SPIN_BELOW`] only yields the CPU, since a sleep that short oversleeps by the
    ///   timer slack (about 50 µs) and would throw the pacing off.
    ///
    /// Frames arriving on an fd wake it at once; nothing else does (the inline structure has
    /// no other party), so callers that must notice something else (Ctrl-C, a deadline) pass
    /// a `max` as long as they can afford to notice it late.
    pub fn idle(&self, max: Duration) {
        let mut wait = match self.iface.poll_at() {
            Some(t) => Duration::from_nanos(t.nanos().saturating_sub(self.now().nanos())).min(max),
            None => max,
        };
        match self.driver.rx_fd() {
            Some(fd) => {
                let ts = rustix::event::Timespec {
                    tv_sec: wait.as_secs() as _,
                    tv_nsec: wait.subsec_nanos() as _,
                };
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                let _ = rustix::event::poll(&mut fds, Some(&ts));
            }
            None => {
                if let Some(hint) = self.driver.idle_hint() {
                    wait = wait.min(hint);
                }
                if wait < SPIN_BELOW {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(wait);
                }
            }
        }
    }

    /// The built-in applications' counters.
    pub fn app_stats(&self) -> &AppStats {
        &self.apps
    }

    /// The stack's counters.
    pub fn stack_stats(&self) -> &Stats {
        self.iface.stats()
    }

    /// TCP's counters.
    pub fn tcp_counters(&self) -> &shmnet_stack::tcp::TcpCounters {
        self.iface.tcp_counters()
    }

    /// The driver's counters.
    pub fn driver_stats(&self) -> DriverStats {
        self.driver.stats()
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// Takes back the pool buffers the driver holds between calls (AF_XDP's fill ring), for
    /// a structure that stops driving it: the pools' counters then show only what the stack
    /// holds. The driver is not driven after it.
    pub fn release_driver_buffers(&mut self) -> u32 {
        self.driver.release_held(&mut self.dpools)
    }

    /// Ends the structure and gives its driver back (what it recorded, say). Buffers still
    /// held by the stack go back with the window.
    pub fn into_driver(self) -> D {
        self.driver
    }

    /// The window the buffers live in.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// The stack.
    pub fn interface(&mut self) -> (&mut Interface, &mut ChanPool) {
        (&mut self.iface, &mut self.pool)
    }

    fn socket_of(&self, port: u16) -> Option<SocketHandle> {
        self.sockets
            .iter()
            .find(|(a, _)| a.port() == port)
            .map(|(_, h)| *h)
    }

    /// Sends `data` from the socket bound to `port` (to drive traffic from a test or a tool).
    pub fn send_to(
        &mut self,
        port: u16,
        data: &[u8],
        dst: SocketAddrV4,
    ) -> Result<(), shmnet_stack::SendError> {
        let now = self.now();
        let h = self
            .socket_of(port)
            .ok_or(shmnet_stack::SendError::InvalidHandle)?;
        self.iface
            .udp_send_to(&mut self.pool, h, data, dst, now, &mut self.tx)
    }

    /// Copies the next datagram queued on an [`App::Caller`]'s `port` into `buf`: its length
    /// (truncated to `buf`) and sender, or `None` when nothing is queued.
    pub fn recv_from(
        &mut self,
        port: u16,
        buf: &mut [u8],
    ) -> Result<Option<(usize, SocketAddrV4)>, shmnet_stack::RecvError> {
        let h = self
            .socket_of(port)
            .ok_or(shmnet_stack::RecvError::InvalidHandle)?;
        let got = self.iface.udp_recv(&mut self.pool, h, buf, &mut NoHook)?;
        Ok(got.map(|info| (info.len, info.src)))
    }
}

/// Connections a built-in TCP application's listener holds in the handshake or waiting.
const TCP_BACKLOG: u32 = 128;

/// A fresh secret for RFC 6528's initial sequence numbers: std's `RandomState` draws its
/// keys from the operating system.
/// A secret for RFC 6528's initial sequence numbers, fresh in every process (std's
/// `RandomState` is seeded from the OS's randomness).
fn isn_secret() -> u128 {
    use std::hash::BuildHasher;
    let s = std::collections::hash_map::RandomState::new();
    (u128::from(s.hash_one(1u8)) << 64) | u128::from(s.hash_one(2u8))
}

/// One connection's turn: the echo sends back what it read (reading more only when all of
/// it is sent), the sink reads. Returns (did something, the connection is over).
fn serve_tcp_peer(
    iface: &mut Interface,
    pool: &mut ChanPool,
    p: &mut TcpPeer,
    scratch: &mut [u8],
    apps: &mut AppStats,
    now: shmnet_stack::Instant,
    tx: &mut Vec<BufIdx>,
) -> (bool, bool) {
    let echo = !p.buf.is_empty();
    let mut busy = false;
    // Bounded, so one connection cannot keep the loop from the others and the driver.
    for _ in 0..64 {
        if p.sent < p.filled {
            match iface.tcp_send(pool, p.h, &p.buf[p.sent..p.filled], now, tx) {
                Ok(n) => {
                    p.sent += n;
                    busy = true;
                    continue;
                }
                Err(TcpError::WouldBlock) => return (busy, false),
                Err(_) => {
                    apps.tcp_failed += 1;
                    return (busy, true);
                }
            }
        }
        let buf: &mut [u8] = if echo { &mut p.buf } else { scratch };
        match iface.tcp_recv(pool, p.h, buf, now, tx) {
            Ok(0) => return (busy, true),
            Ok(n) => {
                busy = true;
                apps.tcp_bytes += n as u64;
                if echo {
                    p.filled = n;
                    p.sent = 0;
                }
            }
            Err(TcpError::WouldBlock) => return (busy, false),
            Err(_) => {
                apps.tcp_failed += 1;
                return (busy, true);
            }
        }
    }
    (busy, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::softnic::{Softnic, SoftnicConfig};

    fn run(size: usize, checksum: bool, dma: softnic::Dma) {
        let count = 300;
        let nic = Softnic::new(SoftnicConfig {
            size,
            count: Some(count),
            checksum,
            dma,
            dst_ports: vec![5001],
            ..SoftnicConfig::default()
        })
        .unwrap();
        let cfg = ServeConfig {
            checksum,
            apps: vec![App::CheckedSink(5001, size)],
            ..ServeConfig::default()
        };
        let mut s = Inline::new(nic, &cfg).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let work = s.step();
            if work == 0 && s.driver().done() {
                break;
            }
            assert!(Instant::now() < deadline, "stalled");
        }
        let apps = s.app_stats().clone();
        assert_eq!(
            apps.messages,
            count,
            "{:?} {:?}",
            s.stack_stats(),
            s.driver_stats()
        );
        assert_eq!(apps.corrupt, 0);
        let total = s.window().layout().pool_geometry().total();
        assert_eq!(
            s.window().buffers().free_count(),
            total,
            "every buffer back"
        );
    }

    #[test]
    fn over_a_loopback_a_caller_reaches_the_echo_at_our_own_address_and_hears_back() {
        let nic = Softnic::new(SoftnicConfig {
            loopback: true,
            ..SoftnicConfig::default()
        })
        .unwrap();
        let cfg = ServeConfig {
            loopback: true,
            apps: vec![App::Echo(5001), App::Caller(40001)],
            ..ServeConfig::default()
        };
        let own = cfg.ip;
        let mut s = Inline::new(nic, &cfg).unwrap();
        s.send_to(40001, b"request", SocketAddrV4::new(own, 5001))
            .unwrap();
        let mut buf = [0u8; 64];
        let mut got = None;
        for _ in 0..10 {
            s.step();
            if let Some(r) = s.recv_from(40001, &mut buf).unwrap() {
                got = Some(r);
                break;
            }
        }
        assert_eq!(got, Some((7, SocketAddrV4::new(own, 5001))));
        assert_eq!(&buf[..7], b"request");
        assert_eq!(
            s.app_stats().messages,
            1,
            "the echo read it; the caller's is not counted"
        );
        assert_eq!(
            s.driver_stats().tx_frames,
            2,
            "request and reply, each out and back in"
        );
        assert_eq!(s.driver_stats().rx_frames, 2);
        assert_eq!(s.stack_stats().arp_requests_sent, 0);
    }

    #[test]
    fn softnic_messages_reach_the_sink_intact() {
        for size in [10, 1472, 14_792] {
            for checksum in [false, true] {
                run(size, checksum, softnic::Dma::Cached);
            }
        }
        run(14_792, true, softnic::Dma::NonTemporal);
    }
}
