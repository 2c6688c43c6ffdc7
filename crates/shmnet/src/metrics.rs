//! `shmnet serve --metrics ADDR:PORT`: every counter of [`ServerStats`] at `/metrics`, in
//! the Prometheus exposition format.
//!
//! A thread of `shmnet serve` answers HTTP (its own, see [`spawn`]) and, at each scrape, asks the server
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
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Labels of one series.
type Labels = Vec<(&'static str, String)>;

/// Connections served at once; more are closed as soon as they are accepted.
const MAX_CONNS: usize = 16;
/// How long a client may take to send its request's head, and to take the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of a request's head read at most (a longer one is answered 431).
const MAX_HEAD: usize = 8 << 10;

/// Starts serving `/metrics` on `addr` from the server whose control socket is `socket`;
/// the thread lives as long as the process. Returns the address bound (port 0 picks one).
///
/// The HTTP side is this module's own, and as small as the one request it serves: each
/// connection gets one answer and is closed (`Connection: close`), its request's head is
/// read within [`IO_TIMEOUT`] and [`MAX_HEAD`] bytes, a body is never read, at most
/// [`MAX_CONNS`] are served at once, and accept errors (out of descriptors) are waited
/// out, never the end of the listener. tiny_http, tried first, drained a request's body
/// into a buffer of the size its `Content-Length` claimed (one request aborted the whole
/// server), kept a thread per idle connection without a timeout, answered one request at a
/// time behind a client that did not read, and ended its accept loop on `EMFILE`.
pub fn spawn(addr: SocketAddr, socket: PathBuf) -> Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr).with_context(|| {
        format!("cannot serve metrics on {addr} (in use? another --metrics address)")
    })?;
    let bound = listener
        .local_addr()
        .context("the metrics listener has no address")?;
    let socket = Arc::new(socket);
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            loop {
                let conn = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(_) => {
                        // Out of descriptors, or an aborted connection: wait, go on.
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                };
                if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONNS {
                    busy.fetch_sub(1, Ordering::AcqRel);
                    continue; // closed: a scraper retries at its next interval
                }
                let (socket, mine) = (socket.clone(), busy.clone());
                let spawned = std::thread::Builder::new()
                    .name("metrics-conn".into())
                    .spawn(move || {
                        serve_one(conn, &socket);
                        mine.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    busy.fetch_sub(1, Ordering::AcqRel);
                }
            }
        })
        .context("starting the metrics thread")?;
    Ok(bound)
}

/// Reads one request's head from `conn`, answers it, closes.
fn serve_one(mut conn: std::net::TcpStream, socket: &std::path::Path) {
    let _ = conn.set_read_timeout(Some(IO_TIMEOUT));
    let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
    let _ = conn.set_nodelay(true);
    let (status, ctype, body, head_only) = match read_head(&mut conn) {
        Head::Request(line) => answer(&line, socket),
        Head::TooLong => (431, TEXT, "request header fields too large\n".into(), false),
        Head::Gone => return,
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    // One write: no small segment waiting for an ACK.
    let _ = conn.write_all(&out);
    let _ = conn.shutdown(std::net::Shutdown::Write);
}

const TEXT: &str = "text/plain; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a connection sent first.
enum Head {
    /// The request line.
    Request(String),
    /// More than [`MAX_HEAD`] bytes without the head's end.
    TooLong,
    /// Closed, timed out, or not text.
    Gone,
}

fn read_head(conn: &mut std::net::TcpStream) -> Head {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]);
            return Head::Request(head.lines().next().unwrap_or_default().to_owned());
        }
        if buf.len() >= MAX_HEAD {
            return Head::TooLong;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The answer to a request line: status, content type, body, and whether only the head
/// goes back (`HEAD`).
fn answer(line: &str, socket: &std::path::Path) -> (u16, &'static str, String, bool) {
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return (
            400,
            TEXT,
            "a request line is METHOD PATH HTTP/1.x\n".into(),
            false,
        );
    };
    if !version.starts_with("HTTP/1.") {
        return (400, TEXT, "HTTP/1.0 or HTTP/1.1 only\n".into(), false);
    }
    let head_only = method == "HEAD";
    if target.split('?').next() != Some("/metrics") {
        return (
            404,
            TEXT,
            "shmnet serves its counters at /metrics\n".into(),
            head_only,
        );
    }
    if method != "GET" && !head_only {
        return (405, TEXT, "GET /metrics\n".into(), false);
    }
    match shmnet_io::server::query_stats(socket) {
        Ok(stats) => (200, OPENMETRICS, render(&stats), head_only),
        Err(e) => (
            503,
            TEXT,
            format!("the server did not answer: {e}\n"),
            head_only,
        ),
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
        if let Some(x) = &d.xdp {
            self.xdp(x);
        }
    }

    /// An af_xdp driver's rings and the kernel's drops by reason.
    fn xdp(&mut self, x: &shmnet_io::driver::af_xdp::XdpStats) {
        self.gauge(
            "xdp_fill_level",
            "Buffers on the AF_XDP fill ring: what the kernel can receive into now.",
            u64::from(x.fill_level),
        );
        self.gauge(
            "xdp_completions_outstanding",
            "Frames sent through AF_XDP whose buffers the kernel has not completed.",
            u64::from(x.completions_outstanding),
        );
        self.counters(
            "xdp_rx_drops",
            "Frames the kernel dropped before the AF_XDP socket, by reason.",
            [
                ("dropped", x.rx_dropped),
                ("rx_ring_full", x.rx_ring_full),
                ("fill_ring_empty", x.rx_fill_ring_empty),
                ("invalid_descriptor", x.rx_invalid_descs),
            ]
            .map(|(why, v)| (vec![("reason", why.to_owned())], v)),
        );
        self.counter(
            "xdp_tx_invalid_descriptors",
            "Frames the kernel refused to send through AF_XDP.",
            x.tx_invalid_descs,
        );
        let by_queue = |f: fn(&shmnet_io::driver::af_xdp::XdpQueueStats) -> u64| {
            x.queues
                .iter()
                .map(|q| (vec![("queue", q.queue.to_string())], f(q)))
                .collect::<Vec<_>>()
        };
        self.counters(
            "xdp_queue_rx_frames",
            "Frames taken off a device queue's AF_XDP RX ring.",
            by_queue(|q| q.rx_frames),
        );
        self.gauges(
            "xdp_queue_fill_level",
            "Buffers on a device queue's AF_XDP fill ring.",
            by_queue(|q| u64::from(q.fill_level)),
        );
        self.counters(
            "xdp_queue_rx_device_drops",
            "Frames the kernel dropped before a device queue's AF_XDP socket.",
            by_queue(|q| q.rx_device_drops),
        );
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
        let c = &st.capture;
        self.gauge(
            "captures_running",
            "shmnet captures running now.",
            c.running,
        );
        self.counter("capture_started", "shmnet captures started.", c.started);
        self.counter(
            "capture_kept",
            "Frames written into a capture's ring.",
            c.kept,
        );
        self.counter(
            "capture_lost",
            "Frames a capture matched and could not keep (its ring was full).",
            c.lost,
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
