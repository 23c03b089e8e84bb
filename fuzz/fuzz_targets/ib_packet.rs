//! Native InfiniBand packets (LRH through VCRC).
#![no_main]
use libfuzzer_sys::fuzz_target;
use rdma_wire::{IbPacket, IbRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = IbPacket::new_checked(data) else { return };
    let _ = (p.icrc_ok(), p.vcrc_ok(), p.grh().map(|g| g.dst()));
    let t = p.transport();
    let Ok(repr) = IbRepr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len(t.payload().len()).unwrap()];
    repr.emit(&mut out, t.payload()).unwrap();
    let again = IbPacket::new_checked(&out[..]).expect("an emitted packet parses");
    assert!(again.icrc_ok() && again.vcrc_ok());
    assert_eq!(IbRepr::parse(&again).unwrap(), repr);
});
