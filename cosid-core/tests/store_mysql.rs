//! The store conformance suite and the fault tests on `mysql`, against a real MariaDB server
//! that `cosid-testkit` starts (or the one `COSID_TEST_MYSQL_URL` names; the tests that stop,
//! empty or reconfigure a server always start their own).
//!
//! Run with `cargo test -p cosid-core --features mysql --test store_mysql`.

#![cfg(feature = "mysql")]

mod conformance;
mod network;

use conformance::{acquire, client, unique_namespace, LONG};
use cosid_core::lease::{Owner, SlotRecord};
use cosid_core::store::mysql::MysqlStore;
use cosid_core::store::{SharedStore, SlotWrite, StoreUrl};
use cosid_testkit::{Server, MYSQL_PASSWORD_USER};
use network::assert_store_error;
use std::process::{Command, Stdio};
use std::time::Duration;

// A password URL names the user `cosid`: the test server's `cosid` user has no password, so it
// refuses it.
network_store_tests!(
    MysqlStore,
    Server::mysql,
    cosid_testkit::shared_mysql_url,
    "cosid"
);

/// The same cases once more on a connection with `CLIENT_FOUND_ROWS` (affected rows count
/// the rows matched, not the rows changed): the compare-and-set means the same.
mod client_found_rows {
    use super::*;

    fn found_rows() -> SharedStore {
        MysqlStore::open_with(
            &StoreUrl::parse(&cosid_testkit::shared_mysql_url()).unwrap(),
            Duration::from_secs(20),
            true,
        )
        .expect("the store opens")
    }

    #[test]
    fn stale_versions_write_nothing() {
        conformance::cas_slot_with_a_stale_version_writes_nothing(&found_rows);
        conformance::cas_namespace_with_a_stale_version_writes_nothing(&found_rows);
    }

    #[test]
    fn one_winner_among_racing_writers() {
        conformance::concurrent_cas_on_one_slot_has_exactly_one_winner(&found_rows);
    }

    #[test]
    fn replayed_renewals() {
        conformance::replayed_renewal_succeeds_and_lowers_nothing(&found_rows);
    }
}

/// Writing a record equal to the stored one (only the version changes) is a write: it gets a
/// new version, and the old version then writes nothing. With `CLIENT_FOUND_ROWS` off, a
/// statement that changed no column would report 0 rows; with it on, a statement that matched
/// a row reports 1 even when it wrote nothing: both settings must give the same answers.
#[test]
fn an_unchanged_record_is_a_write_and_a_stale_one_is_not_with_either_row_count() {
    for found_rows in [false, true] {
        let store: SharedStore = MysqlStore::open_with(
            &StoreUrl::parse(&cosid_testkit::shared_mysql_url()).unwrap(),
            Duration::from_secs(20),
            found_rows,
        )
        .unwrap();
        let ns = unique_namespace("same-record");
        let rec = SlotRecord::vacant(3);
        let v1 = store
            .cas_slot(&ns, SlotWrite::new(None, &rec))
            .unwrap()
            .expect("created");
        assert_eq!(
            store.cas_slot(&ns, SlotWrite::new(None, &rec)).unwrap(),
            None,
            "{found_rows}"
        );
        let v2 = store
            .cas_slot(&ns, SlotWrite::new(Some(v1), &rec))
            .unwrap()
            .expect("the same record under the current version writes");
        assert!(v2 > v1, "{v2} after {v1}");
        assert_eq!(
            store.cas_slot(&ns, SlotWrite::new(Some(v1), &rec)).unwrap(),
            None,
            "{found_rows}"
        );
        assert_eq!(conformance::record(&store, &ns, 3).version, v2);
    }
}

/// The store clock comes with each write (the new version carries it), and it lies between the
/// clocks of reads made before and after.
#[test]
fn a_write_reports_the_store_clock() {
    let store = shared();
    let ns = unique_namespace("timed");
    let (before, _) = store.read_slot(&ns, 0).unwrap();
    let w = store
        .cas_slot_timed(&ns, SlotWrite::new(None, &SlotRecord::vacant(0)))
        .unwrap()
        .expect("created");
    let w2 = store
        .cas_slot_timed(&ns, SlotWrite::new(Some(w.version), &SlotRecord::vacant(0)))
        .unwrap()
        .expect("written");
    let (after, _) = store.read_slot(&ns, 0).unwrap();
    for written in [w, w2] {
        let now = written
            .store_now
            .expect("the write reports the store clock");
        assert!(
            before <= now && now <= after,
            "{before} <= {now} <= {after}"
        );
    }
}

/// Runs SQL on the server with the `mariadb` client (as its `cosid` user).
fn sql(server: &Server, statement: &str) {
    let client = ["mariadb", "mysql"]
        .iter()
        .map(|n| std::path::Path::new("/usr/bin").join(n))
        .find(|p| p.is_file())
        .expect("the mariadb client (Debian mariadb-client, installed with mariadb-server)");
    let out = Command::new(client)
        .args(["--no-defaults", "-h", "127.0.0.1", "-u", "cosid", "cosid"])
        .arg(format!("-P{}", server.port()))
        .args(["-e", statement])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{statement}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A record deleted by hand and written again gets a version above every one it had (versions
/// start at the server's time in microseconds), so a compare-and-set holding an old version can
/// never match the new record.
#[test]
fn a_deleted_and_recreated_record_never_repeats_a_version() {
    let server = Server::mysql();
    let store = open(&server.url(), Duration::from_secs(10)).unwrap();
    let ns = unique_namespace("recreated");
    let mut old = Vec::new();
    let mut version = None;
    for fence in 0..5 {
        let rec = SlotRecord {
            fence,
            ..SlotRecord::vacant(1)
        };
        version = Some(
            store
                .cas_slot(&ns, SlotWrite::new(version, &rec))
                .unwrap()
                .unwrap(),
        );
        old.push(version.unwrap());
    }
    sql(&server, "DELETE FROM cosid_slot");
    let again = store
        .cas_slot(&ns, SlotWrite::new(None, &SlotRecord::vacant(1)))
        .unwrap()
        .expect("created again");
    assert!(old.iter().all(|v| *v < again), "{again} after {old:?}");
    for v in &old {
        assert_eq!(
            store
                .cas_slot(&ns, SlotWrite::new(Some(*v), &SlotRecord::vacant(1)))
                .unwrap(),
            None
        );
    }
}

/// A server that would lose acknowledged commits in a crash, or cosid tables of another engine,
/// are refused at connect with an error naming the setting and the fix.
#[test]
fn a_server_without_durable_commits_or_innodb_tables_is_refused_naming_the_fix() {
    let server = Server::mysql();
    sql(&server, "SET GLOBAL innodb_flush_log_at_trx_commit = 2");
    let store = open(&server.url(), Duration::from_secs(10)).unwrap();
    let e = store.snapshot("x").expect_err("not durable");
    assert_store_error(
        &e,
        &["set innodb_flush_log_at_trx_commit = 1", &store.describe()],
    );
    sql(&server, "SET GLOBAL innodb_flush_log_at_trx_commit = 1");
    sql(
        &server,
        "CREATE TABLE cosid_slot (namespace VARBINARY(255) NOT NULL) ENGINE=MyISAM",
    );
    let store = open(&server.url(), Duration::from_secs(10)).unwrap();
    let e = store.snapshot("x").expect_err("a MyISAM table");
    assert!(
        e.message()
            .contains("cosid_slot uses the storage engine MyISAM"),
        "{e}"
    );
    assert!(
        e.message().contains("ALTER TABLE cosid_slot ENGINE=InnoDB"),
        "{e}"
    );
    sql(&server, "DROP TABLE cosid_slot");
    let store = open(&server.url(), Duration::from_secs(10)).unwrap();
    assert!(store.snapshot("x").unwrap().namespace.is_none());
}

/// A wrong password is refused with the server's message, which names the user; the password
/// shows nowhere. The right one is taken.
#[test]
fn a_wrong_password_names_the_user_not_the_password() {
    let (user, password) = MYSQL_PASSWORD_USER;
    let url = cosid_testkit::shared_mysql_url();
    let wrong = network::with_user(&url, user);
    let store = open(&wrong, network::FAULT_TIMEOUT).unwrap();
    let e = store.snapshot("pw").expect_err("a wrong password");
    assert_store_error(&e, &["Access denied", &format!("'{user}'")]);
    assert!(
        !format!("{e} {e:?} {store:?}").contains(network::SECRET),
        "{e}"
    );

    let right = wrong.replace(network::SECRET, password);
    let store = open(&right, Duration::from_secs(10)).unwrap();
    let c = client(&store, &unique_namespace("pw"), 2, LONG);
    let got = acquire(&c, &Owner::new("pw"));
    assert!(c.release(&got.lease, None).unwrap());
    assert!(!store.describe().contains(password), "{}", store.describe());
}

/// A server that takes the TCP connection and never answers (a hung process, a black hole
/// behind a proxy) gives a `Store` error saying so within the operation timeout, naming the
/// store, from connecting and from every primitive.
#[test]
fn a_server_that_never_answers_times_out_with_a_clear_error() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let store = open(
        &format!("mysql://cosid:{}@127.0.0.1:{port}/cosid", network::SECRET),
        Duration::from_millis(500),
    )
    .unwrap();
    for e in [
        store.snapshot("t").map(|_| ()).unwrap_err(),
        store.read_slot("t", 0).map(|_| ()).unwrap_err(),
        store
            .cas_slot("t", SlotWrite::new(None, &SlotRecord::vacant(0)))
            .map(|_| ())
            .unwrap_err(),
    ] {
        assert_store_error(
            &e,
            &["connecting", "no answer within 500 ms", &store.describe()],
        );
        assert!(!e.to_string().contains(network::SECRET), "{e}");
    }
    drop(silent);
}

/// `ssl-mode` from the URL is honoured (rustls) against a server that takes TLS only:
/// `verify_identity` and `verify_ca` with the server's CA, and `required`, connect; `disabled`
/// is refused by the server (so the others really used TLS); `verify_identity` against the
/// system's roots (which do not hold the test CA) is a `Store` error naming the store, which
/// shows the certificate is really checked.
#[test]
fn ssl_mode_is_honoured_with_rustls() {
    let server = Server::mysql_tls();
    let ca = server.tls_ca().expect("a TLS server").display().to_string();
    let base = format!("mysql://cosid@127.0.0.1:{}/cosid", server.port());
    network::each_query_connects(
        open,
        &base,
        &[
            format!("ssl-mode=verify_identity&ssl-ca={ca}"),
            format!("ssl-mode=VERIFY_CA&ssl-ca={ca}"),
            format!("ssl-ca={ca}"),
            "ssl-mode=required".to_string(),
        ],
    );
    for query in ["ssl-mode=disabled", "ssl-mode=verify_identity"] {
        let store = open(&format!("{base}?{query}"), Duration::from_secs(10)).unwrap();
        let e = store
            .snapshot("tls")
            .expect_err("plain text, or a CA the system does not trust");
        assert_store_error(&e, &[&store.describe()]);
    }
}
