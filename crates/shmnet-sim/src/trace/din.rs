//! Dinero IV's `din` / `D` format: one reference per line, `label hexaddr [hexsize]`.
//!
//! `label` is `0` (data read), `1` (data write) or `2` (instruction fetch); `hexaddr` is a
//! hex address of up to 64 bits (an optional `0x` is accepted); `hexsize`, optional, is the
//! size in bytes in hex (Dinero's `D` format). Without it a reference is 1 byte, so it
//! touches one line. Fields are separated by spaces or tabs; blank lines are skipped. Labels
//! 3 (Dinero's "escape") and 4 ("flush") are not supported: they are an error naming the
//! line. A reference spanning several lines touches each of them.
//!
//! shmnet's cache-maintenance ops ([`Op::Clean`] and the others, codes 3–6) have no label
//! here (Dinero's 3 and 4 mean something else): they are refused when read, and
//! [`write_ref`] refuses to write them. Use the binary format for traces that have them.

use std::io::{self, Read, Write};

use super::{Lines, Op, Party, Ref, TraceError, TraceSource, parse_hex};

/// Parses one line into a reference (`Ok(None)` for a blank line).
pub fn parse_line(line: &str) -> Result<Option<Ref>, String> {
    parse_bytes(line.as_bytes())
}

fn parse_bytes(line: &[u8]) -> Result<Option<Ref>, String> {
    let mut f = line
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|s| !s.is_empty());
    let Some(label) = f.next() else {
        return Ok(None);
    };
    let op = match label {
        b"0" => Op::Read,
        b"1" => Op::Write,
        b"2" => Op::Ifetch,
        other => {
            return Err(format!(
                "label {:?} is not 0 (read), 1 (write) or 2 (instruction fetch)",
                String::from_utf8_lossy(other)
            ));
        }
    };
    let addr = f.next().ok_or("no address after the label")?;
    let addr = parse_hex(addr).ok_or_else(|| {
        format!(
            "{:?} is not a hex address of at most 64 bits",
            String::from_utf8_lossy(addr)
        )
    })?;
    let size = match f.next() {
        None => 1,
        Some(s) => {
            let v = parse_hex(s)
                .filter(|&v| (1..=u64::from(u32::MAX)).contains(&v))
                .ok_or_else(|| {
                    format!(
                        "{:?} is not a hex size between 1 and ffffffff",
                        String::from_utf8_lossy(s)
                    )
                })?;
            v as u32
        }
    };
    if f.next().is_some() {
        return Err("more than three fields".into());
    }
    Ok(Some(Ref {
        party: Party::Other,
        op,
        size,
        addr,
    }))
}

/// A streaming reader of Dinero traces.
pub struct DinReader<R> {
    lines: Lines<R>,
}

impl<R: Read> DinReader<R> {
    /// Reads from `inner` (buffered internally).
    pub fn new(inner: R) -> Self {
        DinReader {
            lines: Lines::new(inner),
        }
    }
}

impl<R: Read> TraceSource for DinReader<R> {
    fn next_batch(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<(), TraceError> {
        out.clear();
        while out.len() < max {
            let Some((line, offset)) = self.lines.next_line("din")? else {
                break;
            };
            match parse_bytes(line) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => {}
                Err(detail) => {
                    return Err(TraceError::Bad {
                        format: "din",
                        offset,
                        line: Some(self.lines.line_no),
                        detail,
                    });
                }
            }
        }
        Ok(())
    }

    fn bytes_read(&self) -> u64 {
        self.lines.offset
    }
}

/// Writes one reference as a `D` line: `label hexaddr hexsize`. A maintenance op (which the
/// format cannot say) is an [`io::ErrorKind::InvalidInput`] error.
pub fn write_ref(w: &mut impl Write, op: Op, addr: u64, size: u32) -> io::Result<()> {
    if op.is_maintenance() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a Dinero trace cannot hold the maintenance op {:?}; write a shmnet binary trace",
                op.name()
            ),
        ));
    }
    writeln!(w, "{} {:x} {:x}", op.code(), addr, size)
}
