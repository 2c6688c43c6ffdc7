//! `epoll_create`, `epoll_create1`, `epoll_ctl`, `epoll_wait`, `epoll_pwait` over sets that
//! mix the server's sockets and the kernel's descriptors.
//!
//! The kernel's instance cannot watch the server's sockets (the eventfd holding a socket's
//! number never becomes ready), so this library keeps what an instance watches of them
//! ([`Watch`]) and answers for them itself; the kernel's descriptors stay in the kernel's
//! instance. A wait looks at both, and sleeps on the instance's own descriptor (readable
//! when a kernel descriptor in it is ready) beside the client's wake-ups ([`crate::wait`]).
//!
//! Readiness is the client's (as `poll`): level-triggered by default; `EPOLLET` reports a
//! readiness only when it rises — since the last report, or since a read, write or accept
//! on the socket found nothing (`EAGAIN`), which is how an edge-triggered program drains;
//! `EPOLLONESHOT` goes silent after one report until `EPOLL_CTL_MOD`.

use libc::{c_int, epoll_event, pollfd, sigset_t};
use std::time::{Duration, Instant};

use crate::table::{self, Mark, Watch};
use crate::{fail, guarded, real, wait};

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    if size <= 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: no arguments to check.
    unsafe { epoll_create1(0) }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: the caller's argument, passed on.
    let ep = unsafe { real::epoll_create1(flags) };
    if ep >= 0 {
        // A number an earlier instance may have had: what it watched is not this one's.
        guarded(|| {
            table::lock().forget_epoll(ep);
            0
        });
    }
    ep
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    let mark = table::marked(fd);
    if table::orphaned(fd) {
        return fail(libc::EBADF);
    }
    if mark == Mark::NotOurs || mark == Mark::Epoll {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::epoll_ctl(ep, op, fd, ev) };
    }
    // SAFETY: `ev` is null (allowed for DEL) or valid (the caller's contract).
    let ev = unsafe { ev.as_ref() }.copied();
    if mark == Mark::Undecided {
        // The kernel's socket for now: the kernel's instance watches it, and a copy here
        // takes over if the server gets it.
        // SAFETY: the caller's arguments, passed on.
        let r = unsafe {
            real::epoll_ctl(
                ep,
                op,
                fd,
                ev.as_ref().map_or(std::ptr::null_mut(), |e| {
                    (e as *const epoll_event).cast_mut()
                }),
            )
        };
        if r == 0 {
            guarded(|| {
                let mut st = table::lock();
                // The kernel took it, so the copy follows.
                let _ = update(st.epolls.entry(ep).or_default(), op, fd, ev, true);
                0
            });
        }
        return r;
    }
    guarded(|| {
        let mut st = table::lock();
        let watches = st.epolls.entry(ep).or_default();
        match update(watches, op, fd, ev, false) {
            Ok(()) => {
                table::State::mark_epoll(ep);
                0
            }
            Err(e) => fail(e),
        }
    })
}

/// Applies one `epoll_ctl` to the watches of an instance.
fn update(
    watches: &mut Vec<Watch>,
    op: c_int,
    fd: c_int,
    ev: Option<epoll_event>,
    kernel: bool,
) -> Result<(), c_int> {
    let at = watches.iter().position(|w| w.fd == fd);
    match (op, at, ev) {
        (libc::EPOLL_CTL_ADD, Some(_), _) => Err(libc::EEXIST),
        (libc::EPOLL_CTL_ADD, None, Some(e)) => {
            watches.push(Watch {
                fd,
                events: e.events,
                data: e.u64,
                reported: 0,
                disarmed: false,
                kernel,
            });
            Ok(())
        }
        (libc::EPOLL_CTL_MOD, Some(i), Some(e)) => {
            let w = &mut watches[i];
            w.events = e.events;
            w.data = e.u64;
            w.reported = 0;
            w.disarmed = false;
            Ok(())
        }
        (libc::EPOLL_CTL_DEL, Some(i), _) => {
            watches.remove(i);
            Ok(())
        }
        (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None, _) => Err(libc::ENOENT),
        (libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD, _, None) => Err(libc::EFAULT),
        _ => Err(libc::EINVAL),
    }
}

/// The `poll` events a watch asks for.
fn poll_events(events: u32) -> i16 {
    let mut e = 0;
    if events & libc::EPOLLIN as u32 != 0 {
        e |= libc::POLLIN;
    }
    if events & libc::EPOLLOUT as u32 != 0 {
        e |= libc::POLLOUT;
    }
    e
}

/// The `epoll` events of `poll`'s answer.
fn epoll_events(revents: i16) -> u32 {
    let mut e = 0;
    for (p, q) in [
        (libc::POLLIN, libc::EPOLLIN),
        (libc::POLLOUT, libc::EPOLLOUT),
        (libc::POLLERR, libc::EPOLLERR),
        (libc::POLLHUP, libc::EPOLLHUP),
    ] {
        if revents & p != 0 {
            e |= q as u32;
        }
    }
    e
}

/// Looks at the server's sockets watched by `ep` and writes what is ready into `out`;
/// returns how many. Edge-triggered and one-shot watches are updated.
fn look(ep: c_int, out: &mut [epoll_event]) -> usize {
    let st = table::lock();
    let Some(watches) = st.epolls.get(&ep) else {
        return 0;
    };
    let mut fds: Vec<pollfd> = watches
        .iter()
        .filter(|w| !w.kernel && !w.disarmed)
        .map(|w| pollfd {
            fd: w.fd,
            events: poll_events(w.events),
            revents: 0,
        })
        .collect();
    if fds.is_empty() {
        return 0;
    }
    drop(st);
    let mut p = fds.clone();
    if wait::poll_mixed(&mut p, Some(Duration::ZERO)) < 0 {
        return 0;
    }
    fds = p;
    let mut st = table::lock();
    let Some(watches) = st.epolls.get_mut(&ep) else {
        return 0;
    };
    let mut n = 0;
    for w in watches.iter_mut().filter(|w| !w.kernel && !w.disarmed) {
        if n == out.len() {
            // Full: the rest keep their state, to be reported by the next wait.
            break;
        }
        let Some(p) = fds.iter().find(|p| p.fd == w.fd) else {
            continue;
        };
        let ready = epoll_events(p.revents);
        let report = if w.events & libc::EPOLLET as u32 != 0 {
            let rise = ready & !w.reported;
            w.reported = ready;
            rise
        } else {
            ready
        };
        if report == 0 {
            continue;
        }
        out[n] = epoll_event {
            events: report,
            u64: w.data,
        };
        n += 1;
        if w.events & libc::EPOLLONESHOT as u32 != 0 {
            w.disarmed = true;
        }
    }
    n
}

/// The wait of `epoll_wait` over an instance with some of the server's sockets in it.
fn wait_mixed(ep: c_int, out: &mut [epoll_event], timeout: Option<Duration>) -> c_int {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let mut n = look(ep, out);
        if n < out.len() {
            // SAFETY: `out[n..]` is valid for the rest of the entries.
            let k =
                unsafe { real::epoll_wait(ep, out[n..].as_mut_ptr(), (out.len() - n) as c_int, 0) };
            if k < 0 {
                return k;
            }
            n += k as usize;
        }
        if n > 0 {
            return n as c_int;
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return 0;
        }
        // Sleep until a kernel descriptor in the instance or a watched socket is ready.
        let mut p = sleep_set(ep);
        if wait::poll_mixed(&mut p, left) < 0 {
            return -1;
        }
    }
}

/// The instance's own descriptor (readable when a kernel descriptor in it is ready) and
/// the watched sockets of the server, as a poll set.
fn sleep_set(ep: c_int) -> Vec<pollfd> {
    let st = table::lock();
    let mut p = vec![pollfd {
        fd: ep,
        events: libc::POLLIN,
        revents: 0,
    }];
    if let Some(watches) = st.epolls.get(&ep) {
        // An edge-triggered watch wakes the wait only for what has not been reported.
        p.extend(
            watches
                .iter()
                .filter(|w| !w.kernel && !w.disarmed)
                .map(|w| {
                    let want = if w.events & libc::EPOLLET as u32 != 0 {
                        w.events & !w.reported
                    } else {
                        w.events
                    };
                    pollfd {
                        fd: w.fd,
                        events: poll_events(want),
                        revents: 0,
                    }
                })
                .filter(|p| p.events != 0),
        );
    }
    p
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    ep: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if table::marked(ep) != Mark::Epoll {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::epoll_wait(ep, events, max, timeout) };
    }
    if events.is_null() || max <= 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's contract: `events` holds `max` entries.
    let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
    let timeout = (timeout >= 0).then(|| Duration::from_millis(timeout as u64));
    guarded(|| wait_mixed(ep, out, timeout))
}

/// A mixed set's signal mask is not applied during the wait (docs/preload.md).
///
/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    ep: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    if table::marked(ep) != Mark::Epoll {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::epoll_pwait(ep, events, max, timeout, mask) };
    }
    // SAFETY: the caller's contract.
    unsafe { epoll_wait(ep, events, max, timeout) }
}
