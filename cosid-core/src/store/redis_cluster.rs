//! `redis+cluster://` and `rediss+cluster://`: the Redis store on a Redis Cluster.
//!
//! Every key of a namespace carries the hash tag `{ns}`, so the namespace lives in one hash
//! slot, on one shard, and each primitive stays one Lua script on one node. This module finds
//! that node and follows the cluster's redirections itself (the redis crate's own cluster client
//! is not built in):
//!
//! - the first call for a hash slot goes to the seed nodes of the URL, in order, until one
//!   answers; a node that does not own the slot answers `MOVED SLOT HOST:PORT`;
//! - `MOVED`: the slot's owner is now that node (remembered for later calls), and the command is
//!   sent there;
//! - `ASK` (the slot is being migrated and the keys are already on the importing node): the
//!   command is sent to the named node once, right after `ASKING` in the same pipeline, and the
//!   owner is not changed (the next call asks the owner again, which redirects again until the
//!   migration ends with `MOVED`);
//! - `TRYAGAIN` (a migration has moved some keys of the script and not others): the command is
//!   sent again after a short pause, until half the operation timeout has passed (then an error
//!   that says so);
//! - `NOSCRIPT` (a node that has not seen the script, or restarted): the script is loaded on
//!   that node and the command sent again.
//!
//! At most [`MAX_REDIRECTIONS`] `MOVED`/`ASK` are followed per call; one more is an error
//! naming the chain. Every retry is inside the store's bound on one operation.
//!
//! **Why a retry after a redirection cannot apply a compare-and-set twice:** a node answers
//! `MOVED`, `ASK`, `TRYAGAIN` or `NOSCRIPT` instead of running the command: cluster routing
//! (which node serves a hash slot, whether every key of the command is there) and the script
//! lookup happen before the script starts, and the script is the whole compare-and-set. So a
//! redirected compare-and-set wrote nothing anywhere, and sending the same one to the named node
//! is its first and only execution. An answer that is lost (a timeout or a broken connection
//! after the command was sent) is not retried here: the caller gets a `Store` error and reads
//! the record again before its next attempt, as on a single server.
//!
//! With `?replicas=N`, `WAIT` goes in the same pipeline to the node that ran the script, the
//! primary of the namespace's shard (or, during a migration, the importing node that now holds
//! the keys), so it counts the replicas of that shard.

use super::{connect_error, master_url, scrub_kind, shown, tls_fix, Parts, OURS};
use crate::error::{Error, Result};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, IntoConnectionInfo, Script, ServerErrorKind, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most `MOVED`/`ASK` redirections one call follows. A slot in migration costs two (the
/// old owner's `ASK`, or its `MOVED` once the migration ended and the remembered owner is
/// stale); more than a handful means the cluster's nodes disagree about the slot.
pub(super) const MAX_REDIRECTIONS: usize = 5;

/// The default port of a cluster node.
const NODE_PORT: u16 = 6379;

/// The number of hash slots of a Redis Cluster.
const HASH_SLOTS: u16 = 16384;

/// The pause before sending a command again after `TRYAGAIN`.
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(20);

/// A Redis Cluster: the seed nodes of the URL, how to connect to any node, and what the calls
/// have learnt (the owner of each hash slot used, one connection per node).
pub(super) struct Cluster {
    /// `host:port` of the seed nodes, in the URL's order.
    seeds: Vec<String>,
    /// `redis` or `rediss`.
    scheme: &'static str,
    /// The URL's user information with its `@` (may hold the password), or "".
    userinfo: String,
    /// `?cacert=`: the CA that verifies every node (TLS).
    ca: Option<Arc<[u8]>>,
    routes: Mutex<Routes>,
    /// Held while connecting, so callers that arrive at once open one connection per node
    /// between them, not one each.
    connecting: tokio::sync::Mutex<()>,
    /// The bound on every reply of the cluster's connections.
    pub(super) replies: Arc<super::reply::ReplyLimit>,
}

#[derive(Default)]
struct Routes {
    /// Hash slot -> `host:port` of the node that last served it (after a `MOVED`, the node
    /// named).
    owners: HashMap<u16, String>,
    /// `host:port` -> the connection to that node.
    connections: HashMap<String, MultiplexedConnection>,
}

/// What one call sends: a script with its keys and arguments, and `WAIT` when `replicas > 0`.
pub(super) struct Request<'a> {
    pub(super) script: &'a Script,
    pub(super) keys: &'a [String],
    pub(super) args: &'a [String],
    pub(super) replicas: u32,
    pub(super) wait_timeout_ms: u64,
}

/// The seeds of a `redis+cluster://` URL, checked: the cluster's connection information on a
/// placeholder host checks the user information now and holds the password to scrub from
/// messages.
pub(super) fn cluster_target(
    parts: &Parts<'_>,
    name: &str,
    tls: bool,
    ca: Option<Arc<[u8]>>,
) -> Result<(Cluster, redis::ConnectionInfo)> {
    let bad = |why: String| {
        Error::config(format!(
            "store URL '{name}' {why}; use \
             redis+cluster://[user:password@]node1[:6379][,node2[:6379]…][/0][?replicas=N]"
        ))
    };
    if let Some((k, _)) = parts
        .query
        .iter()
        .find(|(k, _)| !OURS.contains(k) || k.starts_with("sentinel_"))
    {
        return Err(bad(format!(
            "has the parameter {} that a cluster URL does not take (it takes replicas, \
             wait_timeout_ms and, with rediss+cluster://, cacert)",
            shown(k, name)
        )));
    }
    if !parts.fragment.is_empty() {
        return Err(bad(
            "ends in a #fragment, which a cluster URL does not take".to_string(),
        ));
    }
    let mut seeds = Vec::new();
    for host in parts.hosts.split(',') {
        let (h, port) = match host.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') && !p.contains(']') => (
                h,
                p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    bad(format!("has the node port {}, not a port", shown(p, name)))
                })?,
            ),
            _ => (host, NODE_PORT),
        };
        if h.is_empty() {
            return Err(bad("has an empty node host".to_string()));
        }
        let h = h.trim_start_matches('[').trim_end_matches(']');
        format!("redis://{}", join_host_port(h, port))
            .into_connection_info()
            .map_err(|e| {
                bad(format!(
                    "has a node host that is not valid ({})",
                    scrub_kind(&e)
                ))
            })?;
        seeds.push(join_host_port(h, port));
    }
    match parts.path.trim_end_matches('/') {
        "" | "0" => {}
        db => {
            return Err(bad(format!(
                "has the database {}; a Redis Cluster has only database 0: write /0 or leave \
                 the database out",
                shown(db, name)
            )))
        }
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let info = master_url(scheme, parts.userinfo, "127.0.0.1", 1, 0)
        .into_connection_info()
        .map_err(|e| {
            bad(format!(
                "has user information that is not valid ({})",
                scrub_kind(&e)
            ))
        })?;
    let cluster = Cluster {
        seeds,
        scheme,
        userinfo: parts.userinfo.to_string(),
        ca,
        routes: Mutex::new(Routes::default()),
        connecting: tokio::sync::Mutex::new(()),
        replies: Arc::default(),
    };
    Ok((cluster, info))
}

/// `host:port`, with an IPv6 address in brackets.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The hash slot of `key` as Redis Cluster computes it: CRC16 (XMODEM) of the hash tag (the
/// text between the first `{` and the next `}`, when not empty) or of the whole key, modulo
/// 16384.
pub(super) fn hash_slot(key: &[u8]) -> u16 {
    let tag = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|b| *b == b'}')
            .filter(|len| *len > 0)
            .map(|len| &rest[..len])
    });
    crc16(tag.unwrap_or(key)) % HASH_SLOTS
}

/// CRC16-XMODEM (polynomial 0x1021, initial value 0), the checksum of Redis Cluster's key
/// hashing.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A redirection read from a `MOVED`/`ASK` reply's detail (`SLOT HOST:PORT`); an empty host
/// means the host of the node that answered (Redis writes `:PORT` when it knows no endpoint).
fn redirected_to(detail: &str, from: &str) -> Option<String> {
    let target = detail.split_ascii_whitespace().nth(1)?;
    let (host, port) = target.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let host = if host.is_empty() {
        from.rsplit_once(':')?.0
    } else {
        host
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some(join_host_port(host, port))
}

impl Cluster {
    /// `host:port` of the seed nodes.
    #[cfg(test)]
    pub(super) fn seeds(&self) -> &[String] {
        &self.seeds
    }

    /// Runs `request` on the node that owns the hash slot of its first key, following
    /// redirections (see the module documentation). Returns the script's reply and, with
    /// `WAIT`, the number of replicas that acknowledged.
    pub(super) async fn run(
        &self,
        request: Request<'_>,
        timeout: Duration,
    ) -> std::result::Result<(Value, Option<i64>), String> {
        let slot = hash_slot(request.keys.first().map_or(&b""[..], |k| k.as_bytes()));
        let mut node = self.lock().owners.get(&slot).cloned();
        let mut asking = false;
        let mut loaded_on: Option<String> = None;
        let mut chain: Vec<String> = Vec::new();
        let started = std::time::Instant::now();
        loop {
            let (addr, mut conn) = match &node {
                Some(addr) => match self.connection(addr, timeout).await {
                    Ok(conn) => (addr.clone(), conn),
                    Err(e) => {
                        // A node that cannot be reached (a crashed primary whose replica took
                        // over) is no owner to go back to: the next call asks the seeds.
                        self.forget(addr);
                        return Err(e);
                    }
                },
                None => self.any_seed(timeout).await?,
            };
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            if asking {
                pipe.cmd("ASKING").ignore();
            }
            pipe.cmd("EVALSHA")
                .arg(request.script.get_hash())
                .arg(request.keys.len())
                .arg(request.keys)
                .arg(request.args);
            if request.replicas > 0 {
                pipe.cmd("WAIT")
                    .arg(request.replicas)
                    .arg(request.wait_timeout_ms);
            }
            let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
                Ok(replies) => replies,
                Err(e) => {
                    self.forget(&addr);
                    return Err(format!("cluster node {addr}: {e}"));
                }
            };
            let mut replies = replies.into_iter();
            let value = replies.next().unwrap_or(Value::Nil);
            let Value::ServerError(err) = &value else {
                if !asking {
                    self.lock().owners.insert(slot, addr.clone());
                }
                let acked = match replies.next() {
                    None => None,
                    Some(Value::Int(n)) => Some(n),
                    Some(other) => {
                        return Err(format!(
                            "cluster node {addr}: WAIT answered {other:?}, not a number"
                        ))
                    }
                };
                return Ok((value, acked));
            };
            match err.kind() {
                Some(ServerErrorKind::NoScript) if loaded_on.as_deref() != Some(addr.as_str()) => {
                    request
                        .script
                        .prepare_invoke()
                        .load_async(&mut conn)
                        .await
                        .map_err(|e| format!("cluster node {addr}: loading a script: {e}"))?;
                    loaded_on = Some(addr);
                }
                Some(kind @ (ServerErrorKind::Moved | ServerErrorKind::Ask)) => {
                    let word = if kind == ServerErrorKind::Moved {
                        "MOVED"
                    } else {
                        "ASK"
                    };
                    let to = err
                        .details()
                        .and_then(|d| redirected_to(d, &addr))
                        .ok_or_else(|| {
                            format!("cluster node {addr}: a {word} reply without a node: {err}")
                        })?;
                    chain.push(format!("{addr} {word} {to}"));
                    if chain.len() > MAX_REDIRECTIONS {
                        return Err(format!(
                            "more than {MAX_REDIRECTIONS} redirections for hash slot {slot} \
                             ({}); the cluster's nodes disagree about who serves it (a \
                             migration or failover under way, or a node with a stale \
                             configuration): check CLUSTER SHARDS on each node",
                            chain.join(", ")
                        ));
                    }
                    asking = kind == ServerErrorKind::Ask;
                    if !asking {
                        self.lock().owners.insert(slot, to.clone());
                    }
                    node = Some(to);
                }
                Some(ServerErrorKind::TryAgain) => {
                    // Given up at half the operation timeout, so the error says why rather than
                    // "no answer".
                    if started.elapsed() + TRY_AGAIN_PAUSE >= timeout / 2 {
                        return Err(format!(
                            "cluster node {addr}: hash slot {slot} is being migrated and the \
                             call's keys are split between two nodes (TRYAGAIN for {} ms); \
                             the migration must move the rest of them (MIGRATE) before the call \
                             can run",
                            started.elapsed().as_millis()
                        ));
                    }
                    tokio::time::sleep(TRY_AGAIN_PAUSE).await;
                }
                _ => {
                    if matches!(
                        err.kind(),
                        Some(
                            ServerErrorKind::ClusterDown
                                | ServerErrorKind::MasterDown
                                | ServerErrorKind::ReadOnly
                        )
                    ) {
                        // The shard is failing over: ask the seeds again next time.
                        self.forget(&addr);
                    }
                    return Err(format!("cluster node {addr}: {err}"));
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets the connection to `addr` and every hash slot it was thought to own, so the next
    /// call starts from the seeds again.
    fn forget(&self, addr: &str) {
        let mut routes = self.lock();
        routes.connections.remove(addr);
        routes.owners.retain(|_, owner| owner != addr);
    }

    /// The first seed node that can be connected to, each given an equal share of 9/10 of
    /// `timeout` (so that when none answers, the error naming why each failed comes within the
    /// bound on the whole call, not the bare timeout of that bound).
    async fn any_seed(
        &self,
        timeout: Duration,
    ) -> std::result::Result<(String, MultiplexedConnection), String> {
        let share =
            timeout.mul_f64(0.9) / u32::try_from(self.seeds.len()).unwrap_or(u32::MAX).max(1);
        let mut why = Vec::new();
        for seed in &self.seeds {
            match tokio::time::timeout(share, self.connection(seed, share)).await {
                Ok(Ok(conn)) => return Ok((seed.clone(), conn)),
                Ok(Err(e)) => why.push(e),
                Err(_) => {
                    let late = format!("no connection within {} ms", share.as_millis());
                    let fix = tls_fix(&late, self.scheme == "rediss", "redis+cluster://");
                    why.push(format!("cluster node {seed}: {late}{fix}"));
                }
            }
        }
        Err(format!("no cluster node answers ({})", why.join("; ")))
    }

    /// The connection to the node at `addr`, opened within `timeout` if there is none.
    async fn connection(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> std::result::Result<MultiplexedConnection, String> {
        if let Some(conn) = self.lock().connections.get(addr) {
            return Ok(conn.clone());
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(conn) = self.lock().connections.get(addr) {
            return Ok(conn.clone());
        }
        let node = format!("cluster node {addr}");
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| {
                Some((
                    h.trim_start_matches('[').trim_end_matches(']'),
                    p.parse().ok()?,
                ))
            })
            .ok_or_else(|| format!("{node}: not a host:port"))?;
        let info = master_url(self.scheme, &self.userinfo, host, port, 0)
            .into_connection_info()
            .map_err(|e| format!("{node}: {}", scrub_kind(&e)))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let conn =
            super::reply::connect(&info, self.ca.as_deref(), &config, timeout, &self.replies)
                .await
                .map_err(|e| {
                    format!(
                        "{node}: {}",
                        connect_error(&e, self.scheme == "rediss", "redis+cluster://")
                    )
                })?;
        self.lock()
            .connections
            .insert(addr.to_string(), conn.clone());
        Ok(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_slots_are_those_of_redis_cluster() {
        // CRC16-XMODEM's check value, and slots Redis' documentation gives.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        // An empty tag hashes the whole key; only the first tag counts.
        assert_eq!(hash_slot(b"{}foo"), crc16(b"{}foo") % HASH_SLOTS);
        assert_eq!(hash_slot(b"a{b}{c}"), hash_slot(b"b"));
        // The keys of one namespace share a slot.
        assert_eq!(
            hash_slot(b"cosid:{orders}:ns"),
            hash_slot(b"cosid:{orders}:slots")
        );
    }

    #[test]
    fn redirections_name_a_node() {
        assert_eq!(
            redirected_to("3999 127.0.0.1:6381", "10.0.0.1:7000").as_deref(),
            Some("127.0.0.1:6381")
        );
        assert_eq!(
            redirected_to("3999 :6381", "10.0.0.1:7000").as_deref(),
            Some("10.0.0.1:6381")
        );
        assert_eq!(
            redirected_to("3999 ::1:6381", "h:1").as_deref(),
            Some("[::1]:6381")
        );
        assert_eq!(redirected_to("3999", "h:1"), None);
        assert_eq!(redirected_to("3999 h:0", "h:1"), None);
    }
}
