//! The inline structure: softnic, the stack and the application in this thread, pinned.

use super::trace::{Record, Tracer};
use super::traced_driver::TracedDriver;
use super::{AppSide, Messages, RunError, Settings};
use crate::calibrate::Pinned;
use shmnet_chan::PoolSpec;
use shmnet_io::driver::Driver;
use shmnet_io::driver::softnic::{Softnic, SoftnicConfig};
use shmnet_io::inline::{App, Inline, ServeConfig};
use std::time::{Duration, Instant};

/// The port softnic sends to.
const PORT: u16 = 5001;

/// Runs the experiment; with a tracer, also returns what the sender and the stack did.
pub(super) fn run(
    s: &Settings,
    app: &mut AppSide,
    tracer: Option<Tracer>,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<(Messages, Vec<Record>), RunError> {
    let nic = softnic(s)?;
    match tracer {
        None => run_with(s, app, nic, progress).map(|(m, _)| (m, vec![])),
        Some(t) => {
            let nic = TracedDriver::new(nic, t, s.checksum);
            let (m, nic) = run_with(s, app, nic, progress)?;
            Ok((m, nic.into_records()))
        }
    }
}

/// What softnic needs to know of a driver to run the experiment over it.
trait Sender: Driver {
    fn softnic(&self) -> &Softnic;
}

impl Sender for Softnic {
    fn softnic(&self) -> &Softnic {
        self
    }
}

impl Sender for TracedDriver<Softnic> {
    fn softnic(&self) -> &Softnic {
        self.inner()
    }
}

fn softnic(s: &Settings) -> Result<Softnic, RunError> {
    let _pin = Pinned::here(Some(s.cpu));
    Softnic::new(SoftnicConfig {
        size: s.size,
        count: Some(s.messages),
        gap: Duration::from_secs_f64(s.gap_us / 1e6),
        checksum: s.checksum,
        dma: s.dma,
        dst_ports: vec![PORT],
        ..SoftnicConfig::default()
    })
    .map_err(|e| RunError::Settings(e.to_string()))
}

fn run_with<D: Sender>(
    s: &Settings,
    app: &mut AppSide,
    nic: D,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<(Messages, D), RunError> {
    let _pin = Pinned::here(Some(s.cpu));
    let cfg = ServeConfig {
        checksum: s.checksum,
        rx_queue_limit: s.queue,
        pools: PoolSpec {
            policy: s.alloc,
            ..PoolSpec::default()
        },
        apps: vec![App::Sink(PORT)],
        ..ServeConfig::default()
    };
    let mut inline =
        Inline::with_page(nic, &cfg, s.pages).map_err(|e| RunError::Setup(e.to_string()))?;
    let mut last_report = Instant::now();
    // Anything still in flight after the last message is given this long to arrive.
    let mut idle_since: Option<Instant> = None;
    loop {
        let work = inline.step_with(app, |app, data| app.message_done(data));
        if work > 0 {
            idle_since = None;
        } else if inline.driver().softnic().done() {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_millis(20) {
                break;
            }
        } else if let Some(wait) = inline.driver().idle_hint() {
            // Between messages the receiving host idles, as the seed's did: sleep (the
            // kernel may run anything it likes meanwhile).
            if wait > Duration::from_micros(60) {
                std::thread::sleep(wait - Duration::from_micros(50));
            }
        }
        if last_report.elapsed() > Duration::from_millis(100) {
            let sent = inline.driver().softnic().messages_sent();
            progress(
                sent as f64 / s.messages as f64,
                &format!("{sent} of {} messages", s.messages),
            );
            last_report = Instant::now();
        }
    }
    let sent = inline.driver().softnic().messages_sent();
    let received = app.probe.messages;
    let queue_full = inline.stack_stats().queue_full;
    let messages = Messages {
        sent,
        received,
        queue_full,
        lost_elsewhere: sent.saturating_sub(received + queue_full),
    };
    Ok((messages, inline.into_driver()))
}
