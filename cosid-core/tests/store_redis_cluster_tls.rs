//! Redis Cluster over TLS (`rediss+cluster://`), against real clusters that `cosid-testkit`
//! starts serving TLS only (three primaries, `port 0` and a `tls-port`, TLS on the cluster bus
//! and for replication, a certificate for 127.0.0.1 from a throwaway CA:
//! `RedisCluster::start_tls` in `testkit/src/redis_cluster.rs`):
//!
//! - the conformance suite through `rediss+cluster://…?cacert=CA` (its namespaces land on every
//!   shard, so the client follows `MOVED` to TLS ports it learnt from the cluster);
//! - a client given one seed reaches every shard over TLS;
//! - a certificate from a CA the URL does not give (another CA, or the system's roots) is
//!   refused with a `Store` error that names `cacert=`;
//! - TLS on one side only (`rediss+cluster://` to plain-text nodes, `redis+cluster://` to TLS
//!   nodes) is a `Store` error naming the scheme to use;
//! - `cacert=` is checked when the store opens (a plain-text URL, a file that cannot be read or
//!   holds no certificate are `Config` errors).
//!
//! Run with `cargo test -p cosid-core --features redis --test store_redis_cluster_tls`.

#![cfg(feature = "redis")]

mod conformance;
mod network;

use conformance::{acquire, client, unique_namespace, LONG};
use cosid_core::lease::Owner;
use cosid_core::store::redis::RedisStore;
use cosid_core::ErrorKind;
use cosid_testkit::redis_cluster::{RedisCluster, CLUSTER_PASSWORD};
use network::assert_store_error;
use std::collections::HashSet;
use std::time::Duration;

network_conformance_suite!(
    RedisStore,
    cosid_testkit::redis_cluster::shared_redis_cluster_tls_url()
);

/// The `cacert=…` part of a TLS cluster's URL.
fn cacert_of(cluster: &RedisCluster) -> String {
    let url = cluster.url("");
    let (_, ca) = url
        .split_once("cacert=")
        .expect("a TLS cluster's URL gives its CA");
    format!("cacert={ca}")
}

/// A store on one seed of a TLS cluster follows the cluster's redirections to the TLS ports of
/// the other nodes: namespaces on every shard work.
#[test]
fn one_seed_reaches_every_shard_over_tls() {
    let cluster = RedisCluster::start_tls();
    let seed = cluster.ports()[0];
    let url = format!(
        "rediss+cluster://:{CLUSTER_PASSWORD}@127.0.0.1:{seed}/0?{}",
        cacert_of(&cluster)
    );
    let store = open(&url, Duration::from_secs(10)).expect("open");
    let mut shards = HashSet::new();
    for i in 0..12 {
        let ns = unique_namespace(&format!("tls{i}"));
        shards.insert(cluster.owner(cluster.keyslot(&format!("cosid:{{{ns}}}:ns"))));
        let lease = acquire(&client(&store, &ns, 2, LONG), &Owner::new("h")).lease;
        assert_eq!(lease.fence, 1);
    }
    assert!(shards.len() > 1, "the namespaces span shards: {shards:?}");
    assert!(
        cluster.redirections(seed, "MOVED") > 0,
        "the seed redirected"
    );
}

/// Nodes whose certificate another CA signed, or that the system's roots do not know, are
/// refused: a `Store` error naming the node and `cacert=`, and no password.
#[test]
fn a_certificate_from_a_ca_the_url_does_not_give_is_refused_naming_cacert() {
    let cluster = RedisCluster::start_tls();
    let other = RedisCluster::start_tls();
    let ours = cacert_of(&cluster);
    let node = format!("127.0.0.1:{}", cluster.ports()[0]);
    for url in [
        cluster.url("").replace(&ours, &cacert_of(&other)),
        cluster.url("").replace(&format!("?{ours}"), ""),
    ] {
        assert!(!url.contains(&ours), "{url}");
        let store = open(&url, Duration::from_secs(5)).expect("open");
        let e = store.snapshot("tls").expect_err("an untrusted certificate");
        assert_store_error(
            &e,
            &[
                &format!("cluster node {node}"),
                "certificate",
                "rediss+cluster://…?cacert=/path/ca.pem",
            ],
        );
        assert!(!format!("{e} {e:?}").contains(CLUSTER_PASSWORD), "{e}");
    }
}

/// TLS on one side only: `rediss+cluster://` to nodes without TLS, and `redis+cluster://` to
/// nodes that serve TLS only, are `Store` errors naming the scheme to use.
#[test]
fn tls_on_one_side_only_is_refused_naming_the_scheme_to_use() {
    let plain = RedisCluster::start();
    let tls = RedisCluster::start_tls();
    let url = format!(
        "{}?{}",
        plain
            .url("")
            .replace("redis+cluster://", "rediss+cluster://"),
        cacert_of(&tls)
    );
    // Plain-text nodes never answer a TLS handshake: each seed waits its share of the bound.
    let e = open(&url, Duration::from_secs(1))
        .expect("open")
        .snapshot("tls")
        .expect_err("the nodes do not speak TLS");
    assert_store_error(
        &e,
        &[
            &format!("cluster node 127.0.0.1:{}", plain.ports()[0]),
            "use redis+cluster:// for a server without TLS",
        ],
    );

    let url = tls
        .url("")
        .replace("rediss+cluster://", "redis+cluster://")
        .replace(&format!("?{}", cacert_of(&tls)), "");
    let e = open(&url, Duration::from_secs(5))
        .expect("open")
        .snapshot("tls")
        .expect_err("the nodes speak TLS only");
    assert_store_error(
        &e,
        &[
            &format!("cluster node 127.0.0.1:{}", tls.ports()[0]),
            "use rediss+cluster:// for TLS",
        ],
    );
}

/// `cacert=` is read when the store opens: on a URL without TLS, naming a file that cannot be
/// read, or one with no certificate in it, it is a `Config` error that says so.
#[test]
fn cacert_is_checked_when_the_store_opens() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").expect("write");
    let missing = dir.path().join("missing.pem");
    for (url, says) in [
        (
            "redis+cluster://h1/0?cacert=/ca.pem".to_string(),
            "has cacert=, which only a TLS URL takes; use rediss://".to_string(),
        ),
        (
            format!("rediss+cluster://h1/0?cacert={}", missing.display()),
            format!("cannot read cacert '{}'", missing.display()),
        ),
        (
            format!("rediss+cluster://h1/0?cacert={}", empty.display()),
            format!("cacert '{}' holds no PEM certificate", empty.display()),
        ),
        (
            "rediss+cluster://h1/0?cacert=%zz".to_string(),
            "not percent-encoded".to_string(),
        ),
    ] {
        let e = open(&url, Duration::from_secs(2)).expect_err(&url);
        assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
        assert!(e.message().contains(&says), "{url}: {e}");
    }
}
