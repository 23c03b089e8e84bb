//! How fast the fabric simulates: packet-hops (link traversals) per
//! wall-clock second on one core, with the real engine at every host, on
//! leaf-spines of 8, 64 and 512 hosts. Every host sends a long RDMA WRITE
//! flow with DCQCN to a host on the next leaf, so every packet crosses a
//! spine; the run is seeded, so each size does the same work every time.
//!
//! `cargo bench -p rdma-fabric --bench scale` (criterion prints elem/s:
//! packet-hops per second). docs/congestion-control.md has the numbers.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rdma_fabric::fabric::Fabric;
use rdma_fabric::link::Link;
use rdma_fabric::switch::Red;
use rdma_fabric::topology::{Settings, Topology};
use rdma_transport::cc::DcqcnParams;
use rdma_transport::Instant;
use std::time::Duration;

const RATE: u64 = 40_000_000_000;

/// (leaves, spines, hosts per leaf, simulated time)
const SIZES: [(usize, usize, usize, Duration); 3] = [
    (2, 2, 4, Duration::from_micros(2000)),
    (8, 4, 8, Duration::from_micros(250)),
    (32, 8, 16, Duration::from_micros(40)),
];

fn fabric(leaves: usize, spines: usize, per_leaf: usize) -> Fabric {
    let s = Settings {
        link: Link::new(RATE, Duration::from_micros(1)),
        red: Red::PAPER,
        buffer_bytes: 1_000_000,
        shared_buffer_bytes: None,
        cc: Some(std::sync::Arc::new(DcqcnParams::paper(RATE))),
        seed: 1,
        pfc: None,
    };
    let topo = Topology::leaf_spine(leaves, spines, per_leaf, &s);
    let n = topo.hosts.len();
    let mut f = Fabric::new(topo, 1);
    for h in 0..n {
        f.add_flow(h, (h + per_leaf) % n, None, Instant::ZERO);
    }
    f
}

/// Runs one fabric for `t`; returns the link traversals it simulated.
fn hops(f: &mut Fabric, t: Duration) -> u64 {
    f.run(Instant::ZERO + t, false, &mut |_| {});
    let sent: u64 = f.topo.hosts.iter().map(|h| h.ep.stats().packets_sent).sum();
    sent + f.counters.packets_switched
}

fn scale(c: &mut Criterion) {
    let mut g = c.benchmark_group("fabric_leaf_spine");
    g.sample_size(10);
    for (leaves, spines, per_leaf, t) in SIZES {
        let n = leaves * per_leaf;
        let work = hops(&mut fabric(leaves, spines, per_leaf), t);
        g.throughput(Throughput::Elements(work));
        g.bench_function(format!("{n}_hosts"), |b| {
            b.iter_batched(
                || fabric(leaves, spines, per_leaf),
                |mut f| hops(&mut f, t),
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, scale);
criterion_main!(benches);
