//! `examples/cmtime.rs`: connection setup and teardown through the RDMA CM
//! (a server thread and the client in one process, on addresses of their
//! own) against TCP over loopback. The run itself is the check: every
//! connection of every round must reach ESTABLISHED and DISCONNECTED, and
//! the report must hold a time for each step and both rates.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn cmtime_sets_up_and_tears_down_every_connection_and_reports_each_step() {
    let pid = (std::process::id() % 200) as u8 + 20;
    let (server, client) = (format!("127.{pid}.90.1"), format!("127.{pid}.90.2"));
    let child = Command::new(common::example("cmtime"))
        .args(["-c", "20", "-r", "3", "-b", &server, "-B", &client, "-p", "7473", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cmtime");
    let out = common::wait_with_timeout(child, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "cmtime failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON object");
    assert_eq!((j["connections"].as_u64(), j["rounds"].as_u64()), (Some(20), Some(3)));
    for step in ["create_id", "resolve_addr", "resolve_route", "create_qp", "connect", "disconnect", "destroy"] {
        let s = &j["steps"][step];
        let (min, max, per) =
            (s["min_us"].as_f64().unwrap(), s["max_us"].as_f64().unwrap(), s["us_per_conn"].as_f64().unwrap());
        assert!(min >= 0.0 && min <= max && per >= 0.0, "{step}: {s}");
    }
    // A connect takes a REQ, a REP and an RTU between two threads: more
    // than nothing, and each connection's own time within the step's.
    let connect = &j["steps"]["connect"];
    assert!(connect["min_us"].as_f64().unwrap() > 0.0, "{connect}");
    assert!(connect["max_us"].as_f64().unwrap() <= connect["total_ms"].as_f64().unwrap() * 1e3 + 1.0, "{connect}");
    let (cm, tcp) = (j["cm_conns_per_s"].as_f64().unwrap(), j["tcp_conns_per_s"].as_f64().unwrap());
    assert!(cm > 0.0 && tcp > 0.0, "{j}");
    assert!((j["ratio"].as_f64().unwrap() - cm / tcp).abs() < 1e-9, "{j}");
}

#[test]
fn cmtime_to_a_server_address_it_cannot_use_fails_with_a_message() {
    // 192.0.2.1 (TEST-NET-1) is no local address: the server cannot listen.
    let out = Command::new(common::example("cmtime"))
        .args(["-c", "1", "-b", "192.0.2.1", "-p", "7474"])
        .output()
        .expect("run cmtime");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot listen on 192.0.2.1:7474"), "{err}");
}
