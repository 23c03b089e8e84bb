//! The raw-frame receive path's fuzz body
//! (`rdma_core_rs::fuzzing::frame_receive`) over its seed corpus,
//! `fuzz/seeds/frame_receive/`: frames of the golden RoCE v1 and IB
//! captures (tests/fixtures/raw), whole, with a flipped bit, cut short,
//! mixed with other EtherTypes, and with their CRCs fixed up by the body.
//!
//! The corpus is made by `write_the_seed_corpus` (ignored):
//! `SOFTROCE_WRITE_CORPUS=1 cargo test -p rdma-core-rs --test fuzz_corpus_frames -- --ignored`.

use rdma_core_rs::fuzzing::{frame_flags, frame_receive};
use std::path::PathBuf;

#[test]
fn the_frame_receive_body_runs_clean_over_its_seed_corpus() {
    let n = rdma_wire::fuzzing::replay_seeds("frame_receive", frame_receive);
    assert!(n >= 12, "the seed corpus has {n} files");
}

/// The oracles can fail: an input whose frames the engine counts apart
/// from what the wire crate says would trip them; here a good IB frame, the
/// same frame with a bad VCRC, and a RoCE v1 frame on an IB device are
/// each accounted for (by the assertions inside the body).
#[test]
fn good_damaged_and_foreign_frames_are_each_accounted_for() {
    let frames = golden_frames("ib");
    let good = frames[0].clone();
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 1] ^= 1; // the VCRC
    let mut foreign = good.clone();
    foreign[12..14].copy_from_slice(&[0x89, 0x15]);
    frame_receive(&input(frame_flags::IB, &[good, bad, foreign]));
    // A runt of 3 bytes (found by the fuzzer in the body's own replay link).
    frame_receive(&input(0, &[vec![1, 2, 3], vec![]]));
}

fn input(flags: u8, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = vec![flags];
    for f in frames {
        v.extend_from_slice(&(f.len() as u16).to_le_bytes());
        v.extend_from_slice(f);
    }
    v
}

/// The frames of a golden capture, as Ethernet frames.
fn golden_frames(backend: &str) -> Vec<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/raw/{backend}.pcap"));
    let bytes = std::fs::read(&path).unwrap();
    let erf = u32::from_le_bytes(bytes[20..24].try_into().unwrap()) == 197;
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let rec = &bytes[at + 16..at + 16 + len];
        out.push(if erf {
            let mut f = vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 2, 0x88, 0xb5];
            f.extend_from_slice(&rec[16..]);
            f
        } else {
            rec.to_vec()
        });
        at += 16 + len;
    }
    out
}

#[test]
#[ignore = "writes the seed corpus; run with SOFTROCE_WRITE_CORPUS=1"]
fn write_the_seed_corpus() {
    if std::env::var_os("SOFTROCE_WRITE_CORPUS").is_none() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/frame_receive");
    std::fs::create_dir_all(&dir).unwrap();
    let mut seeds = Vec::new();
    for (backend, flag) in [("roce1", 0u8), ("ib", frame_flags::IB)] {
        let frames = golden_frames(backend);
        seeds.push((format!("{backend}-all"), input(flag, &frames)));
        seeds.push((format!("{backend}-first"), input(flag, &frames[..1])));
        let mut flipped = frames[3].clone();
        flipped[30] ^= 0x10;
        seeds.push((format!("{backend}-flipped"), input(flag, &[flipped.clone()])));
        seeds.push((format!("{backend}-flipped-fixed"), input(flag | frame_flags::FIX_CRCS, &[flipped])));
        let short = frames[2][..frames[2].len() / 2].to_vec();
        seeds.push((format!("{backend}-short"), input(flag, &[short])));
        let mut arp = frames[0].clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        seeds.push((format!("{backend}-mixed"), input(flag, &[arp, frames[0].clone(), vec![0u8; 10]])));
    }
    for (name, data) in seeds {
        std::fs::write(dir.join(name), data).unwrap();
    }
}
