//! The seed's synthetic application: for each word of a received message, touch a randomly
//! chosen block of state — "any program that accesses more data than it reads".
//!
//! The blocks are `block` bytes, aligned to their size and spread evenly over a range of
//! `range` bytes. The seed's range was 256 KiB, its whole data cache; here it defaults to the
//! last-level cache ([`crate::cacheinfo::Sizes::llc`]), so that the state is spread over the
//! cache the packet data must survive in. Touching a block reads and increments each of its
//! 8-byte words (state is updated, so the lines become dirty, as a compiler's or linker's
//! do). A word is 8 bytes.

use crate::mem::{MapError, Paging, Region};

/// The load generator.
pub struct Load {
    state: Region,
    blocks: usize,
    block: usize,
    rng: fastrand::Rng,
    /// Blocks touched so far.
    pub touched: u64,
}

impl Load {
    /// State blocks of `block` bytes (at least 8) over `range` bytes; a fixed seed, so runs
    /// are repeatable.
    pub fn new(block: usize, range: usize) -> Result<Self, MapError> {
        let block = block.max(8).next_multiple_of(8);
        let range = range.max(block);
        Ok(Self {
            state: Region::new(range, Paging::Small)?,
            blocks: range / block,
            block,
            rng: fastrand::Rng::with_seed(0x5eed),
            touched: 0,
        })
    }

    /// Walks `message` word by word, touching one random block per word; each block is
    /// recorded in `trace`, if given.
    pub fn on_message(&mut self, message: &[u8], mut trace: Option<&mut super::trace::Tracer>) {
        let base = self.state.ptr();
        let mut acc = 0u64;
        for w in message.chunks(8) {
            acc ^= u64::from(w[0]);
            let at = self.rng.usize(..self.blocks) * self.block;
            for off in (at..at + self.block).step_by(8) {
                // SAFETY: `at + block <= blocks * block <= range <= state.len()`; the state
                // region is ours alone.
                unsafe {
                    let p = base.add(off).cast::<u64>();
                    p.write_volatile(p.read_volatile().wrapping_add(acc | 1));
                }
            }
            self.touched += 1;
            if let Some(t) = trace.as_deref_mut() {
                t.raw(
                    super::trace::Who::Load,
                    true,
                    base as u64 + at as u64,
                    self.block as u32,
                );
            }
        }
        std::hint::black_box(acc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_block_per_word() {
        let mut l = Load::new(24, 1 << 16).unwrap();
        l.on_message(&[1u8; 100], None);
        assert_eq!(l.touched, 13, "100 bytes are 13 words, the last one short");
    }
}
