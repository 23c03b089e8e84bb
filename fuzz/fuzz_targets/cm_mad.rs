//! See rdma_wire::fuzzing::cm_mad.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rdma_wire::fuzzing::cm_mad(data));
