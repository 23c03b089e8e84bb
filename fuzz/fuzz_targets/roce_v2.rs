//! See rdma_wire::fuzzing::roce_v2.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rdma_wire::fuzzing::roce_v2(data));
