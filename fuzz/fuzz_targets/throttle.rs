//! `cargo fuzz run throttle`: see `redis_throttle_core::fuzzing::throttle` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::throttle(data));
