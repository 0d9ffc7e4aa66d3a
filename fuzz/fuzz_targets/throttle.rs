//! `cargo fuzz run throttle`: see `throttle_core::fuzzing::throttle` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| throttle_core::fuzzing::throttle(data));
