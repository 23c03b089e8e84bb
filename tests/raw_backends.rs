//! The raw-frame backends end to end: `rdma-perf` {write,read,send,atomic}-bw
//! with `--verify` and the four ping-pongs over `--backend roce1` and
//! `--backend ib`, in one process (`--loopback`, the in-process link) and
//! between two network namespaces joined by a veth pair (root only: the
//! test makes and removes them, and skips with a message otherwise);
//! captures of each backend that tshark decodes with the expected fields
//! and no malformed frame, and that `rdma-dump --check` verifies (ICRC,
//! and VCRC for IB); and the golden captures kept in tests/fixtures/raw.

mod common;

use clap::Parser;
use common::{is_root, wait_ok, Veth};
use softroce::pingpong::{run, run_loopback, Args, Kind};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

const BACKENDS: [&str; 2] = ["roce1", "ib"];
const BW_TESTS: [&str; 4] = ["write-bw", "read-bw", "send-bw", "atomic-bw"];

fn perf_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rdma-perf")
}

fn dump_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rdma-dump")
}

/// A TCP port of its own for each run.
fn port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    21000 + (std::process::id() % 8000) as u16 + NEXT.fetch_add(1, Ordering::Relaxed) * 3
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("raw-backends-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs rdma-perf; returns its JSON report, after checking the exit status.
fn perf(args: &[&str]) -> serde_json::Value {
    let out = Command::new(perf_bin()).args(args).args(["--json", "--quiet"]).output().unwrap();
    assert!(out.status.success(), "rdma-perf {args:?}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("rdma-perf {args:?}: {e}"))
}

#[test]
fn rdma_perf_bandwidth_tests_verify_over_loopback_roce1_and_ib() {
    for backend in BACKENDS {
        for test in BW_TESTS {
            let p = port().to_string();
            let r = perf(&[test, "--loopback", "--backend", backend, "--verify", "-n", "300", "-p", &p]);
            assert_eq!(r["verified"], true, "{test} over {backend}: {r}");
            let c = &r["counters"];
            assert_eq!(c["icrc_drops"], 0, "{test} over {backend}");
            assert!(c["packets_sent"].as_u64().unwrap() >= 300, "{test} over {backend}: {c}");
            assert_eq!(c["recv_syscalls"], 0, "a frame link makes no UDP receive calls: {c}");
            assert_eq!(c["io_driver"], format!("{backend}-frames"), "the report names the backend: {c}");
        }
    }
}

fn pingpong_args(extra: &[&str]) -> Args {
    Args::parse_from(std::iter::once("pingpong").chain(extra.iter().copied()))
}

#[test]
fn the_four_pingpongs_over_loopback_roce1_and_ib() {
    for backend in BACKENDS {
        for kind in [Kind::Rc, Kind::Uc, Kind::Ud, Kind::Srq] {
            let p = port().to_string();
            let mut a = vec!["--loopback", "--backend", backend, "-n", "200", "-p", &p];
            if kind == Kind::Ud {
                a.extend(["-s", "1024"]);
            }
            if kind == Kind::Srq {
                a.extend(["-q", "4"]);
            }
            run_loopback(kind, &pingpong_args(&a)).unwrap_or_else(|e| panic!("{kind:?} over {backend}: {e}"));
        }
    }
    // Between processes a raw backend needs an interface.
    let e = run(Kind::Rc, &pingpong_args(&["--backend", "ib"])).unwrap_err().to_string();
    assert!(e.contains("needs --netdev"), "{e}");
}

fn have_tshark() -> bool {
    let found = Command::new("tshark").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    let ok = found.is_ok_and(|s| s.success());
    if !ok {
        testkit::skip("tshark is not installed (apt-get install -y tshark); the tshark checks did not run");
    }
    ok
}

fn tshark_out(args: &[&str]) -> String {
    let out = Command::new("tshark").args(args).output().unwrap();
    assert!(out.status.success(), "tshark {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// tshark's rows of `fields` for every frame of `file`, after checking
/// that it finds no malformed frame and no expert error.
fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let f = file.to_str().unwrap();
    let bad = tshark_out(&["-r", f, "-Y", "_ws.malformed || _ws.expert.severity >= 8388608"]);
    assert!(bad.trim().is_empty(), "{f}: tshark finds malformed frames or errors:\n{bad}");
    let mut args = vec!["-r", f, "-T", "fields", "-E", "separator=|"];
    for x in fields {
        args.extend(["-e", x]);
    }
    tshark_out(&args).lines().map(|l| l.split('|').map(str::to_string).collect()).collect()
}

/// `rdma-dump --check` passes; returns its summary line.
fn dump_check(file: &Path) -> String {
    let out: Output = Command::new(dump_bin()).args(["--check", "-q"]).arg(file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rdma-dump --check {}: {}\n{text}", file.display(), out.status);
    assert!(text.contains(" 0 malformed, 0 ICRC failures, 0 VCRC failures"), "{text}");
    text
}

/// Checks with tshark a capture of `backend` holding WRITEs, READs, ACKs
/// and UD SENDs: every frame decodes, with the headers each opcode has.
fn tshark_check(backend: &str, file: &Path) {
    let ib = backend == "ib";
    let fields = [
        "infiniband.lrh.dlid",
        "infiniband.lrh.slid",
        "infiniband.lrh.lnh",
        "infiniband.grh.sgid",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.reth.dmalen",
        "infiniband.aeth.msn",
        "infiniband.deth.q_key",
    ];
    let rows = tshark_fields(file, &fields);
    assert!(rows.len() > 10, "{backend}: {} frames", rows.len());
    let (mut reth, mut aeth, mut deth) = (0, 0, 0);
    for r in &rows {
        let op: u32 = r[4].parse().unwrap_or_else(|_| panic!("{backend}: a frame without a BTH opcode: {r:?}"));
        if ib {
            assert!(!r[0].is_empty() && !r[1].is_empty(), "{backend}: an LRH with DLID and SLID: {r:?}");
            assert!(r[3].is_empty(), "LID routes carry no GRH: {r:?}");
        } else {
            assert!(r[0].is_empty(), "RoCE v1 has no LRH: {r:?}");
            assert!(r[3].starts_with("fe80::"), "{backend}: a GRH with the source GID: {r:?}");
        }
        // RC WRITE First/Only and READ Request carry a RETH; ACKs and READ
        // responses First/Last/Only an AETH; UD SEND Only a DETH.
        if matches!(op, 0x06 | 0x0a | 0x0c) {
            assert!(!r[6].is_empty(), "opcode {op:#x} without its RETH: {r:?}");
            reth += 1;
        }
        if matches!(op, 0x0d | 0x0f | 0x10 | 0x11) {
            assert!(!r[7].is_empty(), "opcode {op:#x} without its AETH: {r:?}");
            aeth += 1;
        }
        if op == 0x64 {
            assert_eq!(
                u64::from_str_radix(r[8].trim_start_matches("0x"), 16),
                Ok(0x1111_1111),
                "UD SEND's DETH Q_Key: {r:?}"
            );
            deth += 1;
        }
    }
    assert!(reth > 0 && aeth > 0 && deth > 0, "{backend}: RETH {reth}, AETH {aeth}, DETH {deth}");
}

/// A capture of one backend: a WRITE and a READ test (RETH, AETH) and a
/// UD ping-pong (DETH), merged in that order.
fn make_capture(backend: &str) -> PathBuf {
    let parts = ["w", "r", "u"].map(|p| scratch(&format!("{backend}-{p}.pcap")));
    for (test, file) in [("write-bw", &parts[0]), ("read-bw", &parts[1])] {
        let p = port().to_string();
        let f = file.to_str().unwrap();
        perf(&[test, "--loopback", "--backend", backend, "-n", "4", "-s", "3000", "-m", "1024", "-p", &p, "--pcap", f]);
    }
    let p = port().to_string();
    let u = parts[2].to_str().unwrap();
    let a = ["--loopback", "--backend", backend, "-n", "2", "-s", "100", "-p", &p, "--pcap", u];
    run_loopback(Kind::Ud, &pingpong_args(&a)).unwrap();
    let merged = scratch(&format!("{backend}.pcap"));
    let mut bytes = std::fs::read(&parts[0]).unwrap();
    for f in &parts[1..] {
        bytes.extend_from_slice(&std::fs::read(f).unwrap()[24..]); // same link type: the records follow on
    }
    std::fs::write(&merged, bytes).unwrap();
    merged
}

/// The UDP backend's capture: what the engine sent and received, with the
/// Identification of received IPv4 packets solved, so every ICRC checks;
/// tshark decodes RoCE v2 on UDP 4791 with its headers.
#[test]
fn a_capture_of_the_udp_backend_checks_out() {
    let file = scratch("udp.pcap");
    let p = port().to_string();
    let f = file.to_str().unwrap();
    let r = perf(&["write-bw", "--loopback", "-n", "20", "-s", "10000", "-p", &p, "--pcap", f, "--verify"]);
    assert_eq!(r["verified"], true);
    // The server (not capturing) may send from connected sockets, with
    // Identifications the capture must solve for its ICRCs to check.
    let summary = dump_check(&file);
    assert!(summary.contains("RC_RDMA_WRITE_FIRST=20") && summary.contains("RC_ACKNOWLEDGE"), "{summary}");
    if have_tshark() {
        let rows = tshark_fields(&file, &["infiniband.bth.opcode", "infiniband.reth.dmalen", "infiniband.aeth.msn"]);
        assert!(rows.len() > 20 && rows.iter().all(|r| !r[0].is_empty()), "every frame has a BTH: {rows:?}");
        assert!(rows.iter().any(|r| !r[1].is_empty()) && rows.iter().any(|r| !r[2].is_empty()), "RETH and AETH");
    }
}

#[test]
fn tshark_decodes_a_capture_of_each_backend_and_rdma_dump_checks_its_crcs() {
    for backend in BACKENDS {
        let file = make_capture(backend);
        let summary = dump_check(&file);
        if have_tshark() {
            tshark_check(backend, &file);
        }
        // SOFTROCE_BLESS=1 makes these the golden captures.
        if std::env::var_os("SOFTROCE_BLESS").is_some() {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/raw");
            std::fs::copy(&file, dir.join(format!("{backend}.pcap"))).unwrap();
            std::fs::write(dir.join(format!("{backend}.summary")), summary.trim().to_string() + "\n").unwrap();
        }
    }
}

/// The kept captures stay readable by tshark and rdma-dump, with the same
/// packets as when they were made.
#[test]
fn golden_captures_of_each_backend() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/raw");
    let golden =
        [("roce1", include_str!("fixtures/raw/roce1.summary")), ("ib", include_str!("fixtures/raw/ib.summary"))];
    for (backend, summary) in golden {
        let file = dir.join(format!("{backend}.pcap"));
        let got = dump_check(&file);
        assert_eq!(got.trim(), summary.trim(), "{backend}: rdma-dump's summary of the golden capture");
        if have_tshark() {
            tshark_check(backend, &file);
        }
    }
}

// ------------------------------------------------------------------
// Between two network namespaces over a veth pair.

/// Runs `f` on a thread of its own inside the network namespace `ns`
/// (setns applies to the calling thread only).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on a namespace fd we hold open; it changes only this thread.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// The veth pair `tag` between two namespaces, or None (said, or failed
/// under SOFTROCE_REQUIRE_TOOLS) without root or namespaces.
fn veth_or_skip(tag: &str) -> Option<Veth> {
    if !is_root() {
        testkit::skip("the veth test needs root (network namespaces, AF_PACKET); it did not run");
        return None;
    }
    Veth::new(tag).map_err(|e| testkit::skip(format!("cannot make network namespaces here: {e}"))).ok()
}

#[test]
fn roce1_and_ib_between_two_network_namespaces_over_veth() {
    let Some(v) = veth_or_skip("p") else { return };
    // A path MTU whose frames the interface (MTU 1500) cannot carry is refused.
    let dev = v.dev[0].clone();
    let refused = in_netns(&v.ns.0[0], move || {
        use rdma_core_rs::*;
        let cfg = DeviceConfig { link: LinkKind::RoceV1, ..DeviceConfig::default() };
        let ctx = Device::on_netdev("mtu-check", &dev, cfg).unwrap().open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16, None).unwrap();
        let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
        let peer = PeerInfo { qpn: 0x99, psn: 0, gid: ctx.query_gid(0).unwrap() };
        let opts = ConnectOptions { mtu: Mtu::Mtu4096, ..ConnectOptions::default() };
        let e = qp.connect(0, &peer, &opts).unwrap_err().to_string();
        let ok = qp.connect(0, &peer, &ConnectOptions { mtu: Mtu::Mtu1024, ..opts });
        (e, ok.is_ok())
    });
    let (e, ok) = refused.join().unwrap();
    assert!(e.contains("path MTU 4096 makes") && e.contains("at most 1514"), "{e}");
    assert!(ok, "MTU 1024 fits a 1500-byte interface");
    for backend in BACKENDS {
        for test in BW_TESTS {
            let p = port().to_string();
            let mut server_args = vec![test, "--backend", backend, "--netdev", &v.dev[1], "--oob", "rdma-perf"];
            server_args.extend(["-p", &p, "--json", "--quiet", "--bind", &v.addr[1]]);
            // The server's address is the out-of-band one; the devices' GIDs come from the MACs.
            let mut client_args = vec![test, &v.addr[1], "--backend", backend, "--netdev", &v.dev[0]];
            client_args.extend(["--oob", "rdma-perf", "-p", &p, "--verify", "-n", "200", "--json", "--quiet"]);
            client_args.extend(["--bind", &v.addr[0]]);
            if backend == "ib" {
                server_args.extend(["--lid", "2"]);
                client_args.extend(["--lid", "1"]);
            }
            let server =
                v.cmd(1, perf_bin()).args(&server_args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            let mut client_out = None;
            for _ in 0..100 {
                let out = v.cmd(0, perf_bin()).args(&client_args).output().unwrap();
                if out.status.success() {
                    client_out = Some(out);
                    break;
                }
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("cannot reach the server"), "{test} over {backend}: {err}");
                std::thread::sleep(Duration::from_millis(50)); // the server is not listening yet
            }
            let client =
                client_out.unwrap_or_else(|| panic!("{test} over {backend}: the client never reached the server"));
            let r: serde_json::Value = serde_json::from_slice(&client.stdout).unwrap();
            assert_eq!(r["verified"], true, "{test} over {backend} between namespaces: {r}");
            let s: serde_json::Value = serde_json::from_str(&wait_ok(server, "server")).unwrap();
            assert_eq!(s["verified"], true, "{test} over {backend}: the server's verdict: {s}");
        }
        for kind in [Kind::Rc, Kind::Ud] {
            let p = port().to_string();
            let common = |dev: &str, lid: &str| {
                let mut a = vec!["--backend".to_string(), backend.into(), "--netdev".into(), dev.into()];
                a.extend(["-p", &p, "-n", "100", "-s", "1024"].map(String::from));
                if backend == "ib" {
                    a.extend(["--lid".to_string(), lid.to_string()]);
                }
                a
            };
            let sa = common(&v.dev[1], "7");
            let mut ca = common(&v.dev[0], "8");
            ca.push(v.addr[1].clone());
            let server = in_netns(&v.ns.0[1], move || {
                let a = Args::parse_from(std::iter::once("pingpong".to_string()).chain(sa));
                run(kind, &a).map_err(|e| e.to_string())
            });
            let client = in_netns(&v.ns.0[0], move || {
                let a = Args::parse_from(std::iter::once("pingpong".to_string()).chain(ca));
                let mut r = run(kind, &a);
                for _ in 0..100 {
                    match &r {
                        Err(e) if e.to_string().starts_with("Couldn't connect") => {
                            std::thread::sleep(Duration::from_millis(50)); // the server is not listening yet
                            r = run(kind, &a);
                        }
                        _ => break,
                    }
                }
                r.map_err(|e| e.to_string())
            });
            client.join().unwrap().unwrap_or_else(|e| panic!("{kind:?} ping-pong client over {backend}: {e}"));
            server.join().unwrap().unwrap_or_else(|e| panic!("{kind:?} ping-pong server over {backend}: {e}"));
        }
    }
}

/// Runs a server (`server` in namespace 1) and then its client (`client`
/// in namespace 0); returns both stdouts after checking both succeeded.
fn client_server(v: &Veth, what: &str, server: (&Path, Vec<String>), client: (&Path, Vec<String>)) -> (String, String) {
    let spawn = |i: usize, (bin, args): (&Path, Vec<String>)| {
        let mut c = v.cmd(i, bin.to_str().unwrap());
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let srv = spawn(1, server);
    // The server listens before a REQ comes (a REQ to a closed port is rejected).
    std::thread::sleep(Duration::from_millis(500));
    let cli = wait_ok(spawn(0, client), &format!("{what} client"));
    (cli, wait_ok(srv, &format!("{what} server")))
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// The RDMA CM over raw frames: the CM tools (rping, ucmatose, udaddy) and
/// `rdma-perf -R` with `--backend roce1|ib --netdev` between two
/// namespaces. The peers are named by their IPv4 addresses (found by ARP);
/// the CM's MADs go on QP1 in RoCE v1 or IB frames, which tshark decodes;
/// on IB the REQ's primary path carries the LRH's LIDs.
#[test]
fn the_rdma_cm_tools_between_two_network_namespaces_over_roce1_and_ib() {
    let Some(v) = veth_or_skip("c") else { return };
    let (rping, ucmatose, udaddy) = (common::example("rping"), common::example("ucmatose"), common::example("udaddy"));
    let perf = Path::new(perf_bin());
    for backend in BACKENDS {
        let on = |i: usize| strings(&["--backend", backend, "--netdev", &v.dev[i]]);
        let pcap = scratch(&format!("rping-{backend}.pcap"));
        let p = port().to_string();
        let server = [strings(&["-s", "-a", &v.addr[1], "-p", &p, "-v"]), on(1)].concat();
        let client = [strings(&["-c", "-a", &v.addr[1], "-p", &p, "-v", "-V", "-C", "20"]), on(0)].concat();
        let client = [client, strings(&["--pcap", pcap.to_str().unwrap()])].concat();
        let (c, s) = client_server(&v, &format!("rping over {backend}"), (&rping, server), (&rping, client));
        assert_eq!(c.lines().count(), 20, "{c}");
        assert!(c.lines().all(|l| l.starts_with("ping data: rdma-ping-")), "{c}");
        assert_eq!(s.lines().count(), 20, "the server's copy of each ping: {s}");

        assert!(dump_check(&pcap).contains("0 ICRC failures"), "rdma-dump --check over {backend}");
        if have_tshark() {
            check_cm_capture(backend, &pcap);
        }

        for (tool, bin) in [("ucmatose", &ucmatose), ("udaddy", &udaddy)] {
            let server = [strings(&["-b", &v.addr[1], "-c", "2", "-C", "10"]), on(1)].concat();
            let client = [strings(&["-s", &v.addr[1], "-c", "2", "-C", "10"]), on(0)].concat();
            let (c, s) = client_server(&v, &format!("{tool} over {backend}"), (bin, server), (bin, client));
            assert!(c.contains("return status 0") && s.contains("return status 0"), "{tool} over {backend}:\n{c}\n{s}");
        }

        for (test, n) in [("write-bw", "300"), ("send-lat", "200")] {
            let p = port().to_string();
            let args = |i: usize| [strings(&[test, "-R", "-p", &p, "-n", n, "--json", "--quiet"]), on(i)].concat();
            let client = [args(0), vec![v.addr[1].clone()]].concat();
            let (c, s) =
                client_server(&v, &format!("rdma-perf {test} -R over {backend}"), (perf, args(1)), (perf, client));
            let (c, s): (serde_json::Value, serde_json::Value) =
                (serde_json::from_str(&c).unwrap(), serde_json::from_str(&s).unwrap());
            assert_eq!(
                (c["iterations"].as_u64(), s["iterations"].as_u64()),
                (Some(n.parse().unwrap()), Some(n.parse().unwrap())),
                "{c} {s}"
            );
            assert_eq!(c["counters"]["retransmits"], 0, "{c}");
        }
    }
}

/// The CM handshake and teardown in a capture of `backend`, as tshark
/// reads them: REQ, REP, RTU, DREQ, DREP in RoCE v1 or IB frames; on IB
/// the REQ's primary path names the LRH's LIDs, on RoCE the permissive LID.
fn check_cm_capture(backend: &str, pcap: &Path) {
    let ethertype = if backend == "ib" { "" } else { "0x8915" };
    let rows = tshark_fields(pcap, &["eth.type", "infiniband.mad.attributeid"]);
    let attrs: Vec<&str> = rows.iter().filter(|r| !r[1].is_empty()).map(|r| r[1].as_str()).collect();
    assert_eq!(attrs, ["0x0010", "0x0013", "0x0014", "0x0015", "0x0016"], "REQ REP RTU DREQ DREP: {rows:?}");
    if !ethertype.is_empty() {
        assert!(rows.iter().all(|r| r[0] == ethertype), "RoCE v1 frames only: {rows:?}");
    }
    let req = tshark_fields(
        pcap,
        &[
            "infiniband.lrh.slid",
            "infiniband.lrh.dlid",
            "infiniband.cm.req.prim_locallid",
            "infiniband.cm.req.prim_remotelid",
        ],
    );
    let req: Vec<_> = req.into_iter().filter(|r| !r[2].is_empty()).collect();
    assert_eq!(req.len(), 1, "one REQ: {req:?}");
    if backend == "ib" {
        assert_eq!((&req[0][0], &req[0][1]), (&req[0][2], &req[0][3]), "the REQ's path names the LRH's LIDs");
        assert_ne!(req[0][0], "0");
    } else {
        assert_eq!((req[0][2].as_str(), req[0][3].as_str()), ("65535", "65535"), "RoCE: permissive LIDs");
    }
}
