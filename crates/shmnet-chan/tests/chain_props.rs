//! Property tests of the chain walker: on honest chains it yields exactly the chain's bytes;
//! on hostile ones (cycles, links out of range, lengths beyond the buffer, all scribbled
//! straight into the headers) it stays inside the window, ends within the pool set's buffer
//! count, and reports what is wrong with a typed error that matches a plain model of the walk.

#![cfg(not(loom))]

use proptest::prelude::*;
use shmnet_chan::heap::heap_pools;
use shmnet_chan::{AllocPolicy, BufIdx, ChainError, NO_BUF, PoolGeometry, ServerPools};

const DATA: u32 = 64;

fn pools(total: u32) -> ServerPools {
    let geo = PoolGeometry {
        pools: 1,
        per_pool: total,
        data_size: DATA,
        free_cap: total.next_power_of_two(),
        policy: AllocPolicy::Lifo,
    };
    heap_pools(geo, None).0
}

/// The byte at `pos` of buffer `idx`: distinct across buffers and positions.
fn byte(idx: u32, pos: usize) -> u8 {
    (idx as usize * 131 + pos * 7 + 1) as u8
}

/// A header as a hostile peer may write it.
#[derive(Clone, Debug)]
struct Hdr {
    next: u32,
    off: u32,
    len: u32,
}

fn hdr(total: u32) -> impl Strategy<Value = Hdr> {
    let next = prop_oneof![
        3 => 0..total,
        1 => Just(NO_BUF),
        1 => total..total + 4,
        1 => any::<u32>(),
    ];
    let span = prop_oneof![
        4 => (0..DATA).prop_flat_map(|off| (Just(off), 0..=DATA - off)),
        1 => (0u32..0x1_0000, 0u32..0x1_0000),
    ];
    (next, span).prop_map(|(next, (off, len))| Hdr { next, off, len })
}

/// The walk as the module docs state it, over private copies of the headers.
fn model(hdrs: &[Hdr], head: u32, skip: usize, max: usize) -> (Vec<u8>, Option<ChainError>) {
    let total = hdrs.len() as u32;
    let (mut out, mut skip, mut cur, mut steps) = (Vec::new(), skip, head, 0u32);
    while out.len() < max && cur != NO_BUF {
        if steps >= total {
            return (out, Some(ChainError::TooLong(total)));
        }
        let Some(h) = hdrs.get(cur as usize) else {
            return (out, Some(ChainError::BadIndex(BufIdx(cur))));
        };
        steps += 1;
        if h.off + h.len > DATA {
            let e = ChainError::BadRange {
                idx: BufIdx(cur),
                off: h.off,
                end: h.off + h.len,
                size: DATA,
            };
            return (out, Some(e));
        }
        for pos in h.off as usize..(h.off + h.len) as usize {
            if skip > 0 {
                skip -= 1;
            } else if out.len() < max {
                out.push(byte(cur, pos));
            }
        }
        cur = h.next;
    }
    (out, None)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn hostile_chains_are_walked_within_bounds_as_the_model_says(
        hdrs in (1u32..8).prop_flat_map(|t| prop::collection::vec(hdr(t), t as usize)),
        head_pick in any::<u32>(),
        skip in 0usize..200,
        max in 0usize..600,
    ) {
        let total = hdrs.len() as u32;
        let s = pools(total);
        let b = s.buffers();
        for i in 0..total {
            let bytes: Vec<u8> = (0..DATA as usize).map(|p| byte(i, p)).collect();
            b.write(i, 0, &bytes).unwrap();
            let h = &hdrs[i as usize];
            // off and len are 16-bit fields of one word, as in the window.
            b.hdr(i).unwrap().scribble([h.next, 1, (h.off & 0xffff) | (h.len << 16), 0]);
        }
        // Mask to the stored 16-bit fields so that the model sees what the window holds.
        let hdrs: Vec<Hdr> = hdrs
            .into_iter()
            .map(|h| Hdr { next: h.next, off: h.off & 0xffff, len: h.len & 0xffff })
            .collect();
        let head = match head_pick % 4 {
            0 => head_pick,
            1 => NO_BUF,
            _ => head_pick % total,
        };

        let items: Vec<_> = b.segments_from(BufIdx(head), skip, max).collect();
        prop_assert!(items.len() <= total as usize + 1, "the walk ended within the set");
        let mut got = Vec::new();
        let mut err = None;
        for (k, it) in items.iter().enumerate() {
            match it {
                Ok(seg) => {
                    prop_assert!(err.is_none());
                    prop_assert!(seg.idx().get() < total && !seg.is_empty());
                    prop_assert!(seg.off() + seg.len() <= DATA as usize);
                    // SAFETY: this test owns every buffer of the set.
                    got.extend_from_slice(unsafe { b.segment_bytes(*seg) }.unwrap());
                }
                Err(e) => {
                    prop_assert_eq!(k, items.len() - 1, "an error is the last item");
                    err = Some(*e);
                }
            }
        }
        let (want, want_err) = model(&hdrs, head, skip, max);
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(err, want_err);

        let mut dst = vec![0u8; max];
        match b.read_chain(BufIdx(head), skip, &mut dst) {
            Ok(n) => {
                prop_assert!(want_err.is_none());
                prop_assert_eq!(&dst[..n], &want[..]);
            }
            Err(e) => prop_assert_eq!(Some(e), want_err),
        }
    }

    #[test]
    fn honest_chains_read_back_whole(
        parts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..=DATA as usize), 1..8),
        skip in 0usize..300,
    ) {
        let mut s = pools(8);
        let idx: Vec<u32> = parts.iter().map(|_| s.alloc().unwrap()).collect();
        let b = s.buffers();
        for (&i, p) in idx.iter().zip(&parts) {
            let off = DATA as usize - p.len();
            b.write(i, off, p).unwrap();
            b.set_off_len(i, off as u16, p.len() as u16).unwrap();
        }
        let head = b.chain(&idx).unwrap().unwrap();
        let all: Vec<u8> = parts.concat();
        let mut dst = vec![0u8; all.len() + 5];
        let n = b.read_chain(BufIdx(head), skip, &mut dst).unwrap();
        let want = all.get(skip..).unwrap_or(&[]);
        prop_assert_eq!(&dst[..n], want);
    }
}
