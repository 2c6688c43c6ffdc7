//! Typed specs of shmnet's parties: what `shmnet serve` runs ([`ServeSpec`]) and what its
//! packet device is ([`DriverSpec`]).
//!
//! The command line builds these from its options, the benchmark harness (shmnet-lab's
//! netbench) builds them directly, and both hand the same struct to the same runner: the
//! harness starts a party by writing its spec as JSON to a hidden `shmnet party` command, not
//! by composing a command line. A driver process of the server structure gets its
//! [`DriverSetup`] from the server over the control socket, so nothing about the device
//! travels in argv either.
//!
//! The specs are data only: they name files (the benchmark board) and interfaces but open
//! nothing. Opening the device is the runner's job, so that a spec can be built, checked and
//! sent by a party that could not open it (the harness, the server for its driver process).
//!
//! Invariants: a [`DriverSpec::AfPacket`] carries no MAC (the interface's own is used), so
//! "--mac with af_packet" cannot be expressed; [`SoftnicSpec::bench`] set means a benchmark
//! run, whose end the board decides.

pub use crate::driver::impair::{ImpairSpec, ImpairSpecError};
use crate::driver::softnic::{Dma, Schedule, SoftnicConfig};
use crate::inline::{App, ServeConfig};
use crate::server::{ControlLimits, Placement, ServerOptions, SyncMode};
use serde::{Deserialize, Serialize};
use shmnet_chan::{AllocPolicy, BufferLayout, PageSize, PoolSpec};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a spec cannot be built from what the user gave.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `--driver` names no device shmnet knows.
    #[error(
        "unknown driver {0:?}: use softnic, loopback, af_packet:IFACE, af_xdp:IFACE[:QUEUE] or \
         auto:IFACE[:QUEUE]"
    )]
    UnknownDriver(String),
    /// `--mac` was given for a device that has its own.
    #[error(
        "--mac applies to softnic only: with af_packet, shmnet answers with the interface's own MAC address (change it with `ip link set IFACE address …`)"
    )]
    MacWithAfPacket,
    /// `--softnic-role` names no part of a benchmark run.
    #[error("unknown softnic role {0:?}: use send, sink or loopback")]
    UnknownRole(String),
    /// `--gateway` is not on our subnet: it could not be reached to forward anything.
    #[error(
        "--gateway {gateway} is not on {ip}/{prefix}: give a router on the subnet (or widen the prefix)"
    )]
    GatewayOffLink {
        /// The gateway asked for.
        gateway: Ipv4Addr,
        /// Our address.
        ip: Ipv4Addr,
        /// Its prefix length.
        prefix: u8,
    },
    /// `--mtu` is outside what the stack and the pool buffers carry.
    #[error("--mtu {0} is out of range: use {MIN_MTU} to {MAX_MTU} bytes")]
    Mtu(usize),
    /// `--sync faithful` where there is no driver apart from the server structure's loop.
    #[error(
        "--sync faithful joins a driver to the server by seed 002's queues: use --structure server with --placement thread or process, not the {0}"
    )]
    FaithfulSync(&'static str),
    /// IPv6 asked for without an IPv6 address.
    #[error("--family {0} serves IPv6: give the server an IPv6 address with --ip6 ADDR/PREFIX")]
    NoIpv6Address(&'static str),
    /// A server that serves no family.
    #[error("the server serves no family: use --family ipv4, ipv6 or both")]
    NoFamily,
    /// `--attach` outside the server structure.
    #[error(
        "--attach joins a server to a running `shmnet driver --listen`: use it with --structure server"
    )]
    AttachNeedsServer,
    /// `--ip6` given to a server that does not take IPv6.
    #[error(
        "--ip6 is given but --family {0} leaves IPv6 out: use --family ipv6 or both, or drop --ip6"
    )]
    Ipv6Unused(&'static str),
    /// An IPv6-only server on a device that carries IPv4 only.
    #[error(
        "the softnic and loopback devices carry IPv4 only: an IPv6 server needs --driver af_packet:IFACE or --attach PATH"
    )]
    Ipv4OnlyDevice,
}

/// The smallest MTU `shmnet serve` takes (IPv4's minimum datagram every host must accept).
pub const MIN_MTU: usize = 576;
/// The largest MTU `shmnet serve` takes: one frame per pool buffer, and a pool buffer holds
/// at most [`shmnet_chan::layout::MAX_DATA_SIZE`] bytes.
pub const MAX_MTU: usize = shmnet_chan::layout::MAX_DATA_SIZE as usize - 14 - 60;

/// How `shmnet serve` places its parties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServeStructure {
    /// Driver, stack and the built-in applications in one thread.
    #[default]
    Inline,
    /// The protocol server; applications attach through the control socket.
    Server,
    /// As `Server`, every frame and datagram copied through Unix sockets.
    Ipc,
}

impl ServeStructure {
    /// Its name, as `--structure` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Inline => "inline",
            Self::Server => "server",
            Self::Ipc => "ipc",
        }
    }
}

/// What an application of the `server` structure may see (docs/isolation.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Applications map the data window and read datagrams where the driver put them: one
    /// copy fewer, for applications that trust each other (each can read and disturb all
    /// traffic). The residency lab studies this copy.
    Shared,
    /// Each application sees only its own memory: it registers regions, posts receive
    /// buffers and sends by handle; the server copies each datagram into a posted buffer and
    /// checks every handle through the lookup cache (seed 004). The default.
    #[default]
    Regions,
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "shared" => Ok(Self::Shared),
            "regions" => Ok(Self::Regions),
            _ => Err(format!("{s:?}: use `shared` or `regions`")),
        }
    }
}

/// What the data plane does with a request whose handle missed in the lookup cache (seed
/// 004's choice; docs/isolation.md).
///
/// The seed dropped, because its NIC buffering a request stalled every application behind
/// it. Here each application's requests wait in its own queues, so holding one stalls only
/// the application that missed — and UDP has no retransmission to recover a datagram dropped
/// on receive — so `Buffer` is the default and `Drop` is kept for the seed's comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMiss {
    /// Drop it and go on (the seed's choice): a send completes as `Miss` and the client
    /// library sends it again at its next call; a received datagram is dropped and counted.
    Drop,
    /// Hold it until the miss thread has served the line: the application's later sends
    /// wait behind it, or the datagram waits in its socket's queue (a receive).
    #[default]
    Buffer,
}

impl std::str::FromStr for OnMiss {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "drop" => Ok(Self::Drop),
            "buffer" => Ok(Self::Buffer),
            _ => Err(format!("{s:?}: use `drop` or `buffer`")),
        }
    }
}

/// softnic's part in a benchmark run (`shmnet ttcp`, `shmnet rr`). Data only: shmnet-lab's
/// `softnic_roles` turns it, with the opened board, into a paced softnic (the sender and the
/// sink) or a loopback softnic. It is named here, not in the lab, because the spec that
/// carries it is shared by the command line, the harness and the driver process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchRole {
    /// The streaming sender (ttcp receive).
    #[default]
    Send,
    /// The receiving peer (ttcp transmit).
    Sink,
    /// The loopback wire of a request–response run.
    Loopback,
}

impl BenchRole {
    /// Its name, as `--softnic-role` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Sink => "sink",
            Self::Loopback => "loopback",
        }
    }
}

impl std::str::FromStr for BenchRole {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s {
            "send" => Ok(Self::Send),
            "sink" => Ok(Self::Sink),
            "loopback" => Ok(Self::Loopback),
            other => Err(SpecError::UnknownRole(other.to_string())),
        }
    }
}

/// A benchmark run's scoreboard and softnic's part in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchPart {
    /// The run's scoreboard (a file the harness created).
    pub board: PathBuf,
    /// What softnic does in the run.
    pub role: BenchRole,
}

/// The software device and what it sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SoftnicSpec {
    /// UDP payload bytes per message.
    pub size: usize,
    /// In the server and ipc structures: the UDP port it sends to (inline sends to its first
    /// application's).
    pub port: u16,
    /// Messages to send.
    pub count: u64,
    /// Microseconds between messages (0: back to back).
    pub gap_us: f64,
    /// When, with a gap, each message is due.
    #[serde(default)]
    pub schedule: Schedule,
    /// How frames reach the buffers.
    #[serde(serialize_with = "dma_name", deserialize_with = "by_name")]
    pub dma: Dma,
    /// Its MAC address (`None`: [`SoftnicConfig`]'s default).
    pub mac: Option<[u8; 6]>,
    /// A benchmark run's board and softnic's part in it.
    pub bench: Option<BenchPart>,
    /// Impair the frames between softnic and the stack (`--impair`; see
    /// [`DriverSpec::impair`]; boxed, as it is rare and the spec travels by value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impair: Option<Box<ImpairSpec>>,
    /// `--driver loopback`: a wire that hands every frame back, as Linux's `lo` (the
    /// server's applications then reach each other at its address); generates nothing.
    #[serde(default)]
    pub loopback: bool,
}

impl Default for SoftnicSpec {
    fn default() -> Self {
        Self {
            size: 14_792,
            port: 5001,
            count: 100_000,
            gap_us: 0.0,
            schedule: Schedule::AfterPrevious,
            dma: Dma::Cached,
            mac: None,
            bench: None,
            impair: None,
            loopback: false,
        }
    }
}

impl SoftnicSpec {
    /// Its MAC address: the one given, or softnic's default.
    pub fn mac(&self) -> [u8; 6] {
        self.mac.unwrap_or(SoftnicConfig::default().mac)
    }

    /// Whether it is a benchmark's loopback wire (the stack then reaches its own address).
    pub fn loopback(&self) -> bool {
        self.loopback
            || self
                .bench
                .as_ref()
                .is_some_and(|b| b.role == BenchRole::Loopback)
    }

    /// softnic's configuration for a server at `ip`, sending to `port`: everything but its
    /// benchmark part (the runner opens the board and applies the role: shmnet-lab's
    /// `softnic_roles`) and the gate.
    pub fn config(&self, ip: Ipv4Addr, checksum: bool, port: u16) -> SoftnicConfig {
        SoftnicConfig {
            mac: self.mac(),
            ip,
            dst_ports: vec![port],
            size: self.size,
            count: Some(self.count),
            gap: Duration::from_secs_f64(self.gap_us.max(0.0) / 1e6),
            schedule: self.schedule,
            checksum,
            dma: self.dma,
            loopback: self.loopback,
            ..SoftnicConfig::default()
        }
    }
}

/// The packet device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverSpec {
    /// The software sender.
    Softnic(SoftnicSpec),
    /// A real interface, through `AF_PACKET` (root or `CAP_NET_RAW`) or `AF_XDP` (root), as
    /// `access` says. (The variant keeps its first name: specs travel as JSON between a
    /// server and its driver process, and scripts hold them.)
    AfPacket {
        /// The interface's name.
        iface: String,
        /// How it is opened: `af_packet:IFACE`, `af_xdp:IFACE[:QUEUE]` or
        /// `auto:IFACE[:QUEUE]`.
        #[serde(default)]
        access: Access,
        /// Seconds the interface may stay down or missing before the driver gives up and
        /// the server exits non-zero (0: never give up).
        #[serde(default = "default_give_up_s")]
        give_up_after_s: f64,
        /// Impair the frames between the interface and the stack (`--impair`; see
        /// [`DriverSpec::impair`]; boxed, as it is rare and the spec travels by value).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        impair: Option<Box<ImpairSpec>>,
    },
}

/// How a real interface is opened ([`DriverSpec::AfPacket`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// An `AF_PACKET` socket with memory-mapped rings ([`crate::driver::af_packet`]).
    #[default]
    Packet,
    /// `AF_XDP` sockets on the device's queues, the pool as their UMEM
    /// ([`crate::driver::af_xdp`]).
    Xdp {
        /// The one device queue to serve (`af_xdp:IFACE:QUEUE`); `None`, every receive queue
        /// the device has (`af_xdp:IFACE`).
        queue: Option<u32>,
    },
    /// `AF_XDP` where the kernel and the interface can, else `AF_PACKET` (saying why).
    Auto {
        /// The device queue, for `AF_XDP`, as for [`Access::Xdp`].
        queue: Option<u32>,
    },
}

/// The default of [`DriverSpec::AfPacket`]'s `give_up_after_s`.
pub const DEFAULT_GIVE_UP_S: f64 = 60.0;

fn default_give_up_s() -> f64 {
    DEFAULT_GIVE_UP_S
}

impl Default for DriverSpec {
    fn default() -> Self {
        Self::Softnic(SoftnicSpec::default())
    }
}

impl DriverSpec {
    /// The device `--driver` names (`softnic` or `af_packet:IFACE`), softnic configured as
    /// `softnic` says and answering at `mac` (which only softnic takes).
    pub fn parse(
        driver: &str,
        softnic: SoftnicSpec,
        mac: Option<[u8; 6]>,
    ) -> Result<Self, SpecError> {
        if driver == "softnic" || driver == "loopback" {
            return Ok(Self::Softnic(SoftnicSpec {
                mac: mac.or(softnic.mac),
                loopback: driver == "loopback",
                ..softnic
            }));
        }
        if mac.is_some() {
            return Err(SpecError::MacWithAfPacket);
        }
        let (access, rest) = if let Some(rest) = driver.strip_prefix("af_packet:") {
            (Access::Packet, rest)
        } else if let Some(rest) = driver.strip_prefix("af_xdp:") {
            (Access::Xdp { queue: None }, rest)
        } else if let Some(rest) = driver.strip_prefix("auto:") {
            (Access::Auto { queue: None }, rest)
        } else {
            return Err(SpecError::UnknownDriver(driver.to_string()));
        };
        // `IFACE:QUEUE` for the AF_XDP kinds (interface names never hold a colon here: the
        // kernel allows one only in old alias names, which carry no traffic of their own).
        let (iface, access) = match (access, rest.rsplit_once(':')) {
            (Access::Packet, _) | (_, None) => (rest, access),
            (_, Some((iface, q))) => {
                let queue = Some(
                    q.parse()
                        .map_err(|_| SpecError::UnknownDriver(driver.to_string()))?,
                );
                let access = match access {
                    Access::Xdp { .. } => Access::Xdp { queue },
                    _ => Access::Auto { queue },
                };
                (iface, access)
            }
        };
        if iface.is_empty() {
            return Err(SpecError::UnknownDriver(driver.to_string()));
        }
        Ok(Self::AfPacket {
            iface: iface.to_string(),
            access,
            give_up_after_s: DEFAULT_GIVE_UP_S,
            impair: None,
        })
    }

    /// How the frames between the device and the stack are impaired (`--impair`), if they
    /// are: whoever opens the device wraps it in
    /// [`Impaired`](crate::driver::impair::Impaired). It travels with the device's spec, so
    /// that a driver process of the server structure is told it with its device.
    pub fn impair(&self) -> Option<&ImpairSpec> {
        match self {
            Self::Softnic(s) => s.impair.as_deref(),
            Self::AfPacket { impair, .. } => impair.as_deref(),
        }
    }

    /// Sets (or clears) how the device's frames are impaired.
    pub fn set_impair(&mut self, spec: Option<ImpairSpec>) {
        let spec = spec.map(Box::new);
        match self {
            Self::Softnic(s) => s.impair = spec,
            Self::AfPacket { impair, .. } => *impair = spec,
        }
    }

    /// Its name as `--driver` takes it: `softnic`, `af_packet:IFACE`, `af_xdp:IFACE[:QUEUE]`…
    pub fn name(&self) -> String {
        match self {
            Self::Softnic(s) if s.loopback => "loopback".into(),
            Self::Softnic(_) => "softnic".into(),
            Self::AfPacket {
                iface,
                access: Access::Packet,
                ..
            } => format!("af_packet:{iface}"),
            Self::AfPacket {
                iface,
                access: Access::Xdp { queue: None },
                ..
            } => format!("af_xdp:{iface}"),
            Self::AfPacket {
                iface,
                access: Access::Xdp { queue: Some(q) },
                ..
            } => format!("af_xdp:{iface}:{q}"),
            Self::AfPacket {
                iface,
                access: Access::Auto { queue: None },
                ..
            } => format!("auto:{iface}"),
            Self::AfPacket {
                iface,
                access: Access::Auto { queue: Some(q) },
                ..
            } => format!("auto:{iface}:{q}"),
        }
    }

    /// softnic's settings, if the device is softnic.
    pub fn softnic(&self) -> Option<&SoftnicSpec> {
        match self {
            Self::Softnic(s) => Some(s),
            Self::AfPacket { .. } => None,
        }
    }

    /// The interface, if the device is a real one (`AF_PACKET` or `AF_XDP`).
    pub fn af_packet(&self) -> Option<&str> {
        match self {
            Self::AfPacket { iface, .. } => Some(iface),
            Self::Softnic(_) => None,
        }
    }

    /// The benchmark board and softnic's part, if this is a benchmark run.
    pub fn bench(&self) -> Option<&BenchPart> {
        self.softnic().and_then(|s| s.bench.as_ref())
    }

    /// Whether the device is a benchmark's loopback wire.
    pub fn loopback(&self) -> bool {
        self.softnic().is_some_and(SoftnicSpec::loopback)
    }
}

/// What a driver process of the server structure is told by the server, over the control
/// socket, right after its `Welcome`: its device, and the address and checksum rule of the
/// server it drives for (which a softnic mirrors in the frames it makes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriverSetup {
    /// The device.
    pub driver: DriverSpec,
    /// The server's address.
    pub ip: Ipv4Addr,
    /// Whether UDP checksums are made and checked.
    pub checksum: bool,
    /// The largest IP packet per frame (af_packet cuts super-frames to it).
    #[serde(default = "default_mtu")]
    pub mtu: usize,
    /// How its queues to the server synchronise: with `Faithful` the server sends seed
    /// 002's queues (their memory and two eventfds) right after the data window.
    #[serde(default)]
    pub sync: SyncMode,
    /// The families the server takes: the driver hands it only those (a driver shared by
    /// several servers gives each family to the one server that asked for it).
    #[serde(default)]
    pub families: crate::driver::Families,
    /// The server's IPv6 address, if it takes IPv6 (what an `AF_XDP` driver steers to it).
    #[serde(default)]
    pub ip6: Option<std::net::Ipv6Addr>,
}

/// An Ethernet MTU.
fn default_mtu() -> usize {
    1500
}

/// Everything `shmnet serve` runs: the structure, where its driver runs, the device, and
/// the server's settings. [`Default`] is `shmnet serve` with no options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServeSpec {
    /// How the parties are placed.
    pub structure: ServeStructure,
    /// server structure: where the driver runs (the ipc structure always uses a thread).
    pub placement: Placement,
    /// server structure, `thread` or `process` placement: how the driver's IN and OUT queues
    /// synchronise.
    pub sync: SyncMode,
    /// The packet device.
    pub driver: DriverSpec,
    /// Our address.
    pub ip: Ipv4Addr,
    /// Its prefix length (at most 32).
    pub prefix: u8,
    /// The router for destinations off the subnet (`None`: they are unreachable).
    pub gateway: Option<Ipv4Addr>,
    /// Our IPv6 address and its prefix length (`None`: no IPv6).
    pub ip6: Option<(std::net::Ipv6Addr, u8)>,
    /// The families the server takes from its driver.
    pub families: crate::driver::Families,
    /// server structure: the listening socket of a running `shmnet driver --listen` to
    /// attach to, instead of starting a driver (several servers then share one device, each
    /// taking its own families).
    pub attach: Option<PathBuf>,
    /// Verify and generate UDP checksums (and TCP's on a loopback; see
    /// [`crate::inline::ServeConfig::stack_config`]).
    pub checksum: bool,
    /// The largest IP packet per frame (1,500). The pool buffers grow to hold a frame of it.
    pub mtu: usize,
    /// Messages a socket's receive queue holds before the stack drops more.
    pub rx_queue: usize,
    /// On a loopback: milliseconds a UDP sender to a full socket of this host is held back
    /// before what it sends overflows (host-local flow control,
    /// [`shmnet_stack::Config::udp_local_hold`]); 0: never held.
    pub udp_local_hold_ms: u64,
    /// How frames are kept coherent with the device by hand, per direction (seed 003's CH,
    /// CS, NC; none by default: [`shmnet_stack::Config::buffers`]).
    pub buffers: shmnet_chan::coherence::BufferModes,
    /// The caches those methods are sized to (the CLI reads this machine's).
    pub cache: shmnet_chan::coherence::CacheGeometry,
    /// The pages the packet buffers live on.
    #[serde(deserialize_with = "by_name")]
    pub page: PageSize,
    /// Which free buffer the driver is handed; `None`: the structure's own choice
    /// ([`ServeSpec::alloc_policy`]).
    #[serde(deserialize_with = "opt_by_name")]
    pub alloc: Option<AllocPolicy>,
    /// The order the pools' free arrays start in (contiguous unless asked; a spec without it
    /// means contiguous).
    #[serde(deserialize_with = "by_name")]
    pub layout: BufferLayout,
    /// server and ipc structures: the control socket.
    pub socket: PathBuf,
    /// server structure: connections the control socket accepts at once.
    pub max_connections: usize,
    /// server structure: seconds a new connection may take to say Hello.
    pub hello_timeout_s: f64,
    /// server structure: regions one application may register.
    pub max_regions: u32,
    /// server structure: bytes of registered memory one application may hold.
    pub max_registered_bytes: u64,
    /// server structure: what applications may see.
    #[serde(default)]
    pub isolation: Isolation,
    /// server structure, `regions`: what a lookup-cache miss does to a request.
    #[serde(default)]
    pub on_miss: OnMiss,
    /// inline: UDP echo applications on these ports.
    pub echo: Vec<u16>,
    /// inline: UDP sinks on these ports.
    pub sink: Vec<u16>,
    /// inline: TCP echo applications listening on these ports.
    pub tcp_echo: Vec<u16>,
    /// inline: TCP sinks listening on these ports.
    pub tcp_sink: Vec<u16>,
    /// Stop after this many seconds (`None`: when softnic is done, a benchmark's board says
    /// quit, or at a signal).
    pub duration_s: Option<f64>,
    /// Print the final report as one line of JSON.
    pub json: bool,
    /// af_packet: serve the interface even if another shmnet server already does.
    pub force: bool,
    /// server and ipc structures: serve every counter at `http://ADDR/metrics` in the
    /// Prometheus text format (`None`: no metrics).
    pub metrics: Option<std::net::SocketAddr>,
    /// server, `--isolation regions`: time every copy into a posted buffer with the residency
    /// probe (`shmnet residency --structure server-regions`; not a command-line option).
    pub copy_probe: Option<CopyProbeSpec>,
}

/// The residency probe around the server's copies into posted buffers, and where its
/// samples go when the server stops.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CopyProbeSpec {
    /// Samples kept at most (one per buffer copied; the room is taken at start).
    pub capacity: usize,
    /// Touch each buffer's page (not its data lines) just before timing it.
    pub tlb_force: bool,
    /// The file the probe is written to, as JSON, when the server stops.
    pub out: PathBuf,
}

impl Default for ServeSpec {
    fn default() -> Self {
        Self {
            structure: ServeStructure::default(),
            placement: Placement::default(),
            sync: SyncMode::default(),
            driver: DriverSpec::default(),
            ip: Ipv4Addr::new(10, 0, 0, 1),
            prefix: 24,
            gateway: None,
            ip6: None,
            families: crate::driver::Families::IPV4,
            attach: None,
            checksum: true,
            mtu: 1500,
            rx_queue: 64,
            udp_local_hold_ms: shmnet_stack::iface::UDP_LOCAL_HOLD.as_millis() as u64,
            buffers: Default::default(),
            cache: Default::default(),
            page: PageSize::default(),
            alloc: None,
            layout: BufferLayout::Contiguous,
            socket: crate::control::default_socket(),
            max_connections: ControlLimits::default().max_connections,
            hello_timeout_s: ControlLimits::default().hello_timeout.as_secs_f64(),
            max_regions: ControlLimits::default().regions.max_regions_per_app,
            max_registered_bytes: ControlLimits::default().regions.max_bytes_per_app,
            isolation: Isolation::default(),
            on_miss: OnMiss::default(),
            echo: Vec::new(),
            sink: Vec::new(),
            tcp_echo: Vec::new(),
            tcp_sink: Vec::new(),
            duration_s: None,
            json: false,
            force: false,
            metrics: None,
            copy_probe: None,
        }
    }
}

impl ServeSpec {
    /// The buffer pools it asks for: each buffer holds one frame of the MTU.
    pub fn pools(&self) -> PoolSpec {
        PoolSpec {
            policy: self.alloc_policy(),
            layout: self.layout,
            data_size: crate::inline::frame_buffer_size(self.mtu),
            ..PoolSpec::default()
        }
    }

    /// Which free buffer the driver is handed: as asked, or else the structure's choice —
    /// the most recently freed (LIFO, likely still in the cache), except where the buffers
    /// are read on another core. Under `--structure server --isolation shared` the
    /// application reads every datagram where the driver put it, on its own core: the buffer
    /// it freed last still has its lines in that core's cache, and the driver's writes into
    /// it must first take them from there, line by line. The least recently freed (FIFO)
    /// has long left that cache. Measured on a 2-vCPU Xeon VM (docs/benchmarks.md), FIFO
    /// made `ttcp` receive at 1,024 B 1.5× and at 14,792 B 1.55× as fast there, and made no
    /// difference to sends or `rr`; under `regions` the server copies each datagram out on
    /// the driver's own core, and LIFO was 15 % faster at 14,792 B.
    pub fn alloc_policy(&self) -> AllocPolicy {
        self.alloc.unwrap_or(
            if self.structure == ServeStructure::Server && self.isolation == Isolation::Shared {
                AllocPolicy::Fifo
            } else {
                AllocPolicy::Lifo
            },
        )
    }

    /// Refuses a gateway off our subnet (or our own address).
    pub fn check_gateway(&self) -> Result<(), SpecError> {
        let Some(gateway) = self.gateway else {
            return Ok(());
        };
        let on_link = shmnet_stack::ipv4::same_subnet(gateway, self.ip, self.prefix);
        if on_link && gateway != self.ip {
            return Ok(());
        }
        Err(SpecError::GatewayOffLink {
            gateway,
            ip: self.ip,
            prefix: self.prefix,
        })
    }

    /// Refuses an MTU the stack, the pools or the driver cannot carry.
    pub fn check_mtu(&self) -> Result<(), SpecError> {
        if !(MIN_MTU..=MAX_MTU).contains(&self.mtu) {
            return Err(SpecError::Mtu(self.mtu));
        }
        Ok(())
    }

    /// Refuses `--sync faithful` where its queues do not exist: seed 002's queues join a
    /// driver thread to the server structure.
    pub fn check_sync(&self) -> Result<(), SpecError> {
        if self.sync == SyncMode::Modern {
            return Ok(());
        }
        match (self.structure, self.effective_placement()) {
            (ServeStructure::Server, Placement::Thread | Placement::Process) => Ok(()),
            (ServeStructure::Inline, _) => Err(SpecError::FaithfulSync("inline structure")),
            (ServeStructure::Ipc, _) => Err(SpecError::FaithfulSync("ipc structure")),
            (_, Placement::Polled) => Err(SpecError::FaithfulSync("polled placement")),
        }
    }

    /// Refuses a server that serves no family, IPv6 without an address (or an address
    /// without IPv6), an IPv6-only server on a device that carries IPv4 only, and `--attach`
    /// outside the server structure.
    pub fn check_families(&self) -> Result<(), SpecError> {
        if !self.families.ipv4 && !self.families.ipv6 {
            return Err(SpecError::NoFamily);
        }
        if self.families.ipv6 && self.ip6.is_none() {
            return Err(SpecError::NoIpv6Address(self.families.name()));
        }
        if self.attach.is_some() && self.structure != ServeStructure::Server {
            return Err(SpecError::AttachNeedsServer);
        }
        if self.ip6.is_some() && !self.families.ipv6 {
            return Err(SpecError::Ipv6Unused(self.families.name()));
        }
        if !self.families.ipv4 && self.attach.is_none() && self.driver.softnic().is_some() {
            return Err(SpecError::Ipv4OnlyDevice);
        }
        Ok(())
    }

    /// Where the driver actually runs: the ipc structure always runs it on a thread, and an
    /// attached server's driver (`--attach`) is a process of its own.
    pub fn effective_placement(&self) -> Placement {
        if self.structure == ServeStructure::Ipc {
            Placement::Thread
        } else if self.attach.is_some() {
            Placement::Process
        } else {
            self.placement
        }
    }

    /// The stack's settings, with `apps` built in (the inline structure's; none for the
    /// server structures).
    pub fn serve_config(&self, apps: Vec<App>) -> ServeConfig {
        ServeConfig {
            ip: self.ip,
            prefix: self.prefix,
            gateway: self.gateway,
            ipv6: self.ip6,
            families: self.families,
            checksum: self.checksum,
            apps,
            rx_queue_limit: self.rx_queue,
            pools: self.pools(),
            loopback: self.driver.loopback(),
            mtu: self.mtu,
            udp_local_hold: (self.udp_local_hold_ms > 0)
                .then(|| std::time::Duration::from_millis(self.udp_local_hold_ms)),
            buffers: self.buffers,
            cache: self.cache,
        }
    }

    /// The server structure's options.
    pub fn server_options(&self) -> ServerOptions {
        ServerOptions {
            serve: self.serve_config(Vec::new()),
            socket: self.socket.clone(),
            page: self.page,
            ipc: self.structure == ServeStructure::Ipc,
            placement: self.placement,
            sync: self.sync,
            isolation: self.isolation,
            on_miss: self.on_miss,
            limits: ControlLimits {
                max_connections: self.max_connections,
                hello_timeout: Duration::from_secs_f64(self.hello_timeout_s.max(0.0)),
                regions: shmnet_chan::handles::TableLimits {
                    max_regions_per_app: self.max_regions,
                    max_bytes_per_app: self.max_registered_bytes,
                },
            },
        }
    }

    /// What its driver process is told (see [`DriverSetup`]).
    pub fn driver_setup(&self) -> DriverSetup {
        DriverSetup {
            driver: self.driver.clone(),
            ip: self.ip,
            checksum: self.checksum,
            mtu: self.mtu,
            sync: self.sync,
            families: self.families,
            ip6: self.ip6.map(|(ip, _)| ip),
        }
    }

    /// The control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

/// Deserializes a value from its name through its `FromStr` (the names the command line
/// takes: `4k`, `lifo`, `nt`, …).
fn by_name<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

/// As [`by_name`], for an optional setting (`null`: not set).
fn opt_by_name<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr<Err = String>,
{
    Option::<String>::deserialize(d)?
        .map(|s| s.parse().map_err(serde::de::Error::custom))
        .transpose()
}

/// Serializes a [`Dma`] as the command line names it.
fn dma_name<S: serde::Serializer>(dma: &Dma, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match dma {
        Dma::Cached => "cached",
        Dma::NonTemporal => "nt",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serve_spec_survives_json() {
        let spec = ServeSpec {
            structure: ServeStructure::Server,
            placement: Placement::Process,
            driver: DriverSpec::Softnic(SoftnicSpec {
                dma: Dma::NonTemporal,
                mac: Some([2, 0, 0, 0, 0, 9]),
                bench: Some(BenchPart {
                    board: "/tmp/board".into(),
                    role: BenchRole::Loopback,
                }),
                ..SoftnicSpec::default()
            }),
            page: PageSize::Thp,
            alloc: Some(AllocPolicy::Fifo),
            layout: BufferLayout::Scattered,
            duration_s: Some(1.5),
            ..ServeSpec::default()
        };
        let text = serde_json::to_string(&spec).unwrap();
        assert!(text.contains("\"nt\""), "{text}");
        assert!(text.contains(r#""layout":"scattered""#), "{text}");
        let back: ServeSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(back, spec);
        assert_eq!(back.pools().layout, BufferLayout::Scattered);
        // A spec from before the layout was carried lays its buffers out contiguously; a
        // layout of no name is refused.
        let old: ServeSpec = serde_json::from_str(r#"{"alloc":"fifo"}"#).unwrap();
        assert_eq!(old.pools().layout, BufferLayout::Contiguous);
        assert!(serde_json::from_str::<ServeSpec>(r#"{"layout":"diagonal"}"#).is_err());
        assert!(back.driver.loopback());
        assert!(back.serve_config(Vec::new()).loopback);
    }

    #[test]
    fn an_empty_object_is_the_default_spec() {
        let spec: ServeSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec, ServeSpec::default());
        let setup: DriverSpec = serde_json::from_str(r#"{"af_packet":{"iface":"veth0"}}"#).unwrap();
        assert_eq!(setup.name(), "af_packet:veth0");
    }

    #[test]
    fn drivers_parse_as_the_command_line_names_them() {
        let s = SoftnicSpec::default();
        assert_eq!(
            DriverSpec::parse("af_packet:v0", s.clone(), None).unwrap(),
            DriverSpec::AfPacket {
                iface: "v0".into(),
                access: Access::Packet,
                give_up_after_s: DEFAULT_GIVE_UP_S,
                impair: None,
            }
        );
        assert_eq!(
            DriverSpec::parse("af_packet:v0", s.clone(), Some([2; 6])),
            Err(SpecError::MacWithAfPacket)
        );
        for (name, access, back) in [
            ("af_xdp:v0", Access::Xdp { queue: None }, "af_xdp:v0"),
            ("af_xdp:v0:3", Access::Xdp { queue: Some(3) }, "af_xdp:v0:3"),
            ("af_xdp:v0:0", Access::Xdp { queue: Some(0) }, "af_xdp:v0:0"),
            ("auto:v0", Access::Auto { queue: None }, "auto:v0"),
            ("auto:v0:1", Access::Auto { queue: Some(1) }, "auto:v0:1"),
        ] {
            let d = DriverSpec::parse(name, s.clone(), None).unwrap();
            assert!(
                matches!(&d, DriverSpec::AfPacket { iface, access: a, .. } if iface == "v0" && *a == access),
                "{name}: {d:?}"
            );
            assert_eq!(d.name(), back);
            assert_eq!(d.af_packet(), Some("v0"));
        }
        for bad in ["af_xdp:", "af_xdp:v0:x", "auto:", "xdp:v0"] {
            assert!(
                matches!(
                    DriverSpec::parse(bad, s.clone(), None),
                    Err(SpecError::UnknownDriver(_))
                ),
                "{bad}"
            );
        }
        // A spec of the version before `access` is an AF_PACKET one.
        let old: DriverSpec =
            serde_json::from_str(r#"{"af_packet":{"iface":"v0","give_up_after_s":1.0}}"#).unwrap();
        assert!(matches!(
            old,
            DriverSpec::AfPacket {
                access: Access::Packet,
                ..
            }
        ));
        assert_eq!(
            DriverSpec::parse("tap", s.clone(), None),
            Err(SpecError::UnknownDriver("tap".into()))
        );
        let d = DriverSpec::parse("softnic", s, Some([2; 6])).unwrap();
        assert_eq!(d.softnic().unwrap().mac(), [2; 6]);
        assert_eq!(
            "sunk".parse::<BenchRole>(),
            Err(SpecError::UnknownRole("sunk".into()))
        );
    }

    #[test]
    fn a_gateway_must_be_on_the_subnet() {
        let mut spec = ServeSpec {
            ip: Ipv4Addr::new(10, 93, 0, 1),
            prefix: 24,
            ..ServeSpec::default()
        };
        assert_eq!(spec.check_gateway(), Ok(()), "none is fine");
        spec.gateway = Some(Ipv4Addr::new(10, 93, 0, 254));
        assert_eq!(spec.check_gateway(), Ok(()));
        for bad in [Ipv4Addr::new(10, 93, 1, 1), Ipv4Addr::new(10, 93, 0, 1)] {
            spec.gateway = Some(bad);
            assert!(matches!(
                spec.check_gateway(),
                Err(SpecError::GatewayOffLink { .. })
            ));
        }
        spec.prefix = 0;
        spec.gateway = Some(Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(spec.check_gateway(), Ok(()), "a /0 holds every address");
    }

    #[test]
    fn the_mtu_sizes_the_buffers_and_is_refused_where_it_cannot_be_carried() {
        let mut spec = ServeSpec::default();
        assert_eq!(spec.check_mtu(), Ok(()));
        assert_eq!(
            spec.pools().data_size,
            2048,
            "an Ethernet MTU keeps 2 KiB buffers"
        );
        spec.mtu = 16_384;
        assert_eq!(spec.check_mtu(), Ok(()));
        let size = spec.pools().data_size as usize;
        assert!(size >= 16_384 + 14 + 60 && size % 64 == 0, "{size}");
        spec.mtu = MAX_MTU;
        assert!(spec.pools().data_size <= shmnet_chan::layout::MAX_DATA_SIZE);
        for bad in [0, MIN_MTU - 1, MAX_MTU + 1] {
            spec.mtu = bad;
            assert_eq!(spec.check_mtu(), Err(SpecError::Mtu(bad)));
        }
        spec.driver = DriverSpec::parse("af_packet:v0", SoftnicSpec::default(), None).unwrap();
        spec.mtu = 1500;
        assert_eq!(spec.check_mtu(), Ok(()));
        spec.mtu = 9000;
        assert_eq!(
            spec.check_mtu(),
            Ok(()),
            "a jumbo MTU on a real interface (whose own MTU the driver checks when it opens)"
        );
    }

    #[test]
    fn faithful_sync_needs_a_driver_thread() {
        let mut spec = ServeSpec {
            structure: ServeStructure::Server,
            placement: Placement::Thread,
            sync: SyncMode::Faithful,
            ..ServeSpec::default()
        };
        assert_eq!(spec.check_sync(), Ok(()));
        assert_eq!(spec.server_options().sync, SyncMode::Faithful);
        spec.placement = Placement::Polled;
        assert_eq!(
            spec.check_sync(),
            Err(SpecError::FaithfulSync("polled placement"))
        );
        spec.attach = Some("/run/shmnet/v0.drv".into());
        assert_eq!(
            spec.check_sync(),
            Ok(()),
            "a shared driver is a process apart"
        );
        spec.attach = None;
        spec.placement = Placement::Process;
        assert_eq!(spec.check_sync(), Ok(()));
        assert_eq!(spec.driver_setup().sync, SyncMode::Faithful);
        spec.structure = ServeStructure::Ipc;
        assert!(spec.check_sync().is_err());
        spec.sync = SyncMode::Modern;
        assert_eq!(spec.check_sync(), Ok(()), "the rings go everywhere");
    }

    /// `--impair` travels with the device's spec (to a driver process too), and leaves the
    /// JSON of an unimpaired device as it was.
    #[test]
    fn an_impairment_travels_with_the_device_spec() {
        let impair: ImpairSpec = "loss=20%,delay=10ms,seed=1".parse().unwrap();
        for name in ["af_packet:v0", "softnic"] {
            let mut d = DriverSpec::parse(name, SoftnicSpec::default(), None).unwrap();
            assert_eq!(d.impair(), None);
            let plain = serde_json::to_string(&d).unwrap();
            assert!(!plain.contains("impair"), "{plain}");
            d.set_impair(Some(impair.clone()));
            assert_eq!(d.impair(), Some(&impair));
            let setup = ServeSpec {
                driver: d.clone(),
                ..ServeSpec::default()
            }
            .driver_setup();
            let text = serde_json::to_string(&setup).unwrap();
            assert!(text.contains("\"loss_pct\":20.0"), "{text}");
            let back: DriverSetup = serde_json::from_str(&text).unwrap();
            assert_eq!(back.driver.impair(), Some(&impair));
        }
        let d: DriverSpec = serde_json::from_str(
            r#"{"af_packet":{"iface":"v0","impair":{"loss_pct":1.5,"seed":7}}}"#,
        )
        .unwrap();
        let i = d.impair().unwrap();
        assert_eq!((i.loss_pct, i.seed, i.limit), (1.5, 7, 1000));
    }
}
