//! Memory reference traces: the reference type, the three input formats and the binary
//! writer.
//!
//! * [`din`]: Dinero IV's `din`/`D` text format, `label hexaddr [hexsize]`.
//! * [`lackey`]: the output of `valgrind --tool=lackey --trace-mem=yes`.
//! * [`binary`]: shmnet's own compact format (`SHMTRC01`), written by [`TraceWriter`].
//!
//! Every reader streams: it reads its input in chunks, never the whole file, reports the
//! bytes consumed so far through [`TraceSource::bytes_read`], and turns anything it cannot
//! parse into a [`TraceError`] naming the byte offset (and line, for text) — never a panic.

pub mod binary;
pub mod din;
pub mod lackey;

use std::io::{self, Read};

use serde::Serialize;

pub use binary::{BinaryReader, TraceWriter};
pub use din::DinReader;
pub use lackey::LackeyReader;

/// What a reference does: an access (codes 0–2, Dinero's labels) or a cache-maintenance
/// operation (codes 3–6, shmnet's binary format only).
///
/// The maintenance operations act on the data caches (every level of the data path), as a
/// CPU cleans or invalidates lines for a device that does not snoop them (seed 003). Those
/// that take an address act on every line the reference's bytes touch, at each level the
/// line of that level holding the address; none of them allocates, counts as a demand access
/// or changes replacement state. Their costs are the machine's
/// [`MaintenanceConfig`](crate::MaintenanceConfig); see [`sim`](crate::sim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Op {
    /// A data load.
    Read = 0,
    /// A data store.
    Write = 1,
    /// An instruction fetch.
    Ifetch = 2,
    /// Clean: write each line back to memory if it is dirty and keep it valid and clean
    /// (x86 `clwb`, Arm `DC CVAC`).
    Clean = 3,
    /// Clean and invalidate: write each line back if dirty, then discard it (x86 `clflush`,
    /// Arm `DC CIVAC`).
    CleanInvalidate = 4,
    /// Invalidate: discard each line without writing it back, dirty or not (Arm `DC IVAC`;
    /// a device-coherent receive). A dirty line's data is lost (counted).
    Invalidate = 5,
    /// Clean every dirty line of every data cache and keep them valid: the whole-cache clean
    /// of seed 003's Unity, whose cost is `CL_total × R_d` write-backs. The address and size
    /// are ignored.
    CleanAll = 6,
}

impl Op {
    /// Every op, in code order.
    pub const ALL: [Op; 7] = [
        Op::Read,
        Op::Write,
        Op::Ifetch,
        Op::Clean,
        Op::CleanInvalidate,
        Op::Invalidate,
        Op::CleanAll,
    ];

    /// The largest code (see [`code`](Op::code)).
    pub const MAX_CODE: u8 = 6;

    /// The code used by the binary format and, for 0–2, by Dinero's labels: 0 read, 1 write,
    /// 2 fetch, 3 clean, 4 clean and invalidate, 5 invalidate, 6 clean all.
    #[inline(always)]
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The inverse of [`code`](Op::code).
    pub fn from_code(c: u8) -> Option<Op> {
        Op::ALL.get(usize::from(c)).copied()
    }

    /// Whether this is a cache-maintenance operation (code 3 or more), not an access.
    #[inline(always)]
    pub fn is_maintenance(self) -> bool {
        self as u8 > Op::Ifetch as u8
    }

    /// A lower-case name, as serialised (`"read"`, `"clean-invalidate"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Ifetch => "ifetch",
            Op::Clean => "clean",
            Op::CleanInvalidate => "clean-invalidate",
            Op::Invalidate => "invalidate",
            Op::CleanAll => "clean-all",
        }
    }
}

/// Who made a reference (the binary format records it; the text formats say `Other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Party {
    /// The packet driver, or the sender.
    Driver = 0,
    /// The protocol stack, or the server.
    Stack = 1,
    /// The application.
    Application = 2,
    /// The load generator.
    Load = 3,
    /// Anything else.
    Other = 4,
}

impl Party {
    /// Every party, in code order.
    pub const ALL: [Party; 5] = [
        Party::Driver,
        Party::Stack,
        Party::Application,
        Party::Load,
        Party::Other,
    ];

    /// The inverse of `party as u8`.
    pub fn from_code(c: u8) -> Option<Party> {
        Party::ALL.get(usize::from(c)).copied()
    }

    /// A lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Party::Driver => "driver",
            Party::Stack => "stack",
            Party::Application => "application",
            Party::Load => "load",
            Party::Other => "other",
        }
    }
}

/// One memory reference: `size` bytes at `addr`.
///
/// Invariant (kept by every reader): `size >= 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ref {
    /// Who made it.
    pub party: Party,
    /// What it does.
    pub op: Op,
    /// Bytes referenced, at least 1.
    pub size: u32,
    /// The first byte's address.
    pub addr: u64,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Reading failed.
    #[error("reading the trace: {0}")]
    Io(io::Error),
    /// A record or line could not be parsed.
    #[error("{format} trace, byte offset {offset}{}: {detail}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Bad {
        /// The format being read.
        format: &'static str,
        /// Byte offset of the bad record or line from the start of the input.
        offset: u64,
        /// 1-based line number, for the text formats.
        line: Option<u64>,
        /// What is wrong.
        detail: String,
    },
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<io::Error> for TraceError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// A source of references that yields them in batches.
pub trait TraceSource {
    /// Appends up to `max` references to `out` (after clearing it); an empty `out` means the
    /// trace has ended.
    fn next_batch(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<(), TraceError>;
    /// Bytes of input consumed so far.
    fn bytes_read(&self) -> u64;

    /// For a source of shmnet binary records: up to `max` whole records, undecoded and
    /// already checked valid, consumed like [`next_batch`](TraceSource::next_batch) would
    /// (the same records, the same errors); empty at the end. `None`, the default, when the
    /// source cannot do this: use `next_batch`. Lets [`Simulator::run`](crate::Simulator::run)
    /// decode records as it simulates them instead of through a `Vec<Ref>`.
    fn next_records(&mut self, max: usize) -> Option<Result<&[u8], TraceError>> {
        let _ = max;
        None
    }
}

/// The trace formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Dinero IV `din` / `D`.
    Din,
    /// valgrind lackey.
    Lackey,
    /// shmnet binary.
    Shmnet,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s.to_ascii_lowercase().as_str() {
            "din" | "d" | "dinero" => Ok(Format::Din),
            "lackey" | "valgrind" => Ok(Format::Lackey),
            "shmnet" | "binary" | "bin" => Ok(Format::Shmnet),
            _ => Err(format!(
                "unknown trace format {s:?}; use din, lackey or shmnet"
            )),
        }
    }
}

/// Guesses the format of a trace from its first bytes: the binary magic, else the first
/// meaningful text line (`I`, ` L`, ` S`, ` M` lines are lackey; `label address` lines are
/// Dinero). `None` if nothing fits.
pub fn guess_format(head: &[u8]) -> Option<Format> {
    if head.starts_with(binary::MAGIC) {
        return Some(Format::Shmnet);
    }
    let text = String::from_utf8_lossy(head);
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with("==") || line.starts_with("--") {
            continue;
        }
        if lackey::parse_line(line).is_ok() {
            return Some(Format::Lackey);
        }
        if din::parse_line(line).is_ok() {
            return Some(Format::Din);
        }
        return None;
    }
    None
}

/// Opens a reader of `format` over `input`; with `None`, reads up to 4 KiB first and
/// guesses (the bytes read are given back to the reader).
pub fn open(
    mut input: Box<dyn Read + Send>,
    format: Option<Format>,
) -> Result<(Format, Box<dyn TraceSource + Send>), TraceError> {
    let format = match format {
        Some(f) => f,
        None => {
            let mut head = Vec::with_capacity(4096);
            (&mut input).take(4096).read_to_end(&mut head)?;
            let f = guess_format(&head).ok_or_else(|| TraceError::Bad {
                format: "unknown",
                offset: 0,
                line: Some(1),
                detail: "cannot tell the trace format from its first lines; give --format din|lackey|shmnet"
                    .into(),
            })?;
            input = Box::new(io::Cursor::new(head).chain(input));
            f
        }
    };
    let src: Box<dyn TraceSource + Send> = match format {
        Format::Din => Box::new(DinReader::new(input)),
        Format::Lackey => Box::new(LackeyReader::new(input)),
        Format::Shmnet => Box::new(BinaryReader::new(input)?),
    };
    Ok((format, src))
}

/// Reads text lines in chunks for the text formats; `next_line` hands out each line without
/// its end of line, with its byte offset and line number.
pub(crate) struct Lines<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Byte offset of `buf[start]` in the input.
    pub(crate) offset: u64,
    /// Lines handed out so far.
    pub(crate) line_no: u64,
}

/// Longest line accepted (a longer one is an error, not a reason to grow without bound).
const MAX_LINE: usize = 64 * 1024;

impl<R: Read> Lines<R> {
    pub(crate) fn new(inner: R) -> Self {
        Lines {
            inner,
            buf: vec![0; 1 << 20],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            line_no: 0,
        }
    }

    /// The next line (bytes, without `\n` or `\r\n`) and its byte offset, or `None` at the
    /// end of the input.
    pub(crate) fn next_line(
        &mut self,
        format: &'static str,
    ) -> Result<Option<(&[u8], u64)>, TraceError> {
        loop {
            if let Some(nl) = self.buf[self.start..self.end]
                .iter()
                .position(|&b| b == b'\n')
            {
                let s = self.start;
                let off = self.offset;
                self.start += nl + 1;
                self.offset += nl as u64 + 1;
                self.line_no += 1;
                let mut line = &self.buf[s..s + nl];
                if let [rest @ .., b'\r'] = line {
                    line = rest;
                }
                return Ok(Some((line, off)));
            }
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                let (s, e) = (self.start, self.end);
                let off = self.offset;
                self.offset += (e - s) as u64;
                self.start = e;
                self.line_no += 1;
                return Ok(Some((&self.buf[s..e], off)));
            }
            if self.end - self.start >= MAX_LINE {
                return Err(TraceError::Bad {
                    format,
                    offset: self.offset,
                    line: Some(self.line_no + 1),
                    detail: format!("line longer than {MAX_LINE} bytes; is this a text trace?"),
                });
            }
            // Move the partial line to the front and read more.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            let n = loop {
                match self.inner.read(&mut self.buf[self.end..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            if n == 0 {
                self.eof = true;
            }
            self.end += n;
        }
    }
}

/// Parses a hex number with an optional `0x`; `None` if empty, not hex, or over 64 bits.
pub(crate) fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = s
        .strip_prefix(b"0x")
        .or_else(|| s.strip_prefix(b"0X"))
        .unwrap_or(s);
    if s.is_empty() {
        return None;
    }
    let first = s.iter().position(|&b| b != b'0').unwrap_or(s.len());
    let s = &s[first..];
    if s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}
