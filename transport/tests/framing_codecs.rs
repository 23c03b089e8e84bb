//! Property tests of the engine's framing per link kind: what
//! `Framer::frame` writes for RoCE v1 and native IB parses back (with the
//! wire crate's independent parsers) to exactly the headers asked for —
//! GIDs, traffic class and hop limit in the GRH; DLID, SLID, SL and an
//! LNH that says whether a GRH follows in the LRH; the transport headers
//! and the payload — with a good ICRC (and VCRC), and the frame's length
//! is the one the LRH or GRH declares. RoCE v2 is unchanged: its packets
//! are byte for byte those of the wire crate's `RoceV2Repr`.

use core::net::{IpAddr, Ipv6Addr};
use proptest::prelude::*;
use rdma_transport::framing::Framer;
use rdma_transport::{AddressVector, LinkKind, MAX_PACKET};
use rdma_wire::*;

/// A transport header stack consistent with a random opcode, and a payload.
fn transport() -> impl Strategy<Value = (TransportRepr, Vec<u8>)> {
    let all: Vec<Opcode> = Opcode::all().map(|(op, _)| op).collect();
    (proptest::sample::select(all), any::<[u64; 3]>(), any::<[u32; 4]>(), 0u8..0x80, 0usize..1200).prop_map(
        |(op, w, d, syn, len)| {
            let info = op.info().expect("a listed opcode");
            let h = info.headers;
            let mut t = TransportRepr::new(BthRepr::new(op, d[0] & 0xff_ffff, Psn::new(d[1] & 0xff_ffff)));
            let has = |x| h.contains(x);
            t.deth = has(HeaderSet::DETH).then_some(DethRepr { qkey: d[2], src_qp: d[3] & 0xff_ffff });
            t.xrc_srq = has(HeaderSet::XRCETH).then_some(d[2] & 0xff_ffff);
            t.feth = has(HeaderSet::FETH)
                .then_some(FethRepr { placement: (d[1] & 0xf) as u8, selectivity: ((d[1] >> 4) & 3) as u8 });
            t.reth = has(HeaderSet::RETH).then_some(RethRepr { va: w[0], rkey: d[3], dma_len: d[2] });
            t.atomic_eth = has(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
                va: w[0],
                rkey: d[3],
                swap_add: w[1],
                compare: w[2],
            });
            t.aeth =
                has(HeaderSet::AETH).then_some(AethRepr { syndrome: Syndrome::from_byte(syn), msn: d[1] & 0xff_ffff });
            t.atomic_ack_eth = has(HeaderSet::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr { orig: w[2] });
            t.imm_dt = has(HeaderSet::IMM_DT).then_some(d[0]);
            t.ieth = has(HeaderSet::IETH).then_some(d[1]);
            let payload: Vec<u8> =
                if info.has_payload { (0..len).map(|i| (i as u8).wrapping_mul(13) ^ syn).collect() } else { vec![] };
            t.bth.pad_count = pad_for(payload.len()) as u8;
            (t, payload)
        },
    )
}

fn gid() -> impl Strategy<Value = IpAddr> {
    // Link-local and other GIDs; never an IPv4-mapped one (that prints as IPv4).
    (any::<u64>(), any::<bool>()).prop_map(|(low, link_local)| {
        let high: u64 = if link_local { 0xfe80 << 48 } else { 0x2001_0db8 << 32 };
        IpAddr::V6(Ipv6Addr::from((u128::from(high) << 64) | u128::from(low | 1)))
    })
}

fn av() -> impl Strategy<Value = AddressVector> {
    (gid(), any::<u8>(), any::<u8>(), 1u16..0xc000, 0u8..16, any::<bool>()).prop_map(|(g, hl, tc, dlid, sl, global)| {
        let dest = if global { g } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
        AddressVector { dest, hop_limit: hl, traffic_class: tc, dlid, sl }
    })
}

fn frame(framer: &Framer, av: &AddressVector, t: &TransportRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_PACKET];
    let n = framer
        .frame(&mut buf, av, 0xc123, t, payload.len(), |d| {
            d.copy_from_slice(payload);
            Ok::<(), ()>(())
        })
        .expect("fill cannot fail");
    buf.truncate(n);
    buf
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn roce_v1_frames_parse_back_to_what_was_asked(local in gid(), av in av(), (t, payload) in transport()) {
        let av = if av.is_global() { av } else { AddressVector { dest: local, ..av } };
        let framer = Framer { link: LinkKind::RoceV1, ..Framer::roce_v2(local) };
        let bytes = frame(&framer, &av, &t, &payload);
        let p = RoceV1Packet::new_checked(&bytes[..]).expect("a RoCE v1 packet");
        prop_assert!(p.icrc_ok());
        let r = RoceV1Repr::parse(&p).unwrap();
        let IpAddr::V6(src) = local else { unreachable!() };
        let IpAddr::V6(dst) = av.dest else { unreachable!() };
        let grh = GrhRepr {
            traffic_class: av.traffic_class,
            flow_label: 0,
            next_header: ipv6::NEXT_HEADER_IBA,
            hop_limit: av.hop_limit,
            src,
            dst,
        };
        prop_assert_eq!(r, RoceV1Repr { grh, transport: t });
        let tp = p.transport();
        prop_assert_eq!(tp.payload(), &payload[..]);
        prop_assert_eq!(bytes.len(), 40 + usize::from(p.grh().payload_len()));
    }

    #[test]
    fn ib_frames_parse_back_to_what_was_asked(local in gid(), lid in 1u16..0xc000, av in av(), (t, payload) in transport()) {
        let framer = Framer { link: LinkKind::Ib, lid, ..Framer::roce_v2(local) };
        let bytes = frame(&framer, &av, &t, &payload);
        let p = IbPacket::new_checked(&bytes[..]).expect("an IB packet");
        prop_assert!(p.icrc_ok() && p.vcrc_ok());
        let r = IbRepr::parse(&p).unwrap();
        let lnh = if av.is_global() { Lnh::IbaGlobal } else { Lnh::IbaLocal };
        prop_assert_eq!(r.lrh, LrhRepr { vl: 0, sl: av.sl, lnh, dlid: av.dlid, slid: lid });
        prop_assert_eq!(r.grh.is_some(), av.is_global());
        if let Some(g) = r.grh {
            prop_assert_eq!((IpAddr::V6(g.src), IpAddr::V6(g.dst)), (local, av.dest));
            prop_assert_eq!((g.traffic_class, g.hop_limit), (av.traffic_class, av.hop_limit));
        }
        prop_assert_eq!(r.transport, t);
        let tp = p.transport();
        prop_assert_eq!(tp.payload(), &payload[..]);
        prop_assert_eq!(bytes.len(), usize::from(p.lrh().pkt_len()) * 4 + 2, "PktLen covers LRH..ICRC, the VCRC follows");
    }

    #[test]
    fn roce_v2_frames_are_the_wire_crates_packets(src in any::<u32>(), dst in any::<u32>(), tc in any::<u8>(), hl in any::<u8>(), (t, payload) in transport()) {
        let (local, dest) = (IpAddr::from(src.to_be_bytes()), IpAddr::from(dst.to_be_bytes()));
        let av = AddressVector { traffic_class: tc, hop_limit: hl, ..AddressVector::new(dest) };
        let bytes = frame(&Framer::roce_v2(local), &av, &t, &payload);
        let IpAddr::V4(s) = local else { unreachable!() };
        let IpAddr::V4(d) = dest else { unreachable!() };
        let repr = RoceV2Repr {
            ip: IpRepr::V4(Ipv4Repr { dscp: tc >> 2, ecn: tc & 3, ident: 0, dont_frag: true, ttl: hl, protocol: 17, src: s, dst: d }),
            udp: UdpRepr { src_port: 0xc123, dst_port: ROCE_V2_PORT, checksum: 0 },
            transport: t,
        };
        let mut want = vec![0u8; MAX_PACKET];
        let n = repr.emit(&mut want, &payload).unwrap();
        prop_assert_eq!(&bytes[..], &want[..n]);
    }
}
