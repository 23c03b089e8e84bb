//! rdma-perf -R (perftest's --rdma_cm) between two rdma-perf processes on
//! loopback addresses: the exchange over a control connection of the RDMA
//! CM, the test QPs connected by the CM. The lab runs the same against
//! perftest's own `ib_write_bw -R` and `ib_send_lat -R`
//! (scripts/interop.sh, the "-R" rows).

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

mod common;

/// Fresh loopback addresses per run (the device of each side binds UDP
/// 4791 on its address), apart from those of tests/rdma_perf.rs.
fn addresses() -> (IpAddr, IpAddr) {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let x = 10 + (std::process::id() % 200) as u8;
    (IpAddr::V4(Ipv4Addr::new(127, x, 200 + n, 1)), IpAddr::V4(Ipv4Addr::new(127, x, 200 + n, 2)))
}

fn rdma_perf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rdma-perf"))
}

/// A server started with `args`, once it listens (its "waiting for a
/// client" line on stderr); the rest of its stderr is collected.
fn server(args: &[String]) -> (Child, std::thread::JoinHandle<String>) {
    let mut cmd = rdma_perf();
    cmd.args(args);
    server_from(cmd)
}

fn server_from(mut cmd: Command) -> (Child, std::thread::JoinHandle<String>) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("rdma-perf");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).expect("the server's stderr") == 0 {
            panic!("the server ended before it listened: {seen}");
        }
        seen.push_str(&line);
        if line.contains("waiting for a client on RDMA CM port") {
            break;
        }
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        seen + &s
    });
    (child, rest)
}

fn json(out: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(out);
    let line = text.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON in {text:?}"));
    serde_json::from_str(line).unwrap()
}

/// One test, client and server both rdma-perf -R: both reports.
fn run(test: &str, extra: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let (c, s) = addresses();
    let mut common_args: Vec<String> = [test, "-R", "--json"].iter().map(|a| a.to_string()).collect();
    common_args.extend(extra.iter().map(|a| a.to_string()));
    let srv_args = [common_args.clone(), vec!["--bind".into(), s.to_string()]].concat();
    let (srv, srv_err) = server(&srv_args);
    let cli = rdma_perf()
        .args(&common_args)
        .args(["--quiet", "--bind", &c.to_string(), &s.to_string()])
        .output()
        .expect("rdma-perf client");
    let srv_out = common::wait_with_timeout(srv, Duration::from_secs(60));
    let srv_err = srv_err.join().unwrap();
    assert!(cli.status.success(), "{test} client: {}", String::from_utf8_lossy(&cli.stderr));
    assert!(srv_out.status.success(), "{test} server: {srv_err}");
    (json(&cli.stdout), json(&srv_out.stdout))
}

#[test]
fn write_bw_and_send_lat_over_the_rdma_cm() {
    // two QPs: two test connections besides the control one
    let (c, s) = run("write-bw", &["-s", "16384", "-n", "300", "-q", "2"]);
    assert_eq!((c["role"].as_str(), s["role"].as_str()), (Some("client"), Some("server")));
    assert_eq!(c["iterations"], 600, "{c}");
    assert_eq!(s["iterations"], 600, "{s}");
    assert!(c["gbps"].as_f64().unwrap() > 0.0, "{c}");
    // the CM's path MTU, whatever the exchange said
    assert_eq!(c["mtu"], 1024, "{c}");
    assert_eq!(s["mtu"], 1024, "{s}");
    // 600 WRITEs of 16 packets of 1024 bytes reached the server
    let packets = s["counters"]["packets_received"].as_u64().unwrap();
    assert!(packets >= 600 * 16, "the server took {packets} packets: {s}");

    let (c, s) = run("send-lat", &["-n", "300"]);
    assert_eq!(c["iterations"], 300, "{c}");
    assert_eq!(s["iterations"], 300, "{s}");
    assert!(c["rtt_us_p50"].as_f64().unwrap() > 0.0, "{c}");
    assert_eq!(c["size"], 2, "perftest's default");
}

/// IPv6 GIDs, in a namespace of its own with two addresses on its
/// loopback (perftest 4.5's -R is IPv4-only, so the lab cannot check it).
#[test]
fn write_bw_over_the_rdma_cm_on_ipv6() {
    if !common::is_root() {
        testkit::skip("needs root (a network namespace with IPv6 addresses)");
        return;
    }
    let ns = common::Namespaces::make(&["perfcm6-"]).expect("a namespace");
    for a in ["fd77::1/128", "fd77::2/128"] {
        common::ip(&["-n", &ns.0[0], "addr", "add", a, "dev", "lo", "nodad"]).expect("an IPv6 address");
    }
    let exe = env!("CARGO_BIN_EXE_rdma-perf");
    let args = ["write-bw", "-R", "--json", "-s", "16384", "-n", "200"];
    let mut srv = ns.cmd(0, exe);
    srv.args(args).args(["--bind", "fd77::2"]);
    let (srv, srv_err) = server_from(srv);
    let cli = ns.cmd(0, exe).args(args).args(["--quiet", "--bind", "fd77::1", "fd77::2"]).output().unwrap();
    let srv_out = common::wait_with_timeout(srv, Duration::from_secs(60));
    let srv_err = srv_err.join().unwrap();
    assert!(cli.status.success(), "client: {}", String::from_utf8_lossy(&cli.stderr));
    assert!(srv_out.status.success(), "server: {srv_err}");
    let (c, s) = (json(&cli.stdout), json(&srv_out.stdout));
    assert_eq!((c["iterations"].as_u64(), s["iterations"].as_u64()), (Some(200), Some(200)), "{c} {s}");
    assert!(c["gbps"].as_f64().unwrap() > 0.0, "{c}");
}

#[test]
fn the_other_tests_over_the_rdma_cm() {
    for (test, extra) in [
        ("read-bw", &["-s", "8192", "-n", "200"][..]),
        ("send-bw", &["-s", "4096", "-n", "200", "-q", "2"]),
        ("write-lat", &["-n", "200"]),
        ("read-lat", &["-n", "200"]),
        ("atomic-bw", &["-n", "200", "--verify"]),
    ] {
        let (c, s) = run(test, extra);
        let qps: u64 = if extra.contains(&"-q") { 2 } else { 1 };
        assert_eq!(c["iterations"], 200 * qps, "{test}: {c}");
        assert_eq!(s["iterations"], 200 * qps, "{test}: {s}");
        assert!(c["mpps"].as_f64().unwrap() > 0.0, "{test}: {c}");
        if test == "atomic-bw" {
            // FETCH_AND_ADD returns are what a perftest peer lets one check,
            // and the server checks where its targets ended
            assert_eq!((c["verified"].as_bool(), s["verified"].as_bool()), (Some(true), Some(true)), "{c} {s}");
        }
    }
}

#[test]
fn a_client_without_a_listener_is_refused_with_rej_8_and_bad_combinations_are_errors() {
    let (c, s) = addresses();
    // a server on 18515; the client asks for 18516, where nobody listens
    let (mut srv, _err) = server(&["write-bw".into(), "-R".into(), "--bind".into(), s.to_string()]);
    let t0 = std::time::Instant::now();
    let out = rdma_perf()
        .args(["write-bw", "-R", "--quiet", "-p", "18516", "--bind", &c.to_string(), &s.to_string()])
        .output()
        .unwrap();
    let _ = srv.kill();
    let _ = srv.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("REJ 8") && err.contains("10 attempt"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "refused at once, tried 10 times: {:?}", t0.elapsed());

    for (args, needle) in [
        (vec!["write-bw", "-R", "--loopback"], "--loopback"),
        (vec!["write-bw", "-R", "--oob", "rdma-perf", "127.0.0.1"], "drop --oob rdma-perf"),
        (vec!["write-bw", "-R", "-c", "UC", "127.0.0.1"], "UC is not supported in librdmacm"),
    ] {
        let out = rdma_perf().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let help = rdma_perf().arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("--rdma_cm"), "the flag is in the help");
}
