//! RoCE v1 packets (GRH through ICRC).
#![no_main]
use libfuzzer_sys::fuzz_target;
use rdma_wire::{RoceV1Packet, RoceV1Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = RoceV1Packet::new_checked(data) else { return };
    let _ = p.icrc_ok();
    let t = p.transport();
    let Ok(repr) = RoceV1Repr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len(t.payload().len()).unwrap()];
    repr.emit(&mut out, t.payload()).unwrap();
    let again = RoceV1Packet::new_checked(&out[..]).expect("an emitted packet parses");
    assert!(again.icrc_ok());
    assert_eq!(RoceV1Repr::parse(&again).unwrap(), repr);
});
