//! `cargo fuzz run gcra`: see `throttle_core::fuzzing::gcra` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| throttle_core::fuzzing::gcra(data));
