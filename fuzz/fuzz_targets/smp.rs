//! See rdma_wire::fuzzing::smp.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rdma_wire::fuzzing::smp(data));
