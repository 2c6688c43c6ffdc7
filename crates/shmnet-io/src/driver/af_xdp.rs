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
//! # Steering
//!
//! An XDP program ([`program`]) on the interface redirects to the socket only the frames for
//! shmnet's IPv4 address (and ARP for it), and passes everything else to the kernel, which
//! keeps answering on its own address on the same interface. The program is attached with a
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
//! # Checked input
//!
//! The kernel's descriptors are still range-checked: an RX descriptor whose address is not
//! inside a chunk the driver gave the fill ring, or whose frame runs past its chunk, is
//! dropped and counted (`rx_bad_ring`); a completion for a buffer not outstanding is counted
//! and ignored.
//!
//! # What it does not do yet
//!
//! One queue per driver (RSS across several queues needs one driver per queue); IPv4 only
//! (an IPv6 server uses af_packet); no jumbo frames (UMEM chunks are at most a page in
//! aligned mode, so the largest frame is 4,096 − 256 bytes); no reopen when the interface
//! goes away (the driver reports it and gives up; af_packet reopens); one server per driver
//! (not behind `shmnet driver --listen`).

pub mod program;
mod rings;

use super::{Driver, DriverStats, ETH_HDR, RxFrame, RxPools, classify};
pub use program::{ProgramError, XdpMode};
use rings::Ring;
use rustix::net::xdp::{
    SocketAddrXdp, SocketAddrXdpFlags, XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING,
    XDP_UMEM_PGOFF_COMPLETION_RING, XDP_UMEM_PGOFF_FILL_RING, XdpDesc, XdpDescOptions,
    XdpOptionsFlags, XdpUmemReg, XdpUmemRegFlags,
};
use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};
use shmnet_chan::{Buffers, DriverPools};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Where the kernel puts a received frame in its chunk: `XDP_PACKET_HEADROOM`.
pub const FRAME_OFFSET: u32 = 256;

/// Ring sizes and how many buffers to keep on the fill ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfXdpOptions {
    /// The device queue to serve (0).
    pub queue: u32,
    /// Entries in each of the four rings (a power of two; 2,048).
    pub ring: u32,
    /// Buffers kept on the fill ring (at most `ring`, and at most a quarter of the pool;
    /// 1,024): how many frames the kernel can receive while the server is not looking.
    pub fill: u32,
    /// The largest IP packet sent (1,500): at most the interface's MTU.
    pub mtu: u32,
    /// Refuse zero-copy, even where the device offers it (`XDP_COPY`).
    pub force_copy: bool,
}

impl Default for AfXdpOptions {
    fn default() -> Self {
        Self {
            queue: 0,
            ring: 2048,
            fill: 1024,
            mtu: 1500,
            force_copy: false,
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

/// What the XDP side of the driver shows in `shmnet stats` (`driver.xdp`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct XdpStats {
    /// The device queue served.
    pub queue: u32,
    /// Where the steering program runs: `native` or `generic` (`None` before it is attached).
    pub mode: Option<XdpMode>,
    /// Whether the device writes and reads the pool's buffers itself (zero-copy), rather than
    /// the kernel copying frames into and out of them.
    pub zero_copy: bool,
    /// Buffers on the fill ring (or received and not yet taken): what the kernel can receive
    /// into now.
    pub fill_level: u32,
    /// Frames sent whose buffers the kernel has not completed yet.
    pub completions_outstanding: u32,
    /// The kernel's `XDP_STATISTICS`: frames dropped for lack of a fill buffer or other
    /// reasons.
    pub rx_dropped: u64,
    /// The kernel's count of RX frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// The kernel's count of times it found the fill ring empty.
    pub rx_fill_ring_empty: u64,
    /// The kernel's count of invalid RX descriptors.
    pub rx_invalid_descs: u64,
    /// The kernel's count of invalid TX descriptors (frames it refused to send).
    pub tx_invalid_descs: u64,
    /// Completions for buffers not outstanding (checked input: ignored).
    pub bad_completions: u64,
}

/// A frame popped off RX: its buffer, and where the frame lies in it (`None`: the
/// descriptor was bad and the buffer goes straight back).
#[derive(Clone, Copy)]
struct Taken {
    buf: u32,
    frame: Option<(u16, u16)>,
}

/// The socket's rings and the UMEM, once bound to a pool set.
struct Bound {
    /// The pool set whose data region is the UMEM (to check later calls give the same one).
    base: usize,
    chunk: u32,
    total: u32,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    /// Per buffer: 1 while on the fill ring (or in RX, not yet taken), else 0.
    on_fill: Vec<bool>,
    /// Per buffer: how many of its sends are not completed.
    in_flight: Vec<u32>,
    fill_level: u32,
    outstanding: u32,
}

/// The driver. See the [module docs](self).
pub struct AfXdp {
    iface: String,
    ifindex: u32,
    mac: [u8; 6],
    opts: AfXdpOptions,
    steering: program::Steering,
    xsk: OwnedFd,
    bound: Option<Bound>,
    zero_copy: bool,
    stats: DriverStats,
    bad_completions: u64,
    /// Set once [`Driver::release_held`] gave the buffers back: the driver is not driven
    /// after it.
    released: bool,
    /// The kernel's counters as they stood when the socket was closed (after a release).
    last_kernel: Option<rustix::net::xdp::XdpStatistics>,
    /// Frames popped off RX in this burst.
    taken: Vec<Taken>,
    alloc: Vec<u32>,
}

impl std::fmt::Debug for AfXdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdp")
            .field("iface", &self.iface)
            .field("queue", &self.opts.queue)
            .field("mode", &self.steering.mode())
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

/// Hands back to `pools` the buffers a released socket held: those on the fill ring (or
/// received and not taken), and those sent and not completed. Returns how many.
fn give_back(pools: &mut DriverPools, on_fill: &[bool], in_flight: &[u32]) -> u32 {
    let mut n = 0;
    for (idx, &on) in on_fill.iter().enumerate() {
        if on {
            pools.release(idx as u32);
            n += 1;
        }
    }
    for (idx, &c) in in_flight.iter().enumerate() {
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
fn bind_retrying(fd: BorrowedFd<'_>, addr: &SocketAddrXdp) -> rustix::io::Result<()> {
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

/// Binds a throwaway AF_XDP socket, on a private UMEM of a few pages, to `opts.queue` of
/// the interface: the checks the real bind would make, made at open.
fn probe_bind(iface: &str, ifindex: u32, opts: &AfXdpOptions) -> Result<(), AfXdpError> {
    use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous, munmap};
    const CHUNKS: usize = 16;
    let page = rustix::param::page_size();
    let len = CHUNKS * page;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it, and it is
    // unmapped below after the socket that registered it is closed.
    let mem = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .map_err(sys("mapping a probe UMEM"))?;
    let result = (|| {
        let xsk = rustix::net::socket_with(
            AddressFamily::XDP,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| AfXdpError::NoAfXdp(e.into()))?;
        let fd = xsk.as_fd();
        let reg = XdpUmemReg {
            addr: mem as u64,
            len: len as u64,
            chunk_size: page as u32,
            headroom: 0,
            flags: XdpUmemRegFlags::empty(),
            tx_metadata_len: 0,
        };
        sockopt::set_xdp_umem_reg(fd, reg).map_err(sys("XDP_UMEM_REG (a probe UMEM)"))?;
        sockopt::set_xdp_umem_fill_ring_size(fd, 16).map_err(sys("XDP_UMEM_FILL_RING"))?;
        sockopt::set_xdp_umem_completion_ring_size(fd, 16)
            .map_err(sys("XDP_UMEM_COMPLETION_RING"))?;
        sockopt::set_xdp_rx_ring_size(fd, 16).map_err(sys("XDP_RX_RING"))?;
        let mut flags = SocketAddrXdpFlags::empty();
        if opts.force_copy {
            flags |= SocketAddrXdpFlags::XDP_COPY;
        }
        let addr = SocketAddrXdp::new(flags, ifindex, opts.queue);
        bind_retrying(fd, &addr).map_err(|e| match e {
            rustix::io::Errno::INVAL | rustix::io::Errno::NXIO => AfXdpError::NoQueue {
                iface: iface.to_owned(),
                queue: opts.queue,
                source: e.into(),
            },
            e => sys("binding a probe AF_XDP socket")(e),
        })
    })();
    // SAFETY: our mapping of `len` bytes; the socket that registered it is closed.
    let _ = unsafe { munmap(mem, len) };
    result
}

impl AfXdp {
    /// Opens interface `iface` for shmnet's address `ip`: makes the AF_XDP socket and
    /// attaches the steering program. The UMEM is registered, and the socket bound to its
    /// queue, on the first burst, when the pools are known (the program passes every frame
    /// to the kernel until then).
    pub fn open(iface: &str, ip: Ipv4Addr, opts: AfXdpOptions) -> Result<AfXdp, AfXdpError> {
        let xsk = match rustix::net::socket_with(
            AddressFamily::XDP,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::PERM | rustix::io::Errno::ACCESS) => {
                return Err(AfXdpError::NeedsPrivilege);
            }
            Err(e) => return Err(AfXdpError::NoAfXdp(e.into())),
        };
        // The interface ioctls want an INET socket (an AF_XDP one says EOPNOTSUPP).
        let probe = rustix::net::socket_with(
            AddressFamily::INET,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(sys("socket(AF_INET) for the interface ioctls"))?;
        let (ifindex, mac, if_mtu) = interface(probe.as_fd(), iface)?;
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
        // The queue, AF_XDP itself and the copy or zero-copy mode are checked now, with a
        // throwaway socket on a small private UMEM: the real bind waits for the pools (the
        // first burst), and a mistake must be refused at start, not then.
        probe_bind(iface, ifindex, &opts)?;
        let steering = program::Steering::attach(iface, ifindex, ip, opts.queue + 1)?;
        Ok(AfXdp {
            iface: iface.to_owned(),
            ifindex,
            mac,
            opts,
            steering,
            xsk,
            bound: None,
            zero_copy: false,
            stats: DriverStats::default(),
            bad_completions: 0,
            released: false,
            last_kernel: None,
            taken: Vec::new(),
            alloc: Vec::new(),
        })
    }

    /// Where the steering program runs.
    pub fn mode(&self) -> XdpMode {
        self.steering.mode()
    }

    /// Registers the pools' data region as the UMEM, maps the rings and binds the socket
    /// (once; later calls check they are given the same pools).
    fn bind(&mut self, bufs: &Buffers) -> Result<(), AfXdpError> {
        let geo = bufs.geometry();
        let base = bufs
            .data_ptr(0)
            .map_err(|_| AfXdpError::BadBuffers { data_size: 0 })?
            .as_ptr() as usize;
        if let Some(b) = &self.bound {
            return if b.base == base {
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
        if self.opts.mtu > largest {
            return Err(AfXdpError::MtuTooLarge {
                mtu: self.opts.mtu,
                chunk,
                largest,
            });
        }
        let total = geo.total();
        let fd = self.xsk.as_fd();
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
        let n = self.opts.ring;
        sockopt::set_xdp_umem_fill_ring_size(fd, n).map_err(sys("XDP_UMEM_FILL_RING"))?;
        sockopt::set_xdp_umem_completion_ring_size(fd, n)
            .map_err(sys("XDP_UMEM_COMPLETION_RING"))?;
        sockopt::set_xdp_rx_ring_size(fd, n).map_err(sys("XDP_RX_RING"))?;
        sockopt::set_xdp_tx_ring_size(fd, n).map_err(sys("XDP_TX_RING"))?;
        let off = sockopt::xdp_mmap_offsets(fd).map_err(sys("XDP_MMAP_OFFSETS"))?;
        let map_err = |what| move |e: std::io::Error| AfXdpError::Sys { what, source: e };
        let fill = Ring::map(fd, XDP_UMEM_PGOFF_FILL_RING, &off.fr, n)
            .map_err(map_err("mapping the fill ring"))?;
        let comp = Ring::map(fd, XDP_UMEM_PGOFF_COMPLETION_RING, &off.cr, n)
            .map_err(map_err("mapping the completion ring"))?;
        let rx =
            Ring::map(fd, XDP_PGOFF_RX_RING, &off.rx, n).map_err(map_err("mapping the RX ring"))?;
        let tx =
            Ring::map(fd, XDP_PGOFF_TX_RING, &off.tx, n).map_err(map_err("mapping the TX ring"))?;
        let mut flags = SocketAddrXdpFlags::XDP_USE_NEED_WAKEUP;
        if self.opts.force_copy {
            flags |= SocketAddrXdpFlags::XDP_COPY;
        }
        let addr = SocketAddrXdp::new(flags, self.ifindex, self.opts.queue);
        if let Err(e) = bind_retrying(fd, &addr) {
            return Err(match e {
                rustix::io::Errno::INVAL | rustix::io::Errno::NXIO => AfXdpError::NoQueue {
                    iface: self.iface.clone(),
                    queue: self.opts.queue,
                    source: e.into(),
                },
                e => sys("binding the AF_XDP socket")(e),
            });
        }
        self.zero_copy = sockopt::xdp_options(fd)
            .is_ok_and(|o| o.contains(XdpOptionsFlags::XDP_OPTIONS_ZEROCOPY));
        self.steering
            .steer_queue(self.opts.queue, self.xsk.as_raw_fd())?;
        self.bound = Some(Bound {
            base,
            chunk,
            total,
            fill,
            comp,
            rx,
            tx,
            on_fill: vec![false; total as usize],
            in_flight: vec![0; total as usize],
            fill_level: 0,
            outstanding: 0,
        });
        Ok(())
    }

    /// Binds to `pools` if not yet bound; `Err` (as the trait wants it) if that fails, after
    /// saying so once on stderr and reporting the link failed (the driver gives up).
    fn bound_to(&mut self, pools: &DriverPools) -> std::io::Result<()> {
        self.bind(pools.buffers()).map_err(|e| {
            eprintln!("shmnet: af_xdp {}: {e}; the driver stopped", self.iface);
            self.stats.link = super::LinkState::Failed;
            io_error(e)
        })
    }

    /// Takes back the buffers of completed sends.
    fn reap(&mut self, pools: &mut DriverPools) {
        let Some(b) = &mut self.bound else { return };
        let n = b.comp.available();
        for _ in 0..n {
            let addr = b.comp.pop();
            let idx = addr / u64::from(b.chunk);
            let slot = (idx < u64::from(b.total))
                .then(|| b.in_flight.get_mut(idx as usize))
                .flatten();
            match slot {
                Some(c) if *c > 0 => {
                    *c -= 1;
                    b.outstanding -= 1;
                    pools.release(idx as u32);
                }
                _ => self.bad_completions += 1,
            }
        }
        if n > 0 {
            b.comp.release();
        }
    }

    /// Tops the fill ring up to [`AfXdpOptions::fill`] buffers from `pools`.
    fn refill(&mut self, pools: &mut DriverPools) {
        let Some(b) = &mut self.bound else { return };
        let target = self.opts.fill.min(b.total / 4).min(self.opts.ring);
        let short = target.saturating_sub(b.fill_level);
        let want = short.min(b.fill.free(short));
        if want < 16.min(target) {
            return;
        }
        self.alloc.resize(want as usize, 0);
        let got = pools.alloc_burst(&mut self.alloc);
        for &idx in &self.alloc[..got] {
            b.fill.push(u64::from(idx) * u64::from(b.chunk));
            b.on_fill[idx as usize] = true;
        }
        if got > 0 {
            b.fill_level += got as u32;
            b.fill.submit();
            if b.fill.needs_wakeup() {
                // A zero-copy device asks to be told of fresh fill buffers.
                let mut none: [u8; 0] = [];
                let _ = rustix::net::recvfrom(
                    &self.xsk,
                    &mut none[..],
                    rustix::net::RecvFlags::DONTWAIT,
                );
            }
        }
    }

    /// The XDP side's counters.
    pub fn xdp_stats(&self) -> XdpStats {
        let k = match self.last_kernel {
            Some(k) => Some(k),
            None => sockopt::xdp_statistics(&self.xsk).ok(),
        };
        XdpStats {
            queue: self.opts.queue,
            mode: Some(self.steering.mode()),
            zero_copy: self.zero_copy,
            fill_level: self.bound.as_ref().map_or(0, |b| b.fill_level),
            completions_outstanding: self.bound.as_ref().map_or(0, |b| b.outstanding),
            rx_dropped: k.map_or(0, |k| k.rx_dropped),
            rx_ring_full: k.and_then(|k| k.rx_ring_full).unwrap_or(0),
            rx_fill_ring_empty: k.and_then(|k| k.rx_fill_ring_empty_descs).unwrap_or(0),
            rx_invalid_descs: k.map_or(0, |k| k.rx_invalid_descs),
            tx_invalid_descs: k.map_or(0, |k| k.tx_invalid_descs),
            bad_completions: self.bad_completions,
        }
    }

    /// Kicks the kernel to send what is on TX. A kick sends at most a batch (32 frames in
    /// copy mode), so it is repeated while frames wait and each kick moves some.
    fn kick(&mut self) -> std::io::Result<()> {
        let Some(b) = &mut self.bound else {
            return Ok(());
        };
        for _ in 0..(self.opts.ring / 32 + 1) {
            // Copy mode sends only inside `sendto` (or a `poll`, which an epoll sleeper does
            // not make): it is kicked whenever frames wait, without relying on the ring's
            // flag. A zero-copy device says when it needs it.
            if b.tx.outstanding() == 0 || (self.zero_copy && !b.tx.needs_wakeup()) {
                return Ok(());
            }
            let waiting = b.tx.outstanding();
            let sent = rustix::net::send(&self.xsk, &[], rustix::net::SendFlags::DONTWAIT);
            // A kick that moved nothing (the device busy, the completion ring full) is not
            // repeated: the frames wait for the next burst.
            let moved = b.tx.outstanding() < waiting;
            match sent {
                Ok(_) | Err(rustix::io::Errno::AGAIN | rustix::io::Errno::BUSY) if moved => {}
                Ok(_) | Err(rustix::io::Errno::AGAIN | rustix::io::Errno::BUSY) => return Ok(()),
                // No room in the device's queue: the frames stay on TX for the next kick.
                Err(rustix::io::Errno::NOBUFS) => return Ok(()),
                Err(e @ (rustix::io::Errno::NETDOWN | rustix::io::Errno::NXIO)) => {
                    self.stats.link = super::LinkState::Failed;
                    return Err(std::io::Error::other(format!(
                        "af_xdp {}: the interface went away or down ({e}); the af_xdp driver \
                         does not reopen it: restart shmnet once it is back",
                        self.iface
                    )));
                }
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }
}

impl Driver for AfXdp {
    fn rx_burst(
        &mut self,
        pools: &mut dyn RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        if self.stats.link == super::LinkState::Failed || self.released {
            return Err(std::io::Error::other(format!(
                "af_xdp {}: the driver stopped",
                self.iface
            )));
        }
        {
            let Some(single) = pools.single() else {
                return Err(io_error(AfXdpError::SeveralServers));
            };
            self.bound_to(single)?;
            self.reap(single);
        }
        let b = self.bound.as_mut().expect("bound above");
        self.taken.clear();
        let n = (b.rx.available() as usize).min(max);
        for _ in 0..n {
            let d = b.rx.pop();
            let idx = d.addr / u64::from(b.chunk);
            let off = (d.addr % u64::from(b.chunk)) as u32;
            let fits = off
                .checked_add(d.len)
                .is_some_and(|end| end <= b.chunk && d.options == XdpDescOptions::empty());
            let slot = (idx < u64::from(b.total))
                .then(|| b.on_fill.get_mut(idx as usize))
                .flatten();
            match slot {
                Some(on) if *on => {
                    *on = false;
                    b.fill_level -= 1;
                    if !fits {
                        self.stats.rx_bad_ring += 1;
                    }
                    self.taken.push(Taken {
                        buf: idx as u32,
                        // Both below a chunk (at most a page), so they fit 16 bits.
                        frame: fits.then_some((off as u16, d.len as u16)),
                    });
                }
                _ => self.stats.rx_bad_ring += 1,
            }
        }
        if n > 0 {
            b.rx.release();
        }
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
        if let Some(single) = pools.single() {
            self.refill(single);
        }
        // Frames a kick could not move (the device was busy) go at the next burst of either
        // kind, not only at the next send.
        if self.bound.as_mut().is_some_and(|b| b.tx.outstanding() > 0) {
            self.kick()?;
        }
        Ok(appended)
    }

    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()> {
        if self.stats.link == super::LinkState::Failed || self.released {
            for &f in frames {
                pools.release(f);
            }
            return Err(std::io::Error::other(format!(
                "af_xdp {}: the driver stopped",
                self.iface
            )));
        }
        if let Err(e) = self.bound_to(pools) {
            for &f in frames {
                pools.release(f);
            }
            return Err(e);
        }
        self.reap(pools);
        let max_frame = self.opts.mtu + ETH_HDR as u32 + 4;
        let b = self.bound.as_mut().expect("bound above");
        let mut pushed = false;
        for &f in frames {
            let ok = f < b.total
                && b.tx.free(1) > 0
                && pools.buffers().off_len(f).is_some_and(|(off, len)| {
                    let (off, len) = (u32::from(off), u32::from(len));
                    let good = len as usize >= ETH_HDR && len <= max_frame && off + len <= b.chunk;
                    if good {
                        b.tx.push(XdpDesc {
                            addr: u64::from(f) * u64::from(b.chunk) + u64::from(off),
                            len,
                            options: XdpDescOptions::empty(),
                        });
                    }
                    good
                });
            if ok {
                b.in_flight[f as usize] += 1;
                b.outstanding += 1;
                self.stats.tx_frames += 1;
                self.stats.tx_bytes += u64::from(pools.buffers().off_len(f).map_or(0, |x| x.1));
                pushed = true;
            } else {
                self.stats.tx_errors += 1;
                pools.release(f);
            }
        }
        if pushed {
            b.tx.submit();
        }
        self.kick()
    }

    fn tx_room(&self) -> Option<usize> {
        // Free TX entries now: a sender held back by it waits instead of losing frames.
        self.bound.as_ref().map(|b| b.tx.room() as usize)
    }

    fn rx_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.xsk.as_fd())
    }

    fn stats(&self) -> DriverStats {
        let x = self.xdp_stats();
        DriverStats {
            rx_device_drops: x.rx_dropped + x.rx_ring_full,
            xdp: Some(Box::new(x)),
            ..self.stats.clone()
        }
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn release_held(&mut self, pools: &mut DriverPools) -> u32 {
        if self.released {
            return 0;
        }
        // The completions that came are ordinary releases; the rest are handed back as held.
        self.reap(pools);
        self.last_kernel = sockopt::xdp_statistics(&self.xsk).ok();
        self.released = true;
        let Some(b) = self.bound.take() else {
            return 0;
        };
        let Bound {
            fill,
            comp,
            rx,
            tx,
            on_fill,
            in_flight,
            ..
        } = b;
        // The kernel may write into a fill buffer, or a device read a sent one, until the
        // socket is gone and its queue let go. The ring mappings hold the socket's file too,
        // so they go first; then the socket itself (replaced by a fresh, unbound one); then
        // the kernel's deferred teardown of the queue is waited out — until a probe binds to
        // the queue again. Only then are the buffers handed back. If any step cannot be
        // had, the buffers are kept: lost to the pool, never written behind its back.
        drop((fill, comp, rx, tx));
        match rustix::net::socket_with(
            AddressFamily::XDP,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        ) {
            Ok(fresh) => self.xsk = fresh,
            Err(_) => return 0,
        }
        if probe_bind(&self.iface, self.ifindex, &self.opts).is_err() {
            return 0;
        }
        give_back(pools, &on_fill, &in_flight)
    }
}
