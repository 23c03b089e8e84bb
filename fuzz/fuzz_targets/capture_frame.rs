//! See softroce::fuzzing::capture_frame.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softroce::fuzzing::capture_frame(data));
