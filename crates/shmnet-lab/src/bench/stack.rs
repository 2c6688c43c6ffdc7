//! `shmnet bench stack`: the protocol stack's receive and send paths beside a `memcpy` of the
//! same bytes, measured in the same run. The measuring is `shmnet_stack::bench` (it needs
//! the stack's internals to build frames); this module reports it.

use shmnet_stack::bench::{BenchRow, StackBenchReport};

/// One row as published: the fields, then the breakdown.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// UDP payload bytes per message.
    pub size: usize,
    /// UDP checksum generated and verified.
    pub checksum: bool,
    /// Median nanoseconds per message.
    pub ns_per_msg: f64,
    /// Median nanoseconds of a `memcpy` of `size` bytes, same run.
    pub memcpy_ns: f64,
    /// Nanoseconds per payload byte.
    pub ns_per_byte: f64,
    /// `ns_per_msg / memcpy_ns`.
    pub ratio: f64,
    /// Ethernet frames per message.
    pub frames: usize,
    /// Messages put through the path (the warm-up batch included).
    pub messages: usize,
    /// Of those, the ones that went all the way (received whole; sent without an error as
    /// `frames` frames). Less than `messages`: the row's figures are NaN (`null` in JSON).
    pub completed: usize,
    /// rx only: parse, reassembly, demultiplexing and queueing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_ns: Option<f64>,
    /// rx only: the copy-out and free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_ns: Option<f64>,
}

impl From<&BenchRow> for Row {
    fn from(r: &BenchRow) -> Self {
        Self {
            size: r.size,
            checksum: r.checksum,
            ns_per_msg: r.ns_per_msg,
            memcpy_ns: r.memcpy_ns,
            ns_per_byte: r.ns_per_byte,
            ratio: r.ratio,
            frames: r.frames,
            messages: r.messages,
            completed: r.completed,
            stack_ns: r.stack_ns,
            copy_ns: r.copy_ns,
        }
    }
}

/// Everything `shmnet bench stack` measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StackReport {
    /// Receive path.
    pub rx: Vec<Row>,
    /// Send path.
    pub tx: Vec<Row>,
    /// Batches per figure (medians over these).
    pub batches: usize,
    /// What each timed region covers.
    pub timed_regions: [&'static str; 2],
    /// Where it ran.
    pub machine: crate::machine::Machine,
}

/// Runs the stack benchmark.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> StackReport {
    let r: StackBenchReport = shmnet_stack::bench::run(quick, progress);
    StackReport {
        rx: r.rx.iter().map(Row::from).collect(),
        tx: r.tx.iter().map(Row::from).collect(),
        batches: r.batches,
        timed_regions: [r.rx_timed_region, r.tx_timed_region],
        machine: crate::machine::Machine::this(),
    }
}

impl StackReport {
    /// The rows where not every message went through, named: a benchmark that timed
    /// failures instead of the path it names has failed.
    pub fn incomplete(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (path, rows) in [("rx", &self.rx), ("tx", &self.tx)] {
            for r in rows.iter().filter(|r| r.completed != r.messages) {
                out.push(format!(
                    "{path} {} B checksum {}: {} of {} messages went through",
                    r.size,
                    if r.checksum { "on" } else { "off" },
                    r.completed,
                    r.messages
                ));
            }
        }
        out
    }

    /// The target, as measured in this run.
    pub fn verdict(&self) -> Option<String> {
        let r = self.rx.iter().find(|r| r.size == 14_792 && !r.checksum)?;
        Some(format!(
            "rx 14,792 B, checksum off: {:.0} ns vs memcpy {:.0} ns = {:.2}x (target <= 1.50x): {}",
            r.ns_per_msg,
            r.memcpy_ns,
            r.ratio,
            if r.ratio <= 1.5 { "met" } else { "NOT met" }
        ))
    }
}

impl std::fmt::Display for StackReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "machine: {}", self.machine)?;
        for (name, rows, region) in [
            ("receive", &self.rx, self.timed_regions[0]),
            ("send", &self.tx, self.timed_regions[1]),
        ] {
            writeln!(f)?;
            writeln!(
                f,
                "{name} path (median of {} batches): {region}",
                self.batches
            )?;
            writeln!(
                f,
                "{:>7} {:>8} {:>6} {:>11} {:>10} {:>7} {:>10} {:>10}",
                "bytes",
                "checksum",
                "frames",
                "ns/msg",
                "memcpy ns",
                "ratio",
                "stack ns",
                "copy ns"
            )?;
            for r in rows.iter() {
                let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
                writeln!(
                    f,
                    "{:>7} {:>8} {:>6} {:>11.0} {:>10.0} {:>6.2}x {:>10} {:>10}",
                    r.size,
                    if r.checksum { "on" } else { "off" },
                    r.frames,
                    r.ns_per_msg,
                    r.memcpy_ns,
                    r.ratio,
                    opt(r.stack_ns),
                    opt(r.copy_ns)
                )?;
            }
        }
        if let Some(v) = self.verdict() {
            writeln!(f)?;
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}
