//! The server's counters as typed structs: what `shmnet stats` prints (as JSON) and what the
//! lab and the tests read back ([`ServerStats`] is both `Serialize` and `Deserialize`, so a
//! reader names fields, never string keys).

use crate::driver_host::DriverThreadStats;
use serde::{Deserialize, Serialize};

/// Everything the server counts, at one moment.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerStats {
    /// `server` or `ipc`.
    pub structure: String,
    /// Where the driver runs: `polled` (by the server's own loop), `thread`, `process`, or
    /// `none` once it has been stopped.
    pub driver_placement: String,
    /// How the driver's queues synchronise: `modern` (the rings) or `faithful` (seed 002's).
    pub sync: String,
    /// `faithful`: the server's side of seed 002's queues (the driver's is in `driver`).
    pub faithful: Option<crate::faithful_link::FaithfulServerStats>,
    /// The control socket.
    pub socket: std::path::PathBuf,
    /// Seconds since the server started.
    pub uptime_s: f64,
    /// Bytes of shared memory.
    pub memory: MemoryStats,
    /// The data window's rings and pools.
    pub data_window: Option<shmnet_chan::WindowStats>,
    /// The driver's counters (and the IN queues' drops).
    pub driver: DriverThreadStats,
    /// Whether the driver is still moving frames.
    pub driver_running: bool,
    /// Why the driver stopped, if it did.
    pub driver_stopped: Option<String>,
    /// Frames dropped because the OUT queue (or the ipc driver socket) was full.
    pub out_queue_full: u64,
    /// `ipc`: frames or datagrams lost because a socket was full or failed.
    pub ipc_drops: u64,
    /// The protocol stack's counters.
    pub stack: shmnet_stack::Stats,
    /// TCP's counters (every connection's, and every segment refused).
    pub tcp: shmnet_stack::tcp::TcpCounters,
    /// The pool buffers TCP's queues hold (received in order, out of order, to send).
    #[serde(default)]
    pub tcp_memory: shmnet_stack::tcp::TcpMemory,
    /// TCP sockets shared by `fork` (docs/preload.md, "fork").
    #[serde(default)]
    pub forks: super::ForkCounters,
    /// `shmnet capture`s (docs/observe.md).
    #[serde(default)]
    pub capture: super::capturing::CaptureCounters,
    /// The data plane's own counters.
    pub data_plane: DataPlaneCounters,
    /// The control plane's counters.
    pub control: ControlCounters,
    /// Every application's registered regions (seed 004's table).
    pub regions: shmnet_chan::handles::TableStats,
    /// The lookup cache that translates handles (hits and misses by access: read = send).
    pub lookup: shmnet_chan::handles::LookupStats,
    /// Misses on their way to the miss thread and lines back from it.
    pub misses: shmnet_chan::handles::MissPortStats,
    /// Attached applications, in order of attachment: the first 64 of them
    /// (a control message has a size limit; `apps_total` counts them all).
    pub apps: Vec<AppStats>,
    /// Applications attached now.
    pub apps_total: usize,
}

/// The stack's first drop counter (`shmnet_stack::Stats`: every refused frame is counted
/// under exactly one counter from this one on).
pub const FIRST_STACK_DROP: &str = "runt";
/// TCP's first refusal counter (`shmnet_stack::tcp::TcpCounters`).
pub const FIRST_TCP_DROP: &str = "malformed";

impl ServerStats {
    /// Every reason a received frame was refused, with its count: the stack's drop
    /// counters, then TCP's refusals named `tcp_…` (what `shmnet capture --point drop`
    /// names a dropped frame by, and `shmnet top` ranks).
    pub fn drops(&self) -> Vec<(String, u64)> {
        let stack = self.stack.fields();
        let tcp = self.tcp.fields();
        let from = |f: &[(&'static str, u64)], first: &str| {
            f.iter().position(|(n, _)| *n == first).unwrap_or(f.len())
        };
        stack[from(&stack, FIRST_STACK_DROP)..]
            .iter()
            .map(|(n, v)| ((*n).to_owned(), *v))
            .chain(
                tcp[from(&tcp, FIRST_TCP_DROP)..]
                    .iter()
                    .map(|(n, v)| (format!("tcp_{n}"), *v)),
            )
            .collect()
    }
}

/// Applications listed one by one in [`ServerStats::apps`].
pub const APPS_LISTED: usize = 64;

/// Shared memory in use.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryStats {
    /// The data window (packet buffers, IN and OUT queues).
    pub data_window_bytes: usize,
    /// Every application's own window, summed.
    pub app_windows_bytes: usize,
}

/// One attached application.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AppStats {
    /// Its connection's number (in the order connections came).
    pub id: u64,
    /// Its application number (seed 004's PCH), which its handles carry.
    pub pch: Option<u16>,
    /// Regions it registered.
    pub regions: u64,
    /// Bytes of them.
    pub registered_bytes: u64,
    /// Its process id and user, from the control socket's peer credentials.
    pub pid: i32,
    /// Its user id.
    pub uid: u32,
    /// `shm` (rings in its own window) or `ipc` (datagrams copied over a socket).
    pub transport: String,
    /// Sockets it has bound.
    pub sockets: usize,
    /// Chains delivered to it and not yet returned.
    pub holding: usize,
    /// Bytes of its window (0 for `ipc`).
    pub window_bytes: usize,
    /// Its rings: requests, deliveries, returns (empty for `ipc`).
    pub rings: Vec<shmnet_chan::RingStats>,
    /// What the server did for it.
    pub counters: AppCounters,
}

/// Counters of one attached application, as the server sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppCounters {
    /// Messages delivered to its receive queue.
    pub delivered: u64,
    /// Chains it gave back.
    pub returned: u64,
    /// Returns refused (a chain it was not holding).
    pub bad_returns: u64,
    /// Datagrams it sent.
    pub sent: u64,
    /// Sends refused (bad header, unbound socket, stack error, a handle it may not use).
    pub bad_sends: u64,
    /// Sends by handle dropped on a lookup-cache miss (the client sends them again).
    pub send_misses: u64,
    /// `--isolation regions`: datagrams whose posted buffer missed in the lookup cache
    /// (dropped under `--on-miss drop`, held in the socket's queue under `buffer`).
    pub recv_misses: u64,
    /// `--isolation regions`: posted receive buffers refused (outside a region registered
    /// writable, or too small for their class) and dropped.
    pub bad_posts: u64,
    /// `--isolation regions`: datagrams dropped because their posted buffer missed
    /// (`--on-miss drop`).
    pub recv_dropped: u64,
    /// Wake-ups sent to it (one per batch of deliveries at most).
    pub wakeups: u64,
    /// TCP operations refused (an unknown code, a socket it does not have or of the wrong
    /// kind, too many connects outstanding).
    pub tcp_bad_ops: u64,
    /// TCP sends it has made that wait for room in their connection's send buffer (or a
    /// line), now.
    pub tcp_parked: u64,
}

/// What the data plane loop did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DataPlaneCounters {
    /// Rounds of the loop.
    pub rounds: u64,
    /// Rounds that found work.
    pub busy_rounds: u64,
    /// Times the loop slept (armed every wait, then blocked).
    pub sleeps: u64,
    /// Control-plane commands it applied (attach, bind, close, detach, stats).
    pub commands: u64,
    /// Frames the server's loop took from the driver itself (`polled` placement).
    pub polled_rx: u64,
}

/// What the control plane did: attachments and everything it refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ControlCounters {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections open now (attached applications, stats askers, not yet greeted).
    pub open: u64,
    /// Connections turned away because `max_connections` were open.
    pub refused_full: u64,
    /// Connections closed because they sent no Hello in time.
    pub hello_timeouts: u64,
    /// Times `accept` failed for want of file descriptors (the listener then rests a
    /// moment; the connection waits in the backlog).
    pub fd_exhausted: u64,
    /// Messages refused as too large, malformed, or out of place.
    pub bad_messages: u64,
    /// Applications attached in total.
    pub attached: u64,
    /// Applications gone (hung up or killed), their buffers taken back.
    pub detached: u64,
    /// Stats requests answered.
    pub stats_answered: u64,
    /// Pages of the sockets listing answered (`shmnet sockets`).
    #[serde(default)]
    pub sockets_answered: u64,
    /// File descriptors that came attached to messages that take none (or more than one to
    /// `Register`): closed at once.
    pub stray_fds: u64,
}
