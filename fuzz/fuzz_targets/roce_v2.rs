//! RoCE v2 packets (IP header through ICRC): the checked view never panics,
//! and whatever it accepts re-emits to bytes that parse back to the same
//! headers and payload with a valid ICRC.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rdma_wire::{RoceV2Packet, RoceV2Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = RoceV2Packet::new_checked(data) else { return };
    let _ = p.icrc_ok();
    let t = p.transport();
    let payload = t.payload();
    let _ = (t.reth(), t.aeth().map(|a| a.syndrome()), t.atomic_eth(), t.deth(), t.imm_dt(), t.ieth());
    let Ok(repr) = RoceV2Repr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len(payload.len()).unwrap()];
    repr.emit(&mut out, payload).unwrap();
    let again = RoceV2Packet::new_checked(&out[..]).expect("an emitted packet parses");
    assert!(again.icrc_ok());
    assert_eq!(RoceV2Repr::parse(&again).unwrap(), repr);
    assert_eq!(again.transport().payload(), payload);
});
