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

/// One RoCE v2 packet (IPv4/UDP, ICRC computed) carrying `payload` in a UD
/// SEND to or from QP1.
fn gsi_packet(src: [u8; 4], dst: [u8; 4], psn: u32, from_qp1_to: Option<u32>, payload: &[u8]) -> Vec<u8> {
    use rdma_wire::{IpRepr, Ipv4Repr, RoceV2Repr, UdpRepr, ROCE_V2_PORT};
    let mut transport = rdma_wire::mad::gsi_send_transport(rdma_wire::Psn::new(psn));
    if let Some(qpn) = from_qp1_to {
        transport.bth.dest_qp = qpn; // a reply from QP1 to a UD QP
    }
    let repr = RoceV2Repr {
        ip: IpRepr::V4(Ipv4Repr {
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            src: src.into(),
            dst: dst.into(),
        }),
        udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT, checksum: 0 },
        transport,
    };
    let mut buf = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
    let n = repr.emit(&mut buf, payload).unwrap();
    buf.truncate(n);
    buf
}

fn cm_mad(tid: u64, message: rdma_wire::CmMessage) -> Vec<u8> {
    let mut buf = vec![0u8; rdma_wire::mad::MAD_LEN];
    let mut m = rdma_wire::Mad::new_checked(&mut buf[..]).unwrap();
    rdma_wire::CmMadRepr { transaction_id: tid, attribute_modifier: 0, message }.emit(&mut m).unwrap();
    buf
}

/// A classic pcap of raw-IP (LINKTYPE_RAW) frames.
fn write_raw_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let mut f = Vec::new();
    for v in [0xa1b2_c3d4u32.to_le_bytes(), [2, 0, 4, 0]] {
        f.extend_from_slice(&v);
    }
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&65535u32.to_le_bytes());
    f.extend_from_slice(&101u32.to_le_bytes());
    for (i, fr) in frames.iter().enumerate() {
        f.extend_from_slice(&(i as u32).to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&(fr.len() as u32).to_le_bytes());
        f.extend_from_slice(&(fr.len() as u32).to_le_bytes());
        f.extend_from_slice(fr);
    }
    std::fs::write(path, f).unwrap();
}

/// A REQ to an RDMA CM (IP) service ID with its cma_hdr, the REP, a REJ, a
/// truncated MAD and a MAD of the CM class with a bad class version.
fn cm_capture() -> std::path::PathBuf {
    use rdma_wire::cm::{mtu, transport_type, REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN};
    use rdma_wire::cm::{REQ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN};
    use rdma_wire::cma::service_id;
    use rdma_wire::{CmMessage, CmaHdr, CmaHdrRepr, PathRepr, RdmaPs, RejReason, RejRepr, RepRepr, ReqRepr, RtuRepr};
    use std::net::{IpAddr, Ipv4Addr};
    let (a, b) = ([192, 168, 1, 1], [192, 168, 1, 2]);
    let mut private_data = [0u8; REQ_PRIVATE_DATA_LEN];
    let cma = CmaHdrRepr { src_port: 0xc123, src: IpAddr::V4(a.into()), dst: IpAddr::V4(b.into()) };
    cma.emit(&mut CmaHdr::new_checked(&mut private_data[..]).unwrap()).unwrap();
    let req = ReqRepr {
        local_comm_id: 0x1122_3344,
        vendor_id: 0,
        service_id: service_id(RdmaPs::TCP, 7174),
        local_ca_guid: 0x0202_c9ff_fe12_3456,
        local_qkey: 0,
        local_qpn: 0xab_cdef,
        responder_resources: 16,
        local_eecn: 0,
        initiator_depth: 8,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: transport_type::RC,
        end_to_end_flow_control: true,
        starting_psn: 0x12_3456,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: mtu::MTU_1024,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: Ipv4Addr::from(a).to_ipv6_mapped(),
            remote_gid: Ipv4Addr::from(b).to_ipv6_mapped(),
            ..PathRepr::ZERO
        },
        alternate_path: PathRepr::ZERO,
        sap_supported: false,
        private_data,
    };
    let rep = RepRepr {
        local_comm_id: 0x5566_7788,
        remote_comm_id: 0x1122_3344,
        local_qkey: 0,
        local_qpn: 0x00_0123,
        vendor_id: 0,
        local_eecn: 0,
        starting_psn: 777,
        responder_resources: 8,
        initiator_depth: 16,
        target_ack_delay: 0,
        failover_accepted: 0,
        end_to_end_flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x0202_c9ff_fe65_4321,
        private_data: [0; REP_PRIVATE_DATA_LEN],
    };
    let rej = RejRepr {
        local_comm_id: 0x5566_7788,
        remote_comm_id: 0x1122_3344,
        message_rejected: 0,
        ari_length: 0,
        reason: RejReason::CONSUMER_DEFINED,
        ari: [0; REJ_ARI_LEN],
        private_data: [0; REJ_PRIVATE_DATA_LEN],
    };
    let rtu =
        RtuRepr { local_comm_id: 0x1122_3344, remote_comm_id: 0x5566_7788, private_data: [0; RTU_PRIVATE_DATA_LEN] };
    let mut bad_version = cm_mad(5, CmMessage::Rtu(rtu));
    bad_version[2] = 1;
    let frames = [
        gsi_packet(a, b, 1, None, &cm_mad(0x0102_0304_0506_0708, CmMessage::Req(req))),
        gsi_packet(b, a, 2, None, &cm_mad(0x0102_0304_0506_0708, CmMessage::Rep(rep))),
        gsi_packet(b, a, 3, None, &cm_mad(9, CmMessage::Rej(rej))),
        gsi_packet(a, b, 4, None, &cm_mad(10, CmMessage::Rtu(rtu))[..100]),
        gsi_packet(a, b, 5, Some(0x42), &bad_version),
    ];
    let dir = std::env::temp_dir().join(format!("rdma-dump-cm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cm.pcap");
    write_raw_pcap(&path, &frames);
    path
}

#[test]
fn cm_mads_to_and_from_qp1_are_decoded() {
    let path = cm_capture();
    let path = path.to_str().unwrap();

    let out = run(&["--check", path]);
    assert!(out.status.success(), "every ICRC is right: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    let req = lines[0];
    assert!(req.contains("UD_SEND_ONLY qp=0x000001") && req.contains("icrc=ok"), "{req}");
    assert!(req.contains(" mad[CM SEND REQ tid=0x0102030405060708]"), "{req}");
    assert!(
        req.ends_with(
            " cm[REQ lcid=0x11223344 sid=0x0000000001061c06(TCP:7174) qpn=0xabcdef spsn=1193046 mtu=1024 rr=16 id=8 cma 192.168.1.1:49443 > 192.168.1.2:7174]"
        ),
        "{req}"
    );
    assert!(lines[1].ends_with(" cm[REP lcid=0x55667788 rcid=0x11223344 qpn=0x000123 spsn=777]"), "{}", lines[1]);
    assert!(lines[2].contains(" mad[CM SEND REJ tid=0x0000000000000009]"), "{}", lines[2]);
    assert!(lines[2].ends_with(" cm[REJ lcid=0x55667788 rcid=0x11223344 reason=CONSUMER_DEFINED(28)]"), "{}", lines[2]);
    assert!(lines[3].contains("len=100 icrc=ok mad_error: MAD"), "{}", lines[3]);
    assert!(!lines[3].contains("mad["), "{}", lines[3]);
    assert!(lines[4].contains("qp=0x000042") && lines[4].contains(" mad[CM SEND RTU tid="), "{}", lines[4]);
    assert!(lines[4].contains(" mad_error: CM MAD"), "{}", lines[4]);
    assert!(lines[5].starts_with("summary: 5 RDMA packets in 5 frames, 0 malformed"), "{}", lines[5]);

    let out = run(&["--json", path]);
    assert!(out.status.success());
    let j = json_lines(&out);
    assert_eq!(j.len(), 5);
    for l in &j {
        for key in
            ["frame", "kind", "src", "dst", "opcode", "opcode_name", "dqpn", "psn", "deth", "payload_len", "icrc_ok"]
        {
            assert!(l.get(key).is_some(), "existing key {key} kept: {l}");
        }
    }
    let req = &j[0];
    assert_eq!(req["mad"]["class"], 7);
    assert_eq!(req["mad"]["class_name"], "CM");
    assert_eq!(req["mad"]["method"], 3);
    assert_eq!(req["mad"]["attribute"], 0x10);
    assert_eq!(req["mad"]["attribute_name"], "REQ");
    assert_eq!(req["mad"]["transaction_id"], 0x0102_0304_0506_0708u64);
    let cm = &req["cm"];
    assert_eq!(cm["message"], "REQ");
    assert_eq!(cm["local_comm_id"], 0x1122_3344);
    assert_eq!(cm["service_id"], 0x0106_1c06u64);
    assert_eq!(cm["port_space"], "TCP");
    assert_eq!(cm["port"], 7174);
    assert_eq!(cm["local_qpn"], 0xab_cdef);
    assert_eq!(cm["starting_psn"], 0x12_3456);
    assert_eq!(cm["path_mtu"], 1024);
    assert_eq!(cm["responder_resources"], 16);
    assert_eq!(cm["initiator_depth"], 8);
    assert_eq!(cm["cma"]["src"], "192.168.1.1");
    assert_eq!(cm["cma"]["src_port"], 0xc123);
    assert_eq!(cm["cma"]["dst"], "192.168.1.2");
    assert_eq!(cm["cma"]["dst_port"], 7174);
    assert!(req.get("mad_error").is_none());
    let rep = &j[1]["cm"];
    assert_eq!(rep["message"], "REP");
    assert_eq!((rep["local_comm_id"].as_u64(), rep["remote_comm_id"].as_u64()), (Some(0x5566_7788), Some(0x1122_3344)));
    assert_eq!((rep["local_qpn"].as_u64(), rep["starting_psn"].as_u64()), (Some(0x123), Some(777)));
    assert_eq!(j[2]["cm"]["message"], "REJ");
    assert_eq!(j[2]["cm"]["reason"], 28);
    assert_eq!(j[2]["cm"]["reason_name"], "CONSUMER_DEFINED");
    assert!(j[3].get("mad").is_none() && j[3].get("cm").is_none());
    assert!(j[3]["mad_error"].as_str().unwrap().contains("MAD"), "{}", j[3]);
    assert_eq!(j[3]["payload_len"], 100);
    assert_eq!(j[4]["mad"]["class_version"], 1);
    assert!(j[4].get("cm").is_none());
    assert!(j[4]["mad_error"].as_str().unwrap().contains("CM MAD"), "{}", j[4]);
    if std::env::var_os("KEEP").is_none() {
        let _ = std::fs::remove_dir_all(std::path::Path::new(path).parent().unwrap());
    }
}

#[test]
fn other_packets_get_no_mad_keys() {
    let out = run(&["--json", "-c", "20", &fixture("golden/pcaps/ib_write_bw.pcap")]);
    for l in json_lines(&out) {
        assert!(l.get("mad").is_none() && l.get("cm").is_none() && l.get("mad_error").is_none(), "{l}");
    }
}
