//! The output of `valgrind --tool=lackey --trace-mem=yes`:
//!
//! ```text
//! ==12345== Lackey, an example Valgrind tool
//! I  04016cc,3
//!  L 1ffefffd78,8
//!  S 04222cac,8
//!  M 0421d3c0,4
//! ```
//!
//! `I` is an instruction fetch, `L` a load, `S` a store, `M` a modify (a load then a store of
//! the same bytes: two references). Addresses and sizes are hex and decimal as lackey prints
//! them (the address is hex; the size decimal). Lines starting with `==` or `--` (valgrind's
//! own messages) and blank lines are skipped; anything else is an error naming the line (run
//! valgrind with `--log-file` so the program's own output does not mix in).

use std::io::Read;

use super::{Lines, Op, Party, Ref, TraceError, TraceSource, parse_hex};

/// What one line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// Nothing to simulate (blank or a valgrind message).
    Skip,
    /// One reference.
    One(Ref),
    /// A modify: a read then a write of the same bytes.
    Modify(Ref),
}

/// Parses one line.
pub fn parse_line(line: &str) -> Result<Line, String> {
    parse_bytes(line.as_bytes())
}

fn parse_bytes(line: &[u8]) -> Result<Line, String> {
    if line.starts_with(b"==") || line.starts_with(b"--") {
        return Ok(Line::Skip);
    }
    let t = line.trim_ascii();
    if t.is_empty() {
        return Ok(Line::Skip);
    }
    let (kind, rest) = t.split_at(1);
    let op = match kind[0] {
        b'I' => Op::Ifetch,
        b'L' | b'M' => Op::Read,
        b'S' => Op::Write,
        _ => {
            return Err(format!(
                "{:?} is not a lackey line (I, L, S or M then address,size)",
                String::from_utf8_lossy(&t[..t.len().min(40)])
            ));
        }
    };
    let rest = rest.trim_ascii();
    let comma = rest
        .iter()
        .position(|&b| b == b',')
        .ok_or("no comma between address and size")?;
    let addr = parse_hex(&rest[..comma]).ok_or("address is not hex")?;
    let size_s = &rest[comma + 1..];
    let size: u32 = std::str::from_utf8(size_s)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&s| s >= 1)
        .ok_or("size is not a decimal number >= 1")?;
    let r = Ref {
        party: Party::Other,
        op,
        size,
        addr,
    };
    Ok(if kind[0] == b'M' {
        Line::Modify(r)
    } else {
        Line::One(r)
    })
}

/// A streaming reader of lackey traces.
pub struct LackeyReader<R> {
    lines: Lines<R>,
}

impl<R: Read> LackeyReader<R> {
    /// Reads from `inner` (buffered internally).
    pub fn new(inner: R) -> Self {
        LackeyReader {
            lines: Lines::new(inner),
        }
    }
}

impl<R: Read> TraceSource for LackeyReader<R> {
    fn next_batch(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<(), TraceError> {
        out.clear();
        while out.len() < max {
            let Some((line, offset)) = self.lines.next_line("lackey")? else {
                break;
            };
            match parse_bytes(line) {
                Ok(Line::Skip) => {}
                Ok(Line::One(r)) => out.push(r),
                Ok(Line::Modify(r)) => {
                    out.push(r);
                    out.push(Ref { op: Op::Write, ..r });
                }
                Err(detail) => {
                    return Err(TraceError::Bad {
                        format: "lackey",
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
