//! The out-of-band parser fuzz targets over their checked-in seed corpora
//! (fuzz/seeds/<target>/, made by scripts/make_oob_corpus.py), so that
//! `cargo test` compiles and exercises the bodies `fuzz/` wraps.

#[test]
fn perf_oob_corpus() {
    let n = rdma_wire::fuzzing::replay_seeds("perf_oob", softroce::fuzzing::perf_oob);
    assert!(n >= 20, "perf_oob: only {n} seeds");
}

#[test]
fn perftest_exchange_corpus() {
    let n = rdma_wire::fuzzing::replay_seeds("perftest_exchange", softroce::fuzzing::perftest_exchange);
    assert!(n >= 20, "perftest_exchange: only {n} seeds");
}

#[test]
fn pingpong_exchange_corpus() {
    let n = rdma_wire::fuzzing::replay_seeds("pingpong_exchange", softroce::fuzzing::pingpong_exchange);
    assert!(n >= 20, "pingpong_exchange: only {n} seeds");
}

/// The oracles can fail: inputs the parsers must refuse are refused, and
/// the hostile seeds are among the corpus (a corpus of only benign
/// messages would not exercise the checks).
#[test]
fn the_corpora_hold_the_hostile_messages_of_issue_17() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let hello = std::fs::read(root.join("perf_oob/hostile00")).unwrap();
    let m = softroce::perf::oob::Msg::parse_line(&hello[1..]).unwrap();
    let softroce::perf::oob::Msg::Hello(h) = m else { panic!("hostile00 is the 1 TiB Hello") };
    assert_eq!((h.qps, h.size), (1024, 1 << 30));
    let page = std::fs::read(root.join("perftest_exchange/page_1gib")).unwrap();
    assert_eq!(softroce::perf::perftest::parse_system_data(&page[16..20], &page[20..24]), Ok((1 << 30, 64)));
}
