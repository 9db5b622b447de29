#![no_main]
//! Passwords in store URLs and connection strings of every shape, through the URL parser, the
//! store opener and the configuration parser: no error, `Display` or `Debug` may show them.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cosid_fuzz::credentials(data));
