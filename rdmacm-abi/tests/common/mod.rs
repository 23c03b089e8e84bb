//! What the rdmacm-abi tests share: the libraries of this build, the
//! launcher and the examples (built on demand, as the root tests build
//! theirs), skipping when a Debian binary is absent, and running a server
//! and a client as two processes.

#![allow(dead_code, unused_imports)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
pub use testkit::{need, show, wait};

/// The directory of the test program: `cargo test` leaves this build's
/// cdylibs there (`deps/`), libibverbs_abi.so as a dependency's and
/// librdmacm_abi.so as this package's.
pub fn deps() -> PathBuf {
    let exe = std::env::current_exe().expect("the test program's path");
    exe.parent().expect("a directory").to_path_buf()
}

/// `target/<profile>`.
fn profile_dir() -> PathBuf {
    let d = deps();
    if d.ends_with("deps") {
        d.parent().expect("target/<profile>").to_path_buf()
    } else {
        d
    }
}

pub fn libibverbs() -> PathBuf {
    testkit::beside_test("libibverbs_abi.so")
}

pub fn librdmacm() -> PathBuf {
    testkit::beside_test("librdmacm_abi.so")
}

fn cargo_build(args: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.arg("build").arg("--quiet").args(args).current_dir(root);
    if profile_dir().ends_with("release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().expect("cargo runs").success(), "cargo build {args:?} failed");
}

/// softroce-run, built for this profile.
pub fn launcher() -> PathBuf {
    cargo_build(&["-p", "ibverbs-abi", "--bin", "softroce-run"]);
    profile_dir().join("softroce-run")
}

/// One of the root package's examples (rping, ucmatose, udaddy), built.
pub fn example(name: &str) -> PathBuf {
    cargo_build(&["-p", "softroce", "--example", name]);
    profile_dir().join("examples").join(name)
}

/// `args` under softroce-run with one device, `--device dev`, and this
/// build's libibverbs.so.1 and librdmacm.so.1.
pub fn over_library(launcher: &Path, dev: &str, args: &[&str]) -> Command {
    let mut c = Command::new(launcher);
    c.env("SOFTROCE_LIBRARY", libibverbs())
        .env("SOFTROCE_RDMACM_LIBRARY", librdmacm())
        .env_remove("SOFTROCE_LOG")
        .args(["--device", dev, "--"])
        .args(args);
    c
}

/// An example (or any program) run directly.
pub fn direct(program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.args(args);
    c
}

pub fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the program starts")
}

/// Whether a UDP socket is bound to `ip`:4791 (from /proc/net/udp): the
/// device of a server is open, so its CM ID is bound.
pub fn roce_bound(ip: [u8; 4]) -> bool {
    let want = format!("{:02X}{:02X}{:02X}{:02X}:12B7", ip[3], ip[2], ip[1], ip[0]);
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// Runs a server (first) and a client, the client once the server's device
/// at `server_ip` is up (and a moment for its listen). Returns both outputs.
pub fn pair(server: Command, client: Command, server_ip: [u8; 4], limit: Duration) -> (Output, Output) {
    let (mut server, mut client) = (Some(server), Some(client));
    pair_retrying(
        move || server.take().expect("one server"),
        move || client.take().expect("one client"),
        server_ip,
        limit,
        |_| false,
    )
}

/// How many times [`pair_retrying`] starts a pair at most: on a busy
/// two-core machine perftest's ib_send_lat lost its race (see
/// perftest_rdma_cm.rs) in 4 of 6 traced runs, and 5 times in a row twice
/// in 20 test runs; at 2 in 3, twelve attempts all lose 0.8% of the time.
pub const PAIR_ATTEMPTS: usize = 12;

/// [`pair`], but when the client failed in a way `too_early` says means it
/// came before the server listened, both are started again (a new server
/// too: the old one may be past its first listen, waiting for a
/// connection of its protocol's later steps that no new client would
/// make), up to [`PAIR_ATTEMPTS`] times. Each such attempt is printed.
pub fn pair_retrying(
    mut server: impl FnMut() -> Command,
    mut client: impl FnMut() -> Command,
    server_ip: [u8; 4],
    limit: Duration,
    too_early: impl Fn(&Output) -> bool,
) -> (Output, Output) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut srv = spawn(server());
        let start = Instant::now();
        while !roce_bound(server_ip) && start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        let (c, c_ok) = wait(spawn(client()), limit);
        if attempt < PAIR_ATTEMPTS && c_ok && !c.status.success() && too_early(&c) {
            let _ = srv.kill();
            let _ = srv.wait();
            eprintln!(
                "attempt {attempt} at {}: the client came before the server listened; a new pair\n{}",
                std::net::Ipv4Addr::from(server_ip),
                String::from_utf8_lossy(&c.stderr)
            );
            continue;
        }
        let (s, s_ok) = wait(srv, limit);
        assert!(c_ok && s_ok, "timed out (client {c_ok}, server {s_ok})\n{}\n{}", show(&s), show(&c));
        return (s, c);
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The lines of `o`'s stdout that start with `prefix`.
pub fn count(o: &Output, prefix: &str) -> usize {
    stdout(o).lines().filter(|l| l.starts_with(prefix)).count()
}

/// A fresh directory `rdmacm-abi-TAG-PID` holding `libibverbs.so(.1)` and
/// `librdmacm.so(.1)` links to this build's libraries, for compiling and
/// running C programs against them.
pub fn link_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rdmacm-abi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make a temporary directory");
    for (n, lib) in [
        ("libibverbs.so.1", libibverbs()),
        ("libibverbs.so", libibverbs()),
        ("librdmacm.so.1", librdmacm()),
        ("librdmacm.so", librdmacm()),
    ] {
        std::os::unix::fs::symlink(lib, dir.join(n)).expect("link the library");
    }
    dir
}

/// Compiles `src` as `dir/NAME` against the system's headers and the
/// libraries linked in `dir` (with `libs`); asserts that cc succeeded,
/// saying `why` it might not have.
pub fn compile_c(dir: &Path, name: &str, src: &str, libs: &[&str], why: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).expect("write the C source");
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-Wall", "-O1", "-o"])
        .arg(&exe)
        .arg(&c)
        .arg(format!("-L{}", dir.display()))
        .args(libs)
        .output()
        .expect("run cc");
    assert!(out.status.success(), "cc failed{why}:\n{}", show(&out));
    exe
}
