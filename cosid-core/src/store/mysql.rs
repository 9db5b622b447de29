//! `mysql://` and `mariadb://`: the slot store in MySQL or MariaDB (InnoDB).
//!
//! Each primitive is one SQL statement, so one round trip, and one atomic step in autocommit:
//! the reads are single `SELECT`s (one consistent read view under any isolation level InnoDB
//! offers above `READ UNCOMMITTED`; the session asks for `READ COMMITTED`) that also return the
//! server's clock, `UNIX_TIMESTAMP(NOW(3))` in a session whose time zone is UTC; the
//! compare-and-sets are `UPDATE … WHERE namespace = ? AND … AND version = ?` (InnoDB checks the
//! `WHERE` on the latest committed row, under its row lock) and a plain `INSERT` for the first
//! version, whose duplicate-key error (1062) is the lost race.
//!
//! **Versions.** MySQL has no `RETURNING` on `UPDATE` and no sequences, so a write sets
//! `version = LAST_INSERT_ID(GREATEST(version + 1, now_µs))` (an `INSERT`:
//! `LAST_INSERT_ID(now_µs)`): the new version comes back in the same answer (the OK packet's
//! last-insert-id), it grows on every write of a key, and a key deleted and written again starts
//! at the server's time in microseconds, above every version it had unless the server clock went
//! back. Since every successful write changes `version`, "rows matched" and "rows changed" are
//! the same number: the affected-rows count means the same with or without `CLIENT_FOUND_ROWS`.
//!
//! **Connecting** checks what the guarantee needs and refuses the server otherwise, with an error
//! naming the setting: InnoDB for cosid's tables (created `ENGINE=InnoDB`, with
//! `NO_ENGINE_SUBSTITUTION` so a server without InnoDB refuses rather than substitutes, and
//! tables someone created with another engine are refused), `innodb_flush_log_at_trx_commit =
//! 1`, `sync_binlog = 1` when the binary log is on, and a writable server (`read_only` off).
//! The schema is created if missing (`CREATE TABLE IF NOT EXISTS`, safe from many processes at
//! once) and versioned in `cosid_schema`.
//!
//! TLS follows the URL's `ssl-mode` (MySQL's names): `disabled` and `preferred` connect in plain
//! text; `required` encrypts without checking the certificate (unless `ssl-ca` is given, then
//! like `verify_ca`); `verify_ca` checks the chain; `verify_identity` the chain and the host
//! name. Roots come from `ssl-ca` (a PEM file) or else the system's store. rustls (ring) does
//! the TLS.
//!
//! What MySQL must be set up to keep for uniqueness to hold is in `docs/stores.md`.

use super::blocking::{Failure, IoRuntime, SharedConnection, DEFAULT_TIMEOUT};
use super::{
    Cas, NamespaceSnapshot, NamespaceWrite, SlotRead, SlotStore, SlotWrite, StoreUrl, Written,
};
use crate::error::{Error, ErrorKind, Result};
use crate::lease::{NamespaceRecord, Owner, SlotRecord, Versioned};
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Row, SslOpts, Value};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The schema version this build writes and reads.
const SCHEMA_VERSION: i64 = 2;

/// Duplicate key: the row an `INSERT` would create exists (a lost race).
const ER_DUP_ENTRY: u16 = 1062;
/// Deadlock and lock wait timeout: InnoDB rolled the statement back, nothing was written.
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// `--read-only` (or `super_read_only`) refused a write.
const ER_OPTION_PREVENTS_STATEMENT: u16 = 1290;

/// The session every connection runs in: UTC (so `UNIX_TIMESTAMP(NOW())` is exact, with no
/// daylight-saving hour read twice), strict, no silent engine substitution, autocommit, and
/// `READ COMMITTED` (each statement reads one committed snapshot; no gap locks on inserts).
const SESSION: &str = "SET SESSION time_zone = '+00:00', \
     SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION', SESSION autocommit = 1; \
     SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

const SERVER_CHECK: &str = "SELECT @@global.read_only, @@global.innodb_flush_log_at_trx_commit, \
     @@global.log_bin, @@global.sync_binlog";

const TABLES: [&str; 3] = ["cosid_schema", "cosid_namespace", "cosid_slot"];

const ENGINES: &str = "SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES \
     WHERE TABLE_SCHEMA = DATABASE() \
     AND TABLE_NAME IN ('cosid_schema', 'cosid_namespace', 'cosid_slot')";

/// Binary strings compare byte by byte: no collation may make two namespaces or owner keys one
/// (`'a' = 'A'`, `'a' = 'a '` under the default collations).
const SCHEMA: [&str; 4] = [
    "CREATE TABLE IF NOT EXISTS cosid_schema (
        id      INT NOT NULL PRIMARY KEY,
        version INT NOT NULL
    ) ENGINE=InnoDB",
    "INSERT INTO cosid_schema (id, version) VALUES (1, 1) ON DUPLICATE KEY UPDATE id = id",
    "CREATE TABLE IF NOT EXISTS cosid_namespace (
        namespace     VARBINARY(255)  NOT NULL PRIMARY KEY,
        version       BIGINT UNSIGNED NOT NULL,
        slot_limit    BIGINT          NOT NULL,
        tolerance_ms  BIGINT          NOT NULL,
        not_before_ms BIGINT          NOT NULL,
        layout        VARBINARY(255)  NULL,
        ttl_ms        BIGINT          NULL
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS cosid_slot (
        namespace         VARBINARY(255)  NOT NULL,
        slot              INT UNSIGNED    NOT NULL,
        version           BIGINT UNSIGNED NOT NULL,
        owner_key         BLOB            NULL,
        owner_incarnation BINARY(16)      NULL,
        last_owner_key    BLOB            NULL,
        fence             BIGINT UNSIGNED NOT NULL,
        expires_at        BIGINT          NOT NULL,
        floor_ms          BIGINT          NOT NULL,
        ceiling_ms        BIGINT          NOT NULL,
        next_floor_ms     BIGINT          NOT NULL,
        PRIMARY KEY (namespace, slot)
    ) ENGINE=InnoDB",
];

/// The store clock in ms, and a new version (µs), both from the statement's one `NOW()`.
const NOW_MS: &str = "CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)";
const NOW_US: &str = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)";

/// When the server started, from its uptime in whole seconds: the uptime is read during the
/// statement, after `NOW(3)`, and rounded down, so the start lies less than 1 s after
/// `now - uptime`; adding that second makes the guard err late, never early. MariaDB keeps the
/// status in `information_schema`, MySQL 8 in `performance_schema`.
fn started_at_sql(schema: &str) -> String {
    format!(
        "SELECT {NOW_MS} - 1000 * CAST(VARIABLE_VALUE AS SIGNED) + 1000 \
         FROM {schema}.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'"
    )
}

const SLOT_COLUMNS: &str = "s.slot, s.version, s.owner_key, s.owner_incarnation, \
     s.last_owner_key, s.fence, s.expires_at, s.floor_ms, s.ceiling_ms, s.next_floor_ms";

fn snapshot_sql() -> String {
    format!(
        "SELECT c.now, n.version, n.slot_limit, n.tolerance_ms, n.not_before_ms, n.layout, \
         {SLOT_COLUMNS}, n.ttl_ms FROM (SELECT {NOW_MS} AS now) c \
         LEFT JOIN cosid_namespace n ON n.namespace = ? \
         LEFT JOIN cosid_slot s ON s.namespace = ?"
    )
}

fn read_slot_sql() -> String {
    format!(
        "SELECT c.now, {SLOT_COLUMNS} FROM (SELECT {NOW_MS} AS now) c \
         LEFT JOIN cosid_slot s ON s.namespace = ? AND s.slot = ?"
    )
}

fn insert_namespace_sql() -> String {
    format!(
        "INSERT INTO cosid_namespace \
         (namespace, version, slot_limit, tolerance_ms, not_before_ms, layout, ttl_ms) \
         VALUES (?, LAST_INSERT_ID({NOW_US}), ?, ?, ?, ?, ?)"
    )
}

fn update_namespace_sql() -> String {
    format!(
        "UPDATE cosid_namespace SET slot_limit = ?, tolerance_ms = ?, not_before_ms = ?, \
         layout = ?, ttl_ms = ?, version = LAST_INSERT_ID(GREATEST(version + 1, {NOW_US})) \
         WHERE namespace = ? AND version = ?"
    )
}

fn insert_slot_sql() -> String {
    format!(
        "INSERT INTO cosid_slot (namespace, slot, version, owner_key, owner_incarnation, \
         last_owner_key, fence, expires_at, floor_ms, ceiling_ms, next_floor_ms) \
         VALUES (?, ?, LAST_INSERT_ID({NOW_US}), ?, ?, ?, ?, ?, ?, ?, ?)"
    )
}

fn update_slot_sql() -> String {
    format!(
        "UPDATE cosid_slot SET owner_key = ?, owner_incarnation = ?, last_owner_key = ?, \
         fence = ?, expires_at = ?, floor_ms = ?, ceiling_ms = ?, next_floor_ms = ?, \
         version = LAST_INSERT_ID(GREATEST(version + 1, {NOW_US})) \
         WHERE namespace = ? AND slot = ? AND version = ?"
    )
}

/// `cosid namespace delete`: one slot record, if its version is still the one read.
const DELETE_SLOT: &str = "DELETE FROM cosid_slot WHERE namespace = ? AND slot = ? AND version = ?";

/// The statements, built once.
struct Sql {
    snapshot: String,
    read_slot: String,
    insert_namespace: String,
    update_namespace: String,
    insert_slot: String,
    update_slot: String,
    delete_slot: String,
    started_at: String,
    started_at_mysql8: String,
}

impl Sql {
    fn new() -> Sql {
        Sql {
            snapshot: snapshot_sql(),
            read_slot: read_slot_sql(),
            insert_namespace: insert_namespace_sql(),
            update_namespace: update_namespace_sql(),
            insert_slot: insert_slot_sql(),
            update_slot: update_slot_sql(),
            delete_slot: DELETE_SLOT.to_string(),
            started_at: started_at_sql("information_schema"),
            started_at_mysql8: started_at_sql("performance_schema"),
        }
    }
}

/// The one connection a store shares. mysql_async runs one statement at a time on a
/// connection, so callers take turns on the lock; the connection is taken out while a statement
/// runs and put back only when it ended cleanly, so a statement cut off by the timeout (its
/// future dropped mid-answer) leaves no half-read connection behind for the next caller.
struct Link {
    conn: tokio::sync::Mutex<Option<mysql_async::Conn>>,
    broken: AtomicBool,
}

/// What one statement gave.
enum Answer {
    Rows(Vec<Row>),
    /// A write: rows affected, and the last-insert-id (the new version).
    Written(u64, Option<u64>),
    /// An `INSERT` found the key taken.
    Duplicate,
}

/// Why a statement did not give an answer.
enum Fault {
    /// The connection was gone before the statement was sent (another caller's statement was cut
    /// off): safe to send again on a new connection.
    Lost,
    Client(mysql_async::Error),
}

/// TLS as the URL asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    Disabled,
    Required,
    VerifyCa,
    VerifyIdentity,
}

/// The parts of a MySQL URL.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    host: String,
    port: u16,
    user: String,
    password: Option<String>,
    database: String,
    ssl_mode: SslMode,
    ssl_ca: Option<String>,
}

/// The MySQL / MariaDB store. Thread-safe: one connection shared by all callers, who take turns
/// on it; re-opened when it fails or an operation times out, so a restarted server is picked up
/// by the next call.
pub struct MysqlStore {
    io: IoRuntime,
    opts: Opts,
    ssl_mode: SslMode,
    sql: Arc<Sql>,
    conn: SharedConnection<Arc<Link>>,
    /// `?restart-guard=` (on by default): report when the server started.
    restart_guard: bool,
}

impl fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.io
            .debug_store(f, "MysqlStore", ("ssl_mode", &self.ssl_mode))
    }
}

impl MysqlStore {
    /// Opens the store `url` (`mysql://user[:password]@host[:port]/database[?ssl-mode=…]`, or
    /// `mariadb://…`) with the default 2 s bound on connecting and on every operation. Connects
    /// lazily: a server that is down now gives `Store` errors from the operations, not from here.
    pub fn open(url: &StoreUrl) -> Result<Arc<MysqlStore>> {
        Self::open_with_timeout(url, DEFAULT_TIMEOUT)
    }

    /// Like [`MysqlStore::open`], with `timeout` bounding connecting and every operation.
    pub fn open_with_timeout(url: &StoreUrl, timeout: Duration) -> Result<Arc<MysqlStore>> {
        Self::open_with(url, timeout, false)
    }

    /// Like [`MysqlStore::open_with_timeout`], with the client capability `CLIENT_FOUND_ROWS`
    /// on or off (off in every other constructor). The store means the same with either: for
    /// the tests that show it. Not a stable API.
    #[doc(hidden)]
    pub fn open_with(
        url: &StoreUrl,
        timeout: Duration,
        client_found_rows: bool,
    ) -> Result<Arc<MysqlStore>> {
        let StoreUrl::Mysql { url: raw } = url else {
            return Err(url.not_a("a mysql:// or mariadb:// URL"));
        };
        let name = url.redacted();
        let (raw, restart_guard) = super::url::take_restart_guard(raw, &name)?;
        let p = parse(&raw, &name)?;
        let secrets = p.password.iter().cloned().collect();
        let mut builder = OptsBuilder::default()
            .ip_or_hostname(p.host.clone())
            .tcp_port(p.port)
            .user(Some(p.user.clone()))
            .pass(p.password.clone())
            .db_name(Some(p.database.clone()))
            .prefer_socket(false)
            .tcp_nodelay(true)
            .client_found_rows(client_found_rows)
            .stmt_cache_size(16)
            // The client's own bound on a packet: without it the client takes the server's
            // `@@max_allowed_packet` (up to 1 GiB), so the server would pick the bound.
            .max_allowed_packet(Some(crate::bounds::MAX_MYSQL_PACKET_BYTES));
        if p.ssl_mode != SslMode::Disabled {
            builder = builder.ssl_opts(ssl_opts(&p, &name)?);
        }
        let io = IoRuntime::new(name, secrets, timeout)?;
        Ok(Arc::new(MysqlStore {
            io,
            opts: Opts::from(builder),
            ssl_mode: p.ssl_mode,
            sql: Arc::new(Sql::new()),
            conn: SharedConnection::new(),
            restart_guard,
        }))
    }

    /// The live connection and its number, connecting (and checking the server and the schema)
    /// when there is none or it broke.
    fn link(&self) -> Result<(u64, Arc<Link>)> {
        self.conn.get(
            |l| !l.broken.load(Ordering::Acquire),
            || {
                let opts = self.opts.clone();
                match self.io.run(async move { connect(opts).await }) {
                    Ok(conn) => Ok(Arc::new(Link {
                        conn: tokio::sync::Mutex::new(Some(conn)),
                        broken: AtomicBool::new(false),
                    })),
                    Err(Failure::Failed(ConnectError::Client(e))) => {
                        let error = self.io.failure("connecting", Failure::Failed(message(&e)));
                        Err(error.permanent_if(refused_for_good(&e)))
                    }
                    Err(Failure::Failed(ConnectError::Refused(why))) => Err(Error::store(
                        self.io
                            .scrub(&format!("store {}: connecting: {why}", self.io.name())),
                    )
                    .permanent()),
                    Err(Failure::TimedOut) => {
                        Err(self.io.failure::<String>("connecting", Failure::TimedOut))
                    }
                }
            },
        )
    }

    /// Runs one statement (`write`: its affected rows and last-insert-id are the answer, and a
    /// duplicate key is [`Answer::Duplicate`]). A connection that failed or timed out is dropped
    /// so the next call connects again.
    fn run(
        &self,
        what: &str,
        sql: fn(&Sql) -> &str,
        params: Vec<Value>,
        write: bool,
    ) -> Result<Answer> {
        // A statement that was never sent (the connection was gone) is sent once more.
        for _ in 0..2 {
            let (number, link) = self.link()?;
            let on_io = link.clone();
            let statements = self.sql.clone();
            let params = params.clone();
            let outcome = self
                .io
                .run(async move { statement(&on_io, sql(&statements), params, write).await });
            match outcome {
                Ok(answer) => return Ok(answer),
                Err(Failure::Failed(Fault::Lost)) => {
                    link.broken.store(true, Ordering::Release);
                    self.conn.drop_if_current(number);
                }
                Err(f) => {
                    let keeps =
                        matches!(&f, Failure::Failed(Fault::Client(e)) if keeps_connection(e));
                    if !keeps {
                        link.broken.store(true, Ordering::Release);
                        self.conn.drop_if_current(number);
                    }
                    return Err(self.io.failure(
                        what,
                        match f {
                            Failure::Failed(Fault::Client(e)) => Failure::Failed(message(&e)),
                            Failure::Failed(Fault::Lost) => {
                                Failure::Failed("the connection was lost".to_string())
                            }
                            Failure::TimedOut => Failure::TimedOut,
                        },
                    ));
                }
            }
        }
        Err(self.io.error(
            what,
            &"the connection was lost twice before the statement could be sent",
        ))
    }

    fn rows(&self, what: &str, sql: fn(&Sql) -> &str, params: Vec<Value>) -> Result<Vec<Row>> {
        match self.run(what, sql, params, false)? {
            Answer::Rows(rows) => Ok(rows),
            _ => Err(self.io.bad_row(what, "a read gave no rows")),
        }
    }

    /// The new version of a compare-and-set, or `None` when it wrote nothing.
    fn written(
        &self,
        what: &str,
        sql: fn(&Sql) -> &str,
        params: Vec<Value>,
    ) -> Result<Option<u64>> {
        match self.run(what, sql, params, true)? {
            Answer::Duplicate | Answer::Written(0, _) => Ok(None),
            Answer::Written(1, Some(version)) if version > 0 => Ok(Some(version)),
            Answer::Written(n, id) => Err(self.io.error(
                what,
                &format!(
                    "the server reported {n} rows written and version {id:?} for one \
                     compare-and-set; is the table cosid_slot or cosid_namespace changed by \
                     something else than cosid?"
                ),
            )),
            Answer::Rows(_) => Err(self.io.bad_row(what, "a write gave rows")),
        }
    }

    /// The store's clock and the namespace record in the first row of a snapshot-shaped
    /// answer (the clock in column 0, the namespace in 1 to 5 and its ttl in 16, after the
    /// slot's columns).
    fn namespace_from(
        &self,
        what: &str,
        rows: &[Row],
    ) -> Result<(i64, Option<Versioned<NamespaceRecord>>)> {
        let first = rows
            .first()
            .ok_or_else(|| self.io.bad_row(what, "the query returned no row"))?;
        let bad = |col: &str| self.io.bad_row(what, &format!("namespace column {col}"));
        let num = |i: usize, col: &str| -> Result<i64> {
            int(first, i)
                .ok()
                .flatten()
                .and_then(|v| i64::try_from(v).ok())
                .ok_or_else(|| bad(col))
        };
        let store_now = num(0, "now")?;
        let namespace_rec = match int(first, 1).map_err(|_| bad("version"))? {
            None => None,
            Some(version) => {
                let value = super::namespace_from_columns(
                    num(2, "slot_limit")?,
                    num(3, "tolerance_ms")?,
                    num(4, "not_before_ms")?,
                    text(first, 5).map_err(|_| bad("layout"))?,
                    int(first, 16)
                        .map_err(|_| bad("ttl_ms"))?
                        .map(|v| i64::try_from(v).map_err(|_| bad("ttl_ms")))
                        .transpose()?,
                )
                .map_err(|bad| self.io.bad_row(what, &bad))?;
                Some(Versioned {
                    value,
                    version: u64::try_from(version).map_err(|_| bad("version"))?,
                })
            }
        };
        Ok((store_now, namespace_rec))
    }

    /// The slot record in `row` from column `at` on (`None` when the LEFT JOIN found none).
    fn slot_from(&self, what: &str, row: &Row, at: usize) -> Result<Option<Versioned<SlotRecord>>> {
        let bad = |col: &str| self.io.bad_row(what, &format!("column {col}"));
        let Some(slot) = int(row, at).map_err(|_| bad("slot"))? else {
            return Ok(None);
        };
        let slot = u32::try_from(slot).map_err(|_| bad("slot"))?;
        let need = |i: usize, col: &str| int(row, i).ok().flatten().ok_or_else(|| bad(col));
        let owner_key = text(row, at + 2).map_err(|_| bad("owner_key"))?;
        let incarnation = bytes(row, at + 3).map_err(|_| bad("owner_incarnation"))?;
        let owner = match (owner_key, incarnation) {
            (Some(key), Some(raw)) => {
                let incarnation =
                    uuid::Uuid::from_slice(&raw).map_err(|_| bad("owner_incarnation"))?;
                Some(Owner { key, incarnation })
            }
            (None, None) => None,
            _ => {
                return Err(self.io.bad_row(
                    what,
                    &format!("slot {slot} has an owner key without incarnation or the reverse"),
                ))
            }
        };
        let i64_at =
            |i: usize, col: &str| need(i, col).and_then(|v| i64::try_from(v).map_err(|_| bad(col)));
        let value = SlotRecord {
            slot,
            owner,
            last_owner_key: text(row, at + 4).map_err(|_| bad("last_owner_key"))?,
            fence: u64::try_from(need(at + 5, "fence")?).map_err(|_| bad("fence"))?,
            expires_at: i64_at(at + 6, "expires_at")?,
            floor: i64_at(at + 7, "floor_ms")?,
            ceiling: i64_at(at + 8, "ceiling_ms")?,
            next_floor: i64_at(at + 9, "next_floor_ms")?,
        };
        let version = u64::try_from(need(at + 1, "version")?).map_err(|_| bad("version"))?;
        Ok(Some(Versioned { value, version }))
    }
}

/// A column as an integer (`None` for NULL); the text protocol sends numbers as text.
fn int(row: &Row, i: usize) -> std::result::Result<Option<i128>, ()> {
    match row.as_ref(i) {
        None => Err(()),
        Some(Value::NULL) => Ok(None),
        Some(Value::Int(v)) => Ok(Some(i128::from(*v))),
        Some(Value::UInt(v)) => Ok(Some(i128::from(*v))),
        Some(Value::Bytes(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<i128>().ok())
            .map(Some)
            .ok_or(()),
        Some(_) => Err(()),
    }
}

fn bytes(row: &Row, i: usize) -> std::result::Result<Option<Vec<u8>>, ()> {
    match row.as_ref(i) {
        Some(Value::NULL) => Ok(None),
        Some(Value::Bytes(b)) => Ok(Some(b.clone())),
        _ => Err(()),
    }
}

fn text(row: &Row, i: usize) -> std::result::Result<Option<String>, ()> {
    bytes(row, i)?
        .map(|b| String::from_utf8(b).map_err(|_| ()))
        .transpose()
}

/// Sends one statement on the link's connection (see [`Link`]); a deadlock or lock wait
/// timeout, which InnoDB rolled back whole, is sent again (a few times).
async fn statement(
    link: &Link,
    sql: &str,
    params: Vec<Value>,
    write: bool,
) -> std::result::Result<Answer, Fault> {
    let mut guard = link.conn.lock().await;
    let Some(mut conn) = guard.take() else {
        return Err(Fault::Lost);
    };
    let mut tries = 0;
    let outcome = loop {
        tries += 1;
        let got = if write {
            conn.exec_drop(sql, params.clone())
                .await
                .map(|()| Answer::Written(conn.affected_rows(), conn.last_insert_id()))
        } else {
            conn.exec::<Row, _, _>(sql, params.clone())
                .await
                .map(Answer::Rows)
        };
        match got {
            Err(mysql_async::Error::Server(e)) if write && e.code == ER_DUP_ENTRY => {
                break Ok(Answer::Duplicate)
            }
            Err(mysql_async::Error::Server(e))
                if (e.code == ER_LOCK_DEADLOCK || e.code == ER_LOCK_WAIT_TIMEOUT) && tries < 5 =>
            {
                continue
            }
            other => break other,
        }
    };
    match &outcome {
        Err(e) if !keeps_connection(e) => link.broken.store(true, Ordering::Release),
        _ => *guard = Some(conn),
    }
    outcome.map_err(Fault::Client)
}

/// Whether the connection is still good after `e`: a server's refusal of one statement leaves
/// it so, except a read-only server (the next connection may reach a writable one).
fn keeps_connection(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code != ER_OPTION_PREVENTS_STATEMENT)
}

enum ConnectError {
    Client(mysql_async::Error),
    /// The server is not one cosid may use (engine, durability, read-only, schema).
    Refused(String),
}

impl From<mysql_async::Error> for ConnectError {
    fn from(e: mysql_async::Error) -> Self {
        ConnectError::Client(e)
    }
}

async fn connect(opts: Opts) -> std::result::Result<mysql_async::Conn, ConnectError> {
    let mut conn = mysql_async::Conn::new(opts).await?;
    conn.query_drop(SESSION).await?;
    check_server(&mut conn).await?;
    ensure_schema(&mut conn).await?;
    Ok(conn)
}

/// Refuses a server that cannot keep an acknowledged write across a crash, or takes none.
async fn check_server(conn: &mut mysql_async::Conn) -> std::result::Result<(), ConnectError> {
    let row: Option<Row> = match conn.query_first(SERVER_CHECK).await {
        Ok(row) => row,
        // No InnoDB at all: its variables are unknown.
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => {
            return Err(ConnectError::Refused(format!(
                "the server has no InnoDB ({}); cosid's tables need InnoDB (transactions, row \
                 locks, crash recovery); enable it",
                e.message
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let row = row.ok_or_else(|| ConnectError::Refused("the server check gave no row".into()))?;
    let get = |i: usize| int(&row, i).ok().flatten();
    if get(0) == Some(1) {
        return Err(ConnectError::Refused(
            "the server is read-only (read_only is on: a replica?); cosid writes, so name the \
             primary in the URL"
                .into(),
        ));
    }
    match get(1) {
        Some(1) => {}
        other => {
            return Err(ConnectError::Refused(format!(
                "the server has innodb_flush_log_at_trx_commit = {}, which acknowledges commits \
                 before they are on disk (a crash loses them, and with them cosid's uniqueness \
                 guarantee); set innodb_flush_log_at_trx_commit = 1",
                other.map_or("?".to_string(), |v| v.to_string())
            )))
        }
    }
    if get(2) == Some(1) && get(3) != Some(1) {
        return Err(ConnectError::Refused(format!(
            "the server writes a binary log with sync_binlog = {}, so a crash can lose commits \
             it acknowledged (and with them cosid's uniqueness guarantee); set sync_binlog = 1",
            get(3).map_or("?".to_string(), |v| v.to_string())
        )));
    }
    Ok(())
}

/// Creates the tables if missing, and refuses tables of another engine and a schema newer than
/// this build.
async fn ensure_schema(conn: &mut mysql_async::Conn) -> std::result::Result<(), ConnectError> {
    let mut engines: Vec<(String, Option<String>)> = conn.query(ENGINES).await?;
    if engines.len() < TABLES.len() {
        for ddl in SCHEMA {
            conn.query_drop(ddl).await?;
        }
        engines = conn.query(ENGINES).await?;
    }
    for (table, engine) in &engines {
        if !engine
            .as_deref()
            .is_some_and(|e| e.eq_ignore_ascii_case("InnoDB"))
        {
            return Err(ConnectError::Refused(format!(
                "table {table} uses the storage engine {}, and cosid's tables need InnoDB \
                 (transactions, row locks, crash recovery); convert it with ALTER TABLE {table} \
                 ENGINE=InnoDB",
                engine.as_deref().unwrap_or("(none)")
            )));
        }
    }
    let version: Option<i64> = conn
        .query_first("SELECT version FROM cosid_schema WHERE id = 1")
        .await?;
    match version {
        Some(v) if v > SCHEMA_VERSION => Err(ConnectError::Refused(format!(
            "the database holds cosid schema version {v}, and this build of cosid knows versions \
             up to {SCHEMA_VERSION}; upgrade cosid, or use another database"
        ))),
        Some(v) if v < 2 => upgrade_to_2(conn).await,
        _ => Ok(()),
    }
}

/// Version 2: the lease ttl per namespace, for the restart guard (none in older records until
/// their first runtime of this version writes its own). MySQL has no `ADD COLUMN IF NOT
/// EXISTS`, so the column is looked for first, and a connection that lost the race to add it
/// (duplicate column) finds it added.
async fn upgrade_to_2(conn: &mut mysql_async::Conn) -> std::result::Result<(), ConnectError> {
    const ER_DUP_FIELDNAME: u16 = 1060;
    let has: Option<i64> = conn
        .query_first(
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME = 'cosid_namespace' AND COLUMN_NAME = 'ttl_ms'",
        )
        .await?;
    if has.unwrap_or(0) == 0 {
        match conn
            .query_drop("ALTER TABLE cosid_namespace ADD COLUMN ttl_ms BIGINT NULL")
            .await
        {
            Err(mysql_async::Error::Server(e)) if e.code == ER_DUP_FIELDNAME => {}
            other => other?,
        }
    }
    conn.query_drop("UPDATE cosid_schema SET version = 2 WHERE id = 1 AND version < 2")
        .await?;
    Ok(())
}

/// The client's message with its sources; the server's own text (which names the user, never
/// the password) for a refusal.
fn message(e: &mysql_async::Error) -> String {
    match e {
        mysql_async::Error::Server(s) if s.code == ER_OPTION_PREVENTS_STATEMENT => format!(
            "ERROR {} ({}): {}: the server is read-only (a replica, or read_only is on); cosid \
             writes, so name the primary in the URL",
            s.code, s.state, s.message
        ),
        mysql_async::Error::Server(s) => format!("ERROR {} ({}): {}", s.code, s.state, s.message),
        other => {
            let text = chain_text(other);
            if super::blocking::incurable(&text) == Some(super::blocking::Incurable::UnknownHost) {
                format!("{text}; {}", super::blocking::UNKNOWN_HOST_FIX)
            } else {
                text
            }
        }
    }
}

/// Whether a failed connect cannot succeed by trying again: the server refused the user, the
/// password or the database (access denied, unknown database), the host name does not exist,
/// or TLS is on one side only or its certificate is not trusted. A refused connection, a server
/// starting or at its connection limit, a timeout: not.
fn refused_for_good(e: &mysql_async::Error) -> bool {
    // ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, ER_BAD_DB_ERROR,
    // ER_ACCESS_DENIED_NO_PASSWORD_ERROR.
    const REFUSED: [u16; 4] = [1044, 1045, 1049, 1698];
    match e {
        mysql_async::Error::Server(s) => REFUSED.contains(&s.code),
        other => super::blocking::incurable(&chain_text(other)).is_some(),
    }
}

/// An error and its sources in one line, each piece once: the client's texts repeat their
/// sources' ("Input/output error: Input/output error: Connection refused …").
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut texts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        texts.push(s.to_string());
        source = s.source();
    }
    let mut out = texts.pop().unwrap_or_default();
    for outer in texts.iter().rev() {
        match outer.strip_suffix(out.as_str()) {
            Some(prefix) if out.starts_with(prefix) => {}
            Some(prefix) => out = format!("{prefix}{out}"),
            None if outer.contains(out.as_str()) => out = outer.clone(),
            None => out = format!("{outer}: {out}"),
        }
    }
    out
}

/// Reads `mysql://[user[:password]@]host[:port]/database[?ssl-mode=…&ssl-ca=…]`.
fn parse(raw: &str, name: &str) -> Result<Parsed> {
    let bad = |why: &str| {
        Error::config(format!(
            "store URL '{name}' {why}; use mysql://user[:password]@host[:port]/database\
             [?ssl-mode=verify_identity&ssl-ca=/path/ca.pem] (mariadb:// too)"
        ))
    };
    let (scheme, rest) = raw
        .trim()
        .split_once("://")
        .ok_or_else(|| bad("has no //"))?;
    if !matches!(scheme.to_ascii_lowercase().as_str(), "mysql" | "mariadb") {
        return Err(bad("is not mysql:// or mariadb://"));
    }
    // The host follows the last '@' (a password may hold '/', '?' or '@'). An '@' after a '?'
    // cannot be placed: refused rather than guessed, so no piece of a password is taken for a
    // host, a database or a parameter.
    if rest.find('?').is_some_and(|q| rest[q..].contains('@')) {
        return Err(bad(
            "has an '@' after a '?'; percent-encode '@' and '?' in a password (%40, %3F)",
        ));
    }
    let host_start = rest.rfind('@').map_or(0, |i| i + 1);
    let (authority, tail) = match rest[host_start..].find(['/', '?', '#']) {
        Some(i) => rest.split_at(host_start + i),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let decode = |part: &str, what: &str| {
        crate::percent::decode(part).ok_or_else(|| {
            bad(&format!(
                "has a {what} that is not percent-encoded UTF-8 (every '%' must start two hex \
                 digits, e.g. %40 for '@')"
            ))
        })
    };
    let (user, password) = match userinfo {
        None => return Err(bad("has no user")),
        Some(u) => match u.split_once(':') {
            Some((user, pw)) => (decode(user, "user name")?, Some(decode(pw, "password")?)),
            None => (decode(u, "user name")?, None),
        },
    };
    if user.is_empty() {
        return Err(bad("has no user"));
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| bad("has an IPv6 host without its closing ']'"))?;
        match after {
            "" => (h.to_string(), None),
            p => (
                h.to_string(),
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("has text after ']'"))?,
                ),
            ),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    if host.contains(',') {
        return Err(bad(
            "names several hosts, which this store does not take; name the primary",
        ));
    }
    let port = match port {
        None => 3306,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(bad(&format!("has port '{p}', which is not a port number"))),
        },
    };
    if tail.contains('#') {
        return Err(bad("has a fragment ('#'), which store URLs do not take"));
    }
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let database = decode(path.trim_start_matches('/'), "database name")?;
    if database.is_empty() {
        return Err(bad("names no database (the path after the host)"));
    }
    if database.contains('/') {
        return Err(bad("has a path of more than one part"));
    }
    let mut ssl_mode = None;
    let mut ssl_ca = None;
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("ssl-mode", v)) => {
                ssl_mode = Some(match v.to_ascii_lowercase().replace('-', "_").as_str() {
                    "disabled" | "preferred" => SslMode::Disabled,
                    "required" => SslMode::Required,
                    "verify_ca" => SslMode::VerifyCa,
                    "verify_identity" => SslMode::VerifyIdentity,
                    _ => {
                        return Err(bad(&format!(
                            "has ssl-mode '{v}'; use disabled, preferred, required, verify_ca \
                             or verify_identity"
                        )))
                    }
                })
            }
            Some(("ssl-ca", v)) => ssl_ca = Some(decode(v, "ssl-ca")?),
            // Not echoed: the parameter may be a credential.
            _ => return Err(bad("has a parameter other than ssl-mode= and ssl-ca=")),
        }
    }
    let ssl_mode = match (ssl_mode, &ssl_ca) {
        (Some(m), _) => m,
        // A CA given alone asks for it to be used.
        (None, Some(_)) => SslMode::VerifyIdentity,
        (None, None) => SslMode::Disabled,
    };
    if ssl_mode == SslMode::Disabled && ssl_ca.is_some() {
        return Err(bad(
            "gives ssl-ca with TLS disabled; use ssl-mode=verify_identity",
        ));
    }
    Ok(Parsed {
        host,
        port,
        user,
        password,
        database,
        ssl_mode,
        ssl_ca,
    })
}

/// mysql_async's TLS options for the URL's `ssl-mode` and `ssl-ca`.
fn ssl_opts(p: &Parsed, name: &str) -> Result<SslOpts> {
    let roots: Vec<Vec<u8>> = match &p.ssl_ca {
        Some(path) => vec![super::ca_file::read(path, "ssl-ca", name)?.0],
        None if p.ssl_mode == SslMode::Required => Vec::new(),
        None => {
            let found = rustls_native_certs::load_native_certs().certs;
            if found.is_empty() {
                return Err(Error::config(format!(
                    "store '{name}': TLS with a checked certificate needs root certificates, and \
                     the system has none; give one with ssl-ca=/path/ca.pem"
                )));
            }
            found.into_iter().map(|c| c.as_ref().to_vec()).collect()
        }
    };
    let check_chain = p.ssl_mode != SslMode::Required || p.ssl_ca.is_some();
    Ok(SslOpts::default()
        .with_root_certs(roots.into_iter().map(Into::into).collect())
        // `required` checks nothing, but mysql_async's verifier wants a root to start from.
        .with_disable_built_in_roots(check_chain)
        .with_danger_accept_invalid_certs(!check_chain)
        .with_danger_skip_domain_validation(p.ssl_mode != SslMode::VerifyIdentity))
}

impl SlotStore for MysqlStore {
    fn describe(&self) -> String {
        self.io.name().to_string()
    }

    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let what = "reading a namespace snapshot";
        let ns = Value::Bytes(namespace.as_bytes().to_vec());
        let rows = self.rows(what, |s| &s.snapshot, vec![ns.clone(), ns])?;
        super::snapshot_of_rows(self.namespace_from(what, &rows)?, &rows, |row| {
            self.slot_from(what, row, 6)
        })
    }

    fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        let what = "writing the namespace record";
        let ns = Value::Bytes(namespace.as_bytes().to_vec());
        let fields = [
            Value::from(i64::from(record.limit)),
            Value::from(record.tolerance_ms),
            Value::from(record.not_before_ms),
            record
                .layout
                .map_or(Value::NULL, |l| Value::Bytes(l.encode().into_bytes())),
            record.ttl_ms.map_or(Value::NULL, Value::from),
        ];
        match expected {
            None => {
                let mut params = vec![ns];
                params.extend(fields);
                self.written(what, |s| &s.insert_namespace, params)
            }
            Some(v) => {
                let mut params = fields.to_vec();
                params.extend([ns, Value::UInt(v)]);
                self.written(what, |s| &s.update_namespace, params)
            }
        }
    }

    fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead> {
        let what = "reading a slot";
        let params = vec![
            Value::Bytes(namespace.as_bytes().to_vec()),
            Value::UInt(u64::from(slot)),
        ];
        let rows = self.rows(what, |s| &s.read_slot, params)?;
        let row = rows
            .first()
            .ok_or_else(|| self.io.bad_row(what, "the read returned no row"))?;
        let now = int(row, 0)
            .ok()
            .flatten()
            .and_then(|v| i64::try_from(v).ok())
            .ok_or_else(|| self.io.bad_row(what, "column now"))?;
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
        let params = vec![
            Value::Bytes(namespace.as_bytes().to_vec()),
            Value::UInt(u64::from(slot)),
            Value::UInt(expected),
        ];
        match self.run(what, |s| &s.delete_slot, params, true)? {
            Answer::Written(n, _) if n <= 1 => Ok(n == 1),
            Answer::Written(n, _) => Err(self.io.error(
                what,
                &format!(
                    "the server reported {n} rows deleted for one slot; is the table \
                     cosid_slot changed by something else than cosid?"
                ),
            )),
            Answer::Duplicate => Err(self.io.bad_row(what, "a delete found a duplicate key")),
            Answer::Rows(_) => Err(self.io.bad_row(what, "a delete gave rows")),
        }
    }

    /// The store clock comes with the version: a write sets `version = GREATEST(version + 1,
    /// now_µs)` from the statement's own `NOW(6)`, so a version other than `expected + 1` is the
    /// server's time in µs when it wrote (the clock the reads report, in ms). When it is
    /// `expected + 1` the clock may be behind the old version, and no clock is reported.
    fn cas_slot_timed(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<Written>> {
        let Cas { expected, record } = write;
        let what = "writing a slot record";
        let text = |s: Option<&String>| s.map_or(Value::NULL, |s| Value::Bytes(s.clone().into()));
        let fields = [
            text(record.owner.as_ref().map(|o| &o.key)),
            record.owner.as_ref().map_or(Value::NULL, |o| {
                Value::Bytes(o.incarnation.as_bytes().to_vec())
            }),
            text(record.last_owner_key.as_ref()),
            Value::UInt(record.fence),
            Value::from(record.expires_at),
            Value::from(record.floor),
            Value::from(record.ceiling),
            Value::from(record.next_floor),
        ];
        let key = [
            Value::Bytes(namespace.as_bytes().to_vec()),
            Value::UInt(u64::from(record.slot)),
        ];
        match expected {
            None => {
                let mut params = key.to_vec();
                params.extend(fields);
                self.written(what, |s| &s.insert_slot, params)
            }
            Some(v) => {
                let mut params = fields.to_vec();
                params.extend(key);
                params.push(Value::UInt(v));
                self.written(what, |s| &s.update_slot, params)
            }
        }
        .map(|written| {
            written.map(|version| Written {
                version,
                store_now: clock_of(expected, version),
            })
        })
    }

    fn may_forget_namespaces(&self) -> bool {
        self.restart_guard
    }

    fn started_at(&self, _namespace: &str) -> Result<Option<i64>> {
        if !self.restart_guard {
            return Ok(None);
        }
        let what = "reading when the server started";
        let rows = match self.rows(what, |s| &s.started_at, vec![]) {
            Ok(rows) => rows,
            // MySQL 8 has no information_schema.GLOBAL_STATUS.
            Err(e) if e.kind() != ErrorKind::Store || !e.message().contains("GLOBAL_STATUS") => {
                return Err(e)
            }
            Err(_) => self.rows(what, |s| &s.started_at_mysql8, vec![])?,
        };
        let row = rows
            .first()
            .ok_or_else(|| self.io.bad_row(what, "the server reports no Uptime"))?;
        int(row, 0)
            .ok()
            .flatten()
            .and_then(|ms| i64::try_from(ms).ok())
            .map(Some)
            .ok_or_else(|| self.io.bad_row(what, "Uptime"))
    }
}

/// The store clock (ms) a write's new `version` carries (see `cas_slot_timed`), if it does.
fn clock_of(expected: Option<u64>, version: u64) -> Option<i64> {
    if expected.and_then(|e| e.checked_add(1)) == Some(version) {
        return None;
    }
    i64::try_from(version / 1000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str) -> Result<Parsed> {
        parse(url, "n")
    }

    #[test]
    fn the_packet_bound_is_the_clients_not_the_servers() {
        let url = StoreUrl::parse("mysql://app:pw@db.example:3307/ids").unwrap();
        let store = MysqlStore::open(&url).unwrap();
        assert_eq!(
            store.opts.max_allowed_packet(),
            Some(crate::bounds::MAX_MYSQL_PACKET_BYTES)
        );
    }

    #[test]
    fn urls_are_read_into_their_parts() {
        let p = parsed("mysql://app:pw@db.example:3307/ids").unwrap();
        assert_eq!(
            p,
            Parsed {
                host: "db.example".into(),
                port: 3307,
                user: "app".into(),
                password: Some("pw".into()),
                database: "ids".into(),
                ssl_mode: SslMode::Disabled,
                ssl_ca: None,
            }
        );
        let p =
            parsed("mariadb://app@[::1]/ids?ssl-mode=VERIFY_CA&ssl-ca=%2Fetc%2Fca.pem").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("::1", 3306));
        assert_eq!(p.password, None);
        assert_eq!(p.ssl_mode, SslMode::VerifyCa);
        assert_eq!(p.ssl_ca.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(
            parsed("mysql://u@h/d?ssl-mode=required").unwrap().ssl_mode,
            SslMode::Required
        );
        assert_eq!(
            parsed("mysql://u@h/d?ssl-mode=preferred").unwrap().ssl_mode,
            SslMode::Disabled
        );
        assert_eq!(
            parsed("mysql://u@h/d?ssl-ca=/ca.pem").unwrap().ssl_mode,
            SslMode::VerifyIdentity
        );
    }

    /// A password may hold '@', '/', '?' and ':' unencoded: the host follows the last '@'.
    #[test]
    fn a_password_with_url_delimiters_is_the_password_and_nothing_else() {
        let p = parsed("mysql://u:hun@ter/2:x@127.0.0.1:3307/db").unwrap();
        assert_eq!(p.password.as_deref(), Some("hun@ter/2:x"));
        assert_eq!(
            (p.user.as_str(), p.host.as_str(), p.port),
            ("u", "127.0.0.1", 3307)
        );
        assert_eq!(p.database, "db");
        let p = parsed("mysql://u%40x:hun%40ter@h/db").unwrap();
        assert_eq!(
            (p.user.as_str(), p.password.as_deref()),
            ("u@x", Some("hun@ter"))
        );
    }

    #[test]
    fn bad_urls_are_config_errors_that_name_the_fix_and_hide_the_password() {
        for (url, says) in [
            ("mysql://h/db", "has no user"),
            ("mysql://:hunter2@h/db", "has no user"),
            ("mysql://u:hunter2@h", "names no database"),
            ("mysql://u:hunter2@h/", "names no database"),
            ("mysql://u:hunter2@h:notaport/db", "'notaport'"),
            ("mysql://u:hunter2@h:0/db", "'0'"),
            ("mysql://u:hunter2@h1,h2/db", "several hosts"),
            ("mysql://u:hunter2@h/db?ssl-mode=sometimes", "'sometimes'"),
            (
                "mysql://u:hunter2@h/db?ssl-ca=/x.pem&ssl-mode=disabled",
                "with TLS disabled",
            ),
            ("mysql://u:hunter2@h/a/b", "more than one part"),
            ("mysql://u:hunter2@[::1/db", "closing ']'"),
            ("mysql://u:hun%zzter2@h/db", "percent-encoded"),
            ("mysql://u:pw@h/db?x=hunter2@y", "after a '?'"),
            ("mysql://u:hunter2@h/db#frag", "fragment"),
        ] {
            let e = MysqlStore::open(&StoreUrl::parse(url).unwrap()).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Config, "{url}: {e}");
            assert!(e.message().contains(says), "{url}: {e}");
            assert!(!e.to_string().contains("hunter2"), "{url}: {e}");
            assert!(e.message().contains("mysql://user[:password]@host"), "{e}");
        }
        // A parameter MySQL does not take is refused by the URL's table, before the store.
        let e = StoreUrl::parse("mysql://u:hunter2@h/db?password=x").unwrap_err();
        assert!(
            e.message()
                .contains("parameter 'password' that a MySQL URL does not take"),
            "{e}"
        );
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = MysqlStore::open(
            &StoreUrl::parse("mysql://u@h/db?ssl-mode=verify_ca&ssl-ca=/nonexistent.pem").unwrap(),
        )
        .unwrap_err();
        assert!(e.message().contains("/nonexistent.pem"), "{e}");
    }

    #[test]
    fn an_error_chain_is_one_line_with_each_piece_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e = mysql_async::Error::Io(mysql_async::IoError::Io(io));
        let text = message(&e);
        assert_eq!(text.matches("Connection refused").count(), 1, "{text}");
        assert_eq!(text.matches("Input/output error").count(), 1, "{text}");
    }

    #[test]
    fn debug_and_describe_show_no_password() {
        let store = MysqlStore::open(&StoreUrl::parse("mysql://u:hunter2@127.0.0.1:1/db").unwrap())
            .unwrap();
        let shown = format!("{store:?} {}", store.describe());
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("mysql://***@127.0.0.1:1/db"), "{shown}");
    }
}
