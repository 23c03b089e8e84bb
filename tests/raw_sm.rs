//! `rdma-sm` manages the raw native-IB backend between two network
//! namespaces joined by a veth pair (root only: the test makes and removes
//! them, and skips with a message otherwise). A port agent runs on each
//! interface (`rdma-sm --agent --netdev`); before the SM has swept, a
//! device on the port refuses to open; `rdma-sm --once --backend ib
//! --netdev` then gives both ports LIDs (not the LID plan's) and makes
//! them ACTIVE; `rc_pingpong` and every rdma-perf test (bandwidth and
//! latency) with `--verify` run unchanged (no `--lid`) with those LIDs, which the LRHs
//! of a capture carry, and so does rping through the RDMA CM; partitions
//! the SM is given keep the ports apart or together; a resident SM
//! brings a port whose agent restarted back at its LID; the agents remove
//! their records when they stop.

mod common;

use common::{ip, is_root, wait_ok, Veth};
use rdma_core_rs::link::ib_port::{self, IbPortError, IbPortRecord, PortState};
use rdma_core_rs::link::{default_lid, Mac};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every test rdma-perf has.
const PERF_TESTS: [&str; 8] =
    ["write-bw", "read-bw", "send-bw", "atomic-bw", "write-lat", "read-lat", "send-lat", "atomic-lat"];
/// The interfaces' MACs: the LID plan would give them 0x0a01 and 0x0a02.
const MACS: [Mac; 2] = [[0x02, 0, 0, 0, 0x0a, 0x01], [0x02, 0, 0, 0, 0x0a, 0x02]];

fn perf_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rdma-perf")
}

/// `rdma-sm`, built in this test's profile (it is another package's binary).
fn rdma_sm_bin() -> PathBuf {
    let mut dir = std::env::current_exe().expect("the test's path");
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "-p", "rdma-fabric", "--bin", "rdma-sm"]).current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.ends_with("release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().expect("cargo runs").success(), "cargo build --bin rdma-sm failed");
    dir.join("rdma-sm")
}

/// Runs `f` on a thread of its own inside the network namespace `ns`.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on a namespace fd we hold open; it changes only this thread.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("the namespace thread")
}

/// The two port agents; stopped (SIGTERM) when dropped.
struct Agents(Vec<Child>);

impl Drop for Agents {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SAFETY: signals a child we started.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

fn record(mac: Mac) -> Option<IbPortRecord> {
    IbPortRecord::read(ib_port::port_guid(mac)).expect("a readable record")
}

/// Waits for `pred` on both records, up to 10 s.
fn wait_records(what: &str, pred: impl Fn(&Option<IbPortRecord>) -> bool) -> [Option<IbPortRecord>; 2] {
    let start = Instant::now();
    loop {
        let r = MACS.map(record);
        if r.iter().all(&pred) {
            return r;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: the records are {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a server in namespace 1 and its client in namespace 0, the client
/// again while the server is not listening yet; returns both stdouts.
fn client_server(v: &Veth, what: &str, bin: &str, server: &[String], client: &[String]) -> (String, String) {
    let srv = v.cmd(1, bin).args(server).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut client_out = None;
    for _ in 0..100 {
        let out = v.cmd(0, bin).args(client).output().unwrap();
        if out.status.success() {
            client_out = Some(String::from_utf8_lossy(&out.stdout).to_string());
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        let not_yet = ["cannot reach the server", "Couldn't connect", "RDMA_CM_EVENT_REJECTED, error 8"];
        if !not_yet.iter().any(|m| err.contains(m)) {
            let mut srv = srv;
            let _ = srv.kill();
            let _ = srv.wait();
            panic!("{what} client: {}\n{err}", out.status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let server_out = wait_ok(srv, &format!("{what} server (client: {client_out:?})"));
    let c = client_out.unwrap_or_else(|| panic!("{what}: the client never reached the server"));
    (c, server_out)
}

/// tshark's rows of `fields` for every frame of `pcap`; None (said, or a
/// failure under SOFTROCE_REQUIRE_TOOLS) without tshark.
fn tshark_rows(pcap: &Path, fields: &[&str]) -> Option<Vec<Vec<String>>> {
    let ok = Command::new("tshark").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if !ok.is_ok_and(|s| s.success()) {
        testkit::skip("tshark is not installed (apt-get install -y tshark); the capture checks did not run");
        return None;
    }
    let f = pcap.to_str().unwrap();
    let mut args = vec!["-r", f, "-T", "fields", "-E", "separator=|"];
    for x in fields {
        args.extend(["-e", x]);
    }
    let out = Command::new("tshark").args(&args).output().unwrap();
    assert!(out.status.success(), "tshark -r {f}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    Some(text.lines().map(|l| l.split('|').map(str::to_string).collect()).collect())
}

/// (SLID, DLID) of every frame of an IB capture, as tshark reads them.
fn lrh_lids(pcap: &Path) -> Option<Vec<(u16, u16)>> {
    let rows = tshark_rows(pcap, &["infiniband.lrh.slid", "infiniband.lrh.dlid"])?;
    let lid = |r: &[String], i: usize| r[i].parse().unwrap_or_else(|_| panic!("{pcap:?}: no LRH LIDs: {r:?}"));
    Some(rows.iter().map(|r| (lid(r, 0), lid(r, 1))).collect())
}

/// `rdma-dump --check` recomputes every ICRC and VCRC of `pcap` (tshark
/// shows them without checking).
fn crcs_check(pcap: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdma-dump")).args(["--check", "-q"]).arg(pcap).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rdma-dump --check {}: {text}", pcap.display());
    assert!(text.contains(" 0 malformed, 0 ICRC failures, 0 VCRC failures"), "{text}");
}

/// The SM's capture: every frame a directed-route SMP of one hop on VL15
/// to QP0 (LRH PktLen 72, permissive DLID), nothing malformed, and every
/// request (Get, Set) answered by a GetResp with its TID.
fn check_smp_capture(pcap: &Path) {
    let fields = [
        "infiniband.lrh.vl",
        "infiniband.lrh.dlid",
        "infiniband.lrh.pktlen",
        "infiniband.bth.destqp",
        "infiniband.mad.mgmtclass",
        "infiniband.smpdirected.hopcount",
        "infiniband.mad.method",
        "infiniband.mad.attributeid",
        "infiniband.mad.transactionid",
        "_ws.malformed",
    ];
    let Some(rows) = tshark_rows(pcap, &fields) else { return };
    assert!(rows.len() >= 20, "{} SMP frames", rows.len());
    for r in &rows {
        assert_eq!(&r[..6], &["0x0f", "65535", "72", "0x000000", "0x81", "0x01"], "{r:?}");
        assert!(r[9].is_empty(), "malformed: {r:?}");
    }
    let requests: Vec<&Vec<String>> = rows.iter().filter(|r| r[6] == "0x01" || r[6] == "0x02").collect();
    let answered = |tid: &str| rows.iter().any(|r| r[6] == "0x81" && r[8] == tid);
    assert!(requests.iter().all(|r| answered(&r[8])), "a request without its answer: {rows:?}");
    let attrs: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[7].as_str()).collect();
    for a in ["0x0010", "0x0011", "0x0015", "0x0016", "0x0017", "0x0018"] {
        assert!(attrs.contains(a), "attribute {a} never went on the wire: {attrs:?}");
    }
}

/// Every frame goes between the two SM-assigned LIDs, both ways.
fn assert_sm_lids(what: &str, pcap: &Path, lids: [u16; 2]) {
    crcs_check(pcap);
    let Some(rows) = lrh_lids(pcap) else { return };
    assert!(rows.len() > 10, "{what}: {} frames", rows.len());
    let fwd = (lids[0], lids[1]);
    let back = (lids[1], lids[0]);
    assert!(rows.iter().all(|r| *r == fwd || *r == back), "{what}: LRH LIDs other than the SM's {lids:?}: {rows:?}");
    assert!(rows.contains(&fwd) && rows.contains(&back), "{what}: both directions");
}

#[test]
fn rdma_sm_assigns_the_lids_the_tools_use_between_two_namespaces() {
    if !is_root() {
        testkit::skip("the rdma-sm veth test needs root (network namespaces, AF_PACKET); it did not run");
        return;
    }
    let v = match Veth::new("m") {
        Ok(v) => v,
        Err(e) => return testkit::skip(format!("cannot make network namespaces here: {e}")),
    };
    // The only test of this binary: the run directory is this process's.
    let run = std::env::temp_dir().join(format!("raw-sm-{}", std::process::id()));
    std::fs::create_dir_all(&run).unwrap();
    std::env::set_var(ib_port::RUN_DIR_ENV, &run);
    for (i, m) in MACS.iter().enumerate() {
        let mac = m.map(|b| format!("{b:02x}")).join(":");
        ip(&["-n", &v.ns.0[i], "link", "set", "dev", &v.dev[i], "address", &mac]).unwrap();
    }
    let sm = rdma_sm_bin();
    let sm = sm.to_str().unwrap();
    let log = |i: usize| std::fs::File::create(run.join(format!("agent{i}.log"))).unwrap();
    let sweep = || v.cmd(0, sm).args(["--once", "--backend", "ib", "--netdev", &v.dev[0], "--json"]).output().unwrap();
    let agent = |i: usize| {
        let mut c = v.cmd(i, sm);
        c.args(["--agent", "--netdev", &v.dev[i]]).env("RUST_LOG", "rdma_fabric=debug");
        c.stdout(Stdio::null()).stderr(log(i)).spawn().unwrap()
    };
    // The SM needs the agent of its own port, and one at the other end.
    let out = sweep();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no port agent for") && err.contains("--agent"), "{err}");
    let mut agents = Agents(vec![agent(0)]);
    let start = Instant::now();
    while record(MACS[0]).is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "agent 0 published nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = sweep();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no SMA at the other end"), "{err}");
    agents.0.push(agent(1));
    let init = wait_records("agents up", |r| r.as_ref().is_some_and(|r| r.state == PortState::Init));
    assert!(init.iter().all(|r| r.as_ref().unwrap().lid == 0), "no LID before the SM: {init:?}");

    // A port the SM has not configured: a typed error naming the interface, not a hang.
    let dev0 = v.dev[0].clone();
    let e = in_netns(&v.ns.0[0], move || {
        let cfg = rdma_core_rs::DeviceConfig { link: rdma_core_rs::LinkKind::Ib, ..Default::default() };
        rdma_core_rs::Device::on_netdev("unswept", &dev0, cfg).unwrap_err()
    });
    let rdma_core_rs::Error::Io(io) = &e else { panic!("{e}") };
    let inner = io.get_ref().and_then(|x| x.downcast_ref::<IbPortError>());
    assert!(matches!(inner, Some(IbPortError::NotActive { state: PortState::Init, .. })), "{e}");
    assert!(e.to_string().contains(&v.dev[0]) && e.to_string().contains("rdma-sm"), "{e}");

    // The sweep, from namespace 0, its SMPs captured.
    let smp_pcap = run.join("sm.pcap");
    let out = v
        .cmd(0, sm)
        .args(["--once", "--backend", "ib", "--netdev", &v.dev[0], "--json", "--pcap"])
        .arg(&smp_pcap)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rdma-sm --once: {}\n{err}", out.status);
    assert!(err.contains("SUBNET UP"), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    check_smp_capture(&smp_pcap);
    crcs_check(&smp_pcap);
    let r = MACS.map(|m| record(m).expect("a record after the sweep"));
    let lids = [r[0].lid, r[1].lid];
    for (i, rec) in r.iter().enumerate() {
        assert_eq!(rec.state, PortState::Active, "{rec:?}");
        assert_eq!(rec.sm_lid, lids[0], "the SM runs on port 0: {rec:?}");
        assert_eq!(rec.netdev, v.dev[i]);
        assert_eq!(rec.mtu, 1024, "the largest IB MTU a 1500-byte interface carries: {rec:?}");
        assert_ne!(rec.lid, default_lid(MACS[i]), "the SM's LID, not the plan's: {rec:?}");
    }
    assert_ne!(lids[0], lids[1]);
    assert_eq!(report["sm_lid"], lids[0], "{report}");
    let reported: Vec<u64> = report["lids"].as_array().unwrap().iter().map(|l| l["lid"].as_u64().unwrap()).collect();
    assert_eq!(reported.len(), 2, "{report}");
    assert!(lids.iter().all(|&l| reported.contains(&u64::from(l))), "{report} {lids:?}");

    // query_port reports what the SM set; a given LID still wins.
    let dev1 = v.dev[1].clone();
    let (attr, given) = in_netns(&v.ns.0[1], move || {
        use rdma_core_rs::{Device, DeviceConfig, LinkKind};
        let cfg = DeviceConfig { link: LinkKind::Ib, ..Default::default() };
        let ctx = Device::on_netdev("managed", &dev1, cfg.clone()).unwrap().open().unwrap();
        let given = Device::on_netdev("given", &dev1, DeviceConfig { lid: 77, ..cfg }).unwrap();
        (ctx.query_port(), given.lid())
    });
    assert_eq!((attr.lid, attr.sm_lid, attr.state), (lids[1], lids[0], PortState::Active), "{attr:?}");
    assert_eq!(attr.active_mtu, Some(rdma_core_rs::Mtu::Mtu1024));
    assert_eq!(given, 77, "--lid wins over the SM's");

    // rc_pingpong, unchanged: no --lid, each side prints the SM's LID.
    let rc = common::example("rc_pingpong");
    let p = "18515".to_string();
    let on =
        |i: usize| ["--backend", "ib", "--netdev", &v.dev[i], "-p", &p, "-n", "200", "-s", "1024"].map(String::from);
    let pcap = run.join("rc.pcap");
    let client = [on(0).to_vec(), vec!["--pcap".into(), pcap.to_str().unwrap().into(), v.addr[1].clone()]].concat();
    let (c, s) = client_server(&v, "rc_pingpong", rc.to_str().unwrap(), &on(1), &client);
    for (text, mine, theirs) in [(&c, lids[0], lids[1]), (&s, lids[1], lids[0])] {
        assert!(text.contains(&format!("local address:  LID 0x{mine:04x}")), "{text}");
        assert!(text.contains(&format!("remote address:  LID 0x{theirs:04x}")), "{text}");
        assert!(text.contains("200 iters in"), "{text}");
    }
    assert_sm_lids("rc_pingpong", &pcap, lids);

    // Every rdma-perf test with --verify, unchanged.
    for (k, test) in PERF_TESTS.into_iter().enumerate() {
        let p = (18600 + k).to_string();
        let pcap = run.join(format!("{test}.pcap"));
        let on = |i: usize| {
            let a = [test, "--backend", "ib", "--netdev", &v.dev[i], "--oob", "rdma-perf", "-p", &p, "--bind"];
            [a.map(String::from).to_vec(), vec![v.addr[i].clone(), "--json".into(), "--quiet".into()]].concat()
        };
        let extra = ["--verify", "-n", "200", "--pcap", pcap.to_str().unwrap()].map(String::from);
        let client = [on(0), extra.to_vec(), vec![v.addr[1].clone()]].concat();
        let (c, s) = client_server(&v, test, perf_bin(), &on(1), &client);
        let (c, s): (serde_json::Value, serde_json::Value) =
            (serde_json::from_str(&c).unwrap(), serde_json::from_str(&s).unwrap());
        assert_eq!((&c["verified"], &s["verified"]), (&true.into(), &true.into()), "{test}: {c} {s}");
        assert_eq!(c["counters"]["icrc_drops"], 0, "{test}: {c}");
        assert_sm_lids(test, &pcap, lids);
    }

    // The RDMA CM on managed ports: with no subnet administrator, the
    // active side takes the peer's LID from the peer's port record, so
    // rping's MADs and data go between the SM's LIDs.
    let rping = common::example("rping");
    let p = "18700".to_string();
    let on = |i: usize| ["--backend", "ib", "--netdev", &v.dev[i]].map(String::from).to_vec();
    let pcap = run.join("rping.pcap");
    let server = [["-s", "-a", &v.addr[1], "-p", &p, "-v", "-C", "10"].map(String::from).to_vec(), on(1)].concat();
    let client = ["-c", "-a", &v.addr[1], "-p", &p, "-v", "-V", "-C", "10", "--pcap", pcap.to_str().unwrap()];
    let client = [client.map(String::from).to_vec(), on(0)].concat();
    let (c, s) = client_server(&v, "rping", rping.to_str().unwrap(), &server, &client);
    assert_eq!(c.lines().filter(|l| l.starts_with("ping data: rdma-ping-")).count(), 10, "{c}");
    assert_eq!(s.lines().filter(|l| l.starts_with("server ping data: rdma-ping-")).count(), 10, "{s}");
    assert_sm_lids("rping", &pcap, lids);

    // Partitions (`rdma-sm --partition GUID=PKEY`): in different ones,
    // a QP's packets (P_Key index 0) are dropped at the other end and the
    // sender runs out of retries; in one partition the ports talk again.
    let partition = |keys: [&str; 2]| {
        let mut c = v.cmd(0, sm);
        c.args(["--once", "--backend", "ib", "--netdev", &v.dev[0], "--json"]);
        for (i, k) in keys.iter().enumerate() {
            c.args(["--partition", &format!("{}={k}", ib_port::guid_text(ib_port::port_guid(MACS[i])))]);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "rdma-sm --partition {keys:?}: {}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let want = |k: &str| serde_json::json!([k, "0xffff"]);
        for l in report["lids"].as_array().unwrap() {
            assert!(keys.iter().any(|k| l["pkeys"] == want(k)), "{keys:?}: {report}");
        }
        wait_records("the P_Keys", |r| {
            r.as_ref().is_some_and(|r| keys.iter().any(|k| format!("{:#06x}", r.pkeys[0]) == *k))
        })
    };
    let r = partition(["0x8001", "0x8002"]);
    assert_eq!(
        (r[0].as_ref().unwrap().pkeys.clone(), r[1].as_ref().unwrap().pkeys.clone()),
        (vec![0x8001, 0xffff], vec![0x8002, 0xffff])
    );
    let dev0 = v.dev[0].clone();
    let table = in_netns(&v.ns.0[0], move || {
        let cfg = rdma_core_rs::DeviceConfig { link: rdma_core_rs::LinkKind::Ib, ..Default::default() };
        let ctx = rdma_core_rs::Device::on_netdev("parted", &dev0, cfg).unwrap().open().unwrap();
        (0..3).map(|i| ctx.query_pkey(i)).collect::<Vec<_>>()
    });
    assert_eq!(table, [Some(0x8001), Some(0xffff), None], "ibv_query_pkey shows the SM's table");
    // send-lat, 20 round trips, on port `p`, side `i`, with `extra`.
    let send_lat = |p: &str, i: usize, extra: &[&str]| {
        let a = ["send-lat", "--backend", "ib", "--netdev", &v.dev[i], "--oob", "rdma-perf", "-p", p, "--bind"];
        let b = [vec![v.addr[i].as_str(), "-n", "20"], extra.to_vec()].concat();
        [&a[..], &b[..]].concat().into_iter().map(String::from).collect::<Vec<String>>()
    };
    let on = |i: usize| send_lat("18800", i, &[]);
    let mut srv = v.cmd(1, perf_bin()).args(on(1)).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let client = [on(0), vec![v.addr[1].clone()]].concat();
    let mut refused = None;
    for _ in 0..100 {
        let out = v.cmd(0, perf_bin()).args(&client).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if !err.contains("cannot reach the server") {
            refused = Some((out.status, err));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = srv.kill();
    let _ = srv.wait();
    let (status, err) = refused.expect("the client reached the server");
    assert!(
        !status.success() && err.contains("transport retry counter exceeded"),
        "different partitions: {status}\n{err}"
    );
    // Both ports are still members of the default partition, at index 1:
    // QPs that pick it (perftest's --pkey_index) talk; an index past the
    // table is refused, naming it.
    let on = |i: usize| send_lat("18802", i, &["--pkey_index", "1", "--json", "--quiet"]);
    let client = [on(0), vec!["--verify".into(), v.addr[1].clone()]].concat();
    let (c, _) = client_server(&v, "send-lat, the default partition", perf_bin(), &on(1), &client);
    let c: serde_json::Value = serde_json::from_str(&c).unwrap();
    assert_eq!(c["verified"], true, "--pkey_index 1, the default partition: {c}");
    let out = v.cmd(0, perf_bin()).args(["send-lat", "--loopback", "--pkey_index", "5"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("pkey_index"), "{err}");
    partition(["0x8001", "0x0001"]);
    let on = |i: usize| send_lat("18801", i, &["--json", "--quiet"]);
    let client = [on(0), vec!["--verify".into(), v.addr[1].clone()]].concat();
    let (c, _) = client_server(&v, "send-lat, one partition", perf_bin(), &on(1), &client);
    let c: serde_json::Value = serde_json::from_str(&c).unwrap();
    assert_eq!(c["verified"], true, "a full and a limited member of one partition: {c}");

    // A resident SM (no --once) configures the subnet (the default
    // partition only, again) and, when a port's agent restarts (the port
    // back in Init without a LID), brings it back to ACTIVE at its LID.
    let resident_log = run.join("resident.log");
    let mut resident = v
        .cmd(0, sm)
        .args(["--backend", "ib", "--netdev", &v.dev[0], "--interval-ms", "200"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&resident_log).unwrap())
        .spawn()
        .unwrap();
    let default_only =
        |r: &Option<IbPortRecord>| r.as_ref().is_some_and(|r| r.state == PortState::Active && r.pkeys == [0xffff]);
    wait_records("the resident SM's first sweep", default_only);
    // The records can be right before the SM says so: a sweep that found a
    // port still on its way to ACTIVE tries again 200 ms later (one sweep
    // failed that way on a loaded machine). The restart below must come
    // after the first SUBNET UP, or one sweep serves both.
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(&resident_log).unwrap();
        if text.contains("SUBNET UP") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no SUBNET UP from the resident SM:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut restarted = agents.0.remove(1);
    // SAFETY: signals a child we started.
    unsafe { libc::kill(restarted.id() as libc::pid_t, libc::SIGTERM) };
    restarted.wait().unwrap();
    let start = Instant::now();
    while record(MACS[1]).is_some() {
        assert!(start.elapsed() < Duration::from_secs(10), "agent 1's record stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
    agents.0.push(agent(1));
    let back = wait_records("the restarted port, configured again", default_only);
    assert_eq!([back[0].as_ref().unwrap().lid, back[1].as_ref().unwrap().lid], lids, "the ports keep their LIDs");
    // SAFETY: signals a child we started.
    unsafe { libc::kill(resident.id() as libc::pid_t, libc::SIGTERM) };
    let status = resident.wait().unwrap();
    let text = std::fs::read_to_string(&resident_log).unwrap();
    assert!(status.success(), "the resident SM: {status}\n{text}");
    assert_eq!(text.matches("SUBNET UP").count(), 2, "configured at start and after the restart only:\n{text}");
    assert!(text.contains("rdma-sm: stopped"), "{text}");

    // The agents stop: their records go, and devices fall back to the LID plan.
    drop(agents);
    wait_records("agents down", Option::is_none);
    let dev0 = v.dev[0].clone();
    let plan = in_netns(&v.ns.0[0], move || {
        let cfg = rdma_core_rs::DeviceConfig { link: rdma_core_rs::LinkKind::Ib, ..Default::default() };
        rdma_core_rs::Device::on_netdev("unmanaged", &dev0, cfg).unwrap().lid()
    });
    assert_eq!(plan, default_lid(MACS[0]));
    let _ = std::fs::remove_dir_all(&run);
}
