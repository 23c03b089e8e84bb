//! Helpers the root crate's tests share: root checks and network
//! namespaces that a test makes and removes itself.
#![allow(dead_code)] // each test binary uses a different subset

use std::process::Command;

#[allow(unused_imports)] // each test binary uses a different subset
pub use testkit::netns::{ip, is_root, Namespaces, Veth};

/// The example `name`, built by cargo in this test's own profile (`cargo
/// test` builds no examples for `--test NAME`).
pub fn example(name: &str) -> std::path::PathBuf {
    let mut dir = std::env::current_exe().expect("the test's path");
    dir.pop(); // the test binary
    if dir.ends_with("deps") {
        dir.pop();
    }
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "--example", name]).current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.ends_with("release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().expect("cargo runs").success(), "cargo build --example {name} failed");
    dir.join("examples").join(name)
}

/// Waits for `child` to exit, up to `limit`; kills it and panics with its
/// output after that.
pub fn wait_with_timeout(child: std::process::Child, limit: std::time::Duration) -> std::process::Output {
    wait_named(child, limit, "a child process")
}

/// [`wait_with_timeout`], naming the process (`what`) if it hangs: its
/// output so far says where it waited.
pub fn wait_named(mut child: std::process::Child, limit: std::time::Duration, what: &str) -> std::process::Output {
    let start = std::time::Instant::now();
    while child.try_wait().expect("wait works").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what}: still running after {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Waits up to 120 s for `child` (named `what`) and asserts it succeeded;
/// returns its stdout.
pub fn wait_ok(child: std::process::Child, what: &str) -> String {
    let out = wait_named(child, std::time::Duration::from_secs(120), what);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{what}: {}\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    text
}
