//! Misses off the data path: the data plane reports a miss and moves on; a miss thread
//! serves it from the [`RegionTable`] and sends the line back; the data plane installs it
//! the next time round (seed 004's miss event queue and miss thread, Fig. 1).
//!
//! Two wait-free SPSC queues (rtrb: both ends are threads of the trusted server, so the
//! general crate fits) carry [`MissEvent`]s one way and [`Fill`]s the other. The data plane
//! side, [`MissPort`], never waits and never allocates: a miss already outstanding is not
//! queued twice, a full queue is a counted refusal (the request is dropped, as any miss
//! drops it), and no application may have more than a quarter of the queue pending. It wakes the miss thread at most once per round ([`MissPort::kick`]), and only
//! when it queued something — a miss is the seed's interrupt, not the common case.

use super::cache::{LineKey, LookupCache, MAX_LINE, Translation};
use super::handle::{Access, Pch};
use super::table::{RegionTable, Served};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A miss, as the data plane reports it.
#[derive(Clone, Copy, Debug)]
pub struct MissEvent {
    /// The line the cache lacked.
    pub key: LineKey,
    /// For a send (read) or a receive (write).
    pub access: Access,
    /// When the data plane saw it.
    pub at: Instant,
    /// The application's generation when it missed (see [`MissPort::install`]).
    pub generation: u32,
}

/// A served miss on its way back to the data plane.
#[derive(Clone, Copy, Debug)]
pub struct Fill {
    /// The line.
    pub key: LineKey,
    /// Its translations (the first L are the line's).
    pub entries: [Translation; MAX_LINE],
    /// The access that missed.
    pub access: Access,
    /// What the table found.
    pub served: Served,
    /// Miss delay: from the miss to the miss thread taking it up (the seed's 0–50 µs).
    pub delay: Duration,
    /// Miss processing: serving it from the table, pinning included (the seed's 5–500 µs).
    pub processing: Duration,
    /// The generation its miss carried.
    pub generation: u32,
}

/// Counters of the data plane's side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct MissPortStats {
    /// Misses queued for the miss thread.
    pub queued: u64,
    /// Misses of a line already queued (not queued again).
    pub outstanding: u64,
    /// Misses refused because the queue was full (or too many were outstanding).
    pub full: u64,
    /// Misses refused because their application already had its share pending.
    pub over_quota: u64,
    /// Lines installed in the cache.
    pub installed: u64,
    /// Fills dropped as stale: their application's registrations changed (or it went)
    /// after the miss.
    pub stale: u64,
}

/// How a report went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reported {
    /// Queued for the miss thread.
    Queued,
    /// Already on its way.
    Outstanding,
    /// No room: try again later (counted).
    Full,
    /// The application has its share of the queue pending already (counted): one
    /// application cannot keep everyone else's misses out.
    OverQuota,
}

/// The data plane's end. See the [module docs](self).
pub struct MissPort {
    events: rtrb::Producer<MissEvent>,
    fills: rtrb::Consumer<Fill>,
    /// Lines queued and not yet installed (a small set; its capacity is the queue's).
    pending: Vec<LineKey>,
    thread: Option<std::thread::Thread>,
    kick_due: bool,
    stats: MissPortStats,
}

/// The miss thread's end.
pub struct MissService {
    events: rtrb::Consumer<MissEvent>,
    fills: rtrb::Producer<Fill>,
}

/// A miss queue of `capacity` events (and as many fills), both ends.
pub fn miss_channel(capacity: usize) -> (MissPort, MissService) {
    let capacity = capacity.max(1);
    let (ep, ec) = rtrb::RingBuffer::new(capacity);
    let (fp, fc) = rtrb::RingBuffer::new(capacity);
    (
        MissPort {
            events: ep,
            fills: fc,
            pending: Vec::with_capacity(capacity),
            thread: None,
            kick_due: false,
            stats: MissPortStats::default(),
        },
        MissService {
            events: ec,
            fills: fp,
        },
    )
}

impl MissPort {
    /// The thread [`MissPort::kick`] wakes (the one running [`MissService`]).
    pub fn set_thread(&mut self, thread: std::thread::Thread) {
        self.thread = Some(thread);
    }

    /// Its counters.
    pub fn stats(&self) -> MissPortStats {
        self.stats
    }

    /// Lines queued and not yet installed.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Reports a miss of `key`, made while its application's generation was `generation`. Never
    /// waits, never allocates.
    pub fn report(&mut self, key: LineKey, access: Access, generation: u32) -> Reported {
        if self.pending.contains(&key) {
            self.stats.outstanding += 1;
            return Reported::Outstanding;
        }
        if self.pending.len() == self.pending.capacity() {
            self.stats.full += 1;
            return Reported::Full;
        }
        let quota = (self.pending.capacity() / 4).max(1);
        if self.pending.iter().filter(|k| k.app == key.app).count() >= quota {
            self.stats.over_quota += 1;
            return Reported::OverQuota;
        }
        let ev = MissEvent {
            key,
            access,
            at: Instant::now(),
            generation,
        };
        if self.events.push(ev).is_err() {
            self.stats.full += 1;
            return Reported::Full;
        }
        self.pending.push(key);
        self.stats.queued += 1;
        self.kick_due = true;
        Reported::Queued
    }

    /// Forgets the misses of `app` still pending (its lines were just dropped and its
    /// generation bumped: their fills will come back stale), so that a new miss of the
    /// same line is queued again rather than taken for outstanding. Returns how many.
    pub fn forget(&mut self, app: Pch) -> usize {
        let before = self.pending.len();
        self.pending.retain(|k| k.app != app);
        before - self.pending.len()
    }

    /// Wakes the miss thread if a miss was queued since the last kick (once per round).
    pub fn kick(&mut self) {
        if std::mem::take(&mut self.kick_due) {
            if let Some(t) = &self.thread {
                t.unpark();
            }
        }
    }

    /// Installs every line served since the last call into `cache`, calling `seen` with
    /// each fill installed (for miss-time statistics). Returns how many it installed.
    ///
    /// A fill is only as fresh as the registrations it was served from: `current(app)` is
    /// the application's generation now, which its owner bumps whenever it drops the
    /// application's lines (an unregister, a registration, its exit). A fill whose miss
    /// carried an older generation was served before that and is dropped, counted in
    /// `stale` — it may point into a mapping that is gone.
    pub fn install(
        &mut self,
        cache: &mut LookupCache,
        current: impl Fn(Pch) -> u32,
        mut seen: impl FnMut(&Fill),
    ) -> usize {
        let mut n = 0;
        while let Ok(f) = self.fills.pop() {
            if let Some(i) = self.pending.iter().position(|k| *k == f.key) {
                self.pending.swap_remove(i);
            }
            if f.generation != current(f.key.app) {
                self.stats.stale += 1;
                continue;
            }
            cache.fill(f.key, &f.entries[..cache.geometry().line as usize]);
            seen(&f);
            n += 1;
        }
        self.stats.installed += n as u64;
        n
    }
}

impl MissService {
    /// Serves every queued miss from `table`, sending each line back. Returns how many it
    /// served. Waits (sleeping in short steps) only when the data plane has not taken the
    /// fills back yet.
    pub fn serve(&mut self, table: &Mutex<RegionTable>) -> usize {
        let mut n = 0;
        while let Ok(ev) = self.events.pop() {
            let start = Instant::now();
            let mut entries = [Translation::NONE; MAX_LINE];
            let served = table
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .serve_miss(ev.key, &mut entries);
            let fill = Fill {
                key: ev.key,
                entries,
                access: ev.access,
                served,
                delay: start.saturating_duration_since(ev.at),
                processing: start.elapsed(),
                generation: ev.generation,
            };
            let mut fill = Some(fill);
            while let Some(f) = fill.take() {
                if let Err(rtrb::PushError::Full(f)) = self.fills.push(f) {
                    fill = Some(f);
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            n += 1;
        }
        n
    }

    /// Whether misses wait.
    pub fn has_work(&self) -> bool {
        !self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::cache::CacheGeometry;
    use super::super::table::TableLimits;
    use super::*;

    #[test]
    fn one_application_cannot_take_the_whole_queue() {
        let (mut port, _svc) = miss_channel(8);
        let k = |app, line| LineKey {
            app: Pch(app),
            line,
        };
        assert_eq!(port.report(k(1, 0), Access::Read, 0), Reported::Queued);
        assert_eq!(port.report(k(1, 1), Access::Read, 0), Reported::Queued);
        assert_eq!(
            port.report(k(1, 2), Access::Read, 0),
            Reported::OverQuota,
            "a quarter of 8"
        );
        assert_eq!(
            port.report(k(2, 0), Access::Read, 0),
            Reported::Queued,
            "others still get in"
        );
        assert_eq!(port.stats().over_quota, 1);
    }

    #[test]
    fn a_forgotten_application_reports_its_lines_again() {
        let (mut port, _svc) = miss_channel(8);
        let k = |app, line| LineKey {
            app: Pch(app),
            line,
        };
        assert_eq!(port.report(k(1, 0), Access::Read, 0), Reported::Queued);
        assert_eq!(port.report(k(2, 0), Access::Read, 0), Reported::Queued);
        assert_eq!(port.report(k(1, 0), Access::Read, 1), Reported::Outstanding);
        // Its lines were dropped (generation 0 → 1): the fill in flight will be stale.
        assert_eq!(port.forget(Pch(1)), 1);
        assert_eq!(port.pending(), 1, "the other application's miss stays");
        assert_eq!(
            port.report(k(1, 0), Access::Read, 1),
            Reported::Queued,
            "queued again under the new generation, not taken for outstanding"
        );
    }

    #[test]
    fn a_miss_goes_once_and_comes_back_installed() {
        let (mut port, mut svc) = miss_channel(2);
        let geo = CacheGeometry::new(64, 8, 2).unwrap();
        let table = Mutex::new(RegionTable::new(TableLimits::default(), geo));
        let mut cache = LookupCache::new(geo);
        // Each line another application's: a queue of 2 gives each a quota of 1.
        let k = |line: u64| LineKey {
            app: Pch(line as u16 + 1),
            line,
        };
        assert_eq!(port.report(k(0), Access::Read, 0), Reported::Queued);
        assert_eq!(port.report(k(0), Access::Read, 0), Reported::Outstanding);
        assert_eq!(port.report(k(1), Access::Write, 0), Reported::Queued);
        assert_eq!(port.report(k(2), Access::Write, 0), Reported::Full);
        assert_eq!(svc.serve(&table), 2);
        let mut seen = Vec::new();
        assert_eq!(
            port.install(&mut cache, |_| 0, |f| seen.push((f.key, f.served.unknown))),
            2
        );
        assert_eq!(
            seen,
            [(k(0), true), (k(1), true)],
            "no regions: negative lines"
        );
        assert!(cache.contains(k(0)) && cache.contains(k(1)));
        assert_eq!(port.pending(), 0);
        assert_eq!(port.report(k(2), Access::Write, 0), Reported::Queued);
        let s = port.stats();
        assert_eq!((s.queued, s.outstanding, s.full, s.installed), (3, 1, 1, 2));
    }

    #[test]
    fn a_fill_from_before_a_generation_change_is_dropped() {
        let (mut port, mut svc) = miss_channel(8);
        let geo = CacheGeometry::new(64, 8, 2).unwrap();
        let table = Mutex::new(RegionTable::new(TableLimits::default(), geo));
        let mut cache = LookupCache::new(geo);
        let key = LineKey {
            app: Pch(3),
            line: 0,
        };
        assert_eq!(port.report(key, Access::Read, 7), Reported::Queued);
        svc.serve(&table);
        // The application's registrations changed meanwhile: generation 8.
        assert_eq!(port.install(&mut cache, |_| 8, |_| {}), 0);
        assert!(!cache.contains(key));
        assert_eq!(port.stats().stale, 1);
        assert_eq!(port.pending(), 0, "no longer pending either");
    }
}
