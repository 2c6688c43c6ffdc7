//! The miss penalty, measured live: a miss thread serving misses from a real registration
//! table while the data plane's side waits for each line to come back. Seed 004 split it in
//! two, and so does this: the **miss delay** (from the miss to the miss thread taking it up:
//! a wake-up and a scheduling delay — the seed's 0–50 µs) and the **miss processing** (the
//! table lookup and pinning the line's pages, which in a sparse memfd also allocates them —
//! the seed's 5–500 µs).
//!
//! Each application registers one sparse memfd region; every miss names a line never served
//! before, so every one pins (and first touches) L pages. The miss thread sleeps between
//! misses (parked, woken by the port's kick), as it does in a server.

use hdrhistogram::Histogram;
use shmnet_chan::handles::{
    CacheGeometry, LineKey, LookupCache, MissPort, Pch, Perms, Region, RegionTable, TableLimits,
    miss_channel,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Percentiles of one distribution, in microseconds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Self {
        let us = |ns: u64| ns as f64 / 1e3;
        Self {
            count: h.len(),
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
        }
    }
}

/// The penalty for one line size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PenaltyRow {
    /// L: pages pinned per miss.
    pub line: u32,
    /// Miss delay.
    pub delay_us: Percentiles,
    /// Miss processing.
    pub processing_us: Percentiles,
    /// Misses whose pin the kernel refused (served unpinned; their processing has no pin).
    pub pin_failures: u64,
    /// Raw samples (ns) for the histogram figure: delay, processing.
    #[serde(skip)]
    pub samples: Vec<(u64, u64)>,
}

/// Why the measurement could not run.
#[derive(Debug, thiserror::Error)]
pub enum PenaltyError {
    /// A region could not be made or registered.
    #[error("setting up a region: {0}")]
    Region(String),
    /// The miss thread could not start.
    #[error("starting the miss thread: {0}")]
    Thread(std::io::Error),
    /// A miss was never served.
    #[error("a miss was not served within 5 s")]
    Stuck,
}

/// Measures `misses` misses of lines of `line` pages spread over `apps` applications.
pub fn measure(line: u32, apps: u16, misses: u64) -> Result<PenaltyRow, PenaltyError> {
    let pages_per_app = (misses / u64::from(apps) + 1) * u64::from(line);
    let geo = CacheGeometry::new((line * 4).max(1024), line, 4).expect("a valid geometry");
    let limits = TableLimits {
        max_bytes_per_app: pages_per_app * 4096,
        ..TableLimits::default()
    };
    let table = Arc::new(Mutex::new(RegionTable::new(limits, geo)));
    let mut regions = Vec::new();
    for a in 0..apps {
        let r = Region::create("shmnet-lab-handles", pages_per_app * 4096)
            .map_err(|e| PenaltyError::Region(e.to_string()))?;
        table
            .lock()
            .expect("not poisoned")
            .register(Pch(a), r.fd(), Perms::READ_WRITE)
            .map_err(|e| PenaltyError::Region(e.to_string()))?;
        regions.push(r);
    }
    let (mut port, mut svc): (MissPort, _) = miss_channel(64);
    let stop = Arc::new(AtomicBool::new(false));
    let (t2, s2) = (table.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("shmnet-miss".into())
        .spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                if svc.serve(&t2) == 0 {
                    std::thread::park_timeout(Duration::from_millis(50));
                }
            }
        })
        .map_err(PenaltyError::Thread)?;
    port.set_thread(thread.thread().clone());
    let mut cache = LookupCache::new(geo);
    let mut delay = Histogram::<u64>::new(3).expect("a valid histogram");
    let mut processing = Histogram::<u64>::new(3).expect("a valid histogram");
    let mut samples = Vec::with_capacity(misses as usize);
    let mut result = Ok(());
    'misses: for i in 0..misses {
        let key = LineKey {
            app: Pch((i % u64::from(apps)) as u16),
            line: i / u64::from(apps),
        };
        port.report(key, shmnet_chan::handles::Access::Write, 0);
        port.kick();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut got = None;
            port.install(&mut cache, |_| 0, |f| got = Some((f.delay, f.processing)));
            if let Some((d, p)) = got {
                let (d, p) = (d.as_nanos() as u64, p.as_nanos() as u64);
                let _ = delay.record(d.max(1));
                let _ = processing.record(p.max(1));
                samples.push((d, p));
                break;
            }
            if Instant::now() > deadline {
                result = Err(PenaltyError::Stuck);
                break 'misses;
            }
            std::hint::spin_loop();
        }
        // Let the miss thread fall asleep again, as between misses in a server.
        std::thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    thread.thread().unpark();
    let _ = thread.join();
    result?;
    let pin_failures = table.lock().expect("not poisoned").stats().pin_failures;
    drop(regions);
    Ok(PenaltyRow {
        line,
        delay_us: Percentiles::of(&delay),
        processing_us: Percentiles::of(&processing),
        pin_failures,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_miss_is_served_and_timed() {
        let row = measure(8, 2, 20).unwrap();
        assert_eq!(row.delay_us.count, 20);
        assert_eq!(row.processing_us.count, 20);
        assert!(row.processing_us.p50 > 0.0 && row.processing_us.max >= row.processing_us.p50);
    }
}
