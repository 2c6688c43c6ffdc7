//! The data plane's side of handle translation (seed 004, docs/isolation.md): the lookup
//! cache, the miss port, each application's generation, and the miss thread that serves
//! misses from the registration table.
//!
//! The data plane owns all of it but the table and the thread: a translation takes no lock
//! and makes no system call. Each round it installs what the miss thread served before it
//! takes the applications' sends (dropping fills older than their application's
//! generation), and after them wakes the miss thread if it queued a miss. When an application's registrations change, or it goes, the data plane
//! drops its lines and bumps its generation *before* the control plane unmaps anything
//! ([`HandleCtx::forget_lines`], through the command queue with a reply).

use shmnet_chan::handles::{
    Access, CacheGeometry, Handle, LookupCache, LookupError, LookupStats, MissPort, MissPortStats,
    Pch, RegionTable, miss_channel,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Misses queued at most (a quarter of them per application).
const MISS_QUEUE: usize = 256;
/// How long the idle miss thread sleeps between looks if nobody wakes it.
const MISS_THREAD_NAP: Duration = Duration::from_millis(50);

/// One handle page the data plane translated (the `shmnet lab handles` traces of shmnet's
/// own runs): whose, which page, for which access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleRef {
    /// The application.
    pub app: Pch,
    /// The handle page: the region in the bits above 32, the page within it below.
    pub page: u64,
    /// Read (a send) or write (a receive).
    pub access: Access,
}

/// The references recorded so far, up to a capacity fixed when recording starts: the data
/// plane pushes into room it already has, never allocating, and counts what did not fit.
#[derive(Debug, Default)]
pub struct HandleTrace {
    /// The references, in the order translated.
    pub refs: Vec<HandleRef>,
    /// References that did not fit.
    pub dropped: u64,
}

/// See the [module docs](self).
pub(crate) struct HandleCtx {
    pub(crate) cache: LookupCache,
    pub(crate) misses: MissPort,
    /// Per application number: bumped whenever its lines are dropped.
    generations: Vec<u32>,
    /// Fills installed so far: a request held on a miss (`--on-miss buffer`) is tried
    /// again only once this has moved.
    fills: u64,
    /// Recording the pages translated, when asked ([`HandleCtx::record`]).
    trace: Option<HandleTrace>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HandleCtx {
    /// A cache of geometry `geo` and a miss thread serving it from `table`.
    pub(crate) fn start(
        geo: CacheGeometry,
        table: Arc<Mutex<RegionTable>>,
    ) -> std::io::Result<Self> {
        let (mut misses, mut service) = miss_channel(MISS_QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("shmnet-miss".into())
            .spawn(move || {
                while !stop2.load(Ordering::Relaxed) {
                    if service.serve(&table) == 0 {
                        std::thread::park_timeout(MISS_THREAD_NAP);
                    }
                }
            })?;
        misses.set_thread(thread.thread().clone());
        Ok(Self {
            cache: LookupCache::new(geo),
            misses,
            generations: vec![0; usize::from(Pch::MAX) + 1],
            fills: 0,
            trace: None,
            stop,
            thread: Some(thread),
        })
    }

    /// The generation of `app` now.
    #[inline]
    pub(crate) fn generation(&self, app: Pch) -> u32 {
        generation_in(&self.generations, app)
    }

    /// Installs the lines the miss thread served since the last call (the sends waiting for
    /// them come next).
    #[inline]
    pub(crate) fn install_served(&mut self) {
        let generations = &self.generations;
        let n = self.misses.install(
            &mut self.cache,
            |app| generation_in(generations, app),
            |_| {},
        );
        self.fills += n as u64;
    }

    /// Starts recording every page translated, up to `capacity` references (the room is
    /// taken now, not on the data path).
    pub(crate) fn record(&mut self, capacity: usize) {
        self.trace = Some(HandleTrace {
            refs: Vec::with_capacity(capacity),
            dropped: 0,
        });
    }

    /// Stops recording and returns what was recorded (empty if nothing was).
    pub(crate) fn take_trace(&mut self) -> HandleTrace {
        self.trace.take().unwrap_or_default()
    }

    /// Records the pages `h` covers, if recording (one branch otherwise).
    #[inline]
    pub(crate) fn note(&mut self, h: &Handle, access: Access) {
        let Some(t) = &mut self.trace else { return };
        let Some((first, last)) = h.page_span() else {
            return;
        };
        for page in first..=last {
            if t.refs.len() < t.refs.capacity() {
                t.refs.push(HandleRef {
                    app: h.app,
                    page,
                    access,
                });
            } else {
                t.dropped += 1;
            }
        }
    }

    /// Translates `h` for `access` as the data plane does every handle: recorded (if
    /// recording), looked up in the cache, and on a miss reported to the miss thread (the
    /// line is then on its way; the caller drops or holds the request).
    #[inline]
    pub(crate) fn translate(
        &mut self,
        h: &Handle,
        access: Access,
    ) -> Result<std::ptr::NonNull<u8>, LookupError> {
        self.note(h, access);
        let r = self.cache.translate(h, access);
        if let Err(LookupError::Miss(key)) = &r {
            let generation = self.generation(h.app);
            self.misses.report(*key, access, generation);
        }
        r
    }

    /// Fills installed so far (moves whenever a line arrives).
    #[inline]
    pub(crate) fn fills(&self) -> u64 {
        self.fills
    }

    /// Wakes the miss thread if this round queued a miss: no system call otherwise (a miss
    /// is the seed's interrupt).
    #[inline]
    pub(crate) fn kick(&mut self) {
        self.misses.kick();
    }

    /// Drops every line of `app` and bumps its generation, so a fill served before now is
    /// dropped when it arrives. After this, nothing of `app`'s registrations is reachable
    /// from the data plane.
    pub(crate) fn forget_lines(&mut self, app: Pch) {
        self.cache.invalidate(app, |_| true);
        if let Some(g) = self.generations.get_mut(usize::from(app.0)) {
            *g = g.wrapping_add(1);
        }
        // Its misses in flight will come back stale: forget them, so a request held on one
        // (`--on-miss buffer`) reports it again, and move the fill count, so it tries again.
        self.misses.forget(app);
        self.fills += 1;
    }

    /// The cache's and the miss port's counters.
    pub(crate) fn stats(&self) -> (LookupStats, MissPortStats) {
        (self.cache.stats(), self.misses.stats())
    }
}

/// `app`'s entry of `generations` (0 for a number past the table, which none is).
#[inline]
fn generation_in(generations: &[u32], app: Pch) -> u32 {
    generations.get(usize::from(app.0)).copied().unwrap_or(0)
}

impl Drop for HandleCtx {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
