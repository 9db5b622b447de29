//! `postgres://` and `postgresql://`: the slot store in PostgreSQL.
//!
//! Each primitive is one prepared SQL statement, so one round trip, and one atomic step: the
//! reads are single `SELECT`s (one snapshot under any isolation level) that also return
//! `clock_timestamp()` as the store clock; the compare-and-sets are `UPDATE … WHERE version = $n`
//! or `INSERT … ON CONFLICT DO NOTHING`, each `RETURNING` its new version from the sequence
//! `cosid_version_seq`, which never repeats (it starts at the server's clock in microseconds
//! when it is created, so it also lies above the versions of a database that was lost, unless
//! the server clock went back).
//!
//! The schema is created on first use by every new connection, under a transaction-scoped
//! advisory lock (so many processes starting at once do not trip over each other's
//! `CREATE TABLE`), and versioned in `cosid_schema`: a database with a newer schema version than
//! this build knows is refused with an error that says so.
//!
//! TLS follows the URL's `sslmode`: `disable`, `allow` and `prefer` connect in plain text;
//! `require` encrypts without checking the certificate (libpq's meaning, unless `sslrootcert`
//! is given, when it verifies like `verify-ca`); `verify-ca` checks the chain; `verify-full`
//! checks the chain and the host name. Roots come from `sslrootcert` (a PEM file) or else the
//! system's store. rustls with the ring provider does the TLS.
//!
//! Several hosts (`postgres://u:pw@h1:5432,h2:5432/db`) are tried in order, and the first
//! that qualifies is used: with more than one host and no `target_session_attrs` in the URL,
//! cosid asks for `read-write` (libpq's default, `any`, would stay on a standby that is up
//! first, and every compare-and-set there fails), so after a failover the next connection finds
//! the promoted primary. `any` is honoured when given; `read-only`, `standby` and
//! `prefer-standby` are refused, as cosid must write. The connect timeout is shared among the
//! hosts (each gets its part of the operation timeout for its TCP connect), so a first host
//! that does not answer leaves time for the next.
//!
//! cosid opens each host's socket itself and hands tokio-postgres a stream that fails a
//! message longer than its bound (`postgres_reply.rs`): a server that is not PostgreSQL cannot
//! make the client reserve the 4 GiB a message header may declare.
//!
//! What PostgreSQL must be set up to keep for uniqueness to hold is in `docs/stores.md`.

use super::blocking::{Failure, IoRuntime, SharedConnection, DEFAULT_TIMEOUT};
use super::postgres_reply::{Bounded, BoundedTls, MessageLimit, Refusal};
use super::{
    CandidateAsk, CandidateView, Cas, NamespaceSnapshot, NamespaceWrite, SlotRead, SlotStore,
    SlotWrite, StoreUrl, Written,
};
use crate::error::{Error, Result};
use crate::lease::{NamespaceRecord, Owner, SlotRecord, Versioned};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::config::{LoadBalanceHosts, SslMode, TargetSessionAttrs};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

/// SQLSTATE `read_only_sql_transaction`: a write on a standby (or with
/// `default_transaction_read_only` on).
const READ_ONLY: &str = "25006";

/// The schema version this build writes and reads.
const SCHEMA_VERSION: i32 = 3;

/// Key of the advisory lock held while the schema is checked and created ("cosid" in ASCII).
const SCHEMA_LOCK: i64 = 0x63_6f73_6964;

const SCHEMA_HEAD: &str = "
CREATE TABLE IF NOT EXISTS cosid_schema (
    id      integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
);
INSERT INTO cosid_schema (id, version) VALUES (1, 1) ON CONFLICT (id) DO NOTHING;
";

const SCHEMA_V1: &str = "
DO $$ BEGIN
  EXECUTE format('CREATE SEQUENCE IF NOT EXISTS cosid_version_seq START WITH %s',
                 floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
END $$;
CREATE TABLE IF NOT EXISTS cosid_namespace (
    namespace     text PRIMARY KEY,
    version       bigint NOT NULL,
    slot_limit    bigint NOT NULL,
    tolerance_ms  bigint NOT NULL,
    not_before_ms bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS cosid_slot (
    namespace         text    NOT NULL,
    slot              integer NOT NULL,
    version           bigint  NOT NULL,
    owner_key         text,
    owner_incarnation uuid,
    last_owner_key    text,
    fence             bigint  NOT NULL,
    expires_at        bigint  NOT NULL,
    floor_ms          bigint  NOT NULL,
    ceiling_ms        bigint  NOT NULL,
    next_floor_ms     bigint  NOT NULL,
    PRIMARY KEY (namespace, slot)
);
-- Version 2: the id layout per namespace (none in records of version 1 until their first
-- runtime of this version writes its own).
ALTER TABLE cosid_namespace ADD COLUMN IF NOT EXISTS layout text;
UPDATE cosid_schema SET version = 2 WHERE id = 1 AND version < 2;
-- Version 3: the lease ttl per namespace, for the restart guard (none in older records until
-- their first runtime of this version writes its own).
ALTER TABLE cosid_namespace ADD COLUMN IF NOT EXISTS ttl_ms bigint;
UPDATE cosid_schema SET version = 3 WHERE id = 1 AND version < 3;
";

/// The store clock in ms, evaluated once per statement (a volatile CTE is not inlined).
const CLOCK: &str =
    "WITH c AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now)";

/// When the server started, rounded up to the ms (the guard errs late).
const STARTED_AT: &str =
    "SELECT ceil(extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint";

const SLOT_COLUMNS: &str = "s.slot, s.version, s.owner_key, s.owner_incarnation, \
     s.last_owner_key, s.fence, s.expires_at, s.floor_ms, s.ceiling_ms, s.next_floor_ms";

/// The column of the namespace's ttl in [`snapshot_sql`]'s rows: after the layout.
const SNAPSHOT_TTL_AT: usize = 16;

/// The column of the namespace's ttl in [`candidates_sql`]'s first row: after the part.
const CANDIDATES_TTL_AT: usize = 18;

fn snapshot_sql() -> String {
    format!(
        "{CLOCK} SELECT c.now, n.version, n.slot_limit, n.tolerance_ms, n.not_before_ms, \
         {SLOT_COLUMNS}, n.layout, n.ttl_ms FROM c LEFT JOIN cosid_namespace n ON n.namespace = $1 \
         LEFT JOIN cosid_slot s ON s.namespace = $1"
    )
}

/// The candidate view (`CandidateView`), filtered by the server in the one scan a snapshot
/// makes, in the snapshot's columns: a first row with the clock, the namespace and, in the last
/// column, the live slots' numbers joined by commas; then a row per record to return whole (not
/// live, or the asker's key's, or the preferred slot's), with the namespace's columns null. Free
/// records past the covered bound come back too (a view may hold more), which saves the second
/// pass that bound would need. $1 namespace, $2 preferred slot, $3 owner key (null: none).
fn candidates_sql() -> String {
    let v_columns = SLOT_COLUMNS.replace("s.", "v.");
    format!(
        "{CLOCK}, v AS (SELECT s.*, s.owner_key IS NOT NULL AND s.expires_at > c.now AS live \
         FROM c, cosid_slot s WHERE s.namespace = $1) \
         SELECT c.now, n.version, n.slot_limit, n.tolerance_ms, n.not_before_ms, \
         NULL::integer, NULL::bigint, NULL::text, NULL::uuid, NULL::text, NULL::bigint, \
         NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, n.layout, \
         (SELECT string_agg(v.slot::text, ',') FROM v WHERE v.live), 0 AS part, n.ttl_ms \
         FROM c LEFT JOIN cosid_namespace n ON n.namespace = $1 \
         UNION ALL \
         SELECT NULL, NULL, NULL, NULL, NULL, {v_columns}, NULL, NULL, 1, NULL FROM v \
         WHERE NOT v.live \
         OR COALESCE(v.slot = $2 OR v.owner_key = $3 OR v.last_owner_key = $3, false) \
         ORDER BY part"
    )
}

fn read_slot_sql() -> String {
    format!(
        "{CLOCK} SELECT c.now, {SLOT_COLUMNS} FROM c \
         LEFT JOIN cosid_slot s ON s.namespace = $1 AND s.slot = $2"
    )
}

const INSERT_NAMESPACE: &str = "INSERT INTO cosid_namespace \
     (namespace, version, slot_limit, tolerance_ms, not_before_ms, layout, ttl_ms) \
     VALUES ($1, nextval('cosid_version_seq'), $2, $3, $4, $5, $6) \
     ON CONFLICT (namespace) DO NOTHING RETURNING version";

const UPDATE_NAMESPACE: &str =
    "UPDATE cosid_namespace SET version = nextval('cosid_version_seq'), \
     slot_limit = $2, tolerance_ms = $3, not_before_ms = $4, layout = $5, ttl_ms = $6 \
     WHERE namespace = $1 AND version = $7 RETURNING version";

const INSERT_SLOT: &str = "INSERT INTO cosid_slot (namespace, slot, version, owner_key, \
     owner_incarnation, last_owner_key, fence, expires_at, floor_ms, ceiling_ms, next_floor_ms) \
     VALUES ($1, $2, nextval('cosid_version_seq'), $3, $4, $5, $6, $7, $8, $9, $10) \
     ON CONFLICT (namespace, slot) DO NOTHING RETURNING version, \
     floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

const UPDATE_SLOT: &str = "UPDATE cosid_slot SET version = nextval('cosid_version_seq'), \
     owner_key = $3, owner_incarnation = $4, last_owner_key = $5, fence = $6, expires_at = $7, \
     floor_ms = $8, ceiling_ms = $9, next_floor_ms = $10 \
     WHERE namespace = $1 AND slot = $2 AND version = $11 RETURNING version, \
     floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// `cosid namespace delete`: one slot record, if its version is still the one read.
const DELETE_SLOT: &str = "DELETE FROM cosid_slot \
     WHERE namespace = $1 AND slot = $2 AND version = $3 RETURNING version";

/// A statement parameter, owned so the statement can run on the store's IO thread.
type Param = Box<dyn ToSql + Sync + Send>;

macro_rules! params {
    ($($p:expr),* $(,)?) => {
        vec![$(Box::new($p) as Param),*]
    };
}

/// One connection with its prepared statements.
struct Conn {
    client: Client,
    snapshot: Statement,
    candidates: Statement,
    read_slot: Statement,
    insert_namespace: Statement,
    update_namespace: Statement,
    insert_slot: Statement,
    update_slot: Statement,
    delete_slot: Statement,
    started_at: Statement,
    /// Why the connection's stream failed, when a message was over the bound.
    refusal: Refusal,
}

/// How to connect: plain or TLS with a rustls configuration.
#[derive(Clone)]
enum Tls {
    Plain,
    Rustls(MakeRustlsConnect),
}

/// The PostgreSQL store. Thread-safe: one connection shared by all callers (tokio-postgres
/// pipelines concurrent statements on it), re-opened when it closes or an operation times out,
/// so a restarted server is picked up by the next call.
pub struct PostgresStore {
    io: IoRuntime,
    config: tokio_postgres::Config,
    /// `config` split into one configuration per host, tried in order, each bounded as a whole
    /// by its share of the timeout (see [`per_host`]).
    hosts: Vec<tokio_postgres::Config>,
    tls: Tls,
    /// The bound on each message its connections read ([`postgres_reply`](super::postgres_reply)).
    limit: Arc<MessageLimit>,
    conn: SharedConnection<Arc<Conn>>,
    /// `?restart-guard=` (on by default): report when the server started.
    restart_guard: bool,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.io.debug_store(
            f,
            "PostgresStore",
            ("tls", &matches!(self.tls, Tls::Rustls(_))),
        )
    }
}

impl PostgresStore {
    /// Opens the store `url` (`postgres://[user[:password]@]host[:port]/db[?sslmode=…]`) with
    /// the default 2 s bound on connecting and on every operation. Connects lazily: a server
    /// that is down now gives `Store` errors from the operations, not from here.
    pub fn open(url: &StoreUrl) -> Result<Arc<PostgresStore>> {
        Self::open_with_timeout(url, DEFAULT_TIMEOUT)
    }

    /// Like [`PostgresStore::open`], with `timeout` bounding connecting and every operation.
    pub fn open_with_timeout(url: &StoreUrl, timeout: Duration) -> Result<Arc<PostgresStore>> {
        let StoreUrl::Postgres { url: raw } = url else {
            return Err(url.not_a("a postgres:// or postgresql:// URL"));
        };
        let name = url.redacted();
        let (raw, restart_guard) = super::url::take_restart_guard(raw, &name)?;
        let Params {
            rest,
            sslmode,
            sslrootcert: rootcert,
            session,
        } = take_params(&escape_credentials(&raw), &name)?;
        let mut config = tokio_postgres::Config::from_str(&rest).map_err(|_| {
            // The parser's message may quote the URL: name it redacted instead.
            Error::config(format!(
                "store URL '{name}' is not a valid PostgreSQL URL; use \
                 postgres://user[:password]@host[:port][,host2[:port]…]/database\
                 [?sslmode=require]"
            ))
        })?;
        let secrets = config
            .get_password()
            .map(|p| vec![String::from_utf8_lossy(p).into_owned()])
            .unwrap_or_default();
        let hosts = config
            .get_hosts()
            .len()
            .max(config.get_hostaddrs().len())
            .max(1);
        config.target_session_attrs(session_attrs(session.as_deref(), hosts, &name)?);
        let given_connect_timeout = config.get_connect_timeout().copied();
        config.connect_timeout(connect_share(timeout, hosts, given_connect_timeout));
        if config.get_application_name().is_none() {
            config.application_name("cosid");
        }
        let tls = match sslmode.as_deref().unwrap_or("prefer") {
            "disable" | "allow" | "prefer" => {
                config.ssl_mode(SslMode::Disable);
                Tls::Plain
            }
            mode @ ("require" | "verify-ca" | "verify-full") => {
                config.ssl_mode(SslMode::Require);
                Tls::Rustls(tls_connector(mode, rootcert.as_deref(), &name)?)
            }
            other => {
                return Err(Error::config(format!(
                    "store URL '{name}' has sslmode '{other}'; use disable, prefer, require, \
                     verify-ca or verify-full"
                )))
            }
        };
        let io = IoRuntime::new(name, secrets, timeout)?;
        Ok(Arc::new(PostgresStore {
            io,
            hosts: per_host(
                &config,
                given_connect_timeout.map_or(timeout, |g| g.min(timeout)),
            ),
            config,
            tls,
            limit: Arc::default(),
            conn: SharedConnection::new(),
            restart_guard,
        }))
    }

    /// The live connection and its number, connecting (and checking the schema) when there is
    /// none or it was closed.
    fn conn(&self) -> Result<(u64, Arc<Conn>)> {
        self.conn.get(
            |c| !c.client.is_closed(),
            || {
                let hosts = self.hosts.clone();
                let (tls, limit) = (self.tls.clone(), self.limit.clone());
                self.io
                    .run(async move { connect_any(hosts, tls, limit).await })
                    .map(Arc::new)
                    .map_err(|f| match f {
                        Failure::Failed(failures) => self.connect_error(&failures),
                        Failure::TimedOut => {
                            self.io.failure::<String>("connecting", Failure::TimedOut)
                        }
                    })
            },
        )
    }

    /// The error for a connection no host gave: each host's reason, by its place in the URL;
    /// permanent when no host's can be cured by trying again ([`refused_for_good`]).
    fn connect_error(&self, failures: &[(usize, ConnectError)]) -> Error {
        let e = self.connect_error_text(failures);
        e.permanent_if(!failures.is_empty() && failures.iter().all(|(_, e)| refused_for_good(e)))
    }

    fn connect_error_text(&self, failures: &[(usize, ConnectError)]) -> Error {
        if let [(_, ConnectError::Schema(e))] = failures {
            return Error::store(self.io.scrub(&format!("store {}: {e}", self.io.name())));
        }
        let one = |e: &ConnectError| match e {
            ConnectError::Schema(e) => e.clone(),
            e => connect_message(e, &self.config),
        };
        let detail = match failures {
            [(_, e)] => one(e),
            _ => failures
                .iter()
                .map(|(i, e)| format!("host {} of the URL: {}", i + 1, one(e)))
                .collect::<Vec<_>>()
                .join("; "),
        };
        self.io.failure("connecting", Failure::Failed(detail))
    }

    /// A compare-and-set: with no `expected` version the insert of `[insert, update]`, which
    /// writes nothing if the record exists; else the update, which writes only if the record is
    /// at that version, bound as the last parameter after `params`.
    fn compare_and_set(
        &self,
        what: &str,
        expected: Option<u64>,
        [insert, update]: [fn(&Conn) -> &Statement; 2],
        mut params: Vec<Param>,
    ) -> Result<Vec<Row>> {
        let pick = match expected {
            None => insert,
            Some(v) => {
                params.push(Box::new(i64_of("version", v)?));
                update
            }
        };
        self.query(what, pick, params)
    }

    /// Runs one statement on the connection; a closed connection or a timeout drops it so the
    /// next call reconnects.
    fn query(
        &self,
        what: &str,
        pick: fn(&Conn) -> &Statement,
        params: Vec<Param>,
    ) -> Result<Vec<Row>> {
        let (number, conn) = self.conn()?;
        let on_io = conn.clone();
        let outcome = self.io.run(async move {
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            on_io.client.query(pick(&on_io), &refs).await
        });
        match outcome {
            Ok(rows) => Ok(rows),
            Err(f) => {
                // A read-only server too: the next connection may find the promoted primary.
                let drop_it = match &f {
                    Failure::Failed(e) => {
                        e.is_closed()
                            || e.as_db_error()
                                .is_none_or(|db| db.code().code() == READ_ONLY)
                    }
                    Failure::TimedOut => true,
                };
                if drop_it {
                    self.conn.drop_if_current(number);
                }
                Err(self.io.failure(
                    what,
                    match f {
                        // A message over the bound closes the connection; the client says
                        // only that.
                        Failure::Failed(e) => Failure::Failed(
                            conn.refusal
                                .get()
                                .filter(|_| e.is_closed())
                                .cloned()
                                .unwrap_or_else(|| pg_message(&e)),
                        ),
                        Failure::TimedOut => Failure::TimedOut,
                    },
                ))
            }
        }
    }

    /// The store's clock and the namespace record in the first row of a snapshot-shaped
    /// answer (the clock in column 0, the namespace in 1 to 4, its layout in 15 and its ttl in
    /// `ttl_at`).
    fn namespace_from(
        &self,
        what: &str,
        rows: &[Row],
        ttl_at: usize,
    ) -> Result<(i64, Option<Versioned<NamespaceRecord>>)> {
        let first = rows
            .first()
            .ok_or_else(|| self.io.bad_row(what, "the query returned no row"))?;
        let get_err = |e: tokio_postgres::Error| self.io.bad_row(what, &e.to_string());
        let store_now: i64 = first.try_get(0).map_err(get_err)?;
        let ns_version: Option<i64> = first.try_get(1).map_err(get_err)?;
        let namespace_rec = match ns_version {
            None => None,
            Some(version) => {
                let value = super::namespace_from_columns(
                    first.try_get(2).map_err(get_err)?,
                    first.try_get(3).map_err(get_err)?,
                    first.try_get(4).map_err(get_err)?,
                    // Column 15, after the slot's.
                    first.try_get(15).map_err(get_err)?,
                    first.try_get(ttl_at).map_err(get_err)?,
                )
                .map_err(|bad| self.io.bad_row(what, &bad))?;
                Some(Versioned {
                    value,
                    version: version as u64,
                })
            }
        };
        Ok((store_now, namespace_rec))
    }

    /// The slot record in `row` from column `at` on (`None` when the LEFT JOIN found none).
    fn slot_from(&self, what: &str, row: &Row, at: usize) -> Result<Option<Versioned<SlotRecord>>> {
        let get_err = |e: tokio_postgres::Error| self.io.bad_row(what, &e.to_string());
        let Some(slot) = row.try_get::<_, Option<i32>>(at).map_err(get_err)? else {
            return Ok(None);
        };
        let version: i64 = row.try_get(at + 1).map_err(get_err)?;
        let owner_key: Option<String> = row.try_get(at + 2).map_err(get_err)?;
        let incarnation: Option<uuid::Uuid> = row.try_get(at + 3).map_err(get_err)?;
        let owner = match (owner_key, incarnation) {
            (Some(key), Some(incarnation)) => Some(Owner { key, incarnation }),
            (None, None) => None,
            _ => {
                return Err(self.io.bad_row(
                    what,
                    &format!("slot {slot} has an owner key without incarnation or the reverse"),
                ))
            }
        };
        let fence: i64 = row.try_get(at + 5).map_err(get_err)?;
        let value = SlotRecord {
            slot: u32::try_from(slot)
                .map_err(|_| self.io.bad_row(what, &format!("slot {slot} is negative")))?,
            owner,
            last_owner_key: row.try_get(at + 4).map_err(get_err)?,
            fence: u64::try_from(fence).map_err(|_| {
                self.io
                    .bad_row(what, &format!("slot {slot} has fence {fence}"))
            })?,
            expires_at: row.try_get(at + 6).map_err(get_err)?,
            floor: row.try_get(at + 7).map_err(get_err)?,
            ceiling: row.try_get(at + 8).map_err(get_err)?,
            next_floor: row.try_get(at + 9).map_err(get_err)?,
        };
        Ok(Some(Versioned {
            value,
            version: version as u64,
        }))
    }

    fn version_of(&self, what: &str, rows: &[Row]) -> Result<Option<u64>> {
        match rows.first() {
            None => Ok(None),
            Some(row) => {
                let v: i64 = row
                    .try_get(0)
                    .map_err(|e| self.io.bad_row(what, &e.to_string()))?;
                Ok(Some(v as u64))
            }
        }
    }
}

enum ConnectError {
    Pg(tokio_postgres::Error),
    /// Opening the socket, or a session that is not the one asked for (read-only).
    Socket(std::io::Error),
    Schema(String),
}

impl ConnectError {
    /// The failure in words, as tokio-postgres words its own connect's.
    fn text(&self) -> String {
        match self {
            ConnectError::Pg(e) => pg_message(e),
            ConnectError::Socket(e) => format!("error connecting to server: {e}"),
            ConnectError::Schema(e) => e.clone(),
        }
    }
}

impl From<tokio_postgres::Error> for ConnectError {
    fn from(e: tokio_postgres::Error) -> Self {
        ConnectError::Pg(e)
    }
}

/// Whether a host's failure to connect cannot be cured by trying again: a schema newer than
/// this build, the credentials or the user refused (SQLSTATE class 28), a database that does not
/// exist (3D000), a host name that does not exist, TLS on one side only or a certificate not
/// trusted. A refused connection, a server starting or shutting down, a timeout: not.
fn refused_for_good(e: &ConnectError) -> bool {
    match e {
        ConnectError::Schema(_) => true,
        ConnectError::Socket(_) => super::blocking::incurable(&e.text()).is_some(),
        ConnectError::Pg(e) => match e.as_db_error() {
            Some(db) => {
                let code = db.code().code();
                code.starts_with("28") || code == "3D000"
            }
            None => super::blocking::incurable(&pg_message(e)).is_some(),
        },
    }
}

/// Connects to every host of `hosts` at once and keeps the first connection that succeeds
/// (TCP, TLS, authentication, the read-write check, the schema check); the others are dropped.
/// So no host waits for another: a first host that is down, or stopped while the kernel still
/// accepts its connections, costs the next nothing, and a primary slow to answer (a loaded
/// server forking a backend) is not cut short by a share of the timeout. When none succeeds,
/// the reason of each, by its place in the URL.
async fn connect_any(
    hosts: Vec<tokio_postgres::Config>,
    tls: Tls,
    limit: Arc<MessageLimit>,
) -> Result<Conn, Vec<(usize, ConnectError)>> {
    let mut attempts = tokio::task::JoinSet::new();
    for (i, config) in hosts.into_iter().enumerate() {
        let (tls, limit) = (tls.clone(), limit.clone());
        attempts.spawn(async move { (i, connect(config, tls, limit).await) });
    }
    let mut failures = Vec::new();
    while let Some(joined) = attempts.join_next().await {
        match joined {
            // Dropping `attempts` on return cancels the others (and their connections).
            Ok((_, Ok(conn))) => return Ok(conn),
            // A schema newer than this build: no other host is the answer.
            Ok((i, Err(e @ ConnectError::Schema(_)))) => return Err(vec![(i, e)]),
            Ok((i, Err(e))) => failures.push((i, e)),
            // An attempt that panicked: the others still count.
            Err(_) => {}
        }
    }
    failures.sort_by_key(|(i, _)| *i);
    Err(failures)
}

/// `config` as one configuration per host, each with every other setting of the URL and
/// `connect_timeout` on its TCP handshake, so that the hosts can be tried at once
/// ([`connect_any`]). One configuration's hosts are tried one after the other ([`open`], as
/// tokio-postgres does), and only each TCP handshake is bounded: a server that completes it and then never answers (stopped with SIGSTOP,
/// wedged; the kernel still accepts its connections) would take the whole operation timeout
/// every time and keep the store from the next host, the promoted standby. One host, or hosts
/// given as `hostaddr`s, stay one configuration.
fn per_host(
    config: &tokio_postgres::Config,
    connect_timeout: Duration,
) -> Vec<tokio_postgres::Config> {
    use tokio_postgres::config::Host;
    let hosts = config.get_hosts();
    if hosts.len() < 2 || !config.get_hostaddrs().is_empty() {
        return vec![config.clone()];
    }
    let ports = config.get_ports();
    hosts
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let mut c = tokio_postgres::Config::new();
            match host {
                Host::Tcp(h) => c.host(h),
                #[cfg(unix)]
                Host::Unix(path) => c.host_path(path),
            };
            // One port for every host, or one each (tokio-postgres checked the counts).
            if let Some(port) = ports
                .get(i)
                .or_else(|| ports.first().filter(|_| ports.len() == 1))
            {
                c.port(*port);
            }
            if let Some(user) = config.get_user() {
                c.user(user);
            }
            if let Some(password) = config.get_password() {
                c.password(password);
            }
            if let Some(dbname) = config.get_dbname() {
                c.dbname(dbname);
            }
            if let Some(options) = config.get_options() {
                c.options(options);
            }
            if let Some(name) = config.get_application_name() {
                c.application_name(name);
            }
            c.connect_timeout(connect_timeout);
            if let Some(t) = config.get_tcp_user_timeout() {
                c.tcp_user_timeout(*t);
            }
            c.ssl_mode(config.get_ssl_mode())
                .ssl_negotiation(config.get_ssl_negotiation())
                .keepalives(config.get_keepalives())
                .keepalives_idle(config.get_keepalives_idle())
                .target_session_attrs(config.get_target_session_attrs())
                .load_balance_hosts(config.get_load_balance_hosts())
                .channel_binding(config.get_channel_binding());
            if let Some(t) = config.get_keepalives_interval() {
                c.keepalives_interval(t);
            }
            if let Some(n) = config.get_keepalives_retries() {
                c.keepalives_retries(n);
            }
            c
        })
        .collect()
}

async fn connect(
    config: tokio_postgres::Config,
    tls: Tls,
    limit: Arc<MessageLimit>,
) -> Result<Conn, ConnectError> {
    let (mut client, refusal) = open(&config, &tls, &limit).await?;
    let kept = refusal.clone();
    let started = async move {
        ensure_schema(&mut client).await?;
        Ok(Conn {
            snapshot: client.prepare(&snapshot_sql()).await?,
            candidates: client.prepare(&candidates_sql()).await?,
            read_slot: client.prepare(&read_slot_sql()).await?,
            started_at: client.prepare(STARTED_AT).await?,
            insert_namespace: client.prepare(INSERT_NAMESPACE).await?,
            update_namespace: client.prepare(UPDATE_NAMESPACE).await?,
            insert_slot: client.prepare(INSERT_SLOT).await?,
            update_slot: client.prepare(UPDATE_SLOT).await?,
            delete_slot: client.prepare(DELETE_SLOT).await?,
            client,
            refusal: kept,
        })
    };
    started.await.map_err(|e| refused(e, &refusal))
}

/// `e`, or when it is the client's "connection closed" after a message over the bound, why.
fn refused(e: ConnectError, refusal: &Refusal) -> ConnectError {
    match (e, refusal.get()) {
        (ConnectError::Pg(e), Some(why)) if e.is_closed() => ConnectError::Socket(
            std::io::Error::new(std::io::ErrorKind::InvalidData, why.clone()),
        ),
        (e, _) => e,
    }
}

/// A session with the first of `config`'s hosts (and of each host's addresses) that takes one,
/// tried in order like tokio-postgres does, the last one's error otherwise. cosid opens each
/// socket itself (TCP with the connect timeout, `TCP_NODELAY`, keepalives and
/// `tcp_user_timeout` as the URL asks; or a Unix socket) so that the client reads the server
/// through a stream bounded by `limit` ([`postgres_reply`](super::postgres_reply)), and then
/// makes the check the client's own connect would: with `target_session_attrs=read-write`, a
/// host whose sessions are read-only is refused.
async fn open(
    config: &tokio_postgres::Config,
    tls: &Tls,
    limit: &Arc<MessageLimit>,
) -> Result<(Client, Refusal), ConnectError> {
    use tokio_postgres::config::Host;
    let (hosts, hostaddrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let count = hosts.len().max(hostaddrs.len());
    let mut last = ConnectError::Socket(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "the URL names no host",
    ));
    let random = config.get_load_balance_hosts() == LoadBalanceHosts::Random;
    let mut order: Vec<usize> = (0..count).collect();
    if random {
        shuffle(&mut order);
    }
    for i in order {
        let port = ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(5432);
        // The host's name checks the certificate; its address, when given, is where to connect.
        let name = match hosts.get(i) {
            Some(Host::Tcp(h)) => h.clone(),
            _ => String::new(),
        };
        let host = match (hostaddrs.get(i), hosts.get(i)) {
            (Some(ip), _) => Host::Tcp(ip.to_string()),
            (None, Some(host)) => host.clone(),
            (None, None) => continue,
        };
        let attempt = match host {
            Host::Tcp(h) => match tokio::net::lookup_host((h.as_str(), port)).await {
                Ok(addrs) => {
                    let mut addrs: Vec<_> = addrs.collect();
                    if random {
                        shuffle(&mut addrs);
                    }
                    let mut outcome = Err(ConnectError::Socket(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "could not resolve any addresses",
                    )));
                    for addr in addrs {
                        outcome = match tcp(addr, config).await {
                            Ok(stream) => {
                                let at = if h.contains(':') {
                                    format!("[{h}]:{port}")
                                } else {
                                    format!("{h}:{port}")
                                };
                                session(config, stream, tls, &name, at, limit).await
                            }
                            Err(e) => Err(ConnectError::Socket(e)),
                        };
                        if outcome.is_ok() {
                            break;
                        }
                    }
                    outcome
                }
                Err(e) => Err(ConnectError::Socket(e)),
            },
            #[cfg(unix)]
            Host::Unix(dir) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                match within(
                    config.get_connect_timeout(),
                    tokio::net::UnixStream::connect(&path),
                )
                .await
                {
                    Ok(stream) => {
                        let at = path.display().to_string();
                        session(config, stream, tls, &name, at, limit).await
                    }
                    Err(e) => Err(ConnectError::Socket(e)),
                }
            }
        };
        match attempt {
            Ok(client) => return Ok(client),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// `items` in a random order (`load_balance_hosts=random`), as tokio-postgres orders hosts and
/// addresses.
fn shuffle<T>(items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let draw = uuid::Uuid::new_v4().as_u128();
        items.swap(i, (draw % (i as u128 + 1)) as usize);
    }
}

/// `connect` bounded by `timeout` (none: unbounded), as tokio-postgres words its expiry.
async fn within<T>(
    timeout: Option<&Duration>,
    connect: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    match timeout {
        Some(t) => tokio::time::timeout(*t, connect).await.unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connection timed out",
            ))
        }),
        None => connect.await,
    }
}

/// A TCP connection to `addr` with the socket options of `config`, as tokio-postgres sets them.
async fn tcp(
    addr: std::net::SocketAddr,
    config: &tokio_postgres::Config,
) -> std::io::Result<tokio::net::TcpStream> {
    let stream = within(
        config.get_connect_timeout(),
        tokio::net::TcpStream::connect(addr),
    )
    .await?;
    stream.set_nodelay(true)?;
    let socket = socket2::SockRef::from(&stream);
    #[cfg(target_os = "linux")]
    if let Some(t) = config.get_tcp_user_timeout() {
        socket.set_tcp_user_timeout(Some(*t))?;
    }
    if config.get_keepalives() {
        let mut keepalive = socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
        #[cfg(not(any(
            target_os = "aix",
            target_os = "redox",
            target_os = "solaris",
            target_os = "openbsd"
        )))]
        if let Some(interval) = config.get_keepalives_interval() {
            keepalive = keepalive.with_interval(interval);
        }
        #[cfg(not(any(
            target_os = "aix",
            target_os = "redox",
            target_os = "solaris",
            target_os = "windows",
            target_os = "openbsd"
        )))]
        if let Some(retries) = config.get_keepalives_retries() {
            keepalive = keepalive.with_retries(retries);
        }
        socket.set_tcp_keepalive(&keepalive)?;
    }
    Ok(stream)
}

/// The session over `stream`, to the server `at` whose certificate names `name`: TLS as
/// `config`'s `sslmode` says, the startup and authentication, every message read through
/// [`Bounded`] (the TLS stream's plain text with TLS); then, with
/// `target_session_attrs=read-write`, the refusal of a read-only session.
async fn session<S>(
    config: &tokio_postgres::Config,
    stream: S,
    tls: &Tls,
    name: &str,
    at: String,
    limit: &Arc<MessageLimit>,
) -> Result<(Client, Refusal), ConnectError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let refusal = Refusal::default();
    let client = match tls {
        Tls::Plain => {
            let bounded = Bounded::new(stream, at, limit.clone(), refusal.clone());
            let (client, connection) = config
                .connect_raw(bounded, NoTls)
                .await
                .map_err(|e| refused(e.into(), &refusal))?;
            tokio::spawn(connection);
            client
        }
        Tls::Rustls(make) => {
            use tokio_postgres::tls::MakeTlsConnect;
            // The connector checks the name at the handshake: making it cannot fail.
            let inner = match MakeTlsConnect::<S>::make_tls_connect(&mut make.clone(), name) {
                Ok(inner) => inner,
                Err(never) => match never {},
            };
            let bounded = BoundedTls {
                inner,
                at,
                limit: limit.clone(),
                refusal: refusal.clone(),
            };
            let (client, connection) = config
                .connect_raw(stream, bounded)
                .await
                .map_err(|e| refused(e.into(), &refusal))?;
            tokio::spawn(connection);
            client
        }
    };
    if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
        let answer = client
            .simple_query("SHOW transaction_read_only")
            .await
            .map_err(|e| refused(e.into(), &refusal))?;
        let read_only = answer.iter().any(|m| {
            matches!(m, tokio_postgres::SimpleQueryMessage::Row(row) if row.get(0) == Some("on"))
        });
        if read_only {
            return Err(ConnectError::Socket(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "database does not allow writes",
            )));
        }
    }
    Ok((client, refusal))
}

/// Creates the schema if needed, under an advisory lock so concurrent first uses serialize,
/// and refuses a database whose schema is newer than this build.
async fn ensure_schema(client: &mut Client) -> Result<(), ConnectError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await?;
    tx.batch_execute(SCHEMA_HEAD).await?;
    let version: i32 = tx
        .query_one("SELECT version FROM cosid_schema WHERE id = 1", &[])
        .await?
        .get(0);
    if version > SCHEMA_VERSION {
        return Err(ConnectError::Schema(format!(
            "the database holds cosid schema version {version}, and this build of cosid knows \
             versions up to {SCHEMA_VERSION}; upgrade cosid, or use another database"
        )));
    }
    tx.batch_execute(SCHEMA_V1).await?;
    tx.commit().await?;
    Ok(())
}

/// The server's own message when there is one (it never holds the password); for a write
/// refused by a read-only server, what to do about it.
fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) if db.code().code() == READ_ONLY => format!(
            "{}: {} ({}): the server is read-only (a standby, or \
             default_transaction_read_only is on); cosid writes, so it must reach the primary: \
             name the primary in the URL, or list every host \
             (postgres://user@h1:5432,h2:5432/db) with target_session_attrs=read-write",
            db.severity(),
            crate::bounds::quote(db.message()),
            db.code().code()
        ),
        Some(db) => format!(
            "{}: {} ({})",
            db.severity(),
            crate::bounds::quote(db.message()),
            db.code().code()
        ),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    }
}

/// [`pg_message`] for a failed connect; when only writable hosts were wanted and the last one
/// tried was read-only, says so (the client reports only the last host's error).
fn connect_message(e: &ConnectError, config: &tokio_postgres::Config) -> String {
    let text = e.text();
    let refused_read_only = config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite
        && matches!(e, ConnectError::Socket(io) if io.kind() == std::io::ErrorKind::PermissionDenied);
    if super::blocking::incurable(&text) == Some(super::blocking::Incurable::UnknownHost) {
        format!("{text}; {}", super::blocking::UNKNOWN_HOST_FIX)
    } else if refused_read_only {
        format!(
            "{text}: no host of the URL accepted writes (target_session_attrs=read-write): each \
             is down or a read-only standby; during a failover this lasts until a standby is \
             promoted, else add the primary to the URL"
        )
    } else {
        text
    }
}

/// The session the store asks for: `target_session_attrs` from the URL, or by default
/// `read-write` with several hosts (`any` with one, which needs no extra round trip).
fn session_attrs(given: Option<&str>, hosts: usize, name: &str) -> Result<TargetSessionAttrs> {
    match given {
        None if hosts > 1 => Ok(TargetSessionAttrs::ReadWrite),
        None | Some("any") => Ok(TargetSessionAttrs::Any),
        // libpq's `primary` (not in recovery) is what `read-write` checks here too, stricter:
        // a primary with default_transaction_read_only on refuses cosid's writes anyway.
        Some("read-write" | "primary") => Ok(TargetSessionAttrs::ReadWrite),
        Some(other) => Err(Error::config(format!(
            "store URL '{name}' has target_session_attrs '{other}'; cosid writes to the store, \
             so use target_session_attrs=read-write (the default with several hosts) or any"
        ))),
    }
}

/// The bound on one host's TCP connect when tokio-postgres tries the hosts one after the other
/// (hosts given as `hostaddr`s): the operation timeout shared among the hosts (so a first host
/// that does not answer leaves time for the next), or the URL's `connect_timeout` when that is
/// shorter.
fn connect_share(timeout: Duration, hosts: usize, given: Option<Duration>) -> Duration {
    let share = timeout / u32::try_from(hosts.max(1)).unwrap_or(u32::MAX);
    given.map_or(share, |g| g.min(share))
}

/// `url` with the delimiters inside its user name and password percent-encoded. The
/// credentials end at the URL's last '@', the rule every store URL follows (and the one its
/// redacted form shows); tokio-postgres ends them at the first '@' and its parameters at the
/// first '?', so a password holding either would otherwise be cut, its tail read as a host, a
/// database or a parameter, and shown in messages. tokio-postgres decodes them back.
fn escape_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((credentials, host_on)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    let mut escaped = String::with_capacity(credentials.len());
    for c in credentials.chars() {
        match c {
            '@' => escaped.push_str("%40"),
            '/' => escaped.push_str("%2F"),
            '?' => escaped.push_str("%3F"),
            '#' => escaped.push_str("%23"),
            c => escaped.push(c),
        }
    }
    format!("{scheme}://{escaped}@{host_on}")
}

/// The URL with the parameters cosid reads itself taken off, and their values.
#[derive(Debug, PartialEq, Eq)]
struct Params {
    /// The URL for tokio-postgres.
    rest: String,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    /// `target_session_attrs`, as given.
    session: Option<String>,
}

/// Splits `sslmode` and `sslrootcert` off the URL's query (tokio-postgres knows neither
/// `verify-ca`/`verify-full` nor `sslrootcert`), and `target_session_attrs` (whose default
/// here depends on the number of hosts).
fn take_params(url: &str, name: &str) -> Result<Params> {
    let Some((head, query)) = url.split_once('?') else {
        return Ok(Params {
            rest: url.to_string(),
            sslmode: None,
            sslrootcert: None,
            session: None,
        });
    };
    let mut mode = None;
    let mut root = None;
    let mut session = None;
    let mut kept = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("sslmode", v)) => mode = Some(v.to_ascii_lowercase()),
            Some(("sslrootcert", v)) => {
                root = Some(crate::percent::decode(v).ok_or_else(|| {
                    Error::config(format!(
                        "store URL '{name}' has an sslrootcert that is not percent-encoded \
                         UTF-8 (every '%' must start two hex digits)"
                    ))
                })?)
            }
            Some(("target_session_attrs", v)) => session = Some(v.to_string()),
            _ => kept.push(kv),
        }
    }
    let rest = if kept.is_empty() {
        head.to_string()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    Ok(Params {
        rest,
        sslmode: mode,
        sslrootcert: root,
        session,
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls connector for `mode` (require, verify-ca, verify-full).
fn tls_connector(mode: &str, rootcert: Option<&str>, name: &str) -> Result<MakeRustlsConnect> {
    let mut roots = RootCertStore::empty();
    match rootcert {
        Some(path) => {
            let certs = super::ca_file::read(path, "sslrootcert", name)?.1;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(Error::config(format!(
                    "store '{name}': sslrootcert '{path}' holds no usable certificate"
                )));
            }
        }
        None if mode != "require" => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(Error::config(format!(
                    "store '{name}': sslmode={mode} needs root certificates, and the system has \
                     none; give one with sslrootcert=/path/ca.pem"
                )));
            }
        }
        None => {}
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config(format!("store '{name}': TLS setup: {e}")))?;
    let config = match (mode, rootcert.is_some()) {
        ("verify-full", _) => builder.with_root_certificates(roots).with_no_client_auth(),
        ("verify-ca", _) | ("require", true) => {
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .map_err(|e| Error::config(format!("store '{name}': TLS setup: {e}")))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NameUnchecked {
                    chain: Some(inner),
                    provider: provider(),
                }))
                .with_no_client_auth()
        }
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NameUnchecked {
                chain: None,
                provider: provider(),
            }))
            .with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The certificate check of the `sslmode`s below `verify-full`, neither of which checks the
/// name in the certificate: `verify-ca` (and `require` given an `sslrootcert`) checks that the
/// chain leads to a trusted root; `require` without one (libpq's meaning) encrypts and checks
/// nothing. One type for both, so that the handshake signatures, which both verify alike (with
/// the provider's algorithms, as rustls's own verifier does), are written once.
#[derive(Debug)]
struct NameUnchecked {
    /// The chain's verifier, `None` when the certificate is not checked at all.
    chain: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NameUnchecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn i64_of(what: &'static str, v: u64) -> Result<i64> {
    i64::try_from(v)
        .map_err(|_| Error::store(format!("{what} {v} does not fit PostgreSQL's bigint")))
}

impl SlotStore for PostgresStore {
    fn describe(&self) -> String {
        self.io.name().to_string()
    }

    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let what = "reading a namespace snapshot";
        let _listing = self.limit.listing();
        let rows = self.query(what, |c| &c.snapshot, params![namespace.to_string()])?;
        super::snapshot_of_rows(
            self.namespace_from(what, &rows, SNAPSHOT_TTL_AT)?,
            &rows,
            |row| self.slot_from(what, row, 5),
        )
    }

    fn candidates(&self, namespace: &str, ask: &CandidateAsk<'_>) -> Result<CandidateView> {
        let what = "reading the candidate slots";
        let preferred = ask.preferred_slot.and_then(|p| i32::try_from(p).ok());
        let _listing = self.limit.listing();
        let rows = self.query(
            what,
            |c| &c.candidates,
            params![
                namespace.to_string(),
                preferred,
                ask.owner_key.map(String::from)
            ],
        )?;
        let (store_now, namespace_rec) = self.namespace_from(what, &rows, CANDIDATES_TTL_AT)?;
        let get_err = |e: tokio_postgres::Error| self.io.bad_row(what, &e.to_string());
        let live: Option<String> = rows[0].try_get(16).map_err(get_err)?;
        let live = live
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u32>()
                    .map_err(|_| self.io.bad_row(what, &format!("live slot '{s}'")))
            })
            .collect::<Result<Vec<u32>>>()?;
        let mut records = Vec::with_capacity(rows.len() - 1);
        for row in &rows[1..] {
            records.extend(self.slot_from(what, row, 5)?);
        }
        let mut view = CandidateView {
            namespace: namespace_rec,
            store_now,
            live,
            covered_below: 0,
            records,
        };
        view.covered_below = view
            .namespace
            .as_ref()
            .map_or(0, |n| ask.covered_below(n.value.limit, view.live.len()));
        Ok(view)
    }

    fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        let what = "writing the namespace record";
        let rows = self.compare_and_set(
            what,
            expected,
            [|c| &c.insert_namespace, |c| &c.update_namespace],
            params![
                namespace.to_string(),
                i64::from(record.limit),
                record.tolerance_ms,
                record.not_before_ms,
                record.layout.map(|l| l.encode()),
                record.ttl_ms
            ],
        )?;
        self.version_of(what, &rows)
    }

    fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead> {
        let what = "reading a slot";
        let Ok(slot) = i32::try_from(slot) else {
            return Err(Error::invalid(format!("slot {slot} is out of range")));
        };
        let rows = self.query(what, |c| &c.read_slot, params![namespace.to_string(), slot])?;
        let row = rows
            .first()
            .ok_or_else(|| self.io.bad_row(what, "the read returned no row"))?;
        let now: i64 = row
            .try_get(0)
            .map_err(|e| self.io.bad_row(what, &e.to_string()))?;
        Ok((now, self.slot_from(what, row, 1)?))
    }

    fn cas_slot(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<u64>> {
        Ok(self.cas_slot_timed(namespace, write)?.map(|w| w.version))
    }

    fn deletes_slots(&self) -> bool {
        true
    }

    fn delete_slot(&self, namespace: &str, slot: u32, expected: u64) -> Result<bool> {
        let what = "deleting a slot record";
        let Ok(slot) = i32::try_from(slot) else {
            return Err(Error::invalid(format!("slot {slot} is out of range")));
        };
        let rows = self.query(
            what,
            |c| &c.delete_slot,
            params![namespace.to_string(), slot, i64_of("version", expected)?],
        )?;
        Ok(!rows.is_empty())
    }

    /// The store clock is `clock_timestamp()` in the statement's `RETURNING` (as the reads
    /// return it).
    fn cas_slot_timed(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<Written>> {
        let Cas { expected, record } = write;
        let what = "writing a slot record";
        let Ok(slot) = i32::try_from(record.slot) else {
            return Err(Error::invalid(format!(
                "slot {} is out of range",
                record.slot
            )));
        };
        let fence = i64_of("fence", record.fence)?;
        let owner_key = record.owner.as_ref().map(|o| o.key.clone());
        let incarnation = record.owner.as_ref().map(|o| o.incarnation);
        let last = record.last_owner_key.clone();
        let rows = self.compare_and_set(
            what,
            expected,
            [|c| &c.insert_slot, |c| &c.update_slot],
            params![
                namespace.to_string(),
                slot,
                owner_key,
                incarnation,
                last,
                fence,
                record.expires_at,
                record.floor,
                record.ceiling,
                record.next_floor
            ],
        )?;
        let Some(version) = self.version_of(what, &rows)? else {
            return Ok(None);
        };
        let now: i64 = rows[0]
            .try_get(1)
            .map_err(|e| self.io.bad_row(what, &e.to_string()))?;
        Ok(Some(Written {
            version,
            store_now: Some(now),
        }))
    }

    fn may_forget_namespaces(&self) -> bool {
        self.restart_guard
    }

    fn started_at(&self, _namespace: &str) -> Result<Option<i64>> {
        if !self.restart_guard {
            return Ok(None);
        }
        let what = "reading when the server started";
        let rows = self.query(what, |c| &c.started_at, params![])?;
        let started: i64 = rows
            .first()
            .ok_or_else(|| self.io.bad_row(what, "no row"))?
            .try_get(0)
            .map_err(|e| self.io.bad_row(what, &e.to_string()))?;
        Ok(Some(started))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_keeps_every_host() {
        let mut hosts: Vec<usize> = (0..64).collect();
        shuffle(&mut hosts);
        let mut sorted = hosts.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..64).collect::<Vec<_>>());
        let mut one = [7];
        shuffle(&mut one);
        assert_eq!(one, [7]);
        shuffle(&mut [0u8; 0]);
    }

    #[test]
    fn tls_and_session_parameters_are_taken_off_the_url() {
        let p = take_params("postgres://u:p@h1,h2/db?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem&target_session_attrs=read-write", "n").unwrap();
        assert_eq!(p.rest, "postgres://u:p@h1,h2/db?application_name=x");
        assert_eq!(p.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(p.sslrootcert.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(p.session.as_deref(), Some("read-write"));
        assert_eq!(
            take_params("postgres://h/db", "n").unwrap(),
            Params {
                rest: "postgres://h/db".to_string(),
                sslmode: None,
                sslrootcert: None,
                session: None
            }
        );
    }

    #[test]
    fn several_hosts_ask_for_read_write_unless_told() {
        use TargetSessionAttrs::{Any, ReadWrite};
        for (given, hosts, want) in [
            (None, 1, Any),
            (None, 2, ReadWrite),
            (None, 3, ReadWrite),
            (Some("any"), 2, Any),
            (Some("read-write"), 1, ReadWrite),
            (Some("primary"), 2, ReadWrite),
        ] {
            assert_eq!(session_attrs(given, hosts, "n").unwrap(), want, "{given:?}");
        }
        for bad in ["read-only", "standby", "prefer-standby", "READ-WRITE", ""] {
            let e = session_attrs(Some(bad), 2, "postgres://***@h1,h2/db").unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Config, "{e}");
            assert!(e.message().contains(&format!("'{bad}'")), "{e}");
            assert!(
                e.message().contains("target_session_attrs=read-write"),
                "{e}"
            );
            assert!(e.message().contains("postgres://***@h1,h2/db"), "{e}");
        }
    }

    #[test]
    fn the_connect_timeout_is_shared_among_the_hosts() {
        let s = Duration::from_secs;
        assert_eq!(connect_share(s(2), 1, None), s(2));
        assert_eq!(connect_share(s(2), 2, None), s(1));
        assert_eq!(connect_share(s(3), 3, None), s(1));
        assert_eq!(connect_share(s(2), 0, None), s(2));
        // The URL's connect_timeout when shorter, never longer.
        assert_eq!(connect_share(s(10), 2, Some(s(1))), s(1));
        assert_eq!(connect_share(s(2), 2, Some(s(10))), s(1));
    }

    /// A password may hold '@', '/', '?' and '#' unencoded: the host follows the last '@', as
    /// for every store URL (and as the redacted form says), and no part of the password may end
    /// up read as the host, the database or a parameter (where it could show in a message).
    #[test]
    fn a_password_with_url_delimiters_is_the_password_and_nothing_else() {
        let url = "postgres://u:hun@ter/2?x#y@127.0.0.1:5433/db?sslmode=disable";
        let store = PostgresStore::open(&StoreUrl::parse(url).unwrap()).unwrap();
        assert_eq!(store.config.get_password(), Some(&b"hun@ter/2?x#y"[..]));
        assert_eq!(store.config.get_user(), Some("u"));
        assert_eq!(
            store.config.get_hosts(),
            &[tokio_postgres::config::Host::Tcp("127.0.0.1".into())]
        );
        assert_eq!(store.config.get_ports(), &[5433]);
        assert_eq!(store.config.get_dbname(), Some("db"));
        let shown = format!("{store:?} {}", store.describe());
        assert!(!shown.contains("ter/2"), "{shown}");
        // Already percent-encoded, it is decoded once.
        let url = "postgres://u:hun%40ter@127.0.0.1:5433/db";
        let store = PostgresStore::open(&StoreUrl::parse(url).unwrap()).unwrap();
        assert_eq!(store.config.get_password(), Some(&b"hun@ter"[..]));
    }

    #[test]
    fn a_multi_host_url_opens_and_is_configured() {
        let url = "postgres://u:hunter2@127.0.0.1:5433,[::1]:5434/db";
        let store = PostgresStore::open(&StoreUrl::parse(url).unwrap()).unwrap();
        assert_eq!(store.config.get_hosts().len(), 2);
        assert_eq!(store.config.get_ports(), &[5433, 5434]);
        assert_eq!(
            store.config.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        assert_eq!(
            store.config.get_connect_timeout(),
            Some(&(DEFAULT_TIMEOUT / 2))
        );
        // One configuration per host, each with the URL's other settings.
        assert_eq!(store.hosts.len(), 2);
        for (host, port) in store.hosts.iter().zip([5433, 5434]) {
            assert_eq!(host.get_hosts().len(), 1);
            assert_eq!(host.get_ports(), &[port]);
            assert_eq!(host.get_user(), store.config.get_user());
            assert_eq!(host.get_password(), store.config.get_password());
            assert_eq!(host.get_dbname(), Some("db"));
            assert_eq!(host.get_application_name(), Some("cosid"));
            assert_eq!(
                host.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite
            );
            // Tried at once: each gets the whole timeout for its handshake.
            assert_eq!(host.get_connect_timeout(), Some(&DEFAULT_TIMEOUT));
        }
        let shown = format!("{store:?} {}", store.describe());
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("postgres://***@127.0.0.1:5433,[::1]:5434/db"),
            "{shown}"
        );
        let e = PostgresStore::open(
            &StoreUrl::parse(&format!("{url}?target_session_attrs=standby")).unwrap(),
        )
        .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.message().contains("'standby'"), "{e}");
    }

    #[test]
    fn an_sslrootcert_that_is_not_percent_encoded_is_refused_naming_the_parameter() {
        // "%a" and then a two-byte character: once a panic, slicing through the character.
        for bad in ["%a\u{e9}.pem", "%zz.pem", "%C3.pem"] {
            let url = format!("postgres://u:hunter2@h/db?sslrootcert={bad}");
            let e = PostgresStore::open(&StoreUrl::parse(&url).unwrap()).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Config, "{e}");
            assert!(e.message().contains("sslrootcert"), "{e}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn bad_urls_and_modes_are_config_errors_without_the_password() {
        for url in [
            "postgres://u:hunter2@h/db?sslmode=sometimes",
            "postgres://u:hunter2@h:notaport/db",
        ] {
            let e = PostgresStore::open(&StoreUrl::parse(url).unwrap()).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Config, "{e}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
            assert!(e.to_string().contains("postgres://***@h"), "{e}");
        }
        let e = PostgresStore::open(
            &StoreUrl::parse("postgres://h/db?sslmode=verify-ca&sslrootcert=/nonexistent.pem")
                .unwrap(),
        )
        .unwrap_err();
        assert!(e.message().contains("/nonexistent.pem"), "{e}");
    }
}
