//! One server per interface: a lock file per (network namespace, interface) that a server
//! serving `af_packet:IFACE` holds for as long as it runs.
//!
//! Two servers on one interface would both answer every ARP request, ping and datagram (the
//! peer sees duplicate replies), so the second refuses to start and names the first; with
//! `--force` it starts anyway after a loud warning.
//!
//! The lock is an `flock` on `RUNTIME_DIR/af_packet-NETNS-IFACE.lock` (see
//! [`shmnet_io::control::runtime_dir`]), NETNS being the inode of the network namespace, so
//! that interfaces of the same name in different namespaces are different locks. The kernel
//! drops the lock when its holder dies, however it dies: a stale file locks nothing. The file
//! holds the holder's pid, for the message.
//!
//! Invariant: while an [`InterfaceLock`] is alive, its file is open and `flock`ed
//! exclusively by this process.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct InterfaceLock {
    _file: File,
}

/// Why a server may not take an interface.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the interface.
    #[error(
        "another shmnet server (pid {holder}) already serves {iface} in this network namespace: both would answer every frame (duplicate replies); stop it, or pass --force to run beside it anyway"
    )]
    Held {
        /// The interface.
        iface: String,
        /// The holder's pid as it wrote it (`?` if unreadable).
        holder: String,
    },
    /// The runtime directory is missing or not private.
    #[error(transparent)]
    Dir(#[from] shmnet_io::control::ControlError),
    /// The lock file could not be opened or written.
    #[error("interface lock {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// The lock file of `iface` in this process's network namespace.
pub fn lock_path(iface: &str) -> Result<PathBuf, LockError> {
    let dir = shmnet_io::control::ensure_runtime_dir()?;
    let netns = std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino());
    let name: String = iface
        .chars()
        .map(|c| if c == '/' { '_' } else { c })
        .collect();
    Ok(dir.join(format!("af_packet-{netns}-{name}.lock")))
}

/// Takes `iface`, or fails naming the server that has it.
pub fn lock(iface: &str) -> Result<InterfaceLock, LockError> {
    let path = lock_path(iface)?;
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    // SAFETY: flock on the fd of `file`, which is open for the duration of the call.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    let err = std::io::Error::last_os_error();
    match r {
        0 => {}
        _ if err.raw_os_error() == Some(libc::EWOULDBLOCK) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(LockError::Held {
                iface: iface.to_string(),
                holder: if holder.is_empty() { "?" } else { holder }.to_string(),
            });
        }
        _ => return Err(io(err)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    Ok(InterfaceLock { _file: file })
}

/// Takes `iface`; with `force`, a held interface is a loud warning on stderr instead of an
/// error (and no lock is taken).
pub fn lock_or_warn(iface: &str, force: bool) -> Result<Option<InterfaceLock>, LockError> {
    match lock(iface) {
        Ok(l) => Ok(Some(l)),
        Err(e @ LockError::Held { .. }) if force => {
            eprintln!(
                "WARNING: --force: {e}\nWARNING: running anyway; the peers of {iface} will see every reply twice"
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime directory is process-wide (an environment variable): one private directory
    /// for this module's tests, set once.
    fn private_runtime_dir() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let dir = std::env::temp_dir().join(format!("shmnet-lock-test-{}", std::process::id()));
            // SAFETY: set once, before any test of this binary reads it (every reader calls
            // this first, and `Once` orders them after the write).
            unsafe { std::env::set_var(shmnet_io::control::RUNTIME_DIR_ENV, &dir) };
        });
    }

    #[test]
    fn a_second_lock_on_one_interface_is_refused_naming_the_holder_and_freed_by_drop() {
        private_runtime_dir();
        let first = lock("shmtest0").expect("free at first");
        // A second open file description of the same file conflicts even within a process.
        let err = lock("shmtest0").expect_err("held");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())) && msg.contains("--force"),
            "{msg}"
        );
        assert!(
            lock_or_warn("shmtest0", true).unwrap().is_none(),
            "--force warns"
        );
        assert!(lock("shmtest1").is_ok(), "another interface is free");
        drop(first);
        assert!(lock("shmtest0").is_ok(), "freed by drop");
        let _ = std::fs::remove_dir_all(shmnet_io::control::runtime_dir());
    }
}
