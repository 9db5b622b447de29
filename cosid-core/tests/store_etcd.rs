//! The store conformance suite and the fault tests on `etcd`, against a real etcd server that
//! `cosid-testkit` starts (or the one `COSID_TEST_ETCD_URL` names; the fault tests that stop or
//! empty a server always start their own).
//!
//! Run with `cargo test -p cosid-core --features etcd --test store_etcd`.

#![cfg(feature = "etcd")]

mod conformance;
mod network;

use conformance::{acquire, client, LONG};
use cosid_core::lease::{Owner, Refusal, Renewal};
use cosid_core::store::etcd::EtcdStore;
use cosid_core::ErrorKind;
use cosid_testkit::Server;
use serde_json::json;
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

/// What etcd's JSON gateway at `port` answers to `body` posted to `path` (one request on a
/// connection of its own): the test's view of the server, beside the store under test.
fn gateway(port: u16, path: &str, body: serde_json::Value) -> serde_json::Value {
    use std::io::{Read, Write};
    let body = body.to_string();
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        tcp,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    let (head, json) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    // etcd answers these small requests with a Content-Length, never chunked.
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{path}: {e}: {answer}"))
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An int64 of a gateway answer (written as a string; absent when zero).
fn int(v: &serde_json::Value) -> i64 {
    v.as_str().map_or(0, |s| s.parse().unwrap())
}

/// The `mod_revision` of `key` (0: no such key) and the store's revision, read directly.
fn mod_revision(port: u16, key: &str) -> (i64, i64) {
    let got = gateway(port, "/v3/kv/range", json!({ "key": b64(key.as_bytes()) }));
    let at = got["kvs"].get(0).map_or(0, |kv| int(&kv["mod_revision"]));
    (at, int(&got["header"]["revision"]))
}

/// Puts filler keys until the store's revision is `revision` (which must not be behind it).
fn bring_revision_to(port: u16, revision: i64) {
    loop {
        let (_, now) = mod_revision(port, "t/filler");
        assert!(
            now <= revision,
            "the store is at revision {now}, past {revision}"
        );
        if now == revision {
            return;
        }
        let filler = json!({ "key": b64(b"t/filler"), "value": b64(b"x") });
        gateway(port, "/v3/kv/put", filler);
    }
}

/// cosid issue 31: etcd loses its data (killed, data directory deleted, started again) and
/// its revisions restart at 1, so a newcomer's record on the holder's slot can get the very
/// `mod_revision` the holder's last write was given. The holder's read-free renewal (a
/// compare-and-set against that version) and its release must not write over the newcomer's
/// lease: the version the holder remembers was given under the store's lineage before the loss,
/// so it matches nothing written after. Here the collision is made exact: filler writes bring
/// the revisions to the holder's before the newcomer's renewal writes the slot.
#[test]
fn a_version_from_before_the_store_lost_its_data_matches_nothing_written_after() {
    let server = Server::etcd();
    let port = server.port();
    let ns = "wiped";
    let key = format!("cosid/slot/{ns}/0");
    let holder_store = open(&server.url(), Duration::from_secs(20)).unwrap();
    let holder = client(&holder_store, ns, 0, LONG);
    let mut lease = acquire(&holder, &Owner::new("holder")).lease;
    // Enough revisions that the newcomer's acquisition, after the loss, ends below them.
    bring_revision_to(port, 40);
    for _ in 0..3 {
        let Renewal::Renewed(renewed) = holder.renew(&lease).unwrap() else {
            panic!("the holder lost its lease with the store intact");
        };
        lease = renewed;
    }
    let (remembered, _) = mod_revision(port, &key);
    assert!(remembered > 40, "{remembered}");

    server.restart_empty();
    let newcomer_store = open(&server.url(), Duration::from_secs(20)).unwrap();
    let newcomer = client(&newcomer_store, ns, 0, LONG);
    let theirs = acquire(&newcomer, &Owner::new("newcomer")).lease;
    assert_eq!(theirs.slot, lease.slot);
    bring_revision_to(port, remembered - 1);
    let Renewal::Renewed(theirs) = newcomer.renew(&theirs).unwrap() else {
        panic!("the newcomer lost its lease");
    };
    assert_eq!(
        mod_revision(port, &key).0,
        remembered,
        "the newcomer's record has the revision of the holder's last write"
    );
    let before = newcomer_store.read_slot(ns, 0).unwrap().1.unwrap();

    // The holder's pooled connections died with the server: the first call may see that.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut renewal = holder.renew_at(&lease, now);
    for _ in 0..50 {
        match &renewal {
            Err(e) if e.kind() == ErrorKind::Store => {
                std::thread::sleep(Duration::from_millis(200));
                renewal = holder.renew_at(&lease, now);
            }
            _ => break,
        }
    }
    let renewal = renewal.unwrap();
    assert!(
        matches!(
            renewal,
            Renewal::Lost(Refusal::NotHolder { .. }) | Renewal::Lost(Refusal::Vanished)
        ),
        "the holder's renewal after the loss must report the lease lost: {renewal:?}"
    );
    assert!(
        !holder.release(&lease, None).unwrap(),
        "the holder's release after the loss must find nothing of its own"
    );
    let after = newcomer_store.read_slot(ns, 0).unwrap().1.unwrap();
    assert_eq!(after, before, "the newcomer's record was written over");
    assert_eq!(mod_revision(port, &key).0, remembered);
    assert_eq!(
        after.value.owner.as_ref().map(|o| o.key.as_str()),
        Some("newcomer")
    );
    assert!(newcomer.release(&theirs, None).unwrap());
}
