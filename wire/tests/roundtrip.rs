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
                t.feth = has(HeaderSet::FETH)
                    .then_some(FethRepr { placement: (d[5] & 0xf) as u8, selectivity: ((d[5] >> 4) & 3) as u8 });
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
    fn a_datagram_gives_the_icrc_and_headers_of_the_packet_it_came_in((repr, payload) in roce_v2()) {
        // What a UDP socket reports cannot show the Identification, the
        // flags or the flow label: the packets a socket's values stand for
        // carry those as DatagramHeaders::emit writes them.
        let mut repr = repr;
        match &mut repr.ip {
            IpRepr::V4(h) => { h.ident = 0; h.dont_frag = true; }
            IpRepr::V6(h) => h.flow_label = 0,
        }
        let mut buf = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
        repr.emit(&mut buf, &payload).unwrap();
        let p = RoceV2Packet::new_checked(&buf[..]).unwrap();
        let (src, dst, traffic_class, hop_limit) = match (p.ipv4(), p.ipv6()) {
            (Some(h), _) => (core::net::IpAddr::V4(h.src()), core::net::IpAddr::V4(h.dst()), buf[1], h.ttl()),
            (_, Some(h)) => (h.src().into(), h.dst().into(), h.traffic_class(), h.hop_limit()),
            _ => unreachable!(),
        };
        let d = DatagramHeaders { src: core::net::SocketAddr::new(src, p.udp().src_port()), dst, traffic_class, hop_limit };
        let hl = d.headers_len();
        let transport = &buf[hl..];
        prop_assert_eq!(icrc::roce_v2_datagram(&d, &transport[..transport.len() - 4]), Ok(p.transport().icrc()));
        let mut headers = [0u8; 48];
        prop_assert_eq!(d.emit(transport.len(), &mut headers), Ok(hl));
        prop_assert_eq!(&headers[..hl], &buf[..hl]);
        // A value changed that the ICRC covers changes it; one it masks does not.
        let other = DatagramHeaders { src: core::net::SocketAddr::new(src, p.udp().src_port() ^ 1), ..d };
        prop_assert_ne!(icrc::roce_v2_datagram(&other, &transport[..transport.len() - 4]), Ok(p.transport().icrc()));
        let masked = DatagramHeaders { traffic_class: !traffic_class, hop_limit: !hop_limit, ..d };
        prop_assert_eq!(icrc::roce_v2_datagram(&masked, &transport[..transport.len() - 4]), Ok(p.transport().icrc()));
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
    fn feth_round_trips(placement in 0u8..16, selectivity in 0u8..4, junk in any::<[u8; 4]>()) {
        let repr = FethRepr { placement, selectivity };
        let mut b = junk;
        repr.emit(&mut Feth::new_unchecked(&mut b[..]));
        let h = Feth::new_checked(&b[..]).unwrap();
        prop_assert_eq!(FethRepr::parse(&h), repr);
        // The reserved bits 31..6 go out as zero; the fields where rxe puts them.
        prop_assert_eq!(h.bits(), u32::from(placement) | u32::from(selectivity) << 4);
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
    let _ = (t.payload(), t.icrc(), t.after_bth(), t.imm_dt(), t.ieth(), t.feth().map(|h| h.bits()));
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

/// `N` arbitrary bytes, for private data larger than proptest's arrays.
fn bytes<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    proptest::collection::vec(any::<u8>(), N).prop_map(|v| v.try_into().unwrap())
}

fn path() -> impl Strategy<Value = PathRepr> {
    (any::<[u32; 8]>(), any::<[u128; 2]>(), any::<bool>()).prop_map(|(w, g, subnet_local)| PathRepr {
        local_lid: w[0] as u16,
        remote_lid: (w[0] >> 16) as u16,
        local_gid: g[0].into(),
        remote_gid: g[1].into(),
        flow_label: w[1] & 0xf_ffff,
        packet_rate: (w[2] & 0x3f) as u8,
        traffic_class: w[3] as u8,
        hop_limit: w[4] as u8,
        sl: (w[5] & 0xf) as u8,
        subnet_local,
        local_ack_timeout: (w[6] & 0x1f) as u8,
    })
}

/// Every CM message with arbitrary field values, each masked to its width.
fn cm_message() -> impl Strategy<Value = CmMessage> {
    let ids = any::<[u32; 16]>();
    let flags = any::<[bool; 6]>();
    prop_oneof![
        (ids, flags, any::<[u64; 2]>(), path(), path(), bytes::<92>()).prop_map(|(w, f, q, p, a, pd)| {
            CmMessage::Req(ReqRepr {
                local_comm_id: w[0],
                vendor_id: w[1] & 0xff_ffff,
                service_id: q[0],
                local_ca_guid: q[1],
                local_qkey: w[2],
                local_qpn: w[3] & 0xff_ffff,
                responder_resources: (w[3] >> 24) as u8,
                local_eecn: w[4] & 0xff_ffff,
                initiator_depth: (w[4] >> 24) as u8,
                remote_eecn: w[5] & 0xff_ffff,
                remote_cm_response_timeout: (w[6] & 0x1f) as u8,
                transport_service_type: (w[7] & 3) as u8,
                end_to_end_flow_control: f[0],
                starting_psn: w[8] & 0xff_ffff,
                local_cm_response_timeout: (w[9] & 0x1f) as u8,
                retry_count: (w[10] & 7) as u8,
                pkey: w[11] as u16,
                path_mtu: (w[12] & 0xf) as u8,
                rdc_exists: f[1],
                rnr_retry_count: (w[13] & 7) as u8,
                max_cm_retries: (w[14] & 0xf) as u8,
                srq: f[2],
                extended_transport_type: (w[15] & 7) as u8,
                primary_path: p,
                alternate_path: a,
                sap_supported: f[3],
                private_data: pd,
            })
        }),
        (ids, bytes::<222>()).prop_map(|(w, pd)| CmMessage::Mra(MraRepr {
            local_comm_id: w[0],
            remote_comm_id: w[1],
            message_mraed: (w[2] & 3) as u8,
            service_timeout: (w[3] & 0x1f) as u8,
            private_data: pd,
        })),
        (ids, bytes::<72>(), bytes::<148>()).prop_map(|(w, ari, pd)| CmMessage::Rej(RejRepr {
            local_comm_id: w[0],
            remote_comm_id: w[1],
            message_rejected: (w[2] & 3) as u8,
            ari_length: (w[3] & 0x7f) as u8,
            reason: RejReason(w[4] as u16),
            ari,
            private_data: pd,
        })),
        (ids, flags, any::<u64>(), bytes::<196>()).prop_map(|(w, f, guid, pd)| CmMessage::Rep(RepRepr {
            local_comm_id: w[0],
            remote_comm_id: w[1],
            local_qkey: w[2],
            local_qpn: w[3] & 0xff_ffff,
            vendor_id: w[4] & 0xff_ffff,
            local_eecn: w[5] & 0xff_ffff,
            starting_psn: w[6] & 0xff_ffff,
            responder_resources: w[7] as u8,
            initiator_depth: w[8] as u8,
            target_ack_delay: (w[9] & 0x1f) as u8,
            failover_accepted: (w[10] & 3) as u8,
            end_to_end_flow_control: f[0],
            rnr_retry_count: (w[11] & 7) as u8,
            srq: f[1],
            local_ca_guid: guid,
            private_data: pd,
        })),
        (ids, bytes::<224>()).prop_map(|(w, pd)| CmMessage::Rtu(RtuRepr {
            local_comm_id: w[0],
            remote_comm_id: w[1],
            private_data: pd
        })),
        (ids, bytes::<220>()).prop_map(|(w, pd)| CmMessage::Dreq(DreqRepr {
            local_comm_id: w[0],
            remote_comm_id: w[1],
            remote_qpn: w[2] & 0xff_ffff,
            private_data: pd,
        })),
        (ids, bytes::<224>()).prop_map(|(w, pd)| CmMessage::Drep(DrepRepr {
            local_comm_id: w[0],
            remote_comm_id: w[1],
            private_data: pd
        })),
        (ids, any::<u64>(), bytes::<216>()).prop_map(|(w, sid, pd)| CmMessage::SidrReq(SidrReqRepr {
            request_id: w[0],
            pkey: w[1] as u16,
            service_id: sid,
            private_data: pd,
        })),
        (ids, any::<u64>(), bytes::<72>(), bytes::<136>()).prop_map(|(w, sid, info, pd)| {
            CmMessage::SidrRep(SidrRepRepr {
                request_id: w[0],
                status: w[1] as u8,
                additional_info_length: w[2] as u8,
                vendor_id: w[3] & 0xff_ffff,
                qpn: w[4] & 0xff_ffff,
                service_id: sid,
                qkey: w[5],
                additional_info: info,
                private_data: pd,
            })
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// parse(emit(x)) == x for every CM message, from a buffer of garbage.
    #[test]
    fn cm_mads_round_trip(message in cm_message(), tid in any::<u64>(), attr_mod in any::<u32>(), fill in any::<u8>()) {
        let repr = CmMadRepr { transaction_id: tid, attribute_modifier: attr_mod, message };
        let mut buf = [fill; 256];
        repr.emit(&mut Mad::new_checked(&mut buf[..]).unwrap()).unwrap();
        let mad = Mad::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(mad.attribute_id(), message.attribute_id());
        prop_assert_eq!(CmMadRepr::parse(&mad), Ok(repr));
        // Emitting is a function of the value alone: reserved bytes do not keep the garbage.
        let mut clean = [0u8; 256];
        repr.emit(&mut Mad::new_checked(&mut clean[..]).unwrap()).unwrap();
        prop_assert_eq!(&buf[..], &clean[..]);
    }

    #[test]
    fn cma_hdrs_round_trip(v6 in any::<bool>(), port in any::<u16>(), a in any::<[u128; 2]>()) {
        use core::net::IpAddr;
        let addr = |x: u128| if v6 { IpAddr::V6(x.into()) } else { IpAddr::V4((x as u32).into()) };
        let repr = CmaHdrRepr { src_port: port, src: addr(a[0]), dst: addr(a[1]) };
        let mut buf = [0xffu8; 36];
        repr.emit(&mut CmaHdr::new_checked(&mut buf[..]).unwrap()).unwrap();
        prop_assert_eq!(CmaHdrRepr::parse(&CmaHdr::new_checked(&buf[..]).unwrap()), Ok(repr));
    }

    #[test]
    fn service_ids_round_trip(ps in any::<u16>(), port in any::<u16>()) {
        let sid = rdma_wire::cma::service_id(RdmaPs(ps), port);
        prop_assert_eq!(rdma_wire::cma::service_id_parts(sid), (RdmaPs(ps), port));
    }

    #[test]
    fn cm_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), attr in 0x10u16..0x1b) {
        let mut b = bytes.clone();
        if b.len() >= 24 {
            b[..4].copy_from_slice(&[1, 7, 2, 3]);
            b[16..18].copy_from_slice(&attr.to_be_bytes());
        }
        rdma_wire::fuzzing::cm_mad(&b);
        rdma_wire::fuzzing::cm_mad(&bytes);
        let _ = CmMessage::parse(attr, &bytes);
    }
}
