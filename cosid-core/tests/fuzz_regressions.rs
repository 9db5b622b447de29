//! Regression tests for what the fuzz targets `parse_config` and `parse_state` found
//! (fuzz/fuzz_targets/, docs/fuzzing.md). Each input is the one the fuzzer reported.

use cosid_core::config::{Config, Machine};
use cosid_core::{ErrorKind, Runtime};

/// fuzz target parse_config, input "55" (template 5 = `snowflake: node-bits: @` with value "5"):
/// a configuration with a smaller `node-bits` and no `machine` section got the default lease's
/// 10 slot bits, so slots 32..1023 would have been leased and composed into ids where the slot
/// spills into the timestamp bits (slot 32 at time t = slot 0 at time t+1: a duplicate).
#[test]
fn default_lease_bits_are_capped_to_the_layouts_node_bits() {
    let c = Config::from_yaml("cosid:\n  snowflake:\n    node-bits: 5\n    sequence-bits: 10\n")
        .unwrap();
    let Machine::Lease(lease) = &c.machine else {
        panic!("the default machine is a lease")
    };
    assert_eq!(c.layout.node_bits(), 5);
    assert_eq!(
        lease.bits, 5,
        "capped to node-bits, as an explicit machine.lease section is"
    );
}

/// The same mistake in a configuration built in code (public fields skip the parser): the
/// runtime refuses it with a configuration error naming the key, instead of leasing slots the
/// layout cannot hold.
#[test]
fn a_runtime_refuses_lease_bits_above_node_bits_and_a_static_slot_that_does_not_fit() {
    let mut c = Config::from_yaml(
        "cosid:\n  namespace: fuzz-regression\n  snowflake:\n    node-bits: 5\n    sequence-bits: 10\n  \
         machine:\n    lease:\n      store: 'memory:fuzz-regression'\n",
    )
    .unwrap();
    if let Machine::Lease(lease) = &mut c.machine {
        lease.bits = 10;
    }
    refused_naming(c, "cosid.machine.lease.bits 10");

    let mut c = Config::from_yaml(
        "cosid:\n  snowflake:\n    node-bits: 5\n    sequence-bits: 10\n  machine:\n    static:\n      slot: 3\n",
    )
    .unwrap();
    if let Machine::Static(s) = &mut c.machine {
        s.slot = 32;
    }
    refused_naming(c, "cosid.machine.static.slot 32");
}

/// A runtime refuses `c` with a configuration error that names `key` (with its value).
fn refused_naming(c: Config, key: &str) {
    let e = Runtime::new(c).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.message().contains(key), "{e}");
}

/// With the cap, every runtime of a 5-node-bit namespace gets a slot the layout holds, and the
/// 33rd finds the namespace exhausted instead of leasing slot 32.
#[test]
fn a_small_layout_leases_only_the_slots_it_can_hold() {
    let yaml = "cosid:\n  namespace: fuzz-small\n  snowflake:\n    node-bits: 5\n    sequence-bits: 10\n  \
                machine:\n    lease:\n      store: 'memory:fuzz-small'\n      acquire-timeout: 100ms\n";
    let mut runtimes = Vec::new();
    for _ in 0..32 {
        let rt = Runtime::from_yaml(yaml).unwrap();
        let id = rt.next().unwrap();
        let parts = rt.layout().decompose(id).unwrap();
        assert!(parts.slot <= rt.layout().max_slot());
        runtimes.push(rt);
    }
    let e = Runtime::from_yaml(yaml).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
}
