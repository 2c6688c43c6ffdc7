//! `shmnet serve --metrics ADDR:PORT`: every counter of [`ServerStats`] at `/metrics`, in
//! the Prometheus exposition format.
//!
//! A thread of `shmnet serve` answers HTTP (tiny_http) and, at each scrape, asks the server
//! for its counters over its own control socket, exactly as `shmnet stats` does: one source
//! for stats, sockets and metrics, and nothing the data plane does between scrapes. The
//! registry is built fresh from that snapshot (prometheus-client encodes it, names, types,
//! `_total` suffixes and all). Counters are the monotonic counts; gauges are what is true
//! now (occupancy, free buffers, connections, sockets, uptime). Names follow Prometheus'
//! conventions: `shmnet_<layer>_<what>[_<unit>]`, with labels for rings, pools and
//! applications.

use anyhow::{Context, Result};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use shmnet_io::server::ServerStats;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;

/// Labels of one series.
type Labels = Vec<(&'static str, String)>;

/// Starts serving `/metrics` on `addr` from the server whose control socket is `socket`;
/// the thread lives as long as the process. Returns the address bound (port 0 picks one).
pub fn spawn(addr: SocketAddr, socket: PathBuf) -> Result<SocketAddr> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| {
            format!("cannot serve metrics on {addr} (in use? another --metrics address)")
        })?;
    let bound = server
        .server_addr()
        .to_ip()
        .context("the metrics listener has no IP address")?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                let resp = answer(req.method(), req.url(), &socket);
                let _ = req.respond(resp);
            }
        })
        .context("starting the metrics thread")?;
    Ok(bound)
}

/// The answer to one request: the metrics at `/metrics`, 404 elsewhere, 503 when the
/// server does not answer.
fn answer(
    method: &tiny_http::Method,
    url: &str,
    socket: &std::path::Path,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let path = url.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return tiny_http::Response::from_string("shmnet serves its counters at /metrics\n")
            .with_status_code(404);
    }
    if *method != tiny_http::Method::Get && *method != tiny_http::Method::Head {
        return tiny_http::Response::from_string("GET /metrics\n").with_status_code(405);
    }
    match shmnet_io::server::query_stats(socket) {
        Ok(stats) => {
            let body = render(&stats);
            let ctype = tiny_http::Header::from_bytes(
                "Content-Type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
            .expect("a valid header");
            tiny_http::Response::from_string(body).with_header(ctype)
        }
        Err(e) => tiny_http::Response::from_string(format!("the server did not answer: {e}\n"))
            .with_status_code(503),
    }
}

/// Every counter of `st` in the OpenMetrics text format.
pub fn render(st: &ServerStats) -> String {
    let mut m = Metrics {
        reg: Registry::with_prefix("shmnet"),
    };
    m.export(st);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &m.reg);
    out
}

/// `help` as the registry wants it: it ends every help text with a full stop itself.
fn help_text(help: &str) -> &str {
    help.strip_suffix('.').unwrap_or(help)
}

/// A registry being filled from one snapshot.
struct Metrics {
    reg: Registry,
}

impl Metrics {
    fn counter(&mut self, name: &str, help: &str, v: u64) {
        let c: Counter = Counter::default();
        c.inc_by(v);
        self.reg.register(name, help_text(help), c);
    }

    fn gauge(&mut self, name: &str, help: &str, v: u64) {
        let g: Gauge = Gauge::default();
        g.set(i64::try_from(v).unwrap_or(i64::MAX));
        self.reg.register(name, help_text(help), g);
    }

    fn gauge_f(&mut self, name: &str, help: &str, v: f64) {
        let g: Gauge<f64, AtomicU64> = Gauge::default();
        g.set(v);
        self.reg.register(name, help_text(help), g);
    }

    fn counters(&mut self, name: &str, help: &str, rows: impl IntoIterator<Item = (Labels, u64)>) {
        let f = Family::<Labels, Counter>::default();
        for (l, v) in rows {
            f.get_or_create(&l).inc_by(v);
        }
        self.reg.register(name, help_text(help), f);
    }

    fn gauges(&mut self, name: &str, help: &str, rows: impl IntoIterator<Item = (Labels, u64)>) {
        let f = Family::<Labels, Gauge>::default();
        for (l, v) in rows {
            f.get_or_create(&l)
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        self.reg.register(name, help_text(help), f);
    }

    fn export(&mut self, st: &ServerStats) {
        self.gauge_f(
            "uptime_seconds",
            "Seconds since the server started.",
            st.uptime_s,
        );
        self.gauges(
            "memory_bytes",
            "Bytes of shared memory: the data window, and every application's own windows.",
            [
                (
                    vec![("window", "data".to_owned())],
                    st.memory.data_window_bytes as u64,
                ),
                (
                    vec![("window", "apps".to_owned())],
                    st.memory.app_windows_bytes as u64,
                ),
            ],
        );
        self.gauge(
            "driver_up",
            "1 while the driver is moving frames, 0 once it stopped.",
            u64::from(st.driver_running),
        );
        self.driver(st);
        self.window(st);
        self.stack(st);
        self.data_plane(st);
        self.apps(st);
        self.handles(st);
    }

    fn driver(&mut self, st: &ServerStats) {
        let d = &st.driver.driver;
        for (name, help, v) in [
            (
                "driver_rx_frames",
                "Frames received from the device.",
                d.rx_frames,
            ),
            (
                "driver_rx_bytes",
                "Bytes received from the device.",
                d.rx_bytes,
            ),
            (
                "driver_rx_no_buffer",
                "Frames dropped because no pool had a buffer.",
                d.rx_no_buffer,
            ),
            ("driver_rx_runts", "Frames shed as runts.", d.rx_runts),
            (
                "driver_rx_unknown_type",
                "Frames shed for an unknown EtherType.",
                d.rx_unknown_type,
            ),
            (
                "driver_rx_unserved",
                "Frames of a family no server took.",
                d.rx_unserved,
            ),
            (
                "driver_rx_device_drops",
                "Frames the device or kernel dropped before the driver saw them.",
                d.rx_device_drops,
            ),
            (
                "driver_rx_filtered",
                "Frames seen but not for this host.",
                d.rx_filtered,
            ),
            (
                "driver_rx_oversize",
                "Frames longer than a pool buffer, dropped.",
                d.rx_oversize,
            ),
            (
                "driver_rx_bad_ring",
                "Device descriptors that failed a bounds check.",
                d.rx_bad_ring,
            ),
            ("driver_tx_frames", "Frames transmitted.", d.tx_frames),
            ("driver_tx_bytes", "Bytes transmitted.", d.tx_bytes),
            (
                "driver_tx_errors",
                "Frames the device could not take or refused.",
                d.tx_errors,
            ),
            (
                "driver_link_down_events",
                "Times the device went from up to down.",
                d.link_down_events,
            ),
            (
                "driver_reopens",
                "Times the driver reopened the device.",
                d.reopens,
            ),
            (
                "driver_in_queue_full",
                "Frames dropped because an IN queue was full.",
                st.driver.in_queue_full,
            ),
            (
                "out_queue_full",
                "Frames dropped because the OUT queue (or the ipc driver socket) was full.",
                st.out_queue_full,
            ),
            (
                "ipc_drops",
                "ipc: frames or datagrams lost because a socket was full or failed.",
                st.ipc_drops,
            ),
        ] {
            self.counter(name, help, v);
        }
    }

    fn window(&mut self, st: &ServerStats) {
        let Some(w) = &st.data_window else {
            return;
        };
        let rings: Vec<(&str, &shmnet_chan::RingStats)> = ["in_ipv4", "in_arp", "out"]
            .into_iter()
            .zip(&w.rings)
            .chain(std::iter::once(("deferred_free", &w.deferred)))
            .collect();
        let by_ring = |f: fn(&shmnet_chan::RingStats) -> u64| {
            rings
                .iter()
                .map(move |(n, r)| (vec![("ring", (*n).to_owned())], f(r)))
                .collect::<Vec<_>>()
        };
        self.gauges(
            "ring_occupancy",
            "Descriptors in a ring of the data window now.",
            by_ring(|r| u64::from(r.occupancy.unwrap_or(0))),
        );
        self.gauges(
            "ring_capacity",
            "Slots of a ring of the data window.",
            by_ring(|r| u64::from(r.capacity)),
        );
        self.counters(
            "ring_enqueued",
            "Descriptors the producer placed.",
            by_ring(|r| r.enqueued),
        );
        self.counters(
            "ring_dequeued",
            "Descriptors the consumer accepted.",
            by_ring(|r| r.dequeued),
        );
        self.counters(
            "ring_rejected",
            "Descriptors the producer could not place (the ring was full).",
            by_ring(|r| r.rejected),
        );
        self.counters(
            "ring_refused",
            "Descriptors the consumer refused (outside the window's limits).",
            by_ring(|r| r.refused),
        );
        self.counters(
            "ring_wakeups_sent",
            "Wake-ups the producer sent.",
            by_ring(|r| r.wakeups_sent),
        );
        let p = &w.pools;
        let by_pool = |f: fn(&shmnet_chan::pool::PoolStats) -> u64| {
            p.pools
                .iter()
                .enumerate()
                .map(move |(i, s)| (vec![("pool", i.to_string())], f(s)))
                .collect::<Vec<_>>()
        };
        self.gauges(
            "pool_buffers",
            "Buffers a pool owns.",
            by_pool(|s| u64::from(s.buffers)),
        );
        self.gauges(
            "pool_free_buffers",
            "Buffers on a pool's free list now.",
            by_pool(|s| u64::from(s.free.unwrap_or(0))),
        );
        self.counters(
            "pool_allocs",
            "Buffers allocated from a pool.",
            by_pool(|s| s.allocs),
        );
        self.counters(
            "pool_frees",
            "Buffers returned to a pool.",
            by_pool(|s| s.frees),
        );
        self.counters(
            "pool_refused",
            "Free-list entries or frees a pool refused as corrupt.",
            by_pool(|s| s.refused),
        );
        for (name, help, v) in [
            (
                "pool_driver_drops",
                "Driver allocations that found no buffer in any pool (a dropped frame).",
                p.driver_drops,
            ),
            (
                "pool_server_empty",
                "Server allocations that found every pool empty.",
                p.server_empty,
            ),
            (
                "pool_bad_chains",
                "Chains whose links were broken (bad index, cycle, wrong count).",
                p.bad_chains,
            ),
            (
                "pool_bad_releases",
                "Releases of buffers that were not allocated.",
                p.bad_releases,
            ),
        ] {
            self.counter(name, help, v);
        }
    }

    fn stack(&mut self, st: &ServerStats) {
        for (k, v) in st.stack.fields() {
            self.counter(
                &format!("stack_{k}"),
                &format!("shmnet-stack's `{k}` counter (shmnet_stack::Stats)."),
                v,
            );
        }
        for (k, v) in st.tcp.fields() {
            self.counter(
                &format!("tcp_{k}"),
                &format!("TCP's `{k}` counter (shmnet_stack::tcp::TcpCounters)."),
                v,
            );
        }
        let m = &st.tcp_memory;
        self.gauge(
            "tcp_connections",
            "TCP connections in the table, in any state.",
            m.connections,
        );
        self.gauges(
            "tcp_queue_buffers",
            "Pool buffers TCP's queues hold: received in order and unread, out of order, to send.",
            [
                (vec![("queue", "rx".to_owned())], m.rx_bufs),
                (vec![("queue", "ooo".to_owned())], m.ooo_bufs),
                (vec![("queue", "tx".to_owned())], m.tx_bufs),
            ],
        );
        let f = &st.forks;
        self.counter("forks", "Forks that shared TCP sockets.", f.forks);
        self.counter(
            "fork_adoptions",
            "Tickets a forked child adopted.",
            f.adopted,
        );
        self.gauge(
            "fork_shared_sockets",
            "TCP sockets shared by a fork now.",
            f.shared_now,
        );
    }

    fn data_plane(&mut self, st: &ServerStats) {
        let d = &st.data_plane;
        self.counter(
            "data_plane_rounds",
            "Rounds of the data plane's loop.",
            d.rounds,
        );
        self.counter(
            "data_plane_busy_rounds",
            "Rounds that found work.",
            d.busy_rounds,
        );
        self.counter("data_plane_sleeps", "Times the data plane slept.", d.sleeps);
        self.counter(
            "data_plane_commands",
            "Control-plane commands the data plane applied.",
            d.commands,
        );
        let c = &st.control;
        self.gauge(
            "control_open_connections",
            "Control connections open now.",
            c.open,
        );
        for (name, help, v) in [
            (
                "control_accepted",
                "Control connections accepted.",
                c.accepted,
            ),
            (
                "control_refused_full",
                "Control connections turned away at --max-connections.",
                c.refused_full,
            ),
            (
                "control_hello_timeouts",
                "Control connections closed for sending no Hello in time.",
                c.hello_timeouts,
            ),
            (
                "control_fd_exhausted",
                "Times accept failed for want of file descriptors.",
                c.fd_exhausted,
            ),
            (
                "control_bad_messages",
                "Control messages refused as too large, malformed or out of place.",
                c.bad_messages,
            ),
            ("control_attached", "Applications attached.", c.attached),
            (
                "control_detached",
                "Applications gone, their buffers taken back.",
                c.detached,
            ),
        ] {
            self.counter(name, help, v);
        }
    }

    fn apps(&mut self, st: &ServerStats) {
        self.gauge("apps", "Applications attached now.", st.apps_total as u64);
        let label = |a: &shmnet_io::server::AppStats| -> Labels {
            vec![
                ("app", a.id.to_string()),
                ("pid", a.pid.to_string()),
                ("uid", a.uid.to_string()),
                ("transport", a.transport.clone()),
            ]
        };
        let by_app = |f: fn(&shmnet_io::server::AppStats) -> u64| {
            st.apps.iter().map(|a| (label(a), f(a))).collect::<Vec<_>>()
        };
        self.gauges(
            "app_sockets",
            "Sockets an application has open.",
            by_app(|a| a.sockets as u64),
        );
        self.gauges(
            "app_holding_chains",
            "Chains delivered to an application and not yet returned.",
            by_app(|a| a.holding as u64),
        );
        self.gauges(
            "app_parked_sends",
            "An application's TCP sends waiting for room in their connection's send buffer.",
            by_app(|a| a.counters.tcp_parked),
        );
        self.gauges(
            "app_registered_bytes",
            "Bytes of the regions an application registered.",
            by_app(|a| a.registered_bytes),
        );
        for (name, help, f) in [
            (
                "app_delivered",
                "Messages delivered to an application.",
                (|a| a.counters.delivered) as fn(&shmnet_io::server::AppStats) -> u64,
            ),
            ("app_returned", "Chains an application gave back.", |a| {
                a.counters.returned
            }),
            (
                "app_bad_returns",
                "Returns refused (a chain the application was not holding).",
                |a| a.counters.bad_returns,
            ),
            ("app_sent", "Datagrams an application sent.", |a| {
                a.counters.sent
            }),
            ("app_bad_sends", "Sends refused.", |a| a.counters.bad_sends),
            (
                "app_send_misses",
                "Sends by handle that missed in the lookup cache.",
                |a| a.counters.send_misses,
            ),
            (
                "app_recv_misses",
                "Datagrams whose posted buffer missed in the lookup cache.",
                |a| a.counters.recv_misses,
            ),
            ("app_bad_posts", "Posted receive buffers refused.", |a| {
                a.counters.bad_posts
            }),
            (
                "app_recv_dropped",
                "Datagrams dropped because their posted buffer missed.",
                |a| a.counters.recv_dropped,
            ),
            ("app_wakeups", "Wake-ups sent to an application.", |a| {
                a.counters.wakeups
            }),
            ("app_tcp_bad_ops", "TCP operations refused.", |a| {
                a.counters.tcp_bad_ops
            }),
        ] {
            self.counters(name, help, by_app(f));
        }
    }

    fn handles(&mut self, st: &ServerStats) {
        let r = &st.regions;
        self.gauge(
            "regions",
            "Registered regions (seed 004's table).",
            r.regions,
        );
        self.gauge("regions_bytes", "Bytes of the registered regions.", r.bytes);
        self.gauge(
            "regions_pinned_pages",
            "Pages pinned for the registered regions.",
            r.pinned_pages,
        );
        self.counter("regions_refused", "Registrations refused.", r.refused);
        let l = &st.lookup;
        let access = |v: [u64; 2]| {
            [
                (vec![("access", "read".to_owned())], v[0]),
                (vec![("access", "write".to_owned())], v[1]),
            ]
        };
        self.counters(
            "lookup_hits",
            "Lookup-cache line lookups that hit.",
            access(l.hits),
        );
        self.counters(
            "lookup_misses",
            "Lookup-cache line lookups that missed.",
            access(l.misses),
        );
        self.counter("lookup_fills", "Lines the miss thread installed.", l.fills);
        self.counter(
            "lookup_evictions",
            "Lines evicted from the lookup cache.",
            l.evictions,
        );
        self.counters(
            "lookup_refused",
            "Handles the lookup cache refused, by reason.",
            ["bad_range", "unknown_region", "out_of_bounds", "forbidden"]
                .into_iter()
                .zip(l.refused)
                .map(|(why, v)| (vec![("reason", why.to_owned())], v)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_renders_counters_and_gauges_by_their_types() {
        let mut st = ServerStats::default();
        st.stack.rx_frames = 5;
        st.tcp_memory.connections = 3;
        st.uptime_s = 1.5;
        let text = render(&st);
        assert!(
            text.contains("# TYPE shmnet_stack_rx_frames counter"),
            "{text}"
        );
        assert!(text.contains("shmnet_stack_rx_frames_total 5"), "{text}");
        assert!(
            text.contains("# TYPE shmnet_tcp_connections gauge"),
            "{text}"
        );
        assert!(text.contains("shmnet_tcp_connections 3"), "{text}");
        assert!(text.contains("shmnet_uptime_seconds 1.5"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        // Every series' name is registered once.
        let mut types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        let n = types.len();
        types.sort_unstable();
        types.dedup();
        assert_eq!(types.len(), n, "a metric registered twice");
    }
}
