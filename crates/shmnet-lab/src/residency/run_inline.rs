//! The inline structure: softnic, the stack and the application in this thread, pinned.

use super::trace::{Record, Tracer};
use super::traced_driver::TracedDriver;
use super::{AppSide, Messages, RunError, Settings};
use crate::calibrate::Pinned;
use shmnet_chan::PoolSpec;
use shmnet_io::driver::Driver;
use shmnet_io::driver::softnic::{Schedule, Softnic, SoftnicConfig};
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
        // The seed's sender was another host: message i is due i gaps after the first
        // whatever this receiver does, so a receiver slowed by its load finds several due
        // at once and its full queue drops them (Table 4's drop rate).
        schedule: Schedule::Fixed,
        checksum: s.checksum,
        dma: s.dma,
        dst_ports: vec![PORT],
        ..SoftnicConfig::default()
    })
    .map_err(|e| RunError::Settings(e.to_string()))
}

/// Words of the load walked between two of the device's interrupts.
const WORDS_PER_INTERRUPT: usize = 32;

/// The synthetic application's walk over each message copied out, in pieces of
/// [`WORDS_PER_INTERRUPT`] words with an [`Inline::interrupt`] after each: frames that fall
/// due while the application works are received onto the socket's queue then, as BSD's
/// interrupt handler received them in the middle of the seed's loaded application, and the
/// load's later blocks can evict them before their copy-out (seed 000's Figure 8 and Table
/// 4; without the interrupts every frame would be written when the receiver next polled,
/// just before its copy-out, and no load could evict it). The walk reads the application's
/// buffer, which holds the last of the step's messages (the bytes only feed the values the
/// blocks are incremented by). Returns the frames the interrupts received.
fn walk_load<D: Sender>(inline: &mut Inline<D>, app: &mut AppSide, pending: &[usize]) -> usize {
    let mut frames = 0;
    for &len in pending {
        let words = super::load::Load::words(len);
        let mut at = 0;
        while at < words {
            let to = (at + WORDS_PER_INTERRUPT).min(words);
            if let Some(load) = &mut app.load {
                load.on_words(&inline.app_buffer()[..len], at..to, app.tracer.as_mut());
            }
            at = to;
            frames += inline.interrupt();
        }
    }
    frames
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
            layout: s.layout,
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
    // Messages copied out in this step whose load is still to walk (their lengths).
    let mut pending: Vec<usize> = Vec::with_capacity(64);
    let mut frames_during_load = 0;
    loop {
        pending.clear();
        let mut work = inline.step_with(app, |app, data| {
            app.message_copied(data);
            pending.push(data.len());
        });
        if app.load.is_some() {
            let frames = walk_load(&mut inline, app, &pending);
            frames_during_load += frames as u64;
            work += frames;
        }
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
        frames_during_load,
    };
    Ok((messages, inline.into_driver()))
}
