//! `rdma-dump` end to end: the binary run on bundled captures, its text,
//! JSON, summary and exit status.

use serde_json::Value;
use std::process::{Command, Output};

fn fixture(rel: &str) -> String {
    format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdma-dump")).args(args).output().expect("rdma-dump runs")
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect()
}

#[test]
fn json_has_the_promised_keys_for_every_roce_packet() {
    let out = run(&["--json", &fixture("golden/pcaps/ib_atomic_bw.pcap")]);
    assert!(out.status.success());
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 400, "200 FETCH_ADD and 200 ATOMIC ACKNOWLEDGE");
    let mut last_frame = 0;
    for l in &lines {
        for key in ["frame", "opcode", "dqpn", "psn", "pkey", "icrc_ok"] {
            assert!(l.get(key).is_some(), "missing {key} in {l}");
        }
        assert!(l.get("vcrc_ok").is_none(), "RoCE has no VCRC");
        assert_eq!(l["icrc_ok"], Value::Bool(true));
        let frame = l["frame"].as_u64().unwrap();
        assert!(frame > last_frame, "frames are 1-based and increasing");
        last_frame = frame;
    }
    // Frame 23 of this capture is the first FETCH_ADD (see the golden vectors).
    let first = &lines[0];
    assert_eq!(first["frame"], 23);
    assert_eq!(first["opcode"], 0x14);
    assert_eq!(first["atomic_eth"]["swap_add"], 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("summary: 400 RDMA packets"), "{stderr}");
    assert!(stderr.contains("RC_FETCH_ADD=200 ") || stderr.contains("RC_FETCH_ADD=200"), "{stderr}");
}

#[test]
fn infiniband_link_frames_report_icrc_and_vcrc_verdicts() {
    let out = run(&["--json", &fixture("ib_link.pcap")]);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 6);
    let verdicts: Vec<_> =
        lines[..5].iter().map(|l| (l["icrc_ok"].as_bool().unwrap(), l["vcrc_ok"].as_bool().unwrap())).collect();
    assert_eq!(verdicts, [(true, true), (true, true), (true, true), (true, false), (false, true)]);
    assert_eq!(lines[2]["sgid"], "fe80::1");
    assert_eq!(lines[0]["slid"], 1);
    assert!(lines[5]["error"].as_str().unwrap().contains("LRH"), "{}", lines[5]);
    assert_eq!(lines[5]["frame"], 6);
}

#[test]
fn malformed_and_foreign_frames_never_stop_the_run() {
    let out = run(&[&fixture("mixed_ethernet.pcap")]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert!(
        lines[0].contains("RC_SEND_LAST_WITH_IMMEDIATE")
            && lines[0].contains("imm=0xdeadbeef")
            && lines[0].ends_with("icrc=ok")
    );
    assert!(lines[1].contains("RoCEv1"));
    assert!(lines[2].contains("pad=3") && lines[2].ends_with("icrc=BAD"));
    assert!(lines[3].starts_with("     4 roce_v2 malformed: IPv4"), "{}", lines[3]);
    assert!(lines[4].starts_with("     7 [fe80::1]"), "ARP and TCP frames 5 and 6 are skipped: {}", lines[4]);
    assert_eq!(lines[5], "summary: 4 RDMA packets in 7 frames, 1 malformed, 1 ICRC failures, 0 VCRC failures; RC_SEND_LAST_WITH_IMMEDIATE=2 RC_SEND_ONLY=1 RC_RDMA_WRITE_ONLY=1");
}

#[test]
fn check_sets_the_exit_status_and_bad_files_are_errors() {
    assert!(run(&["--check", "-q", &fixture("golden/pcaps/rc_pingpong.pcap")]).status.success());
    assert_eq!(run(&["--check", "-q", &fixture("ib_link.pcap")]).status.code(), Some(2));
    let missing = run(&[&fixture("no-such.pcap")]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such.pcap"));
    let not_pcap = run(&[&format!("{}/Cargo.toml", env!("CARGO_MANIFEST_DIR"))]);
    assert_eq!(not_pcap.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&not_pcap.stderr).contains("not a pcap or pcapng file"));
}

#[test]
fn count_stops_early() {
    let out = run(&["-c", "3", &fixture("golden/pcaps/ib_write_bw.pcap")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 4, "three packets and the summary");
}
