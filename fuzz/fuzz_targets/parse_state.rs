#![no_main]
//! The static-slot state-file parser, `cosid_core::static_slot::decode_state`, on arbitrary
//! bytes.
//!
//! Contract: never a panic; a refused file is an `ErrorKind::StateFile` error naming the file;
//! an accepted file holds a ceiling that writes and reads back the same. A second input per
//! run: a valid file with one byte of it replaced, which must be refused or read as the **same**
//! ceiling, never as another floor. (The checksum's hex digits are read case-insensitively, so
//! `…a753d6` and `…A753d6` both read as the same ceiling: found by this target, harmless.)
use cosid_core::static_slot::{decode_state, encode_state};
use cosid_core::ErrorKind;
use std::path::Path;

fn check(text: &str) -> Option<i64> {
    let path = Path::new("/fuzz/state");
    match decode_state(text, path) {
        Ok(ceiling) => {
            let again = decode_state(&encode_state(ceiling), path).expect("canonical text reads");
            assert_eq!(again, ceiling);
            Some(ceiling)
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::StateFile, "{text:?}: {e}");
            assert!(e.message().contains("/fuzz/state"), "{e}");
            None
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = check(&String::from_utf8_lossy(data));
    if data.len() >= 10 {
        let ceiling = i64::from_le_bytes(data[..8].try_into().unwrap());
        let mut good = encode_state(ceiling).into_bytes();
        let at = data[8] as usize % good.len();
        good[at] = data[9];
        if let Ok(text) = std::str::from_utf8(&good) {
            if let Some(read) = check(text) {
                assert_eq!(
                    read, ceiling,
                    "a corrupted file {text:?} was read as another ceiling"
                );
            }
        }
    }
});
