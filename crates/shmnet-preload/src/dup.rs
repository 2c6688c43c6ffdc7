//! `dup`, `dup2`, `dup3` (and `fcntl`'s `F_DUPFD`, in [`crate::opts`]): a duplicate of one
//! of the server's sockets is another descriptor for the same socket, closed with its last
//! descriptor, as with the kernel's.
//!
//! Not carried: an epoll instance watches a socket by the number it was given, so closing
//! that number ends the watch even while a duplicate lives (the kernel watches the socket
//! itself until its last descriptor closes).

use libc::c_int;

use crate::table::{self, Mark};
use crate::{guarded, real};

/// Records `new`, just made by the kernel from `old`, as a duplicate if `old` is one of the
/// server's sockets. Returns `new`.
pub(crate) fn note(old: c_int, new: c_int) -> c_int {
    if new >= 0 && old != new && table::marked(old) == Mark::Shmnet && !table::borrowed() {
        guarded(|| {
            table::lock().alias(old, new);
            0
        });
    }
    new
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    // SAFETY: the caller's argument, passed on.
    note(old, unsafe { real::dup(old) })
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::dup2(old, new) };
    if r >= 0 && old != new && !crate::table::borrowed_for(new) {
        // The kernel closed what `new` was; it is `old`'s duplicate now.
        crate::sockets::forget(new);
    }
    note(old, r)
}

/// # Safety
/// The C call's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::dup3(old, new, flags) };
    if r >= 0 && old != new && !crate::table::borrowed_for(new) {
        crate::sockets::forget(new);
    }
    note(old, r)
}
