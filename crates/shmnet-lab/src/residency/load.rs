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
    /// The walk's running value (what each block is incremented by).
    acc: u64,
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
            acc: 0,
            touched: 0,
        })
    }

    /// Walks `message` word by word, touching one random block per word; each block is
    /// recorded in `trace`, if given.
    pub fn on_message(&mut self, message: &[u8], trace: Option<&mut super::trace::Tracer>) {
        self.on_words(message, 0..Self::words(message.len()), trace);
    }

    /// The 8-byte words of a `len`-byte message (the last one may be short).
    pub fn words(len: usize) -> usize {
        len.div_ceil(8)
    }

    /// As [`Load::on_message`], for the message's words in `words` only: a walk done in
    /// pieces (with the device's interrupts between them) touches what one walk would.
    pub fn on_words(
        &mut self,
        message: &[u8],
        words: std::ops::Range<usize>,
        mut trace: Option<&mut super::trace::Tracer>,
    ) {
        let base = self.state.ptr();
        // Carried from piece to piece of one message, as through one walk.
        let mut acc = if words.start == 0 { 0 } else { self.acc };
        let end = words.end.min(Self::words(message.len()));
        for w in message.chunks(8).take(end).skip(words.start) {
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
        self.acc = acc;
        std::hint::black_box(acc);
    }
}

/// The state block at which walking one `size`-byte message takes `budget` on this machine,
/// measured now (each block size timed over three walks, median; doubling from 8 bytes
/// until a walk takes the budget, then linear between the last two sizes): the load at which
/// a receiver given `budget` per message starts to fall behind. At most `max_block`.
pub fn knee(
    size: usize,
    range: usize,
    budget: std::time::Duration,
    max_block: usize,
) -> Result<usize, MapError> {
    let message = vec![1u8; size];
    let time = |block: usize| -> Result<f64, MapError> {
        let mut load = Load::new(block, range)?;
        load.on_message(&message, None);
        let mut t: Vec<f64> = (0..3)
            .map(|_| {
                let t0 = std::time::Instant::now();
                load.on_message(&message, None);
                t0.elapsed().as_secs_f64()
            })
            .collect();
        Ok(crate::tsc::median(&mut t))
    };
    let want = budget.as_secs_f64();
    let (mut lo, mut t_lo) = (8usize, time(8)?);
    if t_lo >= want {
        return Ok(8);
    }
    while lo < max_block {
        let hi = (lo * 2).min(max_block);
        let t_hi = time(hi)?;
        if t_hi >= want {
            let f = ((want - t_lo) / (t_hi - t_lo).max(f64::MIN_POSITIVE)).clamp(0.0, 1.0);
            let at = lo as f64 + f * (hi - lo) as f64;
            return Ok(((at / 8.0).round() as usize * 8).clamp(8, max_block));
        }
        (lo, t_lo) = (hi, t_hi);
    }
    Ok(max_block)
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

    /// A budget no walk reaches gives the largest block; one every walk exceeds, the
    /// smallest; one in between, a block in between (whatever this machine's speed).
    #[test]
    fn the_knee_lies_where_a_walk_takes_the_budget() {
        use std::time::Duration;
        assert_eq!(
            knee(1000, 1 << 20, Duration::from_secs(60), 4096).unwrap(),
            4096
        );
        assert_eq!(knee(1000, 1 << 20, Duration::ZERO, 4096).unwrap(), 8);
        let k = knee(1000, 1 << 20, Duration::from_micros(50), 1 << 20).unwrap();
        assert!((8..=1 << 20).contains(&k) && k % 8 == 0, "{k}");
    }

    /// A walk in pieces touches the blocks one walk would, in the same order.
    #[test]
    fn a_walk_in_pieces_touches_what_one_walk_does() {
        let msg: Vec<u8> = (0..=255).collect();
        let (mut whole, mut pieces) = (
            Load::new(64, 1 << 14).unwrap(),
            Load::new(64, 1 << 14).unwrap(),
        );
        whole.on_message(&msg, None);
        for r in [0..5, 5..17, 17..40] {
            pieces.on_words(&msg, r, None);
        }
        assert_eq!(pieces.touched, 32);
        assert_eq!(whole.touched, 32);
        // SAFETY: both regions are 16 KiB, mapped and ours.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(whole.state.ptr(), 1 << 14),
                std::slice::from_raw_parts(pieces.state.ptr(), 1 << 14),
            )
        };
        assert_eq!(a, b, "the same blocks, incremented alike");
    }
}
