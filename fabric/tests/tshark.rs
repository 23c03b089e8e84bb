//! tshark decodes the native IB frames the fabric puts on its links (the
//! SM's directed-route SMPs and the SMAs' answers, flow-control packets)
//! with the intended field values and nothing malformed (reference §8.1);
//! the CRCs, which tshark shows but does not check, are recomputed here.
//! Skips, saying so, without tshark.

use rdma_fabric::ib::capture::{write_pcap, Captured, ERF_INFINIBAND, ERF_INFINIBAND_LINK};
use rdma_fabric::ib::IbConfig;
use rdma_fabric::sm::fabric_transport::from_netfile;
use rdma_fabric::sm::{Sm, SmConfig};
use rdma_wire::flow_control::{FlowControl, FlowControlRepr};
use rdma_wire::IbPacket;
use std::process::Command;

const NET: &str = "Switch\t4 \"S1\"\n[1]\t\"H1\"[1]\n[2]\t\"H2\"[1]\n\nHca\t1 \"H1\"\n[1]\t\"S1\"[1]\n\nHca\t1 \"H2\"\n[1]\t\"S1\"[2]\n";

fn tshark(pcap: &std::path::Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut args = vec!["-r".to_string(), pcap.to_str().unwrap().into(), "-T".into(), "fields".into()];
    for f in fields {
        args.push("-e".into());
        args.push((*f).into());
    }
    let o = Command::new("tshark").args(&args).output().expect("tshark runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().map(|l| l.split('\t').map(str::to_string).collect()).collect()
}

#[test]
fn tshark_decodes_the_fabrics_smps_and_flow_control_packets() {
    if Command::new("tshark").arg("-v").output().is_err() {
        testkit::skip("needs tshark");
        return;
    }
    let mut t = from_netfile(NET, Some("H1"), &IbConfig::default()).unwrap();
    t.fab.ib_capture = Some(Vec::new());
    let mut sm = Sm::new(t, SmConfig::default());
    sm.run_once().expect("SUBNET UP");
    // Then data, so flow-control packets count blocks on both VLs.
    let fab = &mut sm.transport.fab;
    let now = fab.now;
    fab.add_flow(0, 1, Some(256 << 10), now);
    fab.run(now + core::time::Duration::from_millis(1), true, &mut |_| {});
    assert!(fab.flows[0].finish.is_some());
    let frames = fab.ib_capture.take().unwrap();
    let dir = std::env::temp_dir().join(format!("ib-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, pick: &dyn Fn(&Captured) -> bool| {
        let sel: Vec<Captured> = frames.iter().filter(|f| pick(f)).cloned().collect();
        let p = dir.join(name);
        write_pcap(&mut std::fs::File::create(&p).unwrap(), &sel).unwrap();
        (p, sel)
    };
    let vl15 = |f: &Captured| f.bytes[0] >> 4 == 15;
    let (smp_pcap, smps) = write("smp.pcap", &|f| f.erf_type == ERF_INFINIBAND && vl15(f));
    let (data_pcap, data) = write("data.pcap", &|f| f.erf_type == ERF_INFINIBAND && !vl15(f));
    let (fc_pcap, fcs) = write("fc.pcap", &|f| f.erf_type == ERF_INFINIBAND_LINK);
    assert!(smps.len() > 20 && fcs.len() > 20, "{} SMP frames, {} FC frames", smps.len(), fcs.len());
    // 256 KiB of WRITEs at MTU 1024 on the way out, ACKs back.
    assert!(data.len() > 256, "{} data frames", data.len());

    // SMPs: every frame decoded as a directed-route SMP on VL15 to QP0, LRH
    // PktLen 72 (290 bytes with the VCRC), no malformed packet; the CRCs good.
    let rows = tshark(
        &smp_pcap,
        &[
            "infiniband.lrh.vl",
            "infiniband.lrh.dlid",
            "infiniband.lrh.pktlen",
            "infiniband.bth.destqp",
            "infiniband.mad.mgmtclass",
            "infiniband.mad.method",
            "infiniband.mad.attributeid",
            "infiniband.smpdirected.hopcount",
            "_ws.malformed",
        ],
    );
    assert_eq!(rows.len(), smps.len());
    for (row, f) in rows.iter().zip(&smps) {
        assert_eq!(&row[..5], &["0x0f", "65535", "72", "0x000000", "0x81"], "{row:?}");
        assert!(row[8].is_empty(), "malformed: {row:?}");
        let p = IbPacket::new_checked(&f.bytes[..]).unwrap();
        assert!(p.vcrc_ok() && p.icrc_ok());
        assert_eq!(f.bytes.len(), 290);
        // The attribute and method tshark saw are the ones in the bytes.
        let mad = &f.bytes[8 + 12 + 8..];
        assert_eq!(row[5], format!("0x{:02x}", mad[3]), "{row:?}");
        assert_eq!(row[6], format!("0x{:04x}", u16::from_be_bytes([mad[16], mad[17]])), "{row:?}");
    }
    // Gets and GetResps of NodeInfo, PortInfo, SwitchInfo, LFT, P_Key, SL2VL and VLArb all went by.
    let attrs: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[6].as_str()).collect();
    for a in ["0x0010", "0x0011", "0x0012", "0x0015", "0x0016", "0x0017", "0x0018", "0x0019"] {
        assert!(attrs.contains(a), "attribute {a} missing: {attrs:?}");
    }

    // Data: native IB packets (LRH, BTH, RETH or AETH, ICRC, VCRC) with
    // the LIDs the SM gave, WRITEs on the data SL and ACKs on the control
    // SL (as the fabric's default puts them), and the fields in the bytes.
    let rows = tshark(
        &data_pcap,
        &[
            "infiniband.lrh.sl",
            "infiniband.lrh.lnh",
            "infiniband.lrh.slid",
            "infiniband.lrh.dlid",
            "infiniband.bth.opcode",
            "infiniband.bth.destqp",
            "infiniband.reth.dmalen",
            "infiniband.aeth.msn",
            "_ws.malformed",
        ],
    );
    assert_eq!(rows.len(), data.len());
    let cfg = IbConfig::default();
    let (mut writes, mut acks) = (0, 0);
    for (row, f) in rows.iter().zip(&data) {
        assert!(row[8].is_empty(), "malformed: {row:?}");
        let p = IbPacket::new_checked(&f.bytes[..]).unwrap();
        assert!(p.vcrc_ok() && p.icrc_ok(), "{row:?}");
        let lrh = p.lrh();
        assert_eq!((parse_num(&row[2]), parse_num(&row[3])), (u64::from(lrh.slid()), u64::from(lrh.dlid())));
        assert_eq!(parse_num(&row[1]), 2, "IBA local: no GRH between two ports of one subnet: {row:?}");
        assert!(lrh.slid() != 0 && lrh.dlid() != 0 && lrh.dlid() < 0xc000, "{row:?}");
        let op = parse_num(&row[4]);
        assert_eq!(op, u64::from(f.bytes[8]), "{row:?}");
        match op {
            // RDMA WRITE First/Middle/Last/Only: a RETH on First and Only.
            6..=10 => {
                writes += 1;
                assert_eq!(parse_num(&row[0]), u64::from(cfg.data_sl), "{row:?}");
                assert_eq!(!row[6].is_empty(), op == 6 || op == 10, "{row:?}");
            }
            0x11 => {
                acks += 1;
                assert_eq!(parse_num(&row[0]), u64::from(cfg.control_sl), "{row:?}");
                assert!(!row[7].is_empty(), "an AETH: {row:?}");
            }
            _ => panic!("unexpected opcode {op:#x}: {row:?}"),
        }
    }
    assert!(writes >= 256 && acks > 0, "{writes} WRITE packets, {acks} ACKs");

    // Flow-control packets: Op, FCTBS, VL, FCCL, LPCRC as we sent them.
    let rows = tshark(
        &fc_pcap,
        &["infiniband_link.op", "infiniband_link.fctbs", "infiniband_link.vl", "infiniband_link.fccl"],
    );
    assert_eq!(rows.len(), fcs.len());
    for (row, f) in rows.iter().zip(&fcs) {
        let v = FlowControl::new_checked(&f.bytes[..]).unwrap();
        assert!(v.lpcrc_ok(), "LPCRC recomputed");
        let r = FlowControlRepr::parse(&v).unwrap();
        let want = [u64::from(v.op()), u64::from(r.fctbs), u64::from(r.vl), u64::from(r.fccl)];
        let got: Vec<u64> = row.iter().map(|x| parse_num(x)).collect();
        assert_eq!(got, want, "{row:?}");
    }
    assert!(rows.iter().any(|r| r[2] == "1"), "FC packets for VL1");
    assert!(rows.iter().any(|r| parse_num(&r[1]) > 100), "FC packets with FCTBS counting data");
    let _ = std::fs::remove_dir_all(&dir);
}

fn parse_num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}
