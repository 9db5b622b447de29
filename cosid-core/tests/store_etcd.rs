//! The store conformance suite and the fault tests on `etcd`, against a real etcd server that
//! `cosid-testkit` starts (or the one `COSID_TEST_ETCD_URL` names; the fault tests that stop or
//! empty a server always start their own).
//!
//! Run with `cargo test -p cosid-core --features etcd --test store_etcd`.

#![cfg(feature = "etcd")]

mod conformance;
mod network;

use cosid_core::store::etcd::EtcdStore;
use cosid_testkit::Server;
use std::time::Duration;

// A password URL names the user `root` (the test server has authentication off: it refuses
// them).
network_store_tests!(
    EtcdStore,
    Server::etcd,
    cosid_testkit::shared_etcd_url,
    "root"
);

/// A member that accepts connections and never answers (stopped, or cut off from its cluster)
/// costs one operation, not every one: the next goes to the next member.
#[test]
fn a_member_that_never_answers_is_left_for_the_next_one() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    // Accepts (the kernel's backlog does) and never reads or writes.
    let server = Server::etcd();
    let url = format!("etcd://127.0.0.1:{silent_port},127.0.0.1:{}", server.port());
    let store = open(&url, Duration::from_millis(500)).unwrap();
    let first = store.snapshot("silent-member");
    assert!(first.is_err(), "the silent member answered: {first:?}");
    // The operation's deadline cancelled the request: the next one goes to the live member.
    for attempt in 0..3 {
        let next = store.snapshot("silent-member");
        assert!(
            next.is_ok(),
            "attempt {attempt} after the timeout: {next:?}"
        );
    }
    drop(silent);
}
