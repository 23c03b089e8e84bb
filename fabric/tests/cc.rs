//! Congestion control behind the seam, in the fabric: TIMELY from RTT
//! samples alone, and the `--cc` choice beside the older `--dcqcn`.

use rdma_fabric::scenarios::{run, Cc, Options};

fn go(name: &str, o: Options) -> rdma_fabric::report::Report {
    run(name, &o, &mut |_, _| {}).expect("a valid scenario")
}

/// Four long flows through one 40G bottleneck: without rate control the
/// queue stands at half a megabyte; TIMELY, reading nothing but its own
/// RTT samples, keeps it to a fraction of that at close to line rate, and
/// the flows share it fairly.
#[test]
fn timely_holds_the_queue_down_at_line_rate_and_shares_it() {
    let base = Options { flows: 4, ..Options::default() };
    let none = go("dcqcn-fairness", Options { cc: Cc::None, ..base });
    let timely = go("dcqcn-fairness", Options { cc: Cc::Timely, ..base });
    let (q_none, q_timely) = (none.queue_p50_bytes.unwrap(), timely.queue_p50_bytes.unwrap());
    assert!(q_none > 400_000, "the reference queue: {q_none} B");
    assert!(q_timely * 4 < q_none, "TIMELY's median queue {q_timely} B, none's {q_none} B");
    assert!(timely.throughput_fraction.unwrap() > 0.9, "{:?}", timely.throughput_fraction);
    assert!(timely.jain.unwrap() > 0.99, "{:?}", timely.jain);
    assert_eq!((timely.drops, timely.retransmits), (0, 0));
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rdma-fabric")).args(args).output().unwrap()
}

fn json(args: &[&str]) -> String {
    let out = cli(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `--cc dcqcn` and `--cc none` are the old `--dcqcn on` and `--dcqcn off`
/// byte for byte; the two spellings may not contradict each other.
#[test]
fn cc_flag_matches_the_dcqcn_flag_and_rejects_contradictions() {
    let run = ["run", "incast", "--fanin", "4", "--flow-kb", "64", "--json", "--quiet"];
    let with = |extra: &[&str]| json(&[&run[..], extra].concat());
    assert_eq!(with(&["--cc", "dcqcn"]), with(&[]));
    assert_eq!(with(&["--cc", "dcqcn"]), with(&["--dcqcn", "on"]));
    assert_eq!(with(&["--cc", "none"]), with(&["--dcqcn", "off"]));
    assert_ne!(with(&["--cc", "none"]), with(&["--cc", "dcqcn"]));
    assert_eq!(with(&["--cc", "timely", "--dcqcn", "off"]), with(&["--cc", "timely"]));
    for bad in [&["--cc", "timely", "--dcqcn", "on"][..], &["--cc", "dcqcn", "--dcqcn", "off"]] {
        let out = cli(&[&run[..], bad].concat());
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    let out = cli(&["run", "rp-trajectory", "--cc", "timely", "--quiet"]);
    assert_eq!(out.status.code(), Some(2), "rp-trajectory is DCQCN's alone");
}

/// `compare --cc timely` puts TIMELY in the row DCQCN has by default.
#[test]
fn compare_puts_the_chosen_algorithm_in_the_congestion_controlled_row() {
    let rows = |extra: &[&str]| -> Vec<String> {
        let args = [&["compare", "incast", "--fanin", "4", "--flow-kb", "32", "--json", "--quiet"][..], extra].concat();
        let v: serde_json::Value = serde_json::from_str(&json(&args)).unwrap();
        v["rows"].as_array().unwrap().iter().map(|r| r["fabric"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(rows(&[]), ["ib", "roce-pfc", "roce-pfc-dcqcn", "roce-lossy"]);
    assert_eq!(rows(&["--cc", "timely"]), ["ib", "roce-pfc", "roce-pfc-timely", "roce-lossy"]);
}
