//! `--threads N` (issue 32): the fabric partitioned by pod and run in
//! windows of the link delay gives the same JSON, byte for byte, with 1, 2
//! and 4 threads, and its runs are physically sane: every flow completes
//! with every byte delivered, every rank of a collective finishes no
//! sooner than its lower bound. The scenarios are chosen to draw on each
//! partition's random generator (RED marks under DCQCN), to drop, and to
//! send PFC frames across partitions, so that a partition whose result
//! depended on the thread count (a shared generator, a message merged in
//! arrival order) would fail them. InfiniBand runs partitioned too, and
//! with one partition the partitioned loop is the single queue.

use core::time::Duration;
use rdma_fabric::collective::report::{CollectiveReport, Kind};
use rdma_fabric::collective::{run as run_collective, Algorithm, CollectiveOptions};
use rdma_fabric::parallel::partition;
use rdma_fabric::report::Report;
use rdma_fabric::scenarios::{all_to_all_fabric, run, Cc, LinkKind, Options, ScenarioError, TopologyKind};
use rdma_transport::Instant;

/// 4 leaves of 4 hosts over 2 spines (2:1): four partitions, each with a spine or not.
fn leaf_spine() -> TopologyKind {
    TopologyKind::LeafSpine { leaves: 4, spines: 2, hosts_per_leaf: 4 }
}

fn all_to_all(o: &Options) -> Report {
    run("all-to-all", o, &mut |_, _| {}).expect("all-to-all runs")
}

fn json<T: serde::Serialize>(r: &T) -> String {
    serde_json::to_string(r).expect("a report serialises")
}

/// `f` with 1, 2 and 4 threads: the three JSONs must be one.
fn same_for_every_thread_count<T: serde::Serialize>(what: &str, f: impl Fn(usize) -> T) -> T {
    let one = f(1);
    let j = json(&one);
    for t in [2, 4] {
        assert_eq!(json(&f(t)), j, "{what}: --threads {t} differs from --threads 1");
    }
    one
}

#[test]
fn an_all_to_all_with_dcqcn_and_drops_is_the_same_on_1_2_and_4_threads() {
    let base =
        Options { topology: leaf_spine(), flow_bytes: 64 * 1024, buffer_bytes: Some(40_000), ..Options::default() };
    assert_eq!(base.cc, Cc::Dcqcn);
    let r = same_for_every_thread_count("all-to-all", |t| all_to_all(&Options { threads: Some(t), ..base }));
    assert_eq!(r.flows_unfinished, 0, "every flow completes");
    assert_eq!(r.flows.len(), 16 * 15);
    assert!(r.ecn_marks > 0 && r.cnps > 0, "RED marks (each partition's generator) and DCQCN reacts: {}", json(&r));
    assert!(r.drops > 0 && r.retransmits > 0, "a 40 KB port buffer drops, the engine retransmits: {}", json(&r));
    // A different seed is a different run (the comparison can tell).
    let other = all_to_all(&Options { threads: Some(2), seed: 2, ..base });
    assert_ne!(json(&other), json(&r));
}

#[test]
fn an_all_to_all_with_pfc_pausing_across_partitions_is_the_same_on_1_2_and_4_threads() {
    let base = Options {
        topology: leaf_spine(),
        flow_bytes: 64 * 1024,
        pfc: true,
        cc: Cc::None,
        buffer_bytes: Some(60_000),
        ..Options::default()
    };
    let r = same_for_every_thread_count("all-to-all, PFC", |t| all_to_all(&Options { threads: Some(t), ..base }));
    assert_eq!(r.flows_unfinished, 0);
    assert!(r.pauses > 0 && r.resumes > 0, "PFC pauses and resumes: {}", json(&r));
    assert_eq!(r.drops, 0, "lossless");
}

#[test]
fn every_byte_of_an_all_to_all_is_delivered_whatever_the_thread_count() {
    let o = Options { topology: leaf_spine(), flow_bytes: 32 * 1024, ..Options::default() };
    let mut seen = None;
    for t in [1, 2, 4] {
        let (mut fab, _) = all_to_all_fabric(&Options { threads: Some(t), ..o }).unwrap();
        assert_eq!(partition(&fab.topo).parts, 4);
        fab.run(Instant::ZERO + Duration::from_millis(20), true, &mut |_| {});
        assert!(fab.flows.iter().all(|f| f.finish.is_some() && f.completed == o.flow_bytes), "{t} threads");
        // The network delivered at least every byte (retransmissions count again).
        assert!(fab.delivered().iter().all(|&d| d >= o.flow_bytes), "{t} threads");
        let last = fab.flows.iter().filter_map(|f| f.finish).max().unwrap();
        assert_eq!(fab.now, last, "a run that stops when done ends at the last completion");
        let got = (fab.now, fab.counters, fab.delivered(), fab.message_latency_ns.clone());
        match &seen {
            None => seen = Some(got),
            Some(s) => assert_eq!(&got, s, "{t} threads"),
        }
    }
}

fn allreduce(threads: usize) -> CollectiveReport {
    let c = CollectiveOptions {
        kind: Kind::AllReduce,
        algorithm: Algorithm::Ring,
        hosts: 16,
        size_bytes: 1 << 20,
        cross_nic: false,
    };
    let o = Options { topology: leaf_spine(), threads: Some(threads), ..Options::default() };
    run_collective(&c, &o, &mut |_, _| {}).expect("the collective runs")
}

#[test]
fn a_ring_all_reduce_over_four_leaves_is_the_same_on_1_2_and_4_threads() {
    let r = same_for_every_thread_count("ring all-reduce", allreduce);
    assert!(!r.failed);
    assert_eq!(r.ranks_unfinished, 0);
    assert_eq!(r.rank_completion_us.len(), 16);
    let (jct, bound) = (r.jct_us.unwrap(), r.lower_bound_us.unwrap());
    assert!(jct >= bound && jct < 3.0 * bound, "jct {jct} us against the bound {bound} us");
    assert_eq!(r.simulated_us, jct, "the run ends when its last rank does");
}

#[test]
fn a_pfc_deadlock_is_found_at_the_same_time_on_any_thread_count() {
    let o = Options { pfc: true, ..Options::default() };
    let r = same_for_every_thread_count("pfc-deadlock", |t| {
        run("pfc-deadlock", &Options { threads: Some(t), ..o }, &mut |_, _| {}).unwrap()
    });
    assert_eq!(r.deadlock, Some(true));
    assert!(r.deadlock_us.is_some_and(|t| t > 0.0));
}

#[test]
fn threads_are_at_least_one() {
    let zero = Options { topology: leaf_spine(), threads: Some(0), ..Options::default() };
    let e = run("all-to-all", &zero, &mut |_, _| {}).unwrap_err();
    assert!(matches!(&e, ScenarioError::BadOption(m) if m.contains("--threads 0")), "{e}");
}

/// InfiniBand: credits cross partitions as flow-control packets, like
/// data; the same JSON on 1, 2 and 4 threads, every flow done, nothing
/// dropped; a credit loop is found at the same time on any thread count.
#[test]
fn an_ib_all_to_all_and_an_ib_credit_loop_are_the_same_on_1_2_and_4_threads() {
    let base = Options { link: LinkKind::Ib, topology: leaf_spine(), flow_bytes: 32 * 1024, ..Options::default() };
    let r = same_for_every_thread_count("IB all-to-all", |t| all_to_all(&Options { threads: Some(t), ..base }));
    assert_eq!(r.flows_unfinished, 0);
    assert_eq!(r.drops, 0, "lossless by credits");
    let ib = r.ib.as_ref().expect("an IB section");
    assert!(ib.credit_stalls > 0, "senders wait for credits: {}", json(&r));
    let ring = Options { link: LinkKind::Ib, duration: Some(Duration::from_micros(600)), ..Options::default() };
    let r = same_for_every_thread_count("ib-ring", |t| {
        run("ib-ring", &Options { threads: Some(t), ..ring }, &mut |_, _| {}).unwrap()
    });
    assert_eq!(r.deadlock, Some(true), "min-hop routes close a credit loop");
}

/// With one partition (one switch) and nothing that needs a generator of
/// its own, the partitioned loop is the single queue, byte for byte: the
/// same handlers in the same order. (A sample at T runs before the events
/// at T rather than among them, which only PFC's queue samples show, so
/// these runs have no PFC.)
#[test]
fn with_one_partition_the_partitioned_loop_is_the_single_queue() {
    let runs = [
        ("incast", Options::default()),
        ("dcqcn-fairness", Options { duration: Some(Duration::from_millis(2)), ..Options::default() }),
        ("incast", Options { link: LinkKind::Ib, fanin: 4, flow_bytes: 128 * 1024, ..Options::default() }),
    ];
    for (name, o) in runs {
        let single = json(&run(name, &o, &mut |_, _| {}).unwrap());
        for t in [1, 2] {
            let r = run(name, &Options { threads: Some(t), ..o }, &mut |_, _| {}).unwrap();
            assert_eq!(json(&r), single, "{name} {:?}, --threads {t}", o.link);
        }
    }
}

/// What `rdma-fabric run ...` prints, as text.
fn cli(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-fabric")).arg("run").args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The check through the command line: the same seed gives the
/// same JSON with 1 thread and with 16 (8 partitions here: 8 leaves of 2
/// hosts, so 16 threads are clamped to 8, each with a partition).
#[test]
fn the_command_line_prints_the_same_json_with_1_and_16_threads() {
    let a2a = "all-to-all --topology leaf-spine --leaves 8 --hosts-per-leaf 2 --spines 2 --flow-kb 8 --seed 7 --json";
    let args: Vec<&str> = a2a.split(' ').collect();
    let with = |t: &str| cli(&[&args[..], &["--threads", t]].concat());
    let one = with("1");
    for t in ["3", "16"] {
        assert_eq!(with(t), one, "--threads {t}");
    }
    let v: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(v["flows_unfinished"], 0, "{v}");
}

/// HPCC partitioned: every partition stamps at its own switches' egress
/// and echoes at its own hosts, and the stamps cross partitions only
/// inside the packets. The same JSON on 1, 2 and 4 threads, the telemetry
/// reaches the senders (fewer drops than without control: with no echo
/// the senders would not slow at all), and the run is the single queue's
/// to within what the partitions' own tie order changes.
#[test]
fn an_all_to_all_under_hpcc_is_the_same_on_1_2_and_4_threads() {
    let base = Options { topology: leaf_spine(), flow_bytes: 64 * 1024, cc: Cc::Hpcc, ..Options::default() };
    let r = same_for_every_thread_count("hpcc all-to-all", |t| all_to_all(&Options { threads: Some(t), ..base }));
    assert_eq!(r.flows_unfinished, 0, "every flow completes");
    let single = all_to_all(&base);
    let (p, s) = (r.fct_us_p50.unwrap(), single.fct_us_p50.unwrap());
    assert!((p - s).abs() < 0.05 * s, "FCT p50 partitioned {p} us, single queue {s} us");
    let none = all_to_all(&Options { threads: Some(2), cc: Cc::None, ..base });
    assert!(r.drops * 5 < none.drops * 4, "HPCC's senders slowed: {} drops against {} without", r.drops, none.drops);
}
