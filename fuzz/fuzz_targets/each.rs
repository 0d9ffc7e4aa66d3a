//! `cargo fuzz run each`: see `redis_throttle_core::fuzzing::each` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::each(data));
