//! `exec`: a program keeps the server's TCP sockets it did not mark close-on-exec, as it
//! keeps kernel sockets (docs/preload.md, "exec"). inetd and socat's `EXEC:` start a
//! program with a connection as its standard input and output; a shell started by socat's
//! `SYSTEM:` `exec`s its last command with it.
//!
//! The program before the `exec` does what a fork's parent does — a ticket for the sockets
//! that survive the `exec` (`Client::prepare_fork`, the bytes already delivered moved into
//! each connection's unread bytes), and a control connection for the program to come
//! (`Client::reserve_for_child`) — and, since its memory goes with its image, says
//! everything else in the environment of the new program: the variable [`VAR`] names the
//! ticket, the connection's descriptor, each socket's descriptor, number, addresses,
//! options and shutdown state, and a memory file holding the unread bytes. The new program's
//! copy of this library reads it when it is loaded (before `main`: the descriptors must be
//! marked before the first call on them), takes the variable out of its environment, and
//! adopts the sockets there and then (a forked child waits for its first call; a program
//! started by exec may `vfork` before it touches its sockets, and a vfork child cannot
//! adopt for it).
//!
//! What it cannot carry: a program the `exec` starts without this library (static, setuid,
//! or an environment without `LD_PRELOAD`, which the `exec` puts back when it hands sockets
//! over) finds bare eventfds where its sockets were; epoll instances do not survive (their
//! descriptors are close-on-exec in practice); the server's UDP sockets fail with `EBADF`
//! in the new program, as in a forked child. A child made by `vfork` (dash starts its
//! commands so) shares its parent's memory, client included: its `exec` asks for the ticket
//! on the parent's client — the parent waits, and the library's lock keeps the parent's
//! other threads out — unless it has closed the client's control socket, as Python's
//! `subprocess` does (it closes every descriptor it does not pass): that child carries
//! nothing. `posix_spawn` runs its `exec` inside the C library, out of this library's reach:
//! nothing survives it. Carrying those would take a socket's descriptor that proves itself
//! to the server (a socket pair's end instead of an eventfd), not built.
//!
//! The variable comes from the program's own previous image, but it is read like any input
//! this library did not make (it may be stale, carried by a program that did not load the
//! library into one that does, or made up): a token it cannot read is skipped, never
//! followed; a socket is taken only where an eventfd holds its number, the connection only
//! if it is a socket, the unread bytes only from a memory file (which no read waits on). (This crate builds only the shared object, which
//! cannot be linked into a test harness: the format is tested end to end, by
//! `crates/shmnet/tests/preload.rs`'s exec cases.)

use libc::{c_char, c_int};
use shmnet_io::client::{Adopted, Client, Reserved};
use std::ffi::{CStr, CString};
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::config::debug;
use crate::fork::{Heir, Inheritance};
use crate::table::{self, Opts, Sock};

/// The environment variable that carries the sockets across an `exec`.
pub(crate) const VAR: &str = "SHMNET_EXEC";

/// The format's version: the first token.
const VERSION: &str = "v1";

/// A socket an `exec` handed over, as the program before it described it.
#[derive(Debug)]
pub(crate) struct Described {
    number: u16,
    opts: Opts,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Listener {
        addr: SocketAddrV4,
    },
    Stream {
        local: SocketAddrV4,
        shut_rd: bool,
        shut_wr: bool,
        failed: bool,
        peeked: Vec<u8>,
        deferred: Option<c_int>,
    },
}

impl Described {
    /// The socket's number at the server, under which the adoption gives it back.
    pub(crate) fn number(&self) -> u16 {
        self.number
    }

    /// The socket, its client object the one the adoption gave; `None` if that is not of
    /// the kind described.
    pub(crate) fn into_sock(self, adopted: Adopted) -> Option<Sock> {
        match (self.kind, adopted) {
            (Kind::Listener { addr }, Adopted::Listener(l)) => Some(Sock::Listener {
                l,
                addr,
                opts: self.opts,
            }),
            (
                Kind::Stream {
                    local,
                    shut_rd,
                    shut_wr,
                    failed,
                    peeked,
                    deferred,
                },
                Adopted::Stream(s),
            ) => Some(Sock::Stream {
                s,
                local,
                opts: self.opts,
                shut_rd,
                shut_wr,
                failed,
                in_progress: false,
                peeked,
                deferred,
            }),
            _ => None,
        }
    }
}

// ------------------------------------------------------------------ the words of the format

/// Option flags, one bit each.
const V6: u32 = 1;
const V6ONLY: u32 = 2;
const REUSE: u32 = 4;
const NONBLOCK: u32 = 8;
const NODELAY: u32 = 16;
const KEEPALIVE: u32 = 32;
const PKTINFO: u32 = 64;
const BROADCAST: u32 = 128;

/// Stream flags.
const SHUT_RD: u32 = 1;
const SHUT_WR: u32 = 2;
const FAILED: u32 = 4;

fn opt_num<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn parse_opt<T: std::str::FromStr>(s: &str) -> Option<Option<T>> {
    if s == "-" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
    }
}

/// `flags/sndbuf/rcvbuf/rcvtimeo_ns/sndtimeo_ns/linger`.
fn encode_opts(o: &Opts) -> String {
    let flags = [
        (o.v6, V6),
        (o.v6only, V6ONLY),
        (o.reuse, REUSE),
        (o.nonblock, NONBLOCK),
        (o.nodelay, NODELAY),
        (o.keepalive, KEEPALIVE),
        (o.pktinfo, PKTINFO),
        (o.broadcast, BROADCAST),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |m, (_, bit)| m | bit);
    let ns = |d: Option<Duration>| opt_num(d.map(|d| d.as_nanos() as u64));
    format!(
        "{flags}/{}/{}/{}/{}/{}",
        opt_num(o.sndbuf),
        opt_num(o.rcvbuf),
        ns(o.rcvtimeo),
        ns(o.sndtimeo),
        opt_num(o.linger)
    )
}

fn decode_opts(s: &str) -> Option<Opts> {
    let f: Vec<&str> = s.split('/').collect();
    let [flags, sndbuf, rcvbuf, rcvtimeo, sndtimeo, linger] = f.as_slice() else {
        return None;
    };
    let flags: u32 = flags.parse().ok()?;
    let dur = |s: &str| parse_opt::<u64>(s).map(|v| v.map(Duration::from_nanos));
    Some(Opts {
        v6: flags & V6 != 0,
        v6only: flags & V6ONLY != 0,
        udp: false,
        reuse: flags & REUSE != 0,
        nonblock: flags & NONBLOCK != 0,
        nodelay: flags & NODELAY != 0,
        keepalive: flags & KEEPALIVE != 0,
        pktinfo: flags & PKTINFO != 0,
        broadcast: flags & BROADCAST != 0,
        sndbuf: parse_opt(sndbuf)?,
        rcvbuf: parse_opt(rcvbuf)?,
        rcvtimeo: dur(rcvtimeo)?,
        sndtimeo: dur(sndtimeo)?,
        linger: parse_opt(linger)?,
        multicast: Default::default(),
    })
}

/// What an `exec` says of the sockets it hands over, before it is written out.
#[derive(Debug, Default)]
struct Words {
    ticket: u64,
    /// The control connection's descriptor.
    conn: c_int,
    /// The memory file with every connection's unread bytes (-1: none).
    unread: c_int,
    /// `s=fd,L,number,addr,opts` and `s=fd,S,number,local,opts,flags,at,len,deferred`.
    socks: Vec<String>,
    /// `a=fd,key`: descriptor `fd` is a duplicate of `key`.
    aliases: Vec<(c_int, c_int)>,
    /// `o=fd`: a socket that does not survive in the new program (UDP).
    orphans: Vec<c_int>,
}

impl Words {
    fn render(&self) -> String {
        // `p=`: the process the exec is for (an exec keeps the pid). A copy of the variable
        // that outlives it — kept by a shell with its own environment table, in a child of
        // that process — names another pid, and is ignored.
        let mut out = format!(
            "{VERSION} p={} t={} c={} m={}",
            std::process::id(),
            self.ticket,
            self.conn,
            self.unread
        );
        for s in &self.socks {
            out.push_str(" s=");
            out.push_str(s);
        }
        for (a, k) in &self.aliases {
            out.push_str(&format!(" a={a},{k}"));
        }
        for o in &self.orphans {
            out.push_str(&format!(" o={o}"));
        }
        out
    }
}

/// Describes `sock` at descriptor `fd` (its unread bytes appended to `unread`).
fn describe(fd: c_int, sock: &Sock, unread: &mut Vec<u8>) -> Option<String> {
    match sock {
        Sock::Listener { l, addr, opts } => Some(format!(
            "{fd},L,{},{addr},{}",
            l.number(),
            encode_opts(opts)
        )),
        Sock::Stream {
            s,
            local,
            opts,
            shut_rd,
            shut_wr,
            failed,
            peeked,
            deferred,
            ..
        } => {
            let flags = [(*shut_rd, SHUT_RD), (*shut_wr, SHUT_WR), (*failed, FAILED)]
                .iter()
                .filter(|(on, _)| *on)
                .fold(0, |m, (_, bit)| m | bit);
            let at = unread.len();
            unread.extend_from_slice(peeked);
            Some(format!(
                "{fd},S,{},{local},{},{flags},{at},{},{}",
                s.number(),
                encode_opts(opts),
                peeked.len(),
                opt_num(*deferred)
            ))
        }
        _ => None,
    }
}

/// Reads one `s=` token, its unread bytes taken from `unread`.
fn read_sock(tok: &str, unread: &[u8]) -> Option<(c_int, Described)> {
    let f: Vec<&str> = tok.split(',').collect();
    let fd: c_int = f.first()?.parse().ok()?;
    let number: u16 = f.get(2)?.parse().ok()?;
    let addr: SocketAddrV4 = f.get(3)?.parse().ok()?;
    let opts = decode_opts(f.get(4)?)?;
    let kind = match *f.get(1)? {
        "L" if f.len() == 5 => Kind::Listener { addr },
        "S" if f.len() == 9 => {
            let flags: u32 = f[5].parse().ok()?;
            let at: usize = f[6].parse().ok()?;
            let len: usize = f[7].parse().ok()?;
            Kind::Stream {
                local: addr,
                shut_rd: flags & SHUT_RD != 0,
                shut_wr: flags & SHUT_WR != 0,
                failed: flags & FAILED != 0,
                peeked: unread.get(at..at.checked_add(len)?)?.to_vec(),
                deferred: parse_opt(f[8])?,
            }
        }
        _ => return None,
    };
    Some((fd, Described { number, opts, kind }))
}

/// What the new program reads from [`VAR`].
#[derive(Debug, Default)]
struct Read {
    ticket: u64,
    conn: Option<c_int>,
    socks: Vec<(c_int, Described)>,
    aliases: Vec<(c_int, c_int)>,
    orphans: Vec<c_int>,
    /// Tokens skipped as unreadable.
    skipped: usize,
}

/// Reads the variable's value; `unread_of(fd)` gives the memory file's bytes.
fn read_words(value: &str, unread_of: impl FnOnce(c_int) -> Vec<u8>) -> Option<Read> {
    let mut toks = value.split(' ');
    if toks.next()? != VERSION {
        return None;
    }
    let toks: Vec<&str> = toks.collect();
    let field = |k: &str| toks.iter().find_map(|t| t.strip_prefix(k));
    if field("p=")?.parse::<u32>().ok()? != std::process::id() {
        return None;
    }
    let ticket: u64 = field("t=")?.parse().ok()?;
    let conn = field("c=")
        .and_then(|c| c.parse::<c_int>().ok())
        .filter(|&c| c >= 0);
    let unread = match field("m=").and_then(|m| m.parse::<c_int>().ok()) {
        Some(m) if m >= 0 => unread_of(m),
        _ => Vec::new(),
    };
    let mut r = Read {
        ticket,
        conn,
        ..Read::default()
    };
    for t in toks {
        if let Some(v) = t.strip_prefix("s=") {
            match read_sock(v, &unread) {
                Some(s) => r.socks.push(s),
                None => r.skipped += 1,
            }
        } else if let Some(v) = t.strip_prefix("a=") {
            match v
                .split_once(',')
                .and_then(|(a, k)| Some((a.parse().ok()?, k.parse().ok()?)))
            {
                Some(ak) => r.aliases.push(ak),
                None => r.skipped += 1,
            }
        } else if let Some(v) = t.strip_prefix("o=") {
            match v.parse() {
                Ok(o) => r.orphans.push(o),
                Err(_) => r.skipped += 1,
            }
        }
    }
    Some(r)
}

// ------------------------------------------------------------------ before the exec

/// What an `exec` hands over: the variable, and the descriptors it names. Dropped after an
/// `exec` that failed, it closes them (the server lets the ticket go with the connection;
/// the sockets stay this program's, dormant until used).
struct Handoff {
    var: CString,
    /// `LD_PRELOAD` and `SHMNET_SERVER`, for an environment that lacks them.
    also: Vec<CString>,
    _conn: OwnedFd,
    _unread: Option<OwnedFd>,
}

/// The descriptors of the socket kept under `key` (itself and its duplicates) that stay
/// open across an `exec`.
fn surviving_fds(st: &table::State, key: c_int) -> impl Iterator<Item = c_int> + '_ {
    std::iter::once(key)
        .chain(
            st.aliases
                .iter()
                .filter(move |&(_, &k)| k == key)
                .map(|(&a, _)| a),
        )
        .filter(|&fd| survives(fd))
}

/// Whether descriptor `fd` stays open across an `exec`.
fn survives(fd: c_int) -> bool {
    // SAFETY: fcntl(F_GETFD) on a descriptor number: no memory is passed.
    let flags = unsafe { crate::real::fcntl(fd, libc::F_GETFD, 0) };
    flags >= 0 && flags & libc::FD_CLOEXEC == 0
}

/// A memory file holding `bytes`, open across the `exec`.
fn unread_file(bytes: &[u8]) -> Option<OwnedFd> {
    // SAFETY: a NUL-terminated literal name; no other pointer.
    let fd = unsafe { libc::memfd_create(c"shmnet-exec".as_ptr(), 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new descriptor nothing else owns.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(file);
    std::io::Write::write_all(&mut f, bytes).ok()?;
    Some(OwnedFd::from(f))
}

/// Prepares the handover of the sockets that survive an `exec` in environment `envp`;
/// `None` when there are none (or no server, or the server refused: then they do not
/// survive, and the `exec` goes on).
fn prepare(envp: *const *const c_char) -> Option<Handoff> {
    let mut st = table::lock_unadopted();
    if !any_survives(&st) {
        return None;
    }
    if table::borrowed() {
        // A child made without fork's handlers (vfork: dash's, Python's `subprocess`) shares
        // its parent's memory, client included; the parent waits, and this lock keeps its
        // other threads out, so the client may ask for the ticket — but only over its own
        // control socket, which this child may have closed, and never by attaching here:
        // what an attachment receives (its eventfds) would land in this child's
        // descriptor table, not in the parent's, whose memory would then hold a client
        // with descriptors it does not have.
        if st.inherit.is_some() {
            debug!(
                "exec: a vfork child of a program that has not taken its inherited sockets yet: they are not carried"
            );
            return None;
        }
        if !matches!(&st.client, Some(Ok(c)) if c.control_open()) {
            debug!(
                "exec: a vfork child without its parent's control socket: its sockets are not carried"
            );
            return None;
        }
    }
    if st.inherit.is_some() {
        // Inherited and not yet taken (a forked child that `exec`s): taken now, to be
        // handed on.
        crate::fork::adopt_inherited(&mut st);
    }
    // Each TCP socket with a descriptor that survives: its descriptors that do, the first
    // the one it will be kept under.
    let mut keep: Vec<(c_int, Vec<c_int>)> = Vec::new();
    let mut orphans = Vec::new();
    for (&key, sock) in &st.socks {
        let mut fds: Vec<c_int> = surviving_fds(&st, key).collect();
        if fds.is_empty() {
            continue;
        }
        match sock {
            Sock::Listener { .. } | Sock::Stream { .. } => {
                fds.sort_unstable();
                keep.push((key, fds));
            }
            Sock::Udp(_) => orphans.extend(fds),
            Sock::Undecided { .. } => {} // a kernel socket: the kernel's to hand over
        }
    }
    if keep.is_empty() {
        return None;
    }
    let share: Vec<u16> = keep
        .iter()
        .filter_map(|(key, _)| st.socks.get(key).and_then(crate::fork::tcp_number))
        .collect();
    let ticket = match crate::fork::take_ticket(&mut st, &share)? {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "shmnet: exec: the server gave no ticket ({e}): the program started cannot use these sockets"
            );
            return None;
        }
    };
    let cfg = crate::config::get();
    let conn = match Client::reserve_for_child(&cfg.server, ticket) {
        Ok(r) => r.into_fd(),
        Err(e) => {
            eprintln!("shmnet: exec: no connection to the server for the program started ({e})");
            return None;
        }
    };
    let mut unread = Vec::new();
    let mut words = Words {
        ticket: ticket.0,
        conn: conn.as_raw_fd(),
        unread: -1,
        orphans,
        ..Words::default()
    };
    for (key, fds) in &keep {
        let Some(desc) = st
            .socks
            .get(key)
            .and_then(|s| describe(fds[0], s, &mut unread))
        else {
            continue;
        };
        words.socks.push(desc);
        words.aliases.extend(fds[1..].iter().map(|&a| (a, fds[0])));
    }
    drop(st);
    let unread = if unread.is_empty() {
        None
    } else {
        let f = unread_file(&unread)?;
        words.unread = f.as_raw_fd();
        Some(f)
    };
    // SAFETY: fcntl(F_SETFD) on the connection just made: it stays open across the exec.
    unsafe { crate::real::fcntl(conn.as_raw_fd(), libc::F_SETFD, 0) };
    let var = CString::new(format!("{VAR}={}", words.render())).ok()?;
    debug!(
        "exec: {} socket(s) handed to the program started",
        words.socks.len()
    );
    Some(Handoff {
        var,
        also: missing_settings(envp),
        _conn: conn,
        _unread: unread,
    })
}

/// `LD_PRELOAD` (this library) and `SHMNET_SERVER`, as this program was started with them,
/// for an environment `envp` that lacks them: without the library the sockets handed over cannot
/// work at all.
fn missing_settings(envp: *const *const c_char) -> Vec<CString> {
    let has = |name: &str| env_entries(envp).any(|e| e.to_bytes().starts_with(name.as_bytes()));
    let mut out = Vec::new();
    let settings = [
        ("LD_PRELOAD=", PRELOAD_AT_LOAD.get().cloned().flatten()),
        (
            "SHMNET_SERVER=",
            Some(crate::config::get().server.clone().into_os_string()),
        ),
    ];
    for (name, value) in settings {
        if !has(name)
            && let Some(v) = value
            && let Ok(c) = CString::new([name.as_bytes(), v.as_encoded_bytes()].concat())
        {
            out.push(c);
        }
    }
    out
}

/// `LD_PRELOAD` as the program was started with it: what it has when it `exec`s may have
/// been cleared (`env -i`, `clearenv`) by then.
static PRELOAD_AT_LOAD: std::sync::OnceLock<Option<std::ffi::OsString>> =
    std::sync::OnceLock::new();

/// When the library is loaded: remembers the settings an `exec` that hands sockets over
/// puts back into an environment without them.
pub(crate) fn remember_settings() {
    let _ = PRELOAD_AT_LOAD.set(std::env::var_os("LD_PRELOAD"));
    let _ = crate::config::get();
}

/// The entries of a NULL-terminated environment array (none for a null one).
fn env_entries<'a>(envp: *const *const c_char) -> impl Iterator<Item = &'a CStr> {
    let mut i = 0;
    std::iter::from_fn(move || {
        if envp.is_null() {
            return None;
        }
        // SAFETY: `envp` is the program's NULL-terminated array of C strings, as `exec`
        // requires; reading stops at its terminating NULL.
        let p = unsafe { *envp.add(i) };
        if p.is_null() {
            return None;
        }
        i += 1;
        // SAFETY: a NUL-terminated string of the array.
        Some(unsafe { CStr::from_ptr(p) })
    })
}

/// Runs `go` (the real `exec`) with environment `envp`, the handover added if sockets
/// survive. Returns what `go` returns (it returns only when the `exec` failed), `errno`
/// kept.
fn with_handoff(
    envp: *const *const c_char,
    go: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    let handoff = crate::caught(|| prepare(envp), || None);
    let prefix = format!("{VAR}=");
    let stale = env_entries(envp).any(|e| e.to_bytes().starts_with(prefix.as_bytes()));
    if handoff.is_none() && !stale {
        return go(envp);
    }
    // Without a copy of the variable this program kept (a shell's own environment table):
    // the program started must not read it. With the handover's, if there is one.
    let mut env: Vec<*const c_char> = env_entries(envp)
        .filter(|e| !e.to_bytes().starts_with(prefix.as_bytes()))
        .map(CStr::as_ptr)
        .collect();
    if let Some(h) = &handoff {
        env.push(h.var.as_ptr());
        env.extend(h.also.iter().map(|c| c.as_ptr()));
    }
    env.push(std::ptr::null());
    let r = go(env.as_ptr());
    // SAFETY: this thread's errno.
    let e = unsafe { *libc::__errno_location() };
    drop(handoff);
    crate::set_errno(e);
    r
}

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// The program's environment now.
fn current_env() -> *const *const c_char {
    // SAFETY: reads the C library's `environ` pointer (a program that changes it while
    // another thread execs has a race of its own).
    unsafe { environ }
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arguments, passed on with the environment extended.
    with_handoff(envp, |env| unsafe { crate::real::execve(path, argv, env) })
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as execve, with the program's own environment.
    with_handoff(current_env(), |env| unsafe {
        crate::real::execve(path, argv, env)
    })
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arguments, passed on with the environment extended.
    with_handoff(envp, |env| unsafe { crate::real::execvpe(file, argv, env) })
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as execvpe, with the program's own environment.
    with_handoff(current_env(), |env| unsafe {
        crate::real::execvpe(file, argv, env)
    })
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arguments, passed on with the environment extended.
    with_handoff(envp, |env| unsafe { crate::real::fexecve(fd, argv, env) })
}

/// For the variadic `execl`, `execle` and `execlp` (in `exec_variadic.c`, which gathers
/// their arguments): `envp` null means the program's own environment, `search` a `PATH`
/// search as `execvp`'s.
///
/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmnet_preload_exec(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    search: c_int,
) -> c_int {
    let envp = if envp.is_null() { current_env() } else { envp };
    // SAFETY: as execve and execvpe.
    with_handoff(envp, |env| unsafe {
        if search != 0 {
            crate::real::execvpe(path, argv, env)
        } else {
            crate::real::execve(path, argv, env)
        }
    })
}

unsafe extern "C" {
    fn shmnet_execl(path: *const c_char, arg: *const c_char, ...) -> c_int;
    fn shmnet_execlp(file: *const c_char, arg: *const c_char, ...) -> c_int;
    fn shmnet_execle(path: *const c_char, arg: *const c_char, ...) -> c_int;
}

/// Defines the variadic `$name` as a jump to the C function `$to` (exec_variadic.c): every
/// argument register and the stack are still the caller's, so `$to` reads the variadic
/// arguments as `$name` would have. (Stable Rust cannot define a variadic function, and the
/// shared object exports only what Rust defines.)
macro_rules! variadic_exec {
    ($name:ident => $to:ident) => {
        /// # Safety
        /// The C call's contract (it is variadic: see `exec_variadic.c`).
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!("jmp {f}", f = sym $to);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!("b {f}", f = sym $to);
        }
    };
}

variadic_exec!(execl => shmnet_execl);
variadic_exec!(execlp => shmnet_execlp);
variadic_exec!(execle => shmnet_execle);

/// Whether a TCP socket of the server's, the program's own or inherited and not yet taken,
/// has a descriptor that stays open across an `exec`.
fn any_survives(st: &table::State) -> bool {
    let open = |key: c_int| surviving_fds(st, key).next().is_some();
    st.socks
        .iter()
        .any(|(&fd, s)| crate::fork::tcp_number(s).is_some() && open(fd))
        || st
            .inherit
            .as_ref()
            .is_some_and(|inh| inh.socks.iter().any(|(fd, _)| open(*fd)))
}

/// `system`: the C library's runs its shell through `posix_spawn`, whose `exec` is out of
/// this library's reach, so a program with sockets the shell should inherit (socat's
/// `SYSTEM:`) gets this one instead — `fork`, then `execl("/bin/sh", "sh", "-c", command)`,
/// with `SIGINT` and `SIGQUIT` ignored and `SIGCHLD` blocked in the caller meanwhile, as
/// POSIX specifies. Every other program gets the C library's.
///
/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    let ours =
        !command.is_null() && crate::caught(|| any_survives(&table::lock_unadopted()), || false);
    if !ours {
        // SAFETY: the caller's argument, passed on.
        return unsafe { crate::real::system(command) };
    }
    // SAFETY: signal bookkeeping on locals, fork, exec and wait, as the C library's own
    // system does them; the child runs only async-signal-safe calls and this library's
    // exec (the fork's child handler has left its state consistent).
    unsafe {
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        let (mut old_int, mut old_quit): (libc::sigaction, libc::sigaction) =
            (std::mem::zeroed(), std::mem::zeroed());
        libc::sigaction(libc::SIGINT, &ignore, &mut old_int);
        libc::sigaction(libc::SIGQUIT, &ignore, &mut old_quit);
        let mut chld: libc::sigset_t = std::mem::zeroed();
        let mut old_mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut old_mask);
        let pid = libc::fork();
        if pid == 0 {
            libc::sigaction(libc::SIGINT, &old_int, std::ptr::null_mut());
            libc::sigaction(libc::SIGQUIT, &old_quit, std::ptr::null_mut());
            libc::sigprocmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
            let argv = [c"sh".as_ptr(), c"-c".as_ptr(), command, std::ptr::null()];
            shmnet_preload_exec(c"/bin/sh".as_ptr(), argv.as_ptr(), std::ptr::null(), 0);
            libc::_exit(127);
        }
        let mut status: c_int = -1;
        if pid > 0 {
            while libc::waitpid(pid, &mut status, 0) < 0 {
                if *libc::__errno_location() != libc::EINTR {
                    status = -1;
                    break;
                }
            }
        }
        let e = *libc::__errno_location();
        libc::sigaction(libc::SIGINT, &old_int, std::ptr::null_mut());
        libc::sigaction(libc::SIGQUIT, &old_quit, std::ptr::null_mut());
        libc::sigprocmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
        crate::set_errno(e);
        if pid < 0 { -1 } else { status }
    }
}

// ------------------------------------------------------------------ after the exec

/// Whether `fd` is a memory file (the only kind `F_GET_SEALS` answers for): the unread
/// bytes' file, never a pipe or terminal a read could wait on.
fn is_memfd(fd: c_int) -> bool {
    // SAFETY: fcntl on a descriptor number: no memory is passed.
    (0..table::MAX_FD as c_int).contains(&fd) && unsafe { libc::fcntl(fd, libc::F_GET_SEALS) } >= 0
}

/// Whether `fd` is a socket (the control connection made for this program).
fn is_socket(fd: c_int) -> bool {
    // SAFETY: `stat` is plain integers, for which all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into a local stat buffer.
    (0..table::MAX_FD as c_int).contains(&fd)
        && unsafe { libc::fstat(fd, &mut st) } == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

/// Whether `fd` is an eventfd, as every socket of the server's is in the program (the
/// placeholder holding its number): a stale or made-up variable must not take over a file,
/// pipe or kernel socket of the program's.
fn is_eventfd(fd: c_int) -> bool {
    (0..table::MAX_FD as c_int).contains(&fd)
        && std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .is_ok_and(|l| l.as_os_str() == "anon_inode:[eventfd]")
}

/// Reads the memory file `fd` whole and closes it; nothing if it is not a memory file.
fn read_unread(fd: c_int) -> Vec<u8> {
    if fd <= 2 || !is_memfd(fd) {
        return Vec::new();
    }
    // SAFETY: a memory file the program before the exec made for this and named; taken
    // over here and closed when read.
    let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = std::os::unix::fs::FileExt::read_at(&f, &mut buf, out.len() as u64) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Takes [`VAR`] out of the environment array itself, not through `unsetenv`: bash
/// replaces the C library's `getenv` and `unsetenv` with its own, which know nothing yet
/// when this runs (before `main`), so `unsetenv` left the variable in what bash then reads
/// and exports to every command.
fn remove_from_environ() {
    let prefix = format!("{VAR}=");
    // SAFETY: called from the library's constructor, before `main` and any thread: nothing
    // else reads or writes the environment array meanwhile. Entries are moved down over
    // the ones removed, ending with the array's NULL, as `unsetenv` does.
    unsafe {
        let env = environ as *mut *const c_char;
        if env.is_null() {
            return;
        }
        let (mut from, mut to) = (0, 0);
        loop {
            let e = *env.add(from);
            if e.is_null() {
                *env.add(to) = std::ptr::null();
                break;
            }
            if !CStr::from_ptr(e).to_bytes().starts_with(prefix.as_bytes()) {
                *env.add(to) = e;
                to += 1;
            }
            from += 1;
        }
    }
}

/// When the library is loaded: takes the sockets an `exec` handed to this program, if it
/// did, and takes [`VAR`] out of the environment (a program this one starts gets a
/// variable of its own, or none).
pub(crate) fn inherit_at_load() {
    let Some(value) = std::env::var_os(VAR) else {
        return;
    };
    remove_from_environ();
    let value = value.to_string_lossy();
    let Some(read) = read_words(&value, read_unread) else {
        eprintln!("shmnet: exec: {VAR} is not in a form this library reads: ignored");
        return;
    };
    if read.skipped > 0 {
        eprintln!(
            "shmnet: exec: {} part(s) of {VAR} could not be read: those sockets fail here",
            read.skipped
        );
    }
    let socks: Vec<(c_int, Described)> = read
        .socks
        .into_iter()
        .filter(|(fd, _)| is_eventfd(*fd))
        .collect();
    if socks.is_empty() {
        // Nothing of ours where it says: a stale variable, whose connection descriptor
        // names something else now. Leave every descriptor alone.
        return;
    }
    // Never the standard descriptors: the program before the exec had them open when it
    // made the connection, which got a number past them.
    let conn = read.conn.filter(|&c| c > 2 && is_socket(c)).map(|c| {
        // SAFETY: the control connection the program before the exec made and named for
        // this one; close-on-exec again from now on.
        unsafe { crate::real::fcntl(c, libc::F_SETFD, libc::FD_CLOEXEC as usize) };
        // SAFETY: as above: this program's descriptor from now on, owned here.
        Reserved::from_fd(unsafe { OwnedFd::from_raw_fd(c) })
    });
    let mut st = table::lock_unadopted();
    for &(fd, _) in &socks {
        table::mark_inherited(fd);
    }
    for &(a, k) in &read.aliases {
        if socks.iter().any(|(fd, _)| *fd == k) && is_eventfd(a) {
            st.aliases.insert(a, k);
            table::mark_inherited(a);
        }
    }
    for &o in read.orphans.iter().filter(|&&o| is_eventfd(o)) {
        st.orphan(o);
    }
    debug!("exec: {} socket(s) to adopt", socks.len());
    st.inherit = Some(Inheritance {
        ticket: read.ticket,
        socks: socks
            .into_iter()
            .map(|(fd, d)| (fd, Heir::Described(d)))
            .collect(),
        conn,
    });
    // Now, not at the first call (a forked child waits for that): a program started with
    // sockets may `vfork` before it touches them (dash runs its commands so), and a vfork
    // child cannot adopt for it (see `prepare`). About a millisecond, paid by every program
    // an exec hands sockets to.
    crate::fork::adopt_inherited(&mut st);
}
