//! Communication patterns shaped like the SPLASH-2 programs seed 004 ran over a shared
//! virtual memory system (GeNIMA: page-sized messages between processes), as traces of
//! handle pages: every message is read from a page of its sender's send region and written
//! into a page of its receiver's receive region, so each message makes one send reference
//! and one receive reference to the lookup cache.
//!
//! The applications stand for the seed's processes, all sharing one cache. Each has two
//! regions of `pages` pages: region 0 it sends from, region 1 it receives into. The shapes:
//!
//! - `fft`: the transpose — every application sends every other one a contiguous block of
//!   `pages / apps` pages, phase after phase (all-to-all, streaming, no reuse within a
//!   phase);
//! - `radix`: the key permutation — all-to-all to random destinations, from and into
//!   random pages (no spatial locality);
//! - `lu`: contiguous blocks — in step k the owner of block k sends it to everyone (the
//!   block moves along the matrix; every block is reused by all receivers at once);
//! - `water`: nearest neighbours with a small working set — each application sends the
//!   same few boundary pages to its two neighbours, iteration after iteration;
//! - `ocean`: nearest neighbours on a large grid — the boundary is a column, so its pages
//!   lie a row apart (strided: a long line brings in pages that are never used).

use shmnet_chan::handles::{Access, Pch};

/// One reference: which application's handle page, for which access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRef {
    /// Whose.
    pub app: Pch,
    /// Handle page: region in the high 32 bits, page within the region below.
    pub page: u64,
    /// Send (read) or receive (write).
    pub access: Access,
}

/// The patterns, by name.
pub const WORKLOADS: [&str; 5] = ["fft", "radix", "lu", "water", "ocean"];

/// Size of a workload.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Shape {
    /// Applications sharing the cache.
    pub apps: u16,
    /// Pages in each application's send region (and in its receive region).
    pub pages: u64,
    /// Messages in all (each makes two references).
    pub messages: u64,
}

const SEND: u64 = 0;
const RECV: u64 = 1 << 32;

fn msg(out: &mut Vec<PageRef>, from: u16, send_page: u64, to: u16, recv_page: u64) {
    out.push(PageRef {
        app: Pch(from),
        page: SEND | send_page,
        access: Access::Read,
    });
    out.push(PageRef {
        app: Pch(to),
        page: RECV | recv_page,
        access: Access::Write,
    });
}

/// The trace of workload `name` of shape `s` (`None` for an unknown name).
pub fn trace(name: &str, s: Shape) -> Option<Vec<PageRef>> {
    let p = u64::from(s.apps.max(2));
    let n = s.pages.max(p);
    let mut out = Vec::with_capacity(2 * s.messages as usize);
    let mut rng = fastrand::Rng::with_seed(0x5b1a_5400 ^ name.len() as u64);
    let apps = s.apps.max(2);
    match name {
        "fft" => {
            let block = n / p;
            'phases: loop {
                for i in 0..apps {
                    for j in (0..apps).filter(|&j| j != i) {
                        for k in 0..block {
                            if out.len() as u64 >= 2 * s.messages {
                                break 'phases;
                            }
                            let (i64_, j64) = (u64::from(i), u64::from(j));
                            msg(&mut out, i, j64 * block + k, j, i64_ * block + k);
                        }
                    }
                }
            }
        }
        "radix" => {
            for _ in 0..s.messages {
                let i = rng.u16(0..apps);
                let j = (i + rng.u16(1..apps)) % apps;
                msg(&mut out, i, rng.u64(0..n), j, rng.u64(0..n));
            }
        }
        "lu" => {
            // Blocks of 16 pages (a 64 KiB block of the matrix), owners round robin.
            let block = 16.min(n);
            let blocks = n / block;
            let mut k = 0u64;
            'steps: loop {
                let owner = (k % p) as u16;
                let b = (k % blocks) * block;
                for j in (0..apps).filter(|&j| j != owner) {
                    for q in 0..block {
                        if out.len() as u64 >= 2 * s.messages {
                            break 'steps;
                        }
                        msg(&mut out, owner, b + q, j, b + q);
                    }
                }
                k += 1;
            }
        }
        "water" => {
            // Four boundary pages to each neighbour, from the same pages every iteration.
            let boundary = 4.min(n);
            'iters: loop {
                for i in 0..apps {
                    for j in [(i + 1) % apps, (i + apps - 1) % apps] {
                        for q in 0..boundary {
                            if out.len() as u64 >= 2 * s.messages {
                                break 'iters;
                            }
                            let from = if j == (i + 1) % apps { q } else { boundary + q };
                            msg(&mut out, i, from, j, from);
                        }
                    }
                }
            }
        }
        "ocean" => {
            // A square grid of pages, rows of `row` pages; the boundary is a column.
            let row = (n as f64).sqrt() as u64;
            let rows = n / row.max(1);
            'iters: loop {
                for i in 0..apps {
                    for (j, col) in [((i + 1) % apps, row - 1), ((i + apps - 1) % apps, 0)] {
                        for r in 0..rows {
                            if out.len() as u64 >= 2 * s.messages {
                                break 'iters;
                            }
                            msg(&mut out, i, r * row + col, j, r * row + (row - 1 - col));
                        }
                    }
                }
            }
        }
        _ => return None,
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            apps: 4,
            pages: 64,
            messages: 500,
        }
    }

    #[test]
    fn every_workload_makes_a_send_and_a_receive_per_message_within_its_regions() {
        for w in WORKLOADS {
            let t = trace(w, shape()).unwrap();
            assert_eq!(t.len(), 1000, "{w}");
            for pair in t.chunks(2) {
                assert_eq!(pair[0].access, Access::Read, "{w}");
                assert_eq!(pair[1].access, Access::Write, "{w}");
                assert_eq!(pair[0].page >> 32, 0, "{w}: sends from region 0");
                assert_eq!(pair[1].page >> 32, 1, "{w}: receives into region 1");
                assert!(
                    pair.iter()
                        .all(|r| r.page & 0xffff_ffff < 64 && r.app.0 < 4),
                    "{w}"
                );
                assert_ne!(pair[0].app, pair[1].app, "{w}: to another application");
            }
        }
        assert!(trace("nbody", shape()).is_none());
    }

    #[test]
    fn the_shapes_differ_as_their_programs_do() {
        let distinct = |w| {
            let mut pages: Vec<_> = trace(w, shape())
                .unwrap()
                .iter()
                .map(|r| (r.app, r.page))
                .collect();
            pages.sort();
            pages.dedup();
            pages.len()
        };
        assert!(
            distinct("water") < distinct("fft"),
            "water reuses a few pages"
        );
        assert!(distinct("radix") > distinct("water"));
    }
}
