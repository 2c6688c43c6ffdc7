//! `af_packet:IFACE`: a real Ethernet interface through an `AF_PACKET` socket with
//! memory-mapped `TPACKET_V2` receive and transmit rings.
//!
//! # The socket
//!
//! One `AF_PACKET`/`SOCK_RAW` socket, created with protocol 0 (so it receives nothing while
//! the rings are set up) and then bound to the interface's index with `ETH_P_ALL`. Its
//! options: `PACKET_VERSION = TPACKET_V2`, `PACKET_IGNORE_OUTGOING` (Linux 4.20+; frames
//! leaving the interface — ours or the local kernel's — never enter our ring),
//! `PACKET_LOSS` (a transmit frame the kernel cannot parse is skipped instead of stalling the
//! ring), optionally `PACKET_QDISC_BYPASS`, and a `PACKET_MR_PROMISC` membership only when
//! we answer for a MAC that is not the interface's. The interface's index, flags, hardware
//! address and MTU come from `SIOCGIF*` ioctls on that socket, so they are those of the
//! socket's network namespace. (Not `/sys/class/net`: a thread that `setns`-ed into another
//! namespace still sees the sysfs of the namespace that mounted it.)
//!
//! # The rings
//!
//! One `mmap` of the socket holds both rings, receive first. Each is blocks of fixed-size
//! slots, one frame per slot; a slot's status word says who owns it:
//!
//! ```text
//!  0                                   rx_blocks * rx_block_size
//!  | RX block 0 | RX block 1 | ... | RX block n-1 | TX block 0 | ... | TX block m-1 |
//!
//!  RX slot (rx_frame_size bytes):
//!  | tpacket2_hdr (32 B: status, len, snaplen, mac, ...) | sockaddr_ll | pad | frame at tp_mac |
//!
//!  TX slot (tx_frame_size bytes):
//!  | tpacket2_hdr (status, tp_len) | frame at byte 32 | ... |
//! ```
//!
//! **Why V2, not V3.** A `TPACKET_V3` ring packs frames into blocks and hands a block to user
//! space only when it is full or its retire timer fires (1 ms at the least): a lone frame —
//! a ping, a request at one in flight — waits for that timer, and a sleeping reader is woken
//! only then. The V3 driver this replaced measured 1.0 ms round trips where Linux took 55 µs
//! over the same veth pair. A V2 slot is handed over, and a sleeper woken, frame by frame:
//! that is why libpcap's immediate mode and DPDK's af_packet driver use V2. V3 packs small
//! frames densely (hundreds per 64 KiB block); V2 spends a whole slot on each.
//!
//! **Why 64 KiB slots.** A packet socket sees the kernel's skbs as they are, and a Linux
//! sender on the other end of a veth (or GRO under a NIC) hands over TCP super-frames of up
//! to 64 KiB, which [`gso`] cuts into wire frames. A slot too small for one truncates it and
//! loses the segment, so the default slot holds an IP packet of 65,536 bytes after the
//! kernel's headers — as libpcap sizes its slots when the interface offloads. The slot size
//! (65,664 bytes) is deliberately not a multiple of the page size: consecutive slots' headers
//! fall at different page offsets, so they do not all compete for the same cache sets.
//! Defaults: 32 receive blocks of 1 MiB, 15 slots each (480 frames of any size up to a
//! super-frame, 32 MiB of kernel memory: the depth that let a Linux sender on the other
//! core lose no more than a few hundred of 100,000 datagrams to the driver being scheduled
//! out, see Figures; a Linux UDP socket's default 208 KiB buffer holds about 280 such
//! datagrams), and a transmit ring of 8 blocks × 64 KiB = 256 slots
//! of 2,048 bytes (the frame starts at `TPACKET_ALIGN(sizeof(tpacket2_hdr))` = 32 bytes into
//! the slot). [`AfPacketOptions::for_mtu`] grows the transmit slots for a jumbo MTU; the
//! receive slots already hold any frame the interface can deliver.
//!
//! # Receive: what is filtered where
//!
//! - *Kernel*: frames of other interfaces (the bind), outgoing frames
//!   (`PACKET_IGNORE_OUTGOING`), and — unless the socket is promiscuous — unicast frames the
//!   NIC's own filter drops. Nothing is filtered by BPF.
//! - *Driver, per frame* ([`AfPacket::rx_burst`]): the slots the kernel handed over
//!   (`TP_STATUS_USER`) are taken in ring order; every header the kernel wrote is checked
//!   input (`tp_mac + tp_snaplen` bounded by the slot, the frame after the headers; a bad
//!   value drops that frame and counts `rx_bad_ring`). Then, in order: outgoing
//!   frames (`sll_pkttype == PACKET_OUTGOING`, for kernels without the socket option) and
//!   frames the kernel received with a VLAN tag (`TP_STATUS_VLAN_VALID`; we serve no VLAN)
//!   are `rx_filtered`; frames whose destination is not our MAC or broadcast are
//!   `rx_filtered` (other multicast is filtered too unless [`AfPacketOptions::multicast`] is
//!   set, but IPv4 groups' `01:00:5e:…` and IPv6's `33:33:…` are kept: the stack knows
//!   which groups it is in); [`classify`] sheds runts and unknown EtherTypes
//!   (`rx_runts`, `rx_unknown_type`); a frame the kernel truncated (`tp_snaplen < tp_len`) or
//!   longer than a pool buffer is `rx_oversize`; a frame that finds no pool buffer is
//!   `rx_no_buffer`. The rest is copied into a buffer (`off = 0`, `len` = frame length) and
//!   returned as an [`RxFrame`]. A slot goes back to the kernel (`TP_STATUS_KERNEL`) as soon
//!   as its frame has been looked at; a burst looks at each slot at most once.
//! - *Checksums*: a frame with `TP_STATUS_CSUMNOTREADY` was sent by this host with checksum
//!   offload and never went through hardware that would finish it (typically a veth peer's
//!   UDP or TCP): its transport checksum field holds only the pseudo-header sum. The driver
//!   completes the checksum of such unfragmented IPv4 UDP/TCP frames in the copy (counted by
//!   [`AfPacket::csum_completed`]), as a NIC or virtio-net's `NEEDS_CSUM` handling would, so
//!   the stack can verify checksums as usual.
//!
//! # Overload
//!
//! The driver never waits. When the stack falls behind, the kernel finds no free block and
//! drops frames itself; it reports them in `PACKET_STATISTICS` (`tpacket_stats.tp_drops`,
//! reset on every read), which the driver adds to `rx_device_drops` whenever a slot says
//! `TP_STATUS_LOSING` and whenever [`Driver::stats`] is called. When the pools are empty,
//! frames are dropped in the driver (`rx_no_buffer`) and their ring space is returned at
//! once, so the ring keeps draining. On transmit, a slot still owned by the kernel means the
//! ring is full: the frame is dropped and counted in `tx_errors`, as is a frame longer than
//! the MTU or a slot, or shorter than an Ethernet header. Every buffer handed to
//! [`AfPacket::tx_burst`] is released, sent or not.
//!
//! # Zero-copy transmit, and what a veth peer sees
//!
//! The kernel transmits from the TX ring without copying: the skb points at the slot's page,
//! and the slot turns `TP_STATUS_AVAILABLE` when the skb's destructor runs. A frame that
//! crosses a veth pair into another namespace's IP stack is orphaned on the way in
//! (`ip_rcv_core` calls `skb_orphan`), which runs that destructor while the datagram may
//! still sit unread in a Linux socket. Since Linux 4.20 ("packet: copy user buffers before
//! orphan or clone") TX-ring skbs are marked as holding user pages, so such paths copy them
//! first; the slot can then be rewritten safely. The probe
//! `probe_tx_slot_reuse_with_a_slow_linux_reader` in `tests/af_packet.rs` checks it: 2,000
//! distinct datagrams through the 256-slot ring to a Linux socket that read none of them
//! until the end all arrived intact, and no slot was ever found busy. (So over veth the
//! transmit is in effect a copy, made by the kernel.) Slots are reused strictly round-robin.
//!
//! # Health: a device that goes away and comes back
//!
//! The driver takes its device for down when it is deleted (`SIOCGIFINDEX` says `ENODEV`),
//! replaced (the name has another index: deleted and recreated), set down (`IFF_UP`
//! cleared), or when the socket reports `ENETDOWN`, `ENXIO` or `ENODEV` (as a pending
//! `SO_ERROR`, which is what makes it poll `POLLERR`, or from a send). It looks (three system
//! calls) at most every 100 ms, reading a coarse clock (no system call) only
//! on calls that found nothing to receive and on every 64th busy call, and at once when a
//! send fails: the hot path pays a counter increment per call. A deleted or downed device
//! makes the kernel raise the socket's error, which wakes a caller asleep on [`Driver::rx_fd`].
//!
//! Going down: the driver counts the frames still queued in the rings (`link_drops`), closes
//! the socket and its rings, reports [`LinkState::Down`] (`link_down_events` + 1), and logs one
//! line to stderr, e.g. `shmnet: af_packet va: the interface went away (ENODEV); reopening
//! every 250 ms, giving up after 60 s`. While down, `rx_burst` returns no frames and
//! `tx_burst` releases every buffer it is given (`link_drops`); every
//! [`AfPacketOptions::reopen_every`] a call tries to open the interface again, in the
//! network namespace of the first open, with the same checks and for the same MAC (if the
//! new interface has another MAC, the socket is made promiscuous so the stack keeps its
//! address). When that works it logs `... the interface is back after 1.3 s (index 9);
//! resuming`, reports [`LinkState::Up`] (`reopens` + 1) and walks the fresh rings from their
//! start. The driver holds no pool buffer between calls (received frames are copied out of
//! the ring, transmitted ones into it and released at once), so no buffer can be lost across
//! a reopen. After [`AfPacketOptions::give_up_after`] down it logs that it gives up, reports
//! [`LinkState::Failed`], and `rx_burst` and `tx_burst` return `Err`
//! ([`AfPacketError::GaveUp`] inside a `std::io::Error` of kind `NetworkDown`) from then on.
//!
//! [`Driver::rx_fd`] is not the packet socket but an epoll descriptor holding it and a timer:
//! it stays the same across reopens (a caller may put it in its own epoll set once), is
//! readable when frames (or an error) arrive, and while down only when a reopen is due — so
//! a caller that sleeps on it when idle does not spin while the device is gone. A socket
//! error can make it readable for up to 100 ms before the driver looks; that bounds the
//! spin. A send error other than the three above leaves the frames in the ring for the next
//! send.
//!
//! # Figures
//!
//! Measured on the development VM (2 vCPUs, Linux 6.18, veth pair between two namespaces;
//! `measure_linux_sender_throughput` in `tests/af_packet.rs`, run with `--ignored`): Linux
//! UDP sockets in the peer namespace send 100,000 64-byte datagrams as fast as they can to a
//! port of a shmnet stack served by this driver in one thread (rx burst, stack, `udp_recv`),
//! which sleeps on [`Driver::rx_fd`] whenever a burst finds nothing.
//!
//! | ring | build | Linux senders | sent/s | received/sent | device drops |
//! |---|---|---|---|---|---|
//! | V2, 240 slots | release | 1 thread | 203–215 k | 98.2–99.5 % | 473–1,771 |
//! | V2, 480 slots (default) | release | 1 thread | 199–214 k | 99.5–100 % | 0–525 |
//! | V3, 16 × 64 KiB blocks (before 2026-11-29) | release | 1 thread | 230 k | 100 % | 0 |
//!
//! The sender is the bottleneck in every row. With two busy threads on two vCPUs, the driver
//! is sometimes scheduled out for a millisecond or two; what arrives meanwhile must fit in
//! the ring, and a V2 slot holds one frame where a V3 block packed hundreds of small ones.
//! The default ring is the depth at which that costs at most half a percent here. Linux's own
//! UDP socket, at its default 208 KiB buffer, would hold about 280 of these datagrams. Ping
//! through the pair took 0.13 ms on average (the V3 ring: 0.7–0.9 ms). Overload shows up
//! where the docs above say: with a ring of four 2 KiB slots and the stack not reading,
//! 1,000 datagrams became a handful received and the rest `rx_device_drops` (the test
//! `a_full_ring_is_counted_as_device_drops`).

mod gso;
pub(crate) mod link;
pub(crate) mod netns;
pub(crate) mod wake;

pub use link::DownReason;

use super::{Driver, DriverStats, ETH_HDR, LinkState, RxFrame, classify};
use link::Pace;
use netns::Home;
use shmnet_chan::DriverPools;
use shmnet_stack::wire::{EthernetProtocol, IpProtocol, Sum, checksum, eth, ipv4, udp};
use std::cell::Cell;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use wake::Wake;

/// Ring geometry and filtering choices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketOptions {
    /// Receive ring blocks (32).
    pub rx_blocks: u32,
    /// Bytes per receive block: a multiple of the page size (1 MiB).
    pub rx_block_size: u32,
    /// Bytes per receive slot, the kernel's headers included: a multiple of 16 that fits
    /// in a block (65,664: a 64 KiB TCP super-frame fits, see [The rings](self#the-rings)).
    /// A frame longer than its slot allows is truncated by the kernel and counted
    /// `rx_oversize`.
    pub rx_frame_size: u32,
    /// Transmit ring blocks (8).
    pub tx_blocks: u32,
    /// Bytes per transmit block: a multiple of the page size (65,536).
    pub tx_block_size: u32,
    /// Bytes per transmit slot, header included: a multiple of 16 that divides the block
    /// size (2,048, leaving 2,000 bytes for the frame).
    pub tx_frame_size: u32,
    /// The largest IP packet sent, and the size TCP super-frames are cut to (1,500): at most
    /// the interface's MTU. [`AfPacketOptions::for_mtu`] sizes the transmit slots for it.
    pub mtu: u32,
    /// Answer for this MAC instead of the interface's own; the socket is then made
    /// promiscuous so the frames reach it.
    pub mac: Option<[u8; 6]>,
    /// Keep multicast frames (destination MAC with the group bit set) too; off by default.
    pub multicast: bool,
    /// Hand transmitted frames straight to the device, past the queueing discipline.
    pub qdisc_bypass: bool,
    /// While the device is down, try to reopen it this often (250 ms; at least 1 ms).
    pub reopen_every: Duration,
    /// Give up after the device has been down this long (60 s; `None`: never). From then on
    /// `rx_burst` and `tx_burst` return `Err`, and the server exits non-zero. See
    /// [Health](self#health).
    pub give_up_after: Option<Duration>,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        Self {
            rx_blocks: 32,
            rx_block_size: 1 << 20,
            rx_frame_size: 65_536 + 128,
            tx_blocks: 8,
            tx_block_size: 64 * 1024,
            tx_frame_size: 2048,
            mtu: 1500,
            mac: None,
            multicast: false,
            qdisc_bypass: false,
            reopen_every: Duration::from_millis(250),
            give_up_after: Some(Duration::from_secs(60)),
        }
    }
}

impl AfPacketOptions {
    /// The defaults for IP packets of up to `mtu` bytes (a jumbo MTU of 9,000, say): the
    /// transmit slots grow to the power of two that holds a frame, the blocks with them.
    pub fn for_mtu(mtu: u32) -> AfPacketOptions {
        let d = AfPacketOptions::default();
        let slot = (HDR2_ALIGNED as u32 + ETH_HDR as u32 + 4 + mtu)
            .next_power_of_two()
            .max(d.tx_frame_size);
        AfPacketOptions {
            mtu,
            tx_frame_size: slot,
            tx_block_size: d.tx_block_size.max(slot),
            ..d
        }
    }
}

/// Why [`AfPacket::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum AfPacketError {
    /// The name cannot name an interface.
    #[error("{0:?} is not an interface name (1 to 15 bytes, no NUL, '/' or whitespace)")]
    BadName(String),
    /// No permission to open a packet socket.
    #[error(
        "opening an AF_PACKET socket needs root or the CAP_NET_RAW capability: run as root, or \
         give the program the capability (`setcap cap_net_raw+ep PROGRAM`)"
    )]
    NeedsPrivilege,
    /// No interface of that name in this network namespace.
    #[error(
        "there is no interface named {0:?} in this network namespace (`ip link` lists them; \
         in another namespace use `ip netns exec NS ...`)"
    )]
    NoSuchInterface(String),
    /// The interface exists but is administratively down.
    #[error("interface {0} is down: bring it up with `ip link set {0} up`")]
    InterfaceDown(String),
    /// The interface does not carry Ethernet frames.
    #[error(
        "interface {name} is not an Ethernet device (ARP hardware type {hwtype}); af_packet \
         needs an Ethernet or veth interface"
    )]
    NotEthernet {
        /// The interface.
        name: String,
        /// Its `ARPHRD_*` type.
        hwtype: u16,
    },
    /// The options describe rings the kernel would refuse.
    #[error("bad ring geometry: {0}")]
    BadGeometry(String),
    /// `--mtu` asks for larger packets than the interface carries.
    #[error(
        "--mtu {mtu} is above {name}'s MTU of {iface_mtu}: raise the interface's (`ip link set \
         {name} mtu {mtu}`, and its peer's) or give a smaller --mtu"
    )]
    MtuAboveInterface {
        /// The interface.
        name: String,
        /// The MTU asked for.
        mtu: u32,
        /// The interface's.
        iface_mtu: u32,
    },
    /// The device stayed down for [`AfPacketOptions::give_up_after`]: the driver gave up for
    /// good (the error inside the `std::io::Error` that `rx_burst` and `tx_burst` return).
    #[error(
        "interface {name} was down or missing for {after:?}, so its af_packet driver gave up: \
         bring the interface back (`ip link`), then restart"
    )]
    GaveUp {
        /// The interface.
        name: String,
        /// How long the driver waited.
        after: Duration,
    },
    /// A system call failed.
    #[error("{what} failed: {source}")]
    Sys {
        /// What was being done, and what it needs.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

// Offsets into the kernel's structures, from the libc crate's definitions.
const H_STATUS: usize = offset_of!(libc::tpacket2_hdr, tp_status);
const H_LEN: usize = offset_of!(libc::tpacket2_hdr, tp_len);
const H_SNAPLEN: usize = offset_of!(libc::tpacket2_hdr, tp_snaplen);
const H_MAC: usize = offset_of!(libc::tpacket2_hdr, tp_mac);
const HDR2_LEN: usize = size_of::<libc::tpacket2_hdr>();
/// `TPACKET_ALIGN(sizeof(struct tpacket2_hdr))`: where `sockaddr_ll` follows the RX header,
/// and where the frame starts in a TX slot.
const HDR2_ALIGNED: usize =
    (HDR2_LEN + libc::TPACKET_ALIGNMENT - 1) & !(libc::TPACKET_ALIGNMENT - 1);
const SLL_PKTTYPE: usize = offset_of!(libc::sockaddr_ll, sll_pkttype);
const SLL_LEN: usize = size_of::<libc::sockaddr_ll>();
/// The least a receive slot must hold: the headers and an Ethernet header.
const RX_SLOT_MIN: usize = HDR2_ALIGNED + SLL_LEN + ETH_HDR;

/// The socket's `mmap`ed rings. All access goes through bounds-checked accessors, so no
/// value read from the ring can make the driver address memory outside the mapping.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// A volatile read of a `T` at byte `off`, if it lies inside the mapping and is aligned.
    fn load<T: Copy>(&self, off: usize) -> Option<T> {
        let end = off.checked_add(size_of::<T>())?;
        if end > self.len || off % align_of::<T>() != 0 {
            return None;
        }
        // SAFETY: `off..end` lies inside the live mapping (checked above; the base is page
        // aligned, so `off`'s alignment is the pointer's), and `T` is a plain integer type
        // for which every bit pattern is valid.
        Some(unsafe { std::ptr::read_volatile(self.base.as_ptr().add(off).cast::<T>()) })
    }

    /// A volatile write of a `T` at byte `off`; false if it does not fit.
    fn store<T: Copy>(&self, off: usize, v: T) -> bool {
        let Some(end) = off.checked_add(size_of::<T>()) else {
            return false;
        };
        if end > self.len || off % align_of::<T>() != 0 {
            return false;
        }
        // SAFETY: as in `load`; the word belongs to a slot or block user space owns now.
        unsafe { std::ptr::write_volatile(self.base.as_ptr().add(off).cast::<T>(), v) };
        true
    }

    /// The status word at `off` (block or slot status), shared with the kernel.
    fn status(&self, off: usize) -> Option<&AtomicU32> {
        let end = off.checked_add(4)?;
        if end > self.len || off % 4 != 0 {
            return None;
        }
        // SAFETY: an aligned `u32` inside the live mapping; the kernel and we both access it
        // as a single word (the kernel with WRITE_ONCE/smp_wmb, we with atomics), which is
        // what `AtomicU32::from_ptr` requires for the borrow's lifetime (that of `self`).
        Some(unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off).cast::<u32>()) })
    }

    /// `len` bytes at `off`, if inside the mapping.
    fn bytes(&self, off: usize, len: usize) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: inside the live mapping. The bytes belong to a slot the kernel handed to
        // user space (status `TP_STATUS_USER`), which it does not write until we return it.
        Some(unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len) })
    }

    /// A mutable view of `len` bytes at `off`, if inside the mapping.
    #[allow(clippy::mut_from_ref)]
    fn bytes_mut(&self, off: usize, len: usize) -> Option<&mut [u8]> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: inside the live mapping; the bytes belong to a TX slot whose status is
        // `TP_STATUS_AVAILABLE`, which the kernel does not read until we set
        // `TP_STATUS_SEND_REQUEST`, and the caller holds no other view of them.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(off), len) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is the mapping made in `open`; no reference into it
        // outlives `self` (every accessor borrows `self`).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Where a ring's slots lie in the mapping: `count` slots of `frame_size` bytes, packed
/// `per_block` to a block of `block_size` bytes, from byte `base`. Invariant (checked by
/// [`check_geometry`] before the kernel sees it): `1 <= per_block`, `count = per_block *
/// blocks`, and every slot lies inside the mapping.
#[derive(Clone, Copy, Debug)]
struct Slots {
    base: usize,
    block_size: usize,
    frame_size: usize,
    per_block: u32,
    count: u32,
}

impl Slots {
    fn new(base: usize, block_size: u32, frame_size: u32, blocks: u32) -> Self {
        let per_block = block_size / frame_size;
        Slots {
            base,
            block_size: block_size as usize,
            frame_size: frame_size as usize,
            per_block,
            count: per_block * blocks,
        }
    }

    /// The ring's bytes.
    fn len(&self) -> usize {
        self.count.div_ceil(self.per_block) as usize * self.block_size
    }

    /// Byte offset of slot `i` (taken modulo the ring) in the mapping.
    fn off(&self, i: u32) -> usize {
        let i = i % self.count;
        self.base
            + (i / self.per_block) as usize * self.block_size
            + (i % self.per_block) as usize * self.frame_size
    }

    /// The slots whose status has any of `bits`.
    fn count_with(&self, map: &Mapping, bits: u32) -> u64 {
        (0..self.count)
            .filter(|&i| {
                map.status(self.off(i) + H_STATUS)
                    .is_some_and(|st| st.load(Ordering::Acquire) & bits != 0)
            })
            .count() as u64
    }
}

/// The receive ring's walk: the next slot, and what to keep. Separate from the socket so
/// that it can be tested on memory laid out by hand.
struct RxRing {
    slots: Slots,
    /// The next slot the kernel will hand over (it fills them in ring order).
    next: u32,
    mac: [u8; 6],
    multicast: bool,
    csum_completed: u64,
    /// TCP super-frames cut into wire frames ([`gso`]).
    gso_split: u64,
    /// A slot said `TP_STATUS_LOSING`: the kernel's drop counter should be read.
    losing: bool,
    /// The IP packet size super-frames are cut to (the MTU).
    cut_mtu: u32,
}

impl RxRing {
    fn new(slots: Slots, mac: [u8; 6], multicast: bool) -> Self {
        Self {
            slots,
            next: 0,
            mac,
            multicast,
            csum_completed: 0,
            gso_split: 0,
            losing: false,
            cut_mtu: 1500,
        }
    }

    /// The same, cutting super-frames into IP packets of `mtu` bytes.
    fn cutting_to(mut self, mtu: u32) -> Self {
        self.cut_mtu = mtu;
        self
    }

    /// Cuts TCP super-frame `frame` into wire frames of at most `data_size` bytes (and at
    /// most an IPv4 packet of the MTU each, the largest a peer of that MTU expects), each in
    /// a pool buffer of its own. A piece that finds no buffer is lost like any frame
    /// (`rx_no_buffer`); TCP sends it again.
    #[allow(clippy::too_many_arguments)]
    fn take_super(
        &mut self,
        frame: &[u8],
        sup: gso::Super,
        data_size: usize,
        stats: &mut DriverStats,
        pools: &mut DriverPools,
        out: &mut Vec<RxFrame>,
        family: super::Family,
    ) -> bool {
        let max_frame = data_size.min(ETH_HDR + self.cut_mtu as usize);
        let n = sup.pieces(max_frame);
        if n == 0 {
            stats.rx_oversize += 1;
            return false;
        }
        self.gso_split += 1;
        let mut any = false;
        for i in 0..n {
            let Some(buf) = pools.alloc() else {
                stats.rx_no_buffer += 1;
                continue;
            };
            let b = pools.buffers();
            // SAFETY: the buffer was just allocated to us; nobody else touches it until we
            // hand it on.
            let written = unsafe { b.data_mut(buf) }
                .ok()
                .and_then(|dst| sup.write_piece(frame, max_frame, i, dst));
            match written {
                Some(len) if b.set_off_len(buf, 0, len as u16).is_ok() => {
                    stats.rx_frames += 1;
                    stats.rx_bytes += len as u64;
                    out.push(RxFrame {
                        buf,
                        len: len as u32,
                        family,
                    });
                    any = true;
                }
                _ => {
                    pools.release(buf);
                    stats.rx_oversize += 1;
                }
            }
        }
        any
    }

    /// Takes up to `max` frames for us out of the slots the kernel handed over, giving each
    /// slot back once looked at. Each slot is looked at at most once per call, so a burst
    /// ends even when none of the frames is ours.
    fn burst(
        &mut self,
        map: &Mapping,
        stats: &mut DriverStats,
        pools: &mut dyn super::RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> usize {
        let mut n = 0;
        let mut looked = 0;
        while n < max && looked < self.slots.count {
            let off = self.slots.off(self.next);
            let Some(st) = map.status(off + H_STATUS) else {
                break;
            };
            // Acquire: the kernel's writes to the slot happen before it set the status.
            let status = st.load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            looked += 1;
            if status & libc::TP_STATUS_LOSING != 0 {
                self.losing = true;
            }
            if self.take_frame(map, off, status, stats, pools, out) {
                n += 1;
            }
            // Release: our reads of the slot happen before the kernel may refill it.
            st.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.next = (self.next + 1) % self.slots.count;
        }
        n
    }

    /// Frames the kernel handed over that the walk has not looked at yet (ours or not): what
    /// is lost when the ring is closed now.
    fn pending(&self, map: &Mapping) -> u64 {
        self.slots.count_with(map, libc::TP_STATUS_USER)
    }

    /// Looks at the frame in the slot at `off`, whose status is `status`: appends it to
    /// `out` if it is for us. The header is checked input: a frame that does not lie inside
    /// its slot, after the headers, is counted `rx_bad_ring` and never read.
    fn take_frame(
        &mut self,
        map: &Mapping,
        off: usize,
        status: u32,
        stats: &mut DriverStats,
        pools: &mut dyn super::RxPools,
        out: &mut Vec<RxFrame>,
    ) -> bool {
        let fields = (|| {
            Some((
                map.load::<u32>(off + H_SNAPLEN)?,
                map.load::<u32>(off + H_LEN)?,
                map.load::<u16>(off + H_MAC)?,
                map.load::<u8>(off + HDR2_ALIGNED + SLL_PKTTYPE)?,
            ))
        })();
        let Some((snaplen, len, mac_off, pkttype)) = fields else {
            stats.rx_bad_ring += 1;
            return false;
        };
        let (mac_off, snaplen) = (usize::from(mac_off), snaplen as usize);
        // The frame follows the header and its sockaddr_ll, and ends inside the slot.
        if mac_off < HDR2_ALIGNED + SLL_LEN
            || mac_off.saturating_add(snaplen) > self.slots.frame_size
        {
            stats.rx_bad_ring += 1;
            return false;
        }
        let Some(frame) = map.bytes(off + mac_off, snaplen) else {
            stats.rx_bad_ring += 1;
            return false;
        };
        if pkttype == libc::PACKET_OUTGOING || status & libc::TP_STATUS_VLAN_VALID != 0 {
            stats.rx_filtered += 1;
            return false;
        }
        if frame.len() >= 6 {
            let dst: [u8; 6] = frame[..6].try_into().expect("six bytes");
            // IPv6 multicast (33:33:…) is how neighbour discovery reaches us: kept for
            // the server that takes IPv6 (shed as unserved if none does).
            // IPv4 groups' frames (01:00:5e:…) are kept too: the stack knows which groups
            // its sockets joined, and drops the rest (`not_for_us`).
            let ok = dst == self.mac
                || dst == [0xff; 6]
                || dst[..2] == [0x33, 0x33]
                || dst[..3] == [0x01, 0x00, 0x5e]
                || (self.multicast && dst[0] & 1 != 0);
            if !ok {
                stats.rx_filtered += 1;
                return false;
            }
        }
        let family = match classify(frame) {
            Ok(f) => f,
            Err(why) => {
                stats.shed(why);
                return false;
            }
        };
        let Some(pools) = pools.pools_for(family) else {
            stats.rx_unserved += 1;
            return false;
        };
        let data_size = pools.buffers().geometry().data_size as usize;
        if snaplen > data_size && snaplen == len as usize {
            // A TCP super-frame (a local sender's TSO, or GRO under us): cut it as the
            // sender's NIC would have.
            if let Some(sup) = gso::Super::of(frame) {
                return self.take_super(frame, sup, data_size, stats, pools, out, family);
            }
        }
        if snaplen < len as usize || snaplen > data_size || snaplen > usize::from(u16::MAX) {
            stats.rx_oversize += 1;
            return false;
        }
        let Some(buf) = pools.alloc() else {
            stats.rx_no_buffer += 1;
            return false;
        };
        let b = pools.buffers();
        if b.write(buf, 0, frame).is_err() || b.set_off_len(buf, 0, snaplen as u16).is_err() {
            // Cannot happen with the length checked above; counted all the same.
            pools.release(buf);
            stats.rx_oversize += 1;
            return false;
        }
        if status & libc::TP_STATUS_CSUMNOTREADY != 0 {
            if let Some((at, sum)) = complete_checksum(frame) {
                if b.write(buf, at, &sum.to_be_bytes()).is_ok() {
                    self.csum_completed += 1;
                }
            }
        }
        stats.rx_frames += 1;
        stats.rx_bytes += snaplen as u64;
        out.push(RxFrame {
            buf,
            len: snaplen as u32,
            family,
        });
        true
    }
}

/// The open device: the socket, its rings, and what the interface was when it was opened.
/// Dropped (rings unmapped, socket closed) when the device goes down; a reopen makes a new
/// one.
struct Device {
    // Field order: the mapping is unmapped before the socket closes.
    map: Mapping,
    fd: OwnedFd,
    ifindex: i32,
    dev_mac: [u8; 6],
    mtu: u32,
    /// The transmit ring's slots, and the next one to fill (slots are used round-robin).
    tx: Slots,
    tx_next: u32,
    ignore_outgoing: bool,
}

/// The down state: since when, why, and when to try again.
struct Outage {
    since: Duration,
    next_try: Duration,
    reason: DownReason,
    /// Why the last reopen failed.
    last_error: Option<AfPacketError>,
    /// The driver gave up: every call returns `Err`.
    failed: bool,
}

/// A packet device over an `AF_PACKET` socket. See the [module docs](self).
pub struct AfPacket {
    /// The open device; `None` while it is down and after giving up.
    dev: Option<Device>,
    name: String,
    /// The interface's index, MTU and `PACKET_IGNORE_OUTGOING` support at the last open.
    ifindex: i32,
    mtu: u32,
    ignore_outgoing: bool,
    /// The MAC the driver answers for: fixed at the first open, kept across reopens.
    mac: [u8; 6],
    opts: AfPacketOptions,
    rx: RxRing,
    stats: DriverStats,
    /// Device drops read from `PACKET_STATISTICS` (which resets on read).
    device_drops: Cell<u64>,
    pace: Pace,
    /// `Some` while the device is down or the driver gave up.
    outage: Option<Outage>,
    home: Home,
    wake: Wake,
}

// SAFETY: the mapping is owned by this value alone (no other handle to it exists in this
// process), and every access to it goes through `&self`/`&mut self`; moving the value to
// another thread moves that ownership with it. `Cell` is `Send`.
unsafe impl Send for AfPacket {}

fn sys(what: &'static str) -> impl FnOnce(std::io::Error) -> AfPacketError {
    move |source| AfPacketError::Sys { what, source }
}

fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn setsockopt<T>(fd: BorrowedFd<'_>, level: i32, name: i32, v: &T) -> std::io::Result<()> {
    // SAFETY: `v` points at a live `T` of the size passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(last_err()) }
}

pub(super) fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: `ifreq` is a plain C struct (and union) for which all-zero bytes are valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    req
}

pub(super) fn ioctl(
    fd: BorrowedFd<'_>,
    req: libc::Ioctl,
    ifr: &mut libc::ifreq,
) -> std::io::Result<()> {
    // SAFETY: the `SIOCGIF*` requests used here read the name from and write one union field
    // of a `struct ifreq`, which `ifr` is, live and exclusively borrowed.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req, ifr as *mut libc::ifreq) };
    if r == 0 { Ok(()) } else { Err(last_err()) }
}

impl Device {
    /// Opens interface `ifname` of the calling thread's network namespace and answers for
    /// `want_mac` (the interface's own MAC if `None`; another MAC makes the socket
    /// promiscuous). The name and geometry are already checked.
    fn open(
        ifname: &str,
        opts: &AfPacketOptions,
        want_mac: Option<[u8; 6]>,
    ) -> Result<Device, AfPacketError> {
        // Protocol 0: no frame is queued to the socket before it is bound to the interface.
        // SAFETY: plain system call with constant arguments.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = last_err();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => AfPacketError::NeedsPrivilege,
                _ => AfPacketError::Sys {
                    what: "socket(AF_PACKET, SOCK_RAW)",
                    source: e,
                },
            });
        }
        // SAFETY: `raw` is a fresh descriptor this function owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let bfd = fd.as_fd();

        let mut ifr = ifreq(ifname);
        if let Err(e) = ioctl(bfd, libc::SIOCGIFINDEX, &mut ifr) {
            return Err(match e.raw_os_error() {
                Some(libc::ENODEV) => AfPacketError::NoSuchInterface(ifname.to_owned()),
                _ => AfPacketError::Sys {
                    what: "SIOCGIFINDEX (looking up the interface)",
                    source: e,
                },
            });
        }
        // SAFETY: SIOCGIFINDEX filled the `ifru_ifindex` member.
        let ifindex = unsafe { ifr.ifr_ifru.ifru_ifindex };

        let mut ifr = ifreq(ifname);
        ioctl(bfd, libc::SIOCGIFFLAGS, &mut ifr).map_err(sys("SIOCGIFFLAGS"))?;
        // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags };
        if i32::from(flags) & libc::IFF_UP == 0 {
            return Err(AfPacketError::InterfaceDown(ifname.to_owned()));
        }

        let mut ifr = ifreq(ifname);
        ioctl(bfd, libc::SIOCGIFHWADDR, &mut ifr).map_err(sys("SIOCGIFHWADDR"))?;
        // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member.
        let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
        if hw.sa_family != libc::ARPHRD_ETHER {
            return Err(AfPacketError::NotEthernet {
                name: ifname.to_owned(),
                hwtype: hw.sa_family,
            });
        }
        let mut dev_mac = [0u8; 6];
        for (d, s) in dev_mac.iter_mut().zip(hw.sa_data.iter()) {
            *d = *s as u8;
        }

        let mut ifr = ifreq(ifname);
        ioctl(bfd, libc::SIOCGIFMTU, &mut ifr).map_err(sys("SIOCGIFMTU"))?;
        // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member.
        let mtu = unsafe { ifr.ifr_ifru.ifru_mtu }.max(0) as u32;

        let v2 = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        setsockopt(bfd, libc::SOL_PACKET, libc::PACKET_VERSION, &v2).map_err(sys(
            "PACKET_VERSION = TPACKET_V2 (needs Linux 2.6.27 or later)",
        ))?;
        let one: libc::c_int = 1;
        // Linux 4.20+. Without it, outgoing frames are recognised by `sll_pkttype`.
        let ignore_outgoing =
            setsockopt(bfd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one).is_ok();
        setsockopt(bfd, libc::SOL_PACKET, libc::PACKET_LOSS, &one).map_err(sys("PACKET_LOSS"))?;
        if opts.qdisc_bypass {
            setsockopt(bfd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(sys("PACKET_QDISC_BYPASS"))?;
        }

        let rx = Slots::new(0, opts.rx_block_size, opts.rx_frame_size, opts.rx_blocks);
        let tx = Slots::new(
            rx.len(),
            opts.tx_block_size,
            opts.tx_frame_size,
            opts.tx_blocks,
        );
        for (ring, slots, blocks, what) in [
            (
                libc::PACKET_RX_RING,
                rx,
                opts.rx_blocks,
                "PACKET_RX_RING (the receive ring; try fewer or smaller blocks)",
            ),
            (
                libc::PACKET_TX_RING,
                tx,
                opts.tx_blocks,
                "PACKET_TX_RING (the transmit ring; try fewer or smaller blocks)",
            ),
        ] {
            let req = libc::tpacket_req {
                tp_block_size: slots.block_size as u32,
                tp_block_nr: blocks,
                tp_frame_size: slots.frame_size as u32,
                tp_frame_nr: slots.count,
            };
            setsockopt(bfd, libc::SOL_PACKET, ring, &req).map_err(sys(what))?;
        }
        let len = rx.len() + tx.len();
        // SAFETY: a fresh shared mapping of the socket's rings at an address the kernel
        // chooses; it aliases no Rust object. `len` is exactly the two rings' size, which is
        // what the kernel requires for a packet socket mapping.
        let base = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED | rustix::mm::MapFlags::POPULATE,
                &fd,
                0,
            )
        }
        .map_err(|e| AfPacketError::Sys {
            what: "mmap of the packet rings",
            source: e.into(),
        })?;
        let map = Mapping {
            base: NonNull::new(base.cast()).expect("mmap returned a null mapping"),
            len,
        };

        // SAFETY: `sockaddr_ll` is a plain C struct; all-zero bytes are valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a live, initialised `sockaddr_ll` of the length passed.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            let e = last_err();
            return Err(match e.raw_os_error() {
                Some(libc::ENETDOWN) => AfPacketError::InterfaceDown(ifname.to_owned()),
                Some(libc::ENODEV) => AfPacketError::NoSuchInterface(ifname.to_owned()),
                _ => AfPacketError::Sys {
                    what: "bind to the interface",
                    source: e,
                },
            });
        }

        let mac = want_mac.unwrap_or(dev_mac);
        let membership = |mr_type: i32, what: &'static str| {
            // SAFETY: `packet_mreq` is a plain C struct; all-zero bytes are valid.
            let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
            mr.mr_ifindex = ifindex;
            mr.mr_type = mr_type as u16;
            setsockopt(
                fd.as_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &mr,
            )
            .map_err(sys(what))
        };
        if mac != dev_mac {
            membership(
                libc::PACKET_MR_PROMISC,
                "PACKET_MR_PROMISC (answering for a MAC that is not the interface's)",
            )?;
        }
        if opts.multicast {
            membership(libc::PACKET_MR_ALLMULTI, "PACKET_MR_ALLMULTI")?;
        }
        Ok(Device {
            map,
            fd,
            ifindex,
            dev_mac,
            mtu,
            tx,
            tx_next: 0,
            ignore_outgoing,
        })
    }

    /// Reads (and so resets) the kernel's `PACKET_STATISTICS`, adding its drops to `acc`.
    fn poll_device_drops(&self, acc: &Cell<u64>) {
        // SAFETY: `tpacket_stats` is a plain C struct; all-zero bytes are valid.
        let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are live and describe a buffer of `len` bytes, which the
        // kernel fills with at most that many.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r == 0 {
            acc.set(acc.get() + u64::from(st.tp_drops));
        }
    }

    /// Transmit slots handed to the kernel and not yet sent.
    fn tx_pending(&self) -> u64 {
        self.tx.count_with(
            &self.map,
            libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING,
        )
    }

    /// Puts one frame into the next transmit slot and returns its length; `None` if it could
    /// not (the caller counts it).
    fn queue_tx(&mut self, pools: &DriverPools, buf: u32) -> Option<usize> {
        let b = pools.buffers();
        let (off, len) = b.off_len(buf)?;
        let len = usize::from(len);
        let room = self.tx.frame_size - HDR2_ALIGNED;
        // The kernel refuses frames longer than the MTU plus an Ethernet (and VLAN) header.
        if len < ETH_HDR || len > room || len > self.mtu as usize + ETH_HDR + 4 {
            return None;
        }
        let slot = self.tx.off(self.tx_next);
        let st = self.map.status(slot + H_STATUS)?;
        // Acquire: the kernel is done with the slot's bytes once it says it is available.
        let s = st.load(Ordering::Acquire);
        if s & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) != 0 {
            return None; // the ring is full
        }
        let dst = self.map.bytes_mut(slot + HDR2_ALIGNED, len)?;
        b.read(buf, off.into(), dst).ok()?;
        self.map.store::<u32>(slot + H_LEN, len as u32);
        self.map.store::<u32>(slot + H_SNAPLEN, len as u32);
        // Release: the frame and header are written before the kernel may read them.
        st.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_next = (self.tx_next + 1) % self.tx.count;
        Some(len)
    }

    /// Asks the kernel to send what is queued, without waiting for it.
    fn kick(&self) -> std::io::Result<()> {
        // SAFETY: a zero-length send from a null pointer: the kernel reads no user memory, it
        // walks the TX ring.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(());
        }
        let e = last_err();
        match e.raw_os_error() {
            // The frames stay queued in the ring and go with the next kick.
            Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => Ok(()),
            _ => Err(e),
        }
    }
}

impl AfPacket {
    /// Opens interface `ifname` of the calling thread's network namespace. Later reopens
    /// (see [Health](self#health)) happen in that same namespace.
    pub fn open(ifname: &str, opts: AfPacketOptions) -> Result<AfPacket, AfPacketError> {
        if ifname.is_empty()
            || ifname.len() >= libc::IFNAMSIZ
            || ifname
                .bytes()
                .any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace())
        {
            return Err(AfPacketError::BadName(ifname.to_owned()));
        }
        check_geometry(&opts)?;
        let home = Home::here();
        let dev = Device::open(ifname, &opts, opts.mac)?;
        if opts.mtu > dev.mtu {
            return Err(AfPacketError::MtuAboveInterface {
                name: ifname.to_owned(),
                mtu: opts.mtu,
                iface_mtu: dev.mtu,
            });
        }
        let wake = Wake::new().map_err(sys("epoll_create1 and timerfd_create (the wake-up)"))?;
        wake.watch(dev.fd.as_fd())
            .map_err(sys("epoll_ctl (watching the packet socket)"))?;
        let mac = opts.mac.unwrap_or(dev.dev_mac);
        Ok(AfPacket {
            name: ifname.to_owned(),
            ifindex: dev.ifindex,
            mtu: dev.mtu,
            ignore_outgoing: dev.ignore_outgoing,
            mac,
            rx: RxRing::new(rx_slots(&opts), mac, opts.multicast).cutting_to(opts.mtu),
            stats: DriverStats::default(),
            device_drops: Cell::new(0),
            pace: Pace::default(),
            outage: None,
            home,
            wake,
            dev: Some(dev),
            opts,
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's index in its network namespace (at the last open).
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The interface's MTU (at the last open).
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The options it was opened with.
    pub fn options(&self) -> &AfPacketOptions {
        &self.opts
    }

    /// Whether the kernel filters outgoing frames (`PACKET_IGNORE_OUTGOING`, Linux 4.20+).
    pub fn kernel_ignores_outgoing(&self) -> bool {
        self.ignore_outgoing
    }

    /// Frames received with an unfinished (offloaded) checksum that the driver completed.
    pub fn csum_completed(&self) -> u64 {
        self.rx.csum_completed
    }

    /// TCP super-frames (a sender's segmentation offload) the driver cut into wire frames.
    pub fn gso_split(&self) -> u64 {
        self.rx.gso_split
    }

    /// Why the device is down (or was, when the driver gave up); `None` while it is up.
    pub fn down_reason(&self) -> Option<DownReason> {
        self.outage.as_ref().map(|o| o.reason)
    }

    /// Looks at the device if a look is due (`idle`: the call found nothing to do).
    fn maybe_check(&mut self, idle: bool) {
        if !self.pace.due(idle) {
            return;
        }
        let Some(dev) = &self.dev else { return };
        if let Err(why) = link::probe(dev.fd.as_fd(), &self.name, dev.ifindex) {
            self.go_down(why);
        }
    }

    /// A send failed with `e`: the device is down if the error says so.
    fn send_failed(&mut self, e: &std::io::Error) {
        let Some(dev) = &self.dev else { return };
        if link::is_link_error(e) {
            let why = link::explain(dev.fd.as_fd(), &self.name, dev.ifindex)
                .err()
                .unwrap_or(DownReason::Error(e.raw_os_error().unwrap_or(0)));
            self.go_down(why);
        }
    }

    /// Closes the device, counting what was still queued in its rings, and schedules the
    /// first reopen.
    fn go_down(&mut self, why: DownReason) {
        let Some(dev) = self.dev.take() else { return };
        let lost = self.rx.pending(&dev.map) + dev.tx_pending();
        self.stats.link_drops += lost;
        dev.poll_device_drops(&self.device_drops);
        self.wake.unwatch(dev.fd.as_fd());
        drop(dev);
        self.stats.link = LinkState::Down;
        self.stats.link_down_events += 1;
        let now = link::now();
        let every = self.reopen_every();
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
            "shmnet: af_packet {}: {why}; reopening every {}, {limit}",
            self.name,
            link::human(every)
        );
    }

    fn reopen_every(&self) -> Duration {
        self.opts.reopen_every.max(Duration::from_millis(1))
    }

    /// The error every call returns once the driver gave up.
    fn gave_up(&self) -> std::io::Error {
        let after = self.opts.give_up_after.unwrap_or_default();
        std::io::Error::new(
            std::io::ErrorKind::NetworkDown,
            AfPacketError::GaveUp {
                name: self.name.clone(),
                after,
            },
        )
    }

    /// While down: tries to reopen when a try is due. `Err` once the driver gives up.
    fn while_down(&mut self) -> std::io::Result<()> {
        let Some(o) = &self.outage else {
            return Ok(());
        };
        if o.failed {
            return Err(self.gave_up());
        }
        let now = link::now();
        if now < o.next_try {
            return Ok(());
        }
        let (name, opts, mac) = (&self.name, &self.opts, self.mac);
        let opened = self
            .home
            .run(|| Device::open(name, opts, Some(mac)))
            .map_err(sys(
                "setns into the driver's network namespace (needs CAP_SYS_ADMIN)",
            ))
            .and_then(|r| r)
            .and_then(|dev| {
                self.wake
                    .watch(dev.fd.as_fd())
                    .map_err(sys("epoll_ctl (watching the packet socket)"))?;
                Ok(dev)
            });
        match opened {
            Ok(dev) => self.came_back(dev, now),
            Err(e) => {
                let every = self.reopen_every();
                let give_up = self.opts.give_up_after;
                let Some(o) = &mut self.outage else {
                    return Ok(());
                };
                // A deleted interface is first set down, then unregistered: a look between
                // the two saw "set down". A reopen that finds no such interface knows better.
                if matches!(e, AfPacketError::NoSuchInterface(_)) && o.reason != DownReason::Gone {
                    o.reason = DownReason::Gone;
                }
                o.last_error = Some(e);
                if give_up.is_some_and(|limit| now.saturating_sub(o.since) >= limit) {
                    o.failed = true;
                    self.stats.link = LinkState::Failed;
                    self.wake.arm(None);
                    let last = o.last_error.as_ref().map(|e| e.to_string());
                    eprintln!(
                        "shmnet: af_packet {}: giving up after {} down ({}); the last reopen \
                         said: {}",
                        self.name,
                        link::human(now.saturating_sub(o.since)),
                        o.reason,
                        last.unwrap_or_default()
                    );
                    return Err(self.gave_up());
                }
                o.next_try = now + every;
                self.wake.arm(Some(o.next_try));
            }
        }
        Ok(())
    }

    /// The device is back as `dev`: resumes with fresh rings.
    fn came_back(&mut self, dev: Device, now: Duration) {
        let down_for = self
            .outage
            .take()
            .map_or(Duration::ZERO, |o| now.saturating_sub(o.since));
        self.wake.arm(None);
        let (csum, gso) = (self.rx.csum_completed, self.rx.gso_split);
        self.rx = RxRing::new(rx_slots(&self.opts), self.mac, self.opts.multicast)
            .cutting_to(self.opts.mtu);
        self.rx.csum_completed = csum;
        self.rx.gso_split = gso;
        let mac_note = if dev.dev_mac != self.mac {
            format!(
                "; its MAC is {}, still answering for {} (promiscuous)",
                link::mac_str(dev.dev_mac),
                link::mac_str(self.mac)
            )
        } else {
            String::new()
        };
        eprintln!(
            "shmnet: af_packet {}: the interface is back after {} (index {}){mac_note}; resuming",
            self.name,
            link::human(down_for),
            dev.ifindex
        );
        self.ifindex = dev.ifindex;
        self.mtu = dev.mtu;
        self.ignore_outgoing = dev.ignore_outgoing;
        self.dev = Some(dev);
        self.pace = Pace::default();
        self.stats.link = LinkState::Up;
        self.stats.reopens += 1;
    }
}

impl Driver for AfPacket {
    fn rx_burst(
        &mut self,
        pools: &mut dyn super::RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        let Some(dev) = &self.dev else {
            return self.while_down().map(|()| 0);
        };
        let n = self.rx.burst(&dev.map, &mut self.stats, pools, out, max);
        if std::mem::take(&mut self.rx.losing) {
            dev.poll_device_drops(&self.device_drops);
        }
        self.maybe_check(n == 0);
        Ok(n)
    }

    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()> {
        let Some(dev) = &mut self.dev else {
            for &buf in frames {
                pools.release(buf);
            }
            self.stats.link_drops += frames.len() as u64;
            return self.while_down();
        };
        let mut queued = 0;
        for &buf in frames {
            match dev.queue_tx(pools, buf) {
                Some(len) => {
                    queued += 1;
                    self.stats.tx_bytes += len as u64;
                }
                None => self.stats.tx_errors += 1,
            }
            pools.release(buf);
        }
        self.stats.tx_frames += queued;
        if queued > 0 {
            if let Err(e) = dev.kick() {
                self.send_failed(&e);
            }
        }
        self.maybe_check(frames.is_empty());
        Ok(())
    }

    fn rx_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.wake.fd())
    }

    fn stats(&self) -> DriverStats {
        if let Some(dev) = &self.dev {
            dev.poll_device_drops(&self.device_drops);
        }
        let mut s = self.stats.clone();
        s.rx_device_drops = self.device_drops.get();
        s
    }

    fn link(&self) -> LinkState {
        self.stats.link
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }
}

/// The receive ring's slots, at the start of the mapping.
fn rx_slots(o: &AfPacketOptions) -> Slots {
    Slots::new(0, o.rx_block_size, o.rx_frame_size, o.rx_blocks)
}

fn check_geometry(o: &AfPacketOptions) -> Result<(), AfPacketError> {
    // SAFETY: `sysconf` only reads a configuration value.
    let page = u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let bad = |m: String| Err(AfPacketError::BadGeometry(m));
    let least = RX_SLOT_MIN.next_multiple_of(libc::TPACKET_ALIGNMENT) as u32;
    for (what, bs, nr, fs) in [
        ("receive", o.rx_block_size, o.rx_blocks, o.rx_frame_size),
        ("transmit", o.tx_block_size, o.tx_blocks, o.tx_frame_size),
    ] {
        if bs == 0 || bs % page != 0 || bs > 1 << 22 {
            return bad(format!(
                "{what} block size {bs} must be a multiple of the page size ({page}) up to 4 MiB"
            ));
        }
        if !(1..=4096).contains(&nr) {
            return bad(format!("{what} ring of {nr} blocks: use 1 to 4096"));
        }
        if fs % libc::TPACKET_ALIGNMENT as u32 != 0 || fs < least || fs > bs {
            return bad(format!(
                "{what} frame size {fs} must be a multiple of 16 from {least} to the block size"
            ));
        }
    }
    Ok(())
}

/// For an unfragmented IPv4 UDP or TCP frame whose checksum was left to offload, the offset
/// in the frame of its checksum field and the complete checksum; `None` for anything else.
/// The headers are read with the stack's wire layer (lengths checked, the IPv4 header
/// checksum not judged: that is the stack's job) and summed with its checksum.
fn complete_checksum(frame: &[u8]) -> Option<(usize, u16)> {
    if eth::ethertype(frame)? != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = &frame[eth::HEADER_LEN..];
    let h = ipv4::parse_unverified(ip).ok()?;
    if h.is_fragment() {
        return None;
    }
    let field = match h.proto {
        IpProtocol::Udp => udp::CHECKSUM_OFFSET,
        IpProtocol::Tcp => TCP_CHECKSUM_OFFSET,
        _ => return None,
    };
    let seg = &ip[h.header_len..h.total_len];
    if seg.len() < field + 2 {
        return None;
    }
    // The field's offset is even, so the bytes after it keep their pairing.
    let mut sum = Sum::default();
    sum.add_word(checksum::pseudo_v4(h.src, h.dst, h.proto, seg.len()));
    sum.add(&seg[..field]);
    sum.add(&seg[field + 2..]);
    let c = match sum.checksum() {
        // RFC 768: a UDP checksum computed as zero is sent as all ones.
        0 if h.proto == IpProtocol::Udp => 0xffff,
        c => c,
    };
    Some((eth::HEADER_LEN + h.header_len + field, c))
}

/// Where the checksum field lies in a TCP header.
const TCP_CHECKSUM_OFFSET: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_the_kernel_headers() {
        assert_eq!(HDR2_LEN, 32);
        assert_eq!(HDR2_ALIGNED, 32);
        assert_eq!(libc::TPACKET2_HDRLEN, HDR2_ALIGNED + SLL_LEN);
        assert_eq!(SLL_PKTTYPE, 10);
        assert_eq!((H_STATUS, H_LEN, H_SNAPLEN, H_MAC), (0, 4, 8, 12));
    }

    /// Where the kernel puts an Ethernet frame in a V2 receive slot (`tpacket_rcv`: the
    /// network header at `TPACKET_ALIGN(TPACKET2_HDRLEN + 16)`, the MAC header before it).
    const KERNEL_MAC_AT: usize = (libc::TPACKET2_HDRLEN + 16).next_multiple_of(16) - ETH_HDR;

    #[test]
    fn the_default_slot_holds_a_64_kib_super_frame_and_slots_lie_where_the_kernel_puts_them() {
        let o = AfPacketOptions::default();
        assert!(KERNEL_MAC_AT + ETH_HDR + 65_536 <= o.rx_frame_size as usize);
        // Not a multiple of the page size: consecutive slot headers fall in other cache sets.
        assert_ne!(o.rx_frame_size % 4096, 0);
        let rx = rx_slots(&o);
        assert_eq!((rx.per_block, rx.count), (15, 480));
        assert_eq!(rx.off(14), 14 * 65_664);
        assert_eq!(rx.off(15), 1 << 20, "slots never straddle a block");
        assert_eq!(rx.off(480), 0, "modulo the ring");
        assert_eq!(rx.len(), 32 << 20);
        let tx = Slots::new(rx.len(), o.tx_block_size, o.tx_frame_size, o.tx_blocks);
        assert_eq!((tx.count, tx.off(32)), (256, (32 << 20) + (1 << 16)));
        let jumbo = AfPacketOptions::for_mtu(9000);
        assert!(jumbo.tx_frame_size as usize >= HDR2_ALIGNED + ETH_HDR + 9000);
        assert!(check_geometry(&jumbo).is_ok());
    }

    #[test]
    fn default_geometry_is_accepted_and_bad_geometry_refused() {
        assert!(check_geometry(&AfPacketOptions::default()).is_ok());
        let o = AfPacketOptions {
            rx_block_size: 1000,
            ..Default::default()
        };
        assert!(matches!(
            check_geometry(&o),
            Err(AfPacketError::BadGeometry(_))
        ));
        let o = AfPacketOptions {
            tx_frame_size: 2047,
            ..Default::default()
        };
        assert!(check_geometry(&o).is_err());
    }

    #[test]
    fn bad_names_are_refused_before_any_system_call() {
        for n in ["", "a/b", "sixteen-bytes-xx", "a b"] {
            assert!(matches!(
                AfPacket::open(n, AfPacketOptions::default()),
                Err(AfPacketError::BadName(_))
            ));
        }
    }

    // ------------------------------------------------------------ the receive walk, by hand

    /// A hand-made ring: 4 blocks of 16 KiB, 4 slots of 4 KiB each.
    const BS: u32 = 16384;
    const FS: u32 = 4096;
    const SLOTS: u32 = 16;
    const OURS: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn anon(len: usize) -> Mapping {
        // SAFETY: a fresh private anonymous mapping; `Mapping` unmaps it on drop.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }
        .expect("anonymous mapping");
        Mapping {
            base: NonNull::new(p.cast()).unwrap(),
            len,
        }
    }

    /// A receive ring laid out by hand, filled as the kernel fills it: slot after slot.
    struct Kernel {
        map: Mapping,
        slots: Slots,
        head: u32,
    }

    impl Kernel {
        fn new() -> Self {
            let slots = Slots::new(0, BS, FS, SLOTS / (BS / FS));
            Kernel {
                map: anon(slots.len()),
                slots,
                head: 0,
            }
        }

        fn ring(&self) -> RxRing {
            RxRing::new(self.slots, OURS, false)
        }

        /// Writes `frame` (of wire length `len`) into the next slot and hands it over.
        fn frame(&mut self, frame: &[u8], pkttype: u8, status: u32, len: u32) -> &mut Self {
            let h = self.slots.off(self.head);
            self.map.store::<u32>(h + H_SNAPLEN, frame.len() as u32);
            self.map.store::<u32>(h + H_LEN, len);
            self.map.store::<u16>(h + H_MAC, KERNEL_MAC_AT as u16);
            self.map
                .store::<u8>(h + HDR2_ALIGNED + SLL_PKTTYPE, pkttype);
            self.map
                .bytes_mut(h + KERNEL_MAC_AT, frame.len())
                .unwrap()
                .copy_from_slice(frame);
            self.map
                .status(h + H_STATUS)
                .unwrap()
                .store(status, Ordering::Release);
            self.head = (self.head + 1) % self.slots.count;
            self
        }

        fn ours(&mut self, frame: &[u8]) -> &mut Self {
            self.frame(
                frame,
                libc::PACKET_HOST,
                libc::TP_STATUS_USER,
                frame.len() as u32,
            )
        }

        fn status(&self, slot: u32) -> u32 {
            self.map
                .status(self.slots.off(slot) + H_STATUS)
                .unwrap()
                .load(Ordering::Acquire)
        }

        /// The header of the slot written last, to lie in.
        fn last(&self) -> usize {
            self.slots.off(self.head + self.slots.count - 1)
        }
    }

    fn eth(dst: [u8; 6], ethertype: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f
    }

    fn pools(n: u32) -> (shmnet_chan::ServerPools, DriverPools) {
        shmnet_chan::heap::heap_pools(
            shmnet_chan::PoolGeometry {
                pools: 1,
                per_pool: n,
                data_size: 2048,
                free_cap: n.next_power_of_two(),
                policy: shmnet_chan::AllocPolicy::Lifo,
            },
            None,
        )
    }

    #[test]
    fn the_walk_keeps_our_frames_and_counts_the_rest() {
        let mut k = Kernel::new();
        let mut rx = k.ring();
        let (_sp, mut dp) = pools(16);
        let mut stats = DriverStats::default();
        let mut out = Vec::new();
        // Nothing handed over yet.
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 0);

        let ip = eth(OURS, 0x0800, 60);
        k.ours(&ip)
            .ours(&eth([0xff; 6], 0x0806, 42))
            .ours(&eth([2, 9, 9, 9, 9, 9], 0x0800, 60)) // another host's
            .frame(&ip, libc::PACKET_OUTGOING, libc::TP_STATUS_USER, 60)
            .frame(
                &ip,
                libc::PACKET_HOST,
                libc::TP_STATUS_USER | libc::TP_STATUS_VLAN_VALID,
                60,
            )
            .ours(&eth([0x01, 0x80, 0xc2, 0, 0, 0], 0x0800, 60)) // multicast, no IPv4 group's
            .ours(&eth(OURS, 0x86dd, 80)) // IPv6: these pools take IPv4 and ARP only
            .ours(&eth(OURS, 0x0800, 20)) // runt
            .ours(&eth(OURS, 0x0800, 3000)) // longer than a buffer
            .frame(&ip, libc::PACKET_HOST, libc::TP_STATUS_USER, 9000) // truncated
            .ours(&ip);
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 3);
        for slot in 0..11 {
            assert_eq!(
                k.status(slot),
                libc::TP_STATUS_KERNEL,
                "slot {slot} went back"
            );
        }
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].family, super::super::Family::Ipv4);
        assert_eq!(out[1].family, super::super::Family::Arp);
        assert_eq!((out[1].len, out[2].len), (42, 60));
        let mut got = vec![0u8; 60];
        dp.buffers().read(out[2].buf, 0, &mut got).unwrap();
        assert_eq!(got, ip);
        assert_eq!(dp.buffers().off_len(out[0].buf), Some((0, 60)));
        assert_eq!(stats.rx_frames, 3);
        assert_eq!(stats.rx_bytes, 60 + 42 + 60);
        assert_eq!(stats.rx_filtered, 4);
        assert_eq!(stats.rx_unserved, 1);
        assert_eq!(stats.rx_unknown_type, 0);
        assert_eq!(stats.rx_runts, 1);
        assert_eq!(stats.rx_oversize, 2);
        assert_eq!(stats.rx_bad_ring, 0);

        // The next frame is in slot 11; then the ring wraps around to slot 0.
        k.ours(&ip);
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 1);
        for _ in 12..=SLOTS {
            k.ours(&ip);
        }
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 5);
        assert_eq!(k.status(0), libc::TP_STATUS_KERNEL);
        assert_eq!(stats.rx_bad_ring, 0);

        // An IPv4 group's frame is kept: the stack knows which groups it is in.
        out.clear();
        k.ours(&eth([0x01, 0, 0x5e, 1, 2, 3], 0x0800, 60));
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 1);
        assert_eq!(out[0].family, super::super::Family::Ipv4);
    }

    #[test]
    fn a_burst_stops_at_max_and_resumes_at_the_next_slot() {
        let mut k = Kernel::new();
        let mut rx = k.ring();
        let (_sp, mut dp) = pools(16);
        let mut stats = DriverStats::default();
        let mut out = Vec::new();
        for n in 0..5 {
            k.ours(&eth(OURS, 0x0800, 60 + n));
        }
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 2), 2);
        assert_eq!(k.status(1), libc::TP_STATUS_KERNEL);
        assert_eq!(k.status(2), libc::TP_STATUS_USER, "not looked at yet");
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 2), 2);
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 2), 1);
        assert_eq!(k.status(4), libc::TP_STATUS_KERNEL);
        let lens: Vec<u32> = out.iter().map(|f| f.len).collect();
        assert_eq!(lens, [60, 61, 62, 63, 64]);
    }

    #[test]
    fn the_walk_keeps_ring_order_and_looks_at_each_slot_once() {
        let mut k = Kernel::new();
        let mut rx = k.ring();
        let (_sp, mut dp) = pools(64);
        let mut stats = DriverStats::default();
        let mut out = Vec::new();
        // A full ring of frames for another host: one burst looks at each slot once,
        // returns none and gives every slot back.
        for _ in 0..SLOTS {
            k.ours(&eth([2, 9, 9, 9, 9, 9], 0x0800, 60));
        }
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 0);
        assert_eq!(stats.rx_filtered, u64::from(SLOTS));
        assert_eq!(rx.pending(&k.map), 0);
        // A slot the kernel has not filled stops the walk, even if a later one says USER
        // (the kernel fills in order; a later slot is stale or lies).
        let ip = eth(OURS, 0x0800, 60);
        k.ours(&ip);
        let skipped = k.head;
        k.ours(&ip).ours(&ip);
        k.map
            .status(k.slots.off(skipped) + H_STATUS)
            .unwrap()
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 1);
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 0);
        // A slot marked LOSING asks for the kernel's drop counter.
        assert!(!rx.losing);
        k.head = skipped;
        k.frame(
            &ip,
            libc::PACKET_HOST,
            libc::TP_STATUS_USER | libc::TP_STATUS_LOSING,
            60,
        );
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 2);
        assert!(rx.losing);
    }

    #[test]
    fn an_empty_pool_is_a_counted_drop_and_the_ring_keeps_draining() {
        let mut k = Kernel::new();
        let mut rx = k.ring();
        let (_sp, mut dp) = pools(1);
        let mut stats = DriverStats::default();
        let mut out = Vec::new();
        let ip = eth(OURS, 0x0800, 60);
        k.ours(&ip).ours(&ip).ours(&ip);
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64), 1);
        assert_eq!(stats.rx_no_buffer, 2);
        assert_eq!(rx.pending(&k.map), 0);
    }

    #[test]
    fn lying_ring_headers_are_counted_never_followed() {
        let (_sp, mut dp) = pools(64);
        let ip = eth(OURS, 0x0800, 60);
        type Lie = fn(&Mapping, usize);
        let lies: [(&str, Lie); 5] = [
            ("frame past the slot", |m, h| {
                m.store::<u32>(h + H_SNAPLEN, FS);
            }),
            ("snaplen that overflows", |m, h| {
                m.store::<u32>(h + H_SNAPLEN, u32::MAX);
            }),
            ("frame offset inside the header", |m, h| {
                m.store::<u16>(h + H_MAC, 4);
            }),
            ("frame offset at the slot's end", |m, h| {
                m.store::<u16>(h + H_MAC, FS as u16);
            }),
            ("frame offset past the slot", |m, h| {
                m.store::<u16>(h + H_MAC, u16::MAX);
            }),
        ];
        for (what, lie) in lies {
            let mut k = Kernel::new();
            let mut rx = k.ring();
            let mut stats = DriverStats::default();
            let mut out = Vec::new();
            k.ours(&ip).ours(&ip);
            lie(&k.map, k.last());
            k.ours(&ip);
            let n = rx.burst(&k.map, &mut stats, &mut dp, &mut out, 64);
            assert_eq!(stats.rx_bad_ring, 1, "{what}: counted");
            assert_eq!(n, 2, "{what}: the honest frames around it");
            assert_eq!(rx.pending(&k.map), 0, "{what}: every slot returned");
            for f in out {
                dp.release(f.buf);
            }
        }
    }

    #[test]
    fn frames_left_in_the_ring_are_counted_when_it_closes() {
        let mut k = Kernel::new();
        let mut rx = k.ring();
        let (_sp, mut dp) = pools(16);
        let mut stats = DriverStats::default();
        let mut out = Vec::new();
        assert_eq!(rx.pending(&k.map), 0, "nothing handed over");
        let ip = eth(OURS, 0x0800, 60);
        for _ in 0..5 {
            k.ours(&ip);
        }
        assert_eq!(rx.pending(&k.map), 5);
        assert_eq!(rx.burst(&k.map, &mut stats, &mut dp, &mut out, 1), 1);
        assert_eq!(rx.pending(&k.map), 4);
        for f in out {
            dp.release(f.buf);
        }
    }

    #[test]
    fn default_options_reopen_and_give_up_after_a_minute() {
        let o = AfPacketOptions::default();
        assert_eq!(o.reopen_every, Duration::from_millis(250));
        assert_eq!(o.give_up_after, Some(Duration::from_secs(60)));
        let e = AfPacketError::GaveUp {
            name: "va".into(),
            after: Duration::from_secs(60),
        };
        assert_eq!(
            e.to_string(),
            "interface va was down or missing for 60s, so its af_packet driver gave up: \
             bring the interface back (`ip link`), then restart"
        );
    }

    /// A UDP frame with a correct checksum, checked against etherparse's.
    fn udp_frame(payload: &[u8]) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1])
            .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
            .udp(4000, 5000);
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    #[test]
    fn completes_an_offloaded_udp_checksum() {
        for len in [0usize, 1, 10, 1472] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let good = udp_frame(&payload);
            let mut partial = good.clone();
            // What offload leaves: the pseudo-header sum, not inverted.
            partial[40] = 0x12;
            partial[41] = 0x34;
            let (at, sum) = complete_checksum(&partial).expect("a UDP frame");
            assert_eq!(at, 40);
            assert_eq!(sum.to_be_bytes(), [good[40], good[41]], "payload {len}");
        }
        // TCP: the checksum field at 16, and a computed zero stays zero.
        for len in [0usize, 3, 100] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 5 + 1) as u8).collect();
            let b = etherparse::PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1])
                .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
                .tcp(4000, 5000, 77, 1000);
            let mut good = Vec::new();
            b.write(&mut good, &payload).unwrap();
            let at = ETH_HDR + 20 + 16;
            let mut partial = good.clone();
            partial[at..at + 2].copy_from_slice(&[0x12, 0x34]);
            assert_eq!(
                complete_checksum(&partial),
                Some((at, u16::from_be_bytes([good[at], good[at + 1]]))),
                "TCP payload {len}"
            );
        }
        let mut frag = udp_frame(b"x");
        frag[20] |= 0x20; // more fragments
        assert_eq!(complete_checksum(&frag), None);
        assert_eq!(complete_checksum(&[0u8; 20]), None);
    }
}
