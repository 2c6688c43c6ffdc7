//! `shmnet bench tcp-setup --quick --json`: every cell sets up and tears down all its
//! connections (an error in any cell fails the command). Bookkeeping, never speed.

mod common;

use common::{json as shmnet, u};

#[test]
fn bench_tcp_setup_completes_every_cell() {
    let v = shmnet(&["bench", "tcp-setup", "--quick", "--json"]);
    let rows = v["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["structure"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(names, ["kernel", "server", "server-shared"], "{v}");
    for r in rows {
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(u(r, "connections"), 300, "{r}");
        assert!(r["per_s"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    }
}
