//! Wall and CPU time of the partitioned loop (`--threads`, fabric/src/parallel.rs)
//! against its thread count: an all-to-all (leaf-spine of 16 hosts a leaf,
//! 8 spines, 16 KiB a flow) and a ring all-reduce of 16 MiB over the same
//! leaves, each run with every thread count in turn, round after round
//! (interleaved, so that a noisy machine slows each alike). Prints each
//! run, then per workload and thread count the median and range of wall
//! and CPU time (CPU: every thread of the process), the messages that
//! crossed a partition boundary and the windows run, and checks that
//! every thread count gave the same run.
//!
//! `cargo bench -p rdma-fabric --bench threads` (env:
//! `FABRIC_BENCH_HOSTS=128`, `FABRIC_BENCH_THREADS=1,2`,
//! `FABRIC_BENCH_ROUNDS=3`). docs/performance.md has the numbers.

use rdma_fabric::collective::report::Kind;
use rdma_fabric::collective::{run as run_collective, Algorithm, CollectiveOptions};
use rdma_fabric::scenarios::{all_to_all_fabric, Options, TopologyKind};
use rdma_transport::Instant;
use std::time::Duration;

/// The CPU time of every thread of this process so far.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_PROCESS_CPUTIME_ID");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

struct Run {
    wall: f64,
    cpu: f64,
    /// What must not depend on the thread count.
    fingerprint: String,
    /// (messages across partitions, packet-hops, windows), where known.
    crossing: Option<(u64, u64, u64)>,
}

fn options(hosts: usize, threads: usize) -> Options {
    Options {
        topology: TopologyKind::LeafSpine { leaves: hosts / 16, spines: 8, hosts_per_leaf: 16 },
        flow_bytes: 16 * 1024,
        threads: Some(threads),
        ..Options::default()
    }
}

fn all_to_all(hosts: usize, threads: usize) -> Run {
    let (started, cpu) = (std::time::Instant::now(), cpu_time());
    let (mut fab, _) = all_to_all_fabric(&options(hosts, threads)).expect("a valid leaf-spine");
    fab.run(Instant::ZERO + Duration::from_millis(20), true, &mut |_| {});
    let (wall, cpu) = (started.elapsed().as_secs_f64(), (cpu_time() - cpu).as_secs_f64());
    let c = fab.counters;
    let fingerprint = format!("{:?} {} {} {:?}", fab.now, c.packet_hops, c.events, fab.delivered());
    Run { wall, cpu, fingerprint, crossing: Some((c.messages, c.packet_hops, c.windows)) }
}

fn allreduce(hosts: usize, threads: usize) -> Run {
    let c = CollectiveOptions {
        kind: Kind::AllReduce,
        algorithm: Algorithm::Ring,
        hosts,
        size_bytes: 16 << 20,
        cross_nic: false,
    };
    let (started, cpu) = (std::time::Instant::now(), cpu_time());
    let r = run_collective(&c, &options(hosts, threads), &mut |_, _| {}).expect("the collective runs");
    let (wall, cpu) = (started.elapsed().as_secs_f64(), (cpu_time() - cpu).as_secs_f64());
    assert_eq!(r.ranks_unfinished, 0);
    Run { wall, cpu, fingerprint: serde_json::to_string(&r).unwrap(), crossing: None }
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    let v = std::env::var(name).unwrap_or_else(|_| default.into());
    v.split(',').map(|x| x.trim().parse().unwrap_or_else(|_| panic!("{name}: {x:?} is not a number"))).collect()
}

/// (median, min, max).
fn summary(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    // As the tool runs (huge pages for its heap: rdma_fabric::huge_pages).
    rdma_fabric::huge_pages::restart_with_huge_pages();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then one quick round.
    let bench = std::env::args().any(|a| a == "--bench");
    let hosts = if bench { env_list("FABRIC_BENCH_HOSTS", "128")[0] } else { 32 };
    let threads = env_list("FABRIC_BENCH_THREADS", "1,2");
    let rounds = if bench { env_list("FABRIC_BENCH_ROUNDS", "3")[0] } else { 1 };
    assert!(hosts >= 32 && hosts % 16 == 0, "hosts: multiples of 16 from 32");
    type Workload = fn(usize, usize) -> Run;
    let workloads: [(&str, Workload); 2] = [("all-to-all", all_to_all), ("ring all-reduce", allreduce)];
    for (name, f) in workloads {
        let (mut wall, mut cpu) = (vec![Vec::new(); threads.len()], vec![Vec::new(); threads.len()]);
        let mut first: Option<String> = None;
        let mut crossing = None;
        for round in 0..rounds {
            for (i, &t) in threads.iter().enumerate() {
                let r = f(hosts, t);
                let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
                let load = load.split(' ').next().unwrap_or("?").to_string();
                println!(
                    "{name} {hosts} hosts, round {round}, {t} threads: wall {:.2} s, cpu {:.2} s, load {load}",
                    r.wall, r.cpu
                );
                let fp = first.get_or_insert_with(|| r.fingerprint.clone());
                assert_eq!(&r.fingerprint, fp, "{name}: {t} threads gave another run");
                wall[i].push(r.wall);
                cpu[i].push(r.cpu);
                crossing = r.crossing;
            }
        }
        for (i, &t) in threads.iter().enumerate() {
            let (w, c) = (summary(&mut wall[i]), summary(&mut cpu[i]));
            println!(
                "{name} {hosts} hosts, {t} threads: wall median {:.2} s range {:.2}-{:.2}, cpu median {:.2} s range {:.2}-{:.2} ({rounds} rounds)",
                w.0, w.1, w.2, c.0, c.1, c.2
            );
        }
        if let Some((m, hops, w)) = crossing {
            println!(
                "{name} {hosts} hosts: {m} messages across partitions of {hops} packet-hops ({:.1} %), {w} windows; the same run on every thread count",
                100.0 * m as f64 / hops.max(1) as f64
            );
        }
    }
}
