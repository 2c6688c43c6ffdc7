//! Creating, passing and opening windows; what a receiver refuses.

#![cfg(not(loom))]

use rustix::fd::OwnedFd;
use shmnet_chan::handoff::{HandoffError, recv_window, send_window};
use shmnet_chan::layout::{Layout, LayoutError, RegionKind};
use shmnet_chan::window::{CreateError, HandleError, OpenError};
use shmnet_chan::{
    AllocPolicy, BufferLayout, ChannelSpec, Desc, DescLimits, PageSize, PoolSpec, RingSpec, Window,
};
use std::os::unix::net::UnixStream;

fn spec() -> ChannelSpec {
    ChannelSpec {
        rings: vec![
            RingSpec {
                capacity: 64,
                wakeups: true,
            },
            RingSpec {
                capacity: 16,
                wakeups: false,
            },
        ],
        pools: PoolSpec::default(),
        page: PageSize::Small,
    }
}

fn dup_fds(win: &Window) -> (OwnedFd, Vec<OwnedFd>) {
    let (m, s) = win.fds();
    (
        m.try_clone_to_owned().unwrap(),
        s.iter().map(|f| f.try_clone_to_owned().unwrap()).collect(),
    )
}

#[test]
fn layout_regions_are_aligned_disjoint_and_inside_the_window() {
    let l = Layout::compute(&spec()).unwrap();
    assert_eq!(l.size % 4096, 0);
    let mut end = 0;
    for r in &l.regions {
        assert_eq!(r.offset % 64, 0, "{r:?}");
        assert!(r.offset >= end, "{r:?} overlaps its predecessor");
        end = r.offset + r.size;
    }
    assert!(end <= l.size);
    let data = l.region(RegionKind::BufData, 0).unwrap();
    assert_eq!(data.offset % 4096, 0, "buffers must not straddle pages");
    assert_eq!(data.size, 4 * 1024 * 2048);
}

#[test]
fn bad_specs_are_refused_with_reasons() {
    let mut s = spec();
    s.rings[0].capacity = 100;
    assert!(matches!(
        Layout::compute(&s),
        Err(LayoutError::BadRingCapacity { ring: 0, .. })
    ));
    let mut s = spec();
    s.pools.data_size = 1000;
    let e = Layout::compute(&s).unwrap_err();
    assert!(e.to_string().contains("multiple of 64"), "{e}");
    let mut s = spec();
    s.rings = vec![s.rings[0]; 33];
    assert!(matches!(
        Layout::compute(&s),
        Err(LayoutError::TooManyRings(33))
    ));
}

#[test]
fn a_window_opened_from_passed_fds_shares_queues_and_buffers() {
    let win = Window::create(&spec()).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    send_window(&a, &win).unwrap();
    let peer = recv_window(&b).unwrap();
    assert_eq!(peer.layout(), win.layout());

    let mut driver = peer.driver_pools().unwrap();
    let mut server = win.server_pools().unwrap();
    let buf = driver.alloc().unwrap();
    driver.buffers().write(buf, 0, b"hello, server").unwrap();
    let mut tx = peer.producer(0).unwrap();
    let mut rx = win.consumer(0).unwrap();
    tx.enqueue(Desc::new(buf, 13)).unwrap();
    let d = rx.dequeue().unwrap();
    let mut got = [0u8; 13];
    server.buffers().read(d.buf, 0, &mut got).unwrap();
    assert_eq!(&got, b"hello, server");
    server.release(d.buf);
    let total = win.layout().pool_geometry().total();
    assert_eq!(win.buffers().free_count(), total);
    assert_eq!(win.stats().rings[0].enqueued, 1);
}

#[test]
fn a_full_ring_wakes_its_producer_across_a_handoff() {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let win = Window::create(&spec()).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    send_window(&a, &win).unwrap();
    let peer = recv_window(&b).unwrap();
    let mut tx = peer.producer(0).unwrap();
    let mut rx = win.consumer_with_limits(0, DescLimits::OPAQUE).unwrap();
    while tx.enqueue(Desc::new(1, 0)).is_ok() {}
    assert!(
        tx.prepare_wait_room(),
        "a full ring with wake-ups lets its producer sleep"
    );
    assert!(rx.dequeue().is_some());
    let fd = tx.room_fd().expect("the room eventfd came with the window");
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let ts = Timespec {
        tv_sec: 30,
        tv_nsec: 0,
    };
    assert_eq!(rustix::event::poll(&mut fds, Some(&ts)).unwrap(), 1);
    tx.finish_wait_room();
    let st = win.stats().rings[0].clone();
    assert_eq!((st.room_sleeps, st.room_wakeups_sent), (1, 1), "{st:?}");
    // A ring without wake-ups stays busy-polled in both directions.
    let mut tx1 = peer.producer(1).unwrap();
    while tx1.enqueue(Desc::new(1, 0)).is_ok() {}
    assert!(!tx1.can_wait_room() && !tx1.prepare_wait_room());
}

#[test]
fn a_producer_flooding_the_room_bit_costs_one_wakeup_per_freed_burst() {
    let win = Window::create(&spec()).unwrap();
    let mut tx = win.producer(0).unwrap();
    let mut rx = win.consumer_with_limits(0, DescLimits::OPAQUE).unwrap();
    for i in 0..8 {
        tx.enqueue(Desc::new(i, 0)).unwrap();
    }
    let hostile = win.hostile();
    for tail in 0..8 {
        // The producer claims it waits for room before every look the consumer takes.
        for _ in 0..5 {
            hostile.ring(Some(0)).scribble(8, tail, 2);
            rx.available();
        }
        assert!(rx.dequeue().is_some());
    }
    let st = win.stats().rings[0].clone();
    assert!(
        st.room_wakeups_sent <= 8,
        "at most one per freed slot: {st:?}"
    );
    assert!(st.room_wakeups_suppressed >= 8 * 3, "{st:?}");
}

#[test]
fn each_end_can_be_taken_once_per_window_object() {
    let win = Window::create(&spec()).unwrap();
    let _p = win.producer(0).unwrap();
    assert!(matches!(win.producer(0), Err(HandleError::Taken(_))));
    assert!(matches!(win.consumer(5), Err(HandleError::NoSuchRing(5))));
    let _s = win.server_pools().unwrap();
    assert!(win.server_pools().is_err());
}

#[test]
fn an_unsealed_memfd_is_refused() {
    let fd = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 1 << 20).unwrap();
    let err = Window::open(fd, vec![]).unwrap_err();
    assert!(matches!(err, OpenError::NotSealed(_)), "{err}");
}

#[test]
fn a_window_with_a_corrupt_header_is_refused() {
    let win = Window::create(&spec()).unwrap();
    let (memfd, sigs) = dup_fds(&win);
    // Claim a different ring capacity than the region table was computed for.
    let off = std::mem::offset_of!(HeaderPrefix, ring0);
    rustix::io::pwrite(&memfd, &4096u32.to_ne_bytes(), off as u64).unwrap();
    let err = Window::open(memfd, sigs).unwrap_err();
    assert!(matches!(err, OpenError::BadHeader(_)), "{err}");

    let win = Window::create(&spec()).unwrap();
    let (memfd, sigs) = dup_fds(&win);
    rustix::io::pwrite(&memfd, b"NOTSHMNT", 0).unwrap();
    let err = Window::open(memfd, sigs).unwrap_err();
    assert!(err.to_string().contains("magic"), "{err}");
}

/// The start of the header, to find the first ring's capacity field.
#[repr(C)]
struct HeaderPrefix {
    magic: [u8; 8],
    version: u32,
    header_size: u32,
    window_size: u64,
    page: u32,
    nrings: u32,
    pools: u32,
    per_pool: u32,
    data_size: u32,
    policy: u32,
    layout: u32,
    ring0: u32,
}

#[test]
fn wrong_or_missing_eventfds_are_refused() {
    let win = Window::create(&spec()).unwrap();
    let (memfd, mut sigs) = dup_fds(&win);
    sigs.pop();
    assert!(matches!(
        Window::open(memfd, sigs),
        Err(OpenError::BadSignals(_))
    ));
    let (memfd, mut sigs) = dup_fds(&win);
    let (r, _w) = rustix::pipe::pipe().unwrap();
    sigs[0] = r;
    let err = Window::open(memfd, sigs).unwrap_err();
    assert!(err.to_string().contains("eventfd"), "{err}");
}

#[test]
fn a_wrong_greeting_is_refused_and_a_closed_socket_reported() {
    let (a, b) = UnixStream::pair().unwrap();
    use std::io::Write;
    (&a).write_all(b"GET / HTTP/1.1\r\n").unwrap();
    assert!(matches!(recv_window(&b), Err(HandoffError::BadGreeting)));
    drop(a);
    assert!(matches!(recv_window(&b), Err(HandoffError::Closed)));
}

#[test]
fn huge_pages_without_a_reservation_say_how_to_reserve_them() {
    let free: usize = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut s = spec();
    s.page = PageSize::Huge;
    match Window::create(&s) {
        Err(e @ CreateError::NoHugePages { .. }) => {
            assert!(e.to_string().contains("/proc/sys/vm/nr_hugepages"), "{e}");
        }
        Ok(win) => {
            assert!(
                free >= win.size() / (2 << 20),
                "created without enough free pages"
            );
            assert_eq!(win.size() % (2 << 20), 0);
        }
        Err(e) => panic!("unexpected error with {free} free huge pages: {e}"),
    }
}

/// The selected word of a sysfs setting such as `always within_size [advise] never deny`.
fn selected(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    s.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .map(str::to_string)
}

/// Kilobytes of the `field` of the `/proc/self/smaps` entry that contains `addr`.
fn smaps_kb(addr: usize, field: &str) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = (a..b).contains(&addr);
                continue;
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix(field) {
                return v.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    None
}

/// The kernel's count of shared-memory huge pages it tried to allocate and could not
/// (`thp_file_fallback` and `thp_file_fallback_charge` in /proc/vmstat; 0 if absent).
fn shmem_thp_fallbacks() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(k, _)| *k == "thp_file_fallback" || *k == "thp_file_fallback_charge")
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

#[test]
fn thp_windows_are_backed_by_transparent_huge_pages() {
    const TEST: &str = "thp_windows_are_backed_by_transparent_huge_pages";
    const SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
    const SHMEM_2M: &str = "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/shmem_enabled";
    let mut s = spec();
    s.page = PageSize::Thp;
    let fallbacks_before = shmem_thp_fallbacks();
    let win = match Window::create(&s) {
        Ok(win) => win,
        Err(e @ CreateError::ThpDisabled(_)) => {
            let mode = selected(SHMEM_ENABLED).unwrap_or_default();
            assert!(
                mode == "never" || mode == "deny" || mode.is_empty(),
                "{mode}: {e}"
            );
            assert!(e.to_string().contains("shmem_enabled"), "{e}");
            shmnet_testkit::skip(
                TEST,
                &format!("{e} (scripts/test does this when run as root)"),
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };
    // The 2 MiB size may be turned off on its own (multi-size THP); then no window gets it.
    if selected(SHMEM_2M).as_deref() == Some("never") {
        shmnet_testkit::skip(TEST, &format!("{SHMEM_2M} is `never`"));
        return;
    }
    let at = win.mapped_at();
    assert_eq!(at.start % (2 << 20), 0, "a THP window is 2 MiB-aligned");
    assert!(win.size() >= 2 << 20, "the test's window spans a huge page");
    // Creating the window wrote its header at offset 0: that first 2 MiB is in memory,
    // madvised, and aligned, so the kernel gave it a huge page and maps it with one entry.
    let pmd = smaps_kb(at.start, "ShmemPmdMapped:")
        .or_else(|| smaps_kb(at.start, "FilePmdMapped:"))
        .expect("the window's smaps entry has a PmdMapped field");
    // The kernel may have tried and found no free 2 MiB page (fragmented memory): its
    // fallback counter then rose, which shows the window asked the right way. Anything else
    // with no huge page is the window's fault.
    let fell_back = shmem_thp_fallbacks() > fallbacks_before;
    assert!(
        pmd >= 2048 || fell_back,
        "the THP window is mapped with 4 KiB pages only and the kernel never tried a huge page \
         (PmdMapped {pmd} kB; shmem_enabled {:?})",
        selected(SHMEM_ENABLED)
    );
    if pmd < 2048 {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "note: {TEST}: the kernel found no free 2 MiB page and fell back to 4 KiB pages \
             (thp_file_fallback rose); the window asked for one the right way"
        );
    }
    // A peer opening it maps it where the same huge pages can be mapped the same way.
    let (m, sigs) = dup_fds(&win);
    let peer = Window::open(m, sigs).expect("open");
    assert_eq!(
        peer.mapped_at().start % (2 << 20),
        0,
        "the peer's mapping is 2 MiB-aligned"
    );
}

#[test]
fn the_default_window_is_documented_size() {
    let l = Layout::compute(&ChannelSpec::default()).unwrap();
    let hdr = l.region(RegionKind::Header, 0).unwrap();
    eprintln!("default window {} bytes, header {} bytes", l.size, hdr.size);
    // docs/channel.md quotes these.
    assert_eq!(hdr.size, 1920);
    assert!(l.size < 9 << 20 && l.size > 8 << 20, "{}", l.size);
}

/// A burst allocation crosses pools when one runs dry, hands out each buffer once, counts a
/// drop only when it gets nothing, and everything it gave comes back on release.
#[test]
fn a_driver_burst_allocation_takes_every_buffer_once_across_pools() {
    let mut s = spec();
    s.pools = PoolSpec {
        pools: 2,
        buffers_per_pool: 8,
        ..PoolSpec::default()
    };
    let win = Window::create(&s).unwrap();
    let total = win.layout().pool_geometry().total() as usize;
    assert_eq!(total, 16);
    let mut driver = win.driver_pools().unwrap();
    let mut got = Vec::new();
    let mut burst = [0u32; 5];
    loop {
        let n = driver.alloc_burst(&mut burst);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&burst[..n]);
    }
    let mut unique = got.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), total, "{got:?}");
    assert_eq!(win.buffers().free_count(), 0);
    assert_eq!(driver.alloc_burst(&mut []), 0);
    for b in got {
        assert_eq!(win.buffers().refcnt(b), Some(1));
        driver.release(b);
    }
    let mut server = win.server_pools().unwrap();
    server.drain_deferred(usize::MAX);
    assert_eq!(win.buffers().free_count(), total as u32);
}

/// The 4 KiB pages of the buffers a fresh window's driver hands out first, `n` of them, and
/// the window.
fn first_pages(layout: BufferLayout, policy: AllocPolicy, n: usize) -> (Vec<usize>, Window) {
    let mut s = spec();
    s.pools = PoolSpec {
        pools: 1,
        policy,
        layout,
        ..PoolSpec::default()
    };
    let win = Window::create(&s).unwrap();
    let mut driver = win.driver_pools().unwrap();
    let pages = (0..n)
        .map(|_| {
            let b = driver.alloc().expect("a buffer");
            driver.buffers().data_ptr(b).unwrap().as_ptr() as usize / 4096
        })
        .collect();
    (pages, win)
}

fn distinct(v: &[usize]) -> usize {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.dedup();
    v.len()
}

/// Rule 3's layout: contiguous (the default) hands out neighbours, two 2 KiB buffers to a
/// page; scattered hands out the first N buffers on N distinct pages, from either end of the
/// free array (LIFO and FIFO), spread over the whole pool's data.
#[test]
fn a_scattered_window_hands_out_its_first_buffers_on_distinct_pages() {
    let n = 64;
    for policy in [AllocPolicy::Lifo, AllocPolicy::Fifo] {
        let (pages, _) = first_pages(BufferLayout::Contiguous, policy, n);
        assert_eq!(distinct(&pages), n / 2, "{policy:?} contiguous: {pages:?}");
        let (pages, win) = first_pages(BufferLayout::Scattered, policy, n);
        assert_eq!(distinct(&pages), n, "{policy:?} scattered: {pages:?}");
        let data = win.layout().region(RegionKind::BufData, 0).unwrap();
        let span = pages.iter().max().unwrap() - pages.iter().min().unwrap();
        assert!(
            span * 4096 > data.size * 9 / 10,
            "{policy:?}: {n} buffers span {span} of {} pages",
            data.size / 4096
        );
    }
    assert_eq!(PoolSpec::default().layout, BufferLayout::Contiguous);
}

/// The layout travels in the header: an opener sees it, a reclaim refills in its order, and
/// a code no layout has is refused.
#[test]
fn the_layout_is_stated_in_the_header_and_kept_by_a_reclaim() {
    let mut s = spec();
    s.pools.layout = BufferLayout::Scattered;
    let win = Window::create(&s).unwrap();
    let (memfd, sigs) = dup_fds(&win);
    let peer = Window::open(memfd, sigs).unwrap();
    assert_eq!(peer.layout().spec.pools.layout, BufferLayout::Scattered);
    let first = |w: &Window| {
        let mut server = w.server_pools().unwrap();
        let got: Vec<u32> = (0..8).map(|_| server.alloc().unwrap()).collect();
        (got, server)
    };
    let (before, mut server) = first(&peer);
    for &b in &before {
        server.release(b);
    }
    // Shuffle the free list's top, then rebuild it: the same first buffers come back.
    let churn: Vec<u32> = (0..100).map(|_| server.alloc().unwrap()).collect();
    for &b in churn.iter().rev() {
        server.release(b);
    }
    assert_eq!(server.reclaim_all(|_| false), 4 * 1024);
    let again: Vec<u32> = (0..8).map(|_| server.alloc().unwrap()).collect();
    assert_eq!(again, before);

    let (memfd, sigs) = dup_fds(&win);
    let off = std::mem::offset_of!(HeaderPrefix, layout);
    rustix::io::pwrite(&memfd, &7u32.to_ne_bytes(), off as u64).unwrap();
    let err = Window::open(memfd, sigs).unwrap_err();
    assert!(err.to_string().contains("buffer layout"), "{err}");
}
