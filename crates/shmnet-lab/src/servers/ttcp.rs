//! The lab's ttcp: one repetition is one `shmnet ttcp --proto tcp` run over the seed's three
//! sizes and the four structures, on the CPUs the calling thread is pinned to (its parties
//! inherit them).

use super::{Bench, Collected, Cpus, ServersOptions};
use crate::netbench::ttcp::{self, TtcpOptions};
use crate::netbench::{Launch, Proto, Structure, TCP_LOOPBACK_MTU, short_timer_slack};

/// The seed's sizes: "a small 10 byte packet size, an average 1K packet size and a larger 8K
/// packet size".
pub const SIZES: [usize; 3] = [10, 1024, 8192];

/// The structures, the seed's three systems first: the integrated kernel, the
/// message-based interface, the shared-memory server; then the server with its driver on a
/// thread, joined by the rings and by the seed's own queues; then shmnet's inline.
pub const STRUCTURES: [Structure; 6] = [
    Structure::Kernel,
    Structure::Ipc,
    Structure::Server,
    Structure::ServerThread,
    Structure::ServerFaithful,
    Structure::Inline,
];

/// Seconds per cell: ttcp's own quick and full lengths halved, as six repetitions average.
fn seconds(quick: bool) -> f64 {
    if quick { 0.25 } else { 1.0 }
}

/// Runs one repetition and files its cells under `cpus`.
pub(super) fn repetition(
    o: &ServersOptions,
    cpus: Cpus,
    c: &mut Collected,
    progress: &mut dyn FnMut(&str),
) {
    short_timer_slack();
    let opts = TtcpOptions {
        launch: Launch {
            exe: o.exe.clone(),
            checksum: false,
            proto: Proto::Tcp,
            mtu: TCP_LOOPBACK_MTU,
            buffers: Default::default(),
            capture: None,
        },
        structures: STRUCTURES.to_vec(),
        sizes: SIZES.to_vec(),
        dirs: Vec::new(),
        count: None,
        seconds: seconds(o.quick),
        window: None,
        quick: true,
    };
    let report = ttcp::run(&opts, progress);
    for r in &report.rows {
        let s = c.at((Bench::Ttcp, cpus, Some(r.size), r.structure));
        s.values.push(r.gbit_per_s);
        s.sleeps.push(r.sleeps_per_msg);
        s.cpu_us.push(r.cpu_s_per_msg * 1e6);
        s.lost += r.lost;
    }
    for f in report.failed {
        c.failures.push(format!("ttcp on {}: {f}", cpus.name()));
    }
}
