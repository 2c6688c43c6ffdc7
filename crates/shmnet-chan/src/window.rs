//! The shared window: a sealed memfd holding the header, the queues and the pools, mapped
//! between guard pages.
//!
//! The creator sizes the memfd, seals it against shrinking and growing (so no party can make
//! another's accesses fault with SIGBUS by truncating it), writes the header and fills the free
//! lists. A party that receives the fd checks the seals, reads the header with `pread` into
//! private memory, validates it against the file size and its own recomputation of the layout
//! (see [`crate::layout`]), and only then maps it. Every mapping sits between inaccessible
//! guard regions, so a bug that stepped outside the window would fault at once instead of
//! silently touching a neighbour — the fault-injection tests rely on this.

use crate::desc::DescSlot;
use crate::layout::{ChannelSpec, Layout, PageSize, RawHeader, Region, RegionKind};
use crate::mapping::Mapping;
use crate::pool::{Buffers, DriverPools, PoolCtl, PoolMem, ServerPools, Side};
use crate::ring::{Consumer, DescLimits, Producer, RingMem, RingShared, RingStats};
use crate::signal::{EventFd, Signal};
use crate::sync::{AtomicU32, Ordering};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::ProtFlags;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Why a window could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The spec cannot be laid out.
    #[error(transparent)]
    Layout(#[from] crate::layout::LayoutError),
    /// No (or too few) 2 MiB huge pages are reserved.
    #[error(
        "the window needs {needed} huge pages of 2 MiB but only {free} are free: reserve them with `echo {needed} > /proc/sys/vm/nr_hugepages` (as root), or use 4 KiB pages"
    )]
    NoHugePages {
        /// Pages the window needs.
        needed: usize,
        /// Pages free now.
        free: usize,
    },
    /// Transparent huge pages are disabled for shared memory.
    #[error(
        "transparent huge pages are off for shared memory (shmem_enabled is {0:?}): run `echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled` as root, or use 4 KiB or 2 MiB pages"
    )]
    ThpDisabled(String),
    /// A system call failed.
    #[error("{what}: {err}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error.
        err: std::io::Error,
    },
}

/// Why a window passed by a peer was refused.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The fd is not a sealed memfd.
    #[error("the window fd is not sealed against resizing (seals {0:?}); refusing it")]
    NotSealed(String),
    /// The header or size is inconsistent.
    #[error("bad window: {0}")]
    BadHeader(String),
    /// The wrong number or kind of eventfds came with it.
    #[error("bad wake-up fds: {0}")]
    BadSignals(String),
    /// A system call failed.
    #[error("{what}: {err}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error.
        err: std::io::Error,
    },
}

/// Why a handle could not be taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandleError {
    /// No ring with that number.
    #[error("the window has no ring {0}")]
    NoSuchRing(usize),
    /// This window object already gave out that end.
    #[error("{0} was already taken from this window")]
    Taken(String),
}

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> CreateError {
    move |e| CreateError::Sys {
        what,
        err: e.into(),
    }
}

fn osys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> OpenError {
    move |e| OpenError::Sys {
        what,
        err: e.into(),
    }
}

/// Bits of [`Window::taken`]: which ends this window object has handed out.
const TAKEN_SERVER_POOLS: u64 = 1 << 62;
const TAKEN_DRIVER_POOLS: u64 = 1 << 63;

/// A mapped, validated shared window and its wake-up events.
pub struct Window {
    map: Arc<Mapping>,
    layout: Layout,
    memfd: OwnedFd,
    /// One per ring (the ring's consumer sleeps on it), then one for the pools' waiters, then
    /// one per ring again (the ring's producer sleeps on it for room): see [`Window::open`].
    signals: Vec<Arc<EventFd>>,
    /// Producer ends taken in the low 32 bits, consumer ends in the next 30, then pools.
    taken: Mutex<u64>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("size", &self.layout.size)
            .field("spec", &self.layout.spec)
            .finish_non_exhaustive()
    }
}

impl Window {
    /// Creates, sizes, seals, maps and initialises a new window.
    pub fn create(spec: &ChannelSpec) -> Result<Self, CreateError> {
        let layout = Layout::compute(spec)?;
        let page = spec.page;
        if page == PageSize::Huge {
            let needed = layout.size / page.bytes();
            let free = huge_pages_free();
            if free < needed {
                return Err(CreateError::NoHugePages { needed, free });
            }
        }
        if page == PageSize::Thp {
            let mode = thp_shmem_mode();
            if mode == "never" || mode == "deny" {
                return Err(CreateError::ThpDisabled(mode));
            }
        }
        let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
        if page == PageSize::Huge {
            flags |= MemfdFlags::HUGETLB | MemfdFlags::HUGE_2MB;
        }
        let memfd =
            rustix::fs::memfd_create("shmnet-window", flags).map_err(sys("memfd_create"))?;
        rustix::fs::ftruncate(&memfd, layout.size as u64).map_err(sys("sizing the window"))?;
        rustix::fs::fcntl_add_seals(
            &memfd,
            SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
        )
        .map_err(sys("sealing the window"))?;
        let map = Mapping::new(
            memfd.as_fd(),
            layout.size,
            page.map_align(),
            ProtFlags::READ | ProtFlags::WRITE,
        )
        .map_err(|e| {
            if page == PageSize::Huge && e == rustix::io::Errno::NOMEM {
                CreateError::NoHugePages {
                    needed: layout.size / page.bytes(),
                    free: huge_pages_free(),
                }
            } else {
                sys("mapping the window")(e)
            }
        })?;
        if page == PageSize::Thp {
            map.advise_huge().map_err(sys("madvise(MADV_HUGEPAGE)"))?;
        }
        let signals = (0..signal_count(spec.rings.len()))
            .map(|_| EventFd::new().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| CreateError::Sys {
                what: "eventfd",
                err,
            })?;
        let win = Self {
            map: Arc::new(map),
            layout,
            memfd,
            signals,
            taken: Mutex::new(0),
        };
        win.initialise();
        Ok(win)
    }

    /// Writes the header and fills every pool's free list. The memfd starts zeroed, which
    /// is already a valid state for every ring and counter.
    fn initialise(&self) {
        let hdr = self.region(RegionKind::Header, 0);
        // SAFETY: the header region is inside the mapping, 64-byte aligned and sized for a
        // `RawHeader`; nobody else has the fd yet, so nothing races with this write.
        unsafe {
            self.map
                .at::<RawHeader>(hdr)
                .as_ptr()
                .write(self.layout.raw_header())
        };
        let geo = self.layout.pool_geometry();
        let free: NonNull<AtomicU32> = self.map.at(self.region(RegionKind::FreeArrays, 0));
        let ctls: NonNull<PoolCtl> = self.map.at(self.region(RegionKind::PoolCtls, 0));
        let layout = self.layout.spec.pools.layout;
        for p in 0..geo.pools {
            for (i, b) in (0..geo.per_pool).zip(layout.order(geo.per_pool)) {
                // SAFETY: `p * free_cap + i < pools * free_cap`, the free-array region's
                // length in entries (`i < per_pool ≤ free_cap`).
                let slot = unsafe { &*free.as_ptr().add((p * geo.free_cap + i) as usize) };
                slot.store(p * geo.per_pool + b, Ordering::Relaxed);
            }
            // SAFETY: `p < pools` control blocks lie in the PoolCtls region.
            unsafe { (*ctls.as_ptr().add(p as usize)).init_full(geo.per_pool) };
        }
    }

    /// Opens a window another party created, from its memfd and the eventfds that came
    /// with it, checking everything first. The eventfds, in order: one per ring (its
    /// consumer's wake-up), one for the pools' waiters, one per ring (its producer's room
    /// wake-up) — `2 × rings + 1` in all, as [`Window::fds`] lists them.
    pub fn open(memfd: OwnedFd, signals: Vec<OwnedFd>) -> Result<Self, OpenError> {
        let seals = rustix::fs::fcntl_get_seals(&memfd).map_err(osys("reading the seals"))?;
        let need = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
        if !seals.contains(need) {
            return Err(OpenError::NotSealed(format!("{seals:?}")));
        }
        let size = rustix::fs::fstat(&memfd)
            .map_err(osys("fstat of the window"))?
            .st_size as u64;
        let mut raw = [0u8; std::mem::size_of::<RawHeader>()];
        if size < raw.len() as u64 {
            return Err(OpenError::BadHeader(format!(
                "a {size}-byte window has no room for a header"
            )));
        }
        let n = rustix::io::pread(&memfd, &mut raw, 0).map_err(osys("reading the header"))?;
        if n != raw.len() {
            return Err(OpenError::BadHeader("short header".into()));
        }
        // SAFETY: `RawHeader` is `repr(C)`, made only of integers and arrays of integers with
        // no padding, so every byte pattern of its size is a valid value.
        let header: RawHeader = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        let layout = Layout::from_raw_header(&header, size).map_err(OpenError::BadHeader)?;
        let expected = signal_count(layout.spec.rings.len());
        if signals.len() != expected {
            return Err(OpenError::BadSignals(format!(
                "{} eventfds came with a window of {} rings (expected {expected}): run the same shmnet version on both sides",
                signals.len(),
                layout.spec.rings.len(),
            )));
        }
        let signals = signals
            .into_iter()
            .map(|fd| EventFd::from_peer(fd).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(OpenError::BadSignals)?;
        let page = layout.spec.page;
        let map = Mapping::new(
            memfd.as_fd(),
            layout.size,
            page.map_align(),
            ProtFlags::READ | ProtFlags::WRITE,
        )
        .map_err(osys("mapping the window"))?;
        if page == PageSize::Thp {
            // Whichever party touches a part of the window first allocates its memory.
            map.advise_huge().map_err(osys("madvise(MADV_HUGEPAGE)"))?;
        }
        Ok(Self {
            map: Arc::new(map),
            layout,
            memfd,
            signals,
            taken: Mutex::new(0),
        })
    }

    /// The validated layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Window size in bytes.
    pub fn size(&self) -> usize {
        self.layout.size
    }

    /// The addresses the window occupies in this process, for diagnostics (finding its
    /// entry in `/proc/self/smaps`, say). Nothing shared with a peer holds an address.
    pub fn mapped_at(&self) -> std::ops::Range<usize> {
        let start = self.map.base().as_ptr() as usize;
        start..start + self.map.len()
    }

    /// The memfd and eventfds to pass to a peer (in the order [`Window::open`] expects).
    pub fn fds(&self) -> (BorrowedFd<'_>, Vec<BorrowedFd<'_>>) {
        (
            self.memfd.as_fd(),
            self.signals.iter().map(|s| s.fd()).collect(),
        )
    }

    fn region(&self, kind: RegionKind, index: u32) -> Region {
        self.layout
            .region(kind, index)
            .expect("every layout has the regions its spec implies")
    }

    fn take(&self, bit: u64, what: impl FnOnce() -> String) -> Result<(), HandleError> {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        if *taken & bit != 0 {
            return Err(HandleError::Taken(what()));
        }
        *taken |= bit;
        Ok(())
    }

    fn ring_mem(&self, ring: usize) -> Result<RingMem, HandleError> {
        let spec = self
            .layout
            .spec
            .rings
            .get(ring)
            .ok_or(HandleError::NoSuchRing(ring))?;
        let ctl = self
            .map
            .at::<RingShared>(self.region(RegionKind::RingCtl, ring as u32));
        let slots = self
            .map
            .at::<DescSlot>(self.region(RegionKind::RingSlots, ring as u32));
        // SAFETY: both regions lie in the mapping, which `map` keeps alive; their sizes were
        // computed for this capacity, which the layout checked is a power of two.
        Ok(unsafe { RingMem::new(ctl, slots, spec.capacity, self.map.clone()) })
    }

    /// The consumer's wake-up signal of ring `ring`, if the ring has wake-ups.
    fn ring_signal(&self, ring: usize) -> Option<Arc<dyn Signal>> {
        self.layout.spec.rings[ring]
            .wakeups
            .then(|| self.signals[ring].clone() as Arc<dyn Signal>)
    }

    /// The producer's room signal of ring `ring`, if the ring has wake-ups (a ring with
    /// wake-ups has them in both directions).
    fn room_signal(&self, ring: usize) -> Option<Arc<dyn Signal>> {
        let n = self.layout.spec.rings.len();
        self.layout.spec.rings[ring]
            .wakeups
            .then(|| self.signals[n + 1 + ring].clone() as Arc<dyn Signal>)
    }

    /// Descriptor limits for rings that carry this window's buffers: the index must name a
    /// buffer and the length fit in the whole pool set.
    pub fn buffer_limits(&self) -> DescLimits {
        let g = self.layout.pool_geometry();
        DescLimits {
            max_buf: g.total() - 1,
            max_len: g.total().saturating_mul(g.data_size),
        }
    }

    /// Takes the producing end of ring `ring`.
    pub fn producer(&self, ring: usize) -> Result<Producer, HandleError> {
        let mem = self.ring_mem(ring)?;
        self.take(1 << ring, || format!("the producer of ring {ring}"))?;
        Ok(Producer::new(
            mem,
            self.ring_signal(ring),
            self.room_signal(ring),
        ))
    }

    /// Takes the consuming end of ring `ring`, which carries this window's buffers.
    pub fn consumer(&self, ring: usize) -> Result<Consumer, HandleError> {
        self.consumer_with_limits(ring, self.buffer_limits())
    }

    /// Takes the consuming end of ring `ring` with explicit descriptor limits (e.g.
    /// [`DescLimits::OPAQUE`] for a ring that carries values, not buffer indices).
    pub fn consumer_with_limits(
        &self,
        ring: usize,
        limits: DescLimits,
    ) -> Result<Consumer, HandleError> {
        let mem = self.ring_mem(ring)?;
        self.take(1 << (32 + ring), || format!("the consumer of ring {ring}"))?;
        Ok(Consumer::new(
            mem,
            self.ring_signal(ring),
            self.room_signal(ring),
            limits,
        ))
    }

    fn pool_mem(&self) -> PoolMem {
        PoolMem {
            set: self.map.at(self.region(RegionKind::PoolSet, 0)),
            ctls: self.map.at(self.region(RegionKind::PoolCtls, 0)),
            free: self.map.at(self.region(RegionKind::FreeArrays, 0)),
            hdrs: self.map.at(self.region(RegionKind::BufHdrs, 0)),
            data: self.map.at(self.region(RegionKind::BufData, 0)),
            geo: self.layout.pool_geometry(),
            layout: self.layout.spec.pools.layout,
            keep: self.map.clone(),
        }
    }

    fn deferred_mem(&self) -> RingMem {
        let ctl = self.map.at(self.region(RegionKind::DeferredCtl, 0));
        let slots = self.map.at(self.region(RegionKind::DeferredSlots, 0));
        // SAFETY: as in `ring_mem`, for the deferred queue's regions and capacity.
        unsafe {
            RingMem::new(
                ctl,
                slots,
                self.layout.deferred_capacity(),
                self.map.clone(),
            )
        }
    }

    fn want_signal(&self) -> Arc<dyn Signal> {
        self.signals[self.layout.spec.rings.len()].clone()
    }

    /// Takes the server's (protocol side's) view of the pools.
    pub fn server_pools(&self) -> Result<ServerPools, HandleError> {
        self.take(TAKEN_SERVER_POOLS, || "the server's pools".into())?;
        let deferred = Consumer::new(self.deferred_mem(), None, None, self.buffer_limits());
        Ok(ServerPools::new(
            Buffers::new(self.pool_mem(), Side::Server),
            deferred,
            Some(self.want_signal()),
        ))
    }

    /// Takes the driver's view of the pools.
    pub fn driver_pools(&self) -> Result<DriverPools, HandleError> {
        self.take(TAKEN_DRIVER_POOLS, || "the driver's pools".into())?;
        let deferred = Producer::new(self.deferred_mem(), None, None);
        Ok(DriverPools::new(
            Buffers::new(self.pool_mem(), Side::Driver),
            deferred,
            Some(self.want_signal()),
        ))
    }

    /// Read-only access to buffers and pool counters, for any party (statistics, audits).
    pub fn buffers(&self) -> Buffers {
        Buffers::new(self.pool_mem(), Side::Server)
    }

    /// A snapshot of every counter in the window.
    pub fn stats(&self) -> WindowStats {
        let ring_stats = |ctl: Region, capacity| {
            // SAFETY: the control region lies in the live mapping; atomics only.
            let shared = unsafe { self.map.at::<RingShared>(ctl).as_ref() };
            RingStats::read(shared, capacity)
        };
        WindowStats {
            size: self.layout.size,
            rings: (0..self.layout.spec.rings.len())
                .map(|i| {
                    ring_stats(
                        self.region(RegionKind::RingCtl, i as u32),
                        self.layout.spec.rings[i].capacity,
                    )
                })
                .collect(),
            deferred: ring_stats(
                self.region(RegionKind::DeferredCtl, 0),
                self.layout.deferred_capacity(),
            ),
            pools: self.buffers().stats(),
        }
    }

    /// Fault injection: a view of the window's raw memory, as a hostile peer has it.
    #[doc(hidden)]
    pub fn hostile(&self) -> Hostile<'_> {
        Hostile { win: self }
    }
}

/// Every counter of a window at one moment.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WindowStats {
    /// Window size in bytes.
    pub size: usize,
    /// Per ring, in ring order.
    pub rings: Vec<RingStats>,
    /// The deferred-free queue.
    pub deferred: RingStats,
    /// The pools.
    pub pools: crate::pool::PoolSetStats,
}

/// Writes arbitrary values where a hostile peer could (tests only).
#[doc(hidden)]
pub struct Hostile<'a> {
    win: &'a Window,
}

#[doc(hidden)]
impl Hostile<'_> {
    /// The control block of ring `ring`, or of the deferred queue for `None`.
    pub fn ring(&self, ring: Option<usize>) -> &RingShared {
        let r = match ring {
            Some(i) => self.win.region(RegionKind::RingCtl, i as u32),
            None => self.win.region(RegionKind::DeferredCtl, 0),
        };
        // SAFETY: a region of the live mapping; atomics only.
        unsafe { self.win.map.at::<RingShared>(r).as_ref() }
    }

    /// Slot `slot` (taken modulo the capacity) of ring `ring`.
    pub fn slot(&self, ring: usize, slot: u32) -> &DescSlot {
        let cap = self.win.layout.spec.rings[ring].capacity;
        let base = self
            .win
            .map
            .at::<DescSlot>(self.win.region(RegionKind::RingSlots, ring as u32));
        // SAFETY: `slot & (cap - 1) < cap` slots lie in the region.
        unsafe { &*base.as_ptr().add((slot & (cap - 1)) as usize) }
    }

    /// Control block of pool `pool` (modulo the pool count).
    pub fn pool(&self, pool: u32) -> &PoolCtl {
        let n = self.win.layout.spec.pools.pools;
        let base = self
            .win
            .map
            .at::<PoolCtl>(self.win.region(RegionKind::PoolCtls, 0));
        // SAFETY: `pool % n < n` control blocks lie in the region.
        unsafe { &*base.as_ptr().add((pool % n) as usize) }
    }
}

/// Eventfds a window of `rings` rings comes with: a consumer wake-up per ring, the pools'
/// waiters, a producer room wake-up per ring.
fn signal_count(rings: usize) -> usize {
    2 * rings + 1
}

fn huge_pages_free() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn thp_shmem_mode() -> String {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .unwrap_or_default();
    s.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .unwrap_or("never")
        .to_string()
}
