//! shmnet's compact binary trace format.
//!
//! ```text
//! offset  size  field
//! header (16 bytes)
//!      0     8  magic "SHMTRC01" (ASCII)
//!      8     2  version, u16 little-endian = 1
//!     10     2  record size in bytes, u16 little-endian = 12
//!     12     4  flags, u32 little-endian = 0 (reserved; readers reject other values)
//! records (12 bytes each), from offset 16 to the end of the input
//!     +0     1  party: 0 driver/sender, 1 stack/server, 2 application, 3 load generator, 4 other
//!     +1     1  op: 0 read, 1 write, 2 instruction fetch, 3 clean, 4 clean and invalidate,
//!                5 invalidate, 6 clean all (cache maintenance; see `Op`)
//!     +2     2  size in bytes, u16 little-endian, >= 1
//!     +4     8  address, u64 little-endian
//! ```
//!
//! A reference larger than 65,535 bytes is written as consecutive records of at most that
//! many bytes ([`TraceWriter::write`] splits it). The input ends after the last whole record;
//! a partial record at the end, an unknown party or op, or a zero size is an error naming the
//! record's byte offset.
//!
//! Ops 3–6 (cache maintenance) were added without a new version: a trace without them reads
//! the same as before, and a reader that predates them refuses one that has them, naming the
//! record. A clean-all record's address and size are ignored (the size must still be >= 1).

use std::io::{self, BufWriter, Read, Write};

use super::{Op, Party, Ref, TraceError, TraceSource};

/// The first 8 bytes of every binary trace.
pub const MAGIC: &[u8; 8] = b"SHMTRC01";
/// The format version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Bytes in the header.
pub const HEADER_BYTES: usize = 16;
/// Bytes in a record.
pub const RECORD_BYTES: usize = 12;

/// The header's bytes.
pub fn header() -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&(RECORD_BYTES as u16).to_le_bytes());
    h
}

/// Encodes one record (`size` must be 1..=65535).
pub fn encode(party: Party, op: Op, addr: u64, size: u16) -> [u8; RECORD_BYTES] {
    let mut r = [0u8; RECORD_BYTES];
    r[0] = party as u8;
    r[1] = op.code();
    r[2..4].copy_from_slice(&size.to_le_bytes());
    r[4..12].copy_from_slice(&addr.to_le_bytes());
    r
}

/// Writes a binary trace to any [`Write`], buffered.
pub struct TraceWriter<W: Write> {
    out: BufWriter<W>,
    records: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header and returns the writer.
    pub fn new(inner: W) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 20, inner);
        out.write_all(&header())?;
        Ok(TraceWriter { out, records: 0 })
    }

    /// Appends a reference of `size` bytes at `addr` (split into records of at most 65,535
    /// bytes; a zero size writes nothing).
    pub fn write(&mut self, party: Party, op: Op, addr: u64, size: u64) -> io::Result<()> {
        let (mut addr, mut left) = (addr, size);
        while left > 0 {
            let n = left.min(u64::from(u16::MAX));
            self.out.write_all(&encode(party, op, addr, n as u16))?;
            self.records += 1;
            addr = addr.wrapping_add(n);
            left -= n;
        }
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes and returns the inner writer.
    pub fn finish(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
}

/// A streaming reader of binary traces.
pub struct BinaryReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Unread bytes are `buf[start..len]`.
    start: usize,
    len: usize,
    /// Input offset of `buf[start]`.
    offset: u64,
    eof: bool,
}

/// Bytes read at a time: about 256 KiB of whole records, small enough that each read's
/// copy stays in a core's cache next to the simulator's own state (a 1 MiB buffer can evict
/// it on every read) and large enough that system calls are few.
const CHUNK: usize = RECORD_BYTES * 21_845;

impl<R: Read> BinaryReader<R> {
    /// Reads and checks the header.
    pub fn new(mut inner: R) -> Result<Self, TraceError> {
        let mut h = [0u8; HEADER_BYTES];
        let mut got = 0;
        while got < HEADER_BYTES {
            match inner.read(&mut h[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let bad = |detail: String| TraceError::Bad {
            format: "shmnet",
            offset: 0,
            line: None,
            detail,
        };
        if got < HEADER_BYTES {
            return Err(bad(format!(
                "only {got} bytes: a binary trace starts with a {HEADER_BYTES}-byte header"
            )));
        }
        if &h[..8] != MAGIC {
            return Err(bad(
                "no SHMTRC01 magic: not a shmnet binary trace (give --format din or lackey for text)"
                    .into(),
            ));
        }
        let version = u16::from_le_bytes([h[8], h[9]]);
        let rec = u16::from_le_bytes([h[10], h[11]]);
        let flags = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
        if version != VERSION || usize::from(rec) != RECORD_BYTES || flags != 0 {
            return Err(bad(format!(
                "version {version}, record size {rec}, flags {flags:#x}: this reader knows version {VERSION} with {RECORD_BYTES}-byte records and no flags"
            )));
        }
        Ok(BinaryReader {
            inner,
            buf: vec![0; CHUNK],
            start: 0,
            len: 0,
            offset: HEADER_BYTES as u64,
            eof: false,
        })
    }

    /// Moves the unread bytes (less than a record) to the front and reads until the buffer
    /// is full or the input ends.
    fn fill(&mut self) -> Result<(), TraceError> {
        self.buf.copy_within(self.start..self.len, 0);
        self.len -= self.start;
        self.start = 0;
        while !self.eof && self.len < self.buf.len() {
            match self.inner.read(&mut self.buf[self.len..]) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.len += n;
                    if self.len >= RECORD_BYTES * 4096 {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl<R: Read> BinaryReader<R> {
    /// Consumes up to `max` whole records, all checked valid, and returns their bytes (empty
    /// at the end of the input). An invalid record is the error [`decode`] gives for it, and
    /// then nothing is consumed; a partial record at the end is an error too.
    fn take_records(&mut self, max: usize) -> Result<&[u8], TraceError> {
        if self.len - self.start < RECORD_BYTES {
            self.fill()?;
        }
        let avail = self.len - self.start;
        let whole = (avail / RECORD_BYTES).min(max);
        if whole == 0 {
            if avail > 0 {
                return Err(TraceError::Bad {
                    format: "shmnet",
                    offset: self.offset,
                    line: None,
                    detail: format!(
                        "truncated record: {avail} of {RECORD_BYTES} bytes before the end"
                    ),
                });
            }
            return Ok(&[]);
        }
        let (start, used) = (self.start, whole * RECORD_BYTES);
        let records = &self.buf[start..start + used];
        // One branch-free pass to check them all; only if one is bad, `decode` finds the
        // first and names it, as decoding one record at a time would.
        let valid = all_valid(records);
        if !valid {
            for (i, r) in records.chunks_exact(RECORD_BYTES).enumerate() {
                decode(r, self.offset + (i * RECORD_BYTES) as u64)?;
            }
        }
        self.start += used;
        self.offset += used as u64;
        Ok(&self.buf[start..start + used])
    }
}

/// Records checked at a time by [`all_valid`]: 48 bytes, a whole number of 16-byte vectors.
const GROUP: usize = 4;

/// Per byte of a group of [`GROUP`] records, the largest valid value: 4 for a party,
/// [`Op::MAX_CODE`] for an op, 255 (anything) elsewhere.
const LIMIT: [u8; GROUP * RECORD_BYTES] = {
    let mut t = [u8::MAX; GROUP * RECORD_BYTES];
    let mut i = 0;
    while i < GROUP {
        t[i * RECORD_BYTES] = 4;
        t[i * RECORD_BYTES + 1] = Op::MAX_CODE;
        i += 1;
    }
    t
};

/// Per 16-bit little-endian word of a group of [`GROUP`] records, all ones for a size (bytes
/// 2 and 3 of a record), 0 elsewhere.
const SIZE_WORD: [u16; GROUP * RECORD_BYTES / 2] = {
    let mut t = [0; GROUP * RECORD_BYTES / 2];
    let mut i = 0;
    while i < GROUP {
        t[i * RECORD_BYTES / 2 + 1] = u16::MAX;
        i += 1;
    }
    t
};

/// Whether every record of `records` (whole records) [`is_valid`].
///
/// Exact: groups of [`GROUP`] records are checked byte by byte against [`LIMIT`] (a byte
/// over its limit leaves a non-zero saturating difference) and word by word for zero
/// sizes ([`SIZE_WORD`] selects them), which is `is_valid` of each record of the group,
/// in a form the compiler vectorises; the records left over are checked one by one.
fn all_valid(records: &[u8]) -> bool {
    const BYTES: usize = GROUP * RECORD_BYTES;
    let groups = records.chunks_exact(BYTES);
    let rest = groups.remainder();
    // Accumulated lane by lane and reduced once at the end, so that the loop is a few
    // vector operations per group.
    let (mut over, mut zero) = ([0u8; BYTES], [0u16; BYTES / 2]);
    for g in groups {
        let g: &[u8; BYTES] = g.try_into().expect("a whole group");
        for j in 0..BYTES {
            over[j] |= g[j].saturating_sub(LIMIT[j]);
        }
        let words: [u16; BYTES / 2] =
            std::array::from_fn(|k| u16::from_le_bytes([g[2 * k], g[2 * k + 1]]));
        for k in 0..BYTES / 2 {
            zero[k] |= u16::from((words[k] | !SIZE_WORD[k]) == 0);
        }
    }
    over.iter().all(|&b| b == 0)
        && zero.iter().all(|&z| z == 0)
        && rest
            .chunks_exact(RECORD_BYTES)
            .fold(true, |ok, r| ok & is_valid(r))
}

/// Whether a record (`r.len() == RECORD_BYTES`) is valid: known party and op, size not 0.
#[inline(always)]
fn is_valid(r: &[u8]) -> bool {
    // `&`, not `&&`: no branches.
    (r[0] <= 4) & (r[1] <= Op::MAX_CODE) & ((r[2] | r[3]) != 0)
}

/// Decodes one record at input offset `offset`.
#[inline]
fn decode(r: &[u8], offset: u64) -> Result<Ref, TraceError> {
    let bad = |detail: String| TraceError::Bad {
        format: "shmnet",
        offset,
        line: None,
        detail,
    };
    let party =
        Party::from_code(r[0]).ok_or_else(|| bad(format!("party {} is not 0..=4", r[0])))?;
    let op = Op::from_code(r[1])
        .ok_or_else(|| bad(format!("op {} is not 0..={}", r[1], Op::MAX_CODE)))?;
    let size = u16::from_le_bytes([r[2], r[3]]);
    if size == 0 {
        return Err(bad("size 0".into()));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&r[4..12]);
    Ok(Ref {
        party,
        op,
        size: u32::from(size),
        addr: u64::from_le_bytes(a),
    })
}

/// What `next_batch` sizes its output with before decoding over it.
const PLACEHOLDER: Ref = Ref {
    party: Party::Other,
    op: Op::Read,
    size: 1,
    addr: 0,
};

/// A party for every byte: the party of that code, anything for invalid codes (a table, so
/// that decoding does not branch).
const PARTY_OF: [Party; 256] = {
    let mut t = [Party::Other; 256];
    let mut i = 0;
    while i < Party::ALL.len() {
        t[i] = Party::ALL[i];
        i += 1;
    }
    t
};

/// An op for every byte: the op of that code, anything for invalid codes.
const OP_OF: [Op; 256] = {
    let mut t = [Op::Read; 256];
    let mut i = 0;
    while i < Op::ALL.len() {
        t[i] = Op::ALL[i];
        i += 1;
    }
    t
};

/// Decodes a record (`r.len() == RECORD_BYTES`) that [`is_valid`]: the same reference as
/// [`decode`], without branching (table lookups for the party and the op).
#[inline(always)]
pub(crate) fn decode_valid(r: &[u8]) -> Ref {
    let r: &[u8; RECORD_BYTES] = r.try_into().expect("a whole record");
    let [party, op, s0, s1, a @ ..] = *r;
    Ref {
        party: PARTY_OF[usize::from(party)],
        op: OP_OF[usize::from(op)],
        size: u32::from(u16::from_le_bytes([s0, s1])),
        addr: u64::from_le_bytes(a),
    }
}

impl<R: Read> TraceSource for BinaryReader<R> {
    fn next_batch(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<(), TraceError> {
        out.clear();
        let records = self.take_records(max)?;
        // Sized first, then overwritten: no length update or capacity check per record.
        out.resize(records.len() / RECORD_BYTES, PLACEHOLDER);
        for (dst, r) in out.iter_mut().zip(records.chunks_exact(RECORD_BYTES)) {
            *dst = decode_valid(r);
        }
        Ok(())
    }

    fn next_records(&mut self, max: usize) -> Option<Result<&[u8], TraceError>> {
        Some(self.take_records(max))
    }

    fn bytes_read(&self) -> u64 {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_valid_agrees_with_is_valid_record_by_record() {
        // Runs of 0 to 13 records (whole groups and remainders), valid ones with one byte
        // of the header changed at random, against the plain check of each record.
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let n = rng.usize(..14);
            let mut bytes = Vec::new();
            for _ in 0..n {
                let size = rng.u16(1..);
                let party = Party::ALL[rng.usize(..5)];
                let op = OP_OF[rng.usize(..Op::ALL.len())];
                bytes.extend_from_slice(&encode(party, op, rng.u64(..), size));
            }
            if n > 0 && rng.bool() {
                let at = rng.usize(..n) * RECORD_BYTES + rng.usize(..4);
                bytes[at] = match rng.u32(..4) {
                    0 => 0,
                    1 => rng.u8(..8),
                    _ => rng.u8(..),
                };
            }
            let expected = bytes
                .chunks_exact(RECORD_BYTES)
                .fold(true, |ok, r| ok & is_valid(r));
            assert_eq!(all_valid(&bytes), expected, "{bytes:?}");
        }
    }
}
