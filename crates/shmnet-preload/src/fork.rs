//! `fork`: parent and child both keep the server's TCP sockets (docs/preload.md, "fork").
//!
//! A `pthread_atfork` triple carries it, around the one lock every call takes:
//!
//! - **prepare** (the parent, before the fork): takes the lock — no thread of the parent
//!   holds it across the fork, so the child's copy is not left locked — and, if the
//!   program has TCP sockets of the server's, asks the server for a ticket
//!   (`Client::prepare_fork`), and gives the bytes already delivered for each connection
//!   back to the server, in front of what the connection has still to deliver, so that
//!   parent or child — whichever reads next — gets them, once, as from a kernel socket.
//!   (Left in the parent's rings they would be out of the child's reach: the rings are the
//!   parent's; copied into both processes' memory they would be read twice.)
//! - **parent** (after): lets the lock go. Its sockets are dormant until used again.
//! - **child** (after, in the child): lets go of its copy of the parent's client without a
//!   word to the server (its rings are the parent's) and sets its sockets aside, named by
//!   their numbers in the parent. The first call that takes the lock attaches this process
//!   as an application of its own and adopts them with the ticket ([`adopt_inherited`]): the
//!   child's descriptors keep their numbers and options.
//!
//! The server's UDP sockets are not shared: in the child they fail with `EBADF` (and
//! `close` forgets them), as every inherited socket does if the adoption fails.

use libc::c_int;
use shmnet_io::client::{Adopted, Client, ForkTicket, Reserved};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::debug;
use crate::net::{self, Call};
use crate::table::{self, Sock, State};

/// The ticket the last prepare got (0: none), read by the child handler.
static TICKET: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The lock, held by the forking thread from prepare to the parent's or child's handler.
    static HELD: RefCell<Option<MutexGuard<'static, State>>> = const { RefCell::new(None) };
}

/// What a forked child, or a program `exec`ed with sockets, has still to adopt.
pub(crate) struct Inheritance {
    pub(crate) ticket: u64,
    /// The sockets to adopt, by descriptor.
    pub(crate) socks: Vec<(c_int, Heir)>,
    /// The control connection made for this process (with its parent's credentials).
    pub(crate) conn: Option<Reserved>,
}

/// One socket to adopt.
pub(crate) enum Heir {
    /// A forked child's: the parent's listener or connection whole (options, unread bytes,
    /// shutdown state), of which only the client object, the parent's, is replaced.
    Whole(Sock),
    /// An `exec`ed program's: what the program before the `exec` said of it
    /// ([`crate::exec`]).
    Described(crate::exec::Described),
}
thread_local! {
    /// The control connection prepare made for the child to come (the parent's copy is
    /// closed by the parent's handler).
    static FOR_CHILD: RefCell<Option<Reserved>> = const { RefCell::new(None) };
}

/// Registers the handlers (once per process: a child that attaches again does not add a
/// second set).
pub(crate) fn install_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers three handlers with no arguments; each runs on the forking
        // thread (prepare, parent) or the child's only thread (child).
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

extern "C" fn prepare() {
    let mut st = table::lock();
    let ticket = crate::caught(|| share_with_child(&mut st), || 0);
    TICKET.store(ticket, Ordering::Relaxed);
    HELD.with(|h| *h.borrow_mut() = Some(st));
}

extern "C" fn parent() {
    let shared = TICKET.swap(0, Ordering::Relaxed) != 0;
    FOR_CHILD.with(|c| drop(c.borrow_mut().take()));
    HELD.with(|h| {
        if let Some(st) = h.borrow_mut().take()
            && shared
        {
            // Threads of the parent asleep in a wait on its sockets, now dormant, would hear
            // nothing more: woken, each looks again, and its look claims them back.
            st.wake_sleepers();
        }
    });
}

extern "C" fn child() {
    let ticket = TICKET.swap(0, Ordering::Relaxed);
    let conn = FOR_CHILD.with(|c| c.borrow_mut().take());
    HELD.with(|h| {
        if let Some(mut st) = h.borrow_mut().take() {
            set_aside_in_child(&mut st, ticket, conn);
        }
    });
}

/// The parent's half of prepare: the ticket (0 if there is nothing to share or no server),
/// and every connection's delivered bytes moved into its `peeked` bytes.
fn share_with_child(st: &mut State) -> u64 {
    let share: Vec<u16> = st.socks.values().filter_map(tcp_number).collect();
    if share.is_empty() {
        return 0;
    }
    match take_ticket(st, &share) {
        Some(Ok(t)) => {
            debug!("fork: a ticket for the child");
            // The child attaches over a connection made here, with this process's
            // credentials: a worker that drops its privileges after the fork still can.
            let conn = Client::reserve_for_child(&crate::config::get().server, t).ok();
            FOR_CHILD.with(|c| *c.borrow_mut() = conn);
            t.0
        }
        Some(Err(e)) => {
            eprintln!(
                "shmnet: fork: the server gave no ticket ({e}): the child cannot use this program's sockets"
            );
            0
        }
        None => 0,
    }
}

/// The number of `sock` at the server, if it is a TCP listener or connection.
pub(crate) fn tcp_number(sock: &Sock) -> Option<u16> {
    match sock {
        Sock::Listener { l, .. } => Some(l.number()),
        Sock::Stream { s, .. } => Some(s.number()),
        _ => None,
    }
}

/// Asks the server for a ticket sharing the TCP sockets numbered `share` with a process to
/// come (a forked child, or the program an `exec` starts). The bytes already delivered for
/// those connections, and those taken off them by `MSG_PEEK` or `FIONREAD`, go back to the
/// server, in front of what each has still to deliver, so that whichever holder reads next
/// gets them, once; what the server cannot take back stays in this process's `peeked`
/// bytes. `None` without a client.
pub(crate) fn take_ticket(
    st: &mut State,
    share: &[u16],
) -> Option<Result<ForkTicket, shmnet_io::client::ClientError>> {
    let State { client, socks, .. } = st;
    let Some(Ok(c)) = client else { return None };
    let taken = c.prepare_fork(share, || {
        let mut unread = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        for sock in socks.values_mut() {
            let Sock::Stream {
                s,
                peeked,
                deferred,
                ..
            } = sock
            else {
                continue;
            };
            if !share.contains(&s.number()) {
                continue;
            }
            let mut bytes = std::mem::take(peeked);
            let mut ended = false;
            loop {
                match s.try_read(&mut chunk) {
                    Ok(Some(n)) if n > 0 => bytes.extend_from_slice(&chunk[..n]),
                    Ok(Some(_)) => {
                        ended = true;
                        break;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        *deferred = deferred.or(Some(net::errno_of(&e, Call::Read)));
                        ended = true;
                        break;
                    }
                }
            }
            if ended {
                // The read found the end of the stream (or its failure), which this client
                // now holds: bytes given back would come after an end already taken, and be
                // lost. They stay here (and in a child's copy of this memory, or the exec's
                // memory file): the last bytes of a stream the peer has finished.
                *peeked = bytes;
            } else {
                unread.push((s.number(), bytes));
            }
        }
        unread
    });
    Some(taken.map(|(ticket, kept)| {
        for (number, bytes) in kept {
            let back = socks.values_mut().find_map(|sock| match sock {
                Sock::Stream { s, peeked, .. } if s.number() == number => Some(peeked),
                _ => None,
            });
            if let Some(peeked) = back {
                debug!(
                    "{} unread byte(s) kept here: the server had no room",
                    bytes.len()
                );
                *peeked = bytes;
            }
        }
        ticket
    }))
}

/// The child handler's work: the parent's client let go, its sockets set aside for
/// [`adopt_inherited`] (or orphaned, without a ticket).
fn set_aside_in_child(st: &mut State, ticket: u64, conn: Option<Reserved>) {
    // This copy of the memory is the child's own.
    table::own_client();
    st.sleepers.clear();
    st.ring_armed = false;
    st.moved_seen = 0;
    let old = st.client.take();
    if let Some(Ok(c)) = &old {
        c.abandon_after_fork();
    }
    let fds: Vec<c_int> = st.socks.keys().copied().collect();
    let mut inherited = Vec::new();
    for fd in fds {
        if matches!(st.socks.get(&fd), Some(Sock::Undecided { .. }) | None) {
            continue; // a kernel socket: the child's copy is the kernel's business
        }
        match st.socks.remove(&fd) {
            Some(sock @ (Sock::Listener { .. } | Sock::Stream { .. })) => {
                inherited.push((fd, Heir::Whole(sock)))
            }
            Some(other) => {
                // UDP: not shared with the child.
                drop(other);
                st.orphan(fd);
            }
            None => {}
        }
    }
    st.udp_ports.clear();
    drop(old);
    if ticket == 0 {
        for (fd, _) in inherited {
            st.orphan(fd);
        }
        return;
    }
    if !inherited.is_empty() {
        st.inherit = Some(Inheritance {
            ticket,
            socks: inherited,
            conn,
        });
    }
}

/// In a forked child, at the first call that takes the lock: attaches and adopts the
/// sockets set aside at the fork. Those the server does not give back are orphaned.
pub(crate) fn adopt_inherited(st: &mut State) {
    let Some(inh) = st.inherit.take() else { return };
    if st.client.is_none()
        && let Some(conn) = inh.conn
    {
        // Over the parent's connection if the server still holds it (it closes one that
        // says nothing for 5 s); else `client()` dials again.
        if let Ok(c) = Client::attach_reserved(conn) {
            debug!("attached over the connection made for this process");
            table::own_client();
            install_handlers();
            st.client = Some(Ok(c));
        }
    }
    let adopted = match st.client() {
        Ok(c) => c.adopt(ForkTicket(inh.ticket)).map_err(|e| e.to_string()),
        Err(_) => Err("no server".to_string()),
    };
    let mut by_number: HashMap<u16, Adopted> = match adopted {
        Ok(list) => list.into_iter().collect(),
        Err(e) => {
            eprintln!(
                "shmnet: this process could not take the sockets it inherited ({e}): they fail with EBADF here"
            );
            HashMap::new()
        }
    };
    for (fd, heir) in inh.socks {
        let sock = match heir {
            // The parent's client object goes (it sends nothing: its client was
            // abandoned); everything else about the socket stays.
            Heir::Whole(mut sock) => {
                let taken = match &mut sock {
                    Sock::Listener { l, .. } => match by_number.remove(&l.number()) {
                        Some(Adopted::Listener(new)) => {
                            *l = new;
                            true
                        }
                        _ => false,
                    },
                    Sock::Stream { s, .. } => match by_number.remove(&s.number()) {
                        Some(Adopted::Stream(new)) => {
                            *s = new;
                            true
                        }
                        _ => false,
                    },
                    _ => false,
                };
                taken.then_some(sock)
            }
            Heir::Described(d) => by_number
                .remove(&d.number())
                .and_then(|adopted| d.into_sock(adopted)),
        };
        match sock {
            Some(sock) => {
                debug!("adopted descriptor {fd}");
                st.socks.insert(fd, sock);
            }
            None => st.orphan(fd),
        }
    }
    // Sockets the server shared that this process had no descriptor for any more: let go.
    drop(by_number);
}
