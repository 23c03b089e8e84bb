//! See softroce::fuzzing::pingpong_exchange.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::pingpong_exchange(data));
