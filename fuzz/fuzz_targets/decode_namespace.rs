#![no_main]
//! Namespace records as Redis and etcd keep them: read, written back, read again.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cosid_fuzz::decode_namespace(data));
