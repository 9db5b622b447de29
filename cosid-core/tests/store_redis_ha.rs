//! Redis with replicas and Sentinel, against real servers that `cosid-testkit` starts (a
//! primary, two replicas and three sentinels on loopback ports, `testkit/src/redis_ha.rs`):
//!
//! - the conformance suite through `redis+sentinel://…?replicas=1`;
//! - a failover (the primary killed, or `SENTINEL FAILOVER`) while holders renew through the
//!   sentinel URL: every holder keeps its lease on the promoted replica, and the windows granted
//!   before and after never overlap;
//! - with `replicas=1` and every replica stopped, a compare-and-set is a `Store` error and its
//!   window is not used; once a replica is back the holder renews (reading the write that may
//!   have landed on the primary);
//! - a runtime keeps its window (its ceiling does not move) while no replica acknowledges;
//! - sentinels with a password (`sentinel_password=`); credentials in a sentinel URL never show;
//! - the same group serving TLS only (`RedisHa::start_tls`: `port 0`, a `tls-port` on every
//!   data node and sentinel, `tls-replication yes`, a certificate from a throwaway CA): the
//!   conformance suite through `rediss+sentinel://…?replicas=1&cacert=CA`, a killed primary
//!   through TLS as above, and a certificate the URL gives no CA for, or sentinels without TLS,
//!   refused with a `Store` error naming the fix.
//!
//! Run with `cargo test -p cosid-core --features redis --test store_redis_ha`. No test asserts
//! on timing: waits are bounded and fail the test with the last error when they run out.

#![cfg(feature = "redis")]

mod conformance;
mod failover;
mod network;

use conformance::{acquire, client, request, unique_namespace, LONG};
use cosid_core::lease::invariants::{self, Step};
use cosid_core::lease::{Owner, Renewal, SlotRecord};
use cosid_core::store::redis::RedisStore;
use cosid_core::store::{SharedStore, SlotWrite};
use cosid_core::ErrorKind;
use cosid_testkit::redis_ha::RedisHa;
use failover::{eventually, holders_through_a_failover, wait_for};
use network::assert_store_error;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A password that must never show.
const SECRET: &str = "Sup3r-s3cret-pw";

/// The group the conformance suite runs on. Its sentinels wait 30 s before they think the
/// primary is down, so a loaded machine does not make them fail over under the suite.
fn shared_group() -> &'static RedisHa {
    static GROUP: OnceLock<RedisHa> = OnceLock::new();
    GROUP.get_or_init(|| RedisHa::start_with(2, Duration::from_secs(30)))
}

network_conformance_suite!(RedisStore, shared_group().sentinel_url("?replicas=1"));

/// Four holders, each with a store handle of its own, renew through the sentinel URL with
/// `replicas=1` while the primary is killed. Renewals fail while the sentinels fail over, then
/// go on against the promoted replica: no holder loses its lease (every renewal that counted
/// was on a replica, and the promoted replica is the most up to date), the records on the new
/// primary hold each holder's last renewal, and every window granted, before, during and after,
/// is disjoint from the others on its slot, also across a release and a new holder afterwards.
#[test]
fn a_killed_primary_keeps_every_lease_and_windows_stay_disjoint() {
    through_a_failover(RedisHa::start(2), "?replicas=1", RedisHa::kill_primary);
}

/// The same through `SENTINEL FAILOVER`, which leaves the old primary running until the
/// sentinels turn it into a replica: the holders' connections to it see `READONLY` and ask the
/// sentinels again. With `replicas=2` (every replica) the old primary cannot count a write once
/// a replica has been promoted away from it.
#[test]
fn a_sentinel_failover_keeps_every_lease_and_windows_stay_disjoint() {
    through_a_failover(RedisHa::start(2), "?replicas=2", RedisHa::failover);
}

/// The killed primary of the first test, in a group that serves TLS only: the holders reach
/// the sentinels and both primaries through `rediss+sentinel://…&cacert=`, and the new primary
/// is read through `rediss://…?cacert=`.
#[test]
fn a_killed_primary_over_tls_keeps_every_lease_and_windows_stay_disjoint() {
    through_a_failover(
        RedisHa::start_tls(2, Duration::from_secs(1)),
        "?replicas=1",
        RedisHa::kill_primary,
    );
}

/// Holders renew through the sentinel URL of `ha` with `query` while `fail` makes the group
/// fail over (returning the old primary's port): `failover::holders_through_a_failover`.
fn through_a_failover(ha: RedisHa, query: &str, fail: fn(&RedisHa) -> u16) {
    holders_through_a_failover(&ha.sentinel_url(query), |_| {
        let old = fail(&ha);
        let new = ha.wait_for_new_primary(old);
        (format!("{old} -> {new}"), ha.node_url(new))
    });
}

/// With `replicas=1` and every replica stopped, a compare-and-set that the primary applied but
/// no replica acknowledged is a `Store` error that says so: a renewal fails (the holder keeps
/// its old window), an acquisition fails (no window is handed out), and a direct `cas_slot`
/// fails, through the sentinel URL and through a `redis://` URL alike. Once a replica is back,
/// the holder renews with the same fence: the write that may have landed is read again, not
/// assumed.
#[test]
fn with_every_replica_stopped_a_write_is_a_store_error_and_its_window_unused() {
    let ha = RedisHa::start_with(2, Duration::from_secs(30));
    let query = "?replicas=1&wait_timeout_ms=200";
    let url = ha.sentinel_url(query);
    let store = open(&url, Duration::from_secs(2)).expect("open");
    let ns = unique_namespace("no-replicas");
    let c = client(&store, &ns, 2, LONG);
    let lease = acquire(&c, &Owner::new("holder")).lease;
    let primary = ha.primary_port().expect("a primary");
    let direct = open(
        &format!("{}{query}", ha.node_url(primary)),
        Duration::from_secs(2),
    )
    .expect("open the primary directly");

    let stopped = ha.stop_replicas();
    assert_eq!(stopped.len(), 2);
    let says_so = |e: &cosid_core::Error, store: &SharedStore| {
        assert_store_error(
            e,
            &[
                &store.describe(),
                "reached 0 of the 1 replicas the URL asks for (replicas=1)",
            ],
        );
    };
    let e = c
        .renew(&lease)
        .expect_err("a renewal no replica acknowledged");
    says_so(&e, &store);
    let newcomer = Owner::new("newcomer");
    let e = c
        .acquire(&request(&newcomer))
        .expect_err("an acquisition no replica acknowledged");
    says_so(&e, &store);
    // (In a namespace of its own: the write lands on the primary.)
    let e = direct
        .cas_slot(
            &unique_namespace("direct"),
            SlotWrite::new(None, &SlotRecord::vacant(0)),
        )
        .expect_err("a compare-and-set no replica acknowledged");
    says_so(&e, &direct);
    // A compare-and-set that writes nothing (a stale version) needs no replica: it is a plain
    // "no".
    assert_eq!(
        direct
            .cas_slot(
                &ns,
                SlotWrite::new(Some(1), &SlotRecord::vacant(lease.slot))
            )
            .unwrap(),
        None
    );

    ha.start_node(stopped[0]);
    let renewed = eventually("renewing once a replica is back", || c.renew(&lease));
    let Renewal::Renewed(renewed) = renewed else {
        panic!("the lease was lost: {renewed:?}");
    };
    assert_eq!(renewed.fence, lease.fence);
    assert!(renewed.ceiling >= lease.ceiling);
    // The newcomer asks again (what the keeper does after a `Store` error): the slot its
    // unacknowledged write may have taken on the primary is its own, taken back, not a second.
    let again = acquire(&c, &newcomer).lease;
    assert_ne!(again.slot, lease.slot);
    let held: Vec<_> = store
        .snapshot(&ns)
        .unwrap()
        .slots
        .slots
        .into_iter()
        .filter(|r| r.value.owner.as_ref() == Some(&newcomer))
        .map(|r| r.value.slot)
        .collect();
    assert_eq!(held, [again.slot], "the newcomer holds one slot");
    invariants::disjoint_windows(&[
        Step::of_lease(&lease),
        Step::of_lease(&renewed),
        Step::of_lease(&again),
    ])
    .unwrap_or_else(|v| panic!("{v}"));
}

/// Through the public API: a runtime on `redis+sentinel://…?replicas=1` whose replicas all stop
/// keeps the window it has. Its renewals fail (`RenewalFailed`), and the window's ceiling does not
/// move, although the primary applied those renewals: what no replica acknowledged is not used.
/// Once a replica is back, the runtime renews again and its ceiling moves on.
#[test]
fn a_runtime_keeps_its_window_while_no_replica_acknowledges() {
    let ha = RedisHa::start_with(2, Duration::from_secs(30));
    let url = ha.sentinel_url("?replicas=1&wait_timeout_ms=200");
    let config = cosid_core::Config::from_yaml(&format!(
        "cosid:\n  namespace: {}\n  machine:\n    lease:\n      store: \"{url}\"\n      \
         ttl: 15s\n      tolerance: 100ms\n      bits: 2\n",
        unique_namespace("runtime")
    ))
    .expect("the configuration");
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = failures.clone();
    let rt = cosid_core::Runtime::builder()
        .config(config)
        .on_event(move |e| {
            if let cosid_core::lease::Event::RenewalFailed { error, .. } = e {
                seen.lock().unwrap().push(error.clone());
            }
        })
        .build()
        .expect("the runtime starts");
    rt.next().expect("an id");
    let first = rt.binding().ceiling;
    wait_for("a renewal with the replicas up", || {
        rt.binding().ceiling > first
    });

    let stopped = ha.stop_replicas();
    wait_for("a renewal fails", || !failures.lock().unwrap().is_empty());
    let stuck = rt.binding();
    wait_for("two more renewals fail", || {
        failures.lock().unwrap().len() >= 3
    });
    assert_eq!(
        (rt.binding().slot, rt.binding().ceiling),
        (stuck.slot, stuck.ceiling),
        "the window moved while no replica acknowledged a write"
    );
    for e in failures.lock().unwrap().iter() {
        assert!(e.contains("replicas=1"), "{e}");
    }

    ha.start_node(stopped[0]);
    // (Renewed, or, on a machine slow enough for the lease to run out meanwhile, acquired
    // again above the old ceiling: either moves the ceiling on. Issuing is not checked here: a
    // window acquired again starts in the future.)
    wait_for("a renewal once a replica is back", || {
        rt.binding().ceiling > stuck.ceiling
    });
    rt.close().expect("close");
}

/// A sentinel URL with a password never shows it: not in `Debug`, `describe()`, or the errors
/// of a master that refuses it or of sentinels that are not there.
#[test]
fn passwords_in_a_sentinel_url_never_show() {
    let group = shared_group();
    let url = group
        .sentinel_url("?replicas=1")
        .replacen("://", &format!("://cosid:{SECRET}@"), 1);
    let store = open(&url, Duration::from_secs(2)).expect("open");
    let shown = format!("{store:?} {}", store.describe());
    assert!(!shown.contains(SECRET) && shown.contains("***"), "{shown}");
    let e = store
        .snapshot(&unique_namespace("pw"))
        .expect_err("the master has no such user");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(!format!("{e} {e:?}").contains(SECRET), "{e}");

    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("redis+sentinel://cosid:{SECRET}@127.0.0.1:{dead_port}/cosid/0");
    let store = open(&dead, Duration::from_secs(1)).expect("open");
    let e = store.snapshot("pw").expect_err("no sentinel listens there");
    assert_store_error(&e, &[&store.describe(), "through the sentinels"]);
    assert!(!format!("{e} {e:?}").contains(SECRET), "{e}");
}

/// Sentinels that require a password (here: their default user's, set with `ACL SETUSER`) are
/// reached with `sentinel_password=`; without it the error says the sentinel refused, and the
/// password never shows.
#[test]
fn sentinels_with_a_password_take_sentinel_password() {
    let ha = RedisHa::start_with(1, Duration::from_secs(30));
    for port in ha.sentinel_ports() {
        let reply = cosid_testkit::redis_ha::command(
            port,
            &[
                "ACL",
                "SETUSER",
                "default",
                "on",
                "resetpass",
                &format!(">{SECRET}"),
            ],
        );
        assert!(
            reply.as_deref().is_some_and(|r| r.starts_with(b"+OK")),
            "ACL SETUSER on the sentinel: {reply:?}"
        );
    }
    let url = ha.sentinel_url("?replicas=1");
    let store = open(&url, Duration::from_secs(2)).expect("open");
    let e = store
        .snapshot("pw")
        .expect_err("the sentinels want a password");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(e.message().contains("sentinel 127.0.0.1:"), "{e}");

    let url = format!("{url}&sentinel_password={SECRET}");
    let store = open(&url, Duration::from_secs(2)).expect("open");
    let shown = format!("{store:?} {}", store.describe());
    assert!(!shown.contains(SECRET), "{shown}");
    let ns = unique_namespace("sentinel-password");
    let lease = acquire(&client(&store, &ns, 2, LONG), &Owner::new("holder")).lease;
    assert_eq!(lease.fence, 1);

    let wrong = url.replace(SECRET, "not-the-password");
    let e = open(&wrong, Duration::from_secs(2))
        .expect("open")
        .snapshot(&ns)
        .expect_err("a wrong sentinel password");
    assert!(!format!("{e} {e:?}").contains("not-the-password"), "{e}");
}

/// A master name the sentinels do not know is a `Store` error that names it.
#[test]
fn an_unknown_master_name_is_a_store_error_naming_it() {
    let url = shared_group()
        .sentinel_url("")
        .replace("/cosid/0", "/no-such-master/0");
    let store = open(&url, Duration::from_secs(2)).expect("open");
    let e = store.snapshot("x").expect_err("no such master");
    assert_store_error(&e, &["knows no master named 'no-such-master'"]);
}

/// The TLS group the TLS conformance suite runs on (sentinels slow to fail over, as
/// [`shared_group`]).
fn shared_tls_group() -> &'static RedisHa {
    static GROUP: OnceLock<RedisHa> = OnceLock::new();
    GROUP.get_or_init(|| RedisHa::start_tls(2, Duration::from_secs(30)))
}

/// The conformance suite through `rediss+sentinel://…?replicas=1&cacert=CA`: TLS to the
/// sentinels and to the master they name, and between the primary and its replicas.
mod tls {
    crate::network_conformance_suite!(
        cosid_core::store::redis::RedisStore,
        super::shared_tls_group().sentinel_url("?replicas=1")
    );
}

/// A TLS group reached without its CA (the system's roots do not know it) is a `Store` error
/// naming the sentinel and `cacert=`; sentinels without TLS reached through
/// `rediss+sentinel://` are one naming the scheme to use.
#[test]
fn tls_sentinels_refuse_an_unknown_ca_and_plain_ones_a_tls_url_naming_the_fix() {
    let group = shared_tls_group();
    let url = group.sentinel_url("");
    let (without_ca, _) = url.split_once("?cacert=").expect("the URL gives the CA");
    let e = open(without_ca, Duration::from_secs(2))
        .expect("open")
        .snapshot("tls")
        .expect_err("an unknown CA");
    assert_store_error(
        &e,
        &[
            &format!("sentinel 127.0.0.1:{}", group.sentinel_ports()[0]),
            "certificate",
            "rediss+sentinel://…?cacert=/path/ca.pem",
        ],
    );

    let (_, ca) = url.split_once('?').expect("a query");
    let plain = format!(
        "{}?{ca}",
        shared_group()
            .sentinel_url("")
            .replace("redis+sentinel://", "rediss+sentinel://")
    );
    // Sentinels without TLS never answer the handshake: each gets its share of the bound.
    let e = open(&plain, Duration::from_secs(1))
        .expect("open")
        .snapshot("tls")
        .expect_err("sentinels without TLS");
    assert_store_error(
        &e,
        &[
            &format!("sentinel 127.0.0.1:{}", shared_group().sentinel_ports()[0]),
            "use redis+sentinel:// for a server without TLS",
        ],
    );
}
