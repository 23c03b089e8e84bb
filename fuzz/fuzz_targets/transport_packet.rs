//! The transport packet alone (BTH through ICRC), as the engine sees it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rdma_wire::{TransportPacket, TransportRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(t) = TransportPacket::new_checked(data) else { return };
    let _ = (t.payload(), t.icrc(), t.reth(), t.aeth(), t.atomic_eth(), t.atomic_ack_eth(), t.deth(), t.xrceth());
    let Ok(repr) = TransportRepr::parse(&t) else { return };
    let mut out = vec![0u8; repr.packet_len(t.payload().len()).unwrap()];
    let n = repr.emit_headers(&mut out, t.payload().len()).unwrap();
    assert_eq!(n, t.header_len());
    let again = TransportPacket::new_checked(&out[..]).expect("emitted headers parse");
    assert_eq!(TransportRepr::parse(&again).unwrap(), repr);
});
