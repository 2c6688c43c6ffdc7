//! `shmnet sim breakdown`: seed 001's breakdowns of the eight rows on one machine (the
//! seed's SGI by default) — time waiting for memory, first-level miss rates, the baseline
//! beside a perfect instruction cache, a perfect data cache and an ideal cache (every
//! reference a first-level hit), and the instruction mix as a share of instructions and of
//! simulated time.
//!
//! The rows are traced as for validation ([`super::rows`]), and the worker also copies its
//! memory map, so that each traced instruction address can be found in its file (the
//! `shmnet` binary, libc) and decoded (iced-x86). An instruction is
//!
//! * **control** if it can change the flow (a branch, taken or not, a call, a return);
//! * else **load/store** if it made a data reference in the trace (on x86 that includes
//!   arithmetic with a memory operand: the seed's RISC had no such instruction);
//! * else **other** if it only moves or waits (register moves, conditional moves, `nop`,
//!   `endbr64`, fences, `vzeroupper`);
//! * else **arithmetic** (integer, logic, shifts, `lea`, compares, vector arithmetic).
//!
//! An instruction's time is its fetch and its data references on the machine, in order.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use clap::Args;
use shmnet_sim::{Machine, Op, Options, Side, Simulator};
use shmnet_stack::rows::{MESSAGE_BYTES, RowSpec};

use super::rows::{self, Event, Markers, Steps};

#[derive(Args)]
pub struct BreakdownArgs {
    #[command(flatten)]
    machine: rows::MachineArg,
    #[command(flatten)]
    common: rows::RowsArgs,
}

/// An instruction's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Makes a data reference.
    LoadStore,
    /// Computes.
    Arithmetic,
    /// Can change the flow.
    Control,
    /// Moves or waits.
    Other,
    /// Not found in a mapped file, or not decodable.
    Unknown,
}

impl Class {
    const ALL: [Class; 5] = [
        Class::LoadStore,
        Class::Arithmetic,
        Class::Control,
        Class::Other,
        Class::Unknown,
    ];
}

/// One class's share.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Share {
    /// The class.
    pub class: Class,
    /// Percent of the row's instructions.
    pub pct_instructions: f64,
    /// Percent of its simulated ticks (fetch and data references).
    pub pct_ticks: f64,
}

/// One row's breakdown, per message.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RowBreakdown {
    /// `tcp-send-cksum-off`, …
    pub row: String,
    /// Instructions.
    pub instructions: f64,
    /// Data references.
    pub data_refs: f64,
    /// Ticks on the machine as it is.
    pub ticks: f64,
    /// With every instruction fetch a first-level hit.
    pub perfect_icache_ticks: f64,
    /// With every data reference a first-level hit.
    pub perfect_dcache_ticks: f64,
    /// With both.
    pub ideal_ticks: f64,
    /// `100 × (ticks − ideal) / ticks`: time waiting for memory.
    pub memory_pct: f64,
    /// First-level instruction misses per access in the row.
    pub l1i_miss_rate: f64,
    /// First-level data misses per access in the row.
    pub l1d_miss_rate: f64,
    /// The instruction mix.
    pub mix: Vec<Share>,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Breakdown {
    /// The machine.
    pub machine: String,
    /// What a tick is.
    pub tick_unit: String,
    /// The rows.
    pub rows: Vec<RowBreakdown>,
    /// Message bytes.
    pub bytes: usize,
    /// Messages per row.
    pub steps: Steps,
}

/// A mapping of `/proc/self/maps`: addresses `start..end` are `path` from `offset`.
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
}

fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let range = f.next()?;
            let _perms = f.next()?;
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let _dev = f.next()?;
            let _inode = f.next()?;
            let path = f.next()?.to_string();
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                offset,
                path,
            })
        })
        .filter(|m| m.path.starts_with('/'))
        .collect()
}

/// Reads the code at each address from the mapped files and classes it.
fn classify_all(addrs: &HashMap<u64, Instr>, maps: &[Mapping]) -> HashMap<u64, Class> {
    use std::os::unix::fs::FileExt;
    let mut files: HashMap<&str, Option<std::fs::File>> = HashMap::new();
    let mut out = HashMap::with_capacity(addrs.len());
    for (&addr, ins) in addrs {
        let class = maps
            .iter()
            .find(|m| m.start <= addr && addr < m.end)
            .and_then(|m| {
                let file = files
                    .entry(m.path.as_str())
                    .or_insert_with(|| std::fs::File::open(&m.path).ok())
                    .as_ref()?;
                let mut bytes = [0u8; 16];
                let n = file.read_at(&mut bytes, m.offset + (addr - m.start)).ok()?;
                decode_class(&bytes[..n], addr, ins.touches_memory)
            })
            .unwrap_or(Class::Unknown);
        out.insert(addr, class);
    }
    out
}

/// The class of the instruction at the start of `bytes` (at `ip`).
fn decode_class(bytes: &[u8], ip: u64, touches_memory: bool) -> Option<Class> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl};
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let ins = d.decode();
    if ins.is_invalid() {
        return None;
    }
    Some(if ins.flow_control() != FlowControl::Next {
        Class::Control
    } else if touches_memory {
        Class::LoadStore
    } else if moves_or_waits(&format!("{:?}", ins.mnemonic())) {
        Class::Other
    } else {
        Class::Arithmetic
    })
}

/// Mnemonics that only move data between registers or wait.
fn moves_or_waits(m: &str) -> bool {
    [
        "Mov", "Vmov", "Cmov", "Nop", "Endbr", "Xchg", "Lfence", "Sfence", "Mfence", "Pause",
        "Vzero", "Prefetch", "Cpuid", "Rdtsc",
    ]
    .iter()
    .any(|p| m.starts_with(p))
}

/// What the trace says of one instruction address inside the rows' windows.
#[derive(Default, Clone, Copy)]
struct Instr {
    count: u64,
    ticks: f64,
    touches_memory: bool,
}

/// The four simulators of the breakdown.
struct Four {
    base: Simulator,
    perfect_i: Simulator,
    perfect_d: Simulator,
    ideal: Simulator,
}

fn l1_counts(sim: &Simulator, side: Side) -> (u64, u64) {
    sim.machine()
        .caches
        .iter()
        .filter(|c| c.level == 1 && (c.side == side || c.side == Side::Unified))
        .filter_map(|c| sim.cache_stats(&c.name))
        .fold((0, 0), |(a, m), s| (a + s.accesses(), m + s.misses))
}

/// Simulates one row's trace on `machine` four ways and classes its instructions.
fn break_down(
    spec: RowSpec,
    steps: Steps,
    log: &Path,
    markers: Markers,
    maps: &[Mapping],
    machine: &Machine,
) -> Result<RowBreakdown> {
    let opts = |i, d| Options {
        perfect_icache: i,
        perfect_dcache: d,
        ..Options::default()
    };
    let mut four = Four {
        base: Simulator::with_options(machine, opts(false, false))?,
        perfect_i: Simulator::with_options(machine, opts(true, false))?,
        perfect_d: Simulator::with_options(machine, opts(false, true))?,
        ideal: Simulator::with_options(machine, opts(true, true))?,
    };
    let mut ticks = [0.0f64; 4];
    let (mut n_instr, mut n_data) = (0u64, 0u64);
    let mut instrs: HashMap<u64, Instr> = HashMap::new();
    let mut current: Option<u64> = None;
    let (mut i_acc, mut i_miss, mut d_acc, mut d_miss) = (0u64, 0u64, 0u64, 0u64);
    let mut at_begin = [(0u64, 0u64); 2];
    let windows = rows::walk(log, markers, |e| match e {
        Event::Begin => {
            at_begin = [
                l1_counts(&four.base, Side::Instruction),
                l1_counts(&four.base, Side::Data),
            ];
            current = None;
        }
        Event::End => {
            let (ia, im) = l1_counts(&four.base, Side::Instruction);
            let (da, dm) = l1_counts(&four.base, Side::Data);
            i_acc += ia - at_begin[0].0;
            i_miss += im - at_begin[0].1;
            d_acc += da - at_begin[1].0;
            d_miss += dm - at_begin[1].1;
            current = None;
        }
        Event::Ref { r, inside } => {
            let t = [
                four.base.access(r.op, r.addr, r.size),
                four.perfect_i.access(r.op, r.addr, r.size),
                four.perfect_d.access(r.op, r.addr, r.size),
                four.ideal.access(r.op, r.addr, r.size),
            ];
            if !inside {
                return;
            }
            for (sum, x) in ticks.iter_mut().zip(t) {
                *sum += x;
            }
            if r.op == Op::Ifetch {
                n_instr += 1;
                current = Some(r.addr);
                let e = instrs.entry(r.addr).or_default();
                e.count += 1;
                e.ticks += t[0];
            } else {
                n_data += 1;
                if let Some(e) = current.and_then(|a| instrs.get_mut(&a)) {
                    e.ticks += t[0];
                    e.touches_memory = true;
                }
            }
        }
    })?;
    rows::check_windows(spec, windows, steps)?;
    let classes = classify_all(&instrs, maps);
    let mut by_class: HashMap<Class, (u64, f64)> = HashMap::new();
    for (addr, e) in &instrs {
        let c = classes.get(addr).copied().unwrap_or(Class::Unknown);
        let slot = by_class.entry(c).or_default();
        slot.0 += e.count;
        slot.1 += e.ticks;
    }
    let all_ticks: f64 = instrs.values().map(|e| e.ticks).sum();
    let n = windows.max(1) as f64;
    let pct = |x: f64, of: f64| if of > 0.0 { 100.0 * x / of } else { 0.0 };
    Ok(RowBreakdown {
        row: spec.name(),
        instructions: n_instr as f64 / n,
        data_refs: n_data as f64 / n,
        ticks: ticks[0] / n,
        perfect_icache_ticks: ticks[1] / n,
        perfect_dcache_ticks: ticks[2] / n,
        ideal_ticks: ticks[3] / n,
        memory_pct: pct(ticks[0] - ticks[3], ticks[0]),
        l1i_miss_rate: if i_acc > 0 {
            i_miss as f64 / i_acc as f64
        } else {
            0.0
        },
        l1d_miss_rate: if d_acc > 0 {
            d_miss as f64 / d_acc as f64
        } else {
            0.0
        },
        mix: Class::ALL
            .iter()
            .map(|&c| {
                let (count, t) = by_class.get(&c).copied().unwrap_or_default();
                Share {
                    class: c,
                    pct_instructions: pct(count as f64, n_instr as f64),
                    pct_ticks: pct(t, all_ticks),
                }
            })
            .collect(),
    })
}

/// `shmnet sim breakdown`.
pub fn breakdown(a: BreakdownArgs) -> Result<()> {
    let chosen = a.common.rows.selected()?;
    let machine = Machine::load(&a.machine.machine)?;
    let steps = Steps::new(a.common.quick);
    let pb = crate::progress_bar();
    let out = rows::each_row(&chosen, &pb, |spec, dir| {
        pb.set_message(format!("{}: tracing under valgrind lackey", spec.name()));
        let maps_path = dir.join(format!("{}.maps", spec.name()));
        let t = rows::trace_row(spec, MESSAGE_BYTES, steps, dir, Some(&maps_path))?;
        let maps_text = std::fs::read_to_string(&maps_path)
            .with_context(|| format!("reading the worker's map {}", maps_path.display()))?;
        let _ = std::fs::remove_file(&maps_path);
        let maps = parse_maps(&maps_text);
        pb.set_message(format!("{}: simulating on {}", spec.name(), machine.name));
        break_down(spec, steps, &t.log, t.markers, &maps, &machine)
    })?;
    pb.finish_and_clear();
    let r = Breakdown {
        machine: machine.name.clone(),
        tick_unit: machine.tick_unit.clone(),
        rows: out,
        bytes: MESSAGE_BYTES,
        steps,
    };
    if a.common.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{r}");
    }
    Ok(())
}

impl std::fmt::Display for Breakdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "Seed 001's breakdowns on {} ({}-byte messages; {} per message)",
            self.machine, self.bytes, self.tick_unit
        )?;
        writeln!(
            f,
            "{:<22} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            "row", "baseline", "perfect I", "perfect D", "ideal", "memory", "L1I miss", "L1D miss"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<22} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>6.1}% {:>7.2}% {:>7.2}%",
                r.row,
                r.ticks,
                r.perfect_icache_ticks,
                r.perfect_dcache_ticks,
                r.ideal_ticks,
                r.memory_pct,
                100.0 * r.l1i_miss_rate,
                100.0 * r.l1d_miss_rate
            )?;
        }
        writeln!(f, "\ninstruction mix: % of instructions / % of time")?;
        write!(f, "{:<22}", "row")?;
        for c in Class::ALL {
            write!(f, " {:>14}", format!("{c:?}").to_lowercase())?;
        }
        writeln!(f)?;
        for r in &self.rows {
            write!(f, "{:<22}", r.row)?;
            for s in &r.mix {
                write!(
                    f,
                    " {:>14}",
                    format!("{:.1} / {:.1}", s.pct_instructions, s.pct_ticks)
                )?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_are_classed_by_what_they_do() {
        // add rax, rbx
        assert_eq!(
            decode_class(&[0x48, 0x01, 0xd8], 0, false),
            Some(Class::Arithmetic)
        );
        // mov rax, rbx
        assert_eq!(
            decode_class(&[0x48, 0x89, 0xd8], 0, false),
            Some(Class::Other)
        );
        // mov rax, [rbx]: the trace saw its load
        assert_eq!(
            decode_class(&[0x48, 0x8b, 0x03], 0, true),
            Some(Class::LoadStore)
        );
        // jne +0; ret; call rel32
        assert_eq!(decode_class(&[0x75, 0x00], 0, false), Some(Class::Control));
        assert_eq!(decode_class(&[0xc3], 0, true), Some(Class::Control));
        assert_eq!(
            decode_class(&[0xe8, 0, 0, 0, 0], 0, true),
            Some(Class::Control)
        );
        // Not an instruction.
        assert_eq!(decode_class(&[0x06], 0, false), None);
    }

    #[test]
    fn maps_lines_give_files_and_offsets() {
        let m = parse_maps(
            "00108000-0010a000 r-xp 00008000 fd:01 123 /usr/bin/shmnet\n\
             04000000-04001000 rw-p 00000000 00:00 0\n\
             7ff0000-7ff1000 r--p 00000000 00:00 0 [stack]\n",
        );
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].start, m[0].end, m[0].offset),
            (0x108000, 0x10a000, 0x8000)
        );
        assert_eq!(m[0].path, "/usr/bin/shmnet");
    }
}
