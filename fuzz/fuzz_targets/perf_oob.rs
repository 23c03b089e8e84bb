//! See softroce::fuzzing::perf_oob.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::perf_oob(data));
