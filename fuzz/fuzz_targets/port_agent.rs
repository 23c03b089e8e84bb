//! See rdma_fabric::fuzzing::port_agent.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rdma_fabric::fuzzing::port_agent(data));
