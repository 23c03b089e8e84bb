//! Runs the transport's fuzz target bodies over their checked-in seed
//! corpora (`fuzz/corpus/<target>/`), so that `cargo test` builds the
//! bodies and replays every seed's oracles without a fuzzer.

use rdma_transport::fuzzing;
use std::path::PathBuf;

/// The files of a target's corpus, sorted, as (name, bytes).
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    files.sort();
    let seeds: Vec<_> = files
        .iter()
        .map(|f| (f.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(f).unwrap()))
        .collect();
    assert!(!seeds.is_empty(), "the corpus of {target} is empty");
    seeds
}

#[test]
fn responder() {
    for (name, data) in corpus("responder") {
        eprintln!("responder/{name}");
        fuzzing::responder(&data);
    }
}
