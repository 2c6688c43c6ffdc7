//! The registration table: every region every application registered, mapped into the
//! server, and which of its lines are pinned — seed 004's host-side VMH table.
//!
//! The control plane registers and unregisters regions; the miss thread serves the lookup
//! cache's misses from the table ([`RegionTable::serve_miss`]) and keeps the pinned memory
//! under a high-water mark ([`RegionTable::evict_to`]). The data plane never touches the
//! table, so whoever owns it may guard it with a lock.
//!
//! - **Registration** takes a memfd from the application. It must be sealed against
//!   shrinking (`F_SEAL_SHRINK`): otherwise the application could truncate it under the
//!   server and turn the server's next access into a `SIGBUS`. Its size must be a whole
//!   number of pages. It is mapped once, whole, between guard pages, readable if the
//!   application allowed reads and writable if it allowed writes — nothing else.
//! - **Pinning** (`mlock`) is per line, when a miss is served, as the seed pins "all the
//!   pages in the missed address range". Here a pin keeps the server's data path from
//!   faulting (a page-in or, in a sparse memfd, an allocation); it is not needed for safety,
//!   since the mapping lives as long as the registration. So an unpinned line that is still
//!   in the lookup cache is harmless, and eviction need not ask the data plane: the table
//!   unpins the lines it served longest ago. If the kernel refuses a pin (no
//!   `CAP_IPC_LOCK` and `RLIMIT_MEMLOCK` reached) the line is served anyway and the failure
//!   counted.
//! - **Unregistering** (or the application's death) unmaps the region. The server must first
//!   have dropped the application's lines from the lookup cache: the cache holds addresses
//!   into the mapping.

use super::cache::{LineKey, Translation};
use super::handle::{
    MAX_REGION_BYTES, PAGE_BITS_IN_REGION, PAGE_SHIFT, PAGE_SIZE, Pch, Perms, RegionId,
};
use crate::mapping::Mapping;
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::SealFlags;
use rustix::mm::ProtFlags;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What one application may register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableLimits {
    /// Regions per application.
    pub max_regions_per_app: u32,
    /// Bytes of registered memory per application. Pinning a line of a sparse memfd
    /// allocates its pages, charged to the server: this bounds what one application can
    /// make the server hold (times the connection cap for all of them).
    pub max_bytes_per_app: u64,
}

impl Default for TableLimits {
    fn default() -> Self {
        Self {
            max_regions_per_app: 1024,
            max_bytes_per_app: 1 << 30,
        }
    }
}

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The application has as many regions as it may.
    #[error("too many regions: at most {0} per application")]
    TooManyRegions(u32),
    /// The region would take the application past its byte limit.
    #[error("too much registered memory: at most {0} bytes per application")]
    TooMuchMemory(u64),
    /// The memfd may still shrink.
    #[error("the region's memfd is not sealed against shrinking (add F_SEAL_SHRINK)")]
    NotSealed,
    /// Empty, not a whole number of pages, or larger than a handle can reach.
    #[error(
        "a region must be a whole number of 4 KiB pages, at least one, at most 16 TiB (got {0} bytes)"
    )]
    BadSize(u64),
    /// Neither reads nor writes allowed: nothing to register.
    #[error("a region must allow the server to read it, write it, or both")]
    NoAccess,
    /// No such region to unregister.
    #[error("no such region")]
    Unknown,
    /// The kernel refused.
    #[error("{what}: {err}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The kernel's answer.
        err: std::io::Error,
    },
}

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> RegisterError {
    move |e| RegisterError::Sys {
        what,
        err: e.into(),
    }
}

/// Counters of the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TableStats {
    /// Regions registered now.
    pub regions: u64,
    /// Bytes registered now.
    pub bytes: u64,
    /// Registrations refused.
    pub refused: u64,
    /// Pages pinned now.
    pub pinned_pages: u64,
    /// Lines whose pin the kernel refused (served unpinned).
    pub pin_failures: u64,
    /// Misses served.
    pub served: u64,
    /// Of them, lines never served before (the seed's cold misses).
    pub cold: u64,
    /// Of them, lines of no registered region (served as "nothing there").
    pub unknown: u64,
    /// Lines unpinned to stay under the high-water mark.
    pub evicted: u64,
}

/// What serving one miss found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// The line had never been served before.
    pub cold: bool,
    /// The line lies in no registered region.
    pub unknown: bool,
    /// Pages pinned for it now (0 if it was pinned already or the pin failed).
    pub pinned: u64,
}

struct Region {
    map: Mapping,
    perms: Perms,
    pages: u64,
}

#[derive(Default)]
struct AppRegions {
    regions: HashMap<u16, Region>,
    bytes: u64,
}

/// A pinned line: which pages, and when it was last served (for eviction).
struct Pinned {
    addr: usize,
    pages: u64,
    served: u64,
}

/// The table. See the [module docs](self).
pub struct RegionTable {
    limits: TableLimits,
    /// Translations per lookup-cache line (the cache's L).
    line: u32,
    apps: HashMap<Pch, AppRegions>,
    pinned: HashMap<LineKey, Pinned>,
    /// Served-at order of `pinned`, oldest first.
    by_age: BTreeMap<u64, LineKey>,
    seen: HashSet<LineKey>,
    clock: u64,
    stats: TableStats,
}

impl RegionTable {
    /// An empty table serving a lookup cache of geometry `geo`: its misses name lines of
    /// `geo.line` pages, so the table and the cache must share it.
    pub fn new(limits: TableLimits, geo: super::cache::CacheGeometry) -> Self {
        Self {
            limits,
            // A valid geometry's L is a power of two (unregistering relies on it).
            line: geo.line.max(1).next_power_of_two(),
            apps: HashMap::new(),
            pinned: HashMap::new(),
            by_age: BTreeMap::new(),
            seen: HashSet::new(),
            clock: 0,
            stats: TableStats::default(),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// Registers `memfd` for `app` with `perms`, mapping it. Returns the region's number.
    pub fn register(
        &mut self,
        app: Pch,
        memfd: BorrowedFd<'_>,
        perms: Perms,
    ) -> Result<RegionId, RegisterError> {
        let r = self.try_register(app, memfd, perms);
        if r.is_err() {
            self.stats.refused += 1;
        }
        r
    }

    fn try_register(
        &mut self,
        app: Pch,
        memfd: BorrowedFd<'_>,
        perms: Perms,
    ) -> Result<RegionId, RegisterError> {
        if !perms.read && !perms.write {
            return Err(RegisterError::NoAccess);
        }
        let limits = self.limits;
        let entry = self.apps.entry(app).or_default();
        if entry.regions.len() as u64 >= u64::from(limits.max_regions_per_app)
            || entry.regions.len() > usize::from(u16::MAX)
        {
            return Err(RegisterError::TooManyRegions(limits.max_regions_per_app));
        }
        let seals = rustix::fs::fcntl_get_seals(memfd).map_err(|_| RegisterError::NotSealed)?;
        if !seals.contains(SealFlags::SHRINK) {
            return Err(RegisterError::NotSealed);
        }
        let size = rustix::fs::fstat(memfd)
            .map_err(sys("fstat of the region"))?
            .st_size as u64;
        if size == 0 || size % PAGE_SIZE != 0 || size > MAX_REGION_BYTES {
            return Err(RegisterError::BadSize(size));
        }
        if entry.bytes + size > limits.max_bytes_per_app {
            return Err(RegisterError::TooMuchMemory(limits.max_bytes_per_app));
        }
        let id = (0..=u16::MAX)
            .find(|i| !entry.regions.contains_key(i))
            .expect("fewer than 65,536 regions");
        let mut prot = ProtFlags::empty();
        if perms.read {
            prot |= ProtFlags::READ;
        }
        if perms.write {
            // A writable mapping must be readable too on x86; reads are harmless.
            prot |= ProtFlags::READ | ProtFlags::WRITE;
        }
        let map = Mapping::new(memfd.as_fd(), size as usize, PAGE_SIZE as usize, prot)
            .map_err(sys("mapping the region"))?;
        entry.regions.insert(
            id,
            Region {
                map,
                perms,
                pages: size / PAGE_SIZE,
            },
        );
        entry.bytes += size;
        self.stats.regions += 1;
        self.stats.bytes += size;
        Ok(RegionId(id))
    }

    /// Unregisters one region of `app`: unpins and unmaps it.
    ///
    /// Precondition: no translation of the region is left anywhere — the lookup cache holds
    /// none of its lines, no fill of one is on its way back (a fill served before this call
    /// can arrive after it), and no copy through one is under way. Otherwise a later mapping
    /// at the same addresses would be reached through the stale translation.
    pub fn unregister(&mut self, app: Pch, region: RegionId) -> Result<(), RegisterError> {
        let Some(entry) = self.apps.get_mut(&app) else {
            return Err(RegisterError::Unknown);
        };
        let Some(r) = entry.regions.remove(&region.0) else {
            return Err(RegisterError::Unknown);
        };
        let bytes = r.pages * PAGE_SIZE;
        entry.bytes -= bytes;
        self.stats.regions -= 1;
        self.stats.bytes -= bytes;
        let lines_per_region_shift = PAGE_BITS_IN_REGION - self.line.trailing_zeros();
        let of_region =
            |k: &LineKey| k.app == app && k.line >> lines_per_region_shift == u64::from(region.0);
        self.unpin_where(of_region);
        self.seen.retain(|k| !of_region(k));
        drop(r);
        Ok(())
    }

    /// Forgets everything of `app` (it has gone): every region unpinned and unmapped. The
    /// lookup cache must hold none of its lines any more. Returns how many regions went.
    pub fn forget(&mut self, app: Pch) -> usize {
        self.seen.retain(|k| k.app != app);
        let Some(entry) = self.apps.remove(&app) else {
            return 0;
        };
        self.unpin_where(|k| k.app == app);
        self.stats.regions -= entry.regions.len() as u64;
        self.stats.bytes -= entry.bytes;
        entry.regions.len()
    }

    fn unpin_where(&mut self, which: impl Fn(&LineKey) -> bool) {
        let keys: Vec<LineKey> = self.pinned.keys().copied().filter(|k| which(k)).collect();
        for k in keys {
            self.unpin(k);
        }
    }

    fn unpin(&mut self, key: LineKey) {
        if let Some(p) = self.pinned.remove(&key) {
            self.by_age.remove(&p.served);
            // SAFETY: `addr..addr + pages * 4 KiB` is a range of a mapping this table still
            // holds (lines are unpinned before their region is unmapped); munlock only
            // changes whether those pages may be paged out.
            let _ =
                unsafe { rustix::mm::munlock(p.addr as *mut _, (p.pages * PAGE_SIZE) as usize) };
            self.stats.pinned_pages -= p.pages;
        }
    }

    /// Serves a lookup-cache miss: writes line `key`'s translations into `out` (the first
    /// `line` of it; "nothing there" past the region's end or for no region), pinning the
    /// line's pages if they are not pinned yet.
    pub fn serve_miss(&mut self, key: LineKey, out: &mut [Translation]) -> Served {
        let l = u64::from(self.line);
        let n = (l as usize).min(out.len());
        let out = &mut out[..n];
        out.fill(Translation::NONE);
        self.stats.served += 1;
        let first_page = key.line * l;
        let region = (first_page >> PAGE_BITS_IN_REGION) as u16;
        let page_in_region = first_page & ((1 << PAGE_BITS_IN_REGION) - 1);
        let Some(r) = self.apps.get(&key.app).and_then(|a| a.regions.get(&region)) else {
            // Not remembered in `seen`: lines of no region are an application's to invent
            // without end, and must not grow the table.
            self.stats.unknown += 1;
            return Served {
                cold: false,
                unknown: true,
                pinned: 0,
            };
        };
        // Bounded by the application's registered bytes / L.
        let cold = self.seen.insert(key);
        if cold {
            self.stats.cold += 1;
        }
        if page_in_region >= r.pages {
            return Served {
                cold,
                unknown: false,
                pinned: 0,
            };
        }
        let pages = (r.pages - page_in_region).min(l);
        // SAFETY: `page_in_region < r.pages`, so the page lies inside the mapping.
        let addr = unsafe { r.map.base().add((page_in_region << PAGE_SHIFT) as usize) };
        for (i, t) in out.iter_mut().take(pages as usize).enumerate() {
            // SAFETY: `page_in_region + i < r.pages`: inside the mapping.
            let page = unsafe { addr.add(i << PAGE_SHIFT) };
            *t = Translation::page(page, r.perms);
        }
        self.clock += 1;
        let now = self.clock;
        if let Some(p) = self.pinned.get_mut(&key) {
            self.by_age.remove(&p.served);
            p.served = now;
            self.by_age.insert(now, key);
            return Served {
                cold,
                unknown: false,
                pinned: 0,
            };
        }
        // SAFETY: the range is `pages` whole pages inside the mapping; mlock only pins them.
        let pinned =
            unsafe { rustix::mm::mlock(addr.as_ptr().cast(), (pages * PAGE_SIZE) as usize) };
        if pinned.is_err() {
            self.stats.pin_failures += 1;
            return Served {
                cold,
                unknown: false,
                pinned: 0,
            };
        }
        self.pinned.insert(
            key,
            Pinned {
                addr: addr.as_ptr() as usize,
                pages,
                served: now,
            },
        );
        self.by_age.insert(now, key);
        self.stats.pinned_pages += pages;
        Served {
            cold,
            unknown: false,
            pinned: pages,
        }
    }

    /// Unpins the lines served longest ago until at most `high_water` pages stay pinned.
    /// Returns how many lines it unpinned.
    pub fn evict_to(&mut self, high_water: u64) -> usize {
        let mut n = 0;
        while self.stats.pinned_pages > high_water {
            let Some((_, key)) = self.by_age.pop_first() else {
                break;
            };
            // `unpin` removes it from `by_age` again: harmless.
            self.unpin(key);
            n += 1;
        }
        self.stats.evicted += n as u64;
        n
    }

    /// The size of region `region` of `app`, if it is registered.
    pub fn region_bytes(&self, app: Pch, region: RegionId) -> Option<u64> {
        self.apps
            .get(&app)
            .and_then(|a| a.regions.get(&region.0))
            .map(|r| r.pages * PAGE_SIZE)
    }

    /// Regions `app` has registered, and their bytes.
    pub fn usage(&self, app: Pch) -> (u64, u64) {
        self.apps
            .get(&app)
            .map_or((0, 0), |a| (a.regions.len() as u64, a.bytes))
    }

    /// Whether `key` is pinned now.
    pub fn is_pinned(&self, key: LineKey) -> bool {
        self.pinned.contains_key(&key)
    }
}

impl Drop for RegionTable {
    fn drop(&mut self) {
        let keys: Vec<LineKey> = self.pinned.keys().copied().collect();
        for k in keys {
            self.unpin(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::OwnedFd;
    use rustix::fs::MemfdFlags;

    fn region(bytes: u64, seal: bool) -> OwnedFd {
        let fd = rustix::fs::memfd_create("shmnet-region-test", MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, bytes).unwrap();
        if seal {
            rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
        }
        fd
    }

    fn table() -> RegionTable {
        RegionTable::new(
            TableLimits {
                max_regions_per_app: 4,
                max_bytes_per_app: 1 << 20,
            },
            super::super::cache::CacheGeometry::new(64, 4, 2).unwrap(),
        )
    }

    #[test]
    fn a_region_must_be_sealed_whole_pages_and_within_limits() {
        let mut t = table();
        let rw = Perms::READ_WRITE;
        assert!(matches!(
            t.register(Pch(1), region(8192, false).as_fd(), rw),
            Err(RegisterError::NotSealed)
        ));
        assert!(matches!(
            t.register(Pch(1), region(5000, true).as_fd(), rw),
            Err(RegisterError::BadSize(5000))
        ));
        assert!(matches!(
            t.register(Pch(1), region(2 << 20, true).as_fd(), rw),
            Err(RegisterError::TooMuchMemory(_))
        ));
        assert!(matches!(
            t.register(Pch(1), region(4096, true).as_fd(), Perms::default()),
            Err(RegisterError::NoAccess)
        ));
        for i in 0..4 {
            assert_eq!(
                t.register(Pch(1), region(4096, true).as_fd(), rw).unwrap(),
                RegionId(i)
            );
        }
        assert!(matches!(
            t.register(Pch(1), region(4096, true).as_fd(), rw),
            Err(RegisterError::TooManyRegions(4))
        ));
        assert_eq!(
            t.register(Pch(2), region(4096, true).as_fd(), rw).unwrap(),
            RegionId(0),
            "limits are per application"
        );
        let s = t.stats();
        assert_eq!((s.regions, s.bytes, s.refused), (5, 5 * 4096, 5));
    }

    #[test]
    fn a_miss_is_served_with_the_regions_pages_and_nothing_past_its_end() {
        let mut t = table();
        let fd = region(6 * 4096, true);
        let ro = Perms {
            read: true,
            write: false,
        };
        let id = t.register(Pch(1), fd.as_fd(), ro).unwrap();
        rustix::io::pwrite(&fd, b"canary", 4096 * 5).unwrap();
        let mut out = [Translation::NONE; 8];
        // Line 1 of region 0 (L = 4): pages 4..8, of which 4 and 5 exist.
        let key = LineKey {
            app: Pch(1),
            line: u64::from(id.0) << 30 | 1,
        };
        let s = t.serve_miss(key, &mut out);
        assert!(s.cold && !s.unknown);
        assert!(out[0].is_present() && out[1].is_present());
        assert!(!out[2].is_present() && !out[3].is_present() && !out[4].is_present());
        // The translation reaches the application's bytes.
        let mut c = super::super::cache::LookupCache::new(
            super::super::cache::CacheGeometry::new(64, 4, 2).unwrap(),
        );
        c.fill(key, &out[..4]);
        let h = super::super::handle::Handle {
            app: Pch(1),
            region: id,
            off: 5 * 4096,
            len: 6,
        };
        let p = c.translate(&h, super::super::handle::Access::Read).unwrap();
        // SAFETY: the translation points into the table's live mapping of the region, six
        // bytes before the end of its last page.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), 6) };
        assert_eq!(bytes, b"canary");
        assert!(!t.serve_miss(key, &mut out).cold, "served before");
        let other = LineKey {
            app: Pch(2),
            line: 0,
        };
        let served = t.serve_miss(other, &mut out);
        assert!(served.unknown, "another application's line is nobody's");
        assert!(!served.cold, "lines of no region are not remembered");
        assert_eq!(t.seen.len(), 1, "only the registered line");
        assert!(out.iter().all(|e| !e.is_present()));
    }

    #[test]
    fn pins_are_evicted_oldest_first_and_released_with_the_region() {
        let mut t = table();
        let id = t
            .register(Pch(1), region(16 * 4096, true).as_fd(), Perms::READ_WRITE)
            .unwrap();
        let mut out = [Translation::NONE; 4];
        let key = |line: u64| LineKey {
            app: Pch(1),
            line: u64::from(id.0) << 30 | line,
        };
        let mut pinned = 0;
        for l in 0..4 {
            pinned += t.serve_miss(key(l), &mut out).pinned;
        }
        if t.stats().pin_failures > 0 {
            eprintln!("mlock refused here (RLIMIT_MEMLOCK): eviction not exercised");
            return;
        }
        assert_eq!((pinned, t.stats().pinned_pages), (16, 16));
        t.serve_miss(key(0), &mut out); // line 0 served again: now the youngest
        assert_eq!(t.evict_to(8), 2);
        assert!(t.is_pinned(key(0)) && t.is_pinned(key(3)));
        assert!(!t.is_pinned(key(1)) && !t.is_pinned(key(2)));
        t.unregister(Pch(1), id).unwrap();
        assert_eq!(t.stats().pinned_pages, 0);
        assert_eq!(t.stats().regions, 0);
        assert!(matches!(
            t.unregister(Pch(1), id),
            Err(RegisterError::Unknown)
        ));
    }

    #[test]
    fn forgetting_an_application_releases_everything_it_had() {
        let mut t = table();
        for _ in 0..3 {
            t.register(Pch(7), region(4096, true).as_fd(), Perms::READ_WRITE)
                .unwrap();
        }
        let mut out = [Translation::NONE; 4];
        t.serve_miss(
            LineKey {
                app: Pch(7),
                line: 0,
            },
            &mut out,
        );
        assert_eq!(t.forget(Pch(7)), 3);
        let s = t.stats();
        assert_eq!((s.regions, s.bytes, s.pinned_pages), (0, 0, 0));
        assert_eq!(t.forget(Pch(7)), 0);
    }
}
