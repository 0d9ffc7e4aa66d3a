//! `cargo fuzz run debit`: see `redis_throttle_core::fuzzing::debit` for what is checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_throttle_core::fuzzing::debit(data));
