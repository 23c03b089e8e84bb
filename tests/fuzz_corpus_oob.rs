//! The out-of-band parser fuzz targets over their checked-in seed corpora
//! (fuzz/seeds/<target>/, made by scripts/make_oob_corpus.py), so that
//! `cargo test` compiles and exercises the bodies `fuzz/` wraps.

use std::path::Path;

/// Runs `body` over every file of the target's corpus; the corpus must not be empty.
fn run_corpus(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 20, "{target}: only {} seed files in {}", files.len(), dir.display());
    for f in &files {
        let data = std::fs::read(f).unwrap();
        if let Err(e) = std::panic::catch_unwind(|| body(&data)) {
            let msg = e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("{target}: {} failed: {}", f.display(), msg.unwrap_or_default());
        }
    }
}

#[test]
fn perf_oob_corpus() {
    run_corpus("perf_oob", softroce::fuzzing::perf_oob);
}

#[test]
fn perftest_exchange_corpus() {
    run_corpus("perftest_exchange", softroce::fuzzing::perftest_exchange);
}

#[test]
fn pingpong_exchange_corpus() {
    run_corpus("pingpong_exchange", softroce::fuzzing::pingpong_exchange);
}

/// The oracles can fail: inputs the parsers must refuse are refused, and
/// the hostile seeds are among the corpus (a corpus of only benign
/// messages would not exercise the checks).
#[test]
fn the_corpora_hold_the_hostile_messages_of_issue_17() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let hello = std::fs::read(root.join("perf_oob/hostile00")).unwrap();
    let m = softroce::perf::oob::Msg::parse_line(&hello[1..]).unwrap();
    let softroce::perf::oob::Msg::Hello(h) = m else { panic!("hostile00 is the 1 TiB Hello") };
    assert_eq!((h.qps, h.size), (1024, 1 << 30));
    let page = std::fs::read(root.join("perftest_exchange/page_1gib")).unwrap();
    assert_eq!(softroce::perf::perftest::parse_system_data(&page[16..20], &page[20..24]), Ok((1 << 30, 64)));
}
