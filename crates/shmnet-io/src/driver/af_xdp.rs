//! `af_xdp:IFACE[:QUEUE]`: a real interface through an `AF_XDP` socket whose UMEM is the
//! server's own buffer pool, so the frames the device (or the kernel, in copy mode) writes
//! are the buffers the stack parses, and the frames the stack builds are the ones the device
//! sends.
//!
//! # Seed 002's window, on today's kernel
//!
//! Seed 002 shared one window between the device, its driver and the protocol server. An
//! AF_XDP socket is that design in Linux: the UMEM is the window, the fill and completion
//! rings give buffers to the device and get them back, RX and TX carry frames. Here the UMEM
//! is the data region of the server's pool set — buffer `i` is UMEM chunk `i` (the pool's
//! data is page-aligned, `data_size` bytes a buffer) — so:
//!
//! - **Receive** takes no copy in user space. The driver keeps the fill ring stocked with
//!   buffers allocated from the pools; the kernel writes a frame into one (at offset 256,
//!   `XDP_PACKET_HEADROOM`) and posts it on RX; the driver sets the buffer's header
//!   (`off = 256`, `len`), classifies it and hands it up, and allocates a new one for the
//!   fill ring. On a NIC with zero-copy AF_XDP the device's DMA writes the buffer; on veth
//!   and other devices without it (copy mode) the kernel copies the frame into it once —
//!   where af_packet copies twice (into its ring, then out of it into a pool buffer).
//! - **Transmit** takes no copy in user space either: a frame's descriptor (its buffer's
//!   chunk address plus its offset, and its length) goes on TX, and the buffer is released
//!   when its completion comes back — not before, so a zero-copy device never reads a buffer
//!   that was reused. In copy mode the kernel copies the frame when it is kicked: only a
//!   `sendto` (or a `poll`) sends, so the driver kicks after every burst that left frames on
//!   TX (receive bursts included), without relying on the ring's `XDP_RING_NEED_WAKEUP`; a
//!   zero-copy device is kicked only when its ring asks.
//!
//! # Several queues
//!
//! `af_xdp:IFACE` serves every receive queue of the interface (`af_xdp:IFACE:QUEUE` one):
//! a socket per queue, the first registering the UMEM and the others sharing it
//! (`XDP_SHARED_UMEM`, with fill and completion rings of their own). One driver polls them
//! in turns and sleeps on an epoll set of their sockets; it sends on the first queue only, so
//! a flow's frames leave in the order the stack made them.
//!
//! # Steering
//!
//! An XDP program ([`program`]) on the interface redirects to the sockets only the frames for
//! shmnet's addresses (IPv4 and ARP for it; IPv6 and the neighbour solicitations for it), and
//! passes everything else to the kernel, which keeps answering on its own addresses on the
//! same interface. The program is attached with a
//! `bpf` link owned by this driver: when the driver exits, or is killed, the kernel detaches
//! it. Native mode is tried first, generic mode second ([`XdpMode`]).
//!
//! # Buffers the driver holds
//!
//! Unlike af_packet, this driver holds pool buffers between calls: those on the fill ring
//! (`fill_level`, at most [`AfXdpOptions::fill`]) and those sent but not completed
//! (`completions_outstanding`). [`Driver::release_held`] hands every one back, and the
//! structures call it when they stop the driver: first the rings are unmapped and the socket
//! closed, then the kernel's deferred teardown of the queue is waited out (a probe binds to
//! the queue again), and only then are the buffers released, so neither the kernel nor a
//! zero-copy device can write into a buffer the pool has reused. A driver killed with the process that holds the pools loses
//! nothing (the pools go with it); the kernel frees the UMEM when the socket closes.
//!
//! # Set down, gone, back
//!
//! The driver looks at the interface (three ioctls, [`link::explain`]) at most every 100 ms,
//! on idle calls and every 64th busy one, as af_packet does. **Set down** (`IFF_UP` clear):
//! the sockets stay bound (the kernel keeps them, and they work again when the interface is
//! set up); the link is reported down and what is given to send meanwhile is dropped and
//! counted (`link_drops`), frames on TX wait. **Gone** (deleted, or replaced by another
//! interface of the name, or a send answered `ENXIO`): the sockets and the program go, and
//! every buffer they held is handed back — at once if the old device is gone (the kernel
//! closes a device, stopping its queues, before it unregisters it, and closing a socket
//! unbinds it and waits out readers, so nothing writes into them after), or once a probe
//! binds to its queues again if it still exists under another name — and the
//! driver tries to open the interface again every [`AfXdpOptions::reopen_every`], in the
//! network namespace of the first open, with the checks of the first open; it binds the new
//! sockets to the same pools at the next burst. The stack keeps the first interface's MAC
//! (a peer that cached it still reaches shmnet on a veth; a physical NIC that filters by MAC
//! must be set promiscuous). After [`AfXdpOptions::give_up_after`] gone the driver fails.
//! [`Driver::rx_fd`] is an epoll set of the sockets and a timer for the next try, the same
//! descriptor across reopens.
//!
//! # Checked input
//!
//! The kernel's descriptors are still range-checked: an RX descriptor whose address is not
//! inside a chunk the driver gave the fill ring, or whose frame runs past its chunk, is
//! dropped and counted (`rx_bad_ring`); a completion for a buffer not outstanding is counted
//! and ignored.
//!
//! # What it does not do yet
//!
//! One driver for all the queues (not a driver per queue on cores of their own); no jumbo
//! frames (UMEM chunks are at most a page in
//! aligned mode, so the largest frame is 4,096 − 256 bytes); one server per driver (not
//! behind `shmnet driver --listen`).

pub mod program;
mod rings;

use super::af_packet::link::{self, DownReason, Pace};
use super::af_packet::netns::Home;
use super::af_packet::wake::Wake;
use super::{Driver, DriverStats, ETH_HDR, LinkState, RxFrame, RxPools, classify};
pub use program::{ProgramError, XdpMode};
use rings::Ring;
use rustix::net::xdp::{
    SocketAddrXdp, SocketAddrXdpFlags, XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING,
    XDP_UMEM_PGOFF_COMPLETION_RING, XDP_UMEM_PGOFF_FILL_RING, XdpDesc, XdpDescOptions,
    XdpOptionsFlags, XdpUmemReg, XdpUmemRegFlags,
};
use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};
use shmnet_chan::{Buffers, DriverPools};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Where the kernel puts a received frame in its chunk: `XDP_PACKET_HEADROOM`.
pub const FRAME_OFFSET: u32 = 256;

/// Ring sizes and how many buffers to keep on the fill ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfXdpOptions {
    /// The device queue to serve (`None`: every receive queue the interface has).
    pub queue: Option<u32>,
    /// Entries in each of the four rings (a power of two; 2,048).
    pub ring: u32,
    /// Buffers kept on each queue's fill ring (at most `ring`, and all queues together at
    /// most a quarter of the pool; 1,024): how many frames the kernel can receive on a queue
    /// while the server is not looking.
    pub fill: u32,
    /// The largest IP packet sent (1,500): at most the interface's MTU.
    pub mtu: u32,
    /// Refuse zero-copy, even where the device offers it (`XDP_COPY`).
    pub force_copy: bool,
    /// While the interface is gone, try to open it again this often (250 ms; at least 1 ms).
    pub reopen_every: Duration,
    /// Give up (the driver fails) after the interface has been gone this long (`None`:
    /// never; 60 s).
    pub give_up_after: Option<Duration>,
}

impl Default for AfXdpOptions {
    fn default() -> Self {
        Self {
            queue: None,
            ring: 2048,
            fill: 1024,
            mtu: 1500,
            force_copy: false,
            reopen_every: Duration::from_millis(250),
            give_up_after: Some(Duration::from_secs(60)),
        }
    }
}

/// Why [`AfXdp::open`] (or binding to the pools) failed.
#[derive(Debug, thiserror::Error)]
pub enum AfXdpError {
    /// No interface of that name in this network namespace.
    #[error("there is no interface named {0:?} in this network namespace (`ip link` lists them)")]
    NoSuchInterface(String),
    /// The interface exists but is administratively down.
    #[error("interface {0} is down: bring it up with `ip link set {0} up`")]
    InterfaceDown(String),
    /// The kernel has no AF_XDP sockets.
    #[error(
        "this kernel has no AF_XDP sockets ({0}): it needs CONFIG_XDP_SOCKETS (Linux 4.18 or \
         later); use --driver af_packet:IFACE, or --driver auto:IFACE to fall back by itself"
    )]
    NoAfXdp(std::io::Error),
    /// Not allowed to open one.
    #[error(
        "opening an AF_XDP socket needs root (or CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN): run \
         as root"
    )]
    NeedsPrivilege,
    /// The steering program.
    #[error(transparent)]
    Program(#[from] ProgramError),
    /// The queue does not exist on the interface.
    #[error(
        "{iface} has no receive queue {queue} for AF_XDP ({source}): `ethtool -l {iface}` shows \
         its queues; veth has one per pair unless made with `numrxqueues`"
    )]
    NoQueue {
        /// The interface.
        iface: String,
        /// The queue asked for.
        queue: u32,
        /// The kernel's error.
        source: std::io::Error,
    },
    /// The kernel cannot share one UMEM between sockets on several queues (before 5.10).
    #[error(
        "{iface} has several receive queues, and this kernel cannot share one UMEM between \
         them ({source}; Linux 5.10 or later can): serve one queue with af_xdp:{iface}:0 (and \
         `ethtool -L {iface} combined 1`), or use --driver af_packet:{iface}"
    )]
    NoSharedUmem {
        /// The interface.
        iface: String,
        /// The kernel's error.
        source: std::io::Error,
    },
    /// More queues than the pool can give fill buffers to.
    #[error(
        "{iface} has {queues} receive queues: too many for a pool of {buffers} buffers (each \
         queue's fill ring needs 16 at least, and all of them a quarter of the pool at most); \
         serve one queue with af_xdp:{iface}:Q, or fewer with `ethtool -L {iface} combined N`"
    )]
    TooManyQueues {
        /// The interface.
        iface: String,
        /// Its receive queues.
        queues: u32,
        /// The pool's buffers.
        buffers: u32,
    },
    /// The pool's buffers cannot be UMEM chunks.
    #[error(
        "af_xdp needs pool buffers of 2,048 or 4,096 bytes starting on a page (these are \
         {data_size} bytes): a jumbo --mtu needs --driver af_packet:IFACE"
    )]
    BadBuffers {
        /// The pool's buffer size.
        data_size: u32,
    },
    /// Frames would not fit a chunk after the kernel's headroom.
    #[error(
        "--mtu {mtu} does not fit an AF_XDP chunk of {chunk} bytes after its {FRAME_OFFSET}-byte \
         headroom (largest: {largest}); use --driver af_packet:IFACE for larger frames"
    )]
    MtuTooLarge {
        /// The MTU asked for.
        mtu: u32,
        /// The chunk size.
        chunk: u32,
        /// The largest MTU that fits.
        largest: u32,
    },
    /// The driver is asked to feed several servers' pools.
    #[error(
        "af_xdp feeds one server's pools; several servers on one interface need \
         `shmnet driver --listen` with af_packet"
    )]
    SeveralServers,
    /// A system call failed.
    #[error("{what} failed: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error (in the message, so not also a `source`).
        source: std::io::Error,
    },
}

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> AfXdpError {
    move |e| AfXdpError::Sys {
        what,
        source: e.into(),
    }
}

fn io_error(e: AfXdpError) -> std::io::Error {
    std::io::Error::other(e)
}

/// What the XDP side of the driver shows in `shmnet stats` (`driver.xdp`): the sums over
/// the queues served, and each queue's own figures in `queues`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct XdpStats {
    /// Where the steering program runs: `native` or `generic` (`None` before it is attached).
    pub mode: Option<XdpMode>,
    /// Whether the device writes and reads the pool's buffers itself (zero-copy), rather than
    /// the kernel copying frames into and out of them.
    pub zero_copy: bool,
    /// Buffers on the fill rings (or received and not yet taken): what the kernel can
    /// receive into now.
    pub fill_level: u32,
    /// Frames sent whose buffers the kernel has not completed yet.
    pub completions_outstanding: u32,
    /// The kernel's `XDP_STATISTICS`: frames dropped for lack of a fill buffer or other
    /// reasons.
    pub rx_dropped: u64,
    /// The kernel's count of RX frames dropped because an RX ring was full.
    pub rx_ring_full: u64,
    /// The kernel's count of times it found a fill ring empty.
    pub rx_fill_ring_empty: u64,
    /// The kernel's count of invalid RX descriptors.
    pub rx_invalid_descs: u64,
    /// The kernel's count of invalid TX descriptors (frames it refused to send).
    pub tx_invalid_descs: u64,
    /// Completions for buffers not outstanding (checked input: ignored).
    pub bad_completions: u64,
    /// Each device queue served, in the order they are polled. Frames are sent on the
    /// first.
    pub queues: Vec<XdpQueueStats>,
}

/// One device queue of an af_xdp driver (`driver.xdp.queues[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct XdpQueueStats {
    /// The device queue.
    pub queue: u32,
    /// Frames taken off this queue's RX ring.
    pub rx_frames: u64,
    /// Buffers on its fill ring.
    pub fill_level: u32,
    /// The kernel's drops on this queue (`rx_dropped` + `rx_ring_full`).
    pub rx_device_drops: u64,
    /// The kernel's count of times it found this queue's fill ring empty.
    pub rx_fill_ring_empty: u64,
}

/// A frame popped off an RX ring: its buffer, and where the frame lies in it (`None`: the
/// descriptor was bad and the buffer goes straight back).
#[derive(Clone, Copy)]
struct Taken {
    buf: u32,
    frame: Option<(u16, u16)>,
}

/// A queue's four rings, mapped.
struct Rings {
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
}

/// One device queue: its socket and, once bound, its rings.
struct Queue {
    /// The device queue.
    id: u32,
    xsk: OwnedFd,
    rings: Option<Rings>,
    /// Buffers on this queue's fill ring (or in its RX ring, not yet taken).
    fill_level: u32,
    rx_frames: u64,
    /// The kernel's `XDP_STATISTICS` as last read (at each look at the interface, every
    /// 100 ms at most, and before the socket closes): `stats` makes no system call.
    kernel: Option<rustix::net::xdp::XdpStatistics>,
}

/// The UMEM (the pools' data region) and who holds each of its chunks, once bound.
///
/// Invariant: a buffer is on at most one fill ring (`on_fill`), and `fill_level` of each
/// queue is the number of buffers whose `on_fill` names it; `outstanding` is the sum of
/// `in_flight`.
struct Umem {
    /// The pool set whose data region is the UMEM (to check later calls give the same one).
    base: usize,
    chunk: u32,
    total: u32,
    /// Per buffer: 0, or 1 + the slot (in [`AfXdp::queues`]) of the queue whose fill ring
    /// (or RX ring, not yet taken) holds it.
    on_fill: Vec<u16>,
    /// Per buffer: how many of its sends are not completed.
    in_flight: Vec<u32>,
    outstanding: u32,
}

/// The driver. See the [module docs](self).
pub struct AfXdp {
    iface: String,
    /// The addresses steered to shmnet.
    addrs: program::Addresses,
    /// The MAC the stack answers with: the interface's at the first open.
    mac: [u8; 6],
    opts: AfXdpOptions,
    /// An `AF_INET` datagram socket for the interface ioctls (an AF_XDP one refuses them),
    /// made in the namespace of the first open.
    ioctl_fd: OwnedFd,
    /// The namespace of the first open, where a reopen looks for the interface.
    home: Home,
    /// What the caller sleeps on ([`Driver::rx_fd`]): an epoll set of the queues' sockets
    /// and a timer for the next reopen; the same descriptor across reopens.
    wake: Wake,
    /// The interface, open (`None` while it is gone).
    live: Option<Live>,
    /// While the interface is gone: since when, and when to try again.
    outage: Option<Outage>,
    /// When to look at the interface's health next.
    pace: Pace,
    stats: DriverStats,
    bad_completions: u64,
    /// The kernel's counters of sockets closed at a reopen, so the totals only grow.
    past: XdpStats,
    /// Set once [`Driver::release_held`] gave the buffers back: the driver is not driven
    /// after it.
    released: bool,
    /// The slot polled first in the next burst (turns, so no queue starves the others).
    next: usize,
    /// Frames popped off the RX rings in this burst.
    taken: Vec<Taken>,
    alloc: Vec<u32>,
}

/// The interface, open: the steering program and a socket per queue served.
struct Live {
    ifindex: u32,
    steering: program::Steering,
    /// With an IPv6 address: the membership in its solicited-node group.
    _solicited_node: Option<OwnedFd>,
    /// The queues served, each with its own socket; the first registered the UMEM and sends,
    /// the others share its UMEM (`XDP_SHARED_UMEM`). Never empty.
    queues: Vec<Queue>,
    /// Set at the first burst after the open, when the pools are known.
    umem: Option<Umem>,
    zero_copy: bool,
    /// The interface is set down (`IFF_UP` clear): the sockets stay bound, and what is
    /// given to send meanwhile is dropped.
    set_down: bool,
}

/// The interface went away.
struct Outage {
    since: Duration,
    next_try: Duration,
    reason: DownReason,
    last_error: Option<String>,
    failed: bool,
}

impl std::fmt::Debug for AfXdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queues: Vec<u32> = self
            .live
            .as_ref()
            .map(|l| l.queues.iter().map(|q| q.id).collect())
            .unwrap_or_default();
        f.debug_struct("AfXdp")
            .field("iface", &self.iface)
            .field("queues", &queues)
            .field("up", &self.live.is_some())
            .finish_non_exhaustive()
    }
}

/// The interface's index, MAC address and MTU, after checking it is up.
fn interface(fd: BorrowedFd<'_>, name: &str) -> Result<(u32, [u8; 6], u32), AfXdpError> {
    use super::af_packet::{ifreq, ioctl};
    let mut ifr = ifreq(name);
    if let Err(e) = ioctl(fd, libc::SIOCGIFINDEX, &mut ifr) {
        return Err(match e.raw_os_error() {
            Some(libc::ENODEV) => AfXdpError::NoSuchInterface(name.to_owned()),
            _ => AfXdpError::Sys {
                what: "SIOCGIFINDEX (looking up the interface)",
                source: e,
            },
        });
    }
    // SAFETY: SIOCGIFINDEX filled the `ifru_ifindex` member.
    let ifindex = unsafe { ifr.ifr_ifru.ifru_ifindex } as u32;
    let sys = |what| move |source| AfXdpError::Sys { what, source };
    let mut ifr = ifreq(name);
    ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr).map_err(sys("SIOCGIFFLAGS"))?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member.
    if i32::from(unsafe { ifr.ifr_ifru.ifru_flags }) & libc::IFF_UP == 0 {
        return Err(AfXdpError::InterfaceDown(name.to_owned()));
    }
    let mut ifr = ifreq(name);
    ioctl(fd, libc::SIOCGIFHWADDR, &mut ifr).map_err(sys("SIOCGIFHWADDR"))?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member.
    let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *d = *s as u8;
    }
    let mut ifr = ifreq(name);
    ioctl(fd, libc::SIOCGIFMTU, &mut ifr).map_err(sys("SIOCGIFMTU"))?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu }.max(0) as u32;
    Ok((ifindex, mac, mtu))
}

/// Joins the Ethernet multicast group of `ip6`'s solicited-node address (`33:33:ff:` and
/// its last three bytes) on interface `ifindex`, so that a NIC that filters multicast lets
/// the neighbour solicitations for shmnet's address through to the steering program (the
/// kernel joins only the groups of its own addresses). Held by the returned `AF_PACKET`
/// socket, which receives nothing (protocol 0): the kernel leaves the group when it closes,
/// as it does when the process dies.
fn join_solicited_node(ifindex: u32, ip6: std::net::Ipv6Addr) -> Result<OwnedFd, AfXdpError> {
    let fd = rustix::net::socket_with(
        AddressFamily::PACKET,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(sys("socket(AF_PACKET) for the solicited-node group"))?;
    let o = ip6.octets();
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as libc::c_int,
        mr_type: libc::PACKET_MR_MULTICAST as libc::c_ushort,
        mr_alen: 6,
        mr_address: [0x33, 0x33, 0xff, o[13], o[14], o[15], 0, 0],
    };
    // SAFETY: `mreq` is a live `struct packet_mreq` of the length given; the kernel only
    // reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            (&mreq as *const libc::packet_mreq).cast(),
            std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(AfXdpError::Sys {
            what: "PACKET_ADD_MEMBERSHIP (joining the solicited-node group)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(fd)
}

/// Whether an interface with index `ifindex` exists in `fd`'s network namespace.
fn index_exists(fd: BorrowedFd<'_>, ifindex: u32) -> bool {
    // SAFETY: `ifreq` is a plain C struct (and union) for which all-zero bytes are valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    ifr.ifr_ifru.ifru_ifindex = ifindex as libc::c_int;
    // SAFETY: SIOCGIFNAME reads `ifru_ifindex` and writes the name into `ifr`, live and ours.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFNAME, &mut ifr) };
    r == 0
}

/// Hands back to `pools` the buffers released sockets held: those on a fill ring (or
/// received and not taken), and those sent and not completed. Returns how many.
fn give_back(pools: &mut DriverPools, umem: &Umem) -> u32 {
    let mut n = 0;
    for (idx, &on) in umem.on_fill.iter().enumerate() {
        if on != 0 {
            pools.release(idx as u32);
            n += 1;
        }
    }
    for (idx, &c) in umem.in_flight.iter().enumerate() {
        for _ in 0..c {
            pools.release(idx as u32);
            n += 1;
        }
    }
    n
}

/// Binds `fd` to `addr`, again for up to 2 s while the queue is busy: a socket closed a
/// moment ago (the probe at open, a server just stopped) lets go of its queue in the
/// kernel's deferred work, and the queue is busy until then.
fn bind_retrying(
    fd: BorrowedFd<'_>,
    addr: &impl rustix::net::addr::SocketAddrArg,
) -> rustix::io::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match rustix::net::bind(fd, addr) {
            Err(rustix::io::Errno::BUSY) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// The interface's receive queues, as `ethtool -l` counts them (its combined channels
/// plus its receive-only ones); 1 for a device that does not say (no `get_channels`).
fn rx_queues(fd: BorrowedFd<'_>, name: &str) -> u32 {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    /// `struct ethtool_channels`.
    #[repr(C)]
    #[derive(Default)]
    struct Channels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    let mut ch = Channels {
        cmd: ETHTOOL_GCHANNELS,
        ..Channels::default()
    };
    let mut ifr = super::af_packet::ifreq(name);
    ifr.ifr_ifru.ifru_data = (&mut ch as *mut Channels).cast();
    // SAFETY: SIOCETHTOOL reads the name and the command `ifru_data` points at, and writes
    // at most a `struct ethtool_channels` there, which `ch` is, live and exclusively ours.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    if r != 0 {
        return 1;
    }
    ch.combined_count
        .saturating_add(ch.rx_count)
        .clamp(1, MAX_QUEUES)
}

/// The most queues one driver serves (a `u16` slot per buffer names the queue holding it).
const MAX_QUEUES: u32 = 4096;

/// Binds throwaway AF_XDP sockets, on a private UMEM of a few pages, to `queues` of the
/// interface — the first registering the UMEM, the others sharing it, as the real bind
/// does: the checks the real bind would make, made at open (and, after a release, the proof
/// that the kernel let go of the queues).
fn probe_bind(
    iface: &str,
    ifindex: u32,
    queues: &[u32],
    force_copy: bool,
) -> Result<(), AfXdpError> {
    use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous, munmap};
    const CHUNKS: usize = 16;
    let page = rustix::param::page_size();
    let len = CHUNKS * page;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it, and it is
    // unmapped below after the sockets that registered it are closed.
    let mem = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .map_err(sys("mapping a probe UMEM"))?;
    let mut sockets: Vec<OwnedFd> = Vec::with_capacity(queues.len());
    let result = (|| {
        for &queue in queues {
            let xsk = rustix::net::socket_with(
                AddressFamily::XDP,
                SocketType::RAW,
                SocketFlags::CLOEXEC,
                None,
            )
            .map_err(|e| AfXdpError::NoAfXdp(e.into()))?;
            let fd = xsk.as_fd();
            let first = sockets.first().map(|f| f.as_fd());
            if first.is_none() {
                let reg = XdpUmemReg {
                    addr: mem as u64,
                    len: len as u64,
                    chunk_size: page as u32,
                    headroom: 0,
                    flags: XdpUmemRegFlags::empty(),
                    tx_metadata_len: 0,
                };
                sockopt::set_xdp_umem_reg(fd, reg).map_err(sys("XDP_UMEM_REG (a probe UMEM)"))?;
            }
            let shared = |e: rustix::io::Errno| match first {
                Some(_) => AfXdpError::NoSharedUmem {
                    iface: iface.to_owned(),
                    source: e.into(),
                },
                None => sys("XDP_UMEM_FILL_RING")(e),
            };
            sockopt::set_xdp_umem_fill_ring_size(fd, 16).map_err(shared)?;
            sockopt::set_xdp_umem_completion_ring_size(fd, 16)
                .map_err(sys("XDP_UMEM_COMPLETION_RING"))?;
            sockopt::set_xdp_rx_ring_size(fd, 16).map_err(sys("XDP_RX_RING"))?;
            let bound = match first {
                Some(shared_umem_fd) => {
                    let addr = rustix::net::xdp::SocketAddrXdpWithSharedUmem {
                        addr: SocketAddrXdp::new(
                            SocketAddrXdpFlags::XDP_SHARED_UMEM,
                            ifindex,
                            queue,
                        ),
                        shared_umem_fd,
                    };
                    // The queue exists (the device counted it): a refusal here is the
                    // kernel's, which cannot share a UMEM across queues before 5.10.
                    bind_retrying(fd, &addr).map_err(|e| match e {
                        rustix::io::Errno::INVAL => AfXdpError::NoSharedUmem {
                            iface: iface.to_owned(),
                            source: e.into(),
                        },
                        e => bind_error(iface, queue, e),
                    })
                }
                None => {
                    let mut flags = SocketAddrXdpFlags::empty();
                    if force_copy {
                        flags |= SocketAddrXdpFlags::XDP_COPY;
                    }
                    bind_retrying(fd, &SocketAddrXdp::new(flags, ifindex, queue))
                        .map_err(|e| bind_error(iface, queue, e))
                }
            };
            bound?;
            sockets.push(xsk);
        }
        Ok(())
    })();
    drop(sockets);
    // SAFETY: our mapping of `len` bytes; the sockets that registered it are closed.
    let _ = unsafe { munmap(mem, len) };
    result
}

/// What a failed bind to `queue` means.
fn bind_error(iface: &str, queue: u32, e: rustix::io::Errno) -> AfXdpError {
    match e {
        rustix::io::Errno::INVAL | rustix::io::Errno::NXIO => AfXdpError::NoQueue {
            iface: iface.to_owned(),
            queue,
            source: e.into(),
        },
        e => sys("binding an AF_XDP socket")(e),
    }
}

/// A fresh, unbound AF_XDP socket.
fn xdp_socket() -> Result<OwnedFd, AfXdpError> {
    rustix::net::socket_with(
        AddressFamily::XDP,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| match e {
        rustix::io::Errno::PERM | rustix::io::Errno::ACCESS => AfXdpError::NeedsPrivilege,
        e => AfXdpError::NoAfXdp(e.into()),
    })
}

impl XdpStats {
    /// Zeroes the gauges of what sockets hold: after they closed and their buffers went
    /// back, nothing is on a fill ring or in flight.
    fn nothing_held(&mut self) {
        for q in &mut self.queues {
            q.fill_level = 0;
        }
        self.fill_level = 0;
        self.completions_outstanding = 0;
    }

    /// Adds `later`'s counters to these (the gauges and the per-queue figures are
    /// `later`'s): the totals of a socket set closed at a reopen, carried forward.
    fn carry(&mut self, later: &XdpStats) {
        self.mode = later.mode.or(self.mode);
        self.zero_copy = later.zero_copy;
        self.fill_level = later.fill_level;
        self.completions_outstanding = later.completions_outstanding;
        self.rx_dropped += later.rx_dropped;
        self.rx_ring_full += later.rx_ring_full;
        self.rx_fill_ring_empty += later.rx_fill_ring_empty;
        self.rx_invalid_descs += later.rx_invalid_descs;
        self.tx_invalid_descs += later.tx_invalid_descs;
        self.bad_completions = later.bad_completions;
        self.queues.clone_from(&later.queues);
    }
}

impl Live {
    /// Opens interface `iface` for shmnet's addresses `addrs`: makes an AF_XDP socket for each
    /// queue served (`opts.queue`, or every receive queue) and attaches the steering
    /// program. Returns it with the interface's MAC address. The UMEM is registered, and the
    /// sockets bound to their queues, at the first burst, when the pools are known (the
    /// program passes every frame to the kernel until then).
    fn open(
        iface: &str,
        addrs: program::Addresses,
        opts: &AfXdpOptions,
        ioctl_fd: BorrowedFd<'_>,
    ) -> Result<(Live, [u8; 6]), AfXdpError> {
        let first = xdp_socket()?;
        let (ifindex, mac, if_mtu) = interface(ioctl_fd, iface)?;
        if opts.mtu > if_mtu {
            return Err(AfXdpError::Sys {
                what: "checking --mtu against the interface's MTU",
                source: std::io::Error::other(format!(
                    "--mtu {} is above {iface}'s MTU of {if_mtu}",
                    opts.mtu
                )),
            });
        }
        // Pool buffers for a frame of `mtu` are 2,048 bytes up to an MTU of 1,974
        // (`inline::frame_buffer_size`); a frame must fit after the kernel's headroom.
        let largest = 2048 - FRAME_OFFSET - ETH_HDR as u32;
        if opts.mtu > largest {
            return Err(AfXdpError::MtuTooLarge {
                mtu: opts.mtu,
                chunk: 2048,
                largest,
            });
        }
        let ids: Vec<u32> = match opts.queue {
            Some(q) => vec![q],
            None => (0..rx_queues(ioctl_fd, iface)).collect(),
        };
        // The queues, AF_XDP itself and the copy or zero-copy mode are checked now, with a
        // throwaway socket on a small private UMEM: the real bind waits for the pools (the
        // first burst), and a mistake must be refused at start, not then.
        probe_bind(iface, ifindex, &ids, opts.force_copy)?;
        let mut queues = Vec::with_capacity(ids.len());
        let mut first = Some(first);
        for &id in &ids {
            let xsk = match first.take() {
                Some(fd) => fd,
                None => xdp_socket()?,
            };
            queues.push(Queue {
                id,
                xsk,
                rings: None,
                fill_level: 0,
                rx_frames: 0,
                kernel: None,
            });
        }
        let map_entries = ids.iter().max().map_or(1, |m| m + 1);
        let steering = program::Steering::attach(iface, ifindex, addrs, map_entries)?;
        let solicited_node = addrs
            .v6
            .map(|ip6| join_solicited_node(ifindex, ip6))
            .transpose()?;
        let live = Live {
            ifindex,
            steering,
            _solicited_node: solicited_node,
            queues,
            umem: None,
            zero_copy: false,
            set_down: false,
        };
        Ok((live, mac))
    }

    /// Registers the pools' data region as the UMEM (on the first queue's socket), maps
    /// every queue's rings and binds each socket to its queue, the others sharing the first's
    /// UMEM (once; later calls check they are given the same pools).
    fn bind(&mut self, iface: &str, opts: &AfXdpOptions, bufs: &Buffers) -> Result<(), AfXdpError> {
        let geo = bufs.geometry();
        let base = bufs
            .data_ptr(0)
            .map_err(|_| AfXdpError::BadBuffers { data_size: 0 })?
            .as_ptr() as usize;
        if let Some(u) = &self.umem {
            return if u.base == base {
                Ok(())
            } else {
                Err(AfXdpError::SeveralServers)
            };
        }
        let chunk = geo.data_size;
        let page = rustix::param::page_size();
        if !(chunk == 2048 || chunk == 4096) || chunk as usize > page || base % page != 0 {
            return Err(AfXdpError::BadBuffers { data_size: chunk });
        }
        let largest = chunk - FRAME_OFFSET - ETH_HDR as u32;
        if opts.mtu > largest {
            return Err(AfXdpError::MtuTooLarge {
                mtu: opts.mtu,
                chunk,
                largest,
            });
        }
        let total = geo.total();
        let nq = self.queues.len() as u32;
        if total / 4 / nq < 16 {
            return Err(AfXdpError::TooManyQueues {
                iface: iface.to_owned(),
                queues: nq,
                buffers: total,
            });
        }
        let n = opts.ring;
        let map_err = |what| move |e: std::io::Error| AfXdpError::Sys { what, source: e };
        for slot in 0..self.queues.len() {
            // The first queue's socket (which holds the UMEM) beside this one.
            let (head, tail) = self.queues.split_at_mut(slot);
            let q = &mut tail[0];
            let shared_with = head.first().map(|f| f.xsk.as_fd());
            let fd = q.xsk.as_fd();
            if shared_with.is_none() {
                let reg = XdpUmemReg {
                    addr: base as u64,
                    len: u64::from(total) * u64::from(chunk),
                    chunk_size: chunk,
                    headroom: 0,
                    flags: XdpUmemRegFlags::empty(),
                    tx_metadata_len: 0,
                };
                sockopt::set_xdp_umem_reg(fd, reg)
                    .map_err(sys("XDP_UMEM_REG (registering the pool as the UMEM)"))?;
            }
            // Every queue has its own fill and completion rings, even on a shared UMEM.
            sockopt::set_xdp_umem_fill_ring_size(fd, n).map_err(sys("XDP_UMEM_FILL_RING"))?;
            sockopt::set_xdp_umem_completion_ring_size(fd, n)
                .map_err(sys("XDP_UMEM_COMPLETION_RING"))?;
            sockopt::set_xdp_rx_ring_size(fd, n).map_err(sys("XDP_RX_RING"))?;
            sockopt::set_xdp_tx_ring_size(fd, n).map_err(sys("XDP_TX_RING"))?;
            let off = sockopt::xdp_mmap_offsets(fd).map_err(sys("XDP_MMAP_OFFSETS"))?;
            let rings = Rings {
                fill: Ring::map(fd, XDP_UMEM_PGOFF_FILL_RING, &off.fr, n)
                    .map_err(map_err("mapping the fill ring"))?,
                comp: Ring::map(fd, XDP_UMEM_PGOFF_COMPLETION_RING, &off.cr, n)
                    .map_err(map_err("mapping the completion ring"))?,
                rx: Ring::map(fd, XDP_PGOFF_RX_RING, &off.rx, n)
                    .map_err(map_err("mapping the RX ring"))?,
                tx: Ring::map(fd, XDP_PGOFF_TX_RING, &off.tx, n)
                    .map_err(map_err("mapping the TX ring"))?,
            };
            let bound = if let Some(shared_umem_fd) = shared_with {
                // A socket on a shared UMEM takes the first's mode and wake-up flags; it
                // may name none of its own.
                let addr = rustix::net::xdp::SocketAddrXdpWithSharedUmem {
                    addr: SocketAddrXdp::new(
                        SocketAddrXdpFlags::XDP_SHARED_UMEM,
                        self.ifindex,
                        q.id,
                    ),
                    shared_umem_fd,
                };
                bind_retrying(fd, &addr)
            } else {
                let mut flags = SocketAddrXdpFlags::XDP_USE_NEED_WAKEUP;
                if opts.force_copy {
                    flags |= SocketAddrXdpFlags::XDP_COPY;
                }
                bind_retrying(fd, &SocketAddrXdp::new(flags, self.ifindex, q.id))
            };
            bound.map_err(|e| bind_error(iface, q.id, e))?;
            if slot == 0 {
                self.zero_copy = sockopt::xdp_options(fd)
                    .is_ok_and(|o| o.contains(XdpOptionsFlags::XDP_OPTIONS_ZEROCOPY));
            }
            self.steering.steer_queue(q.id, q.xsk.as_raw_fd())?;
            q.rings = Some(rings);
        }
        self.umem = Some(Umem {
            base,
            chunk,
            total,
            on_fill: vec![0; total as usize],
            in_flight: vec![0; total as usize],
            outstanding: 0,
        });
        Ok(())
    }

    /// Takes back the buffers of completed sends, from every queue's completion ring;
    /// counts completions for buffers not outstanding in `bad`.
    fn reap(&mut self, pools: &mut DriverPools, bad: &mut u64) {
        let Some(u) = &mut self.umem else { return };
        for q in &mut self.queues {
            let Some(r) = &mut q.rings else { continue };
            let n = r.comp.available();
            for _ in 0..n {
                let addr = r.comp.pop();
                let idx = addr / u64::from(u.chunk);
                let slot = (idx < u64::from(u.total))
                    .then(|| u.in_flight.get_mut(idx as usize))
                    .flatten();
                match slot {
                    Some(c) if *c > 0 => {
                        *c -= 1;
                        u.outstanding -= 1;
                        pools.release(idx as u32);
                    }
                    _ => *bad += 1,
                }
            }
            if n > 0 {
                r.comp.release();
            }
        }
    }

    /// Tops every queue's fill ring up to its even share of buffers from `pools`: at most
    /// [`AfXdpOptions::fill`] each, and a quarter of the pool for all of them together.
    ///
    /// Even shares, as a NIC's rings are: a buffer on a fill ring is the kernel's until a
    /// frame lands in it, so a share lent to a queue that went quiet could not be taken
    /// back (a first version let busy queues grow into the others' shares, and a queue busy
    /// for a moment kept the buffers a later stream on another queue then lacked).
    fn refill(&mut self, opts: &AfXdpOptions, alloc: &mut Vec<u32>, pools: &mut DriverPools) {
        let Some(u) = &mut self.umem else { return };
        let nq = self.queues.len() as u32;
        let target = opts.fill.min(u.total / 4 / nq).min(opts.ring);
        for (slot, q) in self.queues.iter_mut().enumerate() {
            let Some(r) = &mut q.rings else { continue };
            let short = target.saturating_sub(q.fill_level);
            let want = short.min(r.fill.free(short));
            if want == 0 || want < 16.min(target) {
                continue;
            }
            alloc.resize(want as usize, 0);
            let got = pools.alloc_burst(alloc);
            for &idx in &alloc[..got] {
                r.fill.push(u64::from(idx) * u64::from(u.chunk));
                // At most 65,535 queues are served (`open` makes one socket each).
                u.on_fill[idx as usize] = slot as u16 + 1;
            }
            if got == 0 {
                break;
            }
            q.fill_level += got as u32;
            r.fill.submit();
            if r.fill.needs_wakeup() {
                // A zero-copy device asks to be told of fresh fill buffers.
                let mut none: [u8; 0] = [];
                let _ =
                    rustix::net::recvfrom(&q.xsk, &mut none[..], rustix::net::RecvFlags::DONTWAIT);
            }
        }
    }

    /// Frames waiting on the first queue's TX ring.
    fn tx_waiting(&mut self) -> bool {
        self.queues[0]
            .rings
            .as_mut()
            .is_some_and(|r| r.tx.outstanding() > 0)
    }

    /// Kicks the kernel to send what is on the first queue's TX ring. A kick sends at most a
    /// batch (32 frames in copy mode), so it is repeated while frames wait and each kick
    /// moves some. `Err(ENXIO)`: the socket was unbound, the interface is gone.
    fn kick(&mut self, ring: u32) -> Result<(), rustix::io::Errno> {
        let zero_copy = self.zero_copy;
        let q = &mut self.queues[0];
        let Some(r) = &mut q.rings else {
            return Ok(());
        };
        for _ in 0..(ring / 32 + 1) {
            // Copy mode sends only inside `sendto` (or a `poll`, which an epoll sleeper does
            // not make): it is kicked whenever frames wait, without relying on the ring's
            // flag. A zero-copy device says when it needs it.
            if r.tx.outstanding() == 0 || (zero_copy && !r.tx.needs_wakeup()) {
                return Ok(());
            }
            let waiting = r.tx.outstanding();
            let sent = rustix::net::send(&q.xsk, &[], rustix::net::SendFlags::DONTWAIT);
            // A kick that moved nothing (the device busy, the completion ring full) is not
            // repeated: the frames wait for the next burst.
            let moved = r.tx.outstanding() < waiting;
            match sent {
                Ok(_) | Err(rustix::io::Errno::AGAIN | rustix::io::Errno::BUSY) if moved => {}
                // No room in the device's queue, or the interface set down (the socket stays
                // bound and works again when it is set up): the frames stay on TX for the
                // next kick.
                Ok(_)
                | Err(
                    rustix::io::Errno::AGAIN
                    | rustix::io::Errno::BUSY
                    | rustix::io::Errno::NOBUFS
                    | rustix::io::Errno::NETDOWN,
                ) => return Ok(()),
                Err(e @ rustix::io::Errno::NXIO) => return Err(e),
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// Pops up to `max` descriptors off the RX rings into `taken`, the queues in turns
    /// starting at slot `next`, checking each against the chunks given to that queue's fill
    /// ring (a bad one is counted in `stats.rx_bad_ring`).
    fn take_received(
        &mut self,
        next: usize,
        max: usize,
        taken: &mut Vec<Taken>,
        stats: &mut DriverStats,
    ) {
        taken.clear();
        let Some(u) = &mut self.umem else { return };
        let nq = self.queues.len();
        for i in 0..nq {
            let slot = (next + i) % nq;
            let q = &mut self.queues[slot];
            let Some(r) = &mut q.rings else { continue };
            let n = (r.rx.available() as usize).min(max - taken.len());
            for _ in 0..n {
                let d = r.rx.pop();
                let idx = d.addr / u64::from(u.chunk);
                let off = (d.addr % u64::from(u.chunk)) as u32;
                let fits = off
                    .checked_add(d.len)
                    .is_some_and(|end| end <= u.chunk && d.options == XdpDescOptions::empty());
                let holder = (idx < u64::from(u.total))
                    .then(|| u.on_fill.get_mut(idx as usize))
                    .flatten();
                match holder {
                    Some(on) if usize::from(*on) == slot + 1 => {
                        *on = 0;
                        q.fill_level -= 1;
                        q.rx_frames += 1;
                        if !fits {
                            stats.rx_bad_ring += 1;
                        }
                        taken.push(Taken {
                            buf: idx as u32,
                            // Both below a chunk (at most a page), so they fit 16 bits.
                            frame: fits.then_some((off as u16, d.len as u16)),
                        });
                    }
                    _ => stats.rx_bad_ring += 1,
                }
            }
            if n > 0 {
                r.rx.release();
            }
            if taken.len() == max {
                break;
            }
        }
    }

    /// Frames the kernel put on the RX rings and sends still on TX: what is lost if the
    /// sockets close now.
    fn pending(&mut self) -> u64 {
        self.queues
            .iter_mut()
            .filter_map(|q| q.rings.as_mut())
            .map(|r| u64::from(r.rx.available()) + u64::from(r.tx.outstanding()))
            .sum()
    }

    /// Reads the kernel's counters of every socket (a system call each).
    fn refresh_kernel(&mut self) {
        for q in &mut self.queues {
            if let Ok(k) = sockopt::xdp_statistics(&q.xsk) {
                q.kernel = Some(k);
            }
        }
    }

    /// This socket set's figures (the kernel's as last read).
    fn stats(&self, bad_completions: u64) -> XdpStats {
        let mut x = XdpStats {
            mode: Some(self.steering.mode()),
            zero_copy: self.zero_copy,
            completions_outstanding: self.umem.as_ref().map_or(0, |u| u.outstanding),
            bad_completions,
            ..XdpStats::default()
        };
        for q in &self.queues {
            let k = q.kernel;
            let dropped = k.map_or(0, |k| k.rx_dropped);
            let ring_full = k.and_then(|k| k.rx_ring_full).unwrap_or(0);
            let fill_empty = k.and_then(|k| k.rx_fill_ring_empty_descs).unwrap_or(0);
            x.fill_level += q.fill_level;
            x.rx_dropped += dropped;
            x.rx_ring_full += ring_full;
            x.rx_fill_ring_empty += fill_empty;
            x.rx_invalid_descs += k.map_or(0, |k| k.rx_invalid_descs);
            x.tx_invalid_descs += k.map_or(0, |k| k.tx_invalid_descs);
            x.queues.push(XdpQueueStats {
                queue: q.id,
                rx_frames: q.rx_frames,
                fill_level: q.fill_level,
                rx_device_drops: dropped + ring_full,
                rx_fill_ring_empty: fill_empty,
            });
        }
        x
    }
}

impl AfXdp {
    /// Opens interface `iface` for shmnet's addresses `addrs`: makes an AF_XDP socket for each
    /// queue served (`opts.queue`, or every receive queue) and attaches the steering
    /// program. The UMEM is registered, and the sockets bound to their queues, on the first
    /// burst, when the pools are known (the program passes every frame to the kernel until
    /// then).
    pub fn open(
        iface: &str,
        addrs: program::Addresses,
        opts: AfXdpOptions,
    ) -> Result<AfXdp, AfXdpError> {
        // The interface ioctls want an INET socket (an AF_XDP one says EOPNOTSUPP).
        let ioctl_fd = rustix::net::socket_with(
            AddressFamily::INET,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(sys("socket(AF_INET) for the interface ioctls"))?;
        let (live, mac) = Live::open(iface, addrs, &opts, ioctl_fd.as_fd())?;
        let wake = Wake::new().map_err(|source| AfXdpError::Sys {
            what: "making the driver's wake-up descriptor (epoll and timerfd)",
            source,
        })?;
        for q in &live.queues {
            wake.watch(q.xsk.as_fd())
                .map_err(|source| AfXdpError::Sys {
                    what: "epoll_ctl (watching a queue's socket)",
                    source,
                })?;
        }
        Ok(AfXdp {
            iface: iface.to_owned(),
            addrs,
            mac,
            opts,
            ioctl_fd,
            home: Home::here(),
            wake,
            live: Some(live),
            outage: None,
            pace: Pace::default(),
            stats: DriverStats::default(),
            bad_completions: 0,
            past: XdpStats::default(),
            released: false,
            next: 0,
            taken: Vec::new(),
            alloc: Vec::new(),
        })
    }

    /// Where the steering program runs (`None` while the interface is gone).
    pub fn mode(&self) -> Option<XdpMode> {
        self.live.as_ref().map(|l| l.steering.mode())
    }

    /// The device queues served (none while the interface is gone).
    pub fn queues(&self) -> Vec<u32> {
        self.live
            .as_ref()
            .map(|l| l.queues.iter().map(|q| q.id).collect())
            .unwrap_or_default()
    }

    /// Binds the live sockets to `pools` if not yet bound; `Err` (as the trait wants it) if
    /// that fails, after saying so once on stderr and reporting the link failed (the driver
    /// gives up).
    fn bound_to(&mut self, pools: &DriverPools) -> std::io::Result<()> {
        let Some(live) = &mut self.live else {
            return Ok(());
        };
        live.bind(&self.iface, &self.opts, pools.buffers())
            .map_err(|e| {
                eprintln!("shmnet: af_xdp {}: {e}; the driver stopped", self.iface);
                self.stats.link = LinkState::Failed;
                io_error(e)
            })
    }

    /// The error every call returns once the driver stopped.
    fn stopped(&self) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::NetworkDown,
            format!("af_xdp {}: the driver stopped", self.iface),
        )
    }

    /// Looks at the interface (three system calls): set down, set up again, or gone.
    fn look(&mut self, pools: &mut DriverPools) {
        let Some(live) = &mut self.live else { return };
        live.refresh_kernel();
        match link::explain(self.ioctl_fd.as_fd(), &self.iface, live.ifindex as i32) {
            Ok(()) if live.set_down => {
                live.set_down = false;
                self.stats.link = LinkState::Up;
                eprintln!(
                    "shmnet: af_xdp {}: the interface was set up again; resuming",
                    self.iface
                );
            }
            Ok(()) => {}
            Err(DownReason::SetDown) if !live.set_down => {
                live.set_down = true;
                self.stats.link = LinkState::Down;
                self.stats.link_down_events += 1;
                eprintln!(
                    "shmnet: af_xdp {}: the interface was set down; what is sent meanwhile is \
                     dropped, and shmnet resumes when it is set up",
                    self.iface
                );
            }
            Err(DownReason::SetDown) => {}
            Err(why) => self.go_down(pools, why),
        }
    }

    /// The interface is gone: closes the sockets, lets the program go, hands every buffer
    /// the sockets held back to `pools`, and schedules the first reopen.
    ///
    /// For a device that is gone the buffers go back at once, without the proof
    /// [`Driver::release_held`] waits for (a probe binding to the queues again): the kernel
    /// closed the device (stopping its queues) before unregistering it, and closing a socket
    /// unbinds it and waits out the readers. A device that still exists (renamed) gets the
    /// proof.
    fn go_down(&mut self, pools: &mut DriverPools, why: DownReason) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        self.stats.link_drops += live.pending();
        self.retire(&mut live);
        let umem = live.umem.take();
        let (old, ids): (u32, Vec<u32>) =
            (live.ifindex, live.queues.iter().map(|q| q.id).collect());
        drop(live);
        // A device that is only renamed (its name now another's, or no one's) still exists,
        // and its queues are let go in the kernel's deferred work: the buffers go back once
        // a probe binds to them again, as at a release; if it cannot, they are kept (lost to
        // the pool, never written behind its back).
        let safe = !index_exists(self.ioctl_fd.as_fd(), old)
            || probe_bind(&self.iface, old, &ids, self.opts.force_copy).is_ok();
        match umem {
            Some(u) if safe => {
                give_back(pools, &u);
            }
            Some(_) => eprintln!(
                "shmnet: af_xdp {}: the old interface (index {old}) still holds its queues; \
                 the buffers it held are kept from the pool",
                self.iface
            ),
            None => {}
        }
        self.past.nothing_held();
        self.stats.link = LinkState::Down;
        self.stats.link_down_events += 1;
        let now = link::now();
        let every = self.opts.reopen_every.max(Duration::from_millis(1));
        let next_try = now + every;
        self.wake.arm(Some(next_try));
        self.outage = Some(Outage {
            since: now,
            next_try,
            reason: why,
            last_error: None,
            failed: false,
        });
        let limit = match self.opts.give_up_after {
            Some(d) => format!("giving up after {}", link::human(d)),
            None => "never giving up".into(),
        };
        eprintln!(
            "shmnet: af_xdp {}: {why}; reopening every {}, {limit}",
            self.iface,
            link::human(every)
        );
    }

    /// While the interface is gone: tries to open it again when a try is due. `Err` once
    /// the driver gives up.
    fn while_down(&mut self) -> std::io::Result<()> {
        let Some(o) = &self.outage else {
            return Ok(());
        };
        if o.failed {
            return Err(self.stopped());
        }
        let now = link::now();
        if now < o.next_try {
            return Ok(());
        }
        let (iface, addrs, opts, fd) = (&self.iface, self.addrs, &self.opts, self.ioctl_fd.as_fd());
        let opened = self
            .home
            .run(|| Live::open(iface, addrs, opts, fd))
            .map_err(|source| AfXdpError::Sys {
                what: "setns into the driver's network namespace (needs CAP_SYS_ADMIN)",
                source,
            })
            .and_then(|r| r);
        match opened {
            Ok((live, mac)) => {
                for q in &live.queues {
                    if let Err(e) = self.wake.watch(q.xsk.as_fd()) {
                        eprintln!("shmnet: af_xdp {}: epoll_ctl: {e}", self.iface);
                    }
                }
                let down_for = now.saturating_sub(self.outage.take().map_or(now, |o| o.since));
                self.wake.arm(None);
                self.stats.link = LinkState::Up;
                self.stats.reopens += 1;
                let other_mac = if mac == self.mac {
                    String::new()
                } else {
                    format!(
                        "; it has another MAC ({}), and shmnet keeps answering as {}",
                        link::mac_str(mac),
                        link::mac_str(self.mac)
                    )
                };
                eprintln!(
                    "shmnet: af_xdp {}: the interface is back after {} (index {}){other_mac}; \
                     resuming",
                    self.iface,
                    link::human(down_for),
                    live.ifindex
                );
                self.live = Some(live);
                Ok(())
            }
            Err(e) => {
                let every = self.opts.reopen_every.max(Duration::from_millis(1));
                let give_up = self.opts.give_up_after;
                let Some(o) = &mut self.outage else {
                    return Ok(());
                };
                if matches!(e, AfXdpError::NoSuchInterface(_)) {
                    o.reason = DownReason::Gone;
                }
                o.last_error = Some(e.to_string());
                if give_up.is_some_and(|limit| now.saturating_sub(o.since) >= limit) {
                    o.failed = true;
                    self.stats.link = LinkState::Failed;
                    self.wake.arm(None);
                    eprintln!(
                        "shmnet: af_xdp {}: giving up after {} down ({}); the last reopen \
                         said: {}",
                        self.iface,
                        link::human(now.saturating_sub(o.since)),
                        o.reason,
                        o.last_error.as_deref().unwrap_or_default()
                    );
                    return Err(self.stopped());
                }
                o.next_try = now + every;
                self.wake.arm(Some(o.next_try));
                Ok(())
            }
        }
    }

    /// Before `live`'s sockets close: their kernel counters carried into the totals, and
    /// the sockets no longer watched.
    fn retire(&mut self, live: &mut Live) {
        live.refresh_kernel();
        self.past.carry(&live.stats(self.bad_completions));
        for q in &live.queues {
            self.wake.unwatch(q.xsk.as_fd());
        }
    }

    /// The XDP side's counters: those of the sockets open now, with the kernel's counts of
    /// sockets closed at a reopen added in (each queue's own figures start again at a
    /// reopen).
    pub fn xdp_stats(&self) -> XdpStats {
        let mut x = self.past.clone();
        match &self.live {
            Some(live) => x.carry(&live.stats(self.bad_completions)),
            None => x.bad_completions = self.bad_completions,
        }
        x
    }

    /// Releases `frames` unsent while the interface is down, counting them.
    fn drop_unsent(&mut self, pools: &mut DriverPools, frames: &[u32]) {
        for &f in frames {
            pools.release(f);
        }
        self.stats.link_drops += frames.len() as u64;
    }
}

impl Driver for AfXdp {
    fn rx_burst(
        &mut self,
        pools: &mut dyn RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        if self.stats.link == LinkState::Failed || self.released {
            return Err(self.stopped());
        }
        if self.outage.is_some() {
            self.while_down()?;
            if self.live.is_none() {
                return Ok(0);
            }
        }
        {
            let Some(single) = pools.single() else {
                return Err(io_error(AfXdpError::SeveralServers));
            };
            self.bound_to(single)?;
            if let Some(live) = &mut self.live {
                live.reap(single, &mut self.bad_completions);
            }
        }
        let live = self.live.as_mut().expect("open above");
        live.take_received(self.next, max, &mut self.taken, &mut self.stats);
        self.next = (self.next + 1) % live.queues.len();
        let mut appended = 0;
        for i in 0..self.taken.len() {
            let Taken { buf: idx, frame } = self.taken[i];
            let release = |pools: &mut dyn RxPools| {
                if let Some(p) = pools.single() {
                    p.release(idx);
                }
            };
            let Some((off, len)) = frame else {
                release(pools);
                continue;
            };
            let len = u32::from(len);
            let family = {
                let Some(p) = pools.single() else { continue };
                let bufs = p.buffers();
                let _ = bufs.set_off_len(idx, off, len as u16);
                // The first line of the frame, which is all `classify` reads (and the line
                // the stack reads first anyway).
                let mut head = [0u8; 64];
                let h = (len as usize).min(head.len());
                if bufs.read(idx, usize::from(off), &mut head[..h]).is_err() {
                    self.stats.rx_bad_ring += 1;
                    release(pools);
                    continue;
                }
                classify(&head[..h])
            };
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += u64::from(len);
            let family = match family {
                Ok(f) => f,
                Err(why) => {
                    self.stats.shed(why);
                    release(pools);
                    continue;
                }
            };
            if pools.pools_for(family).is_none() {
                self.stats.rx_unserved += 1;
                release(pools);
                continue;
            }
            out.push(RxFrame {
                buf: idx,
                len,
                family,
            });
            appended += 1;
        }
        let Some(single) = pools.single() else {
            return Ok(appended);
        };
        let live = self.live.as_mut().expect("open above");
        live.refill(&self.opts, &mut self.alloc, single);
        // Frames a kick could not move (the device was busy) go at the next burst of either
        // kind, not only at the next send.
        if live.tx_waiting()
            && let Err(e) = live.kick(self.opts.ring)
        {
            self.go_down(single, DownReason::Error(e.raw_os_error()));
            return Ok(appended);
        }
        if self.pace.due(self.taken.is_empty()) {
            self.look(single);
        }
        Ok(appended)
    }

    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()> {
        if self.stats.link == LinkState::Failed || self.released {
            for &f in frames {
                pools.release(f);
            }
            return Err(self.stopped());
        }
        if self.outage.is_some() {
            if let Err(e) = self.while_down() {
                for &f in frames {
                    pools.release(f);
                }
                return Err(e);
            }
            if self.live.is_none() {
                self.drop_unsent(pools, frames);
                return Ok(());
            }
        }
        if self.live.as_ref().is_some_and(|l| l.set_down) {
            self.drop_unsent(pools, frames);
            if self.pace.due(true) {
                self.look(pools);
            }
            return Ok(());
        }
        if let Err(e) = self.bound_to(pools) {
            for &f in frames {
                pools.release(f);
            }
            return Err(e);
        }
        let live = self.live.as_mut().expect("open above");
        live.reap(pools, &mut self.bad_completions);
        let max_frame = self.opts.mtu + ETH_HDR as u32 + 4;
        let u = live.umem.as_mut().expect("bound above");
        // One driver sends from one core, on one queue, as Linux's XPS sends a core's frames:
        // a flow's frames leave in the order they were made.
        let r = live.queues[0].rings.as_mut().expect("bound above");
        let mut pushed = false;
        for &f in frames {
            let ok = f < u.total
                && r.tx.free(1) > 0
                && pools.buffers().off_len(f).is_some_and(|(off, len)| {
                    let (off, len) = (u32::from(off), u32::from(len));
                    let good = len as usize >= ETH_HDR && len <= max_frame && off + len <= u.chunk;
                    if good {
                        r.tx.push(XdpDesc {
                            addr: u64::from(f) * u64::from(u.chunk) + u64::from(off),
                            len,
                            options: XdpDescOptions::empty(),
                        });
                    }
                    good
                });
            if ok {
                u.in_flight[f as usize] += 1;
                u.outstanding += 1;
                self.stats.tx_frames += 1;
                self.stats.tx_bytes += u64::from(pools.buffers().off_len(f).map_or(0, |x| x.1));
                pushed = true;
            } else {
                self.stats.tx_errors += 1;
                pools.release(f);
            }
        }
        if pushed {
            r.tx.submit();
        }
        if let Err(e) = live.kick(self.opts.ring) {
            self.go_down(pools, DownReason::Error(e.raw_os_error()));
            return Ok(());
        }
        if self.pace.due(false) {
            self.look(pools);
        }
        Ok(())
    }

    fn tx_room(&self) -> Option<usize> {
        // Free TX entries now: a sender held back by it waits instead of losing frames.
        // While the interface is down what is sent is dropped, so nothing is held back.
        let live = self.live.as_ref().filter(|l| !l.set_down)?;
        live.queues[0].rings.as_ref().map(|r| r.tx.room() as usize)
    }

    fn rx_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.wake.fd())
    }

    fn stats(&self) -> DriverStats {
        let x = self.xdp_stats();
        DriverStats {
            rx_device_drops: x.rx_dropped + x.rx_ring_full,
            xdp: Some(Box::new(x)),
            ..self.stats.clone()
        }
    }

    fn link(&self) -> LinkState {
        self.stats.link
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn release_held(&mut self, pools: &mut DriverPools) -> u32 {
        if self.released {
            return 0;
        }
        self.released = true;
        // No reopen is tried after this (nor a timer left to wake a caller forever).
        self.wake.arm(None);
        self.outage = None;
        let Some(mut live) = self.live.take() else {
            // Gone: what the sockets held went back when they closed.
            return 0;
        };
        // The completions that came are ordinary releases; the rest are handed back as held.
        live.reap(pools, &mut self.bad_completions);
        self.retire(&mut live);
        let Some(umem) = live.umem.take() else {
            return 0;
        };
        // The kernel may write into a fill buffer, or a device read a sent one, until every
        // socket on the UMEM is gone and its queue let go. The ring mappings hold the
        // sockets' files too; all of them, the sockets and the program go with `live`. Then
        // the kernel's deferred teardown of each queue is waited out — until a probe binds
        // to it again. Only then are the buffers handed back. If that cannot be had, the
        // buffers are kept: lost to the pool, never written behind its back.
        let ids: Vec<u32> = live.queues.iter().map(|q| q.id).collect();
        let ifindex = live.ifindex;
        drop(live);
        if probe_bind(&self.iface, ifindex, &ids, self.opts.force_copy).is_err() {
            return 0;
        }
        self.past.nothing_held();
        give_back(pools, &umem)
    }
}
