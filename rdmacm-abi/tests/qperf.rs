//! Debian's unmodified qperf (0.4.11) over this project's librdmacm.so.1
//! and libibverbs.so.1: a server and a client as two processes on
//! 127.0.190.1 and 127.0.190.2, every RC test of qperf's RDMA list with
//! `-cm1` (its connections made by the RDMA CM), one second each.
//!
//! qperf's server forks a child per test, which opens the device, binds
//! an RDMA CM ID to port 0, sends that port to the client (before it
//! listens: qperf 0.4.11) and ends the test with SIGALRM. So this covers
//! the port picked at bind time, a REQ that arrives between bind and
//! listen, and `ibv_get_cq_event` returning EINTR (see docs/rdma-cm.md).
//! The UC and UD tests address without a GRH, which no RoCE device takes.

mod common;

use common::*;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// qperf's RDMA tests that can run on RoCE (RC, through the RDMA CM).
const TESTS: &[&str] = &[
    "rc_bw",
    "rc_bi_bw",
    "rc_lat",
    "rc_rdma_read_bw",
    "rc_rdma_read_lat",
    "rc_rdma_write_bw",
    "rc_rdma_write_lat",
    "rc_rdma_write_poll_lat",
    "rc_compare_swap_mr",
    "rc_fetch_add_mr",
    "ver_rc_compare_swap",
    "ver_rc_fetch_add",
];

/// A TCP port nobody listens on now, for qperf's control connection (its
/// default, 19765, may be taken by a qperf server of someone else).
fn free_tcp_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a TCP port");
    l.local_addr().expect("its address").port()
}

/// The last `n` lines of a program's stdout and stderr.
fn tail(o: &Output, n: usize) -> String {
    let mut s = String::new();
    for (name, text) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let text = String::from_utf8_lossy(text);
        let lines: Vec<&str> = text.lines().collect();
        s.push_str(&format!("--- {name} (last {n} lines)\n"));
        for l in &lines[lines.len().saturating_sub(n)..] {
            s.push_str(l);
            s.push('\n');
        }
    }
    s
}

#[test]
fn qperf_rc_tests_with_the_rdma_cm() {
    let Some(_) = need("qperf", "qperf") else { return };
    let l = launcher();
    let port = free_tcp_port().to_string();
    let srv_args = ["qperf", "-lp", &port];
    let mut cli_args = vec!["qperf", "-cm1", "-t", "1", "-lp", &port, "127.0.190.1"];
    cli_args.extend_from_slice(TESTS);
    let server_cmd = format!("softroce-run --device rxe0=127.0.190.1 -- {}", srv_args.join(" "));
    let client_cmd = format!("softroce-run --device rxe1=127.0.190.2 -- {}", cli_args.join(" "));

    let mut srv = over_library(&l, "rxe0=127.0.190.1", &srv_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the qperf server starts");
    // The server is up once its control port listens.
    let start = Instant::now();
    let port_n: u16 = port.parse().expect("a port");
    let listening = |p: u16| {
        let hex = format!(":{p:04X}");
        std::fs::read_to_string("/proc/net/tcp").unwrap_or_default().lines().any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3 && c[1].ends_with(&hex) && c[3] == "0A"
        })
    };
    while !listening(port_n) && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // About 2 s a test here; a hang is cut at 120 s.
    let cli = over_library(&l, "rxe1=127.0.190.2", &cli_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the qperf client starts");
    let (c, in_time) = wait(cli, Duration::from_secs(120));
    // The server runs until killed (qperf's servers serve forever).
    let _ = srv.kill();
    let s = srv.wait_with_output().expect("the server's output");

    let out = String::from_utf8_lossy(&c.stdout).into_owned();
    let report = || {
        format!(
            "qperf failed\nserver: {server_cmd}\n{}\nclient: {client_cmd}\nstatus {:?}, in time: {in_time}\n{}",
            tail(&s, 20),
            c.status,
            tail(&c, 40)
        )
    };
    assert!(in_time && c.status.success(), "{}", report());
    for bad in ["failed", "unexpected", "error", "rejected", "timed out"] {
        assert!(!out.to_lowercase().contains(bad), "{bad:?} in the output\n{}", report());
    }
    // Each test printed its name and a figure.
    let lines: Vec<&str> = out.lines().collect();
    for t in TESTS {
        let at = lines.iter().position(|l| l.trim_end() == format!("{t}:"));
        let figure = at.and_then(|i| lines.get(i + 1)).map(|l| l.trim_start());
        assert!(
            figure.is_some_and(|f| ["bw", "latency", "msg_rate"].iter().any(|k| f.starts_with(k))),
            "{t}: no result line\n{}",
            report()
        );
    }
    eprintln!("{out}");
}
