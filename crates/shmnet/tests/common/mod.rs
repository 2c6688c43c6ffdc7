//! What the command-line tests share: running `shmnet` one command at a time and reading its
//! JSON.

use serde_json::Value;
use std::process::{Command, Output};
use std::sync::Mutex;

/// One command at a time: each starts or pins several processes, and this machine has few
/// cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `shmnet args…` and returns what it did.
pub fn run(args: &[&str]) -> Output {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    Command::new(env!("CARGO_BIN_EXE_shmnet"))
        .args(args)
        .output()
        .expect("run shmnet")
}

/// Runs `shmnet args…` with every process it starts on CPU `cpu` alone: the child inherits
/// the affinity of the thread that spawns it, which is set for that spawn only.
#[allow(dead_code)] // each test binary compiles this module; only some run on one CPU
pub fn run_on_cpu(cpu: usize, args: &[&str]) -> Output {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut set = rustix::thread::CpuSet::new();
            set.set(cpu);
            rustix::thread::sched_setaffinity(None, &set).expect("pin the spawning thread");
            Command::new(env!("CARGO_BIN_EXE_shmnet"))
                .args(args)
                .output()
                .expect("run shmnet")
        })
        .join()
        .expect("spawning thread")
    })
}

/// Runs `shmnet args…`, which must succeed, and parses its standard output as JSON.
pub fn json(args: &[&str]) -> Value {
    let out = run(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "shmnet {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// A whole number field of `v`, which must be there.
pub fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}
