//! `cargo fuzz run counter`: see `throttle_core::fuzzing::counter` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| throttle_core::fuzzing::counter(data));
