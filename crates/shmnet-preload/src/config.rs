//! What the environment asks of the library, read once: `shmnet run` sets these.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The library's settings.
#[derive(Debug)]
pub(crate) struct Config {
    /// The server's control socket (`SHMNET_SERVER`, else the default `shmnet serve` uses).
    pub(crate) server: PathBuf,
    /// Log every call that shmnet takes, and every decision (`SHMNET_LOG=debug`).
    pub(crate) debug: bool,
    /// With no server reachable, leave sockets to the kernel instead of failing them
    /// (`SHMNET_FALLBACK=1`).
    pub(crate) fallback: bool,
    /// How many times a wait looks at the server's sockets before it sleeps
    /// (`SHMNET_SPIN`, default 1,024, as the client library's blocking calls; 0 sleeps at
    /// once).
    pub(crate) spin: u32,
    /// UDP sockets stay the kernel's (`SHMNET_UDP=kernel`): for programs that send with
    /// system calls of their own, past the C library (libuv's `sendmmsg`).
    pub(crate) kernel_udp: bool,
}

/// The settings, read at the first call that needs them.
pub(crate) fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| Config {
        server: std::env::var_os("SHMNET_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(shmnet_io::control::default_socket),
        debug: std::env::var("SHMNET_LOG").is_ok_and(|v| v == "debug"),
        fallback: std::env::var("SHMNET_FALLBACK").is_ok_and(|v| v == "1"),
        spin: std::env::var("SHMNET_SPIN")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1024),
        kernel_udp: std::env::var("SHMNET_UDP").is_ok_and(|v| v == "kernel"),
    })
}

/// Writes `shmnet: …` to stderr when `SHMNET_LOG=debug`.
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::config::get().debug {
            eprintln!("shmnet: {}", format_args!($($arg)*));
        }
    };
}
pub(crate) use debug;
