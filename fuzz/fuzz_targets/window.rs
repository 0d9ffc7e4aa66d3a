//! `cargo fuzz run window`: see `redis_throttle_core::fuzzing::window` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::window(data));
