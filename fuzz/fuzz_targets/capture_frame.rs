//! Whole captured frames as rdma-dump reads them: the first byte picks the
//! link type, the rest is the frame. Decoding and formatting never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use softroce::capture::linktype::*;
use softroce::decode::decode;
use softroce::dump::PacketLine;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, frame)) = data.split_first() else { return };
    let link = [ETHERNET, RAW, LINUX_SLL, IPV4, IPV6, INFINIBAND, LINUX_SLL2][usize::from(pick) % 7];
    let d = decode(link, frame);
    if let Some(Ok(line)) = PacketLine::from_decoded(1, &d) {
        let _ = (line.to_text(), line.to_json().to_string());
    }
});
