//! `postgres` with a standby: a primary and a streaming standby with synchronous replication
//! that `cosid-testkit` starts ([`PgPair`]), reached through one URL naming both hosts.
//!
//! - the conformance suite through `postgres://…@standby,primary/…` (the standby first: the
//!   store must pass it by for the writable host);
//! - a failover: holders renew through the two-host URL, the primary crashes, the standby is
//!   promoted, the holders carry on against it; every compare-and-set acknowledged before the
//!   crash is there, and the windows granted before and after never overlap
//!   (`invariants::disjoint_windows`), also for a slot taken over after the failover;
//! - a URL that reaches only the standby gives a `Store` error saying the server is read-only
//!   and what to put in the URL; a dead first host leaves time to connect to the second;
//!   the password shows nowhere.
//!
//! No test asserts on timing: waits are bounded retries that fail the test with the last error.
//!
//! Run with `cargo test -p cosid-core --features postgres --test store_postgres_ha`.

#![cfg(feature = "postgres")]

mod conformance;
mod network;

use conformance::{acquire, client, unique_namespace, LONG};
use cosid_core::lease::invariants::{self, Invariant, Step};
use cosid_core::lease::{Owner, Renewal, SlotLease, SlotRecord, Terms};
use cosid_core::store::postgres::PostgresStore;
use cosid_core::store::{SharedStore, SlotWrite};
use cosid_core::{ErrorKind, Result};
use cosid_testkit::pg_standby::{psql, PgPair};
use cosid_testkit::Server;
use network::assert_store_error;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// A lease that expires soon after its holder stops renewing (the namespace's tolerance is
/// [`LONG`]'s, as every client of a namespace must have).
const SHORT: Terms = Terms {
    ttl_ms: 1_500,
    tolerance_ms: LONG.tolerance_ms,
};

/// A password that must never show.
const SECRET: &str = "Sup3r-s3cret-ha";

/// The pair the conformance suite shares (stopped when the test binary exits).
fn shared_pair() -> &'static PgPair {
    static PAIR: OnceLock<PgPair> = OnceLock::new();
    PAIR.get_or_init(PgPair::start)
}

// The suite's generous bound also covers each commit waiting for the standby.
network_conformance_suite!(PostgresStore, shared_pair().url_standby_first(""));

/// Retries `f` (bounded: `tries` times, 200 ms apart) until it gives `Ok`; `Store` errors
/// (a server down, a standby not promoted yet) and `Exhausted` (a lease not expired yet) are
/// retried, anything else fails the test.
fn eventually<T>(what: &str, tries: u32, mut f: impl FnMut() -> Result<T>) -> T {
    let mut last = None;
    for _ in 0..tries {
        match f() {
            Ok(v) => return v,
            Err(e) => {
                assert!(
                    matches!(e.kind(), ErrorKind::Store | ErrorKind::Exhausted),
                    "{what}: {e}"
                );
                last = Some(e);
                thread::sleep(Duration::from_millis(200));
            }
        }
    }
    panic!("{what}: still failing after {tries} tries: {last:?}");
}

/// `owner` acquires a slot of `ns` (`2^bits` slots), retried (bounded) while the store cannot
/// be reached or every slot is held by a live lease.
fn acquire_eventually(
    store: &SharedStore,
    ns: &str,
    bits: u8,
    terms: Terms,
    owner: &str,
) -> SlotLease {
    let c = client(store, ns, bits, terms);
    let owner = Owner::new(owner);
    let what = format!("{owner} acquires in '{ns}'");
    eventually(&what, 300, || c.acquire(&conformance::request(&owner))).lease
}

/// Where the failover test is: 0 before the crash, 1 crashed, 2 promoted.
struct Phase(AtomicUsize);

const RUNNING: usize = 0;
const CRASHED: usize = 1;
const PROMOTED: usize = 2;

/// What one holder thread saw.
#[derive(Debug, Default)]
struct Seen {
    /// Renewals acknowledged before the crash and after the promotion.
    before: usize,
    after: usize,
    /// `Store` errors (the primary gone, the standby not promoted yet).
    errors: usize,
    /// The last lease acknowledged.
    last: Option<SlotLease>,
}

/// A holder: acquires a slot through `url`, then renews every 50 ms until `stop` (or a bounded
/// number of rounds), recording every window granted in `trace`. A lost lease fails the test.
fn holder(
    url: String,
    ns: String,
    name: String,
    trace: Arc<Mutex<Vec<Step>>>,
    phase: Arc<Phase>,
    stop: Arc<AtomicBool>,
    counts: Arc<[AtomicUsize; 2]>,
) -> Seen {
    let store = open(&url, Duration::from_secs(2)).expect("open");
    let c = client(&store, &ns, 3, LONG);
    let mut lease = acquire(&c, &Owner::new(name.clone())).lease;
    trace.lock().unwrap().push(Step::of_lease(&lease));
    let mut seen = Seen::default();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        let at = phase.0.load(Ordering::SeqCst);
        match c.renew(&lease) {
            Ok(Renewal::Renewed(l)) => {
                assert_eq!(
                    (l.slot, l.fence),
                    (lease.slot, lease.fence),
                    "{name} renews"
                );
                assert!(l.ceiling >= lease.ceiling, "{name}: the ceiling went down");
                trace.lock().unwrap().push(Step::of_lease(&l));
                lease = l;
                match at {
                    RUNNING => {
                        seen.before += 1;
                        counts[0].fetch_add(1, Ordering::SeqCst);
                    }
                    PROMOTED => {
                        seen.after += 1;
                        counts[1].fetch_add(1, Ordering::SeqCst);
                    }
                    _ => {}
                }
            }
            Ok(Renewal::Lost(r)) => panic!("{name} lost its lease across the failover: {r:?}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Store, "{name}: {e}");
                seen.errors += 1;
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    seen.last = Some(lease);
    seen
}

/// Writes slot 0 of `ns` again and again with raw compare-and-sets (fence 1, 2, 3, …) until the
/// first error; returns the last acknowledged (fence, version) and the count.
fn writer(store: SharedStore, ns: String, started: Arc<AtomicUsize>) -> (u64, u64) {
    let mut rec = SlotRecord::vacant(0);
    rec.fence = 1;
    let mut version = store
        .cas_slot(&ns, SlotWrite::new(None, &rec))
        .expect("the first write")
        .expect("slot 0 is new");
    let mut acked = (rec.fence, version);
    for _ in 0..1_000_000 {
        started.fetch_add(1, Ordering::SeqCst);
        rec.fence += 1;
        rec.ceiling = rec.fence as i64;
        match store.cas_slot(&ns, SlotWrite::new(Some(version), &rec)) {
            Ok(Some(v)) => {
                version = v;
                acked = (rec.fence, v);
            }
            Ok(None) => panic!("nobody else writes slot 0 of '{ns}'"),
            Err(_) => break,
        }
    }
    acked
}

/// The failover: holders on a namespace, a holder with a short lease on a one-slot namespace,
/// and a raw writer keep writing through `postgres://…@primary,standby/…`; the primary crashes
/// (immediate shutdown) and the standby, synchronous, is promoted.
///
/// After it: every write acknowledged before the crash is on the new primary (the writer's last
/// acknowledged version, or the one it had in flight); the holders renew on the new primary
/// with their fences; a newcomer that takes over the short lease once it expired gets a floor
/// at or above the last ceiling acknowledged to the old holder; and all the windows granted,
/// before and after, pass `invariants::disjoint_windows`.
#[test]
fn failover_to_a_synchronous_standby_keeps_acknowledged_writes_and_windows_disjoint() {
    let pair = PgPair::start();
    let url = pair.url("");
    let ns = unique_namespace("failover");
    let ns_takeover = unique_namespace("failover-takeover");
    let ns_raw = unique_namespace("failover-raw");
    let trace = Arc::new(Mutex::new(Vec::new()));
    let phase = Arc::new(Phase(AtomicUsize::new(RUNNING)));
    let stop = Arc::new(AtomicBool::new(false));
    // Renewals acknowledged to each holder before the crash and after the promotion.
    let counts: Vec<Arc<[AtomicUsize; 2]>> = (0..4)
        .map(|_| Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]))
        .collect();
    let below = |phase: usize, n: usize| counts.iter().any(|c| c[phase].load(Ordering::SeqCst) < n);

    let holders: Vec<_> = (0..4)
        .map(|i| {
            let (url, ns, trace, phase, stop, counts) = (
                url.clone(),
                ns.clone(),
                trace.clone(),
                phase.clone(),
                stop.clone(),
                counts[i].clone(),
            );
            thread::spawn(move || {
                holder(url, ns, format!("holder-{i}"), trace, phase, stop, counts)
            })
        })
        .collect();

    // The short lease: renewed in a tight loop until the first error, then abandoned (its
    // runtime died with the primary).
    let store = open(&url, Duration::from_secs(2)).unwrap();
    let takeover = client(&store, &ns_takeover, 0, SHORT);
    let short_first = acquire(&takeover, &Owner::new("short")).lease;
    let short_renewals = Arc::new(AtomicUsize::new(0));
    let short_thread = {
        let (counter, first) = (short_renewals.clone(), short_first.clone());
        thread::spawn(move || {
            let mut grants = vec![first.clone()];
            let mut lease = first;
            for _ in 0..1_000_000 {
                match takeover.renew(&lease) {
                    Ok(Renewal::Renewed(l)) => {
                        grants.push(l.clone());
                        lease = l;
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Renewal::Lost(r)) => panic!("the short lease was lost: {r:?}"),
                    Err(_) => break,
                }
            }
            grants
        })
    };

    let raw_count = Arc::new(AtomicUsize::new(0));
    let raw_thread = {
        let (store, ns_raw, count) = (
            open(&url, Duration::from_secs(2)).unwrap(),
            ns_raw.clone(),
            raw_count.clone(),
        );
        thread::spawn(move || writer(store, ns_raw, count))
    };

    // Everyone has written a few times before the crash.
    let deadline = Instant::now() + Duration::from_secs(120);
    while raw_count.load(Ordering::SeqCst) < 20
        || short_renewals.load(Ordering::SeqCst) < 5
        || below(0, 2)
    {
        assert!(Instant::now() < deadline, "the writers did not get going");
        thread::sleep(Duration::from_millis(20));
    }
    phase.0.store(CRASHED, Ordering::SeqCst);
    pair.crash_primary();
    let (acked_fence, acked_version) = raw_thread.join().expect("the raw writer");
    let short_grants = short_thread.join().expect("the short holder");
    pair.promote_standby();
    phase.0.store(PROMOTED, Ordering::SeqCst);

    // Every acknowledged write is there: the writer's last acknowledged record, or the one it
    // had in flight when the primary died (committed, its answer lost).
    let check = open(&url, Duration::from_secs(2)).unwrap();
    let (_, rec) = eventually("reading on the new primary", 100, || {
        check.read_slot(&ns_raw, 0)
    });
    let rec = rec.expect("the raw slot is on the new primary");
    assert!(
        (rec.value.fence == acked_fence && rec.version == acked_version)
            || rec.value.fence == acked_fence + 1,
        "the last acknowledged write (fence {acked_fence}, version {acked_version}) was lost: \
         the new primary holds fence {} version {}",
        rec.value.fence,
        rec.version
    );
    let short_last = short_grants.last().expect("a grant").clone();
    let stored = check
        .read_slot(&ns_takeover, 0)
        .unwrap()
        .1
        .expect("the short slot");
    assert!(
        stored.value.ceiling >= short_last.ceiling && stored.value.fence == short_last.fence,
        "the last acknowledged renewal of the short lease (ceiling {}) was lost: {:?}",
        short_last.ceiling,
        stored.value
    );

    // A newcomer takes over the short lease once it expired (on the store's clock).
    let newcomer = acquire_eventually(&check, &ns_takeover, 0, SHORT, "newcomer");
    assert_eq!(newcomer.fence, short_last.fence + 1);
    assert!(
        newcomer.floor >= short_last.ceiling,
        "the newcomer's floor {} is below the ceiling {} acknowledged to the old holder",
        newcomer.floor,
        short_last.ceiling
    );
    // And a new owner acquires on the holders' namespace.
    let late = acquire_eventually(&check, &ns, 3, LONG, "late");

    // The holders carry on against the new primary: a few renewals each (bounded), then stop.
    let deadline = Instant::now() + Duration::from_secs(120);
    while below(1, 3) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    let seen: Vec<Seen> = holders
        .into_iter()
        .map(|h| h.join().expect("a holder"))
        .collect();
    for (i, s) in seen.iter().enumerate() {
        assert!(s.before >= 2, "holder-{i} renewed before the crash: {s:?}");
        assert!(s.after >= 3, "holder-{i} renews on the new primary: {s:?}");
    }
    let mut slots: Vec<u32> = seen
        .iter()
        .map(|s| s.last.as_ref().unwrap().slot)
        .chain([late.slot])
        .collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 5, "five holders, five slots");

    let mut all = trace.lock().unwrap().clone();
    all.extend(short_grants.iter().map(Step::of_lease));
    all.push(Step::of_lease(&newcomer));
    all.push(Step::of_lease(&late));
    // The short slot is on another namespace: check it on its own, with its own grants in order.
    let (short_trace, main_trace): (Vec<Step>, Vec<Step>) = all.into_iter().partition(|s| {
        matches!(s, Step::Granted { holder, .. } if holder.incarnation == short_last.owner.incarnation
            || holder.incarnation == newcomer.owner.incarnation)
    });
    invariants::disjoint_windows(&short_trace).unwrap_or_else(|v| panic!("{v}"));
    invariants::disjoint_windows(&main_trace).unwrap_or_else(|v| panic!("{v}"));
}

/// A URL that reaches only the standby (the primary forgotten) gives a `Store` error from every
/// compare-and-set saying the server is read-only and what to put in the URL; a two-host URL
/// whose only live host is the standby says no host accepted writes; with
/// `target_session_attrs=any` and the standby first, the store goes on to the primary. The
/// password shows in none of the errors.
#[test]
fn a_url_reaching_only_the_standby_gives_the_read_only_error_naming_the_fix() {
    let pair = shared_pair();
    let standby = pair.standby().port();
    let primary = pair.primary().port();
    let ns = unique_namespace("read-only");
    {
        let url = format!("postgres://postgres:{SECRET}@127.0.0.1:{standby}/postgres");
        let store = open(&url, Duration::from_secs(5)).unwrap();
        let e = store
            .cas_slot(&ns, SlotWrite::new(None, &SlotRecord::vacant(0)))
            .expect_err("a standby takes no write");
        let text = format!("{e} {e:?}");
        assert!(!text.contains(SECRET), "{text}");
        assert_store_error(
            &e,
            &[
                &store.describe(),
                "read-only",
                "25006",
                "target_session_attrs=read-write",
            ],
        );
        let e = store.snapshot(&ns).expect_err("nor does connecting");
        assert!(e.message().contains("read-only"), "{e}");
    }

    let dead = network_dead_port();
    let url = format!("postgres://postgres:{SECRET}@127.0.0.1:{dead},127.0.0.1:{standby}/postgres");
    let store = open(&url, Duration::from_secs(5)).unwrap();
    assert!(!format!("{store:?} {}", store.describe()).contains(SECRET));
    let e = store
        .cas_slot(&ns, SlotWrite::new(None, &SlotRecord::vacant(0)))
        .expect_err("no host takes writes");
    let text = format!("{e} {e:?}");
    assert!(!text.contains(SECRET), "{text}");
    assert!(
        e.message().contains("no host of the URL accepted writes"),
        "{e}"
    );

    // With `target_session_attrs=any` and the standby first, the standby takes the connection
    // but refuses the schema check (a write), and the store goes on to the primary: connecting
    // to a host includes that check.
    let url = format!(
        "postgres://postgres:{SECRET}@127.0.0.1:{standby},127.0.0.1:{primary}/postgres\
         ?target_session_attrs=any"
    );
    let store = open(&url, Duration::from_secs(5)).unwrap();
    let c = client(&store, &unique_namespace("any"), 2, LONG);
    let got = acquire(&c, &Owner::new("any"));
    assert!(c.release(&got.lease, None).unwrap());

    // The same URL with the primary in it works, whichever host comes first.
    for url in [pair.url(""), pair.url_standby_first("")] {
        let with_pw = url.replace("postgres@", &format!("postgres:{SECRET}@"));
        let store = open(&with_pw, Duration::from_secs(5)).unwrap();
        let c = client(&store, &unique_namespace("read-write"), 2, LONG);
        let got = acquire(&c, &Owner::new("rw"));
        assert!(c.release(&got.lease, None).unwrap());
    }
}

/// A server that turns read-only under an open connection (`default_transaction_read_only`
/// switched on and reloaded): the compare-and-set fails with the server's "cannot execute
/// UPDATE in a read-only transaction" and the fix; the connection is dropped (the next
/// operation connects again, and says so), and once the server takes writes again the holder
/// renews with its fence.
#[test]
fn a_server_turned_read_only_fails_the_compare_and_set_naming_the_fix_and_is_reconnected() {
    let server = Server::postgres();
    let url = format!(
        "postgres://postgres:{SECRET}@127.0.0.1:{}/postgres",
        server.port()
    );
    let store = open(&url, Duration::from_secs(5)).unwrap();
    let c = client(&store, &unique_namespace("turned-read-only"), 2, LONG);
    let lease = acquire(&c, &Owner::new("holder")).lease;

    psql(
        server.port(),
        "ALTER SYSTEM SET default_transaction_read_only = on",
    );
    psql(server.port(), "SELECT pg_reload_conf()");
    // The backend takes the new setting at its next statement: bounded retries.
    let mut refused = None;
    for _ in 0..50 {
        match c.renew(&lease) {
            Ok(Renewal::Renewed(_)) => thread::sleep(Duration::from_millis(100)),
            Ok(Renewal::Lost(r)) => panic!("the lease was lost: {r:?}"),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("the read-only server refuses the compare-and-set");
    assert!(!format!("{e} {e:?}").contains(SECRET), "{e}");
    assert_store_error(
        &e,
        &[
            &store.describe(),
            "writing a slot record",
            "cannot execute UPDATE in a read-only transaction (25006)",
            "target_session_attrs=read-write",
        ],
    );
    let e = c.renew(&lease).expect_err("still read-only");
    assert!(
        e.message().contains("connecting") && e.message().contains("25006"),
        "the connection was dropped, and the new one is refused too: {e}"
    );

    psql(
        server.port(),
        // Allowed in a read-only session: it writes no table.
        "ALTER SYSTEM RESET default_transaction_read_only",
    );
    psql(server.port(), "SELECT pg_reload_conf()");
    let again = eventually("renewing once the server takes writes", 50, || {
        c.renew(&lease)
    });
    let Renewal::Renewed(again) = again else {
        panic!("the lease was lost: {again:?}");
    };
    assert_eq!((again.slot, again.fence), (lease.slot, lease.fence));
}

/// What synchronous replication prevents, shown with a standby that lags (asynchronous, its
/// replication cut): renewals the primary acknowledged are not on the standby, so after the
/// failover the slot expires early on the store and a newcomer is granted a window below the
/// ceiling its holder was given; `invariants::disjoint_windows` reports the overlap. (The
/// checks of the failover test above fail the same way on such a store.)
#[test]
fn without_synchronous_replication_a_failover_loses_acknowledged_renewals_and_windows_overlap() {
    let pair = PgPair::start_async();
    let url = pair.url("");
    let ns = unique_namespace("async-loss");
    let store = open(&url, Duration::from_secs(5)).unwrap();
    let c = client(&store, &ns, 0, SHORT);
    let first = acquire(&c, &Owner::new("holder")).lease;
    pair.wait_until_caught_up();
    pair.cut_replication();

    let mut grants = vec![first.clone()];
    let mut lease = first.clone();
    for _ in 0..100 {
        if lease.ceiling > first.ceiling {
            break;
        }
        thread::sleep(Duration::from_millis(20));
        match c.renew(&lease).expect("the primary is up") {
            Renewal::Renewed(l) => {
                grants.push(l.clone());
                lease = l;
            }
            Renewal::Lost(r) => panic!("lost with the primary up: {r:?}"),
        }
    }
    assert!(lease.ceiling > first.ceiling, "the store clock never moved");
    pair.crash_primary();
    pair.promote_standby();

    let check = open(&url, Duration::from_secs(2)).unwrap();
    let newcomer = acquire_eventually(&check, &ns, 0, SHORT, "newcomer");
    assert!(
        newcomer.floor < lease.ceiling,
        "the lost renewals should have let the newcomer in below the acknowledged ceiling {}: \
         {newcomer:?}",
        lease.ceiling
    );
    let trace: Vec<Step> = grants
        .iter()
        .chain([&newcomer])
        .map(Step::of_lease)
        .collect();
    let v = invariants::disjoint_windows(&trace).expect_err("the windows overlap");
    assert_eq!(v.invariant, Invariant::DisjointWindows, "{v}");
}

/// A first host that never answers (its listen queue full: connection attempts hang, as to a
/// host that is down or cut off) takes only its share of the timeout, and the second host is
/// reached within the same operation.
#[test]
fn a_first_host_that_does_not_answer_leaves_time_for_the_second() {
    let hole = Blackhole::new();
    second_host_reached_in_one_operation(hole.port);
}

/// A first host that accepts connections and then never answers (a server stopped with
/// SIGSTOP, or wedged: the kernel still completes the TCP handshake) takes only its share of
/// the timeout too: the share bounds the whole of connecting to a host, not only the handshake.
#[test]
fn a_first_host_that_accepts_but_never_answers_leaves_time_for_the_second() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    // Accepts every connection and holds it open, reading and writing nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming() {
            held.push(conn);
        }
    });
    second_host_reached_in_one_operation(silent_port);
}

/// With `first` (a port that never answers) before the primary in the URL, the first
/// operation reaches the primary: without the share, the first host would take all of the
/// operation's timeout, every time.
fn second_host_reached_in_one_operation(first: u16) {
    let url = format!(
        "postgres://postgres:{SECRET}@127.0.0.1:{first},127.0.0.1:{}/postgres",
        shared_pair().primary().port()
    );
    let store = open(&url, Duration::from_secs(8)).unwrap();
    if let Err(e) = store.snapshot(&unique_namespace("first-host-silent")) {
        assert!(!format!("{e:?}").contains(SECRET), "{e}");
        panic!("the second host was not reached: {e}");
    }
}

/// A loopback port whose listen queue is full: the kernel drops further connection attempts,
/// which hang until the client gives up.
struct Blackhole {
    port: u16,
    _listener: std::net::TcpListener,
    _queued: Vec<std::net::TcpStream>,
}

impl Blackhole {
    fn new() -> Blackhole {
        use std::os::fd::FromRawFd;
        let listener = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
                },
                sin_zero: [0; 8],
            };
            let rc = libc::bind(
                fd,
                &addr as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
            assert_eq!(libc::listen(fd, 0), 0, "listen");
            std::net::TcpListener::from_raw_fd(fd)
        };
        let port = listener.local_addr().unwrap().port();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut queued = Vec::new();
        for _ in 0..16 {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(s) => queued.push(s),
                Err(_) => {
                    return Blackhole {
                        port,
                        _listener: listener,
                        _queued: queued,
                    }
                }
            }
        }
        panic!("the listen queue of port {port} never filled up");
    }
}

/// A loopback port nobody listens on.
fn network_dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
