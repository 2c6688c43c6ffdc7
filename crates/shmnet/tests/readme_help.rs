//! Every `shmnet … --help` that README.md's table names runs, succeeds and teaches: the
//! README stays the one source (the commands are read from it when the test runs), and a
//! subcommand renamed or hidden without the README following fails here.

use std::process::Command;

/// The `shmnet … --help` commands in backticks in `readme`, as argument lists.
fn help_commands(readme: &str) -> Vec<Vec<String>> {
    let mut found: Vec<Vec<String>> = readme
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|code| code.starts_with("shmnet ") && code.ends_with(" --help"))
        .map(|code| code.split_whitespace().skip(1).map(String::from).collect())
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_help_the_readme_names_works() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let commands = help_commands(&readme);
    assert!(
        commands.len() >= 4 && commands.iter().any(|c| c[0] == "driver"),
        "the README no longer names `shmnet driver --help`: {commands:?}"
    );
    for args in commands {
        let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
            .args(&args)
            .output()
            .expect("run shmnet");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "shmnet {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("Usage: shmnet") && text.lines().count() > 5,
            "shmnet {args:?} does not teach much:\n{text}"
        );
    }
}
