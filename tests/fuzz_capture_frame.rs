//! Runs the capture_frame fuzz target body over its checked-in seed corpus
//! (`fuzz/seeds/capture_frame/`), so that `cargo test` builds the body and
//! replays every seed without a fuzzer.

use softroce::capture::linktype::*;
use softroce::decode::decode;
use softroce::dump::PacketLine;
use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
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
fn capture_frame() {
    for (name, data) in corpus("capture_frame") {
        eprintln!("capture_frame/{name}");
        softroce::fuzzing::capture_frame(&data);
    }
}

/// Most seeds are RDMA frames that decode to a packet line on every link
/// type the target picks, so the fuzzer starts from deep inside the decoder.
#[test]
fn capture_frame_seeds_decode() {
    let links = [ETHERNET, RAW, LINUX_SLL, IPV4, IPV6, INFINIBAND, LINUX_SLL2];
    let mut decoded = [0usize; 7];
    let seeds = corpus("capture_frame");
    for (_, data) in &seeds {
        let Some((&pick, frame)) = data.split_first() else { continue };
        let i = usize::from(pick) % 7;
        if matches!(PacketLine::from_decoded(1, &decode(links[i], frame)), Some(Ok(_))) {
            decoded[i] += 1;
        }
    }
    let total: usize = decoded.iter().sum();
    assert!(total * 2 >= seeds.len(), "only {total} of {} seeds decode as RDMA", seeds.len());
    assert!(decoded.iter().all(|&n| n > 0), "every link type has an RDMA seed: {decoded:?}");
}
