//! The residency probe: a [`RecvHook`] that times the load of every buffer at copy-out.
//!
//! For each buffer the application is about to copy, the probe (optionally) forces the
//! buffer's page into the TLB, then times [`mem::load`] of the buffer's bytes twice: the
//! first window is the measurement, the second — the data now in L1 — is the in-cache cost
//! of the same load at the same address, taken in the same conditions. The summary subtracts
//! the median of the second windows (per buffer length) from each first window: what remains
//! is the seed's "overhead": the ticks the load took beyond what it would take from the
//! cache, timer overhead included in both and so cancelled.
//!
//! The probe records into a vector reserved before the run, so recording allocates nothing
//! and touches one small slot per buffer; samples beyond the reservation are counted, not
//! kept.

use crate::mem::{self, LINE};
use crate::tsc;
use shmnet_stack::{BufIdx, RecvHook};

/// One timed buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// Its place in its message (0: the first data buffer).
    pub position: u16,
    /// Bytes loaded.
    pub len: u32,
    /// Ticks of the first (measured) load, timer overhead included.
    pub cold: u32,
    /// Ticks of the immediate second load (in L1), timer overhead included.
    pub hot: u32,
}

/// The probe. Serializable, so that a probe run in the server's process (around its copies
/// into an isolated application's buffers) can be brought back whole.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    samples: Vec<Sample>,
    position: u16,
    tlb_force: bool,
    /// Buffers whose page could not be forced: no line of the page was free of their data.
    pub unforced: u64,
    /// Buffers timed after the reservation was full (not kept).
    pub unrecorded: u64,
    /// Messages completed ([`Probe::end_message`]).
    pub messages: u64,
}

impl Probe {
    /// A probe that keeps up to `capacity` samples; `tlb_force` touches each buffer's page
    /// just before timing it.
    pub fn new(capacity: usize, tlb_force: bool) -> Self {
        Self {
            samples: Vec::with_capacity(capacity),
            position: 0,
            tlb_force,
            unforced: 0,
            unrecorded: 0,
            messages: 0,
        }
    }

    /// The next buffer starts a new message.
    pub fn end_message(&mut self) {
        self.position = 0;
        self.messages += 1;
    }

    /// Whether the next buffer is the first of a message.
    pub fn at_message_start(&self) -> bool {
        self.position == 0
    }

    /// The samples so far.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Takes the samples.
    pub fn into_samples(self) -> Vec<Sample> {
        self.samples
    }
}

/// A word to touch to bring the page of `src .. src + len` into the TLB without bringing any
/// of its data into the cache: in a line of the same 4 KiB page that holds none of the data,
/// and whose 128-byte pair line (which adjacent-line prefetchers fetch along) holds none
/// either. The line after the data is tried first, then the lines before it. `None` when the
/// data leaves no such line in its page.
pub fn tlb_force_target(src: usize, len: usize) -> Option<usize> {
    let first = src & !(LINE - 1);
    let last = (src + len.max(1) - 1) & !(LINE - 1);
    let page = src & !4095;
    let holds_data = |line: usize| line >= first && line <= last;
    let usable =
        |line: usize| line & !4095 == page && !holds_data(line) && !holds_data(line ^ LINE);
    let after = (1..=2).map(|k| last + k * LINE);
    let before = (1..=2).filter_map(|k| first.checked_sub(k * LINE));
    after.chain(before).find(|&l| usable(l))
}

impl RecvHook for Probe {
    fn end_message(&mut self) {
        Probe::end_message(self);
    }

    /// Times the load of `data` (see the module's documentation).
    #[inline]
    fn on_buffer(&mut self, _buf: BufIdx, data: &[u8]) {
        let (src, len) = (data.as_ptr(), data.len());
        if self.position == 0 {
            // The instrument's own path (this code, the timer, the sample vector's line)
            // may have gone cold while the receiver slept between messages: run it once on
            // private data first, so that what the first buffer's window measures is the
            // buffer.
            let warm = [0u8; 64];
            let t = tsc::start();
            // SAFETY: `warm` is a live local array.
            unsafe { mem::load(warm.as_ptr(), warm.len()) };
            std::hint::black_box(tsc::stop().wrapping_sub(t));
            if self.samples.len() < self.samples.capacity() {
                // Touch the slot the sample will be written to.
                self.samples.push(Sample {
                    position: 0,
                    len: 0,
                    cold: 0,
                    hot: 0,
                });
                self.samples.pop();
            }
        }
        if self.tlb_force {
            match tlb_force_target(src.expose_provenance(), len) {
                // SAFETY: the target is an 8-aligned word in the same 4 KiB page as `data`,
                // so it is mapped and readable; it lies outside `data`, so it is read through
                // the page's exposed address rather than through the slice.
                Some(t) => unsafe {
                    let word = std::ptr::with_exposed_provenance::<u64>(t);
                    std::hint::black_box(word.read_volatile());
                },
                None => self.unforced += 1,
            }
        }
        let t0 = tsc::start();
        // SAFETY: `src .. src + len` is `data`, a live slice.
        unsafe { mem::load(src, len) };
        let t1 = tsc::stop();
        let t2 = tsc::start();
        // SAFETY: as above.
        unsafe { mem::load(src, len) };
        let t3 = tsc::stop();
        let sample = Sample {
            position: self.position,
            len: len as u32,
            cold: t1.wrapping_sub(t0).min(u32::MAX as u64) as u32,
            hot: t3.wrapping_sub(t2).min(u32::MAX as u64) as u32,
        };
        if self.samples.len() < self.samples.capacity() {
            self.samples.push(sample);
        } else {
            self.unrecorded += 1;
        }
        self.position = self.position.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tlb_target_shares_no_line_or_pair_with_the_data() {
        // A 1,480-byte fragment 34 bytes into a 2 KiB buffer at the start of a page.
        let page = 0x10_0000;
        let src = page + 34;
        let t = tlb_force_target(src, 1480).unwrap();
        assert_eq!(t & !4095, page);
        assert!(t >= (src + 1480).next_multiple_of(64) || t + 128 <= src & !63);
        // The second buffer of the page: the line after its data is still in the page.
        let src2 = page + 2048 + 34;
        let t2 = tlb_force_target(src2, 1480).unwrap();
        assert_eq!(t2 & !4095, page);
        assert!(t2 + 64 <= (src2 & !63) - 64 || t2 >= src2 + 1480);
        // A buffer that fills its page leaves nothing.
        assert_eq!(tlb_force_target(page, 4096), None);
    }

    #[test]
    fn every_buffer_is_timed_and_placed_in_its_message() {
        let data = vec![7u8; 3000];
        let mut p = Probe::new(3, false);
        for chunk in data.chunks(1000) {
            p.on_buffer(BufIdx(0), chunk);
        }
        p.end_message();
        p.on_buffer(BufIdx(0), &data[..10]);
        assert_eq!(p.unrecorded, 1, "the fourth sample did not fit");
        let pos: Vec<u16> = p.samples().iter().map(|s| s.position).collect();
        assert_eq!(pos, [0, 1, 2]);
        assert!(p.samples().iter().all(|s| s.cold > 0 && s.len == 1000));
        assert_eq!(p.messages, 1);
    }
}
