//! `cargo fuzz run bucket`: see `redis_throttle_core::fuzzing::bucket` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::bucket(data));
