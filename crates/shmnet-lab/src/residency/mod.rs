//! `shmnet residency`: seed 000's experiment on this machine.
//!
//! softnic plays the sending host: messages of 14,792 bytes (ten 1,480-byte IPv4 fragments)
//! arrive through the stack onto a UDP socket queue; the application copies each message out,
//! and the [`probe`] times the load of every data buffer just before its copy. [`summary`]
//! turns the timings into the seed's histogram, summary rows and per-position tests; the
//! marks they are read against come from [`crate::calibrate`].
//!
//! The knobs are the seed's dimensions: inter-message gap, UDP checksum (which makes the
//! protocol server read all the data early), TLB forcing, receive queue size, a synthetic
//! application load ([`load`]), and beyond the seed: the structure (`inline`: one thread;
//! `server`: the protocol server with its driver thread in one process, the application in
//! this one), the cores they run on, the pool's allocation policy and buffer layout (the
//! seed's rule 3), the page size of the buffer window and whether the "device" writes into or
//! around the cache.

pub mod figure;
pub mod load;
pub mod peaks;
pub mod probe;
mod run_inline;
mod run_server;
pub mod summary;
pub mod switch;
pub mod trace;
mod traced_driver;

use crate::calibrate::{Degeneracy, Marks};
use probe::{Probe, Sample};
use shmnet_chan::{AllocPolicy, BufferLayout, PageSize};
use shmnet_io::driver::softnic::Dma;
use shmnet_stack::{BufIdx, RecvHook};
use summary::{Histogram, KsPair, Peak, Position, Summary};

/// How the parties are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Structure {
    /// softnic, stack and application in one thread (the monolithic kernel path).
    Inline,
    /// The protocol server (with softnic as its driver thread) in a process of its own; the
    /// application in this one (seed 002's protocol server; seed 000's Mach).
    Server,
    /// As [`Structure::Server`] under `--isolation regions` (issue 15): the server copies
    /// each message into a buffer the application posted in its own region, and the probe,
    /// in the server's process, times the load of every buffer before that copy. The
    /// application reads the message in place.
    #[serde(rename = "server-regions")]
    ServerRegions,
}

impl std::str::FromStr for Structure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "inline" => Ok(Self::Inline),
            "server" => Ok(Self::Server),
            "server-regions" => Ok(Self::ServerRegions),
            _ => Err(format!(
                "unknown structure {s:?}: use inline, server or server-regions"
            )),
        }
    }
}

/// Where the parties run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cores {
    /// All on one CPU: they take turns, as on the seed's uniprocessor.
    Same,
    /// The application on one CPU, the server (and its driver) on another.
    Split,
}

impl std::str::FromStr for Cores {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "same" => Ok(Self::Same),
            "split" => Ok(Self::Split),
            _ => Err(format!("unknown placement {s:?}: use same or split")),
        }
    }
}

/// One run's settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Settings {
    /// How the parties are placed.
    pub structure: Structure,
    /// Where they run.
    pub cores: Cores,
    /// Messages softnic sends.
    pub messages: u64,
    /// UDP payload bytes per message.
    pub size: usize,
    /// Microseconds from one message's start to the next (0: back to back, saturating).
    pub gap_us: f64,
    /// UDP checksums generated and verified (the server reads every byte early).
    pub checksum: bool,
    /// Touch each buffer's page (not its data lines) just before timing it.
    pub tlb_force: bool,
    /// Messages the socket's receive queue holds.
    pub queue: usize,
    /// The synthetic application's state block, bytes per word of message (0: none).
    pub load_bytes: usize,
    /// The range its blocks are spread over, bytes.
    pub load_range_bytes: usize,
    /// The pool's allocation policy.
    pub alloc: AllocPolicy,
    /// The order the pools' free arrays start in: whether the first buffers handed out are
    /// neighbours in memory (the seed's rule 3) or scattered over the pool.
    pub layout: BufferLayout,
    /// The buffer window's pages.
    pub pages: PageSize,
    /// How softnic writes frames into the buffers.
    pub dma: Dma,
    /// The application's CPU (the server's is the other one with `split`).
    pub cpu: usize,
    /// Switch to another process on the application's CPU before each message's copy-out
    /// ([`switch`]; the inline structure only): `None`, no switch.
    pub switch: Option<switch::SwitchSpec>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            structure: Structure::Inline,
            cores: Cores::Same,
            messages: 300,
            size: 14_792,
            gap_us: 2000.0,
            checksum: false,
            tlb_force: false,
            queue: 1,
            load_bytes: 0,
            load_range_bytes: crate::cacheinfo::Sizes::this().llc as usize,
            alloc: AllocPolicy::Lifo,
            layout: BufferLayout::Contiguous,
            pages: PageSize::Small,
            dma: Dma::Cached,
            cpu: 0,
            switch: None,
        }
    }
}

impl Settings {
    /// Refuses combinations that mean nothing, with what to do instead.
    pub fn check(&self) -> Result<(), RunError> {
        let bad = |m: &str| Err(RunError::Settings(m.to_string()));
        if self.structure == Structure::Inline && self.cores == Cores::Split {
            return bad(
                "the inline structure runs every party in one thread: --cores split applies to --structure server",
            );
        }
        if self.switch.is_some() && self.structure != Structure::Inline {
            return bad(
                "--switch puts a switch into the inline structure; the server structures switch between the server and the application already",
            );
        }
        if self.messages == 0 {
            return bad("--messages must be at least 1");
        }
        if self.size == 0 || self.size > 65_507 {
            return bad("--size must be 1 to 65,507 bytes (one UDP datagram)");
        }
        if self.queue == 0 {
            return bad("--queue must be at least 1 message");
        }
        if !(self.gap_us >= 0.0 && self.gap_us <= 1e6) {
            return bad("--gap must be 0 to 1,000,000 microseconds");
        }
        let cpus = crate::machine::online_cpus();
        if self.cpu >= cpus || (self.cores == Cores::Split && cpus < 2) {
            return bad(&format!(
                "this machine has {cpus} CPU(s): --cpu must be below {cpus}, and --cores split needs two"
            ));
        }
        Ok(())
    }

    /// The server's CPU.
    pub fn server_cpu(&self) -> usize {
        let cpus = crate::machine::online_cpus();
        match self.cores {
            Cores::Same => self.cpu,
            Cores::Split => (self.cpu + 1) % cpus.max(1),
        }
    }

    /// A short name for tables: `inline`, `server/same` ….
    pub fn label(&self) -> String {
        match self.structure {
            Structure::Inline => "inline".into(),
            Structure::Server | Structure::ServerRegions => format!(
                "{}/{}",
                if self.structure == Structure::Server {
                    "server"
                } else {
                    "server-regions"
                },
                match self.cores {
                    Cores::Same => "same",
                    Cores::Split => "split",
                }
            ),
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The settings make no sense.
    #[error("{0}")]
    Settings(String),
    /// Memory for the load generator could not be had.
    #[error(transparent)]
    Map(#[from] crate::mem::MapError),
    /// The parties could not be set up.
    #[error("{0}")]
    Setup(String),
    /// The switch partner failed.
    #[error(transparent)]
    Switch(#[from] switch::SwitchError),
    /// Nothing was received.
    #[error("no message arrived: {0}")]
    NothingReceived(String),
}

/// What happened to the messages.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Messages {
    /// Sent by softnic.
    pub sent: u64,
    /// Copied out by the application.
    pub received: u64,
    /// Refused by the full socket queue.
    pub queue_full: u64,
    /// Lost anywhere else (no buffer, reassembly, the application's ring).
    pub lost_elsewhere: u64,
    /// Frames the device's interrupts received while the synthetic load walked a message
    /// (inline only; 0 without a load): frames that arrived while the application worked.
    pub frames_during_load: u64,
}

/// One run's result (`--json`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Residency {
    /// Buffers timed.
    pub buffers: u64,
    /// The settings.
    pub settings: Settings,
    /// The marks the buffers were classified against (overhead ticks).
    pub marks: Marks,
    /// Why the marks cannot classify buffers on this machine (null: they can). When set, the
    /// summary's percentages mean nothing.
    pub degenerate: Option<Degeneracy>,
    /// The overhead histogram.
    pub histogram: Histogram,
    /// The histogram's peaks, left to right, read against the marks ([`Histogram::peaks`]).
    pub peaks: Vec<Peak>,
    /// The seed's summary rows.
    pub summary: Summary,
    /// By position in the message.
    pub positions: Vec<Position>,
    /// KS tests between every pair of positions.
    pub ks: Vec<KsPair>,
    /// The messages.
    pub messages: Messages,
    /// In-cache load ticks (timer overhead included) by buffer length, medians.
    pub in_cache_ticks: Vec<(u32, f64)>,
    /// Buffers whose page could not be forced into the TLB.
    pub unforced: u64,
    /// Buffers timed but not kept (the reservation was full).
    pub unrecorded: u64,
    /// With `switch`: what a switch cost, calibrated with the run's partner before the run.
    pub switch: Option<switch::SwitchCost>,
    /// With `switch`: switches made (one round trip per message).
    pub switches: u64,
    /// Bytes per word in `avg_overhead_ticks_per_word`.
    pub word_bytes: usize,
    /// Seconds the run took.
    pub seconds: f64,
}

/// IPv4 fragments (of 1,480 bytes at softnic's 1,500-byte MTU) of a `size`-byte UDP message.
pub fn fragments(size: usize) -> usize {
    (size + 8).div_ceil(1480)
}

/// The application's instruments: the probe, and the load it puts on the cache.
pub(crate) struct AppSide {
    pub probe: Probe,
    pub load: Option<load::Load>,
    /// The process switched to before each message's copy-out.
    pub switch: Option<switch::Partner>,
    /// Why switching stopped, if it failed (the run then fails).
    pub switch_failed: Option<switch::SwitchError>,
    /// Records the copy-out and the load (`--trace`).
    pub tracer: Option<trace::Tracer>,
}

impl AppSide {
    fn new(s: &Settings) -> Result<Self, RunError> {
        Ok(Self {
            probe: Probe::new(s.messages as usize * fragments(s.size), s.tlb_force),
            load: match s.load_bytes {
                0 => None,
                b => Some(load::Load::new(b, s.load_range_bytes)?),
            },
            switch: None,
            switch_failed: None,
            tracer: None,
        })
    }

    /// After a message's copy: the next buffer starts a new message; the load walks it.
    pub fn message_done(&mut self, data: &[u8]) {
        self.message_copied(data);
        if let Some(l) = &mut self.load {
            l.on_message(data, self.tracer.as_mut());
        }
    }
}

impl AppSide {
    /// After a message's copy, the load left to the caller (which walks it in pieces).
    pub fn message_copied(&mut self, data: &[u8]) {
        self.probe.end_message();
        if let Some(t) = &mut self.tracer {
            t.range(trace::Who::Application, true, data);
        }
    }
}

impl RecvHook for AppSide {
    #[inline]
    fn on_buffer(&mut self, buf: BufIdx, data: &[u8]) {
        if self.probe.at_message_start() {
            if let Some(p) = &mut self.switch {
                if let Err(e) = p.switch() {
                    self.switch = None;
                    self.switch_failed = Some(e);
                }
            }
        }
        self.probe.on_buffer(buf, data);
        // After the timed load, so the recording is not timed; nothing else happens between.
        if let Some(t) = &mut self.tracer {
            t.range(trace::Who::Application, false, data);
        }
    }
}

/// Runs the experiment and classifies its buffers against `marks`. `exe` is this program
/// (the server structure starts `exe serve`). `progress` gets a fraction done and a message.
pub fn run(
    settings: &Settings,
    marks: Marks,
    exe: &std::path::Path,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<Residency, RunError> {
    run_inner(settings, marks, exe, progress, false).map(|(r, _)| r)
}

/// As [`run`], recording the data path's references ([`trace`]): the inline structure only,
/// where every party is in this process.
pub fn run_traced(
    settings: &Settings,
    marks: Marks,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<(Residency, Vec<trace::Record>), RunError> {
    if settings.switch.is_some() {
        return Err(RunError::Settings(
            "--trace does not record a switch partner's references: leave out --switch".into(),
        ));
    }
    if settings.structure != Structure::Inline {
        return Err(RunError::Settings(
            "--trace records the inline structure only (in the server structure the sender and the stack run in another process)".into(),
        ));
    }
    run_inner(settings, marks, std::path::Path::new(""), progress, true)
}

fn run_inner(
    settings: &Settings,
    marks: Marks,
    exe: &std::path::Path,
    progress: &mut dyn FnMut(f64, &str),
    traced: bool,
) -> Result<(Residency, Vec<trace::Record>), RunError> {
    settings.check()?;
    let t0 = std::time::Instant::now();
    let mut app = AppSide::new(settings)?;
    let switch_cost = match settings.switch {
        None => None,
        Some(spec) => {
            // Started pinned to the application's CPU: the partner inherits it.
            let _pin = crate::calibrate::Pinned::here(Some(settings.cpu));
            let mut partner = switch::Partner::start(exe, spec)?;
            let cost = partner.calibrate(if settings.messages < 100 { 200 } else { 2000 })?;
            app.switch = Some(partner);
            Some(cost)
        }
    };
    let (n_messages, frags) = (settings.messages as usize, fragments(settings.size));
    let driver_tracer = traced.then(|| {
        // The driver: a write and a header read per frame. The application: a read per
        // buffer, a write per message, and a block per word under load.
        let t = trace::Tracer::new(n_messages * 2 * frags);
        let words = settings.size.div_ceil(8) * usize::from(settings.load_bytes > 0);
        app.tracer = Some(t.sibling(n_messages * (frags + 1 + words)));
        t
    });
    let (messages, mut records) = match settings.structure {
        Structure::Inline => run_inline::run(settings, &mut app, driver_tracer, progress)?,
        Structure::Server | Structure::ServerRegions => {
            (run_server::run(settings, &mut app, exe, progress)?, vec![])
        }
    };
    if let Some(t) = app.tracer.take() {
        records = trace::merge(vec![records, t.into_records()]);
    }
    if let Some(e) = app.switch_failed.take() {
        return Err(e.into());
    }
    let switches = app.switch.take().map_or(0, |p| p.switches);
    if messages.received == 0 {
        return Err(RunError::NothingReceived(format!(
            "{} sent, {} refused by the full socket queue, {} lost elsewhere",
            messages.sent, messages.queue_full, messages.lost_elsewhere
        )));
    }
    let (unforced, unrecorded) = (app.probe.unforced, app.probe.unrecorded);
    let quantum = crate::tsc::Calibration::measure(std::time::Duration::from_millis(2), 5000)
        .step_ticks as f64;
    let mut result = analyse(
        settings.clone(),
        marks,
        quantum,
        app.probe.samples(),
        messages,
        unforced,
        unrecorded,
        t0.elapsed().as_secs_f64(),
    );
    result.switch = switch_cost;
    result.switches = switches;
    Ok((result, records))
}

/// Turns samples into the result.
#[allow(clippy::too_many_arguments)]
pub fn analyse(
    settings: Settings,
    marks: Marks,
    quantum: f64,
    samples: &[Sample],
    messages: Messages,
    unforced: u64,
    unrecorded: u64,
    seconds: f64,
) -> Residency {
    let (over, medians) = summary::overheads(samples);
    let (bin, limit) = Histogram::range_for(&marks, quantum);
    let histogram = Histogram::build(&over, bin, limit);
    let (positions, ks) = summary::by_position(&over, &marks, limit);
    Residency {
        buffers: samples.len() as u64,
        summary: summary::summarize(&over, &marks, limit),
        peaks: histogram.peaks(&marks),
        histogram,
        positions,
        ks,
        messages,
        in_cache_ticks: medians.into_iter().collect(),
        unforced,
        unrecorded,
        switch: None,
        switches: 0,
        word_bytes: summary::WORD_BYTES,
        seconds,
        settings,
        degenerate: marks.degeneracy(),
        marks,
    }
}

impl std::fmt::Display for Residency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.settings;
        let m = &self.messages;
        writeln!(
            f,
            "residency: {} gap {} µs, checksum {}, TLB {}, queue {}, load {} B/word, {} alloc, {} layout, {:?} pages, {:?} DMA",
            s.label(),
            s.gap_us,
            if s.checksum { "on" } else { "off" },
            if s.tlb_force { "forced" } else { "not forced" },
            s.queue,
            s.load_bytes,
            format!("{:?}", s.alloc).to_lowercase(),
            s.layout,
            s.pages,
            s.dma
        )?;
        writeln!(
            f,
            "messages: {} sent, {} received, {} refused by the full queue, {} lost elsewhere; {} buffers timed in {:.1} s",
            m.sent, m.received, m.queue_full, m.lost_elsewhere, self.buffers, self.seconds
        )?;
        if m.frames_during_load > 0 {
            writeln!(
                f,
                "{} frames arrived while the load walked a message",
                m.frames_during_load
            )?;
        }
        let k = &self.marks;
        writeln!(
            f,
            "marks (overhead ticks per buffer): in cache ≤ {:.0}, 100 % clean miss {:.0}, 100 % dirty miss {:.0}",
            k.cached_max, k.clean, k.dirty
        )?;
        if let Some(d) = self.degenerate {
            writeln!(f, "WARNING: {d}")?;
        }
        let r = &self.summary;
        writeln!(f, "\n{:<44} {:>8}", "observation", "value")?;
        writeln!(
            f,
            "{:<44} {:>8.1}",
            "% buffers totally within cache", r.fully_cached_pct
        )?;
        writeln!(
            f,
            "{:<44} {:>8.1}",
            "% buffers less than 100 % clean miss", r.lt_clean_pct
        )?;
        writeln!(
            f,
            "{:<44} {:>8.1}",
            "% buffers less than 100 % dirty miss", r.lt_dirty_pct
        )?;
        writeln!(
            f,
            "{:<44} {:>8.1}",
            "% buffers greater than 100 % dirty miss", r.gt_dirty_pct
        )?;
        writeln!(
            f,
            "{:<44} {:>8.3}",
            "average overhead ticks per word (8 B)", r.avg_overhead_ticks_per_word
        )?;
        if self.peaks.is_empty() {
            writeln!(f, "\npeaks: none stands out of the noise")?;
        } else {
            writeln!(f, "\npeaks (left to right):")?;
            for p in &self.peaks {
                writeln!(f, "  {p}")?;
            }
        }
        writeln!(f, "\nby position in the message:")?;
        writeln!(
            f,
            "{:>4} {:>8} {:>10} {:>9} {:>12} {:>10}",
            "pos", "buffers", "median", "% cached", "ticks/word", "KS p vs 0"
        )?;
        for p in &self.positions {
            let ks0 = self
                .ks
                .iter()
                .find(|k| k.a == 0 && k.b == p.position)
                .map_or("-".to_string(), |k| format!("{:.3}", k.p));
            writeln!(
                f,
                "{:>4} {:>8} {:>10.0} {:>9.1} {:>12.3} {:>10}",
                p.position,
                p.buffers,
                p.median_overhead_ticks,
                p.summary.fully_cached_pct,
                p.summary.avg_overhead_ticks_per_word,
                ks0
            )?;
        }
        let far: Vec<&KsPair> = self.ks.iter().filter(|k| k.b - k.a >= 4).collect();
        let near: Vec<&KsPair> = self.ks.iter().filter(|k| k.b - k.a == 1).collect();
        let sig = |v: &[&KsPair]| v.iter().filter(|k| k.p < 0.05).count();
        writeln!(
            f,
            "KS (p < 0.05): {} of {} adjacent pairs differ, {} of {} pairs at least four apart",
            sig(&near),
            near.len(),
            sig(&far),
            far.len()
        )?;
        if let Some(c) = &self.switch {
            writeln!(
                f,
                "switch: {} switches to a partner touching {} bytes before each copy-out; one switch costs {:.0} ticks (median round trip {:.0} over {} rounds, halved)",
                self.switches, c.touch_bytes, c.switch_ticks, c.round_trip_ticks, c.rounds
            )?;
        }
        if self.unforced > 0 {
            writeln!(
                f,
                "note: {} buffers left no line of their page free to force the TLB with",
                self.unforced
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A receiver whose load takes several gaps per message gets frames while it walks (the
    /// device's interrupts) and drops what its one-message queue cannot hold. The load is
    /// four times the knee measured now, so this holds at any machine's speed; the books
    /// balance.
    #[test]
    fn a_loaded_receiver_is_interrupted_and_drops_at_a_full_queue() {
        let gap = Duration::from_millis(2);
        let range = 1 << 22;
        let knee = load::knee(14_792, range, gap, 1 << 20).unwrap();
        let s = Settings {
            messages: 12,
            gap_us: 2000.0,
            load_bytes: knee * 4,
            load_range_bytes: range,
            ..Settings::default()
        };
        let marks = Marks {
            cached_max: 100.0,
            clean: 1000.0,
            dirty: 1200.0,
        };
        let r = run(&s, marks, std::path::Path::new(""), &mut |_, _| {}).unwrap();
        let m = &r.messages;
        assert!(m.frames_during_load > 0, "{m:?}");
        assert!(m.queue_full > 0, "{m:?}");
        assert_eq!(m.lost_elsewhere, 0, "{m:?}");
        assert_eq!(m.sent, m.received + m.queue_full, "{m:?}");
    }
}
