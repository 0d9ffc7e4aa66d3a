//! `cargo fuzz run quota`: see `redis_throttle_core::fuzzing::quota` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::quota(data));
