//! The coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`): tick resolution (a few
//! milliseconds), read from the vDSO without a system call and several times cheaper than
//! the precise clock on a VM. For what the hot paths pace by: the stack's timers, how often
//! an application looks whether the server is still there, how often a driver looks at a
//! device.

use std::time::Duration;

/// Time on the coarse monotonic clock.
#[inline]
pub fn now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}
