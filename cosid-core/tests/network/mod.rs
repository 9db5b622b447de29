//! Fault tests shared by the network stores (Redis, PostgreSQL, etcd, MySQL), each run against a real
//! server that `cosid-testkit` starts: the server stopped during renewals and started again,
//! restarted empty (with the restart guard), a namespace created by 32 runtimes at once, 1024 owners acquiring at once,
//! and credentials kept out of every message.
//!
//! `network_faults!(open_fn, new_server_fn, shared_url_fn, password_url_fn)` expands to one
//! `#[test]` per case; `network_store_tests!` to those and the conformance suite of one store.
//! No test asserts on timing: waits are bounded retries that fail the test with the last error
//! when they run out.

#![allow(dead_code)]

use crate::conformance::{acquire, acquire_with, client, request, unique_namespace, LONG};
use cosid_core::lease::{
    AcquireRequest, LeaseClient, NamespaceRecord, Owner, Refusal, Renewal, SlotLease,
};
use cosid_core::store::{NamespaceWrite, SharedStore, SlotWrite};
use cosid_core::{ErrorKind, Result};
use cosid_testkit::race::at_once;
use cosid_testkit::Server;
use std::collections::HashSet;
use std::thread;
use std::time::Duration;

/// Opens a store on a URL with an operation timeout.
pub type OpenUrl = fn(&str, Duration) -> Result<SharedStore>;

/// A password that must never show.
pub const SECRET: &str = "Sup3r-s3cret-pw";

/// The operation timeout for fault tests: short, so a dead server is reported quickly.
pub const FAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// Expands to the fault tests for one store.
#[macro_export]
macro_rules! network_faults {
    ($open:expr, $server:expr, $shared_url:expr, $password_url:expr) => {
        $crate::network_faults!(@cases $open, $server, $shared_url, $password_url;
            server_stopped_during_renewals_then_started_again,
            server_restarted_empty_reports_vanished_and_keeps_floors_above_old_ceilings,
            the_restart_guard_keeps_newcomers_above_every_ceiling_an_empty_restart_lost,
            the_restart_guard_floors_every_acquisition_on_a_server_that_lost_its_last_writes,
            a_migration_after_an_empty_restart_keeps_the_guard,
            a_renewal_after_a_restart_that_lost_writes_is_a_lost_lease,
            namespace_created_by_32_runtimes_at_once,
            owners_1024_acquire_at_once_then_exhausted,
            passwords_never_show_in_debug_describe_or_errors,
            unreachable_server_is_a_store_error_naming_it,
        );
    };
    (@cases $open:expr, $server:expr, $shared_url:expr, $password_url:expr; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                let ctx = $crate::network::Ctx {
                    open: $open,
                    server: $server,
                    shared_url: $shared_url,
                    password_url: $password_url,
                };
                $crate::network::$case(&ctx);
            }
        )+
    };
}

/// The conformance suite and the fault tests of one network store: `$store` opened on URLs
/// ([`network_conformance_suite!`]), `$server` starting a server of a test's own, `$shared_url`
/// the binary's shared server, and `$user` the user a password URL names (with [`SECRET`]).
#[macro_export]
macro_rules! network_store_tests {
    ($store:ty, $server:expr, $shared_url:path, $user:expr) => {
        $crate::network_conformance_suite!($store, $shared_url());

        $crate::network_faults!(open, $server, $shared_url, |url| {
            $crate::network::with_user(url, $user)
        });
    };
}

/// What the fault tests need of a store.
pub struct Ctx {
    /// Opens the store on a URL with a timeout.
    pub open: OpenUrl,
    /// Starts a server of the test's own (for tests that stop or empty it).
    pub server: fn() -> Server,
    /// The URL of the binary's shared server.
    pub shared_url: fn() -> String,
    /// `url` with user and [`SECRET`] as password put in (and whatever else the store needs).
    pub password_url: fn(&str) -> String,
}

impl Ctx {
    fn open(&self, url: &str, timeout: Duration) -> SharedStore {
        (self.open)(url, timeout).unwrap_or_else(|e| panic!("open {url}: {e}"))
    }
}

/// Asserts that `e` is a `Store` error whose message says each of `parts` (the store's
/// `describe()`, the server's words, the fix): how the store tests check an error they expect.
pub fn assert_store_error(e: &cosid_core::Error, parts: &[&str]) {
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    for part in parts {
        assert!(e.message().contains(part), "{part:?} in {e}");
    }
}

/// Opens the store at `base?query` for each of `queries` and acquires and releases a slot
/// through it: every TLS setting of a URL that should connect does.
pub fn each_query_connects(open: OpenUrl, base: &str, queries: &[String]) {
    for query in queries {
        let store = open(&format!("{base}?{query}"), Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let c = client(&store, &unique_namespace("tls"), 2, LONG);
        let got = acquire(&c, &Owner::new("tls"));
        assert!(c.release(&got.lease, None).unwrap(), "{query}");
    }
}

/// Retries `f` (bounded: 50 tries, 200 ms apart) until it gives `Ok`; the first calls after a
/// server restart may still see the dead connection.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T>) -> T {
    let mut last = None;
    for _ in 0..50 {
        match f() {
            Ok(v) => return v,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Store, "{what}: {e}");
                last = Some(e);
                thread::sleep(Duration::from_millis(200));
            }
        }
    }
    panic!("{what}: still failing after 50 tries: {last:?}");
}

/// The server stops while a holder renews: each renewal fails with a `Store` error naming the
/// store (the lease stays valid until its ceiling), and renews again once the server is back,
/// with the same fence and nothing lowered.
pub fn server_stopped_during_renewals_then_started_again(ctx: &Ctx) {
    let server = (ctx.server)();
    let store = ctx.open(&server.url(), FAULT_TIMEOUT);
    let ns = unique_namespace("stopped");
    let c = client(&store, &ns, 4, LONG);
    let lease = acquire(&c, &Owner::new("holder")).lease;
    let Renewal::Renewed(before) = c.renew(&lease).expect("a renewal with the server up") else {
        panic!("the lease was lost with the server up");
    };

    server.stop();
    for _ in 0..3 {
        let e = c
            .renew(&before)
            .expect_err("a renewal with the server down fails");
        assert_store_error(&e, &[&store.describe()]);
    }
    let e = c
        .acquire(&request(&Owner::new("newcomer")))
        .expect_err("an acquisition with the server down fails");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");

    server.start();
    let after = eventually("renewing after the restart", || c.renew(&before));
    let Renewal::Renewed(after) = after else {
        panic!("the lease was lost across a restart that kept the data: {after:?}");
    };
    assert_eq!((after.slot, after.fence), (before.slot, before.fence));
    assert!(after.expires_at >= before.expires_at && after.ceiling >= before.ceiling);
    assert!(c.release(&after, Some(after.floor)).unwrap());
}

/// The server restarts with no data: the next renewal reports the lease vanished, and an
/// acquisition that asks for a floor at least the old ceiling (what the keeper does) gets one,
/// so the new window cannot overlap the old.
pub fn server_restarted_empty_reports_vanished_and_keeps_floors_above_old_ceilings(ctx: &Ctx) {
    let server = (ctx.server)();
    let store = ctx.open(&server.url(), FAULT_TIMEOUT);
    let ns = unique_namespace("emptied");
    let c = client(&store, &ns, 2, LONG);
    let owner = Owner::new("holder");
    let old = acquire(&c, &owner).lease;
    let Renewal::Renewed(old) = c.renew(&old).unwrap() else {
        panic!("lost with the server up");
    };

    server.restart_empty();
    let renewal = eventually("renewing after the empty restart", || c.renew(&old));
    assert!(
        matches!(renewal, Renewal::Lost(Refusal::Vanished)),
        "a store that lost its data reports the lease vanished: {renewal:?}"
    );
    assert!(!c.release(&old, None).unwrap(), "nothing to release");
    assert!(store.snapshot(&ns).unwrap().namespace.is_none());

    let again = acquire_with(
        &c,
        AcquireRequest {
            owner: owner.clone(),
            preferred_slot: Some(old.slot),
            floor_at_least: old.ceiling,
        },
    )
    .lease;
    assert!(
        again.floor >= old.ceiling,
        "new floor {} is below the old ceiling {}",
        again.floor,
        old.ceiling
    );
    assert!(again.ceiling >= again.floor);
    // Someone new on the emptied store gets another slot: the first is held again.
    let other = acquire(&c, &Owner::new("other")).lease;
    assert_ne!(other.slot, again.slot);
}

/// The restart guard (`docs/protocol.md` section 7): the server restarts without its data
/// while a holder still has its window; a newcomer that creates the namespace again gets no
/// window below the creation plus ttl + tolerance (a namespace missing from a network store may
/// be one it lost), nor below the server's start plus ttl + tolerance, so none below the lost
/// ceiling. With `restart-guard=off` the namespace starts at 0.
pub fn the_restart_guard_keeps_newcomers_above_every_ceiling_an_empty_restart_lost(ctx: &Ctx) {
    let server = (ctx.server)();
    let store = ctx.open(&server.url(), FAULT_TIMEOUT);
    let ns = unique_namespace("guarded");
    let guarded = |store: &SharedStore| client(store, &ns, 2, LONG).with_restart_guard();
    // The old holder's window starts now (its own guard would start it an ttl later).
    let old = acquire(&client(&store, &ns, 2, LONG), &Owner::new("old holder")).lease;
    assert!(old.ceiling > old.floor, "{old:?}");

    server.restart_empty();
    let restarted = eventually("reading the emptied store", || store.snapshot(&ns));
    assert!(restarted.namespace.is_none(), "the restart kept the data");
    assert!(store.may_forget_namespaces());
    let fresh = store.started_at(&ns).expect("started_at");
    let new = acquire(&guarded(&store), &Owner::new("newcomer")).lease;
    let span = LONG.ttl_ms + LONG.tolerance_ms;
    assert!(
        new.floor >= restarted.slots.store_now + span,
        "a namespace created again starts ttl + tolerance after its creation: {new:?}"
    );
    assert!(
        new.floor >= old.ceiling,
        "the newcomer's floor {} is below the lost ceiling {}",
        new.floor,
        old.ceiling
    );
    if server.kind() == cosid_testkit::Kind::Etcd {
        assert_eq!(fresh, None, "etcd reports no start");
    } else {
        let fresh = fresh.expect("the server reports its start");
        assert!(
            fresh <= restarted.slots.store_now + 2_000,
            "started at {fresh}, after the first read at {}",
            restarted.slots.store_now
        );
        assert!(new.floor >= fresh + span, "{fresh} {new:?}");
    }

    // The same server, the guard turned off in the URL: a new namespace starts at 0.
    let off = ctx.open(
        &format!("{}?restart-guard=off", server.url()),
        FAULT_TIMEOUT,
    );
    assert_eq!(off.started_at(&ns).expect("started_at"), None);
    assert!(!off.may_forget_namespaces());
    let unguarded = client(&off, &unique_namespace("unguarded"), 2, LONG).with_restart_guard();
    assert_eq!(acquire(&unguarded, &Owner::new("trusting")).lease.floor, 0);
}

/// A restart that lost the last writes but kept the namespace record (a restore from an older
/// snapshot, a crash on Redis's RDB persistence): no namespace is created again, yet every
/// acquisition on the young server starts above its start plus ttl + tolerance, so above the
/// lost ceiling, even on the holder's own slot. (etcd reports no start: its restored snapshot
/// is the case `docs/stores.md` leaves to `cosid migrate`.)
pub fn the_restart_guard_floors_every_acquisition_on_a_server_that_lost_its_last_writes(ctx: &Ctx) {
    let server = (ctx.server)();
    if server.kind() == cosid_testkit::Kind::Etcd {
        return;
    }
    let store = ctx.open(&server.url(), FAULT_TIMEOUT);
    let ns = unique_namespace("moved-back");
    let plain = client(&store, &ns, 2, LONG);
    let kept = plain.open_namespace().expect("open_namespace");
    let old = acquire(&plain, &Owner::new("old holder")).lease;

    server.restart_empty();
    eventually("reading the emptied store", || store.snapshot(&ns));
    // The namespace record comes back (what the older snapshot held); the slot records do not.
    store
        .cas_namespace(&ns, NamespaceWrite::new(None, &kept))
        .expect("restoring the namespace record")
        .expect("written");
    let new = client(&store, &ns, 2, LONG)
        .with_restart_guard()
        .acquire(&AcquireRequest {
            preferred_slot: Some(old.slot),
            ..request(&Owner::new("newcomer"))
        })
        .expect("acquire")
        .lease;
    assert_eq!(new.slot, old.slot);
    assert!(
        new.floor >= old.ceiling,
        "the newcomer's floor {} on the old holder's slot is below its lost ceiling {}",
        new.floor,
        old.ceiling
    );
}

/// `cosid migrate` with a not-before in the past, right after the server restarted empty and
/// before any runtime came back, must not switch the guard off: the first runtime completes
/// the record it wrote with the guard's floor.
pub fn a_migration_after_an_empty_restart_keeps_the_guard(ctx: &Ctx) {
    let server = (ctx.server)();
    let store = ctx.open(&server.url(), FAULT_TIMEOUT);
    let ns = unique_namespace("migrated-after-loss");
    let old = acquire(&client(&store, &ns, 2, LONG), &Owner::new("old holder")).lease;

    server.restart_empty();
    let now = eventually("reading the emptied store", || store.snapshot(&ns))
        .slots
        .store_now;
    let past = now - 3_600_000;
    LeaseClient::raise_not_before(&store, &ns, past, false).expect("migrate");
    let new = client(&store, &ns, 2, LONG)
        .with_layout(&cosid_core::Layout::default())
        .with_restart_guard()
        .acquire(&AcquireRequest {
            preferred_slot: Some(old.slot),
            ..request(&Owner::new("newcomer"))
        })
        .expect("acquire")
        .lease;
    assert!(
        new.floor >= old.ceiling,
        "after the migration the newcomer's floor {} lies below the lost ceiling {}",
        new.floor,
        old.ceiling
    );
    let rec = store.snapshot(&ns).unwrap().namespace.unwrap().value;
    assert!(rec.not_before_ms >= now + LONG.ttl_ms, "{rec:?}");
    assert_eq!(rec.ttl_ms, Some(LONG.ttl_ms));
}

/// A holder whose record the store lost and got back older (here: written again by hand after
/// an empty restart, so at another version) must not renew it through a read: the server may
/// have lost a takeover of the slot in between. Its renewal reports the lease lost; a holder on
/// a server that did not restart renews as always. (etcd reports no start.)
pub fn a_renewal_after_a_restart_that_lost_writes_is_a_lost_lease(ctx: &Ctx) {
    let server = (ctx.server)();
    if server.kind() == cosid_testkit::Kind::Etcd {
        return;
    }
    let store = ctx.open(&server.url(), FAULT_TIMEOUT);
    let ns = unique_namespace("renewed-after-loss");
    let c = client(&store, &ns, 2, LONG).with_restart_guard();
    let kept = client(&store, &ns, 2, LONG).open_namespace().unwrap();
    let held = acquire(&client(&store, &ns, 2, LONG), &Owner::new("holder")).lease;
    let record = store.read_slot(&ns, held.slot).unwrap().1.unwrap().value;

    server.restart_empty();
    eventually("reading the emptied store", || store.snapshot(&ns));
    store
        .cas_namespace(&ns, NamespaceWrite::new(None, &kept))
        .unwrap()
        .unwrap();
    store
        .cas_slot(&ns, SlotWrite::new(None, &record))
        .unwrap()
        .expect("restoring the holder's record");
    match c.renew_at(&held, held.store_now).expect("renew") {
        Renewal::Lost(Refusal::MovedBack) => {}
        other => panic!("a renewal of a record the restarted server brought back: {other:?}"),
    }
}

/// 32 runtimes (each with its own store handle, so its own connection) open one new namespace
/// at once: one creates it, all get the same record, and the store holds exactly it.
pub fn namespace_created_by_32_runtimes_at_once(ctx: &Ctx) {
    let url = (ctx.shared_url)();
    let ns = unique_namespace("created-by-32");
    let open = ctx.open;
    let records: Vec<NamespaceRecord> = {
        let (url, ns) = (url.clone(), ns.clone());
        at_once(32, move |_, go| {
            let store = open(&url, Duration::from_secs(10)).expect("open");
            let c = client(&store, &ns, 10, LONG);
            go.wait();
            c.open_namespace().expect("open_namespace")
        })
    };
    let want = NamespaceRecord {
        limit: 1024,
        tolerance_ms: LONG.tolerance_ms,
        not_before_ms: 0,
        layout: None,
        ttl_ms: None,
    };
    assert!(records.iter().all(|r| *r == want), "{records:?}");
    let stored = ctx
        .open(&url, Duration::from_secs(10))
        .snapshot(&ns)
        .unwrap()
        .namespace
        .expect("the namespace exists");
    assert_eq!(stored.value, want);
}

/// Terms whose leases outlive any test run, even a debug build on a loaded two-core machine
/// (with [`LONG`]'s 60 s, a slow run would see its first leases expire and be taken again).
const VERY_LONG: cosid_core::lease::Terms = cosid_core::lease::Terms {
    ttl_ms: 3_600_000,
    tolerance_ms: 1_000,
};

/// 1024 owners (32 runtimes with a store handle each, 32 owners in turn on each) acquire on one
/// namespace of 1024 slots at once: every slot exactly once, each held by the owner that got
/// it, and the next owner is refused with `Exhausted`.
pub fn owners_1024_acquire_at_once_then_exhausted(ctx: &Ctx) {
    let url = (ctx.shared_url)();
    let ns = unique_namespace("owners-1024");
    let open = ctx.open;
    let per_runtime = {
        let (url, ns) = (url.clone(), ns.clone());
        at_once(32, move |t, go| {
            let store = open(&url, Duration::from_secs(10)).expect("open");
            let c = client(&store, &ns, 10, VERY_LONG);
            go.wait();
            (0..32)
                .map(|i| {
                    let owner = Owner::new(format!("runtime-{t}-{i}"));
                    c.acquire(&request(&owner))
                        .unwrap_or_else(|e| panic!("{owner} acquires: {e}"))
                        .lease
                })
                .collect::<Vec<SlotLease>>()
        })
    };
    let mut leases: Vec<SlotLease> = per_runtime.into_iter().flatten().collect();
    leases.sort_by_key(|l| l.slot);
    let slots: Vec<u32> = leases.iter().map(|l| l.slot).collect();
    assert_eq!(slots, (0..1024).collect::<Vec<u32>>());
    let owners: HashSet<_> = leases.iter().map(|l| l.owner.clone()).collect();
    assert_eq!(owners.len(), 1024);

    let store = ctx.open(&url, Duration::from_secs(10));
    let mut stored = store.snapshot(&ns).unwrap().slots.slots;
    stored.sort_by_key(|r| r.value.slot);
    assert_eq!(stored.len(), 1024);
    for (lease, rec) in leases.iter().zip(&stored) {
        assert_eq!(rec.value.owner.as_ref(), Some(&lease.owner));
        assert_eq!(rec.value.fence, lease.fence);
    }
    let e = client(&store, &ns, 10, VERY_LONG)
        .acquire(&request(&Owner::new("one-more")))
        .expect_err("the 1025th owner is refused");
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} shows the password: {text}");
}

/// A store opened with a password in its URL never shows it: not in `Debug`, not in
/// `describe()`, not in the errors of a server that refuses it or that is not there.
pub fn passwords_never_show_in_debug_describe_or_errors(ctx: &Ctx) {
    // A live server (which refuses or ignores the credentials).
    let live = (ctx.password_url)(&(ctx.shared_url)());
    assert!(live.contains(SECRET));
    let store = ctx.open(&live, FAULT_TIMEOUT);
    assert_no_secret("Debug", &format!("{store:?}"));
    assert_no_secret("describe()", &store.describe());
    assert!(store.describe().contains("***"), "{}", store.describe());
    if let Err(e) = store.snapshot(&unique_namespace("pw")) {
        assert_eq!(e.kind(), ErrorKind::Store, "{e}");
        assert_no_secret("an error", &format!("{e} {e:?}"));
    }

    // A port nobody listens on.
    let dead = (ctx.password_url)(&dead_url(&(ctx.shared_url)()));
    let store = ctx.open(&dead, FAULT_TIMEOUT);
    assert_no_secret("Debug", &format!("{store:?}"));
    let e = store.snapshot("pw").expect_err("no server listens there");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert_no_secret("an error", &format!("{e} {e:?}"));
    assert!(e.message().contains(&store.describe()), "{e}");
    let e = client(&store, "pw", 2, LONG)
        .acquire(&request(&Owner::new("x")))
        .expect_err("no server listens there");
    assert_no_secret("an acquire error", &format!("{e} {e:?}"));
}

/// A server that is not there gives a `Store` error (not a hang) from every primitive, naming
/// the store; opening the store does not need the server.
pub fn unreachable_server_is_a_store_error_naming_it(ctx: &Ctx) {
    let store = ctx.open(&dead_url(&(ctx.shared_url)()), FAULT_TIMEOUT);
    let ns = unique_namespace("unreachable");
    let errors = [
        store.snapshot(&ns).map(|_| ()),
        store.read_slot(&ns, 0).map(|_| ()),
        store
            .cas_namespace(
                &ns,
                NamespaceWrite::new(
                    None,
                    &NamespaceRecord {
                        limit: 1,
                        tolerance_ms: 1,
                        not_before_ms: 0,
                        layout: None,
                        ttl_ms: None,
                    },
                ),
            )
            .map(|_| ()),
        store
            .cas_slot(
                &ns,
                SlotWrite::new(None, &cosid_core::lease::SlotRecord::vacant(0)),
            )
            .map(|_| ()),
    ];
    for r in errors {
        let e = r.expect_err("no server listens there");
        assert_store_error(&e, &[&store.describe()]);
    }
}

/// `url` with its port replaced by one nobody listens on.
pub fn dead_url(url: &str) -> String {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (user, _) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    format!("{scheme}://{user}127.0.0.1:{port}{tail}")
}

/// `url` with `user:SECRET@` put in front of the host.
pub fn with_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{user}:{SECRET}@{rest}")
}
