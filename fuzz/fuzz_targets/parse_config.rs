#![no_main]
//! The configuration parser, `cosid_core::config::Config::from_yaml`, on arbitrary bytes.
//!
//! Contract: never a panic, a hang or a crash; a refused document is an `ErrorKind::Config` error
//! with a message; an accepted one is a configuration whose layout and slot are consistent.
//! Two inputs per run: the bytes as a whole document, and the bytes as the value of one key of a
//! valid document (the first byte picks the key), so the fuzzer reaches every key's parser
//! without having to discover the schema first.
use cosid_core::config::{Config, Machine};
use cosid_core::ErrorKind;

const TEMPLATES: [&str; 16] = [
    "cosid:\n  namespace: @\n",
    "cosid:\n  max-wait: @\n",
    "cosid:\n  snowflake:\n    epoch: @\n",
    "cosid:\n  snowflake:\n    timestamp-unit: @\n",
    "cosid:\n  snowflake:\n    timestamp-bits: @\n",
    "cosid:\n  snowflake:\n    node-bits: @\n    sequence-bits: 10\n",
    "cosid:\n  snowflake: @\n",
    "cosid:\n  machine:\n    lease:\n      store: @\n",
    "cosid:\n  machine:\n    lease:\n      store: memory:\n      ttl: @\n",
    "cosid:\n  machine:\n    lease:\n      store: memory:\n      tolerance: @\n",
    "cosid:\n  machine:\n    lease:\n      store: memory:\n      bits: @\n",
    "cosid:\n  machine:\n    lease:\n      store: memory:\n      owner-key: @\n      preferred-slot: @\n",
    "cosid:\n  machine:\n    lease:\n      store: memory:\n      acquire-timeout: @\n",
    "cosid:\n  machine:\n    static:\n      slot: @\n",
    "cosid:\n  machine:\n    static:\n      slot: 1\n      state-file: /nonexistent/s\n      ahead: @\n      not-before: @\n",
    "cosid:\n  machine: @\n",
];

fn check(text: &str) {
    match Config::from_yaml(text) {
        Ok(c) => {
            assert!(!c.namespace.is_empty());
            let l = c.layout;
            match &c.machine {
                Machine::Lease(lease) => {
                    assert!(lease.bits <= l.node_bits(), "{text:?}");
                    assert!(!lease.store.is_empty());
                    if let Some(p) = lease.preferred_slot {
                        assert!(u64::from(p) < 1u64 << lease.bits, "{text:?}");
                    }
                }
                Machine::Static(s) => {
                    assert!(u64::from(s.slot) < 1u64 << l.node_bits(), "{text:?}");
                }
            }
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Config, "{text:?}: {e}");
            assert!(!e.message().is_empty());
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return check(&String::from_utf8_lossy(data));
    };
    check(text);
    if let Some((&sel, rest)) = data.split_first() {
        let value = String::from_utf8_lossy(rest);
        let doc = TEMPLATES[sel as usize % TEMPLATES.len()].replace('@', &value);
        check(&doc);
    }
});
