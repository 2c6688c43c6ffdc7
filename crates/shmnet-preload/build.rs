//! Compiles the variadic `execl`, `execle` and `execlp` (src/exec_variadic.c): stable Rust
//! can neither define nor call a variadic function.

fn main() {
    println!("cargo:rerun-if-changed=src/exec_variadic.c");
    cc::Build::new()
        .file("src/exec_variadic.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("shmnet_exec_variadic");
}
