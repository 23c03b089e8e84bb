//! Bodies of the fuzz targets for the tools' parsers (see
//! `docs/fuzzing.md`). Each takes arbitrary bytes and panics only when an
//! oracle is violated: `fuzz/fuzz_targets/<name>.rs` wraps it for
//! libFuzzer, and a test runs it over the seed corpus `fuzz/corpus/<name>/`.

use crate::capture::linktype::*;
use crate::decode::decode;
use crate::dump::PacketLine;

/// Whole captured frames as rdma-dump reads them: the first byte picks the
/// link type, the rest is the frame. Decoding and formatting never panic,
/// and a frame decoded as RDMA prints as a non-empty line.
pub fn capture_frame(data: &[u8]) {
    let Some((&pick, frame)) = data.split_first() else { return };
    let link = [ETHERNET, RAW, LINUX_SLL, IPV4, IPV6, INFINIBAND, LINUX_SLL2][usize::from(pick) % 7];
    let d = decode(link, frame);
    if let Some(Ok(line)) = PacketLine::from_decoded(1, &d) {
        assert!(!line.to_text().is_empty(), "an RDMA frame prints as a line");
        let _ = line.to_json().to_string();
    }
}
