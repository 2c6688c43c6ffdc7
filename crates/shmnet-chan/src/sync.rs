//! The atomics the channel is built from, switched to loom's under `--cfg loom`.
//!
//! Every shared-memory structure in this crate is made of these types. In a normal build they
//! are `std`'s, which have the same size and bit layout as the plain integers, so a zeroed
//! window is a valid set of them. Under loom they are loom's model-checked types, which cannot
//! live in a foreign mapping: the loom models build the same structures on the heap instead.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, fence};

pub(crate) use std::sync::atomic::Ordering;

/// Called inside spin loops. Under loom it yields to the model's scheduler, which would
/// otherwise see a spin as an infinite execution.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Gives the core to another thread after a spin has gone on too long.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Pads and aligns `T` to a 64-byte cache line so two parties' hot words never share one.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct CacheLine<T>(pub T);

impl<T> std::ops::Deref for CacheLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
