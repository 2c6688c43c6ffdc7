//! Recording the data path's memory references during a residency run (`shmnet residency
//! --trace FILE`), for the cache simulator to replay.
//!
//! What is recorded is the packet data's path, at the granularity of whole ranges:
//!
//! | party | what |
//! |---|---|
//! | sender | softnic's "DMA": a write of each frame into its buffer |
//! | stack | a read of each frame's headers (Ethernet, IPv4, and UDP in the first fragment), and with checksums on, of all its UDP bytes |
//! | application | the probe's timed read of each data buffer at copy-out (one record per timed buffer, in order), and the write of the copy into the application's buffer |
//! | load | each state block the synthetic application touches (a write: read and increment) |
//!
//! Left out: the stack's own state (reassembly table, socket queues, buffer headers), code,
//! stacks, and the copy's second read of each buffer (a hit after the timed read). The
//! simulator therefore sees the data and nothing else, which is what the residency question
//! is about; what the rest does to the caches is one of the things the validation measures.
//!
//! Records are kept in memory during the run (16 bytes each, reserved in advance where the
//! count is known) and written after it, so that no file I/O lands between a buffer's arrival
//! and its copy-out. Each party keeps its own list; a shared counter orders them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Who made a reference (the codes of the simulator's binary format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Who {
    /// softnic writing frames.
    Sender = 0,
    /// The stack reading headers (and payload, for checksums).
    Stack = 1,
    /// The application's copy-out.
    Application = 2,
    /// The synthetic application's state.
    Load = 3,
}

/// One recorded range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Global order.
    pub seq: u64,
    /// Who.
    pub who: Who,
    /// A store (else a load).
    pub write: bool,
    /// First byte's address (virtual).
    pub addr: u64,
    /// Bytes.
    pub len: u32,
}

/// One party's recorder; clones share the ordering counter.
#[derive(Clone, Debug)]
pub struct Tracer {
    seq: Arc<AtomicU64>,
    records: Vec<Record>,
}

impl Tracer {
    /// A new recorder with its own counter and room for `capacity` records.
    pub fn new(capacity: usize) -> Self {
        Self {
            seq: Arc::new(AtomicU64::new(0)),
            records: Vec::with_capacity(capacity),
        }
    }

    /// Another recorder on the same counter, for another party.
    pub fn sibling(&self, capacity: usize) -> Self {
        Self {
            seq: self.seq.clone(),
            records: Vec::with_capacity(capacity),
        }
    }

    /// Records `data` (its address and length) as read or written by `who`.
    #[inline]
    pub fn range(&mut self, who: Who, write: bool, data: &[u8]) {
        self.raw(who, write, data.as_ptr() as u64, data.len() as u32);
    }

    /// Records a range given by address.
    #[inline]
    pub fn raw(&mut self, who: Who, write: bool, addr: u64, len: u32) {
        if len == 0 {
            return;
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.records.push(Record {
            seq,
            who,
            write,
            addr,
            len,
        });
    }

    /// Takes the records.
    pub fn into_records(self) -> Vec<Record> {
        self.records
    }
}

/// Merges the parties' records into one list in the order they were made.
pub fn merge(parts: Vec<Vec<Record>>) -> Vec<Record> {
    let mut all: Vec<Record> = parts.into_iter().flatten().collect();
    all.sort_unstable_by_key(|r| r.seq);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_share_one_order() {
        let mut a = Tracer::new(4);
        let mut b = a.sibling(4);
        let x = [0u8; 10];
        a.range(Who::Sender, true, &x);
        b.range(Who::Application, false, &x[..4]);
        a.raw(Who::Stack, false, 0x1000, 0);
        a.raw(Who::Stack, false, 0x1000, 34);
        let all = merge(vec![a.into_records(), b.into_records()]);
        let who: Vec<Who> = all.iter().map(|r| r.who).collect();
        assert_eq!(who, [Who::Sender, Who::Application, Who::Stack]);
        assert_eq!(all[1].len, 4);
        assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    }
}
