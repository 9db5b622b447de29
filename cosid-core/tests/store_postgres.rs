//! The store conformance suite and the fault tests on `postgres`, against a real PostgreSQL server that
//! `cosid-testkit` starts (or the one `COSID_TEST_POSTGRES_URL` names; the fault tests that stop or
//! empty a server always start their own).
//!
//! Run with `cargo test -p cosid-core --features postgres --test store_postgres`.

#![cfg(feature = "postgres")]

mod conformance;
mod network;

use cosid_core::store::postgres::PostgresStore;
use cosid_testkit::Server;
use std::time::Duration;

// A password URL names the user `postgres` (the test server trusts loopback: it ignores the
// password).
network_store_tests!(
    PostgresStore,
    Server::postgres,
    cosid_testkit::shared_postgres_url,
    "postgres"
);

/// `sslmode` from the URL is honoured (rustls): `verify-full` and `verify-ca` with the server's
/// CA, `require`, and plain `disable`/`prefer` all work against a server that offers TLS;
/// `verify-full` against the system's roots (which do not hold the test CA) is refused with a
/// `Store` error naming the store, which shows the certificate is really checked.
#[test]
fn sslmode_is_honoured_with_rustls() {
    let server = Server::postgres_tls();
    let ca = server.tls_ca().expect("a TLS server").display().to_string();
    let base = format!("postgres://postgres@127.0.0.1:{}/postgres", server.port());
    network::each_query_connects(
        open,
        &base,
        &[
            format!("sslmode=verify-full&sslrootcert={ca}"),
            format!("sslmode=verify-ca&sslrootcert={ca}"),
            "sslmode=require".to_string(),
            "sslmode=prefer".to_string(),
            "sslmode=disable".to_string(),
        ],
    );
    let store = open(
        &format!("{base}?sslmode=verify-full"),
        Duration::from_secs(10),
    )
    .expect("opening does not connect");
    let e = store
        .snapshot("tls")
        .expect_err("the test CA is not among the system's roots");
    network::assert_store_error(&e, &[&store.describe()]);
}

#[test]
fn the_server_filters_the_candidate_view() {
    conformance::candidate_view_is_filtered_by_the_store(&shared);
}
