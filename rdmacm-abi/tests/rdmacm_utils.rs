//! Debian's unmodified rdmacm-utils binaries (rping, ucmatose, udaddy) over
//! this project's librdmacm.so.1 and libibverbs.so.1, two processes on two
//! loopback addresses; and against this project's own examples, both ways.
//! Each test uses addresses of its own, 127.0.161.x to 127.0.172.x and
//! 127.0.179.x (the tests run in parallel, a device owns UDP port 4791 of
//! its address, and the workspace's other suites use lower ones; the
//! header test takes 127.0.173.x, the perftest ones 127.0.174-181.x, qperf
//! 127.0.190.x the synchronous-mode test 127.0.191.x, the endpoint one 127.0.192.x).

mod common;

use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// Whether an rping ended well. rdmacm-utils 44's rping has a race at
/// exit: `main` destroys the event channel without joining its CM thread,
/// which may be about to call `rdma_get_cm_event` on it again; that call
/// fails (with any librdmacm: rdma-core's reads the freed channel's fd) and
/// the thread calls `exit(-1)`. Later rdma-core wakes and joins the thread
/// first. A run that had finished (its DISCONNECT EVENT printed) and ends
/// with exit status 255 right after `perror("rdma_get_cm_event")` hit it:
/// that is rping's exit, not a failure of the run (seen once in CI).
fn rping_ended_well(o: &std::process::Output, who: &str) -> bool {
    if o.status.success() {
        return true;
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let raced = o.status.code() == Some(255)
        && err.contains("DISCONNECT EVENT...")
        && err.trim_end().lines().last().is_some_and(|l| l.starts_with("rdma_get_cm_event: "));
    if raced {
        eprintln!("{who}: rping's race at exit (its CM thread outlived the event channel); the run itself finished");
    }
    raced
}

/// rping -V: every ping's data is checked by the client (memcmp of what it
/// sent with what the server wrote back), and -v prints one line per ping.
fn check_rping(s: &std::process::Output, c: &std::process::Output, pings: usize, client_prints: bool) {
    assert!(rping_ended_well(s, "server"), "server\n{}", show(s));
    assert!(rping_ended_well(c, "client"), "client\n{}", show(c));
    for o in [s, c] {
        assert!(!stdout(o).contains("data mismatch"), "{}", show(o));
    }
    if client_prints {
        assert_eq!(count(c, "ping data: rdma-ping-"), pings, "client\n{}", show(c));
        assert!(stdout(c).contains(&format!("ping data: rdma-ping-{}: ", pings - 1)), "{}", show(c));
    }
}

#[test]
fn rping_over_the_library_both_sides() {
    let Some(_) = need("rping", "rdmacm-utils") else { return };
    let l = launcher();
    let srv = over_library(&l, "rxe0=127.0.161.1", &["rping", "-s", "-a", "127.0.161.1", "-V", "-C", "100", "-v"]);
    let cli = over_library(
        &l,
        "rxe1=127.0.161.2",
        &["rping", "-c", "-a", "127.0.161.1", "-I", "127.0.161.2", "-V", "-C", "100", "-v"],
    );
    let (s, c) = pair(srv, cli, [127, 0, 161, 1], LIMIT);
    check_rping(&s, &c, 100, true);
    assert_eq!(count(&s, "server ping data: rdma-ping-"), 100, "server\n{}", show(&s));
}

#[test]
fn rping_client_without_a_source_address() {
    // No -I: the source is the kernel's route if a device has it, else the
    // process's device (here the kernel would pick 127.0.162.1 itself).
    let Some(_) = need("rping", "rdmacm-utils") else { return };
    let l = launcher();
    let srv = over_library(&l, "rxe0=127.0.162.1", &["rping", "-s", "-a", "127.0.162.1", "-V", "-C", "10"]);
    let cli = over_library(&l, "rxe1=127.0.162.2", &["rping", "-c", "-a", "127.0.162.1", "-V", "-C", "10", "-v"]);
    let (s, c) = pair(srv, cli, [127, 0, 162, 1], LIMIT);
    check_rping(&s, &c, 10, true);
}

#[test]
fn rping_library_client_against_the_example_server() {
    let Some(_) = need("rping", "rdmacm-utils") else { return };
    let l = launcher();
    let ex = example("rping");
    let srv = direct(&ex, &["-s", "-a", "127.0.163.1", "-V", "-C", "50", "-v"]);
    let cli = over_library(
        &l,
        "rxe1=127.0.163.2",
        &["rping", "-c", "-a", "127.0.163.1", "-I", "127.0.163.2", "-V", "-C", "50", "-v"],
    );
    let (s, c) = pair(srv, cli, [127, 0, 163, 1], LIMIT);
    check_rping(&s, &c, 50, true);
    assert_eq!(count(&s, "server ping data: rdma-ping-"), 50, "example server\n{}", show(&s));
}

#[test]
fn rping_example_client_against_the_library_server() {
    let Some(_) = need("rping", "rdmacm-utils") else { return };
    let l = launcher();
    let ex = example("rping");
    let srv = over_library(&l, "rxe0=127.0.164.1", &["rping", "-s", "-a", "127.0.164.1", "-V", "-C", "50", "-v"]);
    let cli = direct(&ex, &["-c", "-a", "127.0.164.1", "-I", "127.0.164.2", "-V", "-C", "50", "-v"]);
    let (s, c) = pair(srv, cli, [127, 0, 164, 1], LIMIT);
    check_rping(&s, &c, 50, true);
    assert_eq!(count(&s, "server ping data: rdma-ping-"), 50, "library server\n{}", show(&s));
}

#[test]
fn rping_persistent_server_serves_three_clients() {
    // -P: a thread per connection, the CONNECT_REQUESTs arriving on the
    // listener's channel. The clients start 300 ms apart: Debian 12's rping
    // (rdma-core 44) can lose a request that arrives while its main thread
    // has not yet taken the previous one (fixed upstream in 2025, "rping:
    // wait for acknowledgement before processing subsequent
    // CONNECT_REQUESTs"), whatever the CM under it.
    let Some(_) = need("rping", "rdmacm-utils") else { return };
    let l = launcher();
    let srv = over_library(&l, "rxe0=127.0.179.1", &["rping", "-s", "-P", "-a", "127.0.179.1", "-V", "-S", "4096"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("server");
    let mut srv = KillOnDrop(Some(srv));
    let start = std::time::Instant::now();
    while !roce_bound([127, 0, 179, 1]) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let clients: Vec<_> = (2..5)
        .map(|h| {
            std::thread::sleep(Duration::from_millis(300));
            let dev = format!("rxe1=127.0.179.{h}");
            // 10 pings of 4 KiB: what -v prints fits the pipe until the end.
            over_library(&l, &dev, &["rping", "-c", "-a", "127.0.179.1", "-V", "-C", "10", "-S", "4096", "-v"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("client")
        })
        .collect();
    for c in clients {
        let (o, in_time) = wait(c, LIMIT);
        assert!(in_time && rping_ended_well(&o, "client"), "client\n{}", show(&o));
        assert_eq!(count(&o, "ping data: rdma-ping-"), 10, "{}", show(&o));
    }
    // The server runs until killed; it saw the three disconnects (printed
    // when its CM thread gets to them: waited for, a loaded machine).
    let mut child = srv.0.take().expect("the server");
    let stderr = testkit::Gathered::new(child.stderr.take().expect("piped"));
    stderr.until("server DISCONNECT EVENT", 3, Duration::from_secs(10));
    let _ = child.kill();
    let o = child.wait_with_output().expect("the server's output");
    let err = stderr.text();
    assert_eq!(err.matches("server DISCONNECT EVENT").count(), 3, "{}\n{err}", show(&o));
}

/// Kills the child however the test ends.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// ucmatose and udaddy end with "test complete" and "return status 0"
/// once every connection's messages came (`-c 4 -C 50`).
fn check_cmatose(s: &std::process::Output, c: &std::process::Output) {
    for (who, o) in [("server", s), ("client", c)] {
        assert!(o.status.success(), "{who}\n{}", show(o));
        let out = stdout(o);
        assert!(out.contains("data transfers complete"), "{who}\n{}", show(o));
        assert!(out.contains("return status 0"), "{who}\n{}", show(o));
    }
}

fn cmatose_pair(tool: &'static str, a: [u8; 4], lib_server: bool, lib_client: bool, extra: &[&str]) {
    let Some(_) = need(tool, "rdmacm-utils") else { return };
    let l = launcher();
    let ip = |last: u8| format!("{}.{}.{}.{}", a[0], a[1], a[2], last);
    let (sa, ca) = (ip(a[3]), ip(a[3] + 1));
    let mut sargs = vec!["-b", sa.as_str(), "-c", "4", "-C", "50"];
    let mut cargs = vec!["-s", sa.as_str(), "-b", ca.as_str(), "-c", "4", "-C", "50"];
    cargs.extend_from_slice(extra);
    let ex = if lib_server && lib_client { None } else { Some(example(tool)) };
    let side = |lib: bool, dev: String, args: &mut Vec<&str>| {
        if lib {
            args.insert(0, tool);
            over_library(&l, &dev, args)
        } else {
            direct(ex.as_ref().expect("the example"), args)
        }
    };
    let srv = side(lib_server, format!("rxe0={sa}"), &mut sargs);
    let cli = side(lib_client, format!("rxe1={ca}"), &mut cargs);
    let (s, c) = pair(srv, cli, a, LIMIT);
    check_cmatose(&s, &c);
}

#[test]
fn ucmatose_over_the_library_both_sides() {
    cmatose_pair("ucmatose", [127, 0, 165, 1], true, true, &[]);
}

#[test]
fn ucmatose_with_channel_migration() {
    // -m: the client moves its IDs to a new event channel (rdma_migrate_id).
    cmatose_pair("ucmatose", [127, 0, 166, 1], true, true, &["-m"]);
}

#[test]
fn ucmatose_library_client_against_the_example_server() {
    cmatose_pair("ucmatose", [127, 0, 167, 1], false, true, &[]);
}

#[test]
fn ucmatose_example_client_against_the_library_server() {
    cmatose_pair("ucmatose", [127, 0, 168, 1], true, false, &[]);
}

#[test]
fn udaddy_over_the_library_both_sides() {
    cmatose_pair("udaddy", [127, 0, 169, 1], true, true, &[]);
}

#[test]
fn udaddy_library_client_against_the_example_server() {
    cmatose_pair("udaddy", [127, 0, 170, 1], false, true, &[]);
}

#[test]
fn udaddy_example_client_against_the_library_server() {
    cmatose_pair("udaddy", [127, 0, 171, 1], true, false, &[]);
}

#[test]
fn a_port_nobody_listens_on_is_rejected() {
    // A server's device is up (it listens on 7471), the client asks for
    // port 9999: the peer's CM answers REJ "invalid service ID" (8), which
    // librdmacm reports as RDMA_CM_EVENT_REJECTED with status 8; for UD
    // (udaddy) a SIDR_REP with status 1 (unsupported service ID), which it
    // reports as RDMA_CM_EVENT_UNREACHABLE with status 1. Each client
    // reports it its own way and exits by itself, no crash.
    let Some(_) = need("ucmatose", "rdmacm-utils") else { return };
    let l = launcher();
    let mut srv = over_library(&l, "rxe0=127.0.172.1", &["ucmatose", "-b", "127.0.172.1", "-c", "1", "-C", "1"]);
    let srv = srv.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().expect("server");
    let _srv = KillOnDrop(Some(srv));
    let start = std::time::Instant::now();
    while !roce_bound([127, 0, 172, 1]) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let tools: [(&str, Vec<&str>, &str, i32); 3] = [
        (
            "ucmatose",
            vec!["-s", "127.0.172.1", "-b", "127.0.172.2", "-p", "9999"],
            "RDMA_CM_EVENT_REJECTED, error: 8",
            8,
        ),
        (
            "udaddy",
            vec!["-s", "127.0.172.1", "-b", "127.0.172.2", "-p", "9999"],
            "RDMA_CM_EVENT_UNREACHABLE, error: 1",
            1,
        ),
        (
            "rping",
            vec!["-c", "-a", "127.0.172.1", "-I", "127.0.172.2", "-p", "9999", "-C", "1"],
            "RDMA_CM_EVENT_REJECTED, error 8",
            255,
        ),
    ];
    for (tool, mut args, want, code) in tools {
        if need(tool, "rdmacm-utils").is_none() {
            continue;
        }
        if tool == "udaddy" {
            // udaddy's -p is the port space: its port is fixed (7174),
            // where nobody listens here either.
            args.truncate(4);
        }
        args.insert(0, tool);
        let cli = over_library(&l, "rxe1=127.0.172.2", &args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("client");
        let (o, in_time) = wait(cli, LIMIT);
        assert!(in_time, "{tool} did not exit\n{}", show(&o));
        let all = format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.code().is_some(), "{tool} died of a signal\n{}", show(&o));
        assert!(all.contains(want), "{tool}: wanted {want:?}\n{}", show(&o));
        assert_eq!(o.status.code(), Some(code), "{tool}\n{}", show(&o));
    }
}

#[test]
fn rdma_cores_cmtime_connects_and_disconnects_every_connection_over_the_libraries() {
    // rdma-core's own cmtime (rdmacm-utils) both sides: it gives
    // rdma_create_qp no PD and no CQs, which librdmacm then provides.
    let Some(_) = need("cmtime", "rdmacm-utils") else { return };
    let l = launcher();
    let mut srv = over_library(&l, "rxe0=127.0.179.1", &["cmtime", "-b", "127.0.179.1", "-p", "7495"])
        .spawn()
        .expect("start the cmtime server");
    let start = std::time::Instant::now();
    while !roce_bound([127, 0, 179, 1]) && start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let cli = over_library(
        &l,
        "rxe1=127.0.179.2",
        &["cmtime", "-s", "127.0.179.1", "-b", "127.0.179.2", "-p", "7495", "-c", "20"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("start the cmtime client");
    let (c, in_time) = wait(cli, LIMIT);
    let _ = srv.kill();
    let _ = srv.wait();
    assert!(in_time && c.status.success(), "{}", show(&c));
    let out = stdout(&c);
    // Its table: one row per step, and a connect of more than nothing (a
    // step that never completed shows a minimum of 1e9 us).
    for step in
        ["create id", "bind addr", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"]
    {
        let row = out
            .lines()
            .find(|l| l.strip_prefix(step).is_some_and(|r| r.trim_start().starts_with(':')))
            .unwrap_or_else(|| panic!("no {step} row:\n{out}"));
        let nums: Vec<f64> =
            row.split(':').nth(1).unwrap_or("").split_whitespace().filter_map(|w| w.parse().ok()).collect();
        assert_eq!(nums.len(), 4, "{row}");
        assert!(nums[2] < 1e8, "{step}: a connection never finished the step: {row}");
    }
    assert!(!out.contains("failure"), "{out}");
}

#[test]
fn rdma_server_and_rdma_client_over_endpoints() {
    // rdma_create_ep on both sides (rdma_getaddrinfo's answer; passive with
    // QP attributes kept for rdma_get_request, active with address and
    // route resolved and the QP made), then a send each way and
    // rdma_destroy_ep. Both print "rdma_<side>: end 0" only when all of it
    // succeeded.
    let Some(_) = need("rdma_server", "rdmacm-utils") else { return };
    let l = launcher();
    let srv = over_library(&l, "rxe0=127.0.192.1", &["rdma_server", "-s", "127.0.192.1", "-p", "7471"]);
    let cli = over_library(&l, "rxe1=127.0.192.2", &["rdma_client", "-s", "127.0.192.1", "-p", "7471"]);
    let (s, c) = pair(srv, cli, [127, 0, 192, 1], LIMIT);
    assert!(s.status.success() && stdout(&s).contains("rdma_server: end 0"), "server\n{}", show(&s));
    assert!(c.status.success() && stdout(&c).contains("rdma_client: end 0"), "client\n{}", show(&c));
}
