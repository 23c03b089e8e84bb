//! See softroce::fuzzing::perftest_exchange.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::perftest_exchange(data));
