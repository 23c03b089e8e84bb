//! Helpers the root crate's tests share: root checks and network
//! namespaces that a test makes and removes itself.
#![allow(dead_code)] // each test binary uses a different subset

use std::process::Command;

/// Whether the tests run as root (namespaces, raw sockets, TUN devices).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `ip ARGS...`; the error says which command failed and why.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Network namespaces with their loopback up, removed on drop (with
/// whatever the test put in them, veth ends included).
pub struct Namespaces(pub Vec<String>);

impl Namespaces {
    /// `names`, made unique to this process.
    pub fn make(names: &[&str]) -> Result<Namespaces, String> {
        let id = std::process::id() % 100_000;
        let mut ns = Namespaces(Vec::new());
        for n in names {
            let name = format!("{n}{id}");
            ip(&["netns", "add", &name])?;
            ns.0.push(name);
            ip(&["-n", ns.0.last().expect("just pushed"), "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }

    /// A command run inside namespace `i`.
    pub fn cmd(&self, i: usize, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0[i], prog]);
        c
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// Two namespaces joined by a veth pair (10.213.x.1/24 and .2), removed
/// with the namespaces.
pub struct Veth {
    pub ns: Namespaces,
    pub dev: [String; 2],
    pub addr: [String; 2],
}

impl Veth {
    /// The pair `tag` (one letter: each test of a binary its own).
    pub fn new(tag: &str) -> Result<Veth, String> {
        let id = std::process::id() % 100_000;
        let ns = Namespaces::make(&[&format!("srr{tag}a"), &format!("srr{tag}b")])?;
        let dev = [format!("sr{tag}{id}a"), format!("sr{tag}{id}b")];
        let sub = id % 250;
        let addr = [format!("10.213.{sub}.1"), format!("10.213.{sub}.2")];
        ip(&["link", "add", &dev[0], "type", "veth", "peer", "name", &dev[1]])?;
        for i in 0..2 {
            ip(&["link", "set", &dev[i], "netns", &ns.0[i]])?;
            ip(&["-n", &ns.0[i], "addr", "add", &format!("{}/24", addr[i]), "dev", &dev[i]])?;
            ip(&["-n", &ns.0[i], "link", "set", &dev[i], "up"])?;
        }
        Ok(Veth { ns, dev, addr })
    }

    /// A command run inside namespace `i`.
    pub fn cmd(&self, i: usize, prog: &str) -> Command {
        self.ns.cmd(i, prog)
    }
}

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
