//! Property tests: random interleavings of allocation, release, chaining, extra references,
//! locked pools and deferred frees by the two parties never lose or duplicate a buffer.

#![cfg(not(loom))]

use proptest::prelude::*;
use shmnet_chan::heap::heap_pools;
use shmnet_chan::{AllocPolicy, PoolGeometry};
use std::collections::HashSet;

#[derive(Clone, Debug)]
enum Op {
    AllocServer,
    AllocDriver,
    /// Release holder `i` (modulo) on the server path.
    ReleaseServer(usize),
    /// Release holder `i` on the driver path.
    ReleaseDriver(usize),
    /// Hand holder `i`'s reference back to the server side, with holder `j`'s in the same
    /// burst (the deferred queue; dropped when the server drains it).
    HandBack(usize, usize),
    /// Release holder `i` on the driver path while its pool is locked by the server.
    ReleaseDriverLocked(usize),
    /// Allocate on the driver path while pool `p` is locked.
    AllocDriverLocked(u32),
    /// Append chain `j` to chain `i` (both held once).
    Chain(usize, usize),
    /// Take another reference to holder `i`'s chain.
    Retain(usize),
    DrainDeferred,
    /// Drain the deferred queue and check conservation.
    Quiesce,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::AllocServer),
        4 => Just(Op::AllocDriver),
        3 => any::<usize>().prop_map(Op::ReleaseServer),
        3 => any::<usize>().prop_map(Op::ReleaseDriver),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Op::HandBack(i, j)),
        1 => any::<usize>().prop_map(Op::ReleaseDriverLocked),
        1 => (0u32..3).prop_map(Op::AllocDriverLocked),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Op::Chain(i, j)),
        1 => any::<usize>().prop_map(Op::Retain),
        1 => Just(Op::DrainDeferred),
        1 => Just(Op::Quiesce),
    ]
}

fn policy() -> impl Strategy<Value = AllocPolicy> {
    prop_oneof![
        Just(AllocPolicy::Lifo),
        Just(AllocPolicy::Fifo),
        Just(AllocPolicy::Random)
    ]
}

/// The test's model: each holder holds one reference to a chain; chains are buffer lists.
#[derive(Default)]
struct Model {
    chains: Vec<Option<Vec<u32>>>,
    holders: Vec<usize>,
}

impl Model {
    fn live_buffers(&self) -> HashSet<u32> {
        let mut set = HashSet::new();
        for c in self.chains.iter().flatten() {
            for &b in c {
                assert!(set.insert(b), "buffer {b} is in two live chains");
            }
        }
        set
    }
    fn refs(&self, chain: usize) -> usize {
        self.holders.iter().filter(|&&c| c == chain).count()
    }
    /// Removes holder `i`; returns the chain's head, and whether it was the last reference.
    fn drop_holder(&mut self, i: usize) -> Option<(u32, bool)> {
        if self.holders.is_empty() {
            return None;
        }
        let chain = self.holders.swap_remove(i % self.holders.len());
        let head = self.chains[chain].as_ref().unwrap()[0];
        let last = self.refs(chain) == 0;
        if last {
            self.chains[chain] = None;
        }
        Some((head, last))
    }
    fn add(&mut self, buf: u32) {
        assert!(
            !self.live_buffers().contains(&buf),
            "buffer {buf} handed out twice"
        );
        self.chains.push(Some(vec![buf]));
        self.holders.push(self.chains.len() - 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn buffers_are_conserved(policy in policy(), ops in prop::collection::vec(op(), 1..200)) {
        let geo = PoolGeometry { pools: 3, per_pool: 5, data_size: 64, free_cap: 8, policy };
        let total = geo.total();
        let (mut server, mut driver) = heap_pools(geo, None);
        let mut m = Model::default();
        let check = |server: &mut shmnet_chan::ServerPools, m: &Model| {
            server.drain_deferred(usize::MAX);
            let held = m.live_buffers().len() as u32;
            assert_eq!(server.buffers().free_count() + held, total, "free + in flight != total");
        };
        for op in ops {
            match op {
                Op::AllocServer => if let Some(b) = server.alloc() { m.add(b) },
                Op::AllocDriver => if let Some(b) = driver.alloc() { m.add(b) },
                Op::AllocDriverLocked(p) => {
                    prop_assert!(server.buffers().debug_set_lock(p, true));
                    let got = driver.alloc();
                    server.buffers().debug_set_lock(p, false);
                    if let Some(b) = got {
                        prop_assert_ne!(b / geo.per_pool, p, "allocated from a locked pool");
                        m.add(b);
                    }
                }
                Op::ReleaseServer(i) => if let Some((head, last)) = m.drop_holder(i) {
                    let freed = server.release(head);
                    prop_assert_eq!(freed > 0, last, "frees exactly when the last holder lets go");
                },
                Op::ReleaseDriver(i) => if let Some((head, _)) = m.drop_holder(i) { driver.release(head) },
                Op::HandBack(i, j) => {
                    let heads: Vec<u32> =
                        [i, j].into_iter().filter_map(|k| m.drop_holder(k)).map(|(h, _)| h).collect();
                    let before = server.buffers().free_count();
                    driver.hand_back_burst(&heads);
                    prop_assert_eq!(server.buffers().free_count(), before, "handed back, not freed");
                    // The references are dropped when the server drains them (and only then:
                    // the model has already let them go).
                    check(&mut server, &m);
                }
                Op::ReleaseDriverLocked(i) => if let Some((head, last)) = m.drop_holder(i) {
                    let pool = head / geo.per_pool;
                    prop_assert!(server.buffers().debug_set_lock(pool, true));
                    let before = server.buffers().free_count();
                    driver.release(head);
                    server.buffers().debug_set_lock(pool, false);
                    prop_assert_eq!(server.buffers().free_count(), before, "freed through a locked pool");
                    if last { prop_assert!(server.deferred_pending() > 0, "a locked release must be deferred"); }
                },
                Op::Chain(i, j) => {
                    if m.holders.len() < 2 { continue; }
                    let (ci, cj) = (m.holders[i % m.holders.len()], m.holders[j % m.holders.len()]);
                    if ci == cj || m.refs(ci) != 1 || m.refs(cj) != 1 { continue; }
                    let tail = *m.chains[ci].as_ref().unwrap().last().unwrap();
                    let other = m.chains[cj].take().unwrap();
                    server.buffers().set_next(tail, other[0]).unwrap();
                    // The appended head becomes an inner link: it keeps its single reference.
                    m.chains[ci].as_mut().unwrap().extend(other);
                    m.holders.retain(|&c| c != cj);
                }
                Op::Retain(i) => {
                    if m.holders.is_empty() { continue; }
                    let c = m.holders[i % m.holders.len()];
                    server.buffers().retain(m.chains[c].as_ref().unwrap()[0]).unwrap();
                    m.holders.push(c);
                }
                Op::DrainDeferred => { server.drain_deferred(3); }
                Op::Quiesce => check(&mut server, &m),
            }
        }
        check(&mut server, &m);
        while let Some((head, _)) = m.drop_holder(0) {
            driver.release(head);
        }
        check(&mut server, &m);
        prop_assert_eq!(server.buffers().free_count(), total);
        let st = server.buffers().stats();
        prop_assert_eq!((st.bad_chains, st.bad_releases, st.deferred_lost), (0, 0, 0));
        prop_assert!(st.pools.iter().all(|p| p.refused == 0 && p.lock_timeouts == 0));
    }
}
