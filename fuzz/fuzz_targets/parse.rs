//! `cargo fuzz run parse`: see `throttle_core::fuzzing::parse` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| throttle_core::fuzzing::parse(data));
