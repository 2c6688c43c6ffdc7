//! When a wait gives up, fixed lazily: a receive that finds its message at once reads no
//! clock (on a VM the precise clock costs tens of nanoseconds, as much as the rest of a
//! small receive).

use std::time::{Duration, Instant};

/// When a wait gives up.
#[derive(Clone, Copy, Debug)]
pub(super) enum Deadline {
    /// Never: wait until something comes.
    Never,
    /// At this instant.
    At(Instant),
    /// This long after the wait first finds nothing (fixed to an [`Deadline::At`] then).
    After(Duration),
}

impl Deadline {
    /// The instant the wait gives up at, fixing an [`Deadline::After`] to one from now.
    pub(super) fn fix(&mut self) -> Option<Instant> {
        match *self {
            Self::Never => None,
            Self::At(at) => Some(at),
            Self::After(span) => {
                let at = Instant::now() + span;
                *self = Self::At(at);
                Some(at)
            }
        }
    }

    /// Whether the wait should give up now (fixes an [`Deadline::After`] first, with the
    /// one clock read that also answers).
    pub(super) fn passed(&mut self) -> bool {
        match *self {
            Self::Never => false,
            Self::At(at) => Instant::now() >= at,
            Self::After(span) => {
                *self = Self::At(Instant::now() + span);
                span.is_zero()
            }
        }
    }
}

impl From<Option<Instant>> for Deadline {
    fn from(at: Option<Instant>) -> Self {
        at.map_or(Self::Never, Self::At)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_after_is_fixed_once_and_then_passes() {
        let mut d = Deadline::After(Duration::ZERO);
        let at = d.fix().expect("fixed");
        assert_eq!(d.fix(), Some(at), "fixed once, not moved on");
        assert!(d.passed());
        let mut never = Deadline::from(None);
        assert!(!never.passed());
        let mut later = Deadline::After(Duration::from_secs(3600));
        assert!(!later.passed());
    }
}
