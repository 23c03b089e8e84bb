//! Golden tests: the wire crate against packets it did not make.
//!
//! - `tests/fixtures/golden/`: captures of Linux kernel Soft-RoCE (a RoCE v2
//!   implementation that interoperates with ConnectX) and `vectors.json`,
//!   one packet per (IP version, opcode) with its ICRC;
//! - `tests/fixtures/handmade.json`: the opcodes the captures lack, built by
//!   an independent Python implementation (`scripts/make_wire_fixtures.py`).
//!
//! Every packet must parse, verify its ICRC (and VCRC), re-emit byte-exact
//! from its owned representation, and fail the ICRC when any byte the ICRC
//! covers is changed.

use rdma_wire::*;
use serde_json::Value;
use softroce::capture::{linktype, Capture};
use softroce::decode::{decode, Decoded};
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

fn load_json(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(rel)).unwrap()).unwrap()
}

/// Re-emits a RoCE v2 packet from its owned representation.
fn reemit_v2(l3: &[u8]) -> Vec<u8> {
    let p = RoceV2Packet::new_checked(l3).unwrap();
    let repr = RoceV2Repr::parse(&p).unwrap();
    let payload = p.transport().payload().to_vec();
    let mut out = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
    let n = repr.emit(&mut out, &payload).unwrap();
    assert_eq!(n, out.len());
    out
}

/// Bytes of a RoCE v2 packet whose changes the ICRC does not see: the IPv4
/// TOS, TTL and checksum or the IPv6 traffic class, flow label and hop
/// limit; the UDP checksum; BTH byte 4.
fn variant_bits(l3: &[u8]) -> Vec<(usize, u8)> {
    let (ip, v) = if l3[0] >> 4 == 4 {
        (20, vec![(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff)])
    } else {
        (40, vec![(0, 0x0f), (1, 0xff), (2, 0xff), (3, 0xff), (7, 0xff)])
    };
    let mut v = v;
    v.extend([(ip + 6, 0xff), (ip + 7, 0xff), (ip + 8 + 4, 0xff)]);
    v
}

#[test]
fn every_vector_parses_verifies_and_reemits_byte_exact() {
    let vectors = load_json("golden/vectors.json");
    let vectors = vectors.as_array().unwrap();
    assert_eq!(vectors.len(), 23);
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let l3 = hex::decode(v["l3_packet_hex"].as_str().unwrap()).unwrap();
        let p = RoceV2Packet::new_checked(&l3[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = u32::from_str_radix(v["icrc_u32"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        assert_eq!(p.computed_icrc(), want, "{name}");
        assert_eq!(p.transport().icrc(), want, "{name}");
        assert_eq!(hex::encode(Icrc::wire_bytes(want)), v["icrc_wire_bytes"].as_str().unwrap(), "{name}");
        assert_eq!(u64::from(p.transport().bth().opcode().0), v["opcode"].as_u64().unwrap(), "{name}");
        assert_eq!(p.transport().info().name, name);
        assert_eq!(reemit_v2(&l3), l3, "{name}: re-emit differs");
    }
}

#[test]
fn a_change_to_any_covered_byte_fails_the_icrc_and_variant_bytes_do_not() {
    let vectors = load_json("golden/vectors.json");
    for v in vectors.as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let l3 = hex::decode(v["l3_packet_hex"].as_str().unwrap()).unwrap();
        let variant = variant_bits(&l3);
        let icrc_at = l3.len() - 4;
        // Every covered byte (the ICRC field itself excluded), one bit each.
        for i in 0..icrc_at {
            let mask = variant.iter().find(|(at, _)| *at == i).map_or(0, |(_, m)| *m);
            let covered_bits = !mask;
            if covered_bits == 0 {
                continue;
            }
            let bit = 1u8 << (i % 8);
            let bit = if bit & covered_bits != 0 { bit } else { covered_bits & covered_bits.wrapping_neg() };
            let mut c = l3.clone();
            c[i] ^= bit;
            if let Ok(p) = RoceV2Packet::new_checked(&c[..]) {
                assert!(!p.icrc_ok(), "{name}: flipping bit {bit:#x} of byte {i} went unnoticed");
            }
        }
        // The variant fields: rewritten by switches and routers, not covered.
        for (i, m) in variant {
            let mut c = l3.clone();
            c[i] ^= m & 0x55;
            if l3[0] >> 4 == 4 {
                Ipv4::new_unchecked(&mut c[..20]).fill_checksum();
            }
            let p = RoceV2Packet::new_checked(&c[..]).unwrap_or_else(|e| panic!("{name}: byte {i}: {e}"));
            assert!(p.icrc_ok(), "{name}: variant byte {i} changed the ICRC");
        }
    }
}

/// Counts the UDP datagrams to port 4791 in an Ethernet capture by reading
/// the bytes directly, independently of the decoder.
fn count_roce_frames(frames: &[softroce::capture::Frame]) -> usize {
    frames
        .iter()
        .filter(|f| {
            let d = &f.data;
            let (et, ip) = (u16::from_be_bytes([d[12], d[13]]), &d[14..]);
            match et {
                0x0800 => ip[9] == 17 && u16::from_be_bytes([ip[22], ip[23]]) == 4791,
                0x86dd => ip[6] == 17 && u16::from_be_bytes([ip[42], ip[43]]) == 4791,
                _ => false,
            }
        })
        .count()
}

#[test]
fn every_captured_roce_packet_decodes_verifies_and_reemits() {
    let dir = fixture("golden/pcaps");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 9, "the nine kernel Soft-RoCE captures");
    let mut total = 0;
    for path in files {
        let frames: Vec<_> = Capture::open(&path).unwrap().map(|f| f.unwrap()).collect();
        let mut decoded = 0;
        for f in &frames {
            assert_eq!(f.linktype, linktype::ETHERNET);
            match decode(f.linktype, &f.data) {
                Decoded::RoceV2(p) => {
                    assert!(p.icrc_ok(), "{}: frame {}: bad ICRC", path.display(), f.number);
                    assert_eq!(reemit_v2(p.as_bytes()), p.as_bytes(), "{}: frame {}", path.display(), f.number);
                    decoded += 1;
                }
                Decoded::NotRdma => {}
                other => panic!("{}: frame {}: {other:?}", path.display(), f.number),
            }
        }
        assert!(decoded > 0, "{}", path.display());
        assert_eq!(decoded, count_roce_frames(&frames), "{}", path.display());
        total += decoded;
    }
    assert_eq!(total, 3702);
}

fn check_fields(name: &str, t: &TransportPacket<&[u8]>, p: &Value) {
    let fields = &p["fields"];
    let repr = TransportRepr::parse(t).unwrap();
    for (k, v) in fields.as_object().unwrap() {
        let want = v.as_u64().unwrap_or_else(|| u64::from(v.as_bool().unwrap()));
        let got: Option<u64> = match k.as_str() {
            "opcode" => Some(repr.bth.opcode.0.into()),
            "dqpn" => Some(repr.bth.dest_qp.into()),
            "psn" => Some(repr.bth.psn.value().into()),
            "becn" => Some(repr.bth.becn.into()),
            "payload_len" => Some(t.payload().len() as u64),
            "imm_dt" => repr.imm_dt.map(u64::from),
            "ieth" => repr.ieth.map(u64::from),
            "xrc_srq" => repr.xrc_srq.map(u64::from),
            "feth_placement" => repr.feth.map(|f| f.placement.into()),
            "feth_selectivity" => repr.feth.map(|f| f.selectivity.into()),
            "reth_va" => repr.reth.map(|r| r.va),
            "reth_rkey" => repr.reth.map(|r| r.rkey.into()),
            "reth_len" => repr.reth.map(|r| r.dma_len.into()),
            "aeth_syndrome" => repr.aeth.map(|a| a.syndrome.to_byte().into()),
            "aeth_msn" => repr.aeth.map(|a| a.msn.into()),
            "atomic_va" => repr.atomic_eth.map(|a| a.va),
            "atomic_rkey" => repr.atomic_eth.map(|a| a.rkey.into()),
            "atomic_swap_add" => repr.atomic_eth.map(|a| a.swap_add),
            "atomic_compare" => repr.atomic_eth.map(|a| a.compare),
            "deth_qkey" => repr.deth.map(|d| d.qkey.into()),
            "deth_src_qp" => repr.deth.map(|d| d.src_qp.into()),
            _ => continue, // link-level fields are checked by the caller
        };
        assert_eq!(got, Some(want), "{name}: field {k}");
    }
    assert_eq!(hex::encode(t.payload()), p["payload_hex"].as_str().unwrap(), "{name}: payload");
}

#[test]
fn handmade_packets_of_every_other_opcode_match_the_independent_implementation() {
    let fixtures = load_json("handmade.json");
    let packets = fixtures["packets"].as_array().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for p in packets {
        let name = p["name"].as_str().unwrap();
        let bytes = hex::decode(p["hex"].as_str().unwrap()).unwrap();
        let icrc = p["icrc"].as_u64().unwrap() as u32;
        let fields = &p["fields"];
        kinds.insert(p["kind"].as_str().unwrap().to_string());
        match p["kind"].as_str().unwrap() {
            "roce_v2" => {
                let pkt = RoceV2Packet::new_checked(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(pkt.computed_icrc(), icrc, "{name}");
                assert!(pkt.icrc_ok(), "{name}");
                if let Some(ecn) = fields.get("ecn") {
                    assert_eq!(u64::from(pkt.ipv4().unwrap().ecn()), ecn.as_u64().unwrap(), "{name}");
                }
                check_fields(name, &pkt.transport(), p);
                assert_eq!(reemit_v2(&bytes), bytes, "{name}");
            }
            "roce_v1" => {
                let pkt = RoceV1Packet::new_checked(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(pkt.computed_icrc(), icrc, "{name}");
                check_fields(name, &pkt.transport(), p);
                let repr = RoceV1Repr::parse(&pkt).unwrap();
                let mut out = vec![0u8; bytes.len()];
                repr.emit(&mut out, pkt.transport().payload()).unwrap();
                assert_eq!(out, bytes, "{name}");
            }
            "ib" => {
                let pkt = IbPacket::new_checked(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(pkt.computed_icrc(), icrc, "{name}");
                assert_eq!(u64::from(pkt.vcrc()), p["vcrc"].as_u64().unwrap(), "{name}");
                assert!(pkt.vcrc_ok() && pkt.icrc_ok(), "{name}");
                let lrh = pkt.lrh();
                for (k, got) in
                    [("slid", lrh.slid()), ("dlid", lrh.dlid()), ("vl", lrh.vl().into()), ("sl", lrh.sl().into())]
                {
                    assert_eq!(u64::from(got), fields[k].as_u64().unwrap(), "{name}: {k}");
                }
                check_fields(name, &pkt.transport(), p);
                let repr = IbRepr::parse(&pkt).unwrap();
                let mut out = vec![0u8; bytes.len()];
                repr.emit(&mut out, pkt.transport().payload()).unwrap();
                assert_eq!(out, bytes, "{name}");
                // The VCRC covers the whole packet, variant fields included.
                let mut c = bytes.clone();
                c[0] ^= 0x10; // VL: not in the ICRC, in the VCRC
                let pkt = IbPacket::new_checked(&c[..]).unwrap();
                assert!(pkt.icrc_ok() && !pkt.vcrc_ok(), "{name}");
            }
            k => panic!("unknown kind {k}"),
        }
    }
    assert_eq!(kinds.len(), 3);

    // Together with the captures, every opcode of the table is covered.
    let mut seen: std::collections::BTreeSet<u8> =
        packets.iter().map(|p| p["fields"]["opcode"].as_u64().unwrap() as u8).collect();
    for v in load_json("golden/vectors.json").as_array().unwrap() {
        seen.insert(v["opcode"].as_u64().unwrap() as u8);
    }
    let missing: Vec<_> = Opcode::all()
        .map(|(op, _)| op)
        .filter(|op| !seen.contains(&op.0) && op.info().unwrap().transport != Transport::Xrc)
        .collect();
    assert!(missing.is_empty(), "opcodes with no golden or handmade fixture: {missing:?}");
}

#[test]
fn flow_control_packets_match_the_independent_implementation() {
    for fc in load_json("handmade.json")["flow_control"].as_array().unwrap() {
        let bytes = hex::decode(fc["hex"].as_str().unwrap()).unwrap();
        let view = FlowControl::new_checked(&bytes[..]).unwrap();
        assert!(view.lpcrc_ok());
        assert_eq!(u64::from(view.lpcrc()), fc["lpcrc"].as_u64().unwrap());
        let repr = FlowControlRepr::parse(&view).unwrap();
        assert_eq!(u64::from(repr.fctbs), fc["fctbs"].as_u64().unwrap());
        assert_eq!(u64::from(repr.fccl), fc["fccl"].as_u64().unwrap());
        assert_eq!(u64::from(repr.vl), fc["vl"].as_u64().unwrap());
        let op = if repr.op == FlowControlOp::Init { 1 } else { 0 };
        assert_eq!(op, fc["op"].as_u64().unwrap());
        let mut out = [0u8; 6];
        repr.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..]);
    }
}

/// A receiver behind a UDP socket sees every IPv4 packet with Identification
/// 0; on every kernel Soft-RoCE packet (nonzero, varying Identifications),
/// the value solved from the ICRC is the one that was sent.
#[test]
fn the_ipv4_identification_of_every_captured_packet_is_recovered_from_the_icrc() {
    let mut recovery = IdentRecovery::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(fixture("golden/pcaps")).unwrap() {
        let path = entry.unwrap().path();
        for f in Capture::open(&path).unwrap().map(|f| f.unwrap()) {
            let Decoded::RoceV2(p) = decode(f.linktype, &f.data) else { continue };
            let Some(ip) = p.ipv4() else { continue };
            let sent = ip.ident();
            let mut seen = p.as_bytes().to_vec();
            seen[4..6].copy_from_slice(&[0, 0]);
            Ipv4::new_checked(&mut seen[..20]).unwrap().fill_checksum();
            let seen_packet = RoceV2Packet::new_checked(&seen[..]).unwrap();
            let (computed, carried) = (seen_packet.computed_icrc(), seen_packet.transport().icrc());
            assert_eq!(
                recovery.recover(seen.len(), computed, carried),
                Some(sent),
                "{}: frame {}",
                path.display(),
                f.number
            );
            if sent != 0 {
                checked += 1;
            }
        }
    }
    assert!(checked > 3000, "only {checked} packets with a nonzero Identification");
}
