//! The lookup cache: seed 004's VMH lookup cache, on the server's data path.
//!
//! A set-associative cache of translations with the seed's three parameters — `entries`
//! (C, translations in all), `line` (L, translations fetched and evicted together) and
//! `ways` (A, lines per set) — LRU within a set. Each translation is one handle page: where
//! the server reaches that page of the application's region, and what the application
//! allowed it to do there. A line holds the L consecutive handle pages `line * L ..`.
//!
//! - **Set index**: the low bits of the line number, so neighbouring lines of one region fall
//!   in different sets (the seed's choice: spatial locality does not conflict).
//! - **Tag**: the rest of the line number *and the application*, so applications share the
//!   whole cache with no static partition, and one application's lines can never answer for
//!   another's.
//! - **Single writer**: the data plane owns the cache. It looks up and, when the miss thread
//!   has served a miss, installs the line ([`LookupCache::fill`]) itself, so a lookup takes no
//!   lock and makes no system call. A miss is only reported (the caller drops or buffers the
//!   request and queues the miss); it never waits here.
//! - **Negative entries**: a page that lies past a region's end (or in no region) is cached
//!   as "nothing there", so a flood of junk handles from a hostile application costs lookups,
//!   not misses. The server invalidates an application's lines whenever its registrations
//!   change ([`LookupCache::invalidate`]).
//!
//! Why hand-written: the cache *is* the subject of seed 004 — its geometry, its replacement
//! and its cost per lookup are what shmnet measures (`shmnet lab handles`), and the same
//! geometry runs through shmnet-sim's cache model, which must agree miss for miss.

use super::handle::{Access, Handle, PAGE_SHIFT, PAGE_SIZE, Pch, Refusal};
use std::ptr::NonNull;

/// A cache entry's bits besides the page address (page-aligned, so the low 12 bits are free).
/// (bits 0 and 1 are [`Perms::bits`](super::handle::Perms): read, write — the bit of
/// [`Access`] `a` is `1 << a`.)
const PRESENT: usize = 1 << 2;
/// The tag of an empty way: application `u16::MAX` is never assigned.
const EMPTY: u64 = u64::MAX;
/// Bits of a tag below the application.
const APP_SHIFT: u32 = 48;
/// Most translations in one line (the seed's largest, 128).
pub const MAX_LINE: usize = 128;

/// How a line picks its set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SetIndex {
    /// The low bits of the line number (seed 004). Every application numbers its regions
    /// from 0, so the same page of every application's region falls in the same set: with
    /// more applications than ways they evict each other even when the cache is nearly
    /// empty (`shmnet lab handles` shows it).
    LowBits,
    /// The low bits of the line number XORed with a hash of (application, region): the
    /// same page of different applications and regions lands in different sets, while
    /// neighbouring lines of one region still fall in neighbouring sets. The default.
    #[default]
    Skewed,
}

/// The seed's three parameters, and how a line picks its set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CacheGeometry {
    /// C: translations in all.
    pub entries: u32,
    /// L: translations per line.
    pub line: u32,
    /// A: lines per set.
    pub ways: u32,
    /// The set index.
    pub index: SetIndex,
}

/// Why a geometry cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// C, L and A must each be a power of two.
    #[error("entries, line and ways must be powers of two (got C={0}, L={1}, A={2})")]
    NotPowerOfTwo(u32, u32, u32),
    /// A may not exceed 64 (a set is searched in one pass of compares).
    #[error("a set holds at most 64 lines (got {0})")]
    TooManyWays(u32),
    /// L may not exceed [`MAX_LINE`].
    #[error("a line holds at most {MAX_LINE} translations (got {0})")]
    LineTooLong(u32),
    /// C must hold at least one set: C ≥ L × A.
    #[error("{0} entries cannot hold one set of {2} lines of {1}")]
    TooSmall(u32, u32, u32),
}

impl CacheGeometry {
    /// The configuration seed 004 found the best trade-off: C = 16K, L = 64, A = 4.
    pub const SEED_BEST: CacheGeometry = CacheGeometry {
        entries: 16 * 1024,
        line: 64,
        ways: 4,
        index: SetIndex::Skewed,
    };

    /// C, L and A, checked.
    pub fn new(entries: u32, line: u32, ways: u32) -> Result<Self, GeometryError> {
        if !(entries.is_power_of_two() && line.is_power_of_two() && ways.is_power_of_two()) {
            return Err(GeometryError::NotPowerOfTwo(entries, line, ways));
        }
        if ways > 64 {
            return Err(GeometryError::TooManyWays(ways));
        }
        if line as usize > MAX_LINE {
            return Err(GeometryError::LineTooLong(line));
        }
        if u64::from(entries) < u64::from(line) * u64::from(ways) {
            return Err(GeometryError::TooSmall(entries, line, ways));
        }
        Ok(Self {
            entries,
            line,
            ways,
            index: SetIndex::default(),
        })
    }

    /// The same geometry with set index `index`.
    pub fn with_index(self, index: SetIndex) -> Self {
        Self { index, ..self }
    }

    /// Line `line` of `app` as the set index sees it: its low `log2(sets)` bits pick the
    /// set, the rest go into the tag. Its own inverse for each application (so the
    /// simulator can be given the same lines: `shmnet lab handles`).
    #[inline]
    pub fn index_line(&self, app: Pch, line: u64) -> u64 {
        index_line(
            self.index,
            app,
            line,
            self.line.trailing_zeros(),
            self.sets().trailing_zeros(),
        )
    }

    /// Sets: C / (L × A).
    pub fn sets(&self) -> u32 {
        self.entries / (self.line * self.ways)
    }

    /// Bytes the cache keeps (tags, LRU stamps and translations), the figure seed 004's
    /// memory comparison counts.
    pub fn bytes(&self) -> usize {
        let ways = (self.sets() * self.ways) as usize;
        ways * (size_of::<u64>() * 2) + self.entries as usize * size_of::<usize>()
    }
}

/// [`CacheGeometry::index_line`] with the geometry's shifts given (the data path keeps them
/// precomputed): with [`SetIndex::Skewed`], the set bits of `line` are XORed with a hash of
/// the application and the line's region — Fibonacci hashing, one multiply, the top
/// `set_bits` bits. The region's bits lie above every set bit (sets ≤ 2^31 / L), so the XOR
/// never changes the region, and applying it twice gives the line back.
#[inline(always)]
fn index_line(index: SetIndex, app: Pch, line: u64, line_shift: u32, set_bits: u32) -> u64 {
    match index {
        SetIndex::LowBits => line,
        SetIndex::Skewed if set_bits == 0 => line,
        SetIndex::Skewed => {
            let region = line >> (super::handle::PAGE_BITS_IN_REGION - line_shift);
            let key = u64::from(app.0) << 32 | (region & 0xffff_ffff);
            line ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - set_bits)
        }
    }
}

/// A line of one application's handle space: what a miss asks for and a fill installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct LineKey {
    /// Whose.
    pub app: Pch,
    /// Handle page / L.
    pub line: u64,
}

/// One translation as the miss thread makes it and the cache keeps it: the server's address
/// of a page and what the application allowed there, or nothing there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Translation(usize);

impl Translation {
    /// No page: past the region's end, or no such region.
    pub const NONE: Translation = Translation(0);

    /// The page at `page` in the server's mapping, with `perms`.
    ///
    /// # Panics
    ///
    /// If `page` is not page-aligned: its low bits would read as permissions.
    pub fn page(page: NonNull<u8>, perms: super::handle::Perms) -> Self {
        let addr = page.as_ptr() as usize;
        assert_eq!(addr % PAGE_SIZE as usize, 0, "pages are page-aligned");
        Translation(addr | PRESENT | perms.bits())
    }

    /// Whether a page is there.
    pub fn is_present(self) -> bool {
        self.0 & PRESENT != 0
    }
}

/// Counters of one cache; `[read, write]` pairs by [`Access`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LookupStats {
    /// Line lookups that hit.
    pub hits: [u64; 2],
    /// Line lookups that missed.
    pub misses: [u64; 2],
    /// Lines installed.
    pub fills: u64,
    /// Lines pushed out to make room.
    pub evictions: u64,
    /// Lines dropped because registrations changed.
    pub invalidations: u64,
    /// Handles refused, by [`Refusal`]: bad range, (unknown region: never here), out of
    /// bounds, forbidden.
    pub refused: [u64; 4],
}

/// The outcome of translating a handle that was not translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// A line the cache does not hold: queue it for the miss thread.
    Miss(LineKey),
    /// The handle is refused.
    Refused(Refusal),
}

/// One way of a set: the tag of the line it holds ([`EMPTY`] if none: application in the
/// top 16 bits, line / sets below) and when it was last used (larger: more recently).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
struct Way {
    tag: u64,
    stamp: u64,
}

impl Way {
    const EMPTY: Way = Way {
        tag: EMPTY,
        stamp: 0,
    };
}

/// The lookup cache. See the [module docs](self).
pub struct LookupCache {
    geo: CacheGeometry,
    set_bits: u32,
    line_shift: u32,
    /// `sets × ways` ways, a set's ways side by side (at A = 4, one cache line per set),
    /// starting at `way0`, the first index whose address is 64-byte aligned.
    ways: Vec<Way>,
    way0: usize,
    /// `sets × ways × line` translations.
    entries: Box<[Translation]>,
    clock: u64,
    stats: LookupStats,
}

impl LookupCache {
    /// An empty cache of geometry `geo`.
    ///
    /// # Panics
    ///
    /// If `geo` is not one [`CacheGeometry::new`] accepts (a struct literal can skip it).
    pub fn new(geo: CacheGeometry) -> Self {
        if let Err(e) = CacheGeometry::new(geo.entries, geo.line, geo.ways) {
            panic!("an invalid lookup-cache geometry: {e}");
        }
        let ways = (geo.sets() * geo.ways) as usize;
        Self {
            geo,
            set_bits: geo.sets().trailing_zeros(),
            line_shift: geo.line.trailing_zeros(),
            ways: vec![Way::EMPTY; ways + 3],
            way0: 0,
            entries: vec![Translation::NONE; geo.entries as usize].into_boxed_slice(),
            clock: 0,
            stats: LookupStats::default(),
        }
        .aligned()
    }

    /// Sets `way0` so that every set starts on a 64-byte boundary when a set fills one.
    fn aligned(mut self) -> Self {
        let addr = self.ways.as_ptr() as usize;
        self.way0 = (addr.next_multiple_of(64) - addr) / size_of::<Way>() % 4;
        self
    }

    /// Its geometry.
    pub fn geometry(&self) -> CacheGeometry {
        self.geo
    }

    fn sets(&self) -> usize {
        1 << self.set_bits
    }

    /// Its counters.
    pub fn stats(&self) -> LookupStats {
        self.stats
    }

    /// The line holding handle page `page` of `app`.
    #[inline]
    pub fn line_of(&self, app: Pch, page: u64) -> LineKey {
        LineKey {
            app,
            line: page >> self.line_shift,
        }
    }

    #[inline(always)]
    fn tag(&self, key: LineKey) -> (usize, u64) {
        let line = index_line(
            self.geo.index,
            key.app,
            key.line,
            self.line_shift,
            self.set_bits,
        );
        let set = (line & ((1 << self.set_bits) - 1)) as usize;
        let tag = u64::from(key.app.0) << APP_SHIFT | line >> self.set_bits;
        (set, tag)
    }

    /// The way holding `key`, if any (no LRU update).
    #[inline(always)]
    fn find(&self, key: LineKey) -> Option<usize> {
        let (set, tag) = self.tag(key);
        // The usual associativities get a compare unrolled for their A (the branch on A
        // is taken the same way every time); the rest a loop.
        match self.geo.ways {
            1 => self.find_in::<1>(set, tag),
            2 => self.find_in::<2>(set, tag),
            4 => self.find_in::<4>(set, tag),
            8 => self.find_in::<8>(set, tag),
            _ => self.find_in_any(set, tag),
        }
    }

    /// [`LookupCache::find`] in set `set` of a cache of `A` ways.
    #[inline(always)]
    fn find_in<const A: usize>(&self, set: usize, tag: u64) -> Option<usize> {
        let first = set * A;
        let ways: &[Way; A] = self.ways[self.way0 + first..][..A]
            .try_into()
            .expect("a set has A ways");
        // Every way compared, no early exit: which way hits is as random as the traffic, and
        // a mispredicted loop exit costs more than the compares it saves.
        let mut hits = 0u64;
        for (i, w) in ways.iter().enumerate() {
            hits |= u64::from(w.tag == tag) << i;
        }
        (hits != 0).then(|| first + hits.trailing_zeros() as usize)
    }

    /// [`LookupCache::find`] for any A (≤ 64).
    #[inline(never)]
    fn find_in_any(&self, set: usize, tag: u64) -> Option<usize> {
        let a = self.geo.ways as usize;
        let first = set * a;
        let hits = self.ways[self.way0 + first..self.way0 + first + a]
            .iter()
            .enumerate()
            .fold(0u64, |m, (i, w)| m | u64::from(w.tag == tag) << i);
        (hits != 0).then(|| first + hits.trailing_zeros() as usize)
    }

    /// Looks `key` up as a reference of kind `access` would: a hit makes it the set's most
    /// recently used line. Counts the hit or miss. Always inlined: it is the whole of a
    /// hit, and a call costs a hit a tenth of its time.
    #[inline(always)]
    pub fn touch(&mut self, key: LineKey, access: Access) -> Option<usize> {
        match self.find(key) {
            Some(way) => {
                self.clock += 1;
                self.ways[self.way0 + way].stamp = self.clock;
                self.stats.hits[access as usize] += 1;
                Some(way)
            }
            None => {
                self.stats.misses[access as usize] += 1;
                None
            }
        }
    }

    /// Translates `h` for `access`: the server's address of its first byte, the rest
    /// following contiguously. Every page it covers must be cached, present and allowed.
    #[inline(always)]
    pub fn translate(&mut self, h: &Handle, access: Access) -> Result<NonNull<u8>, LookupError> {
        let Some((first, last)) = h.page_span() else {
            return Err(self.refuse(Refusal::BadRange));
        };
        let l = self.geo.line as u64;
        if first == last {
            // One page (most descriptors): one line, one entry.
            let key = self.line_of(h.app, first);
            let Some(way) = self.touch(key, access) else {
                return Err(LookupError::Miss(key));
            };
            let e = self.entries[way << self.line_shift | (first & (l - 1)) as usize].0;
            if e & (PRESENT | 1 << access as usize) != PRESENT | 1 << access as usize {
                return Err(self.refuse(if e & PRESENT == 0 {
                    Refusal::OutOfBounds
                } else {
                    Refusal::Forbidden
                }));
            }
            let at = (e & !(PAGE_SIZE as usize - 1)) + (h.off & (PAGE_SIZE - 1)) as usize;
            return Ok(NonNull::new(at as *mut u8).expect("present entries are non-null"));
        }
        self.translate_span(h, access, first, last)
    }

    /// [`LookupCache::translate`] of a handle over several pages.
    #[inline(never)]
    fn translate_span(
        &mut self,
        h: &Handle,
        access: Access,
        first: u64,
        last: u64,
    ) -> Result<NonNull<u8>, LookupError> {
        let l = self.geo.line as u64;
        let mut start = 0usize;
        let mut page = first;
        while page <= last {
            let key = self.line_of(h.app, page);
            let Some(way) = self.touch(key, access) else {
                return Err(LookupError::Miss(key));
            };
            let line_last = (key.line + 1) * l - 1;
            let base = way * l as usize;
            while page <= last.min(line_last) {
                let e = self.entries[base + (page & (l - 1)) as usize].0;
                if e & PRESENT == 0 {
                    return Err(self.refuse(Refusal::OutOfBounds));
                }
                if e & 1 << access as usize == 0 {
                    return Err(self.refuse(Refusal::Forbidden));
                }
                let addr = e & !(PAGE_SIZE as usize - 1);
                if page == first {
                    start = addr;
                } else if addr != start + ((page - first) << PAGE_SHIFT) as usize {
                    // The server maps each region in one piece, so this means stale entries
                    // from another mapping: refuse rather than guess.
                    return Err(self.refuse(Refusal::OutOfBounds));
                }
                page += 1;
            }
        }
        let at = start + (h.off & (PAGE_SIZE - 1)) as usize;
        // `start` came from a present entry, whose address is a page of a live mapping.
        Ok(NonNull::new(at as *mut u8).expect("present entries are non-null"))
    }

    #[cold]
    fn refuse(&mut self, why: Refusal) -> LookupError {
        let i = match why {
            Refusal::BadRange => 0,
            Refusal::UnknownRegion => 1,
            Refusal::OutOfBounds => 2,
            Refusal::Forbidden => 3,
        };
        self.stats.refused[i] += 1;
        LookupError::Refused(why)
    }

    /// Installs line `key` with its translations (`entries[i]` for handle page
    /// `key.line * L + i`; missing ones are "nothing there"), in place if it is already
    /// cached, else over an empty way or the set's least recently used line. Returns the line
    /// it evicted, if any.
    pub fn fill(&mut self, key: LineKey, entries: &[Translation]) -> Option<LineKey> {
        let (set, tag) = self.tag(key);
        let a = self.geo.ways as usize;
        let first = set * a;
        let mut evicted = None;
        let way = match self.find(key) {
            Some(w) => w,
            None => {
                let w = (first..first + a)
                    .min_by_key(|&w| {
                        let way = &self.ways[self.way0 + w];
                        if way.tag == EMPTY { 0 } else { way.stamp + 1 }
                    })
                    .expect("a set has at least one way");
                let old = self.ways[self.way0 + w].tag;
                if old != EMPTY {
                    evicted = Some(self.key_of(set, old));
                    self.stats.evictions += 1;
                }
                w
            }
        };
        self.clock += 1;
        self.ways[self.way0 + way] = Way {
            tag,
            stamp: self.clock,
        };
        let l = self.geo.line as usize;
        let dst = &mut self.entries[way * l..(way + 1) * l];
        for (i, d) in dst.iter_mut().enumerate() {
            *d = entries.get(i).copied().unwrap_or(Translation::NONE);
        }
        self.stats.fills += 1;
        evicted
    }

    fn key_of(&self, set: usize, tag: u64) -> LineKey {
        let app = Pch((tag >> APP_SHIFT) as u16);
        let indexed = (tag & ((1 << APP_SHIFT) - 1)) << self.set_bits | set as u64;
        LineKey {
            app,
            line: index_line(self.geo.index, app, indexed, self.line_shift, self.set_bits),
        }
    }

    /// Whether `key` is cached (no LRU update, nothing counted).
    pub fn contains(&self, key: LineKey) -> bool {
        self.find(key).is_some()
    }

    /// Drops every line of `app` for which `which(line)` holds — all of them when its
    /// registrations change or it goes. Returns how many lines went.
    pub fn invalidate(&mut self, app: Pch, mut which: impl FnMut(LineKey) -> bool) -> usize {
        let a = self.geo.ways as usize;
        let mut n = 0;
        for w in 0..self.sets() * a {
            let t = self.ways[self.way0 + w].tag;
            if t == EMPTY || (t >> APP_SHIFT) as u16 != app.0 {
                continue;
            }
            if which(self.key_of(w / a, t)) {
                self.ways[self.way0 + w] = Way::EMPTY;
                n += 1;
            }
        }
        self.stats.invalidations += n as u64;
        n
    }

    /// The lines cached now, in no particular order.
    pub fn lines(&self) -> impl Iterator<Item = LineKey> + '_ {
        let a = self.geo.ways as usize;
        self.ways[self.way0..self.way0 + self.sets() * a]
            .iter()
            .map(|w| w.tag)
            .enumerate()
            .filter(|&(_, t)| t != EMPTY)
            .map(move |(w, t)| self.key_of(w / a, t))
    }
}

#[cfg(test)]
mod tests {
    use super::super::handle::{Perms, RegionId};
    use super::*;

    fn geo(c: u32, l: u32, a: u32) -> CacheGeometry {
        CacheGeometry::new(c, l, a).unwrap()
    }

    /// A fake mapping: page `p` of the handle space at address `(p + 1) * 4096`.
    fn line_entries(key: LineKey, l: u32, perms: Perms, pages_in_region: u64) -> Vec<Translation> {
        (0..u64::from(l))
            .map(|i| {
                let page = key.line * u64::from(l) + i;
                if page & 0xffff_ffff < pages_in_region {
                    let addr = NonNull::new(((page + 1) << PAGE_SHIFT) as *mut u8).unwrap();
                    Translation::page(addr, perms)
                } else {
                    Translation::NONE
                }
            })
            .collect()
    }

    #[test]
    fn geometry_is_checked() {
        assert!(CacheGeometry::new(8192, 8, 4).is_ok());
        assert_eq!(geo(8192, 8, 4).sets(), 256);
        assert!(matches!(
            CacheGeometry::new(1000, 8, 4),
            Err(GeometryError::NotPowerOfTwo(..))
        ));
        assert!(matches!(
            CacheGeometry::new(1 << 20, 256, 4),
            Err(GeometryError::LineTooLong(256))
        ));
        assert!(matches!(
            CacheGeometry::new(16, 8, 4),
            Err(GeometryError::TooSmall(..))
        ));
    }

    #[test]
    fn a_handle_translates_after_its_line_is_filled() {
        let mut c = LookupCache::new(geo(64, 8, 2));
        let h = Handle {
            app: Pch(1),
            region: RegionId(0),
            off: 4096 + 100,
            len: 10,
        };
        let key = match c.translate(&h, Access::Read) {
            Err(LookupError::Miss(k)) => k,
            other => panic!("expected a miss, got {other:?}"),
        };
        assert_eq!(
            key,
            LineKey {
                app: Pch(1),
                line: 0
            }
        );
        c.fill(key, &line_entries(key, 8, Perms::READ_WRITE, 16));
        let p = c.translate(&h, Access::Read).unwrap();
        assert_eq!(p.as_ptr() as usize, 2 * 4096 + 100);
        assert_eq!(c.stats().hits[0], 1);
        assert_eq!(c.stats().misses[0], 1);
    }

    #[test]
    fn a_handle_across_two_lines_needs_both() {
        let mut c = LookupCache::new(geo(64, 4, 2));
        let h = Handle {
            app: Pch(1),
            region: RegionId(0),
            off: 3 * 4096 + 4000,
            len: 200,
        };
        let k0 = LineKey {
            app: Pch(1),
            line: 0,
        };
        let k1 = LineKey {
            app: Pch(1),
            line: 1,
        };
        c.fill(k0, &line_entries(k0, 4, Perms::READ_WRITE, 16));
        assert_eq!(c.translate(&h, Access::Write), Err(LookupError::Miss(k1)));
        c.fill(k1, &line_entries(k1, 4, Perms::READ_WRITE, 16));
        assert_eq!(
            c.translate(&h, Access::Write).unwrap().as_ptr() as usize,
            4 * 4096 + 4000
        );
    }

    #[test]
    fn refusals_are_counted_and_never_translate() {
        let mut c = LookupCache::new(geo(64, 8, 2));
        let k = LineKey {
            app: Pch(1),
            line: 0,
        };
        let ro = Perms {
            read: true,
            write: false,
        };
        c.fill(k, &line_entries(k, 8, ro, 3));
        let at = |off, len| Handle {
            app: Pch(1),
            region: RegionId(0),
            off,
            len,
        };
        assert!(c.translate(&at(0, 100), Access::Read).is_ok());
        assert_eq!(
            c.translate(&at(0, 100), Access::Write),
            Err(LookupError::Refused(Refusal::Forbidden))
        );
        assert_eq!(
            c.translate(&at(2 * 4096, 4097), Access::Read),
            Err(LookupError::Refused(Refusal::OutOfBounds))
        );
        assert_eq!(
            c.translate(&at(0, 0), Access::Read),
            Err(LookupError::Refused(Refusal::BadRange))
        );
        assert_eq!(c.stats().refused, [1, 0, 1, 1]);
    }

    #[test]
    fn applications_never_answer_for_each_other() {
        let mut c = LookupCache::new(geo(64, 8, 2));
        let mine = LineKey {
            app: Pch(1),
            line: 0,
        };
        c.fill(mine, &line_entries(mine, 8, Perms::READ_WRITE, 8));
        let theirs = Handle {
            app: Pch(2),
            region: RegionId(0),
            off: 0,
            len: 1,
        };
        assert_eq!(
            c.translate(&theirs, Access::Read),
            Err(LookupError::Miss(LineKey {
                app: Pch(2),
                line: 0
            }))
        );
    }

    #[test]
    fn the_least_recently_used_line_of_a_set_goes_first() {
        // One set of two ways: lines 0, 1, 2 all map to it.
        let mut c = LookupCache::new(geo(16, 8, 2));
        let k = |line| LineKey { app: Pch(1), line };
        assert_eq!(c.fill(k(0), &[]), None);
        assert_eq!(c.fill(k(1), &[]), None);
        c.touch(k(0), Access::Read);
        assert_eq!(
            c.fill(k(2), &[]),
            Some(k(1)),
            "line 1 was used least recently"
        );
        assert!(c.contains(k(0)) && c.contains(k(2)) && !c.contains(k(1)));
        assert_eq!(c.stats().evictions, 1);
    }

    #[test]
    fn invalidation_drops_only_what_it_is_asked_to() {
        let mut c = LookupCache::new(geo(64, 8, 2));
        for app in [1, 2] {
            for line in 0..3 {
                c.fill(
                    LineKey {
                        app: Pch(app),
                        line,
                    },
                    &[],
                );
            }
        }
        assert_eq!(c.invalidate(Pch(1), |k| k.line < 2), 2);
        let mut left: Vec<_> = c.lines().collect();
        left.sort();
        assert_eq!(left.len(), 4);
        assert_eq!(
            left[0],
            LineKey {
                app: Pch(1),
                line: 2
            }
        );
        assert_eq!(c.invalidate(Pch(2), |_| true), 3);
    }
}
