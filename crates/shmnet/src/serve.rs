//! `shmnet serve`: run the parties.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use shmnet_io::driver::impair::{ImpairSpec, Impaired};
use shmnet_io::driver::nic::{Nic, NicSpec};
use shmnet_io::driver::softnic::{Dma, Softnic};
use shmnet_io::driver::{Driver, Families};
use shmnet_io::inline::{App, Inline};
use shmnet_io::server::Placement;
use shmnet_io::spec::{BenchPart, DriverSpec, ServeSpec, ServeStructure, SoftnicSpec};
use shmnet_lab::residency::probe::Probe;
use shmnet_lab::scoreboard::Scoreboard;
use shmnet_lab::softnic_roles::BoardPacer;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where the driver of the server structure runs (see `--placement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlacementArg {
    /// Polled by the server's own loop.
    Polled,
    /// A thread of the server process.
    Thread,
    /// A process of its own.
    Process,
}

/// How the driver's IN and OUT queues synchronise (see `--sync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    /// The channel's wait-free rings with eventfd wake-ups.
    Modern,
    /// Seed 002's own: asymmetric Peterson mutexes, double sub-queues with the Enable
    /// protocol, a condition variable over counting events.
    Faithful,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Structure {
    /// Driver, stack and the built-in applications (--echo, --sink) in one thread: the
    /// monolithic kernel path.
    Inline,
    /// The driver, the protocol server and applications as processes sharing memory
    /// windows: applications attach with `shmnet app` through the control socket.
    Server,
    /// As `server`, but every frame and datagram crosses as a copied message over a Unix
    /// socket (the baseline the shared windows replace).
    Ipc,
}

/// The packet device and, for softnic, what it sends.
#[derive(Args, Clone)]
pub struct DriverArgs {
    /// The packet device: `softnic` (a software sender, see the --softnic-* options),
    /// `loopback` (a wire that hands every frame back, as Linux's `lo`: the server's
    /// applications reach each other at --ip, e.g. two programs under `shmnet run`),
    /// `af_packet:IFACE` (a real interface; needs root or CAP_NET_RAW), `af_xdp:IFACE[:QUEUE]`
    /// (a real interface through AF_XDP, every receive queue or the one named: frames land in
    /// shmnet's own buffers, an XDP program steers only --ip's frames to shmnet and the
    /// kernel keeps the rest; needs root; docs/xdp.md), or `auto:IFACE[:QUEUE]` (af_xdp where
    /// it can be had, else af_packet).
    #[arg(long, default_value = "softnic")]
    driver: String,
    /// af_packet and af_xdp: seconds the interface may stay down or missing (the driver
    /// reopens it every 250 ms meanwhile) before the driver gives up and the server exits
    /// non-zero; 0 never gives up.
    #[arg(long, default_value_t = shmnet_io::spec::DEFAULT_GIVE_UP_S, value_name = "SECONDS")]
    give_up_after: f64,
    /// softnic: UDP payload bytes per message.
    #[arg(long, default_value_t = 14_792)]
    softnic_size: usize,
    /// softnic in the server and ipc structures: the UDP port it sends to.
    #[arg(long, default_value_t = 5001)]
    softnic_port: u16,
    /// softnic: messages to send (default 100,000).
    #[arg(long, default_value_t = 100_000)]
    softnic_count: u64,
    /// softnic: microseconds between messages (0: back to back).
    #[arg(long, default_value_t = 0.0)]
    softnic_gap_us: f64,
    /// softnic: how frames reach the buffers: `cached` stores, or `nt` (non-temporal,
    /// around the cache).
    #[arg(long, default_value = "cached")]
    softnic_dma: Dma,
    /// Our address and prefix (default 10.0.0.1/24).
    #[arg(long, value_name = "ADDR/PREFIX", value_parser = parse_cidr)]
    ip: Option<(Ipv4Addr, u8)>,
    /// The router for destinations off our subnet (without one, what is sent there is
    /// refused and counted as `no_route`). The stack resolves it with ARP like a neighbour.
    #[arg(long, value_name = "IP")]
    gateway: Option<Ipv4Addr>,
    /// Our MAC address with softnic (default 02:00:00:00:00:01). With af_packet shmnet uses
    /// the interface's own address.
    #[arg(long, value_parser = parse_mac)]
    mac: Option<[u8; 6]>,
    /// Neither verify nor generate UDP checksums (nor TCP's, on a loopback softnic only:
    /// its frames never reach a wire, as Linux's lo offloads them).
    #[arg(long)]
    no_checksum: bool,
    /// Seed 003's cache maintenance of the frames, per direction: send=MODE,recv=MODE with
    /// MODE one of ch (clean each line with clflushopt before the device reads a frame, and
    /// after it wrote one), ch-all (the seed's whole-cache clean), cs (software clean: junk
    /// reads in the frame's L2 sets), nc (bypass: TCP's payload copied into frames with
    /// non-temporal stores; received bytes copied out with streaming loads, the frame
    /// evicted) or none (the default: x86's DMA is coherent, nothing is done). For
    /// experiments: every mode costs CPU here. See docs/buffers.md.
    #[arg(
        long,
        value_name = "send=MODE,recv=MODE",
        default_value = "send=none,recv=none"
    )]
    buffers: shmnet_chan::coherence::BufferModes,
    /// The largest IP packet per frame, 576 to 32,694 bytes. Above 1,500 the packet buffers
    /// grow to hold a frame, and TCP's segments with them: like Linux's lo (MTU 65,536), a
    /// loopback softnic then carries a stream in a few large segments; with af_packet it is
    /// a jumbo MTU (e.g. 9000), at most the interface's own (`ip link set IFACE mtu 9000`).
    #[arg(long, default_value_t = 1500, value_name = "BYTES")]
    mtu: usize,
    /// softnic in a benchmark run: the run's scoreboard (set by `shmnet ttcp` and `shmnet rr`).
    #[arg(long, hide = true, value_name = "PATH")]
    softnic_board: Option<PathBuf>,
    /// softnic in a benchmark run: its part (send, sink, loopback).
    #[arg(long, hide = true, default_value = "send")]
    softnic_role: String,
    /// Impair the frames between the device and the stack, in both directions, as Linux's
    /// netem would (e.g. loss=1%,delay=10ms,seed=1; see --help).
    ///
    /// SPEC is KEY=VALUE pairs separated by commas:
    ///   loss=P%      drop a frame (P like 1% or 0.5%)
    ///   dup=P%       send a frame twice
    ///   corrupt=P%   flip one bit past the Ethernet header (checksums catch it)
    ///   delay=T      hold every frame for T (like 10ms, 500us or 1s)
    ///   jitter=T     vary the delay by up to T either way (needs delay=)
    ///   reorder=P%   with a delay, send a frame at once, past the delayed ones; without
    ///                one, hold it back until the next frame has passed
    ///   rate=R       pace frames to R (like 500kbit, 100mbit or 1gbit)
    ///   limit=N      frames a delay or rate queue holds before it drops (default 1000)
    ///   seed=N       the seed of every random choice (default 0): the same seed and the
    ///                same traffic meet the same fate
    /// What it did is counted per direction in the driver's counters ("impair": "rx" and
    /// "tx", in the report and in `shmnet stats`). For example, a lossy, slow 100 Mbit/s
    /// path to test an application on:
    ///   shmnet serve --driver af_packet:veth0 --ip 10.77.0.1/24 --echo 7 \
    ///     --impair loss=1%,delay=10ms,jitter=2ms,rate=100mbit,seed=1
    #[arg(long, value_name = "SPEC", verbatim_doc_comment)]
    impair: Option<ImpairSpec>,
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let bytes: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| format!("bad MAC address {s:?}: use six hex bytes like 02:00:00:00:00:01"))?;
    bytes
        .try_into()
        .map_err(|_| format!("bad MAC address {s:?}: use six hex bytes like 02:00:00:00:00:01"))
}

/// The IPv4 address a server answers on when `--ip` is not given.
const DEFAULT_IP: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 0, 0, 1), 24);

impl DriverArgs {
    /// The device these options name, as a spec (refusing options that do not apply to it).
    fn to_spec(&self) -> Result<DriverSpec> {
        let bench = match &self.softnic_board {
            Some(board) => Some(BenchPart {
                board: board.clone(),
                role: self.softnic_role.parse()?,
            }),
            None => None,
        };
        let softnic = SoftnicSpec {
            size: self.softnic_size,
            port: self.softnic_port,
            count: self.softnic_count,
            gap_us: self.softnic_gap_us,
            schedule: Default::default(),
            dma: self.softnic_dma,
            mac: None,
            bench,
            impair: None,
            loopback: false,
        };
        let mut spec = DriverSpec::parse(&self.driver, softnic, self.mac)?;
        if let DriverSpec::AfPacket {
            give_up_after_s, ..
        } = &mut spec
        {
            *give_up_after_s = self.give_up_after;
        }
        spec.set_impair(self.impair.clone());
        Ok(spec)
    }
}

/// Opens softnic as `spec` says, for a server at `ip` (playing its part in a benchmark run
/// if it has one: shmnet-lab's roles, the run's board opened), sending to `port`, held back
/// by `gate` if given.
fn open_softnic(
    spec: &SoftnicSpec,
    ip: Ipv4Addr,
    checksum: bool,
    port: u16,
    gate: Option<Arc<AtomicBool>>,
) -> Result<Softnic<Option<BoardPacer>>> {
    let mut cfg = spec.config(ip, checksum, port);
    cfg.gate = gate;
    Ok(shmnet_lab::softnic_roles::open_softnic(
        cfg,
        spec.bench.as_ref(),
    )?)
}

/// A benchmark run's scoreboard.
fn open_board(part: &BenchPart) -> Result<Arc<Scoreboard>> {
    let board = Scoreboard::open(&part.board).context("opening the benchmark scoreboard")?;
    Ok(Arc::new(board))
}

/// `shmnet driver`'s options: either `--listen` (a shared driver that servers attach to)
/// or `--socket` (the driver process `shmnet serve --placement process` starts).
#[derive(Args)]
#[command(group = clap::ArgGroup::new("mode").required(true).args(["listen", "socket"]))]
pub struct DriverProcessArgs {
    /// Listen here for servers to attach (`shmnet serve --structure server --attach PATH`),
    /// each taking its own families (--family): e.g. an IPv4 server and an IPv6 server on
    /// one interface, each of which may stop, die or restart without disturbing the other.
    #[arg(long, value_name = "PATH", requires = "device")]
    listen: Option<PathBuf>,
    /// With --listen: the interface to drive with AF_PACKET.
    #[arg(long, value_name = "IFACE")]
    device: Option<String>,
    /// With --listen: seconds the interface may stay gone before the driver gives up
    /// (0: never).
    #[arg(long, default_value_t = shmnet_io::spec::DEFAULT_GIVE_UP_S, value_name = "SECONDS")]
    give_up_after: f64,
    /// With --listen: the largest IP packet per frame.
    #[arg(long, default_value_t = 1500)]
    mtu: usize,
    /// With --listen: print the final report as JSON.
    #[arg(long)]
    json: bool,
    /// The control socket of the server that started this driver process (internal).
    #[arg(long, hide = true)]
    socket: Option<PathBuf>,
}

/// `shmnet driver`: a shared driver (`--listen`), or a driver process of the server
/// structure (`--socket`, started by `shmnet serve`: it attaches to the server, which sends
/// the spec of the device to drive).
pub fn run_driver(a: DriverProcessArgs) -> Result<()> {
    use shmnet_io::server::attach_driver_process;
    let socket = match (&a.listen, &a.socket) {
        (Some(listen), _) => return run_shared_driver(&a, listen),
        (None, Some(socket)) => socket,
        (None, None) => bail!("give --listen PATH --device IFACE"),
    };
    let (attached, setup) = attach_driver_process(socket).context("driver process")?;
    let impair = setup.driver.impair();
    match &setup.driver {
        DriverSpec::Softnic(s) => drive_with(
            attached,
            open_softnic(s, setup.ip, setup.checksum, s.port, None),
            impair,
        ),
        DriverSpec::AfPacket {
            iface,
            access,
            give_up_after_s,
            ..
        } => drive_with(
            attached,
            open_nic(&NicSpec {
                iface,
                access: *access,
                ip: setup.families.ipv4.then_some(setup.ip),
                ip6: setup.ip6.filter(|_| setup.families.ipv6),
                mtu: setup.mtu as u32,
                give_up_after: give_up(*give_up_after_s),
            }),
            impair,
        ),
    }
}

/// `shmnet driver --listen PATH --device IFACE`: drives the interface for every server
/// that attaches, until Ctrl-C or SIGTERM; then prints what it did.
fn run_shared_driver(a: &DriverProcessArgs, listen: &Path) -> Result<()> {
    use shmnet_io::shared_driver::{SharedDriver, SharedDriverEvent, SharedDriverStats};
    let iface = a
        .device
        .as_deref()
        .context("--listen needs --device IFACE")?;
    let _lock = crate::iface_lock::lock_or_warn(iface, false)?;
    let mac = mac_of(iface)?;
    // Several servers, several pools: AF_XDP's UMEM is one server's pool, so AF_PACKET.
    let nic = open_nic(&NicSpec {
        iface,
        access: shmnet_io::spec::Access::Packet,
        ip: None,
        ip6: None,
        mtu: a.mtu as u32,
        give_up_after: give_up(a.give_up_after),
    })?;
    let shared = SharedDriver::listen(listen, mac)
        .with_context(|| format!("listening at {}", listen.display()))?
        .on_event(|e| match e {
            SharedDriverEvent::Attached { server, families } => {
                eprintln!("server {server} attached, taking {}", families.name())
            }
            SharedDriverEvent::Detached { server } => eprintln!("server {server} went away"),
            SharedDriverEvent::Refused { server, why } => {
                eprintln!("server {server} refused: {why}")
            }
        });
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    ctrlc::set_handler(move || s2.store(true, Ordering::Relaxed))
        .context("installing the SIGINT/SIGTERM handler")?;
    eprintln!(
        "shmnet shared driver on {iface}, listening at {}: attach servers with `shmnet serve --structure server --attach {}`; Ctrl-C to stop",
        listen.display(),
        listen.display()
    );
    let report = std::sync::Mutex::new(SharedDriverStats::default());
    let out = shared.run(nic, &stop, &report);
    let _ = std::fs::remove_file(listen);
    let last = out.context("the shared driver stopped")?;
    if a.json {
        println!("{}", serde_json::to_string(&last)?);
    } else {
        eprintln!(
            "shared driver: {} frames in, {} out; {} servers attached, {} went away, {} refused",
            last.driver.rx_frames,
            last.driver.tx_frames,
            last.attached,
            last.detached,
            last.refused
        );
    }
    Ok(())
}

/// `nic`, impaired as `spec` says (`--impair`).
fn impaired<D: Driver>(nic: D, spec: &ImpairSpec) -> Result<Impaired<D>> {
    Impaired::new(nic, spec.clone()).context("setting up --impair (its epoll set and timer)")
}

/// Drives the device just opened (impaired as `impair` says, if it says), or tells the
/// server why it could not be.
fn drive_with<D: Driver>(
    attached: shmnet_io::server::AttachedDriver,
    opened: Result<D>,
    impair: Option<&ImpairSpec>,
) -> Result<()> {
    let nic = match opened {
        Ok(nic) => nic,
        Err(e) => {
            attached.fail(&format!("{e:#}"));
            return Err(e.context("driver process"));
        }
    };
    let Some(spec) = impair else {
        return attached.run(nic).context("driver process");
    };
    match impaired(nic, spec) {
        Ok(nic) => attached.run(nic).context("driver process"),
        Err(e) => {
            attached.fail(&format!("{e:#}"));
            Err(e.context("driver process"))
        }
    }
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    dev: DriverArgs,
    /// server structure: where the driver runs — `polled` by the server's own loop (no
    /// queue between them: the fastest on few cores), `thread` (a thread of the server
    /// joined by the IN and OUT queues), or `process` (a process of its own, seed 002's
    /// layout: the driver alone holds the device). The ipc structure always uses a thread.
    #[arg(long, value_enum, default_value = "polled")]
    placement: PlacementArg,
    /// Same as `--placement thread` (kept for scripts).
    #[arg(long, hide = true)]
    driver_thread: bool,
    /// server structure, `--placement thread|process`: how the driver and the server share
    /// their IN and OUT queues — `modern` (wait-free rings, eventfd wake-ups) or `faithful` (seed
    /// 002's own: asymmetric Peterson mutexes from 32-bit loads and stores, two sub-queues
    /// per queue with the Enable protocol, a condition variable over counting events;
    /// docs/channel.md). `shmnet stats` shows the queues' counters under `faithful`.
    #[arg(long, value_enum, default_value = "modern")]
    sync: SyncArg,
    /// Our IPv6 address and prefix, e.g. fd00::1/64: the server answers neighbour
    /// discovery and ICMPv6 echo (ping -6) there.
    #[arg(long, value_name = "ADDR/PREFIX", value_parser = parse_cidr6)]
    ip6: Option<(std::net::Ipv6Addr, u8)>,
    /// The families this server takes from its driver: `ipv4` (with ARP), `ipv6`, or
    /// `both` (default: ipv6 when only --ip6 is given, both when --ip and --ip6 are, else
    /// ipv4). The driver sheds the rest —
    /// or, shared (--attach), hands them to the server that takes them.
    #[arg(long, value_enum)]
    family: Option<FamilyArg>,
    /// server structure: attach to the shared driver listening at PATH (`shmnet driver
    /// --listen PATH --device IFACE`) instead of opening a device: several servers then
    /// share one interface, each taking its own --family, and each may stop or die without
    /// disturbing the others.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["placement", "driver", "impair"])]
    attach: Option<PathBuf>,
    /// server structure: connections the control socket accepts at once (applications,
    /// `shmnet stats`, not yet greeted); the next is told the server is full.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    max_connections: usize,
    /// server structure: seconds a new connection may take to say Hello before it is closed.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    hello_timeout: f64,
    /// server structure: memory regions one application may register (its own send and
    /// receive buffers, seed 004); the next registration is refused.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    max_regions: u32,
    /// server structure: bytes of registered memory one application may hold (suffixes
    /// are not taken: give bytes).
    #[arg(long, default_value_t = 1 << 30, value_name = "BYTES")]
    max_registered_bytes: u64,
    /// server structure: what an application may see. `regions`: only its own memory — it
    /// registers regions, posts receive buffers and sends by handle, and the server copies
    /// each datagram into a posted buffer (seed 004; docs/isolation.md). `shared`: the data
    /// window — it reads datagrams where the driver put them (one copy fewer for large
    /// datagrams; every application can read and disturb all traffic, so use it only for
    /// applications that trust each other).
    #[arg(long, default_value = "regions", value_name = "regions|shared")]
    isolation: shmnet_io::spec::Isolation,
    /// server structure, `--isolation regions`: what a lookup-cache miss does to a request.
    /// `buffer`: the request waits until the miss thread has brought the line in, holding up
    /// only that application's later requests. `drop` (seed 004's choice, for comparison):
    /// the send completes as missed and the client library sends it again at its next call;
    /// a datagram being received is dropped and counted (UDP does not retransmit it).
    #[arg(long, default_value = "buffer", value_name = "buffer|drop")]
    on_miss: shmnet_io::spec::OnMiss,
    /// How the parties are placed.
    #[arg(long, value_enum, default_value = "inline")]
    structure: Structure,
    /// Run a UDP echo application on PORT (repeatable).
    #[arg(long, value_name = "PORT")]
    echo: Vec<u16>,
    /// Run a UDP sink on PORT: read and discard (repeatable). With softnic, the sink checks
    /// every byte of every message.
    #[arg(long, value_name = "PORT")]
    sink: Vec<u16>,
    /// Run a TCP echo application listening on PORT (repeatable): every byte of every
    /// connection goes back; it closes after the peer does.
    #[arg(long, value_name = "PORT")]
    tcp_echo: Vec<u16>,
    /// Run a TCP sink listening on PORT (repeatable): reads and discards.
    #[arg(long, value_name = "PORT")]
    tcp_sink: Vec<u16>,
    /// Stop after this many seconds (default: when softnic has sent --softnic-count
    /// messages, else at Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Print the final report as JSON.
    #[arg(long)]
    json: bool,
    /// server and ipc structures: the control socket applications attach to (default: in a
    /// directory private to you: /run/shmnet for root, else $XDG_RUNTIME_DIR/shmnet or
    /// /tmp/shmnet-$UID; $SHMNET_RUNTIME_DIR overrides).
    #[arg(long, default_value_os_t = shmnet_io::control::default_socket())]
    socket: PathBuf,
    /// af_packet: serve the interface even if another shmnet server already does (both will
    /// answer every frame: peers see duplicate replies).
    #[arg(long)]
    force: bool,
    /// server and ipc structures: serve every counter at http://ADDR:PORT/metrics in the
    /// Prometheus text format, fresh at each scrape (e.g. 127.0.0.1:9464; port 0 picks a
    /// free one, printed at start).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Messages a socket's receive queue holds before the stack drops (and counts) more.
    #[arg(long, default_value_t = 64, value_name = "MESSAGES")]
    rx_queue: usize,
    /// On a loopback (`--driver loopback`): how long a UDP sender whose receiver is a full
    /// socket of this server waits for room before what it sends overflows that socket, in
    /// milliseconds. Between applications that keep reading nothing is lost; a receiver
    /// that stops holds its senders up this long. 0: never wait (drop at once, as Linux's
    /// UDP over lo does).
    #[arg(long, default_value_t = shmnet_stack::iface::UDP_LOCAL_HOLD.as_millis() as u64, value_name = "MS")]
    udp_local_hold: u64,
    /// The pages the packet buffers live on: `4k`, `2m` (reserved huge pages: write
    /// /proc/sys/vm/nr_hugepages first) or `thp` (transparent huge pages where allowed).
    #[arg(long, default_value = "4k", value_name = "4k|2m|thp")]
    page: shmnet_chan::PageSize,
    /// Which free buffer the driver is handed: `lifo` (the most recently freed, likely still
    /// in the cache), `fifo` (the least recently freed) or `random`. Default: `fifo` for
    /// `--structure server --isolation shared`, where the application reads each buffer on
    /// its own core (the one it freed last is still in that core's cache, so the driver's
    /// writes would first have to take its lines from there); `lifo` otherwise.
    #[arg(long, value_name = "lifo|fifo|random")]
    alloc: Option<shmnet_chan::AllocPolicy>,
}

impl ServeArgs {
    /// The spec these options describe (what [`run`] runs): refuses options that do not
    /// apply to the chosen driver, and drivers shmnet does not know.
    pub fn to_spec(&self) -> Result<ServeSpec> {
        let spec = ServeSpec {
            structure: match self.structure {
                Structure::Inline => ServeStructure::Inline,
                Structure::Server => ServeStructure::Server,
                Structure::Ipc => ServeStructure::Ipc,
            },
            placement: match (self.placement, self.driver_thread) {
                (_, true) | (PlacementArg::Thread, _) => Placement::Thread,
                (PlacementArg::Polled, _) => Placement::Polled,
                (PlacementArg::Process, _) => Placement::Process,
            },
            sync: match self.sync {
                SyncArg::Modern => shmnet_io::server::SyncMode::Modern,
                SyncArg::Faithful => shmnet_io::server::SyncMode::Faithful,
            },
            driver: self.dev.to_spec()?,
            ip: self.dev.ip.unwrap_or(DEFAULT_IP).0,
            prefix: self.dev.ip.unwrap_or(DEFAULT_IP).1,
            gateway: self.dev.gateway,
            ip6: self.ip6,
            families: match (self.family, self.ip6, self.dev.ip.is_some()) {
                (Some(FamilyArg::Ipv4), ..) | (None, None, _) => Families::IPV4,
                (Some(FamilyArg::Ipv6), ..) | (None, Some(_), false) => Families::IPV6,
                (Some(FamilyArg::Both), ..) | (None, Some(_), true) => Families::BOTH,
            },
            attach: self.attach.clone(),
            checksum: !self.dev.no_checksum,
            buffers: self.dev.buffers,
            cache: if self.dev.buffers.is_none() {
                Default::default()
            } else {
                shmnet_lab::cacheinfo::geometry()
            },
            mtu: self.dev.mtu,
            rx_queue: self.rx_queue,
            udp_local_hold_ms: self.udp_local_hold,
            page: self.page,
            alloc: self.alloc,
            // Not a `shmnet serve` option (yet): the residency lab's knob.
            layout: shmnet_chan::BufferLayout::Contiguous,
            socket: self.socket.clone(),
            max_connections: self.max_connections,
            hello_timeout_s: self.hello_timeout,
            max_regions: self.max_regions,
            max_registered_bytes: self.max_registered_bytes,
            isolation: self.isolation,
            on_miss: self.on_miss,
            echo: self.echo.clone(),
            sink: self.sink.clone(),
            tcp_echo: self.tcp_echo.clone(),
            tcp_sink: self.tcp_sink.clone(),
            duration_s: self.duration,
            json: self.json,
            force: self.force,
            metrics: self.metrics,
            copy_probe: None,
        };
        if spec.metrics.is_some() && spec.structure == ServeStructure::Inline {
            bail!(
                "--metrics needs --structure server (or ipc): the inline structure has no control socket to read its counters from"
            );
        }
        spec.check_mtu()?;
        spec.check_gateway()?;
        spec.check_sync()?;
        spec.check_families()?;
        Ok(spec)
    }
}

/// The addresses a server answers on, by the families it takes.
fn addresses(a: &ServeSpec) -> String {
    let v4 = format!("{}/{}", a.ip, a.prefix);
    let v6 = a.ip6.map(|(ip, p)| format!("{ip}/{p}"));
    match (a.families.ipv4, v6.filter(|_| a.families.ipv6)) {
        (true, Some(v6)) => format!("{v4} and {v6}"),
        (false, Some(v6)) => v6,
        _ => v4,
    }
}

/// `--family`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum FamilyArg {
    /// IPv4 and ARP.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// Both.
    Both,
}

fn parse_cidr6(s: &str) -> Result<(std::net::Ipv6Addr, u8), String> {
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("expected ADDRESS/PREFIX like fd00::1/64, got {s:?}"))?;
    let ip: std::net::Ipv6Addr = a.parse().map_err(|_| format!("bad IPv6 address {a:?}"))?;
    let prefix: u8 = p.parse().map_err(|_| format!("bad prefix {p:?}"))?;
    if prefix > 128 {
        return Err(format!("prefix {prefix} is longer than 128"));
    }
    if ip.is_multicast() || ip.is_unspecified() || ip.is_loopback() {
        return Err(format!("{ip} cannot be a host's address"));
    }
    Ok((ip, prefix))
}

fn parse_cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("expected ADDRESS/PREFIX like 10.0.0.1/24, got {s:?}"))?;
    let ip = a.parse().map_err(|_| format!("bad IPv4 address {a:?}"))?;
    let prefix: u8 = p.parse().map_err(|_| format!("bad prefix {p:?}"))?;
    if prefix > 32 {
        return Err(format!("prefix {prefix} is longer than 32"));
    }
    Ok((ip, prefix))
}

/// CPU seconds of the server structure's parties.
#[derive(serde::Serialize)]
struct CpuSplit {
    server: f64,
    driver: f64,
}

/// What `shmnet serve --structure server|ipc` prints when it stops: every counter, and who
/// used the CPU.
#[derive(serde::Serialize)]
struct ServerReport {
    #[serde(flatten)]
    stats: shmnet_io::server::ServerStats,
    cpu_s: CpuSplit,
}

#[derive(serde::Serialize)]
struct Report {
    structure: &'static str,
    driver: String,
    seconds: f64,
    messages: u64,
    msgs_per_s: f64,
    gbit_per_s: f64,
    apps: shmnet_io::inline::AppStats,
    driver_stats: shmnet_io::driver::DriverStats,
    /// Every counter of the stack, by name (as the server structure's `stats.stack`).
    stack: shmnet_stack::Stats,
    tcp: shmnet_stack::tcp::TcpCounters,
    window: shmnet_chan::WindowStats,
}

/// Runs `shmnet serve` as `spec` says, until softnic is done, a benchmark's board says quit,
/// the time limit, or a signal.
pub fn run(spec: ServeSpec) -> Result<()> {
    // One server per interface, held until this function returns (every structure).
    // A spec that did not come through the options (`shmnet party`) is checked too.
    spec.check_sync()?;
    let _lock = match spec.driver.af_packet() {
        Some(iface) => crate::iface_lock::lock_or_warn(iface, spec.force)?,
        None => None,
    };
    match spec.structure {
        ServeStructure::Inline => {}
        ServeStructure::Server | ServeStructure::Ipc => return run_server(&spec),
    }
    let apps: Vec<App> = spec
        .echo
        .iter()
        .map(|&p| App::Echo(p))
        .chain(spec.sink.iter().map(|&p| match spec.driver.softnic() {
            Some(s) => App::CheckedSink(p, s.size),
            None => App::Sink(p),
        }))
        .chain(spec.tcp_echo.iter().map(|&p| App::TcpEcho(p)))
        .chain(spec.tcp_sink.iter().map(|&p| App::TcpSink(p)))
        .collect();
    let cfg = spec.serve_config(apps.clone());
    match &spec.driver {
        DriverSpec::Softnic(soft) => {
            let Some(first) = apps.first() else {
                bail!("softnic sends to an application: add --sink PORT (or --echo PORT)");
            };
            let nic = open_softnic(soft, spec.ip, spec.checksum, first.port(), None)?;
            let banner = format!(
                "shmnet inline over softnic: {} messages of {} B to port {}; {}; Ctrl-C to stop",
                soft.count,
                soft.size,
                first.port(),
                describe_apps(&apps)
            );
            serve_inline(nic, &spec, &cfg, &banner, |d| d.done())
        }
        DriverSpec::AfPacket {
            iface,
            access,
            give_up_after_s,
            ..
        } => {
            let nic = open_nic(&NicSpec {
                iface,
                access: *access,
                ip: spec.families.ipv4.then_some(spec.ip),
                ip6: spec.ip6.map(|(ip, _)| ip).filter(|_| spec.families.ipv6),
                mtu: spec.mtu as u32,
                give_up_after: give_up(*give_up_after_s),
            })?;
            let banner = format!(
                "shmnet inline on {iface} ({}) as {}/{}: answering ARP and ping; {}; Ctrl-C to stop",
                nic.kind(),
                spec.ip,
                spec.prefix,
                describe_apps(&apps)
            );
            serve_inline(nic, &spec, &cfg, &banner, |_| false)
        }
    }
}

/// Runs the inline structure over `nic` (impaired if the spec says `--impair`), saying
/// `banner` once it is up; `finished` says when the device is done (softnic sent all).
fn serve_inline<D: Driver>(
    nic: D,
    spec: &ServeSpec,
    cfg: &shmnet_io::inline::ServeConfig,
    banner: &str,
    finished: impl Fn(&D) -> bool,
) -> Result<()> {
    let Some(impair) = spec.driver.impair() else {
        let server =
            Inline::with_page(nic, cfg, spec.page).context("starting the inline server")?;
        eprintln!("{banner}");
        return serve(server, spec, |s| finished(s.driver()));
    };
    let server = Inline::with_page(impaired(nic, impair)?, cfg, spec.page)
        .context("starting the inline server")?;
    eprintln!("{banner}");
    eprintln!("impairing the frames both ways: {impair}");
    // Done once the device is, and nothing is held back any more.
    serve(server, spec, |s| {
        s.driver().held() == 0 && finished(s.driver().inner())
    })
}

fn describe_apps(apps: &[App]) -> String {
    if apps.is_empty() {
        return "ports: none (add --echo, --sink, --tcp-echo or --tcp-sink PORT)".into();
    }
    apps.iter()
        .map(|a| match a {
            App::Echo(p) => format!("UDP echo on {p}"),
            App::Sink(p) | App::CheckedSink(p, _) => format!("UDP sink on {p}"),
            App::Caller(p) => format!("bound for the caller on {p}"),
            App::TcpEcho(p) => format!("TCP echo on {p}"),
            App::TcpSink(p) => format!("TCP sink on {p}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Opens a real interface as `spec` says (`AF_PACKET`, `AF_XDP`, or `auto`).
fn open_nic(spec: &NicSpec<'_>) -> Result<Nic> {
    Ok(Nic::open(spec)?)
}

/// `--give-up-after` in seconds as the driver takes it (0: never).
fn give_up(seconds: f64) -> Option<Duration> {
    (seconds > 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// The MAC address of `iface`, as the kernel reports it.
fn mac_of(iface: &str) -> Result<[u8; 6]> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{iface}/address"))
        .with_context(|| format!("no network interface named {iface:?} (see `ip link`)"))?;
    let bytes: Vec<u8> = text
        .trim()
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("{iface} has no Ethernet address ({})", text.trim()))
}

/// What ends a run of `shmnet serve` (Ctrl-C, SIGTERM or `--duration`), and its status line
/// (shown on a terminal, hidden with `--json`). Either signal ends the loop, and the run then
/// stops its parties, removes its control socket and prints its final counters.
struct RunControl {
    stop: Arc<AtomicBool>,
    start: Instant,
    limit: Option<Duration>,
    pb: indicatif::ProgressBar,
}

impl RunControl {
    fn new(a: &ServeSpec) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        // With ctrlc's `termination` feature this catches SIGTERM (and SIGHUP) too.
        ctrlc::set_handler(move || s2.store(true, Ordering::Relaxed))
            .context("installing the SIGINT/SIGTERM handler")?;
        Ok(Self {
            stop,
            start: Instant::now(),
            limit: a.duration_s.map(Duration::from_secs_f64),
            pb: if a.json {
                indicatif::ProgressBar::hidden()
            } else {
                indicatif::ProgressBar::new_spinner()
            },
        })
    }

    /// Neither Ctrl-C nor the time limit has come.
    fn keep_going(&self) -> bool {
        !self.stop.load(Ordering::Relaxed) && self.limit.is_none_or(|l| self.start.elapsed() < l)
    }
}

fn serve<D: Driver>(
    mut server: Inline<D>,
    a: &ServeSpec,
    finished: impl Fn(&Inline<D>) -> bool,
) -> Result<()> {
    let run = RunControl::new(a)?;
    let (start, pb) = (run.start, &run.pb);
    let mut last = (Instant::now(), 0u64);
    let mut idle_after_done = 0;
    loop {
        let work = server.step();
        if work == 0 {
            if finished(&server) {
                // softnic has sent everything: a few more rounds for what is in flight.
                idle_after_done += 1;
                if idle_after_done > 100 {
                    break;
                }
            } else {
                // Asleep on the device until it has frames (or the next timer): an idle
                // server costs no CPU. 50 ms bounds how late Ctrl-C and --duration are seen.
                server.idle(Duration::from_millis(50));
                // A driver that gave up for good (it said why on stderr) ends the run.
                if server.driver().link() == shmnet_io::driver::LinkState::Failed {
                    bail!(
                        "the driver {} stopped: see the message above",
                        a.driver.name()
                    );
                }
            }
        }
        if !run.keep_going() {
            break;
        }
        if last.0.elapsed() >= Duration::from_millis(500) {
            let m = server.app_stats().messages;
            let rate = (m - last.1) as f64 / last.0.elapsed().as_secs_f64();
            pb.set_message(format!("{m} messages, {rate:.0}/s"));
            pb.tick();
            last = (Instant::now(), m);
        }
    }
    pb.finish_and_clear();
    server.release_driver_buffers();
    let secs = start.elapsed().as_secs_f64();
    let apps = server.app_stats().clone();
    let report = Report {
        structure: "inline",
        driver: a.driver.name(),
        seconds: secs,
        messages: apps.messages,
        msgs_per_s: apps.messages as f64 / secs,
        gbit_per_s: apps.bytes as f64 * 8.0 / secs / 1e9,
        apps,
        driver_stats: server.driver_stats(),
        stack: server.stack_stats().clone(),
        tcp: server.tcp_counters().clone(),
        window: server.window().stats(),
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "inline over {}: {} messages in {:.2} s = {:.0} msgs/s, {:.2} Gbit/s of payload",
            report.driver, report.messages, secs, report.msgs_per_s, report.gbit_per_s
        );
        println!(
            "apps: {} corrupt, {} echo failures",
            report.apps.corrupt, report.apps.echo_failures
        );
        let d = &report.driver_stats;
        println!(
            "driver: rx {} frames ({} no buffer, {} runts, {} unknown type, {} device drops), tx {} frames ({} errors)",
            d.rx_frames,
            d.rx_no_buffer,
            d.rx_runts,
            d.rx_unknown_type,
            d.rx_device_drops,
            d.tx_frames,
            d.tx_errors
        );
        if let Some(i) = &d.impair {
            println!(
                "impair: rx {}, tx {}",
                serde_json::to_string(&i.rx)?,
                serde_json::to_string(&i.tx)?
            );
        }
        let stack: Vec<String> = report
            .stack
            .fields()
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!("stack: {}", stack.join(" "));
        if report.tcp != shmnet_stack::tcp::TcpCounters::default() {
            let tcp: Vec<String> = report
                .tcp
                .fields()
                .into_iter()
                .filter(|(_, v)| *v != 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!("tcp: {}", tcp.join(" "));
        }
        let p = &report.window.pools;
        println!(
            "pools: {} of {} buffers free, {} driver drops, {} deferred frees",
            p.pools.iter().filter_map(|x| x.free).sum::<u32>(),
            p.pools.iter().map(|x| x.buffers).sum::<u32>(),
            p.driver_drops,
            p.deferred
        );
    }
    Ok(())
}

/// Writes the probe installed around the server's copies ([`ServeSpec::copy_probe`]) to
/// `out`, for the residency lab that started this server to read.
fn write_copy_probe(server: &mut shmnet_io::server::Server, out: &Path) -> Result<()> {
    let probe: Box<dyn std::any::Any> = server
        .take_copy_probe()
        .context("the copy probe was installed at start")?;
    let probe = probe
        .downcast::<Probe>()
        .map_err(|_| anyhow::anyhow!("the copy probe is the residency probe"))?;
    let json = serde_json::to_vec(&*probe)?;
    std::fs::write(out, json).with_context(|| format!("writing {}", out.display()))
}

/// Starts the server structure with `nic` polled by its loop or on a thread of it (as
/// `opts` says), impaired as `impair` says (`--impair`). A driver process impairs its own
/// device: its spec travels with the device's.
fn start_in_process<D: Driver + 'static>(
    nic: D,
    impair: Option<&ImpairSpec>,
    opts: &shmnet_io::server::ServerOptions,
) -> Result<shmnet_io::server::Server> {
    Ok(match impair {
        None => shmnet_io::server::Server::start(nic, opts)?,
        Some(i) => shmnet_io::server::Server::start(impaired(nic, i)?, opts)?,
    })
}

fn run_server(a: &ServeSpec) -> Result<()> {
    use shmnet_io::server::Server;
    if !a.echo.is_empty() || !a.sink.is_empty() || !a.tcp_echo.is_empty() || !a.tcp_sink.is_empty()
    {
        bail!(
            "in the server structure applications are processes of their own: start `shmnet app sink --port P` (or echo) after the server, not --sink/--echo"
        );
    }
    // Before anything starts, so that a signal during start-up also ends in order.
    let run = RunControl::new(a)?;
    let opts = a.server_options();
    let ipc = opts.ipc;
    let gate = Arc::new(AtomicBool::new(false));
    // An attached server drives no device of its own: its `driver` spec is unused.
    let softnic = a.driver.softnic().filter(|_| a.attach.is_none());
    let placement = a.effective_placement();
    let as_thread = placement != Placement::Process;
    let mut server = if let Some(path) = &a.attach {
        Server::attach_to_driver(&opts, path, Duration::from_secs(10)).map_err(anyhow::Error::from)
    } else if as_thread {
        let impair = a.driver.impair();
        match &a.driver {
            DriverSpec::AfPacket {
                iface,
                access,
                give_up_after_s,
                ..
            } => start_in_process(
                open_nic(&NicSpec {
                    iface,
                    access: *access,
                    ip: a.families.ipv4.then_some(a.ip),
                    ip6: a.ip6.map(|(ip, _)| ip).filter(|_| a.families.ipv6),
                    mtu: a.mtu as u32,
                    give_up_after: give_up(*give_up_after_s),
                })?,
                impair,
                &opts,
            ),
            DriverSpec::Softnic(s) => start_in_process(
                open_softnic(s, a.ip, a.checksum, s.port, Some(gate.clone()))?,
                impair,
                &opts,
            ),
        }
    } else {
        let mac = match &a.driver {
            DriverSpec::AfPacket { iface, .. } => mac_of(iface)?,
            DriverSpec::Softnic(s) => s.mac(),
        };
        let exe = std::env::current_exe().context("finding this program to start the driver")?;
        Server::start_with_driver_process(
            mac,
            &opts,
            &a.driver,
            |path| {
                use std::os::unix::process::CommandExt;
                std::process::Command::new(exe)
                    // Its own process group: a Ctrl-C at the terminal reaches the server
                    // only, which then stops the driver in order (the driver also exits
                    // when the server's socket closes).
                    .process_group(0)
                    .arg("driver")
                    .arg("--socket")
                    .arg(path)
                    .spawn()
            },
            Duration::from_secs(10),
        )
        .map_err(anyhow::Error::from)
    }
    .context("starting the server")?;
    if let Some(p) = &a.copy_probe {
        server.probe_copies(Box::new(Probe::new(p.capacity, p.tlb_force)));
    }
    if softnic.is_none() {
        server.start_driver();
    }
    let data_mib = server.data_window().size() as f64 / (1 << 20) as f64;
    let driver = match &a.attach {
        Some(p) => format!("shared at {}", p.display()),
        None => a.driver.name(),
    };
    eprintln!(
        "shmnet {} structure, driver {driver} ({}{}) on {}, control socket {}; data window {data_mib:.1} MiB{}",
        if ipc { "ipc" } else { "server" },
        if a.attach.is_some() {
            "process"
        } else {
            placement.name()
        },
        match a.sync {
            shmnet_io::server::SyncMode::Modern => "",
            shmnet_io::server::SyncMode::Faithful => ", seed 002's queues",
        },
        addresses(a),
        a.socket.display(),
        match softnic {
            Some(s) if s.loopback => "; the loopback wire hands every frame back".into(),
            Some(s) => format!(
                "; softnic sends {} messages of {} B to port {} once an application binds it",
                s.count, s.size, s.port
            ),
            None => String::new(),
        }
    );
    if let Some(impair) = a.driver.impair() {
        eprintln!("impairing the frames both ways: {impair}");
    }
    if let Some(addr) = a.metrics {
        let bound = crate::metrics::spawn(addr, a.socket.clone())?;
        eprintln!("metrics at http://{bound}/metrics");
    }
    let pb = &run.pb;
    let mut last = (Instant::now(), 0u64);
    // A benchmark run ends when its harness says so on the scoreboard.
    let board = a.driver.bench().map(open_board).transpose()?;
    let quit = || board.as_ref().is_some_and(|b| b.quitting());
    let mut driver_died = false;
    while run.keep_going() && !quit() {
        if softnic.is_some() && !gate.load(Ordering::Relaxed) && server.sockets_bound() > 0 {
            gate.store(true, Ordering::Release);
            server.start_driver();
        }
        if server.step() == 0 {
            if server.driver_stopped() {
                // Without its device the server has nothing to serve: say so and exit, so
                // that applications see the server go and a supervisor can restart it.
                let why = server.stats().driver_stopped.unwrap_or_default();
                pb.suspend(|| eprintln!("shmnet: the driver stopped ({why}): shutting down"));
                driver_died = true;
                break;
            }
            server.idle(Duration::from_millis(50));
        }
        if last.0.elapsed() >= Duration::from_secs(1) {
            let st = server.stats();
            let delivered = st.stack.udp_delivered;
            let rate = (delivered - last.1.min(delivered)) as f64 / last.0.elapsed().as_secs_f64();
            pb.set_message(format!(
                "{} applications, {delivered} datagrams delivered ({rate:.0}/s), {} frames from the driver",
                server.apps_attached(),
                st.driver.driver.rx_frames
            ));
            pb.tick();
            last = (Instant::now(), delivered);
        }
    }
    pb.finish_and_clear();
    server.shutdown();
    if let Some(p) = &a.copy_probe {
        write_copy_probe(&mut server, &p.out)?;
    }
    let stats = server.stats();
    // Who used the CPU: the server loop, and the driver (its thread's own count, or the
    // driver process reaped by `shutdown`; a polled driver's time is the server's).
    let driver_thread_s = stats.driver.cpu_us as f64 / 1e6;
    let (own, children) = (
        shmnet_io::server::rusage_cpu_s(libc::RUSAGE_SELF),
        shmnet_io::server::rusage_cpu_s(libc::RUSAGE_CHILDREN),
    );
    let cpu_s = if as_thread {
        CpuSplit {
            server: own - driver_thread_s,
            driver: driver_thread_s,
        }
    } else {
        CpuSplit {
            server: own,
            driver: children,
        }
    };
    let report = ServerReport { stats, cpu_s };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    if driver_died {
        bail!("the driver stopped before the server was told to: see its last counters above");
    }
    Ok(())
}
