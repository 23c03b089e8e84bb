//! `examples/ucmatose.rs` (RC over the RDMA CM) and `examples/udaddy.rs`
//! (UD through SIDR), server and client as two processes over loopback,
//! each on an address of its own, several connections at once; their
//! output is librdmacm's tools' output.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn addrs(n: u8) -> (String, String) {
    let pid = (std::process::id() % 200) as u8 + 20;
    (format!("127.{pid}.{}.1", 100 + n), format!("127.{pid}.{}.2", 100 + n))
}

/// Runs `name` as server (`-b server`) and client (`-b client -s server`) with `extra`.
fn pair(name: &str, n: u8, extra: &[&str]) -> (String, String) {
    let bin = common::example(name);
    let (server_ip, client_ip) = addrs(n);
    let mut sargs = vec!["-b", server_ip.as_str()];
    sargs.extend_from_slice(extra);
    let server = Command::new(&bin).args(&sargs).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut cargs = vec!["-b", client_ip.as_str(), "-s", server_ip.as_str()];
    cargs.extend_from_slice(extra);
    let client = Command::new(&bin).args(&cargs).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let c = common::wait_with_timeout(client, Duration::from_secs(60));
    let s = common::wait_with_timeout(server, Duration::from_secs(30));
    let (cout, sout) =
        (String::from_utf8_lossy(&c.stdout).into_owned(), String::from_utf8_lossy(&s.stdout).into_owned());
    assert!(c.status.success(), "client: {:?}\n{cout}\n{}", c.status, String::from_utf8_lossy(&c.stderr));
    assert!(s.status.success(), "server: {:?}\n{sout}\n{}", s.status, String::from_utf8_lossy(&s.stderr));
    (cout, sout)
}

#[test]
fn ucmatose_three_connections_both_ways() {
    let (c, s) = pair("ucmatose", 1, &["-c", "3", "-C", "20", "-S", "500"]);
    assert_eq!(
        c.lines().collect::<Vec<_>>(),
        [
            "cmatose: starting client",
            "cmatose: connecting",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "test complete",
            "return status 0"
        ]
    );
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        [
            "cmatose: starting server",
            "initiating data transfers",
            "completing sends",
            "receiving data transfers",
            "data transfers complete",
            "cmatose: disconnecting",
            "disconnected",
            "test complete",
            "return status 0"
        ]
    );
}

#[test]
fn ucmatose_migrating_its_ids_to_a_new_event_channel() {
    let (c, s) = pair("ucmatose", 4, &["-m", "-C", "5"]);
    assert!(c.contains("data transfers complete\nmigrating to new event channel\ntest complete"), "{c}");
    assert!(s.contains("migrating to new event channel\ncmatose: disconnecting\ndisconnected"), "{s}");
}

#[test]
fn udaddy_two_connections_through_sidr() {
    let (c, s) = pair("udaddy", 2, &["-c", "2", "-C", "10", "-S", "1000", "--port", "7180"]);
    assert_eq!(
        c.lines().collect::<Vec<_>>(),
        [
            "udaddy: starting client",
            "udaddy: connecting",
            "initiating data transfers",
            "receiving data transfers",
            "data transfers complete",
            "test complete",
            "return status 0"
        ]
    );
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        [
            "udaddy: starting server",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "test complete",
            "return status 0"
        ]
    );
}

#[test]
fn udaddy_to_a_port_nobody_listens_on_is_unreachable_at_once() {
    // The server's device answers the SIDR_REQ with status 1 (unsupported
    // service ID); the client reports UNREACHABLE without waiting for retries.
    let bin = common::example("udaddy");
    let (server_ip, client_ip) = addrs(3);
    let mut server = Command::new(&bin)
        .args(["-b", &server_ip, "--port", "7181"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let client = Command::new(&bin)
        .args(["-b", &client_ip, "-s", &server_ip, "--port", "7182"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::wait_with_timeout(client, Duration::from_secs(30));
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(text.contains("udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1"), "{text}");
    assert!(start.elapsed() < Duration::from_secs(5));
}
