//! rdma-perf end to end: every test in --loopback mode with --verify, a
//! run under injected faults, a client and a server over TCP, and the CLI's
//! contracts (JSON keys, exit codes, errors).

use rdma_core_rs::{FaultConfig, Mtu};
use softroce::perf::{self, AtomicType, Config, Exchange, Role, TestKind};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

/// Fresh loopback addresses per run, so tests in parallel never collide.
fn addresses() -> (IpAddr, IpAddr) {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let x = 10 + (std::process::id() % 200) as u8;
    (IpAddr::V4(Ipv4Addr::new(127, x, 100 + n, 1)), IpAddr::V4(Ipv4Addr::new(127, x, 100 + n, 2)))
}

fn config(test: TestKind) -> Config {
    let (c, s) = addresses();
    Config {
        test,
        size: test.default_size(),
        iters: 200,
        duration: None,
        qps: 1,
        mtu: Mtu::Mtu4096,
        gid_index: 0,
        tx_depth: 32,
        qp_timeout: 14,
        atomic: AtomicType::FetchAndAdd,
        verify: true,
        faults: FaultConfig::default(),
        bind: c,
        role: Role::Loopback { peer: s },
        port: 18515,
        exchange: Exchange::RdmaPerf,
        progress: false,
        events: false,
        spin: rdma_core_rs::DeviceConfig::DEFAULT_SPIN,
        plain_datagrams: false,
        unconnected_sends: false,
        udp_as_link: false,
        delay: Default::default(),
        shared: false,
        threads: 0,
        ack_delay: rdma_core_rs::DeviceConfig::DEFAULT_ACK_DELAY,
        io_driver: rdma_core_rs::IoDriver::Sockets,
        mem_budget: perf::budget::DEFAULT_MEM_BUDGET,
        tos: 0,
        pkey_index: 0,
        ecn_capable: true,
        cc: None,
        link: softroce::backend::LinkArgs::default(),
    }
}

#[test]
fn bandwidth_with_and_without_udp_offloads_and_latency_on_events() {
    // One engine: a device of several takes no GRO (docs/multi-core-device.md).
    let mut cfg = Config { threads: 1, ..config(TestKind::WriteBw) };
    cfg.iters = 300;
    let offloaded = perf::run(&cfg).expect("write-bw");
    assert_eq!(offloaded.verified, Some(true));
    assert!(offloaded.counters.gso_sends > 0, "64 KiB WRITEs leave as GSO runs: {:?}", offloaded.counters);
    assert!(offloaded.counters.gro_receives > 0, "and arrive as GRO datagrams: {:?}", offloaded.counters);
    assert!(offloaded.counters.payloads_by_reference > 0, "and straight from the region: {:?}", offloaded.counters);

    let plain = perf::run(&Config { plain_datagrams: true, ..config(TestKind::WriteBw) }).expect("plain write-bw");
    assert_eq!(plain.verified, Some(true));
    assert_eq!((plain.counters.gso_sends, plain.counters.gro_receives), (0, 0));

    for test in [TestKind::SendLat, TestKind::ReadLat, TestKind::AtomicLat] {
        let r = perf::run(&Config { events: true, spin: std::time::Duration::ZERO, ..config(test) })
            .unwrap_or_else(|e| panic!("{test} --events: {e}"));
        assert_eq!(r.verified, Some(true), "{test} --events");
        assert_eq!(r.iterations, 200);
    }
    let refused = perf::run(&Config { events: true, ..config(TestKind::WriteLat) }).unwrap_err();
    assert!(refused.to_string().contains("--events is for"), "{refused}");
}

/// The io_uring driver carries a bandwidth and a latency run, GSO/GRO
/// included, and reports itself (unless the environment forces a driver).
#[test]
fn io_uring_driver_carries_bandwidth_and_latency_runs() {
    let forced = std::env::var("SOFTROCE_IO_DRIVER").is_ok_and(|v| !v.is_empty());
    let io_driver = rdma_core_rs::IoDriver::IoUring;
    // One engine: a device of several shares its port, which io_uring does not serve.
    let bw = perf::run(&Config { iters: 300, io_driver, threads: 1, ..config(TestKind::WriteBw) })
        .expect("write-bw on io_uring");
    assert_eq!(bw.verified, Some(true));
    assert!(bw.counters.gso_sends > 0 && bw.counters.gro_receives > 0, "{:?}", bw.counters);
    let lat = perf::run(&Config { io_driver, ..config(TestKind::SendLat) }).expect("send-lat on io_uring");
    assert_eq!((lat.verified, lat.iterations), (Some(true), 200));
    if !forced {
        assert_eq!(bw.counters.io_driver, "io-uring", "this kernel has io_uring (Linux 6.0+)");
        // One multishot receive stays armed: far fewer receive calls than datagrams.
        assert!(
            bw.counters.recv_syscalls * 4 < bw.counters.packets_received,
            "receives without system calls: {:?}",
            bw.counters
        );
    }
}

#[test]
fn every_test_runs_in_loopback_and_verifies() {
    for test in TestKind::ALL {
        let mut cfg = config(test);
        if !test.is_atomic() && !test.is_latency() {
            cfg.size = 10_000; // several packets per message, not a multiple of the MTU
            cfg.qps = 2;
        }
        let r = perf::run(&cfg).unwrap_or_else(|e| panic!("{test}: {e}"));
        assert_eq!(r.verified, Some(true), "{test}: {:?}", r.verify_detail);
        assert_eq!(r.iterations, 200 * cfg.qps as u64, "{test}");
        assert!(r.gbps > 0.0 && r.mpps > 0.0, "{test}");
        assert_eq!(r.rtt_us_p50.is_some(), test.is_latency(), "{test}");
        assert!(r.counters.packets_sent > 0);
    }
}

#[test]
fn without_verify_bandwidth_tests_use_perftests_buffers() {
    use softroce::perf::side::layout;
    let mut cfg = config(TestKind::WriteBw);
    cfg.size = 65536;
    let l = layout(&cfg);
    assert_eq!((l.slots, l.buffers), (32, 32), "--verify: a buffer per message in flight");
    cfg.verify = false;
    // ib_write_bw: one buffer for messages over half a page, else a page's worth.
    for (size, buffers) in [(65536, 1), (2049, 1), (2048, 2), (1024, 4), (64, 32)] {
        cfg.size = size;
        assert_eq!(layout(&cfg), perf::side::Layout { slots: 32, slot_len: size, buffers }, "{size} bytes");
    }
    let mut lat = config(TestKind::WriteLat);
    lat.verify = false;
    assert_eq!(layout(&lat).buffers, layout(&lat).slots, "latency tests keep their two buffers");
    for test in [TestKind::WriteBw, TestKind::ReadBw, TestKind::SendBw, TestKind::AtomicBw] {
        // One engine: with several, the sender's thread can outrun the
        // receiver's reposted receives (an RNR NAK, then a retransmission:
        // RC's flow control, which "retransmits nothing" would not allow).
        let mut cfg = Config { threads: 1, ..config(test) };
        cfg.verify = false;
        let r = perf::run(&cfg).unwrap_or_else(|e| panic!("{test}: {e}"));
        assert_eq!((r.iterations, r.verified, r.retransmits), (200, None, 0), "{test}");
    }
}

#[test]
fn compare_and_swap_and_duration_mode() {
    let mut cfg = config(TestKind::AtomicBw);
    cfg.atomic = AtomicType::CmpAndSwap;
    let r = perf::run(&cfg).unwrap();
    assert_eq!(r.verified, Some(true), "{:?}", r.verify_detail);
    let mut cfg = config(TestKind::WriteBw);
    cfg.duration = Some(std::time::Duration::from_millis(300));
    let r = perf::run(&cfg).unwrap();
    assert_eq!(r.verified, Some(true), "{:?}", r.verify_detail);
    assert!(r.iterations > 0 && r.seconds >= 0.3, "{r:?}");
}

#[test]
fn injected_faults_are_recovered_and_every_byte_verifies() {
    for test in [TestKind::WriteBw, TestKind::ReadBw, TestKind::SendBw, TestKind::AtomicBw, TestKind::SendLat] {
        let mut cfg = config(test);
        // Enough data packets that some are lost or corrupted whatever
        // order the packets take (the injector's draws fall on ACKs or on
        // data depending on timing): with 60 iterations a SEND ping-pong
        // or an atomics run has about 120 data packets, each lost or
        // corrupted with 4%, so none is with 0.96^120, about 1 in 130. It
        // happened once. With 200: about 1 in 10^7.
        cfg.iters = 200;
        cfg.tx_depth = 8;
        if !test.is_atomic() && !test.is_latency() {
            cfg.size = 8192;
        }
        cfg.mtu = Mtu::Mtu1024;
        cfg.faults = FaultConfig { loss: 0.03, duplicate: 0.02, reorder: 0.02, corrupt: 0.01, seed: 3 };
        let r = perf::run(&cfg).unwrap_or_else(|e| panic!("{test}: {e}"));
        assert_eq!(r.verified, Some(true), "{test}: {:?}", r.verify_detail);
        assert!(r.retransmits > 0, "{test}: faults were injected but nothing was retransmitted");
    }
}

/// Runs `client` against a server made from `server` in a thread, over TCP.
fn over_tcp(mut client: Config, mut server: Config, port: u16) -> (perf::Report, perf::Report) {
    let (c, s) = addresses();
    server.bind = s;
    server.port = port;
    server.role = Role::Server;
    let srv = std::thread::spawn(move || perf::run(&server));
    client.bind = c;
    client.port = port;
    client.role = Role::Client((s, port).into());
    let mut result = perf::run(&client);
    for _ in 0..50 {
        // The server may not be listening yet.
        if result.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        result = perf::run(&client);
    }
    let r = result.unwrap_or_else(|e| panic!("{} client: {e}", client.test));
    let sr = srv.join().unwrap().unwrap_or_else(|e| panic!("{} server: {e}", client.test));
    (r, sr)
}

#[test]
fn every_test_over_perftests_exchange() {
    // The hand-shake script of each perftest binary, both sides ours: the
    // lab runs the same against perftest itself (scripts/interop.sh).
    let base = 21000 + (std::process::id() % 10000) as u16;
    for (k, test) in TestKind::ALL.into_iter().enumerate() {
        let mut cfg = config(test);
        cfg.exchange = Exchange::Perftest;
        cfg.iters = 100;
        if test == TestKind::WriteBw || test == TestKind::SendBw {
            cfg.qps = 3;
        }
        let (r, sr) = over_tcp(cfg.clone(), cfg.clone(), base + k as u16);
        assert_eq!(r.iterations, 100 * cfg.qps as u64, "{test}");
        assert_eq!(sr.iterations, 100 * cfg.qps as u64, "{test}");
        // FETCH_AND_ADD is what a perftest peer lets both sides check
        let checked = test.is_atomic().then_some(true);
        assert_eq!(
            (r.verified, sr.verified),
            (checked, checked),
            "{test}: {:?} {:?}",
            r.verify_detail,
            sr.verify_detail
        );
    }
}

#[test]
fn client_and_server_over_tcp() {
    let mut cfg = config(TestKind::SendBw);
    let port = 20000 + (std::process::id() % 1000) as u16;
    cfg.exchange = Exchange::RdmaPerf;
    let (r, sr) = over_tcp(cfg.clone(), cfg, port);
    assert_eq!((r.verified, sr.verified), (Some(true), Some(true)));
    assert_eq!((r.role.as_str(), sr.role.as_str()), ("client", "server"));
    assert_eq!(sr.iterations, 200);
}

fn rdma_perf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rdma-perf")).args(args).output().unwrap()
}

#[test]
fn the_cli_prints_the_json_contract_and_refuses_bad_options() {
    let (c, s) = addresses();
    let out = rdma_perf(&[
        "send-lat",
        "--loopback",
        "--bind",
        &c.to_string(),
        "--loopback-peer",
        &s.to_string(),
        "-n",
        "50",
        "--verify",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["test", "size", "iterations", "gbps", "mpps", "rtt_us_p50", "rtt_us_p99", "verified", "retransmits"] {
        assert!(v.get(key).is_some(), "missing key {key}: {v}");
    }
    assert_eq!(v["test"], "send-lat");
    assert_eq!(v["iterations"], 50);
    assert_eq!(v["verified"], true);
    assert!(v["rtt_us_p50"].as_f64().unwrap() > 0.0);
    assert_eq!(v["counters"]["ecn_ce_received"], 0, "nothing marks packets on loopback: {v}");

    for (args, needle) in [
        (vec!["write-bw", "--loopback", "--mtu", "1000"], "--mtu 1000"),
        (vec!["write-bw", "--loopback", "-x", "3"], "GID index 3"),
        (vec!["atomic-bw", "--loopback", "-s", "16"], "8 bytes"),
        (vec!["write-lat", "--loopback", "-q", "2"], "one QP"),
        (vec!["write-bw", "--loopback", "--loss", "2"], "probability"),
    ] {
        let out = rdma_perf(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = rdma_perf(&["bogus-test"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
}

/// `-T` reaches the wire and a CE mark reaches the engine: with the ECN
/// bits of the traffic class set to CE (as a congested switch would mark
/// them), the receiving side counts every data packet it took, and the
/// JSON's `counters.ecn_ce_received` reports them; with the default
/// traffic class nothing is marked.
#[test]
fn the_traffic_class_goes_on_the_wire_and_ce_marks_are_counted() {
    let (c, s) = addresses();
    let run = |tos: &str| {
        let args = ["write-bw", "--loopback", "--bind", &c.to_string(), "--loopback-peer", &s.to_string()];
        let out = rdma_perf(&[&args[..], &["-n", "100", "-s", "4096", "--json", "-T", tos]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["counters"]["ecn_ce_received"].as_u64().expect("the counter is in the JSON")
    };
    // DSCP 26 with CE: 104 | 3.
    assert!(run("107") >= 100, "every WRITE arrives marked CE");
    assert_eq!(run("104"), 0, "DSCP 26 with ECT(0) is not a congestion mark");
}

#[test]
fn write_lat_server_writes_first_as_perftests_does() {
    // perftest's ib_write_lat client waits for the server's first WRITE
    // before it writes (found in the lab: a server that waited for the
    // client deadlocked against it). This client does what ib_write_lat's
    // does, over perftest's exchange, with the verbs API.
    use rdma_core_rs::*;
    use softroce::perf::perftest::{Dest, Link, Script};
    use std::time::{Duration, Instant};
    let (c, s) = addresses();
    let port = 23000 + (std::process::id() % 9000) as u16;
    let mut server = config(TestKind::WriteLat);
    server.exchange = Exchange::Perftest;
    server.iters = 5;
    server.bind = s;
    server.port = port;
    server.role = Role::Server;
    let srv = std::thread::spawn(move || perf::run(&server));

    let ctx = Device::new("perftest-like", c).unwrap().open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let mr = pd.reg_mr(8192, Access::ALL).unwrap();
    let size = 2;
    let mine = Dest {
        lid: 0,
        out_reads: 1,
        qpn: qp.qp_num(),
        psn: 0x1234,
        rkey: mr.rkey(),
        vaddr: mr.addr() + 4096, // where the peer writes, as perftest's buf + BUFF_SIZE
        gid: ctx.query_gid(0).unwrap(),
        srqn: 0,
    };
    let stream = (0..100)
        .find_map(|_| {
            std::net::TcpStream::connect((s, port)).ok().or_else(|| {
                std::thread::sleep(Duration::from_millis(50));
                None
            })
        })
        .expect("the server listens");
    let mut link = Link::new(stream, true, Duration::from_secs(10)).unwrap();
    let (_, _, mtu) = link.set_up(Mtu::Mtu4096).unwrap();
    let script = Script::of(TestKind::WriteLat, 1);
    let mut idle = || ctx.progress().map(|_| ()).map_err(std::io::Error::other);
    let theirs = link.hand_shakes(&vec![mine; script.before.len()], Duration::from_secs(10), &mut idle).unwrap();
    let peer = theirs[theirs.len() - 1];
    let opts = ConnectOptions { mtu, ..ConnectOptions::default() };
    qp.connect(mine.psn, &PeerInfo { qpn: peer.qpn, psn: peer.psn, gid: peer.gid }, &opts).unwrap();
    link.hand_shakes(&vec![mine; script.after.len()], Duration::from_secs(10), &mut idle).unwrap();

    let wait_for = |marker: u8| {
        let end = Instant::now() + Duration::from_secs(10);
        let mut b = [0u8];
        loop {
            ctx.progress().unwrap();
            mr.read(4096 + size - 1, &mut b).unwrap();
            if b[0] == marker {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
        }
    };
    let mut wcs = Vec::new();
    for k in 1..=5u8 {
        // perftest's client: wait for the server's WRITE k, then write k
        assert!(wait_for(k), "the server's WRITE {k} never came (it must write first, as ib_write_lat's does)");
        mr.write(size - 1, &[k]).unwrap();
        let op = SendOp::RdmaWrite { remote_addr: peer.vaddr, rkey: peer.rkey };
        qp.post_send(&[SendWr::new(u64::from(k), op, vec![mr.sge(0, size as u32).unwrap()])]).unwrap();
        cq.wait(&mut wcs, 4, Some(Duration::from_secs(10))).unwrap();
    }
    let r = srv.join().unwrap().unwrap();
    assert_eq!(r.iterations, 5);
}

// ------------------------------------------------------------------
// Hostile out-of-band peers (issue 17, finding 6): whatever the peer on
// the TCP side channel sends, the tool answers with an error (where the
// exchange has one) and exits 1; it never aborts or panics.

/// A server process of `args` on a fresh address and port, and a TCP
/// connection to it.
fn hostile_server(args: &[&str], port: u16) -> (std::process::Child, std::net::TcpStream) {
    use std::process::Stdio;
    let (_, s) = addresses();
    let port_s = port.to_string();
    let bind = s.to_string();
    let mut all = args.to_vec();
    all.extend(["-p", &port_s, "--bind", &bind, "--quiet"]);
    let child = Command::new(env!("CARGO_BIN_EXE_rdma-perf"))
        .args(&all)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stream = (0..200)
        .find_map(|_| {
            std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok().or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(25));
                None
            })
        })
        .expect("the server listens");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    (child, stream)
}

/// Waits for the server to end; its exit code (None: a signal) and stderr.
fn server_end(mut child: std::process::Child) -> (Option<i32>, String) {
    use std::io::Read;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > end {
            child.kill().unwrap();
            panic!("the server did not exit");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (child.wait().unwrap().code(), err)
}

/// The server's answer: one JSON line.
fn answer(stream: &std::net::TcpStream) -> perf::oob::Msg {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(stream).read_line(&mut line).unwrap();
    perf::oob::Msg::parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// A TCP port that is free now: the OS picks it (a fixed range could
/// collide with the other tests' ports or with ephemeral ports in use).
fn oob_port(_k: u16) -> u16 {
    std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap().local_addr().unwrap().port()
}

#[test]
fn a_hello_asking_for_1024_qps_of_1_gib_is_refused_not_an_abort() {
    use std::io::Write;
    // The Hello of issue 17: 1 TiB, which made the server abort (SIGABRT).
    let (child, mut stream) = hostile_server(&["write-bw", "--oob", "rdma-perf"], oob_port(0));
    let hello = r#"{"Hello":{"test":"write-bw","size":1073741824,"iters":5000,"duration_ms":null,"qps":1024,"mtu":4096,"tx_depth":128,"atomic":"FETCH_AND_ADD","verify":false}}"#;
    stream.write_all(format!("{hello}\n").as_bytes()).unwrap();
    let perf::oob::Msg::Error(e) = answer(&stream) else { panic!("the server must answer with an Error") };
    assert!(e.contains("1099511627776") && e.contains("1073741824") && e.contains("budget"), "{e}");
    assert!(e.contains("1024 QP"), "it names what was asked: {e}");
    let (code, err) = server_end(child);
    assert_eq!(code, Some(1), "exits 1, not by a signal: {err}");
    assert!(err.contains("over the memory budget of 1073741824 bytes") && err.contains("--mem-budget"), "{err}");

    // The flag sets the limit: a modest Hello (8 MiB of slots) against 1 MiB.
    let (child, mut stream) = hostile_server(&["write-bw", "--oob", "rdma-perf", "--mem-budget", "1M"], oob_port(1));
    let modest = hello.replace("1073741824", "65536").replace("\"qps\":1024", "\"qps\":1").replace("false}", "true}");
    stream.write_all(format!("{modest}\n").as_bytes()).unwrap();
    let perf::oob::Msg::Error(e) = answer(&stream) else { panic!("the server must answer with an Error") };
    assert!(e.contains("8388608 bytes, over the memory budget of 1048576 bytes"), "{e}");
    let (code, err) = server_end(child);
    assert_eq!(code, Some(1), "{err}");
    // and raising it lets the big one through the checks (adopting
    // allocates nothing, so this runs anywhere)
    let perf::oob::Msg::Hello(h) = perf::oob::Msg::parse_line(hello.as_bytes()).unwrap() else { unreachable!() };
    let server = Config { mem_budget: 2 << 40, role: Role::Server, ..config(TestKind::WriteBw) };
    let adopted = perf::server::adopt(&server, &h).expect("within 2 TiB");
    assert_eq!((adopted.qps, adopted.size), (1024, 1 << 30));
    let refused = perf::server::adopt(&Config { mem_budget: perf::budget::DEFAULT_MEM_BUDGET, ..server }, &h);
    assert!(matches!(refused, Err(perf::PerfError::OverBudget(_))), "{refused:?}");
}

#[test]
fn malformed_lines_get_an_error_answer_and_exit_1() {
    use std::io::Write;
    let good = |k: &str, v: &str| {
        let mut h = serde_json::json!({"Hello":{"test":"write-bw","size":64,"iters":10,"duration_ms":null,
            "qps":1,"mtu":4096,"tx_depth":16,"atomic":"FETCH_AND_ADD","verify":false}});
        h["Hello"][k] = serde_json::from_str(v).unwrap();
        format!("{h}\n").into_bytes()
    };
    let too_long = vec![b'{'; perf::oob::MAX_LINE + 1]; // and no newline
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not json at all\n".to_vec(), "bad message"),
        (good("size", "-1"), "bad message"),
        (good("qps", "18446744073709551616"), "bad message"),
        (good("tx_depth", "\"many\""), "bad message"),
        (good("size", "1e9"), "bad message"),
        (good("test", "\"\\u001b[2Jbogus\""), "unknown test"),
        (good("qps", "100000"), "--qps must be between 1 and 1024"),
        (b"{\"Done\":{\"iters\":[1,2,3]}}\n".to_vec(), "expected a Hello"),
        (too_long, "more than 1048576 bytes"),
    ];
    for (k, (input, needle)) in cases.into_iter().enumerate() {
        let (child, mut stream) = hostile_server(&["write-bw", "--oob", "rdma-perf"], oob_port(2 + k as u16 % 6));
        stream.write_all(&input).unwrap();
        let perf::oob::Msg::Error(e) = answer(&stream) else {
            panic!("case {k}: the server must answer with an Error")
        };
        assert!(e.contains(needle), "case {k}: {e}");
        assert!(!e.contains('\u{1b}'), "case {k}: the peer's text is escaped: {e:?}");
        let (code, err) = server_end(child);
        assert_eq!(code, Some(1), "case {k}: {err}");
        assert!(err.contains(needle), "case {k}: {err}");
    }
}

#[test]
fn a_perftest_peer_whose_cycle_buffer_sizes_64_gib_is_refused_not_an_abort() {
    use std::io::{Read, Write};
    // A perftest client announcing a 1 GiB page: with 8-byte messages the
    // server would cut its region into a slot per 64-byte cache line,
    // 16 M slots per QP, 64 GiB for 64 QPs (an abort before the budget).
    let (child, mut stream) = hostile_server(&["send-bw", "-q", "64", "-s", "8"], oob_port(8));
    let mut version = [0u8; 16];
    version[..4].copy_from_slice(b"6.06");
    let mut exchange = |mine: &[u8]| {
        stream.write_all(mine).unwrap();
        let mut theirs = vec![0u8; mine.len()];
        stream.read_exact(&mut theirs).unwrap();
    };
    exchange(&version);
    exchange(&(1u32 << 30).to_be_bytes());
    exchange(&64u32.to_be_bytes());
    exchange(b"5\0");
    // perftest's exchange has no error message: the server closes
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no hand shake from a server over budget");
    let (code, err) = server_end(child);
    assert_eq!(code, Some(1), "exits 1, not by a signal: {err}");
    assert!(err.contains("the peer's page of 1073741824 bytes"), "names what the peer sent: {err}");
    assert!(err.contains("64 QP(s) x 16777216 buffer(s) of 64 bytes") && err.contains("budget"), "{err}");
}

#[test]
fn a_hostile_server_info_is_refused_by_the_client() {
    use perf::oob::{Msg, SideInfo};
    use std::io::Write;
    // What a server tells the client sizes the client's bookkeeping (its
    // targets per QP) and indexes its lists: both are checked first.
    let gid = rdma_core_rs::Gid::from_ip("127.0.0.9".parse().unwrap()).to_wire_hex();
    let info = |slots: usize, rkeys: Vec<u32>| SideInfo {
        qpns: vec![0x11],
        psns: vec![1],
        gid: gid.clone(),
        lid: 0,
        addrs: vec![0x1000],
        rkeys,
        slots,
        slot_len: 64,
        out_reads: 16,
    };
    for (k, (bad, needle)) in
        [(info(1 << 60, vec![1]), "target(s) per QP"), (info(1, vec![]), "0 rkeys")].into_iter().enumerate()
    {
        let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
            let hello = answer(&s);
            assert!(matches!(hello, Msg::Hello(_)), "{hello:?}");
            (&s).write_all(&Msg::Info(bad).to_line()).unwrap();
            (&s).write_all(&Msg::Ready.to_line()).unwrap();
            answer(&s)
        });
        let mut cfg = config(TestKind::WriteBw);
        cfg.role = Role::Client((Ipv4Addr::LOCALHOST, port).into());
        let e = perf::run(&cfg).expect_err("a hostile Info is refused");
        assert!(e.to_string().contains(needle), "case {k}: {e}");
        let Msg::Error(told) = server.join().unwrap() else { panic!("case {k}: the client answers with an Error") };
        assert!(told.contains(needle), "case {k}: {told}");
    }
}
