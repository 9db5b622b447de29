#![no_main]
//! `TextFormat::parse` (a form and its options) and the id parser of every setting: CosId's
//! radix-62 and radix-36 text, friendly text in a zone with pad-start.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cosid_fuzz::parse_text_form(data));
