//! Path MTUs learnt from routers, per destination, for ten minutes (Linux keeps them in its
//! route cache for `ip_rt_mtu_expires`, 600 s): a new connection to a destination whose path
//! was found narrower than the link starts with the MSS that fits it, instead of losing its
//! first flight to find it again.
//!
//! A small table (at most [`MAX_PATHS`] destinations, the one expiring first replaced when
//! full): an entry is made only by a "fragmentation needed" that a connection believed
//! (RFC 5927's checks), so a blind attacker cannot fill it with forged ones.

use std::net::Ipv4Addr;

use crate::Instant;

/// How long a path MTU learnt is kept (nanoseconds): 10 minutes, as Linux.
pub const PATH_MTU_EXPIRES_NS: u64 = 600_000_000_000;

/// Destinations remembered at most.
pub const MAX_PATHS: usize = 64;

/// The table. See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Paths {
    /// (destination, path MTU, until when).
    entries: Vec<(Ipv4Addr, u16, Instant)>,
}

impl Paths {
    /// The path MTU toward `dst` learnt less than ten minutes before `now`.
    pub(crate) fn mtu(&self, dst: Ipv4Addr, now: Instant) -> Option<u16> {
        self.entries
            .iter()
            .find(|e| e.0 == dst && e.2.nanos() > now.nanos())
            .map(|e| e.1)
    }

    /// Remembers that the path toward `dst` carries `mtu` bytes, from `now` on.
    pub(crate) fn learn(&mut self, dst: Ipv4Addr, mtu: u16, now: Instant) {
        let until = Instant::from_nanos(now.nanos().saturating_add(PATH_MTU_EXPIRES_NS));
        if let Some(e) = self.entries.iter_mut().find(|e| e.0 == dst) {
            *e = (dst, mtu, until);
            return;
        }
        if self.entries.len() < MAX_PATHS {
            self.entries.push((dst, mtu, until));
            return;
        }
        if let Some(e) = self.entries.iter_mut().min_by_key(|e| e.2.nanos()) {
            *e = (dst, mtu, until);
        }
    }

    /// Forgets every path.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_remembered_ten_minutes_and_the_oldest_makes_room() {
        let mut p = Paths::default();
        let t = Instant::from_nanos(1);
        let a = Ipv4Addr::new(10, 0, 0, 1);
        p.learn(a, 1280, t);
        assert_eq!(p.mtu(a, t), Some(1280));
        let later = Instant::from_nanos(1 + PATH_MTU_EXPIRES_NS / 2);
        p.learn(a, 1000, later);
        assert_eq!(p.mtu(a, later), Some(1000), "the newer word");
        let gone = Instant::from_nanos(2 + PATH_MTU_EXPIRES_NS / 2 + PATH_MTU_EXPIRES_NS);
        assert_eq!(p.mtu(a, gone), None, "expired");
        for k in 0..MAX_PATHS as u8 {
            let at = Instant::from_nanos(later.nanos() + 1 + u64::from(k));
            p.learn(Ipv4Addr::new(10, 1, 0, k), 1400, at);
        }
        assert_eq!(p.entries.len(), MAX_PATHS);
        assert_eq!(p.mtu(a, later), None, "the one expiring first made room");
        p.clear();
        assert_eq!(p.mtu(Ipv4Addr::new(10, 1, 0, 1), later), None);
    }
}
