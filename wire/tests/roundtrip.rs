//! Property tests: every header and every whole packet survives
//! `parse(emit(x)) == x`; any change to a byte the ICRC covers is caught;
//! and no input, however malformed, makes a parser or accessor panic.

use core::net::{Ipv4Addr, Ipv6Addr};
use proptest::prelude::*;
use rdma_wire::*;

fn opcode() -> impl Strategy<Value = (Opcode, &'static OpcodeInfo)> {
    let all: Vec<_> = Opcode::all().collect();
    proptest::sample::select(all)
}

fn bth(op: Opcode) -> impl Strategy<Value = BthRepr> {
    (any::<[bool; 5]>(), any::<u16>(), 0u32..1 << 24, 0u32..1 << 24).prop_map(move |(f, pkey, qp, psn)| BthRepr {
        opcode: op,
        solicited: f[0],
        mig_req: f[1],
        pad_count: 0,
        pkey,
        fecn: f[2],
        becn: f[3],
        dest_qp: qp,
        ack_req: f[4],
        psn: Psn::new(psn),
    })
}

/// A header set and payload consistent with a random opcode.
fn transport() -> impl Strategy<Value = (TransportRepr, Vec<u8>)> {
    opcode().prop_flat_map(|(op, info)| {
        let payload = if info.has_payload {
            proptest::collection::vec(any::<u8>(), 0..600).boxed()
        } else {
            Just(vec![]).boxed()
        };
        (bth(op), any::<[u64; 4]>(), any::<[u32; 6]>(), 0u8..0x80, payload).prop_map(
            move |(bth, w, d, syn, payload)| {
                let h = info.headers;
                let mut t = TransportRepr::new(bth);
                t.bth.pad_count = pad_for(payload.len()) as u8;
                let has = |x| h.contains(x);
                t.deth = has(HeaderSet::DETH).then_some(DethRepr { qkey: d[0], src_qp: d[1] & 0xff_ffff });
                t.xrc_srq = has(HeaderSet::XRCETH).then_some(d[2] & 0xff_ffff);
                t.reth = has(HeaderSet::RETH).then_some(RethRepr { va: w[0], rkey: d[3], dma_len: d[4] });
                t.atomic_eth = has(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
                    va: w[0],
                    rkey: d[3],
                    swap_add: w[1],
                    compare: w[2],
                });
                t.aeth = has(HeaderSet::AETH)
                    .then_some(AethRepr { syndrome: Syndrome::from_byte(syn), msn: d[5] & 0xff_ffff });
                t.atomic_ack_eth = has(HeaderSet::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr { orig: w[3] });
                t.imm_dt = has(HeaderSet::IMM_DT).then_some(d[0]);
                t.ieth = has(HeaderSet::IETH).then_some(d[1]);
                (t, payload)
            },
        )
    })
}

fn ip() -> impl Strategy<Value = IpRepr> {
    prop_oneof![
        (any::<[u8; 2]>(), any::<u16>(), any::<bool>(), any::<u8>(), any::<u32>(), any::<u32>()).prop_map(
            |(b, ident, df, ttl, src, dst)| IpRepr::V4(Ipv4Repr {
                dscp: b[0] & 0x3f,
                ecn: b[1] & 3,
                ident,
                dont_frag: df,
                ttl,
                protocol: 17,
                src: Ipv4Addr::from(src),
                dst: Ipv4Addr::from(dst),
            })
        ),
        (any::<u8>(), 0u32..1 << 20, any::<u8>(), any::<u128>(), any::<u128>()).prop_map(|(tc, fl, hl, s, d)| {
            IpRepr::V6(Ipv6Repr {
                traffic_class: tc,
                flow_label: fl,
                next_header: 17,
                hop_limit: hl,
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
            })
        }),
    ]
}

fn roce_v2() -> impl Strategy<Value = (RoceV2Repr, Vec<u8>)> {
    (ip(), 0xc000u16..=0xffff, transport()).prop_map(|(ip, sport, (transport, payload))| {
        (RoceV2Repr { ip, udp: UdpRepr { src_port: sport, dst_port: ROCE_V2_PORT, checksum: 0 }, transport }, payload)
    })
}

fn grh() -> impl Strategy<Value = GrhRepr> {
    (any::<u8>(), 0u32..1 << 20, any::<u8>(), any::<u128>(), any::<u128>()).prop_map(|(tc, fl, hl, s, d)| GrhRepr {
        traffic_class: tc,
        flow_label: fl,
        next_header: ipv6::NEXT_HEADER_IBA,
        hop_limit: hl,
        src: Ipv6Addr::from(s),
        dst: Ipv6Addr::from(d),
    })
}

fn ib() -> impl Strategy<Value = (IbRepr, Vec<u8>)> {
    (0u8..16, 0u8..16, any::<u16>(), any::<u16>(), proptest::option::of(grh()), transport()).prop_map(
        |(vl, sl, dlid, slid, grh, (transport, payload))| {
            let lnh = if grh.is_some() { Lnh::IbaGlobal } else { Lnh::IbaLocal };
            (IbRepr { lrh: LrhRepr { vl, sl, lnh, dlid, slid }, grh, transport }, payload)
        },
    )
}

/// The bits of byte `at` of a RoCE v2 packet that the ICRC does not cover.
fn roce_v2_variant(l3: &[u8], at: usize) -> u8 {
    let ip = if l3[0] >> 4 == 4 { 20 } else { 40 };
    if at == ip + 6 || at == ip + 7 || at == ip + 8 + 4 {
        return 0xff; // UDP checksum, BTH byte 4
    }
    match (ip, at) {
        (20, 1 | 8 | 10 | 11) => 0xff, // TOS, TTL, checksum
        (40, 0) => 0x0f,               // traffic class (high nibble)
        (40, 1..=3 | 7) => 0xff,       // traffic class, flow label, hop limit
        _ => 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn roce_v2_packets_round_trip((repr, payload) in roce_v2()) {
        let mut buf = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        let n = repr.emit(&mut buf, &payload).unwrap();
        prop_assert_eq!(n, buf.len());
        let p = RoceV2Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.icrc_ok());
        prop_assert_eq!(RoceV2Repr::parse(&p).unwrap(), repr);
        let t = p.transport();
        prop_assert_eq!(t.payload(), &payload[..]);
    }

    #[test]
    fn headers_apart_from_their_payload_make_the_same_packet((repr, payload) in roce_v2()) {
        // What a sender that sends the payload straight from memory puts
        // on the wire: headers, then the payload, then pad and ICRC.
        let mut whole = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut whole, &payload).unwrap();
        let mut headers = [0x5au8; 128];
        let h = repr.emit_headers(&mut headers, payload.len()).unwrap();
        prop_assert_eq!(h, repr.payload_offset().unwrap());
        let icrc = icrc::roce_v2_split(&headers[..h], &payload).unwrap();
        let mut apart = headers[..h].to_vec();
        apart.extend_from_slice(&payload);
        apart.resize(whole.len() - 4, 0);
        apart.extend_from_slice(&Icrc::wire_bytes(icrc));
        prop_assert_eq!(apart, whole);
    }

    #[test]
    fn any_covered_bit_flip_is_caught((repr, payload) in roce_v2(), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut buf = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut buf, &payload).unwrap();
        let at = pos.index(buf.len() - 4);
        prop_assume!(roce_v2_variant(&buf, at) & (1 << bit) == 0);
        buf[at] ^= 1 << bit;
        if let Ok(p) = RoceV2Packet::new_checked(&buf[..]) {
            prop_assert!(!p.icrc_ok(), "flip of bit {} at byte {} not caught", bit, at);
        }
    }

    #[test]
    fn ib_packets_round_trip((repr, payload) in ib(), corrupt in any::<prop::sample::Index>()) {
        let mut buf = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut buf, &payload).unwrap();
        let p = IbPacket::new_checked(&buf[..]).unwrap();
        prop_assert!(p.icrc_ok() && p.vcrc_ok());
        prop_assert_eq!(IbRepr::parse(&p).unwrap(), repr);
        let t = p.transport();
        prop_assert_eq!(t.payload(), &payload[..]);
        // The VCRC covers every byte before it.
        let at = corrupt.index(buf.len() - 2);
        buf[at] ^= 0x01;
        if let Ok(p) = IbPacket::new_checked(&buf[..]) {
            prop_assert!(!p.vcrc_ok());
        }
    }

    #[test]
    fn roce_v1_packets_round_trip(g in grh(), (transport, payload) in transport()) {
        let repr = RoceV1Repr { grh: g, transport };
        let mut buf = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut buf, &payload).unwrap();
        let p = RoceV1Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.icrc_ok());
        prop_assert_eq!(RoceV1Repr::parse(&p).unwrap(), repr);
    }

    #[test]
    fn flow_control_round_trips(init in any::<bool>(), fctbs in 0u16..4096, vl in 0u8..16, fccl in 0u16..4096) {
        let op = if init { FlowControlOp::Init } else { FlowControlOp::Normal };
        let repr = FlowControlRepr { op, fctbs, vl, fccl };
        let mut buf = [0u8; 6];
        repr.emit(&mut buf).unwrap();
        let v = FlowControl::new_checked(&buf[..]).unwrap();
        prop_assert!(v.lpcrc_ok());
        prop_assert_eq!(FlowControlRepr::parse(&v).unwrap(), repr);
    }

    #[test]
    fn cnp_round_trips(pkey in any::<u16>(), qp in 0u32..1 << 24) {
        let cnp = CnpRepr { pkey, dest_qp: qp };
        let t = cnp.to_transport();
        let mut buf = [0xaau8; 64];
        let n = t.emit_headers(&mut buf, 0).unwrap();
        prop_assert_eq!(n, 28);
        prop_assert_eq!(buf[4], 0x40, "BECN set, FECN clear");
        prop_assert!(buf[12..28].iter().all(|&b| b == 0), "reserved bytes are zero");
        let mut full = [0u8; 32];
        full[..28].copy_from_slice(&buf[..28]);
        let p = TransportPacket::new_checked(&full[..]).unwrap();
        prop_assert_eq!(CnpRepr::from_transport(&TransportRepr::parse(&p).unwrap()), Some(cnp));
    }

    #[test]
    fn psn_arithmetic_is_modular(a in 0u32..1 << 24, n in 0u32..1 << 23) {
        let p = Psn::new(a);
        prop_assert_eq!(p.add(n).sub(n), p);
        prop_assert_eq!(p.add(n).distance_from(p), n);
        if n > 0 {
            prop_assert!(p < p.add(n));
            prop_assert_eq!(p.add(n).diff(p), n as i32);
        }
    }

    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        exercise(&bytes);
    }

    #[test]
    fn parsers_never_panic_on_mutated_packets(
        (repr, payload) in roce_v2(),
        muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut buf = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut buf, &payload).unwrap();
        for (i, v) in muts {
            let at = i.index(buf.len());
            buf[at] = v;
        }
        let len = cut.index(buf.len() + 1);
        exercise(&buf[..len]);
        exercise(&buf);
    }
}

/// Runs every parser over `bytes` and, where one accepts, every accessor.
fn exercise(bytes: &[u8]) {
    if let Ok(p) = RoceV2Packet::new_checked(bytes) {
        let _ = p.icrc_ok();
        let _ = RoceV2Repr::parse(&p);
        walk(&p.transport());
    }
    if let Ok(p) = RoceV1Packet::new_checked(bytes) {
        let _ = p.icrc_ok();
        let _ = RoceV1Repr::parse(&p);
        walk(&p.transport());
    }
    if let Ok(p) = IbPacket::new_checked(bytes) {
        let _ = (p.icrc_ok(), p.vcrc_ok());
        let _ = IbRepr::parse(&p);
        walk(&p.transport());
    }
    if let Ok(t) = TransportPacket::new_checked(bytes) {
        walk(&t);
    }
    if let Ok(f) = FlowControl::new_checked(bytes) {
        let _ = (f.lpcrc_ok(), FlowControlRepr::parse(&f));
    }
    let _ = EthernetRepr::parse(bytes);
}

/// Calls every accessor; if the headers parse, re-emits them and checks
/// that they read back the same.
fn walk(t: &TransportPacket<&[u8]>) {
    let _ = (t.payload(), t.icrc(), t.after_bth(), t.imm_dt(), t.ieth());
    let _ = (t.reth().map(|h| h.va()), t.aeth().map(|h| h.syndrome()), t.deth().map(|h| h.src_qp()));
    let _ =
        (t.atomic_eth().map(|h| h.compare()), t.atomic_ack_eth().map(|h| h.orig()), t.xrceth().map(|h| h.xrc_srq()));
    if let Ok(r) = TransportRepr::parse(t) {
        let len = t.payload().len();
        let mut out = vec![0u8; r.packet_len(len).unwrap()];
        r.emit_headers(&mut out, len).unwrap();
        let n = out.len();
        out[n - 4..].copy_from_slice(&t.icrc().to_le_bytes());
        let reread = TransportPacket::new_checked(&out[..]).unwrap();
        assert_eq!(TransportRepr::parse(&reread).unwrap(), r);
    }
}
