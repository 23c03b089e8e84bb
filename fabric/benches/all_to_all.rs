//! Wall time per simulated packet-hop of `rdma-fabric run all-to-all`
//! (leaf-spine, 4 spines, 8 hosts per leaf, 16 KiB per flow, seed 1) as
//! the hosts grow: the per-event cost must not grow with the fabric.
//! Sizes run interleaved, round after round, so that a noisy machine
//! slows every size alike; each size reports the median and the range
//! of its rounds, and the last line the ratio of the slowest median to
//! the fastest.
//!
//! `cargo bench -p rdma-fabric --bench all_to_all` (env:
//! `FABRIC_BENCH_HOSTS=16,32,64,128,256`, `FABRIC_BENCH_ROUNDS=3`;
//! `FABRIC_BENCH_DATA=1` fills every host's region with bytes other than
//! zero first, its time not counted, so that payloads cost what data
//! costs: the fabric's own hosts move zeros, which a zeroed region serves
//! without touching its memory, `RegionMemory::zeroed`). docs/performance.md has the numbers.

use rdma_fabric::scenarios::{all_to_all_fabric, Options, TopologyKind};
use rdma_transport::{Drop, Instant};
use std::time::Duration;

/// This thread's CPU time: on a shared machine the wall clock also
/// measures the neighbours, the CPU clock only this run.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One run: wall and CPU ns per packet-hop, its hop count and its events per hop.
fn run(hosts: usize) -> (f64, f64, u64, f64) {
    let o = Options {
        topology: TopologyKind::LeafSpine { leaves: hosts / 8, spines: 4, hosts_per_leaf: 8 },
        flow_bytes: 16 * 1024,
        cc: rdma_fabric::scenarios::Cc::from_dcqcn(std::env::var_os("FABRIC_BENCH_DCQCN_OFF").is_none()),
        ..Options::default()
    };
    let (started, cpu) = (std::time::Instant::now(), cpu_time());
    let (mut fab, _) = all_to_all_fabric(&o).expect("a valid leaf-spine");
    // The fill is not the simulator's work: its time is taken off.
    let (fill_started, fill_cpu) = (std::time::Instant::now(), cpu_time());
    let data = std::env::var("FABRIC_BENCH_DATA").is_ok_and(|v| v == "1");
    if data {
        let pattern: Vec<u8> = (0..rdma_fabric::host::MAX_MESSAGE as usize).map(|i| (i % 251) as u8 + 1).collect();
        for host in &fab.topo.hosts {
            host.memory.write(0, &pattern[..host.memory.len()]);
        }
    }
    let (fill_wall, fill_cpu) = (fill_started.elapsed(), cpu_time() - fill_cpu);
    fab.run(Instant::ZERO + Duration::from_millis(20), true, &mut |_| {});
    let (wall, cpu) = (started.elapsed() - fill_wall, cpu_time() - cpu - fill_cpu);
    if data {
        // Every host sends the same pattern from offset 0 into offset 0,
        // so nothing a packet reads changes under it: no ICRC drops.
        let bad: u64 =
            fab.topo.hosts.iter().map(|h| h.ep.stats().drops.get(&Drop::IcrcMismatch).copied().unwrap_or(0)).sum();
        assert_eq!(bad, 0, "ICRC drops in data mode");
    }
    let hops = fab.counters.packet_hops.max(1);
    let per = |d: Duration| d.as_nanos() as f64 / hops as f64;
    (per(wall), per(cpu), hops, fab.counters.events as f64 / hops as f64)
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    let v = std::env::var(name).unwrap_or_else(|_| default.into());
    v.split(',').map(|x| x.trim().parse().unwrap_or_else(|_| panic!("{name}: {x:?} is not a number"))).collect()
}

fn main() {
    // As the tool runs (huge pages for its heap: rdma_fabric::huge_pages).
    rdma_fabric::huge_pages::restart_with_huge_pages();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then one quick round.
    let bench = std::env::args().any(|a| a == "--bench");
    let sizes = if bench { env_list("FABRIC_BENCH_HOSTS", "16,32,64,128,256") } else { vec![16] };
    let rounds = if bench { env_list("FABRIC_BENCH_ROUNDS", "3")[0] } else { 1 };
    assert!(sizes.iter().all(|&h| h >= 16 && h % 8 == 0), "hosts: multiples of 8 from 16");
    let mut per_hop: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
    let mut cpu_per_hop: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
    let mut hops = vec![0; sizes.len()];
    for round in 0..rounds {
        for (i, &h) in sizes.iter().enumerate() {
            let (ns, cpu, n, ev) = run(h);
            println!(
                "round {round} hosts {h:>4}: {n:>10} packet-hops, {ev:.2} events per hop, ns per hop: wall {ns:7.1} cpu {cpu:7.1}"
            );
            per_hop[i].push(ns);
            cpu_per_hop[i].push(cpu);
            hops[i] = n;
        }
    }
    let mut medians = (Vec::new(), Vec::new());
    for (i, &h) in sizes.iter().enumerate() {
        let (w, c) = (summary(&mut per_hop[i]), summary(&mut cpu_per_hop[i]));
        println!(
            "hosts {h:>4}: {:>10} packet-hops, ns per hop: wall median {:7.1} range {:.1}-{:.1}, cpu median {:7.1} range {:.1}-{:.1} ({rounds} rounds)",
            hops[i], w.0, w.1, w.2, c.0, c.1, c.2
        );
        medians.0.push(w.0);
        medians.1.push(c.0);
    }
    println!("slowest median / fastest median: wall {:.2}, cpu {:.2}", spread(&medians.0), spread(&medians.1));
}

/// (median, min, max).
fn summary(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn spread(v: &[f64]) -> f64 {
    let (lo, hi) = v.iter().fold((f64::MAX, 0f64), |(lo, hi), &m| (lo.min(m), hi.max(m)));
    hi / lo
}
