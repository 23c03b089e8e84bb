//! See rdma_transport::fuzzing::cm_receive.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rdma_transport::fuzzing::cm_receive(data));
