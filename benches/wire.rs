//! Wire-format hot paths against the raw CRC they are built on.
//!
//! For a 4 KiB RoCE v2 WRITE packet: `crc32fast` alone over the bytes the
//! ICRC covers (the baseline), parse + ICRC verify, and build + ICRC with
//! the payload copied in or already in place. The
//! goal is >= 0.9x the baseline's throughput; `scripts/bench-wire.sh` runs
//! this and prints the ratios.

use core::net::Ipv4Addr;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rdma_wire::*;
use std::hint::black_box;

fn write_packet(payload: usize) -> (RoceV2Repr, Vec<u8>) {
    let mut t = TransportRepr::new(BthRepr::new(Opcode::RC_RDMA_WRITE_MIDDLE, 0x11, Psn::new(1000)));
    t.reth = None;
    let repr = RoceV2Repr {
        ip: IpRepr::V4(Ipv4Repr {
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            src: Ipv4Addr::new(127, 0, 0, 1),
            dst: Ipv4Addr::new(127, 0, 0, 2),
        }),
        udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT, checksum: 0 },
        transport: t,
    };
    (repr, (0..payload).map(|i| i as u8).collect())
}

fn bench(c: &mut Criterion) {
    let (repr, payload) = write_packet(4096);
    let mut packet = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
    repr.emit(&mut packet, &payload).unwrap();
    let covered = packet.len() - 4;

    let mut g = c.benchmark_group("wire_4k");
    g.throughput(Throughput::Bytes(packet.len() as u64));
    g.bench_function("crc32fast_baseline", |b| b.iter(|| crc32fast::hash(black_box(&packet[..covered]))));
    g.bench_function("parse_verify", |b| {
        b.iter(|| {
            let p = RoceV2Packet::new_checked(black_box(&packet[..])).unwrap();
            assert!(p.icrc_ok());
            p.transport().payload().len()
        })
    });
    let mut out = vec![0u8; packet.len()];
    g.bench_function("build_icrc_copy", |b| b.iter(|| repr.emit(black_box(&mut out), black_box(&payload)).unwrap()));
    // The datapath's way: the payload is already in the buffer (read there
    // from a memory region); headers, pad and ICRC are written around it.
    g.bench_function("build_icrc_in_place", |b| {
        b.iter(|| repr.emit_in_place(black_box(&mut out), black_box(payload.len())).unwrap())
    });
    g.finish();

    let (ack, _) = write_packet(0);
    let mut small = vec![0u8; 64];
    let n = ack.emit(&mut small, &[]).unwrap();
    let mut g = c.benchmark_group("wire_header_only");
    g.bench_function("parse_verify", |b| {
        b.iter(|| RoceV2Packet::new_checked(black_box(&small[..n])).unwrap().icrc_ok())
    });
    g.bench_function("build_icrc", |b| b.iter(|| ack.emit(black_box(&mut small), &[]).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
