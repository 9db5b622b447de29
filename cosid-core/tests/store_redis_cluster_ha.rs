//! Redis Cluster with replicas (`redis+cluster://…?replicas=1`), against real clusters that
//! `cosid-testkit` starts (three primaries with a password, each with replicas that follow it
//! by `CLUSTER REPLICATE`: `RedisCluster::start_with_replicas` in
//! `testkit/src/redis_cluster.rs`):
//!
//! - the conformance suite through `redis+cluster://…?replicas=1` on a cluster with one replica
//!   per shard: every compare-and-set is acknowledged by the replica of the shard that ran it
//!   (`WAIT` on that node), or the suite fails;
//! - a shard's failover while holders renew with `replicas=1`: the primary of the namespace's
//!   shard is killed (`SIGKILL`) and one of its two replicas takes over (`CLUSTER FAILOVER
//!   FORCE`); the holders' calls to the dead primary fail, the next ones ask the seeds again
//!   and follow `MOVED` to the promoted replica, no holder loses its lease, the promoted replica
//!   holds every holder's last renewal, and no two windows granted on one slot overlap.
//!
//! Run with `cargo test -p cosid-core --features redis --test store_redis_cluster_ha`. No
//! test asserts on timing: waits are bounded and fail the test when they run out.

#![cfg(feature = "redis")]

mod conformance;
mod failover;
mod network;

use cosid_core::store::redis::RedisStore;
use cosid_testkit::redis_cluster::{RedisCluster, CLUSTER_PASSWORD};
use failover::holders_through_a_failover;
use std::sync::OnceLock;

/// The cluster the conformance suite runs on: three primaries with a replica each.
fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start_with_replicas(1))
}

network_conformance_suite!(RedisStore, shared_cluster().url("?replicas=1"));

/// Four holders renew through `redis+cluster://…?replicas=1` while the primary of their
/// namespace's shard is killed and one of its replicas promoted (the other replica then follows
/// the promoted one, so `replicas=1` can be met again): see the module documentation.
#[test]
fn a_shard_failover_keeps_every_lease_and_windows_stay_disjoint() {
    let cluster = RedisCluster::start_with_replicas(2);
    holders_through_a_failover(&cluster.url("?replicas=1"), |ns| {
        let slot = cluster.keyslot(&format!("cosid:{{{ns}}}:ns"));
        let (old, new) = cluster.fail_over(slot);
        assert_ne!(old, new);
        assert_eq!(cluster.owner(slot), new);
        (
            format!("of the shard of hash slot {slot}: {old} -> {new}"),
            format!("redis://:{CLUSTER_PASSWORD}@127.0.0.1:{new}/0"),
        )
    });
}
