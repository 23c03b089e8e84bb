//! Collectives on the simulated fabric: a ring all-reduce on an
//! uncongested switch meets its α-β lower bound, and the orderings the
//! physics implies hold (size, step count, lossy against lossless).

use rdma_fabric::collective::report::{CollectiveReport, Kind};
use rdma_fabric::collective::{run, Algorithm, CollectiveOptions};
use rdma_fabric::scenarios::{Cc, Options};

fn go(kind: Kind, algorithm: Algorithm, hosts: usize, size: u64, o: &Options) -> CollectiveReport {
    let c = CollectiveOptions { kind, algorithm, hosts, size_bytes: size, cross_nic: false };
    let r = run(&c, o, &mut |_, _| {}).expect("a valid collective");
    assert_eq!((r.ranks_unfinished, r.failed), (0, false), "{r:?}");
    r
}

fn ring(size: u64) -> CollectiveReport {
    go(Kind::AllReduce, Algorithm::Ring, 4, size, &Options::default())
}

/// On one 40G switch nothing competes: the ring's JCT is its lower bound
/// (each step's chunk at line rate with its headers, plus two link delays
/// and a store-and-forward per step) and what the per-step ACK round trip
/// adds, which this test allows as 5 %.
#[test]
fn ring_allreduce_on_an_idle_switch_meets_its_lower_bound() {
    let r = ring(2 << 20);
    let (jct, bound) = (r.jct_us.unwrap(), r.lower_bound_us.unwrap());
    assert!(jct >= bound, "faster than the physics allows: {jct} < {bound}");
    assert!(jct <= bound * 1.05, "JCT {jct} us is more than 5 % above the bound {bound} us");
    assert_eq!((r.drops, r.retransmits, r.pauses), (0, 0, 0), "{r:?}");
    // busbw is what each link carried: close to the 40G line rate less headers (1024/1068).
    let busbw = r.busbw_gbps.unwrap();
    assert!((36.0..=40.0 * 1024.0 / 1068.0).contains(&busbw), "busbw {busbw}");
    let alg = r.algbw_gbps.unwrap();
    assert!((alg - (2 << 20) as f64 * 8.0 / (jct * 1e3)).abs() < 1e-9);
    assert!((busbw / alg - 1.5).abs() < 1e-9, "2(n-1)/n for n = 4");
    // Every rank finishes within a step of the last.
    assert!(r.rank_completion_us_max.unwrap() - r.rank_completion_us_p50.unwrap() <= jct / 6.0, "{r:?}");
}

#[test]
fn doubling_the_size_doubles_the_jct_at_large_sizes() {
    let (a, b) = (ring(2 << 20).jct_us.unwrap(), ring(4 << 20).jct_us.unwrap());
    assert!((1.9..=2.05).contains(&(b / a)), "{a} us then {b} us");
}

#[test]
fn all_gather_and_reduce_scatter_take_half_the_steps_of_all_reduce() {
    let o = Options::default();
    let ar = ring(2 << 20).jct_us.unwrap();
    for kind in [Kind::AllGather, Kind::ReduceScatter] {
        let r = go(kind, Algorithm::Ring, 4, 2 << 20, &o);
        let half = r.jct_us.unwrap() / ar;
        assert!((0.45..=0.55).contains(&half), "{kind:?}: {half}");
        assert!((r.busbw_gbps.unwrap() / r.algbw_gbps.unwrap() - 0.75).abs() < 1e-9, "(n-1)/n");
    }
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let o = Options { seed: 7, ..Options::default() };
    let a = go(Kind::AllReduce, Algorithm::Tree, 7, 512 << 10, &o);
    let b = go(Kind::AllReduce, Algorithm::Tree, 7, 512 << 10, &o);
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
}

/// A tree's inner rank hears from two children at once: a 2:1 incast on
/// its switch port. With a small buffer and no DCQCN, lossy RoCE drops and
/// retransmits and takes longer; PFC pauses instead and loses nothing.
#[test]
fn lossy_roce_retransmits_where_pfc_pauses() {
    let base = Options { cc: Cc::None, buffer_bytes: Some(20_000), ..Options::default() };
    let lossy = go(Kind::AllReduce, Algorithm::Tree, 7, 1 << 20, &base);
    let pfc = go(Kind::AllReduce, Algorithm::Tree, 7, 1 << 20, &Options { pfc: true, ..base });
    assert!(lossy.drops > 0 && lossy.retransmits > 0, "{lossy:?}");
    assert_eq!((pfc.drops, pfc.retransmits), (0, 0), "{pfc:?}");
    assert!(pfc.pauses > 0, "{pfc:?}");
    assert!(lossy.jct_us.unwrap() > pfc.jct_us.unwrap(), "{lossy:?} {pfc:?}");
}

#[test]
fn the_json_has_the_contract_keys() {
    let v = serde_json::to_value(ring(64 << 10)).unwrap();
    for k in [
        "jct_us",
        "algbw_gbps",
        "busbw_gbps",
        "rank_completion_us_p50",
        "rank_completion_us_p99",
        "rank_completion_us_max",
        "drops",
        "pauses",
        "retransmits",
    ] {
        assert!(v.get(k).is_some(), "no {k} in {v}");
    }
}

/// What `rdma-fabric run <collective> ... --json` prints, as text.
fn cli_json(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-fabric")).arg("run").args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The command line keeps the contract for all three collectives:
/// JCT, algorithm and bus bandwidth, the tail across ranks, drops, pauses
/// and retransmissions, as numbers; and the same seed prints the same
/// JSON, byte for byte, also for a lossy run (a tree's 2:1 incast on a
/// 20 KB buffer without DCQCN drops and retransmits).
#[test]
fn the_command_line_prints_the_contract_and_repeats_itself() {
    let lossy = ["allreduce", "--algorithm", "tree", "--hosts", "7", "--size", "1MiB"];
    let lossy = [&lossy[..], &["--buffer-kb", "20", "--dcqcn", "off", "--seed", "3", "--json"]].concat();
    let runs: [Vec<&str>; 3] = [
        lossy,
        vec!["allgather", "--hosts", "8", "--size", "512KiB", "--seed", "3", "--json"],
        vec!["reduce-scatter", "--hosts", "8", "--size", "512KiB", "--seed", "3", "--json"],
    ];
    for args in &runs {
        let text = cli_json(args);
        assert_eq!(text, cli_json(args), "{args:?}: the same seed, another JSON");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["scenario"], args[0], "{v}");
        for k in ["jct_us", "algbw_gbps", "busbw_gbps", "rank_completion_us_p50", "rank_completion_us_p99"] {
            assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{args:?}: {k} in {v}");
        }
        assert!(v["rank_completion_us_max"].as_f64() == v["jct_us"].as_f64(), "the last rank ends the job: {v}");
        for k in ["drops", "pauses", "retransmits"] {
            assert!(v[k].is_u64(), "{args:?}: {k} in {v}");
        }
    }
    let v: serde_json::Value = serde_json::from_str(&cli_json(&runs[0])).unwrap();
    assert!(v["drops"].as_u64() > Some(0) && v["retransmits"].as_u64() > Some(0), "a lossy run: {v}");
}
