//! `examples/rping.rs`, server and client as two processes over loopback
//! (each on an address of its own, as two hosts would be): the RDMA CM
//! handshake (REQ/REP/RTU through QP1), rping's READ/WRITE exchange, the
//! teardown (DREQ/DREP), and rping's output on both sides.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The rping example, built if needed (`cargo test --test rping` does not
/// build examples by itself).
fn rping() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", "rping"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build --example rping failed");
    let mut p = std::env::current_exe().expect("the test's path");
    p.pop(); // deps
    if p.ends_with("deps") {
        p.pop();
    }
    p.join("examples").join("rping")
}

/// Addresses of 127/8 no other test of the workspace uses, one pair per test.
fn addrs(n: u8) -> (String, String) {
    let pid = (std::process::id() % 200) as u8 + 20;
    (format!("127.{pid}.{n}.1"), format!("127.{pid}.{n}.2"))
}

fn wait_with_timeout(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait works").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "still running after {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What rping's client puts in ping `i` of `size` bytes, as printed.
fn expected_ping(i: u64, size: usize) -> String {
    let mut s = format!("rdma-ping-{i}: ");
    let mut c = b'A' + (i % 58) as u8;
    while s.len() < size - 1 {
        s.push(c as char);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    s
}

fn run_pair(n: u8, extra: &[&str], count: u64, size: usize) {
    let bin = rping();
    let (server_ip, client_ip) = addrs(n);
    let port = "7174";
    let mut sargs = vec!["-s", "-a", &server_ip, "-p", port, "-v"];
    sargs.extend_from_slice(extra);
    let server = Command::new(&bin).args(&sargs).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The server binds before it answers; a REQ that comes first is sent again.
    std::thread::sleep(Duration::from_millis(300));
    let c = count.to_string();
    let mut cargs = vec!["-c", "-I", &client_ip, "-a", &server_ip, "-p", port, "-v", "-V", "-C", &c];
    cargs.extend_from_slice(extra);
    let client = Command::new(&bin).args(&cargs).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let cout = wait_with_timeout(client, Duration::from_secs(60));
    let sout = wait_with_timeout(server, Duration::from_secs(20));
    let (cstdout, cstderr) = (String::from_utf8_lossy(&cout.stdout), String::from_utf8_lossy(&cout.stderr));
    let (sstdout, sstderr) = (String::from_utf8_lossy(&sout.stdout), String::from_utf8_lossy(&sout.stderr));
    assert!(cout.status.success(), "client failed: {:?}\n{cstdout}\n{cstderr}", cout.status);
    assert!(sout.status.success(), "server failed: {:?}\n{sstdout}\n{sstderr}", sout.status);
    let want: Vec<String> = (0..count).map(|i| format!("ping data: {}", expected_ping(i, size))).collect();
    assert_eq!(cstdout.lines().collect::<Vec<_>>(), want, "client output");
    let swant: Vec<String> = want.iter().map(|l| format!("server {l}")).collect();
    assert_eq!(sstdout.lines().collect::<Vec<_>>(), swant, "server output");
    // The server learns of the end from the client's DREQ, as rping's does.
    assert!(sstderr.contains("server DISCONNECT EVENT..."), "server stderr: {sstderr}");
    assert!(sstderr.contains("wait for RDMA_READ_ADV state 10"), "server stderr: {sstderr}");
    assert!(!cstderr.contains("mismatch"), "client stderr: {cstderr}");
}

#[test]
fn rping_client_and_server_ten_validated_pings() {
    run_pair(1, &[], 10, 64);
}

#[test]
fn rping_with_a_larger_buffer() {
    run_pair(2, &["-S", "1500"], 3, 1500);
}

#[test]
fn rping_client_without_a_server_is_rejected_with_invalid_service_id() {
    // The server's address has a device (so MADs are answered) but nobody
    // listens on the port: REJ reason 8, at once, no timeout.
    let bin = rping();
    let (server_ip, client_ip) = addrs(3);
    let server = Command::new(&bin)
        .args(["-s", "-a", &server_ip, "-p", "7175"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let client = Command::new(&bin)
        .args(["-c", "-I", &client_ip, "-a", &server_ip, "-p", "7176", "-C", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_with_timeout(client, Duration::from_secs(30));
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("cma event RDMA_CM_EVENT_REJECTED, error 8"), "stderr: {err}");
    assert!(start.elapsed() < Duration::from_secs(5), "rejected at once, not after retries");
}
