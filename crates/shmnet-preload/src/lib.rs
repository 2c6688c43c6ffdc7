//! shmnet's sockets library: loaded into an unmodified program with `LD_PRELOAD` (which
//! `shmnet run -- PROGRAM` sets up), it carries the program's IPv4 TCP and UDP sockets on a
//! shmnet server through the client API, and leaves every other descriptor — files, pipes,
//! Unix sockets, real IPv6, loopback — to the kernel untouched.
//!
//! Seed 002's protocol server ran ftp, X11 and ttcp unmodified through an emulation library
//! of this kind; OpenOnload's `onload`, libvma and TAS's interposition library are today's.
//! It is written here rather than taken from a crate because it is the subject of the work:
//! the calls map onto shmnet's own client API, and the waiting has to wake on shmnet's ring
//! wake-ups and the kernel's descriptors at once.
//!
//! How it fits together:
//! - [`real`]: the C library's own calls, for every descriptor that is not shmnet's;
//! - [`table`]: which descriptors are shmnet's (one atomic load to tell), the one client
//!   they share, the sockets;
//! - [`wait`]: one way to wait — for shmnet sockets and kernel descriptors together, with
//!   the client free for the program's other threads meanwhile;
//! - `sockets`, `io`, `opts`, `polling`: the calls a program makes, each an `extern "C"`
//!   function of the C library's name and signature; [`udp`] what they do on a UDP socket,
//!   [`multicast`] its IPv4 multicast options.
//!
//! - `fork` and [`exec`]: the sockets a forked child or an `exec`ed program inherits;
//! - [`api`]: the library's own two calls, `shmnet_present` and `shmnet_fd_carried`,
//!   declared for C in `include/shmnet.h` (a program may link the library directly).
//!
//! What is carried and what is not yet is in docs/preload.md.

mod api;
mod config;
mod dup;
mod epoll;
mod exec;
mod fork;
mod fortify;
mod io;
mod mmsg;
mod multicast;
mod net;
mod opts;
mod polling;
mod positioned;
mod real;
mod sockets;
mod table;
mod udp;
mod wait;

use libc::c_int;

/// Runs when the library is loaded, before the program's `main`: a program started by an
/// `exec` that handed it sockets marks them before its first call ([`exec`]).
extern "C" fn at_load() {
    table::own_client();
    // From the start, so that every forked child owns its copy of the state (the child
    // handler says so): only a child made without the handlers — vfork — borrows its
    // parent's ([`table::borrowed`]).
    fork::install_handlers();
    caught(exec::remember_settings, || ());
    caught(exec::inherit_at_load, || ());
}

#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = at_load;

/// Sets `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e };
}

/// Fails a call: `errno = e`, returns -1 (as `T`: `c_int` or `ssize_t`).
pub(crate) fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}

/// Runs one call's body; a panic inside (a bug of ours) must not unwind into C: the panic
/// message is printed and `on_panic` answers instead.
pub(crate) fn caught<T>(f: impl FnOnce() -> T, on_panic: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| on_panic())
}

/// [`caught`] for a body that answers `Result<_, errno>`: a panic is `EIO`.
pub(crate) fn guarded_result<T>(f: impl FnOnce() -> Result<T, c_int>) -> Result<T, c_int> {
    caught(f, || Err(libc::EIO))
}

/// [`caught`] for a call that returns -1 on failure: a panic fails it with `EIO`.
pub(crate) fn guarded<T: From<i8>>(f: impl FnOnce() -> T) -> T {
    caught(f, || fail(libc::EIO))
}
