//! The one way this library waits: for a set of descriptors, some the server's sockets and
//! some the kernel's, as `poll(2)` does — and every blocking call waits through it too.
//!
//! A waiting thread looks at the server's sockets (through the client) and the kernel's
//! descriptors (a zero-timeout `poll`) while holding the state's lock; if nothing is ready
//! it lets the lock go and sleeps in the kernel on its own descriptors and its own eventfd
//! together. So the program's other threads use the server meanwhile.
//!
//! Threads asleep at once: the client's announcement of a sleep is one flag, so one thread
//! at a time — the first to sleep — announces it ([`Client::prepare_sleep`]) and also
//! sleeps on the client's wake-ups; the others sleep on their own eventfds only
//! (`State::sleepers`). Whoever moves deliveries off the ring while others sleep — they may
//! be theirs — wakes them all ([`State::note_moves`]), and so does the armed thread when it
//! leaves, for whatever reason, so that another takes its place. A wake-up is never
//! consumed for another thread: each drains only its own eventfd.
//!
//! [`Client::prepare_sleep`]: shmnet_io::client::Client::prepare_sleep
//! [`State::note_moves`]: crate::table::State::note_moves

use libc::{c_int, c_short, pollfd};
use shmnet_io::client::{Interest, PollItem, PollSocket};
use smallvec::SmallVec;
use std::time::{Duration, Instant};

use crate::real;
use crate::table::{self, Mark, Sock, State};

/// How long a wait for send memory sleeps before it looks again: under `--isolation
/// shared` send buffers come back through the pool, whose wake-up is not among the fds.
const WRITABLE_NAP: Duration = Duration::from_millis(1);

/// What was asked of one of the server's sockets, in `poll` terms.
fn interest(events: c_short) -> Interest {
    Interest {
        readable: events & (libc::POLLIN | libc::POLLRDNORM | libc::POLLPRI) != 0,
        writable: events & (libc::POLLOUT | libc::POLLWRNORM) != 0,
    }
}

fn revents(events: c_short, ready: Interest) -> c_short {
    let mut r = 0;
    if ready.readable {
        r |= events & (libc::POLLIN | libc::POLLRDNORM);
    }
    if ready.writable {
        r |= events & (libc::POLLOUT | libc::POLLWRNORM);
    }
    r
}

/// Fills in `revents` of the server's sockets among `fds`; returns how many are ready.
fn look_shmnet(st: &mut State, fds: &mut [pollfd]) -> c_int {
    // Sockets a forked child could not take from its parent are not open here.
    let mut orphans = 0;
    for p in fds.iter_mut().filter(|p| table::orphaned(p.fd)) {
        p.revents = libc::POLLNVAL;
        orphans += 1;
    }
    // A UDP port several sockets share: its datagrams go to their queues first, so each
    // socket's readiness is its own.
    crate::udp::route_shared(st, fds);
    let State {
        client,
        socks,
        aliases,
        udp_ports,
        ..
    } = st;
    let client = match client {
        Some(Ok(c)) => c,
        _ => return orphans,
    };
    // A wait's few sockets on the stack: a look allocates nothing.
    let mut items: SmallVec<[PollItem<'_>; 8]> = SmallVec::new();
    let mut at: SmallVec<[usize; 8]> = SmallVec::new();
    for (i, p) in fds.iter_mut().enumerate() {
        if table::marked(p.fd) != Mark::Shmnet {
            continue;
        }
        p.revents = 0;
        let key = aliases.get(&p.fd).copied().unwrap_or(p.fd);
        let socket = match socks.get(&key) {
            Some(Sock::Listener { l, .. }) => PollSocket::Listener(l),
            Some(Sock::Stream { s, peeked, .. }) => {
                if !peeked.is_empty() {
                    // Bytes set aside by a peek are there to read.
                    p.revents |= p.events & (libc::POLLIN | libc::POLLRDNORM);
                }
                PollSocket::Stream(s)
            }
            Some(Sock::Udp(u)) => match udp_ports.get(&u.port) {
                Some(port) => {
                    if u.error.is_some() {
                        // An ICMP error waits to be reported, whatever was asked.
                        p.revents |= libc::POLLERR;
                    }
                    if u.has_queued() {
                        p.revents |= p.events & (libc::POLLIN | libc::POLLRDNORM);
                    }
                    if port.members.len() > 1 {
                        // Routed above: what is for this socket is in its queue; only
                        // writability is the server socket's to tell.
                        let want = interest(p.events);
                        items.push(PollItem::new(
                            PollSocket::Udp(&port.u),
                            Interest {
                                readable: false,
                                writable: want.writable,
                            },
                        ));
                        at.push(i);
                        continue;
                    }
                    PollSocket::Udp(&port.u)
                }
                None => {
                    p.revents = libc::POLLNVAL;
                    continue;
                }
            },
            _ => {
                p.revents = libc::POLLNVAL;
                continue;
            }
        };
        items.push(PollItem::new(socket, interest(p.events)));
        at.push(i);
    }
    let mut ready = fds
        .iter()
        .filter(|p| table::marked(p.fd) == Mark::Shmnet && p.revents != 0)
        .count() as c_int;
    match client.poll(&mut items, Some(Duration::ZERO)) {
        Ok(_) => {
            for (item, &i) in items.iter().zip(&at) {
                let had = fds[i].revents != 0;
                fds[i].revents |= revents(fds[i].events, item.ready());
                if let PollSocket::Stream(s) = item.socket()
                    && s.failure().is_some()
                {
                    // As Linux reports a reset or refused connection, whatever was asked.
                    fds[i].revents |= libc::POLLERR | libc::POLLHUP;
                }
                ready += c_int::from(fds[i].revents != 0 && !had);
            }
        }
        Err(_) => {
            // The server is gone: every one of its sockets reports it.
            for &i in &at {
                fds[i].revents = libc::POLLERR | libc::POLLHUP;
                ready += 1;
            }
            return ready;
        }
    }
    drop(items);
    if client.udp_errors_waiting() {
        ready = report_udp_errors(socks, aliases, udp_ports, fds);
    }
    ready
}

/// ICMP errors the look brought (rare): handed to the sockets connected to where they were
/// about ([`crate::udp::collect_errors`]), which report `POLLERR`; a socket the client
/// called readable only for an error another socket took is not. Returns how many of the
/// server's sockets are ready.
fn report_udp_errors(
    socks: &mut table::Socks,
    aliases: &table::Aliases,
    udp_ports: &table::UdpPorts,
    fds: &mut [pollfd],
) -> c_int {
    for p in fds.iter_mut() {
        if table::marked(p.fd) != Mark::Shmnet {
            continue;
        }
        let key = aliases.get(&p.fd).copied().unwrap_or(p.fd);
        let Some(Sock::Udp(u)) = socks.get(&key) else {
            continue;
        };
        let Some(port) = udp_ports.get(&u.port) else {
            continue;
        };
        crate::udp::collect_errors(port, socks);
        let Some(Sock::Udp(u)) = socks.get(&key) else {
            continue;
        };
        if u.error.is_some() {
            p.revents |= libc::POLLERR;
        } else if !u.has_queued() && (port.members.len() > 1 || !port.u.has_datagram()) {
            p.revents &= !(libc::POLLIN | libc::POLLRDNORM);
        }
    }
    fds.iter()
        .filter(|p| table::marked(p.fd) == Mark::Shmnet && p.revents != 0)
        .count() as c_int
}

/// Whether any of the server's sockets among `fds` waits to write.
fn wants_writable(fds: &[pollfd]) -> bool {
    fds.iter()
        .any(|p| table::marked(p.fd) == Mark::Shmnet && interest(p.events).writable)
}

/// `poll(2)` over `fds`, which may mix the server's sockets and the kernel's descriptors.
/// `timeout`: `None` waits without limit. Returns the number of entries with events, or
/// -1 with `errno` set by the kernel's `poll`.
pub(crate) fn poll_mixed(fds: &mut [pollfd], timeout: Option<Duration>) -> c_int {
    // A zero timeout only looks: no clock is read (a busy program polls this way per
    // message).
    let once = timeout == Some(Duration::ZERO);
    // Nor does a call whose first look finds something (a busy program's `select` before
    // each read): the deadline is fixed at the first look that finds nothing, a look
    // later than the call began (a timeout is a least wait).
    let mut deadline: Option<Instant> = None;
    let timeout = timeout.filter(|_| !once);
    let kernel_idx: SmallVec<[usize; 8]> = (0..fds.len())
        .filter(|&i| table::marked(fds[i].fd) != Mark::Shmnet)
        .collect();
    let mut set: SmallVec<[pollfd; 8]> = SmallVec::new();
    // Looks before the first sleep, as the client library's own blocking calls spin: a
    // reply that comes within them costs no sleep and no wake-up. Only for sets of the
    // server's sockets alone (a kernel descriptor would cost a system call per look).
    let mut spin = if kernel_idx.is_empty() {
        crate::config::get().spin
    } else {
        0
    };
    loop {
        let mut st = table::lock();
        let mut ready = look_shmnet(&mut st, fds);
        st.note_moves();
        // The kernel's descriptors, without waiting.
        set.clear();
        set.extend(kernel_idx.iter().map(|&i| pollfd {
            revents: 0,
            ..fds[i]
        }));
        if !set.is_empty() {
            // SAFETY: `set` is a valid array of `set.len()` pollfds.
            let n = unsafe { real::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, 0) };
            if n < 0 {
                return n;
            }
            for (k, &i) in kernel_idx.iter().enumerate() {
                fds[i].revents = set[k].revents;
                ready += c_int::from(set[k].revents != 0);
            }
        }
        if ready > 0 || once {
            return ready;
        }
        if deadline.is_none() {
            deadline = timeout.map(|t| Instant::now() + t);
        }
        // While it spins, the clock is read once in 32 looks (a look costs less than a
        // clock read here; a deadline is overshot by 31 looks at most), and the CPU is
        // offered to others once in 16 (two CPUs often carry three parties).
        if spin > 0 {
            spin -= 1;
            let late = spin % 32 == 0 && deadline.is_some_and(|d| Instant::now() >= d);
            if !late {
                drop(st);
                if spin % 16 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return 0;
        }
        // Nothing yet: sleep on everything at once, the lock let go — first letting go of
        // datagrams nobody reads if they hold the memory others receive into.
        let unread_cap = match &st.client {
            Some(Ok(c)) => c.trim_unread(),
            _ => None,
        };
        let wake = match &st.client {
            Some(Ok(c)) if !st.ring_armed => match c.prepare_sleep() {
                Ok(Some(w)) => Some(w),
                Ok(None) => continue,
                Err(_) => None,
            },
            _ => None,
        };
        st.ring_armed |= wake.is_some();
        let mut nap = wants_writable(fds);
        if let Some(w) = &wake {
            nap |= w.must_nap();
            set.extend(w.fds().iter().map(|&fd| pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }));
        }
        let own = table::own_eventfd();
        if own >= 0 {
            set.push(pollfd {
                fd: own,
                events: libc::POLLIN,
                revents: 0,
            });
            st.sleepers.push(own);
        }
        drop(st);
        let mut left = deadline.map(|d| d.saturating_duration_since(now));
        if let Some(cap) = unread_cap {
            left = Some(left.map_or(cap, |l| l.min(cap)));
        }
        if nap {
            left = Some(left.map_or(WRITABLE_NAP, |l| l.min(WRITABLE_NAP)));
        }
        let ts = left.map(|l| libc::timespec {
            tv_sec: l.as_secs() as libc::time_t,
            tv_nsec: l.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: `set` is a valid array; `ts_ptr` null or a local timespec; no sigmask.
        let r = unsafe {
            real::ppoll(
                set.as_mut_ptr(),
                set.len() as libc::nfds_t,
                ts_ptr,
                std::ptr::null(),
            )
        };
        let err = (r < 0).then(std::io::Error::last_os_error);
        let mut st = table::lock();
        if let Some(i) = st.sleepers.iter().position(|&f| f == own) {
            st.sleepers.swap_remove(i);
        }
        table::drain_eventfd(own);
        if wake.is_some() {
            if let Some(Ok(c)) = &st.client {
                c.finish_sleep();
            }
            st.ring_armed = false;
            // Another sleeper takes the watch over the client's wake-ups.
            st.wake_sleepers();
        }
        drop(st);
        if let Some(e) = err {
            // A signal (EINTR) ends the wait as it ends the kernel's poll.
            crate::set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
    }
}

/// Which way a blocking call moves bytes: which of the socket's timeouts bounds its wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// `SO_RCVTIMEO`: reads, receives, `accept`.
    In,
    /// `SO_SNDTIMEO`: writes, sends.
    Out,
}

/// A blocking call's wait on the server's socket `fd`: its deadline (from the socket's
/// `SO_RCVTIMEO` or `SO_SNDTIMEO`, fixed at the call's first wait) and the wait itself.
#[derive(Debug)]
pub(crate) struct Blocking {
    fd: c_int,
    way: Way,
    deadline: Option<Option<Instant>>,
}

impl Blocking {
    pub(crate) fn new(fd: c_int, way: Way) -> Self {
        Self {
            fd,
            way,
            deadline: None,
        }
    }

    /// Waits until the socket is ready (`POLLIN` for [`Way::In`], `POLLOUT` for
    /// [`Way::Out`]). `Err(EAGAIN)` when the socket's timeout passed, as Linux's calls say;
    /// `Err(errno)` when the wait itself failed (`EINTR`).
    pub(crate) fn wait(&mut self) -> Result<(), c_int> {
        let (fd, way) = (self.fd, self.way);
        let deadline = *self.deadline.get_or_insert_with(|| {
            let st = table::lock();
            let o = st.sock(fd).map(|s| *s.opts());
            let t = o.and_then(|o| match way {
                Way::In => o.rcvtimeo,
                Way::Out => o.sndtimeo,
            });
            t.map(|t| Instant::now() + t)
        });
        let events = match way {
            Way::In => libc::POLLIN,
            Way::Out => libc::POLLOUT,
        };
        let mut p = [pollfd {
            fd,
            events,
            revents: 0,
        }];
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        match poll_mixed(&mut p, left) {
            0 => Err(libc::EAGAIN),
            n if n < 0 => {
                // SAFETY: reads this thread's errno.
                Err(unsafe { *libc::__errno_location() })
            }
            _ => Ok(()),
        }
    }
}
