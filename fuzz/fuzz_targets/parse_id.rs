#![no_main]
//! Every id parser of `cosid_core::convert`, plus `Layout::decompose`, on arbitrary bytes.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cosid_fuzz::parse_id(data));
