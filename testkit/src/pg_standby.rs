//! A throwaway PostgreSQL primary with a streaming standby, for failover tests.
//!
//! [`PgPair::start`] starts a primary (a [`Server`]) and makes a standby of it with
//! `pg_basebackup -R` (a second [`Server`], on its own free loopback port), then turns on
//! synchronous replication on the primary (`synchronous_standby_names` naming the standby,
//! `synchronous_commit = on`), and waits until the standby streams as the synchronous one. From
//! then on a commit is acknowledged only once the standby has flushed it, so a promoted standby
//! holds every acknowledged write. [`PgPair::start_async`] leaves replication asynchronous.
//!
//! [`PgPair::crash_primary`] stops the primary the way a crash does (`SIGQUIT`: PostgreSQL's
//! immediate shutdown, what `pg_ctl stop -m immediate` sends; no checkpoint, clients cut off),
//! and [`PgPair::promote_standby`] promotes the standby (`pg_promote()`, waiting until it is
//! done). Both servers stop and their data is removed on drop. Every wait is bounded.

use super::{pg_bin, run, wait_until, Server, READY_TIMEOUT};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The standby's name in `synchronous_standby_names` (its `application_name`).
pub const STANDBY_NAME: &str = "cosid_standby";

/// A primary and its streaming standby.
#[derive(Debug)]
pub struct PgPair {
    primary: Server,
    standby: Server,
}

impl PgPair {
    /// A primary and a standby with synchronous replication (see the module documentation).
    pub fn start() -> PgPair {
        let pair = PgPair::start_async();
        pair.sql_primary(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"
        ));
        pair.sql_primary("ALTER SYSTEM SET synchronous_commit = 'on'");
        pair.sql_primary("SELECT pg_reload_conf()");
        pair.wait_for_replication("sync");
        pair
    }

    /// A primary and a standby with asynchronous streaming replication (PostgreSQL's default):
    /// a crash of the primary may lose its last acknowledged commits.
    pub fn start_async() -> PgPair {
        let primary = Server::postgres();
        // A server of our own for the standby (port, directory, user, clean-up); its data
        // directory is replaced by a base backup of the primary.
        let standby = Server::postgres();
        standby.stop();
        let data = standby.data_dir();
        std::fs::remove_dir_all(&data)
            .unwrap_or_else(|e| panic!("cosid-testkit: cannot empty {}: {e}", data.display()));
        let mut cmd = Command::new(pg_bin("pg_basebackup"));
        cmd.args(["-h", "127.0.0.1", "-p", &primary.port().to_string()])
            .args(["-U", "postgres", "-D"])
            .arg(&data)
            .args(["-R", "-X", "stream", "--no-sync", "-c", "fast"])
            .stdin(Stdio::null());
        standby.as_postgres_user(&mut cmd);
        run(cmd, "pg_basebackup");
        // -R wrote standby.signal and primary_conninfo; the walreceiver's application_name is
        // the name synchronous_standby_names matches (a later line of the file wins).
        let conf = data.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&conf)
            .unwrap_or_else(|e| panic!("cosid-testkit: cannot read {}: {e}", conf.display()));
        text.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}'\n",
            primary.port()
        ));
        std::fs::write(&conf, text)
            .unwrap_or_else(|e| panic!("cosid-testkit: cannot write {}: {e}", conf.display()));
        standby.start();
        let pair = PgPair { primary, standby };
        pair.wait_for_replication("async");
        pair
    }

    /// The primary (until [`PgPair::crash_primary`]).
    pub fn primary(&self) -> &Server {
        &self.primary
    }

    /// The standby (the primary after [`PgPair::promote_standby`]).
    pub fn standby(&self) -> &Server {
        &self.standby
    }

    /// `postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/postgres` with the primary first, and
    /// `query` (without `?`) when not empty.
    pub fn url(&self, query: &str) -> String {
        self.url_of(&[&self.primary, &self.standby], query)
    }

    /// The URL with the standby first: a client that wants a writable session must pass it by.
    pub fn url_standby_first(&self, query: &str) -> String {
        self.url_of(&[&self.standby, &self.primary], query)
    }

    fn url_of(&self, servers: &[&Server], query: &str) -> String {
        let hosts: Vec<String> = servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        let mut url = format!("postgres://postgres@{}/postgres", hosts.join(","));
        if !query.is_empty() {
            url.push('?');
            url.push_str(query);
        }
        url
    }

    /// Stops the primary like a crash: `SIGQUIT` (immediate shutdown); then [`Server::stop`]
    /// reaps it (its fast-shutdown signal is ignored by a server already shutting down
    /// immediately, and it kills one that does not end in time). Its data directory stays
    /// until the pair is dropped.
    pub fn crash_primary(&self) {
        let pid = self
            .primary
            .child
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|c| c.id());
        if let Some(pid) = pid {
            // Not reaped before `stop` takes it: the pid cannot be reused meanwhile.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGQUIT);
            }
        }
        self.primary.stop();
    }

    /// Promotes the standby and waits until it accepts writes.
    pub fn promote_standby(&self) {
        let out = psql(self.standby.port(), "SELECT pg_promote(true, 60)");
        assert_eq!(out, "t", "cosid-testkit: pg_promote() answered {out:?}");
        wait_until(
            "the standby leaves recovery after pg_promote()",
            Duration::from_millis(50),
            || psql(self.standby.port(), "SELECT pg_is_in_recovery()") == "f",
            String::new,
        );
    }

    /// Waits until the standby has replayed everything the primary has written so far.
    pub fn wait_until_caught_up(&self) {
        let lsn = self.sql_primary("SELECT pg_current_wal_lsn()");
        let query = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        wait_until(
            &format!("the standby replays up to {lsn}"),
            Duration::from_millis(50),
            || self.sql_standby(&query) == "t",
            String::new,
        );
    }

    /// Stops the standby's replication (`primary_conninfo` emptied) and waits until its WAL
    /// receiver is gone: from then on it lags without bound, as an asynchronous standby can.
    /// Commits on the primary are not held up only with [`PgPair::start_async`]: a synchronous
    /// primary waits for the standby.
    pub fn cut_replication(&self) {
        self.sql_standby("ALTER SYSTEM SET primary_conninfo = ''");
        self.sql_standby("SELECT pg_reload_conf()");
        wait_until(
            "the standby stops receiving WAL after its primary_conninfo was emptied",
            Duration::from_millis(50),
            || self.sql_standby("SELECT count(*) FROM pg_stat_wal_receiver") == "0",
            String::new,
        );
    }

    /// Runs `sql` on the primary, returning its unaligned output.
    pub fn sql_primary(&self, sql: &str) -> String {
        psql(self.primary.port(), sql)
    }

    /// Runs `sql` on the standby, returning its unaligned output.
    pub fn sql_standby(&self, sql: &str) -> String {
        psql(self.standby.port(), sql)
    }

    /// Waits until the primary sees the standby streaming with `sync_state` = `state`.
    fn wait_for_replication(&self, state: &str) {
        let query = format!(
            "SELECT state || '/' || sync_state FROM pg_stat_replication \
             WHERE application_name = '{STANDBY_NAME}'"
        );
        let want = format!("streaming/{state}");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let got = self.sql_primary(&query);
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cosid-testkit: the standby is not {want} within {READY_TIMEOUT:?} (last: \
                 {got:?}); its log:\n{}",
                super::tail(&self.standby.dir.join("server.log"))
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Runs `sql` with `psql` on the testkit's PostgreSQL at `port` (a [`Server`] or either of a
/// pair; as user `postgres`, trusted on loopback), bounded by `statement_timeout`; its
/// unaligned, tuples-only output, trimmed. A failure is a panic with psql's output.
pub fn psql(port: u16, sql: &str) -> String {
    let mut cmd = Command::new(pg_bin("psql"));
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-X", "-q", "-A", "-t"])
        .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGOPTIONS", "-c statement_timeout=70000")
        .stdin(Stdio::null());
    run(cmd, "psql").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_committed_row_is_on_the_promoted_standby() {
        let pair = PgPair::start();
        pair.sql_primary("CREATE TABLE t (v int); INSERT INTO t VALUES (7)");
        assert_eq!(pair.sql_standby("SELECT pg_is_in_recovery()"), "t");
        pair.crash_primary();
        assert!(!pair.primary().is_running());
        pair.promote_standby();
        assert_eq!(pair.sql_standby("SELECT v FROM t"), "7");
        pair.sql_standby("INSERT INTO t VALUES (8)");
    }
}
