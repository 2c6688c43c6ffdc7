//! Property tests of reassembly, end to end through the interface: any order with
//! duplicates reassembles to the original bytes; overlaps drop the datagram; nothing corrupt
//! is ever delivered; after the timeout every buffer is back in the pool.

mod common;

use common::*;
use proptest::prelude::*;
use shmnet_stack::{BufferPool, HeapPool, Instant, Interface, NoHook};

const PORT: u16 = 7777;

fn setup() -> (Interface, HeapPool, shmnet_stack::SocketHandle) {
    let mut ifc = iface();
    let pool = HeapPool::with_count(512);
    let s = bind(&mut ifc, PORT);
    (ifc, pool, s)
}

/// Every message waiting on the socket, copied out.
fn drain(ifc: &mut Interface, pool: &mut HeapPool, s: shmnet_stack::SocketHandle) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 70_000];
    while let Some(info) = ifc.udp_recv(pool, s, &mut buf, &mut NoHook).unwrap() {
        out.push(buf[..info.len].to_vec());
    }
    out
}

fn frag_frame(ident: u16, off: usize, more: bool, bytes: &[u8]) -> Vec<u8> {
    ip_frame(
        PEER_IP,
        OUR_IP,
        etherparse::IpNumber::UDP,
        ident,
        off,
        more,
        bytes,
    )
}

fn datagram() -> impl Strategy<Value = (Vec<u8>, usize)> {
    // At most 64 fragments (the per-datagram bound of the default configuration).
    (1usize..6000, 1usize..=185, any::<u8>()).prop_map(|(n, c, seed)| {
        let dg = udp_datagram(1, PORT, &pattern(n, seed), true);
        let min_chunk = dg.len().div_ceil(64).div_ceil(8) * 8;
        (dg, (c * 8).max(min_chunk))
    })
}

/// After everything: poll past the timeout and check the pool is whole.
fn check_conserved(ifc: &mut Interface, pool: &mut HeapPool, s: shmnet_stack::SocketHandle) {
    let _ = drain(ifc, pool, s);
    ifc.poll(pool, Instant::from_secs(3600), &mut Vec::new());
    assert_eq!(ifc.reasm_len(), 0);
    assert_eq!(
        pool.free_count(),
        pool.total(),
        "buffers leaked: {:?}",
        ifc.stats()
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_order_with_duplicates((dg, chunk) in datagram(), order in any::<u64>(), dups in proptest::collection::vec(any::<prop::sample::Index>(), 0..6)) {
        let (mut ifc, mut pool, s) = setup();
        let frags = cut(&dg, chunk);
        let mut seq: Vec<usize> = (0..frags.len()).collect();
        seq.extend(dups.iter().map(|d| d.index(frags.len())));
        fastrand::Rng::with_seed(order).shuffle(&mut seq);
        // Keep the completing fragment last so that duplicates precede completion.
        for &i in &seq {
            let (off, more, bytes) = &frags[i];
            feed(&mut ifc, &mut pool, &frag_frame(9, *off, *more, bytes), Instant::ZERO);
        }
        let got = drain(&mut ifc, &mut pool, s);
        prop_assert!(!got.is_empty(), "not delivered: {:?}", ifc.stats());
        for m in &got {
            prop_assert_eq!(&m[..], &dg[8..]);
        }
        check_conserved(&mut ifc, &mut pool, s);
    }

    #[test]
    fn overlaps_drop_the_datagram((dg, chunk) in datagram(), order in any::<u64>(), start in any::<prop::sample::Index>(), len in 1usize..200, pos in any::<prop::sample::Index>(), flip in any::<u8>()) {
        let frags = cut(&dg, chunk);
        let total = dg.len();
        // An overlapping fragment: a range (8-aligned start) that is not one of the originals,
        // or the same range as one with different bytes.
        let s0 = start.index(total.div_ceil(8)) * 8;
        let e0 = (s0 + len * 8).min(total);
        prop_assume!(s0 < e0 && (e0 == total || (e0 - s0) % 8 == 0));
        let mut bytes = dg[s0..e0].to_vec();
        let same_range = frags.iter().any(|(o, _, b)| *o == s0 && o + b.len() == e0);
        if same_range {
            bytes[0] ^= flip | 1;
        }
        let bad = (s0, e0 < total, bytes);
        let mut seq: Vec<Option<usize>> = (0..frags.len()).map(Some).collect();
        fastrand::Rng::with_seed(order).shuffle(&mut seq);
        // Before the last original, so the datagram cannot have completed yet.
        let at = pos.index(seq.len());
        seq.insert(at, None);

        let (mut ifc, mut pool, s) = setup();
        for item in &seq {
            let (off, more, bytes) = match item {
                Some(i) => (&frags[*i].0, &frags[*i].1, &frags[*i].2),
                None => (&bad.0, &bad.1, &bad.2),
            };
            feed(&mut ifc, &mut pool, &frag_frame(9, *off, *more, bytes), Instant::ZERO);
        }
        let got = drain(&mut ifc, &mut pool, s);
        // A piece whose ends are both fragment boundaries of the originals (with the
        // original bytes) is not an overlap but an alternative fragmentation: it may complete
        // the datagram with pieces it does not overlap, correctly. Any other piece overlaps
        // whatever completion would need, so the datagram must be dropped.
        let boundary = |x: usize| x == total || x % chunk == 0;
        // (A datagram that fits in one packet is no fragment: delivered on arrival, alone.)
        let tiles = frags.len() == 1 || (!same_range && boundary(s0) && boundary(e0));
        if tiles {
            for m in &got {
                prop_assert_eq!(&m[..], &dg[8..]);
            }
        } else {
            // (A same-range piece with other bytes that arrives before the original it
            // imitates cannot be told from it; the UDP checksum then refuses the result.)
            prop_assert!(got.is_empty(), "delivered despite overlap: {:?}", ifc.stats());
            let st = ifc.stats();
            prop_assert!(st.reasm_overlap + st.udp_bad_checksum >= 1, "{:?}", st);
        }
        check_conserved(&mut ifc, &mut pool, s);
    }

    #[test]
    fn incomplete_datagrams_time_out((dg, chunk) in datagram(), keep in proptest::collection::vec(any::<bool>(), 1..40), idents in 1u16..4) {
        let (mut ifc, mut pool, s) = setup();
        // At least two fragments.
        let chunk = chunk.min((dg.len() / 2).max(8) & !7);
        let frags = cut(&dg, chunk);
        prop_assert!(frags.len() > 1);
        let mut held = 0;
        for id in 0..idents {
            for (i, (off, more, bytes)) in frags.iter().enumerate() {
                if i == 0 || keep.get(i).copied().unwrap_or(false) {
                    if i + 1 == frags.len() && held + 1 == frags.len() { continue; }
                    feed(&mut ifc, &mut pool, &frag_frame(id, *off, *more, bytes), Instant::from_secs(id as u64));
                    held += 1;
                }
            }
            held = 0;
        }
        prop_assert!(drain(&mut ifc, &mut pool, s).is_empty());
        // A fragment arriving just before the deadline does not extend it.
        ifc.poll(&mut pool, Instant::from_secs(29), &mut Vec::new());
        ifc.poll(&mut pool, Instant::from_secs(33), &mut Vec::new());
        prop_assert_eq!(ifc.reasm_len(), 0);
        prop_assert_eq!(pool.free_count(), pool.total());
        prop_assert!(ifc.stats().reasm_timeout >= 1);
    }
}

#[test]
fn timeout_counts_from_the_first_fragment() {
    let (mut ifc, mut pool, _s) = setup();
    let dg = udp_datagram(1, PORT, &pattern(4000, 1), true);
    let frags = cut(&dg, 1480);
    let f = |i: usize| frag_frame(5, frags[i].0, frags[i].1, &frags[i].2);
    feed(&mut ifc, &mut pool, &f(0), Instant::ZERO);
    feed(&mut ifc, &mut pool, &f(1), Instant::from_secs(29));
    // The last fragment arrives after the first one's deadline: too late.
    feed(&mut ifc, &mut pool, &f(2), Instant::from_secs(30));
    assert_eq!(ifc.stats().reasm_timeout, 1);
    assert_eq!(ifc.stats().reasm_ok, 0);
    ifc.poll(&mut pool, Instant::from_secs(61), &mut Vec::new());
    assert_eq!(pool.free_count(), pool.total());
}

#[test]
fn table_is_bounded() {
    let (mut ifc, mut pool, s) = setup();
    let dg = udp_datagram(1, PORT, &pattern(3000, 1), true);
    let frags = cut(&dg, 1480);
    for id in 0..70u16 {
        feed(
            &mut ifc,
            &mut pool,
            &frag_frame(id, frags[0].0, true, &frags[0].2),
            Instant::ZERO,
        );
    }
    assert_eq!(ifc.reasm_len(), 64);
    // The six oldest were evicted to make room: the newest can still complete.
    assert_eq!(ifc.stats().reasm_table_full, 6);
    for f in &frags[1..] {
        feed(
            &mut ifc,
            &mut pool,
            &frag_frame(69, f.0, f.1, &f.2),
            Instant::ZERO,
        );
    }
    assert_eq!(ifc.stats().reasm_ok, 1);
    assert_eq!(drain(&mut ifc, &mut pool, s), vec![pattern(3000, 1)]);
    ifc.poll(&mut pool, Instant::from_secs(30), &mut Vec::new());
    assert_eq!(pool.free_count(), pool.total());
}

#[test]
fn oversize_is_refused() {
    let (mut ifc, mut pool, _s) = setup();
    // offset 65,520 + 8 bytes > 65,515.
    feed(
        &mut ifc,
        &mut pool,
        &frag_frame(1, 0, true, &[0; 8]),
        Instant::ZERO,
    );
    feed(
        &mut ifc,
        &mut pool,
        &frag_frame(1, 65_512, false, &[0; 16]),
        Instant::ZERO,
    );
    assert_eq!(ifc.stats().reasm_oversize, 1);
    ifc.poll(&mut pool, Instant::from_secs(30), &mut Vec::new());
    assert_eq!(pool.free_count(), pool.total());
}

#[test]
fn too_many_fragments_abandon_the_datagram() {
    let (mut ifc, mut pool, s) = setup();
    let dg = udp_datagram(1, PORT, &pattern(1000, 1), true);
    for (off, more, bytes) in cut(&dg, 8) {
        feed(
            &mut ifc,
            &mut pool,
            &frag_frame(3, off, more, &bytes),
            Instant::ZERO,
        );
    }
    assert_eq!(ifc.stats().reasm_too_many_frags, 1);
    assert!(drain(&mut ifc, &mut pool, s).is_empty());
    check_conserved(&mut ifc, &mut pool, s);
}
