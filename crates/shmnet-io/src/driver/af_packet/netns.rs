//! The network namespace the driver was opened in, so a reopen finds the interface there
//! even when the thread that drives it has moved to another namespace since (as the tests'
//! threads do, and a `setns`-ing host could).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The calling thread's network namespace at [`Home::here`]. See the [module docs](self).
pub(crate) struct Home(Option<OwnedFd>);

const THREAD_NS: &str = "/proc/thread-self/ns/net";

fn open_ns() -> io::Result<OwnedFd> {
    Ok(std::fs::File::open(THREAD_NS)?.into())
}

/// Whether two namespace files name the same namespace.
fn same(a: &OwnedFd, b: &OwnedFd) -> io::Result<bool> {
    let (sa, sb) = (rustix::fs::fstat(a)?, rustix::fs::fstat(b)?);
    Ok(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino)
}

fn setns(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: `fd` is an open namespace file; CLONE_NEWNET switches only this thread's
    // network namespace, which is allowed in a multi-threaded process.
    if unsafe { libc::setns(fd.as_fd().as_raw_fd(), libc::CLONE_NEWNET) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Home {
    /// The calling thread's namespace; if `/proc` cannot say, reopens happen wherever the
    /// calling thread is.
    pub(crate) fn here() -> Home {
        Home(open_ns().ok())
    }

    /// Runs `f` in the home namespace: directly if the calling thread is there (the usual
    /// case), else after moving the thread there, and back afterwards (which needs
    /// `CAP_SYS_ADMIN`). `Err` if the thread could not move there.
    pub(crate) fn run<T>(&self, f: impl FnOnce() -> T) -> io::Result<T> {
        let Some(home) = &self.0 else {
            return Ok(f());
        };
        let cur = open_ns()?;
        if same(home, &cur)? {
            return Ok(f());
        }
        setns(home)?;
        let r = f();
        if let Err(e) = setns(&cur) {
            eprintln!(
                "shmnet: could not move the driver's thread back to its network \
                 namespace after a reopen: {e}"
            );
        }
        Ok(r)
    }
}
