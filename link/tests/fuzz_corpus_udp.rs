//! The UDP receive path's fuzz body (`rdma_link::fuzzing::udp_receive`)
//! over its seed corpus, `fuzz/seeds/udp_receive/`: real RoCE v2 packets
//! as a UDP socket hands them up (single, GRO super-datagrams, truncated;
//! IPv4 with Identifications to recover, and IPv6; arriving with TOS 0,
//! ECT(0) and CE, DSCP 26, and TTLs from 0 to 255).
//!
//! The corpus is made by `write_the_seed_corpus` (ignored):
//! `SOFTROCE_WRITE_CORPUS=1 cargo test -p rdma-link --test fuzz_corpus_udp -- --ignored`.

use rdma_link::fuzzing::{udp_flags, udp_receive, UDP_RECEIVE_HEADER};
use rdma_wire::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/udp_receive")
}

#[test]
fn the_udp_receive_body_runs_clean_over_its_seed_corpus() {
    let n = rdma_wire::fuzzing::replay_seeds("udp_receive", |d| {
        udp_receive(d);
    });
    assert!(n >= 24, "the seed corpus has {n} files");
}

/// The oracles can fail: a datagram whose packets would need an IPv4
/// total length past 65535 is dropped as malformed, not wrapped (what a
/// u16 cast did), by the engine given its typed headers as by the one
/// given written ones.
#[test]
fn an_oversized_packet_is_dropped_not_wrapped() {
    let mut input = vec![0u8; UDP_RECEIVE_HEADER];
    input.extend(std::iter::repeat_n(0xab, 65_520));
    udp_receive(&input);
}

/// A RoCE v2 packet of `payload` bytes from 127.1.0.2 (or fd00::2) to the
/// fuzz body's device, sent with IPv4 Identification `ident`: the part
/// after the UDP header, as a socket hands it up.
fn packet(v6: bool, opcode: Opcode, psn: u32, payload: usize, ident: u16) -> Vec<u8> {
    let ip = if v6 {
        IpRepr::V6(Ipv6Repr {
            traffic_class: 0,
            flow_label: 0,
            next_header: 17,
            hop_limit: 64,
            src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            dscp: 0,
            ecn: 0,
            ident,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            src: Ipv4Addr::new(127, 1, 0, 2),
            dst: Ipv4Addr::new(127, 0, 0, 1),
        })
    };
    let mut t = TransportRepr::new(BthRepr::new(opcode, 0x11, Psn::new(psn)));
    if opcode == Opcode::RC_RDMA_WRITE_FIRST || opcode == Opcode::RC_RDMA_WRITE_ONLY {
        t.reth = Some(RethRepr { va: 0x1000, rkey: 0x101, dma_len: payload as u32 * 4 });
    }
    if opcode == Opcode::RC_ACKNOWLEDGE {
        t.aeth = Some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn: 3 });
    }
    let repr = RoceV2Repr { ip, udp: UdpRepr { src_port: 0xc011, dst_port: ROCE_V2_PORT, checksum: 0 }, transport: t };
    let data: Vec<u8> = (0..payload).map(|i| (i * 7 + psn as usize) as u8).collect();
    let mut buf = vec![0u8; 8192];
    let len = repr.emit(&mut buf, &data).unwrap();
    let hl = if v6 { 40 } else { 20 };
    buf[hl + 8..len].to_vec()
}

/// An input of the fuzz body: flags, parameters (segment size, sender port
/// 0xc011 and address 0.2, TOS, TTL), datagram.
fn input(flags: u8, seg: u16, misplace: [u8; 2], (tos, ttl): (u8, u8), datagram: &[u8]) -> Vec<u8> {
    let s = seg.to_le_bytes();
    let mut v = vec![flags, s[0], s[1], 0x11, 0xc0, 0, 2, misplace[0], misplace[1], tos, ttl];
    assert_eq!(v.len(), UDP_RECEIVE_HEADER);
    v.extend_from_slice(datagram);
    v
}

#[test]
#[ignore = "writes the seed corpus: SOFTROCE_WRITE_CORPUS=1"]
fn write_the_seed_corpus() {
    if std::env::var_os("SOFTROCE_WRITE_CORPUS").is_none() {
        return;
    }
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let mut n = 0;
    let mut put = |name: &str, data: Vec<u8>| {
        udp_receive(&data); // every seed passes the oracles
        std::fs::write(dir.join(format!("{n:02}-{name}")), data).unwrap();
        n += 1;
    };
    for v6 in [false, true] {
        let fam = if v6 { "v6" } else { "v4" };
        let flags = if v6 { udp_flags::IPV6 } else { 0 };
        // Single packets, Identification 0 and one to recover.
        put(&format!("{fam}-send-only"), input(flags, 0, [0, 0], (0, 64), &packet(v6, Opcode::RC_SEND_ONLY, 5, 16, 0)));
        // DSCP 26 with CE: counted by the engine.
        put(
            &format!("{fam}-send-only-ce"),
            input(flags, 0, [0, 0], (0x6b, 1), &packet(v6, Opcode::RC_SEND_ONLY, 5, 16, 0)),
        );
        put(&format!("{fam}-ack"), input(flags, 0, [0, 0], (0x68, 255), &packet(v6, Opcode::RC_ACKNOWLEDGE, 9, 0, 0)));
        put(
            &format!("{fam}-write-only-ident-ce"),
            input(flags, 0, [0, 0], (0x03, 9), &packet(v6, Opcode::RC_RDMA_WRITE_ONLY, 1, 64, 0x1234)),
        );
        // GRO super-datagrams: equal segments and a short last one, each
        // numbered on from a first Identification as a GSO send is.
        for (count, size, last, first_ident) in
            [(3usize, 256usize, 100usize, 0u16), (4, 1024, 1024, 7), (8, 64, 8, 0xfffe)]
        {
            let mut d = Vec::new();
            let mut seg = 0;
            for k in 0..count {
                // Middles and a last: one header size, as GRO coalesces only equal segments.
                let (op, len) = match k {
                    k if k + 1 == count => (Opcode::RC_RDMA_WRITE_LAST, last),
                    _ => (Opcode::RC_RDMA_WRITE_MIDDLE, size),
                };
                let p = packet(v6, op, k as u32, len, first_ident.wrapping_add(k as u16));
                if k == 0 {
                    seg = p.len();
                }
                d.extend_from_slice(&p);
            }
            let gro = flags | udp_flags::GRO;
            // GRO coalesces packets of one TOS and TTL: ECT(0) (data), or
            // CE for one run; TTLs of a near hop, the default, none left.
            let ecn = if first_ident == 7 {
                (0x6b, 17)
            } else if count == 3 {
                (0x6a, 64)
            } else {
                (0x6a, 0)
            };
            put(&format!("{fam}-gro-{count}x{size}-last{last}"), input(gro, seg as u16, [0, 0], ecn, &d));
            // Merged, but come up without the segment size (a shared
            // port's GRO went off while it waited).
            put(
                &format!("{fam}-gro-{count}x{size}-maybe-merged"),
                input(flags | udp_flags::MAYBE_MERGED, 0, [0, 0], ecn, &d),
            );
            // Truncated: the last segment cut short, and cut inside a header.
            put(&format!("{fam}-gro-{count}x{size}-cut"), input(gro, seg as u16, [0, 0], ecn, &d[..d.len() - 5]));
            put(&format!("{fam}-gro-{count}x{size}-cut-header"), input(gro, seg as u16, [0, 0], ecn, &d[..seg + 6]));
            // A segment size the kernel would not give (0, 1, longer than the datagram).
            put(&format!("{fam}-gro-{count}x{size}-seg1"), input(gro, 1, [0, 0], ecn, &d[..40.min(d.len())]));
        }
        // A truncated single packet, an empty datagram, a misplaced one, the other family.
        let p = packet(v6, Opcode::RC_SEND_ONLY, 5, 16, 3);
        put(&format!("{fam}-send-truncated"), input(flags, 0, [0, 0], (0x03, 0), &p[..p.len() / 2]));
        put(&format!("{fam}-empty"), input(flags, 0, [0, 0], (0, 64), &[]));
        put(&format!("{fam}-misplaced"), input(flags | udp_flags::MISPLACED, 0, [30, 2], (0x03, 9), &p));
        put(&format!("{fam}-other-family"), input(flags | udp_flags::OTHER_FAMILY, 0, [0, 0], (0x03, 1), &p));
    }
    assert!(n >= 24);
}

/// A CE mark on the datagram reaches the engine: the oracle counts it on
/// every accepted packet (and fails if the typed headers lost it).
#[test]
fn a_ce_mark_reaches_the_engine_through_the_datagram_headers() {
    for v6 in [false, true] {
        let flags = if v6 { udp_flags::IPV6 } else { 0 };
        let accepted = udp_receive(&input(flags, 0, [0, 0], (0x6b, 64), &packet(v6, Opcode::RC_SEND_ONLY, 5, 16, 0)));
        assert_eq!(accepted, 1, "the packet, made by the wire crate's emitter, passes the ICRC check");
        // Sent with an Identification the socket does not show: recovered.
        let accepted =
            udp_receive(&input(flags, 0, [0, 0], (0x6b, 64), &packet(v6, Opcode::RC_SEND_ONLY, 5, 16, 0x1234)));
        assert_eq!(accepted, 1, "IPv6 has no Identification; IPv4's is recovered");
    }
}
