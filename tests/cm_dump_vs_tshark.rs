//! rdma-dump and tshark on CM MADs captured with kernel Soft-RoCE
//! (`tests/fixtures/cm/rping-rxe.pcap`: REQ, REP, RTU, DREQ, DREP each way
//! between rdma-core's rping on `rdma_rxe` and ours): every field both
//! decode must agree, frame by frame. tshark is the independent oracle.

use std::collections::HashMap;
use std::process::Command;

const CAPTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cm/rping-rxe.pcap");

/// tshark's fields, in the order of the columns it prints.
const FIELDS: [&str; 22] = [
    "frame.number",
    "infiniband.mad.method",
    "infiniband.mad.attributeid",
    "infiniband.mad.transactionid",
    "infiniband.cm.req.serviceid",
    "infiniband.cm.req.localqpn",
    "infiniband.cm.req.startpsn",
    "infiniband.cm.req.pppmtu",
    "infiniband.cm.req.responderres",
    "infiniband.cm.req.initdepth",
    "infiniband.cm.req.ip_cm.sport",
    "infiniband.cm.req.ip_cm.sip4",
    "infiniband.cm.req.ip_cm.dip4",
    "infiniband.cm.rep.localqpn",
    "infiniband.cm.rep.startpsn",
    "infiniband.cm.rep.remotecommid",
    "infiniband.cm.rtu.localcommid",
    "infiniband.cm.rtu.remotecommid",
    "infiniband.cm.dreq.localcommid",
    "infiniband.cm.dreq.remotecommid",
    "infiniband.cm.drsp.localcommid",
    "infiniband.cm.drsp.remotecommid",
];

/// A tshark number (decimal or 0x hex) or address, as a string to compare.
fn norm(v: &str) -> String {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).map_or_else(|_| v.to_string(), |n| n.to_string()),
        None => v.to_string(),
    }
}

fn as_string(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn rdma_dump_and_tshark_agree_on_every_cm_field_of_a_kernel_soft_roce_exchange() {
    if Command::new("tshark").arg("--version").output().is_err() {
        testkit::skip("tshark is not installed (apt-get install tshark)");
        return;
    }
    let mut args = vec!["-r", CAPTURE, "-Y", "infiniband.mad.mgmtclass == 7", "-T", "fields", "-E", "separator=|"];
    for f in FIELDS {
        args.extend(["-e", f]);
    }
    let t = Command::new("tshark").args(&args).output().expect("run tshark");
    assert!(t.status.success(), "tshark: {}", String::from_utf8_lossy(&t.stderr));
    let d = Command::new(env!("CARGO_BIN_EXE_rdma-dump")).args(["--json", CAPTURE]).output().expect("run rdma-dump");
    assert!(d.status.success(), "rdma-dump: {}", String::from_utf8_lossy(&d.stderr));
    let dump: HashMap<u64, serde_json::Value> = String::from_utf8_lossy(&d.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("one JSON object a line"))
        .map(|j| (j["frame"].as_u64().expect("a frame number"), j))
        .collect();

    let mut compared = 0;
    let mut messages = Vec::new();
    for line in String::from_utf8_lossy(&t.stdout).lines() {
        let cols: Vec<&str> = line.split('|').collect();
        assert_eq!(cols.len(), FIELDS.len(), "{line}");
        let col = |name: &str| cols[FIELDS.iter().position(|f| *f == name).expect("a field")];
        let frame: u64 = col("frame.number").parse().expect("a frame number");
        let j = dump.get(&frame).unwrap_or_else(|| panic!("rdma-dump has no frame {frame}"));
        let (mad, cm) = (&j["mad"], &j["cm"]);
        let msg = cm["message"].as_str().unwrap_or_else(|| panic!("frame {frame}: no CM decode: {j}"));
        messages.push((j["src"].as_str().unwrap_or("").to_string(), msg.to_string()));
        // Which of rdma-dump's values each tshark field must equal.
        let mut pairs: Vec<(&str, &serde_json::Value)> = vec![
            ("infiniband.mad.method", &mad["method"]),
            ("infiniband.mad.attributeid", &mad["attribute"]),
            ("infiniband.mad.transactionid", &mad["transaction_id"]),
        ];
        match msg {
            "REQ" => pairs.extend([
                ("infiniband.cm.req.serviceid", &cm["service_id"]),
                ("infiniband.cm.req.localqpn", &cm["local_qpn"]),
                ("infiniband.cm.req.startpsn", &cm["starting_psn"]),
                ("infiniband.cm.req.pppmtu", &cm["path_mtu_code"]),
                ("infiniband.cm.req.responderres", &cm["responder_resources"]),
                ("infiniband.cm.req.initdepth", &cm["initiator_depth"]),
                ("infiniband.cm.req.ip_cm.sport", &cm["cma"]["src_port"]),
                ("infiniband.cm.req.ip_cm.sip4", &cm["cma"]["src"]),
                ("infiniband.cm.req.ip_cm.dip4", &cm["cma"]["dst"]),
            ]),
            "REP" => pairs.extend([
                ("infiniband.cm.rep.localqpn", &cm["local_qpn"]),
                ("infiniband.cm.rep.startpsn", &cm["starting_psn"]),
                ("infiniband.cm.rep.remotecommid", &cm["remote_comm_id"]),
            ]),
            "RTU" => pairs.extend([
                ("infiniband.cm.rtu.localcommid", &cm["local_comm_id"]),
                ("infiniband.cm.rtu.remotecommid", &cm["remote_comm_id"]),
            ]),
            "DREQ" => pairs.extend([
                ("infiniband.cm.dreq.localcommid", &cm["local_comm_id"]),
                ("infiniband.cm.dreq.remotecommid", &cm["remote_comm_id"]),
            ]),
            "DREP" => pairs.extend([
                ("infiniband.cm.drsp.localcommid", &cm["local_comm_id"]),
                ("infiniband.cm.drsp.remotecommid", &cm["remote_comm_id"]),
            ]),
            other => panic!("frame {frame}: an unexpected {other}"),
        }
        for (field, ours) in pairs {
            let theirs = col(field);
            assert!(!theirs.is_empty(), "frame {frame} ({msg}): tshark has no {field}");
            assert!(!ours.is_null(), "frame {frame} ({msg}): rdma-dump has nothing for {field}: {cm}");
            assert_eq!(norm(theirs), as_string(ours), "frame {frame} ({msg}): {field}");
            compared += 1;
        }
    }
    // Both directions of both handshakes and teardowns, the kernel's too.
    for who in ["10.88.0.1", "10.88.0.11"] {
        for m in ["REQ", "REP", "RTU", "DREQ", "DREP"] {
            assert!(messages.iter().any(|(s, x)| s == who && x == m), "no {m} from {who}: {messages:?}");
        }
    }
    assert_eq!(messages.len(), 10);
    // 3 MAD fields each, 9 more per REQ, 3 per REP, 2 per RTU, DREQ, DREP.
    assert_eq!(compared, 10 * 3 + 2 * 9 + 2 * 3 + 6 * 2);
    println!("{compared} fields agree over {} CM MADs", messages.len());
}
