//! `shmnet run -- PROGRAM ARGS…`: an unmodified program with its IPv4 TCP and UDP sockets
//! on a shmnet server, through the sockets library (`libshmnet_preload.so`,
//! docs/preload.md).

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The library's file name, looked for beside this program.
const LIBRARY: &str = "libshmnet_preload.so";

#[derive(clap::Args, Debug)]
#[command(
    about = "Run an unmodified program with its IPv4 TCP and UDP sockets on a shmnet server",
    long_about = "Run an unmodified program with its IPv4 TCP and UDP sockets on a shmnet server.\n\n\
The program starts with shmnet's sockets library preloaded (LD_PRELOAD): its TCP and UDP \
sockets that connect or send to, or listen on, an address the server serves become the \
server's (any address off this host, the server's address, or 0.0.0.0 and ::); loopback, \
this host's own addresses, IPv6, Unix sockets, files and pipes stay the kernel's. With no \
server reachable the program's first TCP socket() fails with ENETDOWN and a line on stderr \
that says why (or, with --fallback, the kernel carries it). \
See docs/preload.md for what is carried and what is not yet.",
    after_help = "Examples:\n  \
shmnet serve --structure server --driver af_packet:veth0 --ip 10.77.0.1/24 &\n  \
shmnet run -- nc 10.77.0.2 5000 < file           a file to a Linux listener\n  \
shmnet run -- nc -l 5000 > copy                   a listener on 10.77.0.1:5000\n  \
shmnet run --kernel-udp -- dig @10.77.0.2 host    UDP left to the kernel (libuv's sends)\n  \
SHMNET_LOG=debug shmnet run -- curl http://10.77.0.2:8000/   which calls went where"
)]
pub struct RunArgs {
    /// The server's control socket (default: the one `shmnet serve` makes).
    #[arg(long, value_name = "PATH")]
    server: Option<PathBuf>,
    /// With no server reachable, let the kernel carry the sockets instead of failing them.
    #[arg(long)]
    fallback: bool,
    /// Log every call the library takes and where it went (SHMNET_LOG=debug).
    #[arg(long)]
    debug: bool,
    /// Leave the program's UDP sockets to the kernel (SHMNET_UDP=kernel): for programs
    /// that make socket system calls directly, past the C library, which no preloaded
    /// library sees — libuv sends UDP with the sendmmsg system call, so BIND's dig, host
    /// and nslookup would get ENOTSOCK.
    #[arg(long)]
    kernel_udp: bool,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    program: Vec<OsString>,
}

/// Where the library is: `$SHMNET_PRELOAD`, else beside this executable.
pub fn library() -> Result<PathBuf> {
    let lib = found_library()?;
    // ld.so splits LD_PRELOAD at spaces and colons and skips what it cannot open, silently:
    // the program would then run on the kernel without a word.
    let lib = lib
        .canonicalize()
        .with_context(|| format!("the sockets library {}", lib.display()))?;
    if lib.to_string_lossy().contains([' ', ':']) {
        bail!(
            "the sockets library's path {} has a space or a colon, which LD_PRELOAD cannot carry: move it, or set SHMNET_PRELOAD to a copy elsewhere",
            lib.display()
        );
    }
    Ok(lib)
}

fn found_library() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("SHMNET_PRELOAD") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("finding this program")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let lib = dir.join(LIBRARY);
    if !lib.exists() {
        bail!(
            "{} is not beside {} (build it: cargo build --release -p shmnet-preload, or set SHMNET_PRELOAD)",
            LIBRARY,
            exe.display()
        );
    }
    Ok(lib)
}

/// Replaces this process with the program (its exit status and signals are the program's).
pub fn run(a: RunArgs) -> Result<()> {
    let lib = library()?;
    let mut preload = OsString::from(&lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let (program, args) = a.program.split_first().expect("clap requires a program");
    if let Some(opt) = program.to_str().filter(|p| p.starts_with('-')) {
        // Taken as the program because the program's own options may start with `-`.
        let hint = if opt.starts_with("--socket") {
            " (the server's socket is --server PATH)"
        } else {
            ""
        };
        bail!(
            "unknown option {opt}{hint}: shmnet run [--server PATH] [--fallback] [--debug] [--kernel-udp] -- PROGRAM ARGS…"
        );
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env("LD_PRELOAD", preload);
    if let Some(s) = &a.server {
        cmd.env("SHMNET_SERVER", s);
    }
    if a.fallback {
        cmd.env("SHMNET_FALLBACK", "1");
    }
    if a.debug {
        cmd.env("SHMNET_LOG", "debug");
    }
    if a.kernel_udp {
        cmd.env("SHMNET_UDP", "kernel");
    }
    let err = cmd.exec();
    bail!("cannot run {}: {err}", Path::new(program).display())
}
