//! `shmnet ttcp --proto tcp` and `shmnet rr --proto tcp`: every structure's cell runs (one
//! TCP connection between two ends on this host), and its books balance — every byte the
//! sender wrote is counted by the receiver, every request has its reply. These run the real
//! commands with `--quick`; they assert behaviour, never speed.

mod common;

use common::{json as shmnet, u};
use serde_json::Value;

/// Every structure, in the order the tables list them.
const STRUCTURES: [&str; 7] = [
    "kernel",
    "ipc",
    "server",
    "server-thread",
    "server-process",
    "server-regions",
    "inline",
];

fn rows(v: &Value) -> &Vec<Value> {
    assert_eq!(v["proto"], "tcp", "{v}");
    assert_eq!(
        v["failed"].as_array().map(Vec::len),
        Some(0),
        "no cell may fail: {}",
        v["failed"]
    );
    v["rows"].as_array().expect("rows")
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn ttcp_over_tcp_runs_every_structure_and_every_byte_written_is_read() {
    let v = shmnet(&["ttcp", "--proto", "tcp", "--quick", "--json"]);
    assert_eq!(u(&v, "mtu"), 16_384, "the loopback wire's default MTU: {v}");
    let rows = rows(&v);
    for size in [8192u64, 65_536] {
        for s in STRUCTURES {
            let r = rows
                .iter()
                .find(|r| r["structure"] == s && u(r, "size") == size)
                .unwrap_or_else(|| panic!("no {s} {size} B cell in {v}"));
            assert_eq!(r["proto"], "tcp", "{r}");
            assert_eq!(r["dir"], "stream", "{r}");
            assert!(u(r, "sent") > 0, "the sender wrote something: {r}");
            assert_eq!(u(r, "received"), u(r, "sent"), "every message arrived: {r}");
            assert_eq!(u(r, "sent_bytes"), u(r, "sent") * size, "{r}");
            assert_eq!(
                u(r, "received_bytes"),
                u(r, "sent_bytes"),
                "the receiver counted every byte the sender wrote: {r}"
            );
            assert_eq!(u(r, "lost"), 0, "{r}");
            assert!(f(r, "gbit_per_s") > 0.0 && f(r, "msgs_per_s") > 0.0, "{r}");
            assert!(f(r, "cpu_s_per_msg") > 0.0, "{r}");
        }
    }
    assert_eq!(
        rows.len(),
        STRUCTURES.len() * 2,
        "one cell per structure and size"
    );
    // The kernel is the baseline of the same run: its own ratio is 1.
    for r in rows.iter().filter(|r| r["structure"] == "kernel") {
        assert!((f(r, "over_kernel") - 1.0).abs() < 1e-9, "{r}");
    }
}

/// On an Ethernet-sized wire (segments of 1,460 bytes) and with checksums on, the books
/// balance too.
#[test]
fn ttcp_over_tcp_on_an_ethernet_mtu_with_checksums_reads_every_byte() {
    let v = shmnet(&[
        "ttcp",
        "--proto",
        "tcp",
        "--quick",
        "--json",
        "--mtu",
        "1500",
        "--checksum",
        "--size",
        "65536",
        "--structure",
        "server,inline",
    ]);
    assert_eq!(u(&v, "mtu"), 1500, "{v}");
    assert_eq!(v["checksum"], true, "{v}");
    let rows = rows(&v);
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        assert!(u(r, "sent") > 0, "{r}");
        assert_eq!(u(r, "received_bytes"), u(r, "sent_bytes"), "{r}");
        assert_eq!(u(r, "lost"), 0, "{r}");
    }
}

#[test]
fn rr_over_tcp_runs_every_structure_and_every_request_has_its_reply() {
    let v = shmnet(&["rr", "--proto", "tcp", "--quick", "--json"]);
    let rows = rows(&v);
    assert_eq!(rows.len(), STRUCTURES.len(), "1 in flight by default: {v}");
    for s in STRUCTURES {
        let r = rows
            .iter()
            .find(|r| r["structure"] == s)
            .unwrap_or_else(|| panic!("no {s} cell in {v}"));
        assert_eq!(r["proto"], "tcp", "{r}");
        assert_eq!(u(r, "outstanding"), 1, "{r}");
        assert!(u(r, "sent") > 0, "{r}");
        assert_eq!(
            u(r, "received"),
            u(r, "sent"),
            "every request answered: {r}"
        );
        assert_eq!(u(r, "lost"), 0, "{r}");
        assert_eq!(u(r, "samples"), u(r, "received"), "every reply timed: {r}");
        assert!(f(r, "transactions_per_s") > 0.0, "{r}");
        let (p50, p99) = (f(r, "p50_us"), f(r, "p99_us"));
        assert!(p50 > 0.0 && p50 <= p99, "{r}");
    }
}
