//! Seed 002's asymmetric Peterson mutex ("Software Mutex"), from 32-bit loads and stores.
//!
//! Two parties share one [`AsymMutex`]: the **waiting** side (the seed's protocol server)
//! spins until it enters, exactly as in Peterson's algorithm; the **yielding** side (the
//! seed's interrupt handler, our packet driver) looks once and gives up, so it can never
//! deadlock against a protocol server it interrupted or that was preempted inside its
//! critical section.
//!
//! ```text
//! waiting side                          yielding side
//! waiting = TRUE                        yielding = TRUE
//! turn = YIELDING                       turn = WAITING
//! while yielding && turn == YIELDING    if waiting && turn == WAITING
//!     spin                                  yielding = FALSE; return FALSE
//! <critical section>                    <critical section>
//! waiting = FALSE                       yielding = FALSE
//! ```
//!
//! # What 2026 hardware changes
//!
//! The seed assumed that a store is seen by the other processor before the storing one's
//! next load. No processor of today promises that: x86's store buffer lets each side's load
//! of the other's flag pass its own store of its flag (total store order still reorders a
//! store with a later load), and Arm and RISC-V reorder more. Run as printed, Peterson's
//! algorithm lets both parties in: the loom model `faithful_mutex_needs_its_fence` finds
//! that execution.
//!
//! On x86 an `mfence` between the stores and the loads would be enough; the memory model
//! Rust shares with C and C++ promises less than x86 delivers, and the form it does prove
//! correct (Vyukov's) writes `turn` with an atomic exchange, whose total order on one word
//! decides the race. That is what this mutex does: every word is 32 bits, every access a
//! load or a store, except the one exchange per entry. On x86 that exchange is an `xchg`,
//! a locked instruction — exactly what the fence would cost, and exactly the compare-and-swap
//! class of instruction the seed wrote a software mutex to avoid. So on 2026 hardware the
//! software mutex no longer saves the locked instruction and no longer buys portability
//! (every processor since has compare-and-swap or load-linked/store-conditional); what it
//! still buys is the asymmetry — a side that never waits — which the default channel gets
//! instead from wait-free SPSC rings with no locked instruction at all on their fast path.
//!
//! # Memory ordering
//!
//! Flags are stored with release and loaded with acquire; `turn` is exchanged with
//! acquire-release. The exchanges on `turn` are totally ordered: the side whose exchange
//! comes second reads the first's, so it sees the first's flag and, in `turn`, its own
//! value — it waits (or gives up) until the first side's unlock, whose release store its
//! acquire load then reads. A side that enters because `turn` says so read the other's
//! exchange, which is release-ordered after the other's previous critical section.
//!
//! # Untrusted peer
//!
//! The words live in memory both parties write. A peer that never clears its flag holds the
//! waiting side at most [`SPIN_LIMIT`] looks (yielding the CPU after [`SPIN_BEFORE_YIELD`]),
//! after which [`AsymMutex::lock_waiting`] gives up too and the caller counts it: the seed's
//! protocol server would have spun forever behind a dead driver.

use crate::sync::{AtomicU32, Ordering, spin_hint, yield_now};

/// Looks at the lock before the waiting side gives the CPU away (then it yields between
/// looks: on one CPU the holder may be the thread it is waiting for).
pub const SPIN_BEFORE_YIELD: u32 = 64;

/// Looks after which the waiting side gives up on a holder that never lets go: past
/// [`SPIN_BEFORE_YIELD`] each look follows a `sched_yield`, so this is some milliseconds —
/// far longer than any honest critical section (tens of nanoseconds), short enough that a
/// dead or hostile holder costs each entry only that.
pub const SPIN_LIMIT: u32 = 1 << 14;

const WAITING: u32 = 0;
const YIELDING: u32 = 1;

/// The shared words of one mutex: each side's intent flag and whose turn it is. Zeroed
/// memory is an unlocked mutex.
#[repr(C)]
#[derive(Debug, Default)]
pub struct AsymMutex {
    waiting: AtomicU32,
    yielding: AtomicU32,
    turn: AtomicU32,
}

/// How the waiting side got in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entered {
    /// In the critical section after `spins` looks at a held lock (0: it was free).
    After {
        /// Looks at the lock while the yielding side held it.
        spins: u32,
    },
    /// The yielding side kept the lock for [`SPIN_LIMIT`] looks: not entered.
    GaveUp,
}

impl AsymMutex {
    /// The waiting side (the protocol server): spins while the yielding side is inside.
    /// On [`Entered::After`] the caller is in the critical section and must call
    /// [`AsymMutex::unlock_waiting`].
    #[inline]
    pub fn lock_waiting(&self) -> Entered {
        self.waiting.store(1, Ordering::Release);
        self.turn.swap(YIELDING, Ordering::AcqRel);
        let mut spins = 0;
        while self.yielding.load(Ordering::Acquire) == 1
            && self.turn.load(Ordering::Acquire) == YIELDING
        {
            spins += 1;
            if spins >= SPIN_LIMIT {
                self.waiting.store(0, Ordering::Release);
                return Entered::GaveUp;
            }
            if spins < SPIN_BEFORE_YIELD {
                spin_hint();
            } else {
                yield_now();
            }
        }
        Entered::After { spins }
    }

    /// Leaves the waiting side's critical section.
    #[inline]
    pub fn unlock_waiting(&self) {
        self.waiting.store(0, Ordering::Release);
    }

    /// The yielding side (the driver): one look, `true` if it entered (then it must call
    /// [`AsymMutex::unlock_yielding`]), `false` if the waiting side is in or was first.
    #[inline]
    pub fn try_lock_yielding(&self) -> bool {
        self.yielding.store(1, Ordering::Release);
        self.turn.swap(WAITING, Ordering::AcqRel);
        if self.waiting.load(Ordering::Acquire) == 1 && self.turn.load(Ordering::Acquire) == WAITING
        {
            self.yielding.store(0, Ordering::Release);
            return false;
        }
        true
    }

    /// Leaves the yielding side's critical section.
    #[inline]
    pub fn unlock_yielding(&self) {
        self.yielding.store(0, Ordering::Release);
    }

    /// The seed's algorithm as printed (plain stores, no fence or exchange), as a 1993
    /// processor ran it: for the loom model that shows why the exchange is there. Never use
    /// it.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn try_lock_yielding_unfenced(&self) -> bool {
        self.yielding.store(1, Ordering::Release);
        self.turn.store(WAITING, Ordering::Release);
        if self.waiting.load(Ordering::Acquire) == 1 && self.turn.load(Ordering::Acquire) == WAITING
        {
            self.yielding.store(0, Ordering::Release);
            return false;
        }
        true
    }

    /// The waiting side as printed (loom only, see above).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn lock_waiting_unfenced(&self) {
        self.waiting.store(1, Ordering::Release);
        self.turn.store(YIELDING, Ordering::Release);
        while self.yielding.load(Ordering::Acquire) == 1
            && self.turn.load(Ordering::Acquire) == YIELDING
        {
            yield_now();
        }
    }
}

/// Which side of every mutex a queue end plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The protocol server: waits for the lock.
    Waiting,
    /// The driver: gives up at once.
    Yielding,
}

impl Side {
    /// Enters `m` from this side: `Some(spins)` if in (0 for the yielding side), `None` if
    /// not (the yielding side found it taken, or the waiting side gave up on a dead peer).
    #[inline]
    pub(crate) fn enter(self, m: &AsymMutex) -> Option<u32> {
        match self {
            Side::Waiting => match m.lock_waiting() {
                Entered::After { spins } => Some(spins),
                Entered::GaveUp => None,
            },
            Side::Yielding => m.try_lock_yielding().then_some(0),
        }
    }

    /// Leaves `m`, entered from this side.
    #[inline]
    pub(crate) fn leave(self, m: &AsymMutex) {
        match self {
            Side::Waiting => m.unlock_waiting(),
            Side::Yielding => m.unlock_yielding(),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A driver that dies inside its critical section (its flag never cleared) holds the
    /// server for a bounded number of looks, not forever; once the flag is cleared the
    /// server enters again.
    #[test]
    fn a_dead_holder_is_given_up_on() {
        let m = AsymMutex::default();
        assert!(m.try_lock_yielding());
        assert_eq!(m.lock_waiting(), Entered::GaveUp);
        // The driver side may not enter while the server holds the mutex...
        m.unlock_yielding();
        assert_eq!(m.lock_waiting(), Entered::After { spins: 0 });
        assert!(!m.try_lock_yielding());
        // ...and enters once it lets go.
        m.unlock_waiting();
        assert!(m.try_lock_yielding());
        m.unlock_yielding();
    }
}
