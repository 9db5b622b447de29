#![no_main]
//! Store URLs of every scheme, through the URL parser and the store opener (no connection).
libfuzzer_sys::fuzz_target!(|data: &[u8]| cosid_fuzz::store_url(data));
