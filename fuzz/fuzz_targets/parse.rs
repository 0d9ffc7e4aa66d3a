//! `cargo fuzz run parse`: see `redis_throttle_core::fuzzing::parse` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::parse(data));
