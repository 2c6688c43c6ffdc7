//! The C library's own definitions of the calls this library takes over, found with
//! `dlsym(RTLD_NEXT, …)` at first use: every call on a descriptor that is not shmnet's goes
//! to them unchanged.
//!
//! `fcntl` and `ioctl` are variadic in C. Stable Rust cannot define or call a variadic
//! function, so both sides treat the one optional argument as a register-sized integer:
//! on the 64-bit Linux ABIs (x86-64, AArch64) a variadic integer or pointer argument
//! travels in the same register as a fixed one, which is what every interposition library
//! written in Rust relies on.

use libc::{c_int, c_ulong, c_void, nfds_t, pollfd, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` after this library's, cached in `slot`. Aborts the
/// program when there is none (a C library without the call cannot run it anyway).
fn resolve(slot: &AtomicUsize, name: &'static str) -> usize {
    let f = slot.load(Ordering::Relaxed);
    if f != 0 {
        return f;
    }
    // SAFETY: `name` is a NUL-terminated literal (the macro appends the NUL); dlsym only
    // reads it and returns null or the address of the next definition.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if f == 0 {
        let msg = b"shmnet-preload: the C library has no definition of a call it takes over\n";
        // SAFETY: writes a static buffer to stderr; abort never returns.
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::abort();
        }
    }
    slot.store(f, Ordering::Relaxed);
    f
}

macro_rules! real {
    ($( $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty ;)*) => {$(
        /// The C library's own `
        #[doc = stringify!($name)]
        /// `.
        ///
        /// # Safety
        /// As the C call: every pointer valid for what the call reads and writes.
        pub(crate) unsafe fn $name($($a: $t),*) -> $r {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let f = resolve(&SLOT, concat!(stringify!($name), "\0"));
            // SAFETY: `f` is the C library's definition of this very call, whose C
            // signature these types spell (see the module docs for the variadic ones).
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(f) };
            // SAFETY: the caller's contract is the call's.
            unsafe { f($($a),*) }
        }
    )*};
}

real! {
    socket(domain: c_int, ty: c_int, proto: c_int) -> c_int;
    bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    listen(fd: c_int, backlog: c_int) -> c_int;
    accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
    recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t;
    send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
    sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t;
    sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t;
    close(fd: c_int) -> c_int;
    dup(fd: c_int) -> c_int;
    dup2(old: c_int, new: c_int) -> c_int;
    dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    shutdown(fd: c_int, how: c_int) -> c_int;
    getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int;
    getsockopt(fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int;
    fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int;
    ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int;
    poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
    epoll_create1(flags: c_int) -> c_int;
    epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut libc::epoll_event) -> c_int;
    epoll_wait(ep: c_int, ev: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int;
    epoll_pwait(ep: c_int, ev: *mut libc::epoll_event, max: c_int, timeout: c_int, mask: *const libc::sigset_t) -> c_int;
    ppoll(fds: *mut pollfd, n: nfds_t, t: *const libc::timespec, mask: *const libc::sigset_t) -> c_int;
    select(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, t: *mut libc::timeval) -> c_int;
    pselect(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, t: *const libc::timespec, mask: *const libc::sigset_t) -> c_int;
    recvmmsg(fd: c_int, v: *mut libc::mmsghdr, n: libc::c_uint, flags: c_int, t: *mut libc::timespec) -> c_int;
    sendmmsg(fd: c_int, v: *mut libc::mmsghdr, n: libc::c_uint, flags: c_int) -> c_int;
    sendfile(out: c_int, input: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t;
    lseek(fd: c_int, off: libc::off_t, whence: c_int) -> libc::off_t;
    lseek64(fd: c_int, off: libc::off64_t, whence: c_int) -> libc::off64_t;
    pread(fd: c_int, buf: *mut c_void, n: size_t, off: libc::off_t) -> ssize_t;
    pread64(fd: c_int, buf: *mut c_void, n: size_t, off: libc::off64_t) -> ssize_t;
    pwrite(fd: c_int, buf: *const c_void, n: size_t, off: libc::off_t) -> ssize_t;
    pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: libc::off64_t) -> ssize_t;
    __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
    __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t;
    __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: size_t) -> c_int;
    __ppoll_chk(fds: *mut pollfd, n: nfds_t, t: *const libc::timespec, mask: *const libc::sigset_t, fdslen: size_t) -> c_int;
    execve(path: *const libc::c_char, argv: *const *const libc::c_char, envp: *const *const libc::c_char) -> c_int;
    execvpe(file: *const libc::c_char, argv: *const *const libc::c_char, envp: *const *const libc::c_char) -> c_int;
    fexecve(fd: c_int, argv: *const *const libc::c_char, envp: *const *const libc::c_char) -> c_int;
    system(command: *const libc::c_char) -> c_int;
}
