//! Congestion control behind the seam, in the fabric: TIMELY from RTT
//! samples alone, HPCC from the telemetry the switches stamp, and the
//! `--cc` choice beside the older `--dcqcn`.

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
    assert_eq!(rows(&["--cc", "hpcc"]), ["ib", "roce-pfc", "roce-pfc-hpcc", "roce-lossy"]);
}

/// Four long flows through one 40G bottleneck under HPCC: the switches'
/// stamps come back in the ACKs and the senders hold the link near η =
/// 0.95 with next to no queue (the paper's point: a queue of a few
/// packets where rate control without telemetry keeps hundreds of KB),
/// shared fairly, nothing lost. Without INT reaching the senders nothing
/// would cut their rates and the queue would be none's.
#[test]
fn hpcc_runs_the_link_near_eta_with_next_to_no_queue() {
    let base = Options { flows: 4, ..Options::default() };
    let none = go("dcqcn-fairness", Options { cc: Cc::None, ..base });
    let hpcc = go("dcqcn-fairness", Options { cc: Cc::Hpcc, ..base });
    let (q_none, q_hpcc) = (none.queue_p50_bytes.unwrap(), hpcc.queue_p50_bytes.unwrap());
    assert!(q_none > 400_000, "the reference queue: {q_none} B");
    assert!(q_hpcc <= 8_192, "HPCC's median queue is a packet or two: {q_hpcc} B");
    let tf = hpcc.throughput_fraction.unwrap();
    assert!((0.85..=0.99).contains(&tf), "near η = 0.95 of the link: {tf}");
    assert!(hpcc.jain.unwrap() > 0.95, "{:?}", hpcc.jain);
    assert_eq!((hpcc.drops, hpcc.retransmits), (0, 0));
}

/// An 8:1 incast of 256 KiB flows: HPCC, which sees the queue itself,
/// finishes every flow sooner than DCQCN, which waits for ECN marks and
/// CNPs and then cuts too deep (the paper's headline: shorter FCTs than
/// DCQCN). Every flow finishing also says the INT trailer never reached
/// an engine: an engine drops a packet whose ICRC does not check.
#[test]
fn hpcc_finishes_an_incast_sooner_than_dcqcn() {
    let base = Options { fanin: 8, flow_bytes: 256 * 1024, ..Options::default() };
    let dcqcn = go("incast", Options { cc: Cc::Dcqcn, ..base });
    let hpcc = go("incast", Options { cc: Cc::Hpcc, ..base });
    let (d, h) = (dcqcn.fct_us_p99.unwrap(), hpcc.fct_us_p99.unwrap());
    assert!(h < d * 0.8, "HPCC's FCT p99 {h} us against DCQCN's {d} us");
    assert_eq!(hpcc.flows_unfinished, 0, "every flow finished");
}

/// HPCC needs switches that stamp INT: an IB fabric refuses it, by name.
#[test]
fn hpcc_on_an_ib_fabric_is_refused() {
    let out = cli(&["run", "incast", "--link", "ib", "--cc", "hpcc", "--quiet"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hpcc"));
}

/// Short flows behind two long ones (`mixed`, PFC on as the paper runs
/// it): HPCC keeps the queue the short flows wait behind at a packet or
/// so, and their FCT tail is shorter than under DCQCN and under no
/// control (the paper's headline, in miniature).
#[test]
fn hpcc_shortens_the_short_flows_tail_behind_long_ones() {
    let base = Options { fanin: 8, pfc: true, ..Options::default() };
    let none = go("mixed", Options { cc: Cc::None, ..base });
    let dcqcn = go("mixed", Options { cc: Cc::Dcqcn, ..base });
    let hpcc = go("mixed", Options { cc: Cc::Hpcc, ..base });
    for r in [&none, &dcqcn, &hpcc] {
        assert_eq!((r.flows_unfinished, r.drops), (0, 0), "every short flow finished, nothing lost");
        assert!(r.flows.len() > 100, "a stream of short flows: {}", r.flows.len());
    }
    let p99 = |r: &rdma_fabric::report::Report| r.fct_us_p99.unwrap();
    assert!(p99(&hpcc) < 0.8 * p99(&dcqcn), "HPCC {} us, DCQCN {} us", p99(&hpcc), p99(&dcqcn));
    assert!(p99(&hpcc) < 0.8 * p99(&none), "HPCC {} us, none {} us", p99(&hpcc), p99(&none));
    let (q_none, q_hpcc) = (none.queue_p50_bytes.unwrap(), hpcc.queue_p50_bytes.unwrap());
    assert!(q_hpcc * 10 < q_none, "median queue: HPCC {q_hpcc} B, none {q_none} B");
}

/// Swift, a window from delay alone: four long flows fill the link and
/// share it, with a standing queue of the target delay's worth (the
/// queue that holds the RTT at the target: tens of KB at 40G), far below
/// no control's; and, without PFC, a stream of short flows behind two
/// long ones loses nothing, where TIMELY, rate-based on the same samples,
/// overruns the buffer and its short flows' tail is many times longer.
#[test]
fn swift_fills_the_link_fairly_and_its_window_keeps_short_flows_from_drops() {
    let base = Options { flows: 4, ..Options::default() };
    let none = go("dcqcn-fairness", Options { cc: Cc::None, ..base });
    let swift = go("dcqcn-fairness", Options { cc: Cc::Swift, ..base });
    assert!(swift.throughput_fraction.unwrap() > 0.95, "{:?}", swift.throughput_fraction);
    assert!(swift.jain.unwrap() > 0.99, "{:?}", swift.jain);
    assert!(swift.queue_p50_bytes.unwrap() * 4 < none.queue_p50_bytes.unwrap());
    assert_eq!((swift.drops, swift.retransmits), (0, 0));
    let mixed = Options { fanin: 8, pfc: false, ..Options::default() };
    let swift = go("mixed", Options { cc: Cc::Swift, ..mixed });
    let timely = go("mixed", Options { cc: Cc::Timely, ..mixed });
    assert_eq!((swift.drops, swift.flows_unfinished), (0, 0), "nothing lost, every short flow done");
    assert!(timely.drops > 0, "the reference overruns the buffer");
    let (s, t) = (swift.fct_us_p99.unwrap(), timely.fct_us_p99.unwrap());
    assert!(s * 3.0 < t, "short flows' FCT p99: Swift {s} us, TIMELY {t} us");
}

/// At a slow line rate a packet's serialisation is most of the RTT: the
/// target must allow for it, or every flow is cut to its floor.
#[test]
fn swift_at_500_mbps_still_fills_the_link() {
    let o = Options {
        flows: 4,
        line_rate_gbps: 0.5,
        duration: Some(std::time::Duration::from_millis(200)),
        cc: Cc::Swift,
        ..Options::default()
    };
    let r = go("dcqcn-fairness", o);
    assert!(r.throughput_fraction.unwrap() > 0.9, "{:?}", r.throughput_fraction);
}
