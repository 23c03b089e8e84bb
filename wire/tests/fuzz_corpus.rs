//! Runs each fuzz target body of this crate over its checked-in seed corpus
//! (`fuzz/seeds/<target>/`), so that `cargo test` builds the bodies and
//! catches a regression on a known input without a fuzzer.

use std::path::PathBuf;

#[test]
fn roce_v2() {
    rdma_wire::fuzzing::replay_seeds("roce_v2", rdma_wire::fuzzing::roce_v2);
}

#[test]
fn roce_v1() {
    rdma_wire::fuzzing::replay_seeds("roce_v1", rdma_wire::fuzzing::roce_v1);
}

#[test]
fn ib_packet() {
    rdma_wire::fuzzing::replay_seeds("ib_packet", rdma_wire::fuzzing::ib_packet);
}

#[test]
fn transport_packet() {
    rdma_wire::fuzzing::replay_seeds("transport_packet", rdma_wire::fuzzing::transport_packet);
}

#[test]
fn flow_control() {
    rdma_wire::fuzzing::replay_seeds("flow_control", rdma_wire::fuzzing::flow_control);
}

#[test]
fn cm_mad() {
    rdma_wire::fuzzing::replay_seeds("cm_mad", rdma_wire::fuzzing::cm_mad);
}

/// The corpora are worth running: most seeds are packets the parsers accept
/// (taken from real captures), not noise they reject at the first check.
#[test]
fn seeds_are_mostly_valid_packets() {
    let count = |target: &str, ok: fn(&[u8]) -> bool| {
        let all = rdma_wire::fuzzing::seeds(target);
        (all.iter().filter(|(_, d)| ok(d)).count(), all.len())
    };
    use rdma_wire::*;
    type Valid = fn(&[u8]) -> bool;
    let checks: [(&str, Valid); 6] = [
        ("roce_v2", |d| RoceV2Packet::new_checked(d).is_ok_and(|p| p.icrc_ok())),
        ("roce_v1", |d| RoceV1Packet::new_checked(d).is_ok_and(|p| p.icrc_ok())),
        ("ib_packet", |d| IbPacket::new_checked(d).is_ok_and(|p| p.icrc_ok() && p.vcrc_ok())),
        ("transport_packet", |d| TransportPacket::new_checked(d).is_ok_and(|t| TransportRepr::parse(&t).is_ok())),
        ("flow_control", |d| FlowControl::new_checked(d).is_ok_and(|f| f.lpcrc_ok())),
        ("cm_mad", |d| Mad::new_checked(d).is_ok_and(|m| CmMadRepr::parse(&m).is_ok())),
    ];
    for (target, ok) in checks {
        let (valid, total) = count(target, ok);
        assert!(valid * 2 >= total && valid > 0, "{target}: only {valid} of {total} seeds are valid packets");
    }
}

/// The REQ seed was written by an encoder independent of this crate
/// (a Python script following the reference tables): its fields read back.
#[test]
fn cm_req_seed_reads_back() {
    use rdma_wire::*;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/cm_mad/req-rping");
    let data = std::fs::read(path).unwrap();
    let mad = CmMadRepr::parse(&Mad::new_checked(&data[..]).unwrap()).unwrap();
    assert_eq!(mad.transaction_id, 0x0000_0001_1122_3344);
    let CmMessage::Req(r) = mad.message else { panic!("not a REQ: {mad:?}") };
    assert_eq!((r.local_comm_id, r.service_id, r.local_ca_guid), (0x1122_3344, 0x0106_1c06, 0x0202_c9ff_fe12_3456));
    assert_eq!((r.local_qpn, r.responder_resources, r.initiator_depth, r.starting_psn), (0x11, 128, 128, 0x12_3456));
    assert_eq!((r.remote_cm_response_timeout, r.local_cm_response_timeout, r.retry_count), (20, 20, 7));
    assert_eq!((r.pkey, r.path_mtu, r.rnr_retry_count, r.max_cm_retries, r.srq), (0xffff, 3, 7, 15, false));
    let p = r.primary_path;
    assert_eq!(
        (p.local_lid, p.remote_lid, p.flow_label, p.hop_limit, p.local_ack_timeout),
        (0xffff, 0xffff, 0x12345, 64, 17)
    );
    assert_eq!(p.local_gid, core::net::Ipv4Addr::new(192, 168, 1, 1).to_ipv6_mapped());
    assert_eq!(r.alternate_path, PathRepr::ZERO);
    let cma = CmaHdrRepr::parse(&CmaHdr::new_checked(&r.private_data[..]).unwrap()).unwrap();
    assert_eq!(cma.src_port, 0xc123);
    assert_eq!(cma.dst, core::net::IpAddr::V4(core::net::Ipv4Addr::new(192, 168, 1, 2)));
}
