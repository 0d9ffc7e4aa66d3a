//! `cargo fuzz run counter`: see `redis_throttle_core::fuzzing::counter` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::counter(data));
