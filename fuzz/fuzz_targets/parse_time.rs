#![no_main]
//! `cosid_core::time::parse_rfc3339` and `parse_duration` on arbitrary bytes.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cosid_fuzz::parse_time(data));
