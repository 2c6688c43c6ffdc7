//! The library's own calls, declared in `include/shmnet.h` for programs that link it
//! directly (or look them up with `dlsym` under `shmnet run`): whether a server carries the
//! program's sockets, and whether it carries a given descriptor.

use libc::c_int;

use crate::table::{self, Mark};

/// 1 when a server carries this program's sockets (attaching now if no socket call has),
/// 0 when none answered.
#[unsafe(no_mangle)]
pub extern "C" fn shmnet_present() -> c_int {
    crate::caught(|| c_int::from(table::lock().client().is_ok()), || 0)
}

/// 1 when `fd` is one of the server's sockets, 0 when it is the kernel's.
#[unsafe(no_mangle)]
pub extern "C" fn shmnet_fd_carried(fd: c_int) -> c_int {
    c_int::from(table::marked(fd) == Mark::Shmnet && !table::orphaned(fd))
}
