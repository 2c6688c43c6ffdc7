//! Channel structures built on the heap instead of in a window: for in-process use, property
//! tests and loom models (loom's atomics cannot live in a foreign mapping).

use crate::BufferLayout;
use crate::desc::DescSlot;
use crate::pool::{
    BufHdr, Buffers, DriverPools, PoolCtl, PoolGeometry, PoolMem, PoolSetShared, ServerPools, Side,
};
use crate::ring::{DescLimits, RingMem, RingShared};
use crate::signal::Signal;
use crate::sync::{AtomicU32, Ordering};
use std::ptr::NonNull;
use std::sync::Arc;

struct HeapPools {
    set: Box<PoolSetShared>,
    ctls: Box<[PoolCtl]>,
    free: Box<[AtomicU32]>,
    hdrs: Box<[BufHdr]>,
    data: Box<[u64]>,
    ring: Box<RingShared>,
    slots: Box<[DescSlot]>,
}

/// Builds a pool set (and its deferred-free queue) on the heap and returns the server's and
/// the driver's handles. Every buffer starts free, in index order
/// ([`BufferLayout::Contiguous`]).
///
/// # Panics
/// If the geometry is invalid (see [`PoolGeometry`]'s field docs).
pub fn heap_pools(
    geo: PoolGeometry,
    want_signal: Option<Arc<dyn Signal>>,
) -> (ServerPools, DriverPools) {
    heap_pools_laid_out(geo, BufferLayout::Contiguous, want_signal)
}

/// As [`heap_pools`], each pool's free array starting in `layout`'s order.
///
/// # Panics
/// If the geometry is invalid (see [`PoolGeometry`]'s field docs).
pub fn heap_pools_laid_out(
    geo: PoolGeometry,
    layout: BufferLayout,
    want_signal: Option<Arc<dyn Signal>>,
) -> (ServerPools, DriverPools) {
    assert!(geo.pools > 0 && geo.per_pool > 0, "empty pool set");
    assert!(geo.free_cap.is_power_of_two() && geo.free_cap >= geo.per_pool);
    assert!(geo.data_size % 64 == 0 && geo.data_size > 0);
    let total = geo.total();
    let deferred_cap = total.next_power_of_two().max(2);
    let h = Arc::new(HeapPools {
        set: Box::default(),
        ctls: (0..geo.pools).map(|_| PoolCtl::default()).collect(),
        free: (0..geo.pools * geo.free_cap)
            .map(|_| AtomicU32::new(0))
            .collect(),
        hdrs: (0..total).map(|_| BufHdr::default()).collect(),
        data: vec![0u64; total as usize * geo.data_size as usize / 8].into_boxed_slice(),
        ring: Box::default(),
        slots: (0..deferred_cap).map(|_| DescSlot::default()).collect(),
    });
    for p in 0..geo.pools {
        for (i, b) in (0..geo.per_pool).zip(layout.order(geo.per_pool)) {
            h.free[(p * geo.free_cap + i) as usize].store(p * geo.per_pool + b, Ordering::Relaxed);
        }
        h.ctls[p as usize].init_full(geo.per_pool);
    }
    let mem = PoolMem {
        set: NonNull::from(&*h.set),
        ctls: NonNull::from(&h.ctls[0]),
        free: NonNull::from(&h.free[0]),
        hdrs: NonNull::from(&h.hdrs[0]),
        data: NonNull::from(&h.data[0]).cast(),
        geo,
        layout,
        keep: h.clone(),
    };
    // SAFETY: the ring's control block and `deferred_cap` slots live in `h`, boxed (never
    // moved) and kept alive by the handles; `deferred_cap` is a power of two.
    let ring = unsafe {
        RingMem::new(
            NonNull::from(&*h.ring),
            NonNull::from(&h.slots[0]),
            deferred_cap,
            h.clone(),
        )
    };
    let limits = DescLimits {
        max_buf: total - 1,
        max_len: u32::MAX,
    };
    (
        ServerPools::new(
            Buffers::new(mem.clone(), Side::Server),
            crate::ring::Consumer::new(ring.clone(), None, None, limits),
            want_signal.clone(),
        ),
        DriverPools::new(
            Buffers::new(mem, Side::Driver),
            crate::ring::Producer::new(ring, None, None),
            want_signal,
        ),
    )
}
