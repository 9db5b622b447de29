//! The store conformance suite and the fault tests on `redis`, against a real Redis server that
//! `cosid-testkit` starts (or the one `COSID_TEST_REDIS_URL` names; the fault tests that stop or
//! empty a server always start their own).
//!
//! Run with `cargo test -p cosid-core --features redis --test store_redis`.

#![cfg(feature = "redis")]

mod conformance;
mod network;

use cosid_core::store::redis::RedisStore;
use cosid_testkit::Server;
use std::time::Duration;

// A password URL names the user `cosid` (the test server has no users configured: it refuses
// them).
network_store_tests!(
    RedisStore,
    Server::redis,
    cosid_testkit::shared_redis_url,
    "cosid"
);

/// The connections the server at `url` has accepted since it started, as its `INFO stats`
/// counts them (the connection asking included).
fn connections_received(url: &str) -> usize {
    let mut con = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("a direct connection to the test server");
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut con)
        .expect("INFO stats");
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in INFO stats: {info}"))
}

/// A handle shares one connection among all its callers, including the first ones: 256
/// threads that call a fresh handle at once open one connection between them, not one each
/// (one each ran into the server's client limit and listen backlog, and callers saw
/// "connection reset by peer").
#[test]
fn callers_of_a_fresh_handle_share_one_connection() {
    let server = Server::redis();
    let url = server.url();
    let before = connections_received(&url);
    let store = open(&url, Duration::from_secs(20)).expect("the store opens");
    let ns = conformance::unique_namespace("one-connection");
    let snapshots = cosid_testkit::race::at_once(256, move |_, go| {
        go.wait();
        store.snapshot(&ns).map(|_| ())
    });
    for s in snapshots {
        s.expect("the snapshot");
    }
    // `before + 1` is the connection that asked for `before`.
    assert_eq!(
        connections_received(&url),
        before + 2,
        "256 callers of one handle are connected by one connection"
    );
}

/// A new master whose version counter is behind the writes a failover lost (here: the counter
/// set back by hand) does not issue their versions again: every write takes at least the
/// server's time in microseconds, which has moved on since.
#[test]
fn versions_stay_above_those_of_writes_a_failover_lost() {
    let url = cosid_testkit::shared_redis_url();
    let store = open(&url, Duration::from_secs(20)).expect("the store opens");
    let ns = conformance::unique_namespace("lost-counter");
    let lost = store
        .cas_slot(&ns, None, &cosid_core::lease::SlotRecord::vacant(0))
        .unwrap()
        .expect("a new record is written");
    let mut con = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("a direct connection to the test server");
    let _: () = redis::cmd("SET")
        .arg(format!("cosid:{{{ns}}}:version"))
        .arg(1)
        .query(&mut con)
        .expect("SET");
    let after = store
        .cas_slot(&ns, None, &cosid_core::lease::SlotRecord::vacant(1))
        .unwrap()
        .expect("a new record is written");
    assert!(after > lost, "version {after} is not above {lost}");
}

#[test]
fn the_server_filters_the_candidate_view() {
    conformance::candidate_view_is_filtered_by_the_store(&shared);
}
