//! See rdma_core_rs::link::fuzzing::udp_receive.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdma_core_rs::link::fuzzing::udp_receive(data);
});
