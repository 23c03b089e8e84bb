//! IB link flow-control packets.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rdma_wire::{FlowControl, FlowControlRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = FlowControl::new_checked(data) else { return };
    let ok = f.lpcrc_ok();
    let Ok(repr) = FlowControlRepr::parse(&f) else { return };
    let mut out = [0u8; 6];
    repr.emit(&mut out).unwrap();
    if ok {
        assert_eq!(&out[..], &data[..6]);
    }
});
