//! The window's layout: where every queue and pool lies, computed from a [`ChannelSpec`].
//!
//! The layout is a pure function of the spec. The creator writes the spec and the resulting
//! region table into the window header; a party that opens the window reads the header once
//! into private memory, recomputes the layout from the spec it states, and accepts the window
//! only if the table matches exactly and the window is as large as the layout says. From then
//! on every offset it uses comes from its own computation, never from shared memory.

use crate::buffer_layout::BufferLayout;
use crate::desc::DescSlot;
use crate::pool::{AllocPolicy, BufHdr, PoolCtl, PoolGeometry, PoolSetShared};
use crate::ring::RingShared;
use std::mem::size_of;

/// The window header's magic bytes.
pub const MAGIC: [u8; 8] = *b"SHMNETW\0";
/// The layout version this build reads and writes. Bumped on any change to the layout or
/// to the meaning of its shared words. 2: rings have room wake-ups (the head word's bit 33,
/// a second eventfd per ring). 3: a pool's counters share its lock's line; the set-wide
/// counters are one line per side. 4: the header states the pools' buffer layout.
pub const LAYOUT_VERSION: u32 = 4;
/// Most rings a window can hold (besides the deferred-free queue).
pub const MAX_RINGS: usize = 32;
/// Most regions a header can describe.
pub const MAX_REGIONS: usize = 2 * MAX_RINGS + 8;
/// Largest ring capacity.
pub const MAX_RING_CAPACITY: u32 = 1 << 20;
/// Largest number of pools.
pub const MAX_POOLS: u32 = 64;
/// Largest number of buffers in a window.
pub const MAX_BUFFERS: u32 = 1 << 22;
/// Largest buffer data size (lengths in buffer headers are 16-bit).
pub const MAX_DATA_SIZE: u32 = 32 * 1024;

const SMALL_PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;

/// How the window's memory is paged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PageSize {
    /// Ordinary 4 KiB pages.
    #[default]
    Small,
    /// 2 MiB huge pages from the reserved pool (`MFD_HUGETLB`; needs
    /// `/proc/sys/vm/nr_hugepages` > 0).
    Huge,
    /// 4 KiB pages the kernel may back with transparent huge pages (`madvise`; needs
    /// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` to allow it).
    Thp,
}

impl PageSize {
    /// The granule the window's size is a multiple of.
    pub fn bytes(self) -> usize {
        match self {
            Self::Small | Self::Thp => SMALL_PAGE,
            Self::Huge => HUGE_PAGE,
        }
    }

    /// The alignment of the window's mapping address, and the size of its guard regions:
    /// 2 MiB for huge and transparent huge pages (the kernel maps a 2 MiB page with one
    /// page-table entry, and so gives transparent huge pages at all, only where the address
    /// and the file offset agree modulo 2 MiB), 4 KiB otherwise.
    pub fn map_align(self) -> usize {
        match self {
            Self::Small => SMALL_PAGE,
            Self::Huge | Self::Thp => HUGE_PAGE,
        }
    }

    fn code(self) -> u32 {
        match self {
            Self::Small => 0,
            Self::Huge => 1,
            Self::Thp => 2,
        }
    }

    fn from_code(code: u32) -> Option<Self> {
        [Self::Small, Self::Huge, Self::Thp]
            .into_iter()
            .find(|p| p.code() == code)
    }
}

impl std::str::FromStr for PageSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "4k" | "small" => Ok(Self::Small),
            "2m" | "huge" => Ok(Self::Huge),
            "thp" => Ok(Self::Thp),
            _ => Err(format!("unknown page size {s:?}: use 4k, 2m or thp")),
        }
    }
}

/// One queue of the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RingSpec {
    /// Slots (a power of two).
    pub capacity: u32,
    /// Whether the ends may sleep (`true`) or busy-poll (`false`): with wake-ups the
    /// consumer sleeps on an eventfd the producer raises when descriptors arrive, and the
    /// producer of a full ring sleeps on another the consumer raises when it frees room. Both
    /// sides must agree, so it is part of the layout.
    pub wakeups: bool,
}

/// The window's pool set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolSpec {
    /// Number of pools, each with its own lock.
    pub pools: u32,
    /// Buffers in each pool.
    pub buffers_per_pool: u32,
    /// Data bytes per buffer (a multiple of 64).
    pub data_size: u32,
    /// Which free buffer an allocation returns.
    pub policy: AllocPolicy,
    /// The order each pool's free array starts in: which buffers the first allocations
    /// return.
    ///
    /// It is stated in the window's header and an opener takes it from there (checked: an
    /// unknown code refuses the window), for two reasons. The opener rebuilds the spec from
    /// the header and accepts the window only if that spec's own header matches it word for
    /// word, so a spec that left the layout out would describe a different window than the
    /// one its creator made; and whichever party rebuilds the free arrays
    /// ([`crate::ServerPools::reclaim_all`]) must refill them in the creator's order, or a
    /// reclaim would silently turn a scattered window contiguous. Nothing else rests on it:
    /// every order is a permutation of the pool's own buffers, and every index popped from a
    /// free array is checked anyway.
    pub layout: BufferLayout,
}

impl Default for PoolSpec {
    fn default() -> Self {
        Self {
            pools: 4,
            buffers_per_pool: 1024,
            data_size: 2048,
            policy: AllocPolicy::Lifo,
            layout: BufferLayout::Contiguous,
        }
    }
}

/// Everything that determines a window's layout.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChannelSpec {
    /// The queues, numbered from 0 in this order.
    pub rings: Vec<RingSpec>,
    /// The buffers.
    pub pools: PoolSpec,
    /// How the memory is paged.
    pub page: PageSize,
}

/// What a region holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegionKind {
    /// The header (magic, version, spec, this table).
    Header,
    /// The pool set's shared words.
    PoolSet,
    /// The pools' control blocks.
    PoolCtls,
    /// The deferred-free queue's control block.
    DeferredCtl,
    /// The deferred-free queue's slots.
    DeferredSlots,
    /// A ring's control block (`index` = ring number).
    RingCtl,
    /// A ring's slots (`index` = ring number).
    RingSlots,
    /// The pools' free arrays.
    FreeArrays,
    /// The buffer headers.
    BufHdrs,
    /// The buffer data.
    BufData,
}

impl RegionKind {
    const ALL: [Self; 10] = [
        Self::Header,
        Self::PoolSet,
        Self::PoolCtls,
        Self::DeferredCtl,
        Self::DeferredSlots,
        Self::RingCtl,
        Self::RingSlots,
        Self::FreeArrays,
        Self::BufHdrs,
        Self::BufData,
    ];
    fn code(self) -> u32 {
        Self::ALL.iter().position(|k| *k == self).unwrap_or(0) as u32
    }
}

/// A byte range of the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Region {
    /// What it holds.
    pub kind: RegionKind,
    /// Ring number for ring regions, else 0.
    pub index: u32,
    /// Offset from the window's start (64-byte aligned).
    pub offset: usize,
    /// Bytes.
    pub size: usize,
}

/// Why a spec cannot be laid out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// Too many rings.
    #[error("{0} rings requested; a window holds at most {MAX_RINGS}")]
    TooManyRings(usize),
    /// A ring capacity is not a power of two in range.
    #[error("ring {ring} capacity {capacity} must be a power of two from 2 to {MAX_RING_CAPACITY}")]
    BadRingCapacity {
        /// Which ring.
        ring: usize,
        /// What was asked.
        capacity: u32,
    },
    /// The pool set's shape is out of range.
    #[error("bad pool spec: {0}")]
    BadPools(String),
}

/// The validated, private layout of a window.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    /// The spec it was computed from.
    pub spec: ChannelSpec,
    /// Every region, in window order.
    pub regions: Vec<Region>,
    /// Window size in bytes (a multiple of the page size).
    pub size: usize,
}

fn align(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

impl Layout {
    /// Lays out `spec`, or says what is wrong with it.
    pub fn compute(spec: &ChannelSpec) -> Result<Self, LayoutError> {
        if spec.rings.len() > MAX_RINGS {
            return Err(LayoutError::TooManyRings(spec.rings.len()));
        }
        for (ring, r) in spec.rings.iter().enumerate() {
            if !r.capacity.is_power_of_two() || !(2..=MAX_RING_CAPACITY).contains(&r.capacity) {
                return Err(LayoutError::BadRingCapacity {
                    ring,
                    capacity: r.capacity,
                });
            }
        }
        let p = &spec.pools;
        let bad = |m: String| Err(LayoutError::BadPools(m));
        if !(1..=MAX_POOLS).contains(&p.pools) {
            return bad(format!("{} pools; use 1 to {MAX_POOLS}", p.pools));
        }
        if p.buffers_per_pool == 0 {
            return bad("0 buffers per pool".into());
        }
        let total = match p.pools.checked_mul(p.buffers_per_pool) {
            Some(t) if t <= MAX_BUFFERS => t,
            _ => return bad(format!("more than {MAX_BUFFERS} buffers in all")),
        };
        if p.data_size == 0 || p.data_size % 64 != 0 || p.data_size > MAX_DATA_SIZE {
            return bad(format!(
                "data size {} must be a multiple of 64 from 64 to {MAX_DATA_SIZE}",
                p.data_size
            ));
        }
        let geo = pool_geometry(p);
        let mut regions = Vec::new();
        let mut at = 0usize;
        let mut put = |kind, index, size: usize, align_to: usize| {
            at = align(at, align_to);
            regions.push(Region {
                kind,
                index,
                offset: at,
                size,
            });
            at += size;
        };
        put(RegionKind::Header, 0, size_of::<RawHeader>(), 64);
        put(RegionKind::PoolSet, 0, size_of::<PoolSetShared>(), 64);
        put(
            RegionKind::PoolCtls,
            0,
            size_of::<PoolCtl>() * p.pools as usize,
            64,
        );
        let deferred_cap = deferred_capacity(total);
        put(RegionKind::DeferredCtl, 0, size_of::<RingShared>(), 64);
        put(
            RegionKind::DeferredSlots,
            0,
            size_of::<DescSlot>() * deferred_cap as usize,
            64,
        );
        for (i, r) in spec.rings.iter().enumerate() {
            put(RegionKind::RingCtl, i as u32, size_of::<RingShared>(), 64);
            put(
                RegionKind::RingSlots,
                i as u32,
                size_of::<DescSlot>() * r.capacity as usize,
                64,
            );
        }
        put(
            RegionKind::FreeArrays,
            0,
            4 * (geo.free_cap as usize) * p.pools as usize,
            64,
        );
        put(
            RegionKind::BufHdrs,
            0,
            size_of::<BufHdr>() * total as usize,
            64,
        );
        put(
            RegionKind::BufData,
            0,
            p.data_size as usize * total as usize,
            SMALL_PAGE,
        );
        let size = align(at, spec.page.bytes());
        Ok(Self {
            spec: spec.clone(),
            regions,
            size,
        })
    }

    /// The region of `kind` with `index`.
    pub fn region(&self, kind: RegionKind, index: u32) -> Option<Region> {
        self.regions
            .iter()
            .copied()
            .find(|r| r.kind == kind && r.index == index)
    }

    /// The pool set's geometry.
    pub fn pool_geometry(&self) -> PoolGeometry {
        pool_geometry(&self.spec.pools)
    }

    /// Slots in the deferred-free queue: room for every buffer.
    pub fn deferred_capacity(&self) -> u32 {
        deferred_capacity(self.pool_geometry().total())
    }

    /// The header the creator writes.
    pub(crate) fn raw_header(&self) -> RawHeader {
        let s = &self.spec;
        let mut h = RawHeader {
            magic: MAGIC,
            version: LAYOUT_VERSION,
            header_size: size_of::<RawHeader>() as u32,
            window_size: self.size as u64,
            page: s.page.code(),
            nrings: s.rings.len() as u32,
            pools: s.pools.pools,
            per_pool: s.pools.buffers_per_pool,
            data_size: s.pools.data_size,
            policy: s.pools.policy.code(),
            layout: s.pools.layout.code(),
            ring_caps: [0; MAX_RINGS],
            ring_wake: 0,
            reserved: 0,
            nregions: self.regions.len() as u32,
            regions: [RawRegion::default(); MAX_REGIONS],
        };
        for (i, r) in s.rings.iter().enumerate() {
            h.ring_caps[i] = r.capacity;
            if r.wakeups {
                h.ring_wake |= 1 << i;
            }
        }
        for (i, r) in self.regions.iter().enumerate() {
            h.regions[i] = RawRegion {
                kind: r.kind.code(),
                index: r.index,
                offset: r.offset as u64,
                size: r.size as u64,
            };
        }
        h
    }

    /// Checks a header read from a window of `file_size` bytes and returns the layout it
    /// describes, or what is wrong with it.
    pub(crate) fn from_raw_header(h: &RawHeader, file_size: u64) -> Result<Self, String> {
        if h.magic != MAGIC {
            return Err("not a shmnet window (bad magic)".into());
        }
        if h.version != LAYOUT_VERSION {
            return Err(format!(
                "window layout version {} but this build speaks {LAYOUT_VERSION}: run the same shmnet version on both sides",
                h.version
            ));
        }
        if h.header_size as usize != size_of::<RawHeader>() {
            return Err(format!("header size {} is wrong", h.header_size));
        }
        let page = PageSize::from_code(h.page).ok_or(format!("unknown page code {}", h.page))?;
        let policy =
            AllocPolicy::from_code(h.policy).ok_or(format!("unknown policy code {}", h.policy))?;
        let buffer_layout = BufferLayout::from_code(h.layout)
            .ok_or(format!("unknown buffer layout code {}", h.layout))?;
        if h.nrings as usize > MAX_RINGS {
            return Err(format!("{} rings is more than {MAX_RINGS}", h.nrings));
        }
        let spec = ChannelSpec {
            rings: (0..h.nrings as usize)
                .map(|i| RingSpec {
                    capacity: h.ring_caps[i],
                    wakeups: h.ring_wake & (1 << i) != 0,
                })
                .collect(),
            pools: PoolSpec {
                pools: h.pools,
                buffers_per_pool: h.per_pool,
                data_size: h.data_size,
                policy,
                layout: buffer_layout,
            },
            page,
        };
        let layout = Self::compute(&spec).map_err(|e| e.to_string())?;
        if layout.raw_header() != *h {
            return Err("the header's region table does not match its spec".into());
        }
        if file_size != layout.size as u64 {
            return Err(format!(
                "the window is {file_size} bytes but its layout needs {}",
                layout.size
            ));
        }
        Ok(layout)
    }
}

fn pool_geometry(p: &PoolSpec) -> PoolGeometry {
    PoolGeometry {
        pools: p.pools,
        per_pool: p.buffers_per_pool,
        data_size: p.data_size,
        free_cap: p.buffers_per_pool.next_power_of_two(),
        policy: p.policy,
    }
}

fn deferred_capacity(total: u32) -> u32 {
    total.next_power_of_two().max(2)
}

// Every byte of the header is a field: no padding for a copy to leave undefined.
const _: () = assert!(size_of::<RawHeader>() == 192 + MAX_REGIONS * size_of::<RawRegion>());

/// A region table entry as it lies in the header.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawRegion {
    kind: u32,
    index: u32,
    offset: u64,
    size: u64,
}

/// The window header as it lies in shared memory. Plain integers: it is written once by the
/// creator before the window is shared, and read once (copied) by each party that opens it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawHeader {
    pub(crate) magic: [u8; 8],
    pub(crate) version: u32,
    pub(crate) header_size: u32,
    pub(crate) window_size: u64,
    pub(crate) page: u32,
    pub(crate) nrings: u32,
    pub(crate) pools: u32,
    pub(crate) per_pool: u32,
    pub(crate) data_size: u32,
    pub(crate) policy: u32,
    pub(crate) layout: u32,
    pub(crate) ring_caps: [u32; MAX_RINGS],
    pub(crate) ring_wake: u32,
    /// Zero; keeps `regions` 8-byte aligned with no padding (every byte of the header is a
    /// field, so the creator's copy and the opener's compare whole).
    pub(crate) reserved: u32,
    pub(crate) nregions: u32,
    pub(crate) regions: [RawRegion; MAX_REGIONS],
}
