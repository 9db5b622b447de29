#![no_main]
//! The `credentials` target's check under the schemes its selector byte does not reach
//! (`mysql://`, `mariadb://`): no error, `Display` or `Debug` may show a password.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cosid_fuzz::credentials_more(data));
