//! Test helpers shared by every crate of the workspace (a dev-dependency only; no
//! dependencies beyond `std`).
//!
//! A test that cannot run on this machine (no root, no network namespaces, one CPU, no
//! font, no transparent huge pages, …) calls [`skip`] and returns. Off CI the skip is loud:
//! a banner written straight to the process's stderr, which the test harness does not
//! capture, so it shows even though the test is reported as passed. Under `CI=true` a skip
//! is a failure: [`skip`] panics, naming the test and the reason.
//!
//! ```no_run
//! fn needs_two_cpus() {
//!     if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
//!         shmnet_testkit::skip("needs_two_cpus", "this machine has one CPU");
//!         return;
//!     }
//!     // … the test proper …
//! }
//! ```

use std::io::Write;

/// Whether this run must not skip: the environment variable `CI` is `true`.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Skips `test` because of `reason`: a loud banner on stderr, or, under `CI=true`, a panic.
///
/// The caller returns right after; everything the test would have asserted is left
/// unchecked, which is why CI does not accept it.
///
/// # Panics
///
/// When [`ci`] is true.
pub fn skip(test: &str, reason: &str) {
    // Straight to the process's stderr: the harness captures `eprintln!` of passing tests
    // (the output capture replaces the `eprintln!` sink, not file descriptor 2), and a skip
    // must be seen.
    skip_to(&mut std::io::stderr().lock(), ci(), test, reason);
}

/// [`skip`] with its sink and its reading of `CI` passed in.
fn skip_to(out: &mut dyn Write, ci: bool, test: &str, reason: &str) {
    if ci {
        panic!("{test} cannot run here: {reason} (CI=true, so this is a failure, not a skip)");
    }
    let bar = "=".repeat(78);
    let _ = writeln!(
        out,
        "\n{bar}\nSKIPPED: {test}: {reason}\n(with CI=true this is a failure)\n{bar}"
    );
}

/// Spawns `cmd`, retrying while the kernel says its program is busy (`ETXTBSY`).
///
/// A test that copies its own binary somewhere and runs the copy races every other test
/// thread of the process that forks meanwhile: the child inherits the copy's still-open
/// write descriptor until it execs, and the kernel refuses to run a file open for writing.
/// The window is a fork's length, so a few retries a few milliseconds apart close it.
pub fn spawn_copied(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CI` is process-wide; the tests that set it take turns.
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn with_ci<R>(value: Option<&str>, f: impl FnOnce() -> R) -> R {
        let _g = ENV.lock().unwrap_or_else(|e| e.into_inner());
        let old = std::env::var_os("CI");
        // SAFETY: every test of this binary that touches the environment holds `ENV`,
        // and none reads it otherwise, so no other thread reads or writes it meanwhile.
        unsafe {
            match value {
                Some(v) => std::env::set_var("CI", v),
                None => std::env::remove_var("CI"),
            }
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // SAFETY: as above.
        unsafe {
            match old {
                Some(v) => std::env::set_var("CI", v),
                None => std::env::remove_var("CI"),
            }
        }
        r.unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    #[test]
    fn ci_is_only_the_exact_word_true() {
        assert!(with_ci(Some("true"), ci));
        assert!(!with_ci(Some("1"), ci));
        assert!(!with_ci(Some("TRUE"), ci));
        assert!(!with_ci(None, ci));
    }

    /// Into a buffer, not the real stderr, so that the test's own banner is not mistaken
    /// for a real skip in the suite's output.
    #[test]
    fn a_skip_is_a_banner_off_ci_and_a_panic_under_ci() {
        let mut out = Vec::new();
        skip_to(&mut out, false, "a_test", "the reason");
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("SKIPPED: a_test: the reason"), "{text}");
        let r = std::panic::catch_unwind(|| skip_to(&mut Vec::new(), true, "a_test", "the reason"));
        let msg = r.expect_err("a skip under CI=true panics");
        let msg = msg
            .downcast_ref::<String>()
            .expect("a formatted panic message");
        assert!(
            msg.contains("a_test") && msg.contains("the reason"),
            "{msg}"
        );
    }
}
