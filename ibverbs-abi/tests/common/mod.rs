//! What the end-to-end tests share: where the library and the launcher
//! are, skipping when a Debian binary is absent, and running a server and
//! a client over the library.

#![allow(dead_code, unused_imports)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
pub use testkit::{need, show, wait};

/// The cdylib of this build: `cargo test` leaves it in `deps/`, beside
/// the test programs (the copy beside the launcher is from the last
/// `cargo build`, if any). The launcher is pointed at it too.
pub fn library() -> PathBuf {
    testkit::beside_test("libibverbs_abi.so")
}

/// The launcher cargo built for these tests.
pub fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_softroce-run"))
}

/// This profile's librdmacm_abi.so, built once per test program (cargo
/// builds it only for rdmacm-abi's tests, and softroce-run refuses to run
/// without it): the launcher is pointed at it with SOFTROCE_RDMACM_LIBRARY.
pub fn rdmacm() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = launcher().parent().expect("target/<profile>").to_path_buf();
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args(["build", "--quiet", "-p", "rdmacm-abi", "--lib"]).current_dir(root);
            if dir.ends_with("release") {
                cmd.arg("--release");
            }
            assert!(cmd.status().expect("cargo runs").success(), "cargo build -p rdmacm-abi failed");
            let lib = dir.join("librdmacm_abi.so");
            assert!(lib.is_file(), "{} is missing after the build", lib.display());
            lib
        })
        .clone()
}

/// Whether something listens on TCP `port` (from /proc/net/tcp{,6}).
pub fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3 && format!("{} ", cols[1]).ends_with(&hex) && cols[3] == "0A"
        })
    })
}

/// Starts `args` under the launcher with the given devices.
pub fn spawn(devices: &str, args: &[&str]) -> Child {
    Command::new(launcher())
        .env("SOFTROCE_LIBRARY", library())
        .env("SOFTROCE_RDMACM_LIBRARY", rdmacm())
        .args(devices.split(',').flat_map(|d| ["--device", d]))
        .arg("--")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the launcher starts")
}

/// Runs a server (first) and a client, as two processes over the library,
/// the client once the server listens on `port`. Returns both outputs.
pub fn pair(server: (&str, &[&str]), client: (&str, &[&str]), port: u16, limit: Duration) -> (Output, Output) {
    let srv = spawn(server.0, server.1);
    let start = Instant::now();
    while !listening(port) && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let cli = spawn(client.0, client.1);
    let (c, c_ok) = wait(cli, limit);
    let (s, s_ok) = wait(srv, limit);
    assert!(c_ok && s_ok, "timed out (client {c_ok}, server {s_ok})\n{}\n{}", show(&s), show(&c));
    (s, c)
}

/// A directory holding `libibverbs.so.1` and `libibverbs.so` links to the
/// library, for compiling and running C programs against it.
pub fn link_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ibverbs-abi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make a temporary directory");
    for n in ["libibverbs.so.1", "libibverbs.so"] {
        std::os::unix::fs::symlink(library(), dir.join(n)).expect("link the library");
    }
    dir
}

/// Compiles `src` with cc against the system's verbs.h and the library in
/// `dir`; returns the program's path.
pub fn compile(dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).expect("write the C source");
    let exe = dir.join(name);
    let out = Command::new("cc")
        .arg("-Wall")
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .arg(format!("-L{}", dir.display()))
        .arg("-libverbs")
        .arg("-ldl")
        .arg("-lpthread")
        .output()
        .expect("run cc");
    assert!(out.status.success(), "cc failed:\n{}", show(&out));
    exe
}

/// Compiles a C program against the system's verbs.h and runs it over the
/// library with `SOFTROCE_DEVICES` set to `devices`; its standard output,
/// once it exited 0 (asserted). `None` after a skip (no verbs.h, no cc):
/// the test then returns. The temporary directory stays when the program
/// fails, for a look.
pub fn run_c(tag: &str, devices: &str, src: &str) -> Option<String> {
    run_c_with(tag, devices, &[], src)
}

/// [`run_c`] with more of the program's environment (`env`).
pub fn run_c_with(tag: &str, devices: &str, env: &[(&str, &str)], src: &str) -> Option<String> {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        testkit::skip("/usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)");
        return None;
    }
    need("cc", "gcc")?;
    let dir = link_dir(tag);
    let exe = compile(&dir, tag, src);
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTROCE_DEVICES", devices)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run the {tag} program: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert!(out.status.success(), "{}", show(&out));
    let _ = std::fs::remove_dir_all(&dir);
    Some(text)
}

/// Checks the `NAME ret=R errno=E` lines a C program printed (its SHOW
/// macro): each call's return value, and its errno where one is given.
pub fn check_calls(text: &str, expect: &[(&str, i64, Option<i32>)]) {
    for &(name, ret, errno) in expect {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"));
        let num = |k: &str| line.split(k).nth(1).and_then(|r| r.split_whitespace().next()).and_then(|v| v.parse().ok());
        let (r, e): (i64, i64) = (num("ret=").expect("ret"), num("errno=").expect("errno"));
        assert_eq!(r, ret, "{name}: return value\n{text}");
        if let Some(want) = errno {
            assert_eq!(e, i64::from(want), "{name}: errno\n{text}");
        }
    }
}

/// Checks that every one of `lines` is in what a C program printed.
pub fn check_lines(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(text.contains(line), "expected {line:?}\n{text}");
    }
}
