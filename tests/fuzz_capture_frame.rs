//! Runs the capture_frame fuzz target body over its checked-in seed corpus
//! (`fuzz/seeds/capture_frame/`), so that `cargo test` builds the body and
//! replays every seed without a fuzzer.

use softroce::capture::linktype::*;
use softroce::decode::decode;
use softroce::dump::PacketLine;

#[test]
fn capture_frame() {
    for (name, data) in rdma_wire::fuzzing::seeds("capture_frame") {
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
    let seeds = rdma_wire::fuzzing::seeds("capture_frame");
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
