//! `cargo fuzz run held`: see `redis_throttle_core::fuzzing::held` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::held(data));
