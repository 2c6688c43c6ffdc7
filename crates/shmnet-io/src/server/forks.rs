//! TCP sockets shared between applications by `fork` (docs/preload.md, "fork").
//!
//! In the kernel a forked child inherits its parent's descriptors: both hold each socket, a
//! connection closes when its last holder lets go, and whichever process reads gets the
//! bytes. Here an application's socket is an entry in its own table ([`super::sockets`]),
//! so a fork is carried by three steps:
//!
//! 1. **`Fork`** (the parent, just before it forks): the server makes a *ticket* naming
//!    every TCP socket the parent holds (listeners, and the connections it opened or took
//!    with `accept`: announced connections not yet taken stay the parent's alone, as they
//!    stay in a kernel's accept queue). Each gets a *hold*, a reference the child to come
//!    owns before it exists, and is *claimed by nobody*: no holder receives its bytes,
//!    events or connections until one asks.
//! 2. **`Adopt`** (the child, attached as an application of its own, at its first call on a
//!    socket): the ticket's holds become entries in the child's table. A ticket is good
//!    once, for one child, for [`FORK_TICKET_LIFETIME`]; then its holds are let go.
//! 3. **`Resume`** (any holder, at its first read or poll of a connection after a fork):
//!    the connection is *claimed* by that holder, and the others' entries fall silent. A
//!    shared *listener* is asked instead: each holder sends `Resume` whenever it waits for a
//!    connection and has none, joining a queue of *waiters*; each connection the stack
//!    accepts goes to the first waiter, which leaves the queue (it asks again when it next
//!    waits). With nobody waiting, connections wait in the stack's accept queue — as in a
//!    kernel, where whichever process is in `accept` gets the next connection.
//!
//! A socket's stack resources are let go ([`Forks::let_go`] says when) once no entry and no
//! hold refers to it. When the holder that claimed it lets go, every remaining holder gets
//! its deliveries again; when one holder remains and no hold, the socket is no longer
//! shared.
//!
//! Invariants: `refs == holders + holds` of every shared socket, both counting what exists
//! (an entry in some application's table, a hold in some live ticket); a socket absent from
//! [`Forks::shared`] has exactly one holder. Entries are silenced or woken only by the data
//! plane after a change ([`Forks::take_changed`]), so [`Claim`] is the truth and the
//! entries' `dormant` flags follow it.

use std::collections::HashMap;
use std::time::Instant;

use shmnet_stack::tcp::{ListenHandle, TcpHandle};

use crate::control::FORK_TICKET_LIFETIME;

/// A TCP socket in the stack, as an entry of an application's table names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum StackSock {
    Conn(TcpHandle),
    Listen(ListenHandle),
}

/// Which holder of a shared socket gets its deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// None: just forked, nobody has used it since.
    Nobody,
    /// The entry numbered `.1` of application `.0`.
    Holder(u64, u16),
    /// Every holder (the one that claimed it let go).
    Everyone,
}

/// A socket more than one party refers to.
#[derive(Clone, Debug)]
struct Shared {
    /// Entries in applications' tables.
    holders: u32,
    /// Holds of live tickets.
    holds: u32,
    /// A connection's: who gets its deliveries.
    claim: Claim,
    /// A listener: handed connections in turn to its holders that wait ([`Forks::served`]).
    listener: bool,
    /// A listener's holders waiting for a connection, in the order they asked (each once).
    waiters: std::collections::VecDeque<(u64, u16)>,
}

/// What a ticket holds of one socket for the child: its number in the parent and, for a
/// listener, its backlog; for a connection, whether the parent was told it connected.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held<K = StackSock> {
    pub(crate) parent: u16,
    pub(crate) sock: K,
    /// A listener (else a connection).
    pub(crate) listener: bool,
    pub(crate) backlog: u16,
    pub(crate) said_connected: bool,
}

/// A fork's ticket.
struct Ticket<K> {
    secret: u64,
    uid: u32,
    made: Instant,
    /// Held by the control connection made for the child ([`Forks::hold`]): it does not
    /// expire, and goes when that connection closes ([`Forks::drop_ticket`]).
    held_by_connection: bool,
    held: Vec<Held<K>>,
}

/// How forks went (in `shmnet stats`: `forks`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForkCounters {
    /// Tickets made (`Fork` requests served).
    pub forks: u64,
    /// Tickets a child took (`Adopt` requests served).
    pub adopted: u64,
    /// `Adopt` requests refused: no live ticket with that secret for that user.
    pub refused: u64,
    /// Tickets that expired unused: no connection held them, and no child came.
    pub expired: u64,
    /// Tickets let go unused when the connection made for the child closed (it exited or
    /// `exec`ed without a call on a socket).
    #[serde(default)]
    pub abandoned: u64,
    /// Sockets held by a ticket or shared by several applications now.
    pub shared_now: u64,
    /// `Resume` operations (a holder claiming a shared socket).
    pub resumes: u64,
}

/// Every shared socket and live ticket of the server, keyed by `K` (the stack's sockets;
/// any small key in the tests).
pub(crate) struct Forks<K = StackSock> {
    shared: HashMap<K, Shared>,
    tickets: Vec<Ticket<K>>,
    /// Sockets whose claim changed since the data plane last looked (each once).
    changed: Vec<K>,
    counters: ForkCounters,
}

impl<K> Default for Forks<K> {
    fn default() -> Self {
        Self {
            shared: HashMap::new(),
            tickets: Vec::new(),
            changed: Vec::new(),
            counters: ForkCounters::default(),
        }
    }
}

impl<K: Copy + Eq + std::hash::Hash> Forks<K> {
    /// Notes that `sock`'s claim changed (once, however often).
    fn mark_changed(&mut self, sock: K) {
        if !self.changed.contains(&sock) {
            self.changed.push(sock);
        }
    }

    /// Whether nothing is shared and no ticket lives (the data plane then skips all of this).
    pub(crate) fn is_idle(&self) -> bool {
        self.shared.is_empty() && self.tickets.is_empty() && self.changed.is_empty()
    }

    /// Makes a ticket for the sockets in `held`, of an application of user `uid` about to
    /// fork; returns its secret. Each socket gets a hold and is claimed by nobody.
    pub(crate) fn fork(&mut self, uid: u32, held: Vec<Held<K>>, now: Instant) -> u64 {
        for h in &held {
            let s = self.shared.entry(h.sock).or_insert(Shared {
                holders: 1,
                holds: 0,
                claim: Claim::Everyone,
                listener: h.listener,
                waiters: std::collections::VecDeque::new(),
            });
            s.holds += 1;
            s.claim = Claim::Nobody;
            self.mark_changed(h.sock);
        }
        let secret = loop {
            let s = random_u64();
            if s != 0 && !self.tickets.iter().any(|t| t.secret == s) {
                break s;
            }
        };
        self.tickets.push(Ticket {
            secret,
            uid,
            made: now,
            held_by_connection: false,
            held,
        });
        self.counters.forks += 1;
        secret
    }

    /// Takes the live ticket `secret` of user `uid` for a child: its holds become the
    /// child's entries (the caller makes them, silent, and calls [`Forks::held_to_entry`]
    /// for each it made). `None` (counted) if there is no such ticket: call
    /// [`Forks::expire`] first, so that an expired ticket is not taken.
    pub(crate) fn take_ticket(&mut self, secret: u64, uid: u32) -> Option<Vec<Held<K>>> {
        let Some(i) = self
            .tickets
            .iter()
            .position(|t| t.secret == secret && may_take(t.uid, uid))
        else {
            self.counters.refused += 1;
            return None;
        };
        self.counters.adopted += 1;
        Some(self.tickets.swap_remove(i).held)
    }

    /// A hold on `sock` became an entry of the child's table.
    pub(crate) fn held_to_entry(&mut self, sock: K) {
        if let Some(s) = self.shared.get_mut(&sock) {
            s.holds = s.holds.saturating_sub(1);
            s.holders += 1;
        }
    }

    /// A hold on `sock` the child could not take (its table was full): let go as if it
    /// expired. Returns whether `sock` is now unreferenced (the caller releases it).
    pub(crate) fn drop_hold(&mut self, sock: K) -> bool {
        let Some(s) = self.shared.get_mut(&sock) else {
            return false;
        };
        s.holds = s.holds.saturating_sub(1);
        self.settle(sock)
    }

    /// Lets go of the holds of tickets older than [`FORK_TICKET_LIFETIME`] that no
    /// connection holds; returns the sockets no one refers to any more, for the caller to
    /// release in the stack.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<K> {
        let mut gone = Vec::new();
        let mut i = 0;
        while i < self.tickets.len() {
            let t = &self.tickets[i];
            if t.held_by_connection || now.duration_since(t.made) < FORK_TICKET_LIFETIME {
                i += 1;
                continue;
            }
            let t = self.tickets.swap_remove(i);
            self.counters.expired += 1;
            self.let_go_of_ticket(t, &mut gone);
        }
        gone
    }

    /// Ticket `secret` is held by a control connection of user `uid`, made for the child:
    /// it waits for the child as long as that connection lives.
    pub(crate) fn hold(&mut self, secret: u64, uid: u32) {
        if let Some(t) = self
            .tickets
            .iter_mut()
            .find(|t| t.secret == secret && may_take(t.uid, uid))
        {
            t.held_by_connection = true;
        }
    }

    /// The connection that held ticket `secret` closed: if the child did not adopt it (it
    /// exited, or `exec`ed), its holds go now. Returns the sockets no one refers to any
    /// more, for the caller to release.
    pub(crate) fn drop_ticket(&mut self, secret: u64) -> Vec<K> {
        let mut gone = Vec::new();
        if let Some(i) = self.tickets.iter().position(|t| t.secret == secret) {
            let t = self.tickets.swap_remove(i);
            self.counters.abandoned += 1;
            self.let_go_of_ticket(t, &mut gone);
        }
        gone
    }

    fn let_go_of_ticket(&mut self, t: Ticket<K>, gone: &mut Vec<K>) {
        for h in t.held {
            if self.drop_hold(h.sock) {
                gone.push(h.sock);
            }
        }
    }

    /// When the oldest live ticket expires, if any (the data plane wakes for it).
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.tickets
            .iter()
            .filter(|t| !t.held_by_connection)
            .map(|t| t.made + FORK_TICKET_LIFETIME)
            .min()
    }

    /// Entry `n` of application `app` sends `Resume` on `sock`: a connection is claimed by
    /// it (only it gets deliveries from now on); on a listener it waits for a connection,
    /// behind those that asked before. Nothing happens to a socket that is not shared.
    pub(crate) fn claim(&mut self, sock: K, app: u64, n: u16) {
        self.counters.resumes += 1;
        let Some(s) = self.shared.get_mut(&sock) else {
            return;
        };
        if s.listener {
            if s.waiters.contains(&(app, n)) {
                return;
            }
            s.waiters.push_back((app, n));
        } else {
            s.claim = Claim::Holder(app, n);
        }
        self.mark_changed(sock);
    }

    /// Entry `n` of application `app`, the first waiter of shared listener `sock`, was
    /// handed a connection: it leaves the queue, and the next waiter is handed the next.
    pub(crate) fn served(&mut self, sock: K, app: u64, n: u16) {
        let Some(s) = self.shared.get_mut(&sock) else {
            return;
        };
        if s.waiters.front() == Some(&(app, n)) {
            s.waiters.pop_front();
            self.mark_changed(sock);
        }
    }

    /// Whether `sock` is referred to by more than one entry or hold.
    pub(crate) fn is_shared(&self, sock: K) -> bool {
        self.shared.contains_key(&sock)
    }

    /// Entry `n` of application `app` lets go of `sock`. Returns whether that was the last
    /// reference: only then does the caller release it in the stack (close, reset, stop
    /// listening); otherwise the socket lives on for its other holders.
    pub(crate) fn let_go(&mut self, sock: K, app: u64, n: u16) -> bool {
        let Some(s) = self.shared.get_mut(&sock) else {
            return true;
        };
        s.holders = s.holders.saturating_sub(1);
        if s.claim == Claim::Holder(app, n) {
            s.claim = Claim::Everyone;
        }
        s.waiters.retain(|&w| w != (app, n));
        let none_left = s.holders + s.holds == 0;
        self.mark_changed(sock);
        if none_left {
            self.shared.remove(&sock);
            return true;
        }
        self.settle(sock);
        false
    }

    /// After a reference to `sock` went: stops sharing it if one entry and no hold remain
    /// (the entry gets everything again); returns whether none remains at all.
    fn settle(&mut self, sock: K) -> bool {
        let Some(s) = self.shared.get(&sock) else {
            return false;
        };
        let (holders, holds) = (s.holders, s.holds);
        if holders + holds == 0 {
            self.shared.remove(&sock);
            return true;
        }
        if holders <= 1 && holds == 0 {
            self.shared.remove(&sock);
            self.mark_changed(sock);
        }
        false
    }

    /// Whether entry `n` of application `app`, which refers to `sock`, is to stay silent.
    pub(crate) fn dormant(&self, sock: K, app: u64, n: u16) -> bool {
        let Some(s) = self.shared.get(&sock) else {
            return false;
        };
        if s.listener {
            return s.waiters.front() != Some(&(app, n));
        }
        match s.claim {
            Claim::Everyone => false,
            Claim::Nobody => true,
            Claim::Holder(a, m) => (a, m) != (app, n),
        }
    }

    /// The sockets whose claim changed since the last call (the data plane sets its
    /// entries' `dormant` flags from [`Forks::dormant`]).
    pub(crate) fn take_changed(&mut self) -> Vec<K> {
        std::mem::take(&mut self.changed)
    }

    /// The counters, with how many sockets are shared now.
    pub(crate) fn counters(&self) -> ForkCounters {
        ForkCounters {
            shared_now: self.shared.len() as u64,
            ..self.counters
        }
    }
}

/// Whether a process of user `uid` may take a ticket made for user `owner`: its own user's,
/// or root's — a child of root that gave up its privileges (nginx's and Apache's workers run
/// as `nobody` or `www-data`) still holds what its parent shared, as it holds the inherited
/// descriptors in the kernel. The secret is the capability; the user check keeps one user's
/// leaked secret from serving another.
fn may_take(owner: u32, uid: u32) -> bool {
    owner == uid || owner == 0
}

/// 64 bits from the kernel's random source (a ticket's secret: a process that did not fork
/// from the parent cannot guess it).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    let mut filled = 0;
    while filled < b.len() {
        match rustix::rand::getrandom(&mut b[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            // getrandom(2) cannot fail on a kernel that has it (3.17 and later) but for
            // EINTR; if it did, the clock is a poorer secret but still names one ticket.
            Err(_) => {
                return std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64);
            }
        }
    }
    u64::from_ne_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(sock: u32, parent: u16) -> Held<u32> {
        Held {
            parent,
            sock,
            listener: false,
            backlog: 8,
            said_connected: true,
        }
    }

    fn conn(i: u32) -> u32 {
        i
    }

    #[test]
    fn a_forked_socket_lives_until_its_last_holder_lets_go() {
        let mut f = Forks::<u32>::default();
        let now = Instant::now();
        let c = conn(1);
        let secret = f.fork(1000, vec![held(c, 4)], now);
        assert!(f.dormant(c, 1, 4), "claimed by nobody after the fork");
        // The parent closes first: the child's hold keeps it.
        assert!(!f.let_go(c, 1, 4));
        assert!(f.take_ticket(secret ^ 1, 1000).is_none(), "a wrong secret");
        assert!(f.take_ticket(secret, 1001).is_none(), "another user");
        let root = f.fork(0, vec![held(conn(8), 1)], now);
        let h = f
            .take_ticket(root, 1001)
            .expect("root's, by a child that dropped root");
        assert!(!f.drop_hold(h[0].sock), "its parent still holds it");
        let h = f.take_ticket(secret, 1000).expect("the ticket");
        assert!(f.take_ticket(secret, 1000).is_none(), "good once");
        f.held_to_entry(h[0].sock);
        assert!(f.dormant(c, 2, 0), "silent until the child uses it");
        f.claim(c, 2, 0);
        assert!(!f.dormant(c, 2, 0));
        assert!(f.let_go(c, 2, 0), "the child's close is the last");
        assert_eq!(f.counters().refused, 3);
        assert_eq!(f.counters().shared_now, 0);
    }

    #[test]
    fn a_claim_silences_the_other_holders_until_its_holder_goes() {
        let mut f = Forks::<u32>::default();
        let now = Instant::now();
        let c = conn(2);
        let secret = f.fork(0, vec![held(c, 3)], now);
        let h = f.take_ticket(secret, 0).unwrap();
        f.held_to_entry(h[0].sock);
        assert!(f.dormant(c, 1, 3) && f.dormant(c, 2, 0));
        f.claim(c, 2, 0);
        assert!(f.dormant(c, 1, 3) && !f.dormant(c, 2, 0));
        f.claim(c, 1, 3);
        assert!(!f.dormant(c, 1, 3) && f.dormant(c, 2, 0));
        // A third holder by a second fork of the parent.
        let s2 = f.fork(0, vec![held(c, 3)], now);
        let h = f.take_ticket(s2, 0).unwrap();
        f.held_to_entry(h[0].sock);
        f.claim(c, 3, 0);
        assert!(!f.let_go(c, 3, 0));
        assert!(
            !f.dormant(c, 1, 3) && !f.dormant(c, 2, 0),
            "everyone after the claimer went"
        );
        assert!(!f.let_go(c, 1, 3));
        assert!(!f.is_shared(c), "one holder left");
        assert!(f.let_go(c, 2, 0));
        assert!(!f.take_changed().is_empty());
    }

    #[test]
    fn an_unused_ticket_expires_and_lets_go_of_what_only_it_held() {
        let mut f = Forks::<u32>::default();
        let t0 = Instant::now();
        let (kept, orphan) = (conn(5), conn(6));
        let _ = f.fork(0, vec![held(kept, 0), held(orphan, 1)], t0);
        assert_eq!(f.next_expiry(), Some(t0 + FORK_TICKET_LIFETIME));
        assert!(!f.let_go(orphan, 1, 1), "held for the child");
        assert!(f.expire(t0 + FORK_TICKET_LIFETIME / 2).is_empty());
        let gone = f.expire(t0 + FORK_TICKET_LIFETIME);
        assert_eq!(gone, vec![orphan]);
        assert!(
            !f.is_shared(kept) && !f.dormant(kept, 1, 0),
            "the parent's again"
        );
        assert_eq!(f.counters().expired, 1);
        assert!(f.is_idle() || !f.take_changed().is_empty());
    }

    #[test]
    fn a_shared_listener_hands_each_connection_to_the_next_holder_that_waits() {
        let mut f = Forks::<u32>::default();
        let now = Instant::now();
        let l = 9;
        let listener = Held {
            listener: true,
            ..held(l, 0)
        };
        let t1 = f.fork(0, vec![listener], now);
        let t2 = f.fork(0, vec![listener], now);
        for t in [t1, t2] {
            let h = f.take_ticket(t, 0).unwrap();
            f.held_to_entry(h[0].sock);
        }
        // Parent (1, 0) and workers (2, 0), (3, 0): nobody waits, nobody is handed one.
        assert!(f.dormant(l, 1, 0) && f.dormant(l, 2, 0) && f.dormant(l, 3, 0));
        f.claim(l, 2, 0);
        f.claim(l, 3, 0);
        f.claim(l, 2, 0); // asking twice is waiting once
        assert!(
            !f.dormant(l, 2, 0) && f.dormant(l, 3, 0),
            "the first to ask"
        );
        f.served(l, 3, 0); // not its turn: nothing changes
        assert!(!f.dormant(l, 2, 0));
        f.served(l, 2, 0);
        assert!(f.dormant(l, 2, 0) && !f.dormant(l, 3, 0), "then the next");
        f.served(l, 3, 0);
        assert!(
            f.dormant(l, 3, 0),
            "nobody waits: connections wait in the stack"
        );
        f.claim(l, 3, 0);
        assert!(!f.let_go(l, 3, 0), "a waiter that closes leaves the queue");
        assert!(f.dormant(l, 2, 0) && f.dormant(l, 1, 0));
        assert!(!f.let_go(l, 2, 0));
        assert!(
            !f.is_shared(l) && !f.dormant(l, 1, 0),
            "alone again: every connection"
        );
    }
}
