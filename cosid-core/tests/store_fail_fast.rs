//! A start-up whose store refuses it for good fails at once, with the store's error, instead of
//! retrying for the whole acquire timeout: a wrong password, a database that does not exist, TLS
//! on one side only, a host name that does not resolve. Each runtime here is built with an
//! acquire timeout of 10 minutes, so a start-up that retried would hang the test (and the test
//! program's bound would stop it): returning at all is the check, never a measured time.
//!
//! Run with `cargo test -p cosid-core --features redis,postgres,etcd,mysql --test
//! store_fail_fast`.

#![cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "etcd"
))]

use cosid_core::{Error, ErrorKind, Runtime};

/// A password that must never show.
const SECRET: &str = "Sup3r-s3cret-pw";

/// Builds a runtime on `store` with a 10-minute acquire timeout and returns its error: the
/// start-up must give up at once.
fn start_up_error(store: &str) -> Error {
    let yaml = format!(
        "cosid:\n  namespace: fail-fast\n  machine:\n    lease:\n      store: '{store}'\n      \
         ttl: 3s\n      acquire-timeout: 10m\n"
    );
    match Runtime::from_yaml(&yaml) {
        Ok(rt) => {
            let _ = rt.close();
            panic!("a runtime started on {store}")
        }
        Err(e) => e,
    }
}

/// Asserts that `e` is a permanent `Store` error saying each of `parts`, with no password.
fn assert_permanent(e: &Error, parts: &[&str]) {
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(e.is_permanent(), "{e}");
    let text = format!("{e} {e:?}");
    assert!(!text.contains(SECRET), "the password shows: {text}");
    assert!(!text.contains("acquire-timeout"), "it waited: {text}");
    for part in parts {
        assert!(
            text.to_ascii_lowercase()
                .contains(&part.to_ascii_lowercase()),
            "{part:?} in {text}"
        );
    }
}

/// A host name under `.invalid` (RFC 2606), which no resolver resolves.
const NO_SUCH_HOST: &str = "no-such-host.cosid-test.invalid";

#[cfg(feature = "redis")]
mod redis {
    use super::*;

    #[test]
    fn a_wrong_password_fails_at_once() {
        // The test server has no users configured: it refuses any user and password.
        let url = cosid_testkit::shared_redis_url();
        let rest = url.split_once("://").unwrap().1;
        let e = start_up_error(&format!("redis://cosid:{SECRET}@{rest}"));
        assert_permanent(&e, &["password"]);
    }

    #[test]
    fn rediss_on_a_plain_port_fails_at_once() {
        let url = cosid_testkit::shared_redis_url();
        let e = start_up_error(&url.replacen("redis://", "rediss://", 1));
        assert_permanent(&e, &["TLS", "redis://"]);
    }

    #[test]
    fn an_unresolvable_host_fails_at_once() {
        let e = start_up_error(&format!("redis://{NO_SUCH_HOST}:6379/0"));
        assert_permanent(&e, &[NO_SUCH_HOST, "resolve"]);
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use cosid_testkit::Server;
    use std::process::{Command, Stdio};

    /// Runs SQL on `server` with `psql` as its `postgres` user, returning the output.
    fn psql(server: &Server, statement: &str) -> String {
        let out = Command::new("psql")
            .args(["-X", "-A", "-t", "-h", "127.0.0.1", "-U", "postgres", "-d"])
            .arg("postgres")
            .arg(format!("-p{}", server.port()))
            .args(["-c", statement])
            .stdin(Stdio::null())
            .output()
            .expect("psql (Debian postgresql-client)");
        assert!(
            out.status.success(),
            "{statement}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn a_wrong_password_fails_at_once() {
        // The test server trusts loopback: this one asks TCP clients for passwords.
        let server = Server::postgres();
        psql(&server, "ALTER ROLE postgres PASSWORD 'the-right-one'");
        let hba = psql(&server, "SHOW hba_file");
        std::fs::write(
            &hba,
            "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n\
             host all all ::1/128 scram-sha-256\n",
        )
        .unwrap();
        // Still trusted until the server reloads its rules.
        psql(&server, "SELECT pg_reload_conf()");
        let e = start_up_error(&format!(
            "postgres://postgres:{SECRET}@127.0.0.1:{}/postgres",
            server.port()
        ));
        assert_permanent(&e, &["password authentication failed"]);
    }

    #[test]
    fn an_unknown_user_fails_at_once() {
        let url = cosid_testkit::shared_postgres_url();
        let e = start_up_error(&url.replacen("://postgres@", "://no_such_user@", 1));
        assert_permanent(&e, &["no_such_user"]);
    }

    #[test]
    fn a_database_that_does_not_exist_fails_at_once() {
        let url = cosid_testkit::shared_postgres_url();
        let (base, _) = url.rsplit_once('/').unwrap();
        let e = start_up_error(&format!("{base}/no_such_database"));
        assert_permanent(&e, &["no_such_database", "does not exist"]);
    }

    #[test]
    fn tls_required_of_a_server_without_it_fails_at_once() {
        let url = cosid_testkit::shared_postgres_url();
        let e = start_up_error(&format!("{url}?sslmode=require"));
        assert_permanent(&e, &["TLS"]);
    }

    #[test]
    fn a_certificate_the_store_does_not_trust_fails_at_once() {
        // The system's roots do not hold the test server's CA.
        let server = Server::postgres_tls();
        let e = start_up_error(&format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=verify-full",
            server.port()
        ));
        assert_permanent(&e, &["certificate"]);
    }

    #[test]
    fn an_unresolvable_host_fails_at_once() {
        let e = start_up_error(&format!("postgres://postgres@{NO_SUCH_HOST}:5432/postgres"));
        assert_permanent(&e, &["resolve"]);
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    use cosid_testkit::MYSQL_PASSWORD_USER;

    #[test]
    fn a_wrong_password_fails_at_once() {
        let url = cosid_testkit::shared_mysql_url();
        let rest = url.split_once('@').unwrap().1;
        let e = start_up_error(&format!(
            "mysql://{}:{SECRET}@{rest}",
            MYSQL_PASSWORD_USER.0
        ));
        assert_permanent(&e, &["Access denied"]);
    }

    #[test]
    fn a_database_that_does_not_exist_fails_at_once() {
        let url = cosid_testkit::shared_mysql_url();
        let (base, _) = url.rsplit_once('/').unwrap();
        let e = start_up_error(&format!("{base}/no_such_database"));
        assert_permanent(&e, &["no_such_database"]);
    }

    #[test]
    fn an_unresolvable_host_fails_at_once() {
        let e = start_up_error(&format!("mysql://cosid@{NO_SUCH_HOST}:3306/cosid"));
        assert_permanent(&e, &["resolve"]);
    }
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;

    #[test]
    fn an_unresolvable_host_fails_at_once() {
        let e = start_up_error(&format!("etcd://{NO_SUCH_HOST}:2379"));
        assert_permanent(&e, &["resolve"]);
    }
}
