//! A context switch put on purpose between the data's last touch and its use: seed 000's
//! scheduling point, for its rule "touch network data late and in one context".
//!
//! The seed could only compare systems that had scheduling points (Mach, and BSD with a
//! loaded application) with one that had fewer. Here the same structure (`inline`: driver,
//! stack and application in one thread) runs with and without a switch to another process
//! between the stack's last touch of a message (its checksum, with `--checksum`) and the
//! application's copy-out. The other process — the *partner* — runs on the application's
//! CPU, touches `touch_bytes` of its own memory (0: nothing but its own code and stack, the
//! switch itself) and hands the CPU back. One byte down a pipe and one back: the application
//! blocks in `read`, the kernel runs the partner, the partner's `write` wakes the application
//! — two switches per message, no sleep, no timer.
//!
//! The same partner calibrates what a switch costs before the run ([`Partner::calibrate`]):
//! the median round trip of the same exchange, halved. The lab reports the residency lost
//! to the switch against that cost.
//!
//! The partner is a separate process started from a typed [`SwitchSpec`] through the hidden
//! `shmnet party` command, so the switch crosses address spaces as the seed's did.

use crate::tsc;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// What the partner does each time it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SwitchSpec {
    /// Bytes of its own memory it writes (one word per 64-byte line) each time it runs.
    pub touch_bytes: usize,
}

/// What a switch cost, calibrated with the run's own partner before the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct SwitchCost {
    /// Round trips timed.
    pub rounds: usize,
    /// The median round trip (the application to the partner and back), TSC ticks.
    pub round_trip_ticks: f64,
    /// Half of it: one switch, its two system calls included.
    pub switch_ticks: f64,
    /// What the partner touched each time.
    pub touch_bytes: usize,
}

/// Why the partner failed.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    /// It could not be started.
    #[error("starting the switch partner ({exe}): {source}")]
    Spawn {
        /// The program.
        exe: String,
        /// Why.
        source: std::io::Error,
    },
    /// Its spec could not be written.
    #[error("writing the switch partner's spec: {0}")]
    Spec(std::io::Error),
    /// A round trip failed (the partner died or closed its end).
    #[error("switching to the partner: {0}")]
    Exchange(std::io::Error),
}

/// The application's side: the partner process and the pipes to it. Killed and reaped when
/// dropped, whatever happened.
pub struct Partner {
    child: Child,
    to: ChildStdin,
    from: ChildStdout,
    spec: SwitchSpec,
    /// Round trips made during the run (two switches each).
    pub switches: u64,
}

impl Partner {
    /// Starts `exe party` with `spec`. The caller pins its thread to the application's CPU
    /// first: the partner inherits the affinity, so the two take turns on one CPU.
    pub fn start(exe: &std::path::Path, spec: SwitchSpec) -> Result<Self, SwitchError> {
        let mut child = Command::new(exe)
            .arg(crate::netbench::PARTY_COMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| SwitchError::Spawn {
                exe: exe.display().to_string(),
                source,
            })?;
        let (Some(mut to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SwitchError::Spec(std::io::Error::other("no pipes")));
        };
        let text = serde_json::to_vec(&crate::netbench::PartySpec::Switch(spec))
            .map_err(|e| SwitchError::Spec(e.into()))?;
        let mut partner = Self {
            child,
            to: {
                to.write_all(&text).map_err(SwitchError::Spec)?;
                to
            },
            from,
            spec,
            switches: 0,
        };
        // The first exchange waits for the process to start and read its spec.
        partner.exchange()?;
        Ok(partner)
    }

    /// One round trip: hands the CPU to the partner and waits until it hands it back.
    fn exchange(&mut self) -> Result<(), SwitchError> {
        self.to.write_all(b"s").map_err(SwitchError::Exchange)?;
        let mut b = [0u8; 1];
        self.from.read_exact(&mut b).map_err(SwitchError::Exchange)
    }

    /// A switch at the scheduling point, counted.
    pub fn switch(&mut self) -> Result<(), SwitchError> {
        self.exchange()?;
        self.switches += 1;
        Ok(())
    }

    /// Times `rounds` round trips (after a few untimed ones) and returns their median.
    pub fn calibrate(&mut self, rounds: usize) -> Result<SwitchCost, SwitchError> {
        for _ in 0..rounds.min(16) {
            self.exchange()?;
        }
        let mut ticks = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let t = tsc::start();
            self.exchange()?;
            ticks.push(tsc::stop().wrapping_sub(t) as f64);
        }
        let round_trip_ticks = tsc::median(&mut ticks);
        Ok(SwitchCost {
            rounds,
            round_trip_ticks,
            switch_ticks: round_trip_ticks / 2.0,
            touch_bytes: self.spec.touch_bytes,
        })
    }
}

impl Drop for Partner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The partner's side (`shmnet party` with a [`SwitchSpec`]): for every byte read from
/// `input`, touch the memory, answer one byte on `output`; return at end of input.
pub fn partner(
    spec: SwitchSpec,
    input: &mut dyn Read,
    output: &mut dyn Write,
) -> std::io::Result<()> {
    let mut memory = vec![0u64; spec.touch_bytes.div_ceil(8)];
    let mut b = [0u8; 1];
    loop {
        match input.read(&mut b) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        // One word per line, written: the lines become the partner's, dirty, as another
        // task's working set would.
        for w in memory.iter_mut().step_by(8) {
            *w = w.wrapping_add(1);
        }
        std::hint::black_box(&mut memory);
        output.write_all(&b)?;
        output.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partner answers every byte once and stops at end of input.
    #[test]
    fn the_partner_answers_each_byte_and_stops_at_the_end() {
        let mut out = Vec::new();
        partner(SwitchSpec { touch_bytes: 4096 }, &mut &b"sss"[..], &mut out).unwrap();
        assert_eq!(out, b"sss");
    }
}
