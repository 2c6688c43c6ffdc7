//! Properties of the lookup cache against a plain model: LRU order within a set, a line
//! fills and evicts as a whole, and the application is part of the tag.

use proptest::prelude::*;
use shmnet_chan::handles::{
    Access, CacheGeometry, Handle, LineKey, LookupCache, LookupError, Pch, Perms, RegionId,
    SetIndex, Translation,
};
use std::ptr::NonNull;

/// Where the fake mapping puts handle page `page` of `app`: distinct for every pair, so a
/// translation names whose page it is.
fn addr(app: u16, page: u64) -> usize {
    ((usize::from(app) << 36) | (page as usize & 0xff_ffff) << 12) + (1 << 12)
}

fn line_of(app: u16, line: u64, l: u32) -> Vec<Translation> {
    (0..u64::from(l))
        .map(|i| {
            let page = line * u64::from(l) + i;
            Translation::page(
                NonNull::new(addr(app, page) as *mut u8).unwrap(),
                Perms::READ_WRITE,
            )
        })
        .collect()
}

/// The model: per set, the lines it holds, most recently used last.
struct Model {
    geo: CacheGeometry,
    sets: Vec<Vec<LineKey>>,
    ways: usize,
    hits: u64,
    misses: u64,
}

impl Model {
    fn access(&mut self, key: LineKey) -> bool {
        let sets = self.sets.len() as u64;
        // The set: the low bits of the line as the index sees it (the seed's low bits of the
        // line number, or those XORed with the application's and region's hash).
        let set = &mut self.sets[(self.geo.index_line(key.app, key.line) % sets) as usize];
        if let Some(i) = set.iter().position(|k| *k == key) {
            let k = set.remove(i);
            set.push(k);
            self.hits += 1;
            true
        } else {
            if set.len() == self.ways {
                set.remove(0);
            }
            set.push(key);
            self.misses += 1;
            false
        }
    }
}

fn geometry() -> impl Strategy<Value = CacheGeometry> {
    (0u32..4, 0u32..4, 0u32..3, any::<bool>()).prop_map(|(l, a, extra, skewed)| {
        let line = 1 << l;
        let ways = 1 << a;
        let index = if skewed {
            SetIndex::Skewed
        } else {
            SetIndex::LowBits
        };
        CacheGeometry::new((line * ways) << extra, line, ways)
            .unwrap()
            .with_index(index)
    })
}

proptest! {
    #[test]
    fn the_cache_behaves_as_lru_sets_of_whole_lines(
        geo in geometry(),
        refs in prop::collection::vec((1u16..4, 0u64..96), 1..400),
    ) {
        let mut cache = LookupCache::new(geo);
        let mut model = Model { geo, sets: vec![Vec::new(); geo.sets() as usize], ways: geo.ways as usize, hits: 0, misses: 0 };
        for &(app, page) in &refs {
            let h = Handle { app: Pch(app), region: RegionId(0), off: page << 12 | 7, len: 1 };
            let key = LineKey { app: Pch(app), line: page / u64::from(geo.line) };
            let hit = model.access(key);
            match cache.translate(&h, Access::Read) {
                Ok(p) => {
                    prop_assert!(hit, "the cache hit where the model missed");
                    prop_assert_eq!(p.as_ptr() as usize, addr(app, page) + 7, "another page's translation");
                }
                Err(LookupError::Miss(k)) => {
                    prop_assert!(!hit, "the cache missed where the model hit");
                    prop_assert_eq!(k, key);
                    let evicted = cache.fill(k, &line_of(app, k.line, geo.line));
                    if let Some(e) = evicted {
                        let set = &model.sets[(e.line % u64::from(geo.sets())) as usize];
                        prop_assert!(!set.contains(&e), "evicted a line the model keeps");
                    }
                }
                Err(e) => prop_assert!(false, "refused: {e:?}"),
            }
        }
        let s = cache.stats();
        prop_assert_eq!((s.hits[0], s.misses[0]), (model.hits, model.misses));
        let mut held: Vec<LineKey> = cache.lines().collect();
        let mut want: Vec<LineKey> = model.sets.concat();
        held.sort();
        want.sort();
        prop_assert_eq!(held, want);
    }

    #[test]
    fn one_application_never_reads_anothers_translation(
        refs in prop::collection::vec((1u16..3, 0u64..16), 1..200),
    ) {
        let geo = CacheGeometry::new(16, 4, 2).unwrap();
        let mut cache = LookupCache::new(geo);
        for &(app, page) in &refs {
            let h = Handle { app: Pch(app), region: RegionId(0), off: page << 12, len: 1 };
            match cache.translate(&h, Access::Write) {
                Ok(p) => prop_assert_eq!(p.as_ptr() as usize >> 36, usize::from(app)),
                Err(LookupError::Miss(k)) => { cache.fill(k, &line_of(app, k.line, geo.line)); }
                Err(e) => prop_assert!(false, "refused: {e:?}"),
            }
        }
    }
}
