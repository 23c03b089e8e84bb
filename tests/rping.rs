//! `examples/rping.rs`, server and client as two processes over loopback
//! (each on an address of its own, as two hosts would be): the RDMA CM
//! handshake (REQ/REP/RTU through QP1), rping's READ/WRITE exchange, the
//! teardown (DREQ/DREP), and rping's output on both sides.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The rping example, built if needed (`cargo test --test rping` does not
/// build examples by itself).
fn rping() -> PathBuf {
    common::example("rping")
}

/// Addresses of 127/8 no other test of the workspace uses, one pair per test.
fn addrs(n: u8) -> (String, String) {
    let pid = (std::process::id() % 200) as u8 + 20;
    (format!("127.{pid}.{n}.1"), format!("127.{pid}.{n}.2"))
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
    let cout = common::wait_with_timeout(client, Duration::from_secs(60));
    let sout = common::wait_with_timeout(server, Duration::from_secs(20));
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
fn a_server_given_a_count_ends_after_that_many_pings_and_disconnects_itself() {
    // The client asks for 5 pings, the server serves 3: at the 4th
    // advertisement the server disconnects (DREQ), so both sides end,
    // without waiting for a DREQ from the client.
    let bin = rping();
    let (server_ip, client_ip) = addrs(6);
    let server = Command::new(&bin)
        .args(["-s", "-a", &server_ip, "-p", "7177", "-v", "-C", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = Command::new(&bin)
        .args(["-c", "-I", &client_ip, "-a", &server_ip, "-p", "7177", "-v", "-V", "-C", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sout = common::wait_with_timeout(server, Duration::from_secs(30));
    let cout = common::wait_with_timeout(client, Duration::from_secs(30));
    let (sstdout, sstderr) = (String::from_utf8_lossy(&sout.stdout), String::from_utf8_lossy(&sout.stderr));
    let (cstdout, cstderr) = (String::from_utf8_lossy(&cout.stdout), String::from_utf8_lossy(&cout.stderr));
    assert!(sout.status.success(), "server: {:?}\n{sstdout}\n{sstderr}", sout.status);
    assert_eq!(sstdout.lines().count(), 3, "the server served 3 pings: {sstdout}");
    assert!(sstderr.contains("the client asks for ping 4 of -C 3; disconnecting"), "server stderr: {sstderr}");
    assert_eq!(cstdout.lines().count(), 3, "the client validated 3 pings: {cstdout}");
    // The client sees the server's DREQ as DISCONNECTED in place of the
    // 4th "go ahead", and ends as rping does then (exit 0).
    assert!(cstderr.contains("client DISCONNECT EVENT..."), "client stderr: {cstderr}");
    assert!(cout.status.success(), "client: {:?}\n{cstdout}\n{cstderr}", cout.status);
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
    let out = common::wait_with_timeout(client, Duration::from_secs(30));
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("cma event RDMA_CM_EVENT_REJECTED, error 8"), "stderr: {err}");
    assert!(start.elapsed() < Duration::from_secs(5), "rejected at once, not after retries");
}

/// tshark, if installed and allowed to capture on `lo` (root); else why not.
fn tshark_capture(filter: &str, path: &std::path::Path) -> Result<Child, String> {
    if Command::new("tshark").arg("--version").output().is_err() {
        return Err("tshark is not installed (Debian: tshark)".into());
    }
    if !common::is_root() {
        return Err("capturing on lo needs root".into());
    }
    let mut child = Command::new("tshark")
        .args(["-i", "lo", "-f", filter, "-w"])
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    // tshark says "Capturing on 'Loopback: lo'" once it listens.
    let mut err = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 256];
        let mut seen = String::new();
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if seen.contains("Capturing on") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20)).map_err(|_| "tshark did not start capturing".to_string())?;
    Ok(child)
}

/// A number as tshark prints it (0x-hex of any width, or decimal).
fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|e| panic!("{s:?} is no number: {e}"))
}

fn tshark_fields(path: &std::path::Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let mut args =
        vec!["-r".to_string(), path.display().to_string(), "-Y".into(), filter.into(), "-T".into(), "fields".into()];
    for f in fields {
        args.push("-e".into());
        args.push((*f).into());
    }
    let out = Command::new("tshark").args(&args).output().expect("tshark runs");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l.split('\t').map(str::to_string).collect()).collect()
}

#[test]
fn tshark_decodes_the_rping_exchange_as_cm_mads_without_malformed_frames() {
    let (server_ip, client_ip) = addrs(4);
    let path = std::env::temp_dir().join(format!("rping-cm-{}.pcap", std::process::id()));
    let filter = format!("udp port 4791 and host {server_ip}");
    let mut cap = match tshark_capture(&filter, &path) {
        Ok(c) => c,
        Err(why) => {
            testkit::skip(why);
            return;
        }
    };
    run_pair(4, &[], 3, 64);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signals our own child.
    unsafe { libc::kill(cap.id() as i32, libc::SIGINT) };
    let _ = cap.wait();
    let malformed = tshark_fields(&path, "_ws.malformed || _ws.expert.severity >= error", &["frame.number"]);
    assert!(malformed.is_empty(), "malformed frames: {malformed:?}");
    let mads = tshark_fields(
        &path,
        "infiniband.mad",
        &[
            "ip.src",
            "infiniband.mad.attributeid",
            "infiniband.cm.req.serviceid",
            "infiniband.cm.req.ip_cm.ipv",
            "infiniband.cm.req.ip_cm.sip4",
            "infiniband.cm.req.ip_cm.dip4",
            "infiniband.deth.q_key",
            "infiniband.bth.p_key",
            "infiniband.deth.srcqp",
            "infiniband.bth.destqp",
        ],
    );
    let attrs: Vec<(&str, &str)> = mads.iter().map(|r| (r[0].as_str(), r[1].as_str())).collect();
    let (c, s) = (client_ip.as_str(), server_ip.as_str());
    assert_eq!(
        attrs,
        [(c, "0x0010"), (s, "0x0013"), (c, "0x0014"), (c, "0x0015"), (s, "0x0016")],
        "REQ, REP, RTU, then DREQ and DREP"
    );
    let req = &mads[0];
    assert_eq!(num(&req[2]), 0x0106_1c06, "RDMA_PS_TCP, port 7174");
    assert_eq!(num(&req[3]), 4, "the cma_hdr's IP version (its high nibble)");
    assert_eq!((req[4].as_str(), req[5].as_str()), (c, s), "the cma_hdr's addresses");
    for m in &mads {
        let keys = (num(&m[6]), num(&m[7]), num(&m[8]), num(&m[9]));
        assert_eq!(keys, (0x8001_0000, 0xffff, 1, 1), "QP1 to QP1, GSI Q_Key, P_Key 0xFFFF: {m:?}");
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_persistent_server_serves_three_clients_at_once() {
    let bin = rping();
    let (server_ip, _) = addrs(5);
    let base = server_ip.trim_end_matches(".1").to_string();
    let server = Command::new(&bin)
        .args(["-s", "-P", "-a", &server_ip, "-v"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let clients: Vec<Child> = (2..5)
        .map(|i| {
            Command::new(&bin)
                .args(["-c", "-I", &format!("{base}.{i}"), "-a", &server_ip, "-V", "-v", "-C", "50"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in clients {
        let out = common::wait_with_timeout(c, Duration::from_secs(60));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 50);
    }
    let mut server = server;
    // A persistent server never ends by itself; it prints each disconnect
    // when its CM thread gets to it (waited for: a loaded machine).
    let stderr = testkit::Gathered::new(server.stderr.take().expect("piped"));
    stderr.until("server DISCONNECT EVENT...", 3, Duration::from_secs(10));
    assert!(server.try_wait().unwrap().is_none(), "the persistent server still runs");
    let _ = server.kill();
    let out = server.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().filter(|l| l.starts_with("server ping data: rdma-ping-")).count(), 150);
    let err = stderr.text();
    assert_eq!(err.matches("server DISCONNECT EVENT...").count(), 3, "{err}");
}
