//! `redis://` and `rediss://` (TLS): the slot store in Redis (or Valkey); `redis+sentinel://`
//! and `rediss+sentinel://`: the same on the master that Redis Sentinel names;
//! `redis+cluster://` and `rediss+cluster://`: on a Redis Cluster, following its redirections
//! (`redis_cluster.rs`). With TLS, `?cacert=/path/ca.pem` names the CA that verifies the
//! servers (every sentinel and node too) in place of the system's roots.
//!
//! Each primitive is one Lua script, run atomically by the server in one round trip
//! (`EVALSHA`, falling back to `EVAL` once after a server restart emptied its script cache). The
//! store clock is `redis.call('TIME')`, read inside the same script.
//!
//! With `?replicas=N` (N > 0) each compare-and-set is sent together with `WAIT N timeout` in one
//! pipeline (still one round trip), and counts as done only when N replicas acknowledged it; a
//! write they did not acknowledge is a `Store` error, so its caller does not use it and reads
//! the record again before its next attempt (the write may be on the primary).
//!
//! With Sentinel, the master is asked of the sentinels in the URL's order
//! (`SENTINEL get-master-addr-by-name`), and the connection to it is used only after `ROLE`
//! on that very connection says `master` (a master just demoted still accepts connections). A
//! connection that fails, or a server that answers `READONLY`, is dropped, so the next call
//! asks the sentinels again and follows a failover.
//!
//! Keys of namespace `ns`, all with the hash tag `{ns}` so the namespace lives in one hash slot
//! (one shard of a Redis Cluster, where a script may only touch keys of one slot):
//!
//! | key                  | type   | holds                                                    |
//! |----------------------|--------|----------------------------------------------------------|
//! | `cosid:{ns}:ns`      | string | `VERSION|` and the namespace record's line               |
//! | `cosid:{ns}:slots`   | hash   | field = slot number, value `VERSION|` and the slot's line |
//! | `cosid:{ns}:version` | string | the namespace's version counter                          |
//! | `cosid:{ns}:held`    | zset   | member = slot of a record with an owner, score = its `expires_at` |
//! | `cosid:{ns}:unheld`  | zset   | member = slot of a record without an owner, score = the slot |
//! | `cosid:{ns}:keys`    | hash   | field = a percent-encoded key, value `,3,17,`: the slots whose records name it (owner or last owner) |
//!
//! Each of the last three also holds a placeholder member ` index` (see `INDEX`). They are an
//! index of `slots`, kept by the one script that writes a slot record, so
//! that a candidate view reads the live leases and the records it returns without reading every
//! record. The index decides nothing: the view's records are read from `slots`, and the client
//! checks each before a compare-and-set against its version. A namespace whose index does not
//! count the records of `slots` (one written before the index existed) is read by a scan, and
//! the next slot write rebuilds the index.
//!
//! Versions come from the counter: every write takes the counter plus one, or the server's
//! `TIME` in microseconds when that is higher. So a version never repeats while the data lives,
//! and after the server lost its data (restarted empty) or a failover lost the last writes, new
//! versions still lie above the lost ones unless the (new) server's clock is behind the time of
//! the lost write. The record lines are those of `store::codec`.
//!
//! What Redis must be set up to keep for uniqueness to hold is in `docs/stores.md`.

#[path = "redis_cluster.rs"]
mod cluster;
#[path = "redis_reply.rs"]
mod reply;

use super::blocking::{Failure, IoRuntime, SharedConnection, DEFAULT_TIMEOUT};
use super::{
    codec, CandidateAsk, CandidateView, Cas, NamespaceSnapshot, NamespaceWrite, SlotRead,
    SlotStore, SlotWrite, StoreUrl, Written,
};
use crate::error::{Error, Result};
use crate::lease::{NamespaceRecord, SlotRecord, Snapshot, Versioned};
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ConnectionInfo, IntoConnectionInfo, RedisError, Script,
    ServerErrorKind, Value,
};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Allocates the next version of the namespace (KEYS[n] is the counter): the counter plus one,
/// or the server time in microseconds when that is higher (so versions issued by writes a
/// failover lost are not issued again by the new master, whose clock has moved on).
const NEXT_VERSION: &str = r#"
local function next_version(counter)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local v = redis.call('INCR', counter)
  if v < now then
    redis.call('SET', counter, string.format('%d', now))
    return now
  end
  return v
end
local function version_of(cur, where)
  if not cur then return '' end
  local v = string.match(cur, '^(%d+)|')
  if not v then
    return redis.error_reply('cosid: ' .. where .. ' does not hold VERSION|RECORD')
  end
  return v
end
"#;

/// Keeps the index of the slot records (KEYS[3] held, KEYS[4] unheld, KEYS[5] keys; KEYS[1] is
/// the records' hash): `reindex` after one record changed from `old` (nil: none) to `new`;
/// `rebuild` from every record when the index does not count them (`indexed`). Each of the
/// three holds a member ` index` (outside every range the scripts read: held's score is -inf,
/// unheld's -1, and no percent-encoded key has a space), so that all three keys exist from the
/// first write on: while a Redis Cluster migrates the namespace's hash slot, a script naming a
/// key that does not exist is answered `TRYAGAIN` until the migration ends.
const INDEX: &str = r#"
local function named_keys(rec)
  local out = {}
  if not rec then return out end
  local o = string.match(rec, ' owner_key=(%S+)')
  if o then out[o] = true end
  local l = string.match(rec, ' last_owner_key=(%S+)')
  if l then out[l] = true end
  return out
end
local function reindex(slot, old, new)
  if string.find(new, ' owner_key=', 1, true) then
    -- A record without a readable expiry counts as held for ever (the scan and the client's
    -- decoder name it; the index only keeps it from being offered).
    redis.call('ZADD', KEYS[3], string.match(new, ' expires_at=(%-?%d+) ') or '+inf', slot)
    redis.call('ZREM', KEYS[4], slot)
  else
    redis.call('ZREM', KEYS[3], slot)
    redis.call('ZADD', KEYS[4], slot, slot)
  end
  local before, after = named_keys(old), named_keys(new)
  local entry = ',' .. slot .. ','
  for k in pairs(before) do
    if not after[k] then
      local list = redis.call('HGET', KEYS[5], k)
      if list then
        local at = string.find(list, entry, 1, true)
        if at then list = string.sub(list, 1, at) .. string.sub(list, at + #entry) end
        if list == ',' then redis.call('HDEL', KEYS[5], k) else redis.call('HSET', KEYS[5], k, list) end
      end
    end
  end
  for k in pairs(after) do
    if not before[k] then
      local list = redis.call('HGET', KEYS[5], k) or ','
      if not string.find(list, entry, 1, true) then redis.call('HSET', KEYS[5], k, list .. slot .. ',') end
    end
  end
end
local function indexed()
  return redis.call('HEXISTS', KEYS[5], ' index') == 1 and
    redis.call('HLEN', KEYS[1]) == redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4]) - 2
end
local function rebuild()
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
  redis.call('ZADD', KEYS[3], '-inf', ' index')
  redis.call('ZADD', KEYS[4], -1, ' index')
  redis.call('HSET', KEYS[5], ' index', ',')
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do reindex(all[i], nil, all[i + 1]) end
end
"#;

/// KEYS: ns, slots. Returns {sec, usec, ns value or nil, every slot value joined by '\n'}
/// (one string rather than 2^bits of them: the client parses one reply item, not thousands).
/// The server's clock and uptime (whole seconds), read on the node that holds the namespace's
/// keys (the keys route it in a cluster).
const STARTED_AT: &str = r#"
local t = redis.call('TIME')
local info = redis.call('INFO', 'server')
return {t[1], t[2], string.match(info, 'uptime_in_seconds:(%d+)') or ''}
"#;

const SNAPSHOT: &str = r#"
local t = redis.call('TIME')
local slots = table.concat(redis.call('HVALS', KEYS[2]), '\n')
return {t[1], t[2], redis.call('GET', KEYS[1]), slots}
"#;

/// The candidate view (`CandidateView`), filtered here so that neither its reply nor its work
/// grows with the live leases beyond their slot numbers: those come from the `held` index (score
/// above now), whole records only for the asker's key (the `keys` index), the preferred slot and
/// the free slots below the covered bound (the `unheld` index, and `held` at or below now).
/// Without an index that counts every record, a scan does the same: each record is read by its
/// fixed head (the codec writes `slot`, `fence`, `expires_at` first) and two plain searches, and
/// one the head does not match comes back whole, for the client's decoder to name. KEYS: slots,
/// ns, held, unheld, keys. ARGV: '1' when asked by key ('' otherwise), the percent-encoded
/// key, the preferred slot (''), free_min, free_per_live. Returns {sec, usec, ns value or nil,
/// live slots joined by ',', covered bound, whole records joined by newlines}.
const CANDIDATES: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ns = redis.call('GET', KEYS[2])
local limit = 0
if ns then limit = tonumber(string.match(ns, ' limit=(%d+)')) or 0 end
local pref = tonumber(ARGV[3])
local function covered_by(live)
  local wanted = tonumber(ARGV[4]) + tonumber(ARGV[5]) * live
  if wanted > 0 then return math.min(limit, wanted + live) end
  return 0
end
local function reply(live, covered, whole)
  return {t[1], t[2], ns, table.concat(live, ','), string.format('%d', covered), table.concat(whole, '\n')}
end
if not indexed() then
  local own, last
  if ARGV[1] == '1' then
    own = ' owner_key=' .. ARGV[2] .. ' '
    last = ' last_owner_key=' .. ARGV[2]
  end
  local live, whole, free = {}, {}, {}
  for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
    local slot, exp = string.match(v, '^%d+|cosid%-slot/1 slot=(%d+) fence=%d+ expires_at=(%-?%d+) ')
    slot = tonumber(slot)
    if not slot then
      whole[#whole + 1] = v
    else
      local held = string.find(v, ' owner_key=', 1, true) ~= nil and tonumber(exp) > now
      if held then live[#live + 1] = slot end
      if slot == pref or (own and (string.find(v, own, 1, true) or string.sub(v, -#last) == last)) then
        whole[#whole + 1] = v
      elseif not held then
        free[#free + 1] = {slot, v}
      end
    end
  end
  local covered = covered_by(#live)
  for _, f in ipairs(free) do
    if f[1] < covered then whole[#whole + 1] = f[2] end
  end
  return reply(live, covered, whole)
end
local live = redis.call('ZRANGEBYSCORE', KEYS[3], string.format('(%d', now), '+inf')
local covered = covered_by(#live)
local picked, fields = {}, {}
local function pick(slot)
  if slot and not picked[slot] then
    picked[slot] = true
    fields[#fields + 1] = slot
  end
end
if ARGV[1] == '1' then
  local list = redis.call('HGET', KEYS[5], ARGV[2])
  if list then
    for slot in string.gmatch(list, '%d+') do pick(slot) end
  end
end
if pref then pick(string.format('%d', pref)) end
if covered > 0 then
  for _, slot in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], 0, covered - 1)) do pick(slot) end
  for _, slot in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', string.format('%d', now))) do
    local n = tonumber(slot)
    if n and n < covered then pick(slot) end
  end
end
local whole = {}
-- In batches: Lua's unpack refuses a few thousand values at once.
for first = 1, #fields, 1000 do
  local last = math.min(#fields, first + 999)
  for _, v in ipairs(redis.call('HMGET', KEYS[1], unpack(fields, first, last))) do
    if v then whole[#whole + 1] = v end
  end
end
return reply(live, covered, whole)
"#;

/// KEYS: slots. ARGV: slot. Returns {sec, usec, slot value or nil}.
const READ_SLOT: &str = r#"
local t = redis.call('TIME')
return {t[1], t[2], redis.call('HGET', KEYS[1], ARGV[1])}
"#;

/// KEYS: ns, counter. ARGV: expected version ('' for none), record. Returns the new version or
/// nil.
const CAS_NAMESPACE: &str = r#"
local cur = version_of(redis.call('GET', KEYS[1]), KEYS[1])
if type(cur) == 'table' then return cur end
if cur ~= ARGV[1] then return false end
local v = next_version(KEYS[2])
redis.call('SET', KEYS[1], string.format('%d', v) .. '|' .. ARGV[2])
return v
"#;

/// KEYS: slots, counter, held, unheld, keys. ARGV: one or more writes, each three items: slot,
/// expected version ('' for none), record. Writes the first whose slot still has its expected
/// version (`SlotStore::cas_first_slot`; one write is `cas_slot`) and returns {its new version
/// or nil, sec, usec, its 1-based place among the writes or 0}: the store clock comes with the
/// answer, so a renewal needs no read first to see it. Keeps the index (`INDEX`) of what it
/// writes, and rebuilds it first when it does not count every record.
const CAS_SLOT: &str = r#"
local t = redis.call('TIME')
for i = 1, #ARGV, 3 do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  local cur = version_of(old, KEYS[1] .. '[' .. ARGV[i] .. ']')
  if type(cur) == 'table' then return cur end
  if cur == ARGV[i + 1] then
    local v = next_version(KEYS[2])
    if not indexed() then rebuild() end
    redis.call('HSET', KEYS[1], ARGV[i], string.format('%d', v) .. '|' .. ARGV[i + 2])
    reindex(ARGV[i], old, ARGV[i + 2])
    return {v, t[1], t[2], (i + 2) / 3}
  end
end
return {false, t[1], t[2], 0}
"#;

/// KEYS: slots, counter, held, unheld, keys. ARGV: slot, expected version. Deletes the slot's
/// record if its version is still the expected one and returns 1, else nil (`cosid namespace
/// delete`); the index is rebuilt from the records left.
const DELETE_SLOT: &str = r#"
local old = redis.call('HGET', KEYS[1], ARGV[1])
local cur = version_of(old, KEYS[1] .. '[' .. ARGV[1] .. ']')
if type(cur) == 'table' then return cur end
if cur == '' or cur ~= ARGV[2] then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
rebuild()
return 1
"#;

struct Scripts {
    snapshot: Script,
    candidates: Script,
    read_slot: Script,
    cas_namespace: Script,
    cas_slot: Script,
    started_at: Script,
    delete_slot: Script,
}

/// The most replicas `?replicas=` may ask for.
const MAX_REPLICAS: u32 = 64;

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// The Redis store. Thread-safe; one multiplexed connection shared by all callers, re-opened
/// after a failure (a restarted server, or with Sentinel a new master, is picked up by the next
/// call).
pub struct RedisStore {
    io: IoRuntime,
    shared: Arc<Shared>,
    conn: SharedConnection<MultiplexedConnection>,
}

/// What the IO thread's futures need.
struct Shared {
    target: Target,
    scripts: Scripts,
    /// `?replicas=`: how many replicas must acknowledge a compare-and-set (0: no `WAIT`).
    replicas: u32,
    /// `?wait_timeout_ms=`: how long `WAIT` waits for them.
    wait_timeout_ms: u64,
    /// `?restart-guard=` (on by default): report when the server started.
    restart_guard: bool,
    /// `?cacert=`: the CA that verifies the server (TLS).
    ca: Option<Arc<[u8]>>,
    /// The bound on every reply of this store's connections.
    replies: Arc<reply::ReplyLimit>,
}

/// Where the store connects.
enum Target {
    /// `redis://` or `rediss://`: one server.
    Direct(Client),
    /// `redis+sentinel://`: the master the sentinels name.
    Sentinel {
        /// The sentinels, in the URL's order.
        sentinels: Vec<ConnectionInfo>,
        /// The master's name in the sentinels' configuration.
        master: String,
        /// `redis` or `rediss`, for the master.
        scheme: &'static str,
        /// The URL's user information with its `@` (may hold the password), or "".
        userinfo: String,
        /// The database number.
        db: i64,
        /// `?cacert=`: the CA that verifies the sentinels and the master (TLS).
        ca: Option<Arc<[u8]>>,
    },
    /// `redis+cluster://`: the node that owns the namespace's hash slot, per call.
    Cluster(Arc<cluster::Cluster>),
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.io
            .debug_store(f, "RedisStore", ("replicas", &self.shared.replicas))
    }
}

struct Keys {
    ns: String,
    slots: String,
    counter: String,
    /// The index of `slots` (`INDEX`): held, unheld, keys.
    index: [String; 3],
}

fn keys(namespace: &str) -> Keys {
    Keys {
        ns: format!("cosid:{{{namespace}}}:ns"),
        slots: format!("cosid:{{{namespace}}}:slots"),
        counter: format!("cosid:{{{namespace}}}:version"),
        index: [
            format!("cosid:{{{namespace}}}:held"),
            format!("cosid:{{{namespace}}}:unheld"),
            format!("cosid:{{{namespace}}}:keys"),
        ],
    }
}

/// The forms a Redis store URL may take, for error messages.
const FORMS: &str = "use redis://[user:password@]host[:port][/db], rediss://… for TLS, \
     redis+sentinel://[user:password@]sentinel1[:26379][,sentinel2…]/MASTERNAME[/db] \
     (rediss+sentinel://… for TLS), or redis+cluster://[user:password@]node1[:6379][,node2…][/0] \
     (rediss+cluster://… for TLS), each with ?replicas=N[&wait_timeout_ms=M]";

/// The parts of a Redis store URL: everything after the last `@` is split into hosts, path and
/// query (a password may hold `/`, `?` or `@`, the host part cannot).
struct Parts<'a> {
    /// `redis`, `rediss`, `redis+sentinel`, `rediss+sentinel`, `redis+cluster` or
    /// `rediss+cluster`, lower case.
    scheme: String,
    /// The user information with its `@`, or "".
    userinfo: &'a str,
    hosts: &'a str,
    /// The path without its leading `/`.
    path: &'a str,
    query: Vec<(&'a str, &'a str)>,
    /// `#…` (`#insecure` for TLS without checking the certificate), or "".
    fragment: &'a str,
}

impl<'a> Parts<'a> {
    fn of(raw: &'a str) -> Option<Parts<'a>> {
        let (scheme, rest) = raw.split_once("://")?;
        let (userinfo, after) = match rest.rfind('@') {
            Some(i) => (&rest[..=i], &rest[i + 1..]),
            None => ("", rest),
        };
        let (after, fragment) = match after.find('#') {
            Some(i) => after.split_at(i),
            None => (after, ""),
        };
        let (before_query, query) = after.split_once('?').unwrap_or((after, ""));
        let (hosts, path) = before_query.split_once('/').unwrap_or((before_query, ""));
        let query = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        Some(Parts {
            scheme: scheme.to_ascii_lowercase(),
            userinfo,
            hosts,
            path,
            query,
            fragment,
        })
    }

    /// The URL without the query parameters this store reads (for the Redis client).
    fn client_url(&self) -> String {
        let others: Vec<String> = self
            .query
            .iter()
            .filter(|(k, _)| !OURS.contains(k))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut url = format!("{}://{}{}", self.scheme, self.userinfo, self.hosts);
        if !self.path.is_empty() {
            url.push('/');
            url.push_str(self.path);
        }
        if !others.is_empty() {
            url.push('?');
            url.push_str(&others.join("&"));
        }
        url.push_str(self.fragment);
        url
    }

    fn param(&self, key: &str) -> Option<&'a str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }
}

/// The query parameters this store reads itself.
const OURS: [&str; 5] = [
    "replicas",
    "wait_timeout_ms",
    "sentinel_user",
    "sentinel_password",
    "cacert",
];

/// `?cacert=` of a TLS URL: the PEM file of the CA(s) that verify the servers in place of the
/// system's roots, read and checked now (a Config error names a file that cannot be read or
/// holds no certificate).
fn ca_roots(parts: &Parts<'_>, name: &str, tls: bool) -> Result<Option<Arc<[u8]>>> {
    let Some(value) = parts.param("cacert") else {
        return Ok(None);
    };
    if !tls {
        return Err(Error::config(format!(
            "store URL '{name}' has cacert=, which only a TLS URL takes; use rediss://, \
             rediss+sentinel:// or rediss+cluster:// for TLS, or remove cacert"
        )));
    }
    let path = crate::percent::decode(value).ok_or_else(|| {
        Error::config(format!(
            "store URL '{name}' has a cacert= that is not percent-encoded UTF-8 (write a byte \
             as %XX)"
        ))
    })?;
    Ok(Some(super::ca_file::read(&path, "cacert", name)?.0.into()))
}

/// A client for `info`; a TLS one checks the server against `ca` when given, else against the
/// system's roots.
fn client_for(info: ConnectionInfo, ca: Option<&[u8]>) -> redis::RedisResult<Client> {
    match ca {
        Some(pem) => Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        ),
        None => Client::open(info),
    }
}

/// `e`, a failure to connect to or talk with a server of a URL of the form `form`
/// (`redis+cluster://` and the like, without TLS's `s`), with what to change in the URL when it
/// looks like TLS on one side only or a certificate the store does not trust.
fn connect_error(e: &RedisError, tls: bool, form: &str) -> String {
    let text = e.to_string();
    let mut fix = tls_fix(&text, tls, form);
    if super::blocking::incurable(&text) == Some(super::blocking::Incurable::UnknownHost) {
        fix = format!("; {}", super::blocking::UNKNOWN_HOST_FIX);
    }
    // The server's words cut, so that the advice after them stays in the message.
    format!("{}{fix}", crate::bounds::quote(&text))
}

/// What a TLS connect to a port that answers Redis without TLS says.
const PLAIN_PORT: &str = "the server speaks Redis without TLS on that port (it answered a plain \
                          PING): use redis:// for a server without TLS, or its TLS port";

/// Whether `host:port` answers a plain-text `PING` as Redis does (`+PONG`, or an error such as
/// `-NOAUTH`): a port without TLS, which a TLS handshake waits on forever. Bounded by half a
/// second; anything else (no connection, no answer, other bytes) is `false`.
async fn speaks_plain_redis(host: &str, port: u16) -> bool {
    let probe = async {
        let tcp = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        tcp.writable().await.ok()?;
        // Six bytes fit any socket buffer: one write sends them.
        (tcp.try_write(b"PING\r\n").ok()? == 6).then_some(())?;
        let mut first = [0u8; 1];
        loop {
            tcp.readable().await.ok()?;
            match tcp.try_read(&mut first) {
                Ok(1) => return Some(matches!(first[0], b'+' | b'-')),
                Ok(_) => return None,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return None,
            }
        }
    };
    tokio::time::timeout(Duration::from_millis(500), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Whether a connect that failed with `text` ([`connect_error`]'s) cannot succeed by trying
/// again: the server refused the credentials or the database number, the host name does not
/// exist, or TLS is on one side only or its certificate is not trusted.
fn refused_for_good(text: &str) -> bool {
    let said = text.to_ascii_lowercase();
    [
        "authentication failed",
        "wrongpass",
        "noauth",
        "invalid password",
        "invalid username-password",
        "db index is out of range",
        "speaks redis without tls",
    ]
    .iter()
    .any(|w| said.contains(w))
        || super::blocking::incurable(text).is_some()
}

/// What to change in a URL of the form `form` (with TLS: `tls`) whose connection failed with
/// `text`, as "; …", or "" when `text` does not point at TLS.
fn tls_fix(text: &str, tls: bool, form: &str) -> String {
    let said = text.to_ascii_lowercase();
    let with_s = form.replacen("redis", "rediss", 1);
    if tls && said.contains("certificate") {
        format!(
            "; the server's certificate is not one the store trusts: give the PEM file of the \
             CA that signed it with {with_s}…?cacert=/path/ca.pem (percent-encoded), or add that \
             CA to the system's roots, and check that the certificate names the host the URL \
             (or the cluster's redirection) gives"
        )
    } else if tls && (said.contains("corrupt message") || said.contains("invalidcontenttype")) {
        format!("; the server does not speak TLS on that port: use {form} for a server without TLS")
    } else if tls
        && ["timed out", "no connection within", "no master within"]
            .iter()
            .any(|w| said.contains(w))
    {
        format!(
            "; a server that does not speak TLS on that port never answers the TLS handshake: \
             use {form} for a server without TLS"
        )
    } else if !tls
        && (said.contains("reset by peer")
            || said.contains("broken pipe")
            || said.contains("unexpected end of file")
            || said.contains("terminated"))
    {
        format!("; if the server serves TLS only (tls-port, port 0), use {with_s} for TLS")
    } else {
        String::new()
    }
}

/// A value from the URL as an error shows it: short, digits and letters, and only when the
/// redacted URL shows it too (so it cannot be a piece of a credential).
fn shown(value: &str, redacted_url: &str) -> String {
    // Only what the redacted URL shows anyway: a value its redaction hides (text after an
    // '@' inside a password is read as the host part) may be a piece of a credential.
    if value.len() <= 24
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && redacted_url.contains(value)
    {
        format!("'{value}'")
    } else {
        "(not shown)".to_string()
    }
}

/// `replicas` and `wait_timeout_ms` of the URL, checked.
fn wait_options(parts: &Parts<'_>, name: &str, timeout: Duration) -> Result<(u32, u64)> {
    let replicas = match parts.param("replicas") {
        None => 0,
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n <= MAX_REPLICAS => n,
            _ => {
                return Err(Error::config(format!(
                    "store URL '{name}': replicas={} is not a number of replicas; use \
                     replicas=N with N from 0 (do not wait for replicas) to {MAX_REPLICAS}",
                    shown(v, name)
                )))
            }
        },
    };
    let op_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let wait_timeout_ms = match parts.param("wait_timeout_ms") {
        None => (op_ms / 2).max(1),
        Some(v) => match v.parse::<u64>() {
            Ok(ms) if ms > 0 && ms < op_ms => ms,
            _ => {
                return Err(Error::config(format!(
                    "store URL '{name}': wait_timeout_ms={} is not a wait in milliseconds \
                     between 1 and {} (below the store's {op_ms} ms bound on an operation, so \
                     the answer of WAIT arrives within it); use wait_timeout_ms=M with M in \
                     that range, or leave it out for {} ms",
                    shown(v, name),
                    op_ms.saturating_sub(1),
                    (op_ms / 2).max(1)
                )))
            }
        },
    };
    if parts.param("wait_timeout_ms").is_some() && replicas == 0 {
        return Err(Error::config(format!(
            "store URL '{name}': wait_timeout_ms is given without replicas=N (N > 0), so \
             nothing would wait; add replicas=N or remove wait_timeout_ms"
        )));
    }
    Ok((replicas, wait_timeout_ms))
}

/// The sentinels and the master of a `redis+sentinel://` URL, and the master's connection
/// information on a placeholder host (it checks the user information and the database now, and
/// holds the password to scrub from messages).
fn sentinel_target(
    parts: &Parts<'_>,
    name: &str,
    tls: bool,
    ca: Option<Arc<[u8]>>,
) -> Result<(Target, ConnectionInfo)> {
    let bad = |why: String| {
        Error::config(format!(
            "store URL '{name}' {why}; use redis+sentinel://[user:password@]sentinel1[:26379][,sentinel2…]/MASTERNAME[/db][?replicas=N]"
        ))
    };
    if let Some((k, _)) = parts.query.iter().find(|(k, _)| !OURS.contains(k)) {
        return Err(bad(format!(
            "has the parameter {} that a Sentinel URL does not take (it takes replicas, \
             wait_timeout_ms, sentinel_user, sentinel_password and, with rediss+sentinel://, \
             cacert)",
            shown(k, name)
        )));
    }
    if !parts.fragment.is_empty() {
        return Err(bad(
            "ends in a #fragment, which a Sentinel URL does not take".to_string(),
        ));
    }
    // The sentinels' own credentials (`requirepass` or an ACL user on the sentinels), if any.
    let credential = |key: &str| {
        parts
            .param(key)
            .map(|v| {
                crate::percent::decode(v).ok_or_else(|| {
                    bad(format!(
                        "has a {key} that is not valid percent-encoding (write a byte as %XX)"
                    ))
                })
            })
            .transpose()
    };
    let (sentinel_user, sentinel_password) = (
        credential("sentinel_user")?,
        credential("sentinel_password")?,
    );
    let mut sentinels = Vec::new();
    for host in parts.hosts.split(',') {
        let (h, port) = match host.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') && !p.contains(']') => (
                h,
                p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    bad(format!(
                        "has the sentinel port {}, not a port",
                        shown(p, name)
                    ))
                })?,
            ),
            _ => (host, SENTINEL_PORT),
        };
        if h.is_empty() {
            return Err(bad("has an empty sentinel host".to_string()));
        }
        let scheme = if tls { "rediss" } else { "redis" };
        let info = format!("{scheme}://{h}:{port}")
            .into_connection_info()
            .map_err(|e| {
                bad(format!(
                    "has a sentinel host that is not valid ({})",
                    scrub_kind(&e)
                ))
            })?;
        let mut settings = info.redis_settings().clone();
        if let Some(user) = &sentinel_user {
            settings = settings.set_username(user);
        }
        if let Some(password) = &sentinel_password {
            settings = settings.set_password(password);
        }
        sentinels.push(info.set_redis_settings(settings));
    }
    let mut path = parts.path.splitn(2, '/');
    let master = path.next().unwrap_or("");
    if master.is_empty()
        || !master
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(bad(format!(
            "has the master name {}; give the name the sentinels know it by \
             (sentinel monitor NAME …), of [A-Za-z0-9-_.]",
            if master.is_empty() {
                "''".to_string()
            } else {
                shown(master, name)
            }
        )));
    }
    let db = match path.next().map(|d| d.trim_end_matches('/')) {
        None | Some("") => 0,
        Some(d) => d
            .parse::<i64>()
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| bad(format!("has the database {}, not a number", shown(d, name))))?,
    };
    let scheme = if tls { "rediss" } else { "redis" };
    let info = master_url(scheme, parts.userinfo, "127.0.0.1", 1, db)
        .into_connection_info()
        .map_err(|e| {
            bad(format!(
                "has user information or a database that is not valid ({})",
                scrub_kind(&e)
            ))
        })?;
    let target = Target::Sentinel {
        sentinels,
        master: master.to_string(),
        scheme,
        userinfo: parts.userinfo.to_string(),
        db,
        ca,
    };
    Ok((target, info))
}

impl RedisStore {
    /// Opens the store `url` (`redis://[user:password@]host[:port][/db]`, `rediss://…`, or
    /// `redis+sentinel://[user:password@]sentinel[:port][,…]/MASTERNAME[/db]`, or
    /// `redis+cluster://[user:password@]node[:port][,…][/0]`, each with
    /// `?replicas=N[&wait_timeout_ms=M]`, and with TLS `&cacert=/path/ca.pem`) with the default
    /// 2 s bound on connecting and on every operation. Connects lazily: a server that is down
    /// now gives `Store` errors from the operations, not from here.
    pub fn open(url: &StoreUrl) -> Result<Arc<RedisStore>> {
        Self::open_with_timeout(url, DEFAULT_TIMEOUT)
    }

    /// Like [`RedisStore::open`], with `timeout` bounding connecting and every operation.
    pub fn open_with_timeout(url: &StoreUrl, timeout: Duration) -> Result<Arc<RedisStore>> {
        let StoreUrl::Redis { url: raw } = url else {
            return Err(
                url.not_a("a redis://, rediss://, redis+sentinel:// or redis+cluster:// URL")
            );
        };
        url.check_params()?;
        let name = url.redacted();
        let (raw, restart_guard) = super::url::take_restart_guard(raw, &name)?;
        let parts = Parts::of(raw.trim()).ok_or_else(|| {
            Error::config(format!("store URL '{name}' is not a Redis URL; {FORMS}"))
        })?;
        let (replicas, wait_timeout_ms) = wait_options(&parts, &name, timeout)?;
        let tls = parts.scheme.starts_with("rediss");
        let ca = ca_roots(&parts, &name, tls)?;
        let (target, info) = match parts.scheme.as_str() {
            "redis" | "rediss" => {
                if parts.param("sentinel_user").is_some()
                    || parts.param("sentinel_password").is_some()
                {
                    return Err(Error::config(format!(
                        "store URL '{name}' has sentinel_user or sentinel_password, which only a \
                         redis+sentinel:// URL takes; remove them, or name the sentinels in a \
                         redis+sentinel:// URL"
                    )));
                }
                let info = parts.client_url().into_connection_info().map_err(|e| {
                    Error::config(format!(
                        "store URL '{name}' is not a valid Redis URL ({}); {FORMS}",
                        scrub_kind(&e)
                    ))
                })?;
                (None, info)
            }
            "redis+sentinel" | "rediss+sentinel" => {
                let (target, info) = sentinel_target(&parts, &name, tls, ca.clone())?;
                (Some(target), info)
            }
            "redis+cluster" | "rediss+cluster" => {
                let (cluster, info) = cluster::cluster_target(&parts, &name, tls, ca.clone())?;
                (Some(Target::Cluster(Arc::new(cluster))), info)
            }
            _ => {
                return Err(Error::config(format!(
                    "store URL '{name}' is not a Redis URL; {FORMS}"
                )))
            }
        };
        let mut secrets: Vec<String> = info
            .redis_settings()
            .password()
            .map(String::from)
            .into_iter()
            .collect();
        if let Some(Target::Sentinel { sentinels, .. }) = &target {
            secrets.extend(
                sentinels
                    .first()
                    .and_then(|s| s.redis_settings().password())
                    .map(String::from),
            );
        }
        if tls {
            // Only the ring provider is built in; make it the process default if none is set
            // (rustls refuses to pick one when several are compiled in).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let io = IoRuntime::new(name.clone(), secrets, timeout)?;
        let target = match target {
            Some(t) => t,
            None => Target::Direct(
                client_for(info, ca.as_deref()).map_err(|e| io.error("cannot use the URL", &e))?,
            ),
        };
        Ok(Arc::new(RedisStore {
            io,
            shared: Arc::new(Shared {
                scripts: Scripts {
                    snapshot: Script::new(SNAPSHOT),
                    candidates: Script::new(&format!("{INDEX}{CANDIDATES}")),
                    read_slot: Script::new(READ_SLOT),
                    cas_namespace: Script::new(&format!("{NEXT_VERSION}{CAS_NAMESPACE}")),
                    cas_slot: Script::new(&format!("{NEXT_VERSION}{INDEX}{CAS_SLOT}")),
                    started_at: Script::new(STARTED_AT),
                    delete_slot: Script::new(&format!("{NEXT_VERSION}{INDEX}{DELETE_SLOT}")),
                },
                replicas,
                wait_timeout_ms,
                restart_guard,
                replies: match &target {
                    Target::Cluster(cluster) => cluster.replies.clone(),
                    _ => Arc::default(),
                },
                target,
                ca,
            }),
            conn: SharedConnection::new(),
        }))
    }

    /// The shared connection and its number, connecting first if there is none.
    fn connection(&self, what: &str) -> Result<(u64, MultiplexedConnection)> {
        self.conn.get(
            |_| true,
            || {
                let timeout = self.io.timeout();
                let shared = self.shared.clone();
                self.io
                    .run(async move { shared.connect(timeout).await })
                    .map_err(|f| {
                        // Through Sentinel the text is the reasons of several servers: one
                        // that cannot be cured does not make the others so.
                        let permanent = matches!(&f, Failure::Failed(text)
                            if matches!(self.shared.target, Target::Direct(_))
                                && refused_for_good(text));
                        self.io.failure(what, f).permanent_if(permanent)
                    })
            },
        )
    }

    /// Runs one script with `keys` and `args` (one round trip); a compare-and-set (`write`)
    /// with `?replicas=N` is pipelined with `WAIT` and fails unless N replicas acknowledged it.
    /// On a connection failure, a timeout or a server that is no longer the master the
    /// connection is dropped, so the next call connects afresh (with Sentinel: to the master
    /// the sentinels name then).
    fn call(
        &self,
        what: &str,
        script: fn(&Scripts) -> &Script,
        write: bool,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Value> {
        let replicas = if write { self.shared.replicas } else { 0 };
        let (value, acked) = if let Target::Cluster(cluster) = &self.shared.target {
            let (cluster, shared) = (cluster.clone(), self.shared.clone());
            let timeout = self.io.timeout();
            self.io
                .run(async move {
                    let request = cluster::Request {
                        script: script(&shared.scripts),
                        keys: &keys,
                        args: &args,
                        replicas,
                        wait_timeout_ms: shared.wait_timeout_ms,
                    };
                    cluster.run(request, timeout).await
                })
                .map_err(|f| {
                    // The credentials and TLS are the whole cluster's, so a node that refuses
                    // them speaks for all; a node's name that does not resolve does not.
                    let permanent = matches!(&f, Failure::Failed(text)
                        if refused_for_good(text)
                            && super::blocking::incurable(text)
                                != Some(super::blocking::Incurable::UnknownHost));
                    self.io.failure(what, f).permanent_if(permanent)
                })?
        } else {
            self.call_one_server(what, script, replicas, keys, args)?
        };
        self.counted(what, value, acked)
    }

    /// [`RedisStore::call`] on the one server (or Sentinel's master) of the shared connection.
    fn call_one_server(
        &self,
        what: &str,
        script: fn(&Scripts) -> &Script,
        replicas: u32,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<(Value, Option<i64>)> {
        let (number, mut conn) = self.connection(what)?;
        let shared = self.shared.clone();
        let outcome = self.io.run(async move {
            let script = script(&shared.scripts);
            let mut invocation = script.prepare_invoke();
            for k in &keys {
                invocation.key(k);
            }
            for a in &args {
                invocation.arg(a);
            }
            if replicas == 0 {
                return invocation
                    .invoke_async::<Value>(&mut conn)
                    .await
                    .map(|v| (v, None));
            }
            let mut pipe = redis::pipe();
            pipe.cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(keys.len())
                .arg(&keys)
                .arg(&args)
                .cmd("WAIT")
                .arg(replicas)
                .arg(shared.wait_timeout_ms);
            let sent = pipe.query_async::<(Value, i64)>(&mut conn).await;
            let (value, acked) = match sent {
                Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
                    script.prepare_invoke().load_async(&mut conn).await?;
                    pipe.query_async::<(Value, i64)>(&mut conn).await?
                }
                other => other?,
            };
            Ok((value, Some(acked)))
        });
        let (value, acked) = outcome.map_err(|f| {
            let keep = matches!(&f, Failure::Failed(e) if !e.is_io_error()
                && !e.is_connection_dropped() && !e.is_connection_refusal() && !e.is_timeout()
                && e.kind() != redis::ErrorKind::Server(ServerErrorKind::ReadOnly));
            if !keep {
                self.conn.drop_if_current(number);
            }
            self.io.failure(what, f)
        })?;
        let acked_short = acked.is_some_and(|a| a < i64::from(self.shared.replicas));
        if acked_short && matches!(self.shared.target, Target::Sentinel { .. }) && wrote(&value) {
            // This master may be cut off from the others: ask the sentinels again.
            self.conn.drop_if_current(number);
        }
        Ok((value, acked))
    }

    /// `value` if the write it answers counts as done: with `WAIT`, one that wrote counts
    /// only once the replicas the URL asks for have acknowledged it.
    fn counted(&self, what: &str, value: Value, acked: Option<i64>) -> Result<Value> {
        match acked {
            // A compare-and-set that wrote (a version) counts only once N replicas have it; one
            // that wrote nothing needs no acknowledgement.
            Some(acked) if wrote(&value) && acked < i64::from(self.shared.replicas) => {
                Err(self.io.error(
                    what,
                    &format!(
                        "the write reached {acked} of the {} replicas the URL asks for \
                         (replicas={}) within {} ms (wait_timeout_ms), so it is not counted as \
                         done (it may be on the primary: the next attempt reads the record \
                         again); check that the replicas run and follow the primary (INFO \
                         replication), or lower replicas",
                        self.shared.replicas, self.shared.replicas, self.shared.wait_timeout_ms
                    ),
                ))
            }
            _ => Ok(value),
        }
    }

    /// Runs `CAS_SLOT` over `writes` (each an expected version and a record): the index and new
    /// version of the one it wrote, if any, and the store's clock.
    fn write_first(
        &self,
        namespace: &str,
        writes: &[SlotWrite<'_>],
    ) -> Result<(Option<(usize, u64)>, i64)> {
        let what = "writing a slot record";
        let k = keys(namespace);
        let args = writes
            .iter()
            .flat_map(|SlotWrite { expected, record }| {
                [
                    record.slot.to_string(),
                    expected.map(|v| v.to_string()).unwrap_or_default(),
                    codec::encode_slot(record),
                ]
            })
            .collect();
        let reply = self.call(
            what,
            |s| &s.cas_slot,
            true,
            [k.slots, k.counter].into_iter().chain(k.index).collect(),
            args,
        )?;
        let [version, sec, usec, place] = self.items::<4>(what, &reply)?;
        let store_now = self.store_now(what, sec, usec)?;
        let version = version_reply(version).ok_or_else(|| self.malformed(what, &reply))?;
        let written = match (version, bulk_i64(place)) {
            (None, Some(0)) => None,
            (Some(version), Some(place)) if place >= 1 && place as usize <= writes.len() => {
                Some((place as usize - 1, version))
            }
            _ => return Err(self.malformed(what, &reply)),
        };
        Ok((written, store_now))
    }

    fn place(&self, key: &str) -> String {
        format!("store {} key '{key}'", self.io.name())
    }

    /// The `N` items of a script's array reply, or the error naming a reply of another shape.
    fn items<'v, const N: usize>(&self, what: &str, reply: &'v Value) -> Result<&'v [Value; N]> {
        match reply {
            Value::Array(items) => items.as_slice().try_into().ok(),
            _ => None,
        }
        .ok_or_else(|| self.malformed(what, reply))
    }

    fn malformed(&self, what: &str, value: &Value) -> Error {
        let mut shown = format!("{value:?}");
        if shown.len() > 200 {
            let cut = (0..=200)
                .rev()
                .find(|i| shown.is_char_boundary(*i))
                .unwrap_or(0);
            shown.truncate(cut);
            shown.push('…');
        }
        self.io
            .error(what, &format!("unexpected reply from the server: {shown}"))
    }

    /// `VERSION|RECORD` into its parts.
    fn split_versioned<'v>(&self, raw: &'v [u8], place: &str) -> Result<(u64, &'v [u8])> {
        let bar = raw.iter().position(|b| *b == b'|');
        let version = bar
            .and_then(|i| std::str::from_utf8(&raw[..i]).ok())
            .and_then(|s| s.parse::<u64>().ok());
        match (bar, version) {
            (Some(i), Some(v)) => Ok((v, &raw[i + 1..])),
            _ => Err(Error::store(format!(
                "{place} does not hold VERSION|RECORD; was it written by another program?"
            ))),
        }
    }

    /// The namespace record in a script's reply: nil, or `VERSION|RECORD`.
    fn namespace_value(
        &self,
        what: &str,
        k: &Keys,
        ns: &Value,
    ) -> Result<Option<Versioned<NamespaceRecord>>> {
        match ns {
            Value::Nil => Ok(None),
            Value::BulkString(raw) => {
                let place = self.place(&k.ns);
                let (version, line) = self.split_versioned(raw, &place)?;
                Ok(Some(Versioned {
                    value: codec::decode_namespace(line, &place)?,
                    version,
                }))
            }
            other => Err(self.malformed(what, other)),
        }
    }

    /// Slot records in a script's reply: `VERSION|RECORD` values joined by newlines.
    fn joined_slots(
        &self,
        what: &str,
        k: &Keys,
        joined: &Value,
    ) -> Result<Vec<Versioned<SlotRecord>>> {
        let Value::BulkString(joined) = joined else {
            return Err(self.malformed(what, joined));
        };
        joined
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|raw| self.decode_slot(k, None, raw))
            .collect()
    }

    fn store_now(&self, what: &str, sec: &Value, usec: &Value) -> Result<i64> {
        let sec = bulk_i64(sec).ok_or_else(|| self.malformed(what, sec))?;
        let usec = bulk_i64(usec).ok_or_else(|| self.malformed(what, usec))?;
        Ok(sec * 1_000 + usec / 1_000)
    }

    fn decode_slot(
        &self,
        keys: &Keys,
        field: Option<&[u8]>,
        raw: &[u8],
    ) -> Result<Versioned<SlotRecord>> {
        let field = field.map(String::from_utf8_lossy);
        let place = match &field {
            Some(f) => self.place(&format!("{}[{f}]", keys.slots)),
            None => self.place(&keys.slots),
        };
        let (version, line) = self.split_versioned(raw, &place)?;
        let value = codec::decode_slot(line, &place)?;
        if let Some(f) = field {
            if f != value.slot.to_string() {
                return Err(Error::store(format!(
                    "{place} holds the record of slot {}",
                    value.slot
                )));
            }
        }
        Ok(Versioned { value, version })
    }
}

/// Whether a compare-and-set's reply says it wrote: one that wrote nothing answers nil, or (a
/// slot's) {nil, sec, usec}.
fn wrote(value: &Value) -> bool {
    match value {
        Value::Nil => false,
        Value::Array(items) => items.first().is_some_and(|v| *v != Value::Nil),
        _ => true,
    }
}

/// The URL of the master at `host:port`, with the store URL's user information and database.
fn master_url(scheme: &str, userinfo: &str, host: &str, port: u16, db: i64) -> String {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    format!("{scheme}://{userinfo}{host}:{port}/{db}")
}

/// Whether a `ROLE` reply says `master`.
fn is_master(role: &Value) -> bool {
    match role {
        Value::Array(items) => matches!(items.first(),
            Some(Value::BulkString(b)) if b.as_slice() == b"master"),
        _ => false,
    }
}

impl Shared {
    /// A connection to the server (with Sentinel: to the master, checked with `ROLE`), within
    /// `timeout`.
    async fn connect(
        &self,
        timeout: Duration,
    ) -> std::result::Result<MultiplexedConnection, String> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let (sentinels, master, scheme, userinfo, db, ca) = match &self.target {
            Target::Direct(client) => {
                let plain_probe = match client.get_connection_info().addr() {
                    redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
                    _ => None,
                };
                let tls = plain_probe.is_some();
                // With TLS, a quarter of the bound is kept for asking a handshake that got no
                // answer whether the port speaks Redis without TLS.
                let open_within = if tls { timeout.mul_f64(0.75) } else { timeout };
                let config = config.set_connection_timeout(Some(open_within));
                let ca = self.ca.as_deref();
                return match reply::connect(
                    client.get_connection_info(),
                    ca,
                    &config,
                    open_within,
                    &self.replies,
                )
                .await
                {
                    Ok(conn) => Ok(conn),
                    Err(e) => match plain_probe {
                        Some((host, port))
                            if e.is_timeout() && speaks_plain_redis(&host, port).await =>
                        {
                            Err(format!(
                                "{}; {PLAIN_PORT}",
                                crate::bounds::quote(&e.to_string())
                            ))
                        }
                        _ => Err(connect_error(&e, tls, "redis://")),
                    },
                };
            }
            Target::Sentinel {
                sentinels,
                master,
                scheme,
                userinfo,
                db,
                ca,
            } => (sentinels, master, scheme, userinfo, db, ca.as_deref()),
            Target::Cluster(_) => {
                return Err(
                    "a cluster is reached through the node of each hash slot, not one \
                            shared connection"
                        .to_string(),
                )
            }
        };
        // Each sentinel gets an equal share of 9/10 of the bound, so one that hangs leaves time
        // to ask the next, and when none answers the error naming why each failed comes within
        // the bound (not the bare timeout of the bound).
        let share =
            timeout.mul_f64(0.9) / u32::try_from(sentinels.len()).unwrap_or(u32::MAX).max(1);
        let mut why = Vec::new();
        for sentinel in sentinels {
            let addr = sentinel.addr().to_string();
            let step = async {
                let asked = format!("sentinel {addr}");
                let tls = *scheme == "rediss";
                let mut sc = reply::connect(sentinel, ca, &config, timeout, &self.replies)
                    .await
                    .map_err(|e| {
                        format!("{asked}: {}", connect_error(&e, tls, "redis+sentinel://"))
                    })?;
                let named: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(master)
                    .query_async(&mut sc)
                    .await
                    .map_err(|e| format!("{asked}: {e}"))?;
                let Some((host, port)) = named else {
                    return Err(format!(
                        "{asked} knows no master named '{master}' (sentinel monitor {master} …)"
                    ));
                };
                let node = format!("master {host}:{port} named by {asked}");
                let info = master_url(scheme, userinfo, &host, port, *db)
                    .into_connection_info()
                    .map_err(|e| format!("{node}: {}", scrub_kind(&e)))?;
                let mut conn = reply::connect(&info, ca, &config, timeout, &self.replies)
                    .await
                    .map_err(|e| {
                        format!("{node}: {}", connect_error(&e, tls, "redis+sentinel://"))
                    })?;
                // A master just demoted, or one the sentinels have not yet told, still accepts
                // connections: only one that says it is the master is used.
                let role: Value = redis::cmd("ROLE")
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("{node}: ROLE: {e}"))?;
                if !is_master(&role) {
                    return Err(format!(
                        "{node} is not a master (ROLE answers {}); a failover is under way",
                        match &role {
                            Value::Array(items) => match items.first() {
                                Some(Value::BulkString(b)) =>
                                    String::from_utf8_lossy(b).into_owned(),
                                _ => "something else".to_string(),
                            },
                            _ => "something else".to_string(),
                        }
                    ));
                }
                Ok(conn)
            };
            match tokio::time::timeout(share, step).await {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(e)) => why.push(e),
                Err(_) => {
                    let late = format!("no master within {} ms", share.as_millis());
                    let fix = tls_fix(&late, *scheme == "rediss", "redis+sentinel://");
                    why.push(format!("sentinel {addr}: {late}{fix}"));
                }
            }
        }
        Err(format!(
            "no master '{master}' through the sentinels ({})",
            why.join("; ")
        ))
    }
}

fn bulk_i64(v: &Value) -> Option<i64> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

fn version_reply(v: &Value) -> Option<Option<u64>> {
    match v {
        Value::Nil => Some(None),
        Value::Int(i) => u64::try_from(*i).ok().map(Some),
        _ => None,
    }
}

/// A parse error of the URL, without echoing the URL (which may hold the password).
fn scrub_kind(e: &RedisError) -> String {
    format!("{:?}", e.kind())
}

impl SlotStore for RedisStore {
    fn describe(&self) -> String {
        self.io.name().to_string()
    }

    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let what = "reading a namespace snapshot";
        let k = keys(namespace);
        let _listing = self.shared.replies.listing();
        let reply = self.call(
            what,
            |s| &s.snapshot,
            false,
            vec![k.ns.clone(), k.slots.clone()],
            vec![],
        )?;
        let [sec, usec, ns, slots] = self.items::<4>(what, &reply)?;
        Ok(NamespaceSnapshot {
            namespace: self.namespace_value(what, &k, ns)?,
            slots: Snapshot {
                store_now: self.store_now(what, sec, usec)?,
                slots: self.joined_slots(what, &k, slots)?,
            },
        })
    }

    fn candidates(&self, namespace: &str, ask: &CandidateAsk<'_>) -> Result<CandidateView> {
        let what = "reading the candidate slots";
        let k = keys(namespace);
        let _listing = self.shared.replies.listing();
        let reply = self.call(
            what,
            |s| &s.candidates,
            false,
            [&k.slots, &k.ns]
                .into_iter()
                .chain(&k.index)
                .cloned()
                .collect(),
            vec![
                if ask.owner_key.is_some() { "1" } else { "" }.to_string(),
                ask.owner_key.map(codec::encode_key).unwrap_or_default(),
                ask.preferred_slot
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                ask.free_min.to_string(),
                ask.free_per_live.to_string(),
            ],
        )?;
        let [sec, usec, ns, live, covered, whole] = self.items::<6>(what, &reply)?;
        let number = |v: &Value| -> Option<String> {
            match v {
                Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                _ => None,
            }
        };
        let live = number(live)
            .and_then(|text| {
                text.split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse::<u32>().ok())
                    .collect::<Option<Vec<u32>>>()
            })
            .ok_or_else(|| self.malformed(what, &reply))?;
        let covered_below = number(covered)
            .and_then(|text| text.parse::<u32>().ok())
            .ok_or_else(|| self.malformed(what, &reply))?;
        Ok(CandidateView {
            namespace: self.namespace_value(what, &k, ns)?,
            store_now: self.store_now(what, sec, usec)?,
            live,
            covered_below,
            records: self.joined_slots(what, &k, whole)?,
        })
    }

    fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        let what = "writing the namespace record";
        let k = keys(namespace);
        let reply = self.call(
            what,
            |s| &s.cas_namespace,
            true,
            vec![k.ns, k.counter],
            vec![
                expected.map(|v| v.to_string()).unwrap_or_default(),
                codec::encode_namespace(record),
            ],
        )?;
        version_reply(&reply).ok_or_else(|| self.malformed(what, &reply))
    }

    fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead> {
        let what = "reading a slot";
        let k = keys(namespace);
        let reply = self.call(
            what,
            |s| &s.read_slot,
            false,
            vec![k.slots.clone()],
            vec![slot.to_string()],
        )?;
        let [sec, usec, value] = self.items::<3>(what, &reply)?;
        let now = self.store_now(what, sec, usec)?;
        match value {
            Value::Nil => Ok((now, None)),
            Value::BulkString(raw) => {
                let field = slot.to_string();
                Ok((
                    now,
                    Some(self.decode_slot(&k, Some(field.as_bytes()), raw)?),
                ))
            }
            other => Err(self.malformed(what, other)),
        }
    }

    fn cas_slot(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<u64>> {
        Ok(self.cas_slot_timed(namespace, write)?.map(|w| w.version))
    }

    /// The store clock is `TIME`, read inside the compare-and-set's script.
    fn cas_slot_timed(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<Written>> {
        let (written, store_now) = self.write_first(namespace, std::slice::from_ref(&write))?;
        Ok(written.map(|(_, version)| Written {
            version,
            store_now: Some(store_now),
        }))
    }

    /// Every write in one script (`CAS_SLOT`), one round trip.
    fn cas_first_slot(
        &self,
        namespace: &str,
        writes: &[SlotWrite<'_>],
    ) -> Result<Option<(usize, u64)>> {
        Ok(self.write_first(namespace, writes)?.0)
    }

    fn may_forget_namespaces(&self) -> bool {
        self.shared.restart_guard
    }

    fn deletes_slots(&self) -> bool {
        true
    }

    fn delete_slot(&self, namespace: &str, slot: u32, expected: u64) -> Result<bool> {
        let what = "deleting a slot record";
        let k = keys(namespace);
        let reply = self.call(
            what,
            |s| &s.delete_slot,
            true,
            [k.slots, k.counter].into_iter().chain(k.index).collect(),
            vec![slot.to_string(), expected.to_string()],
        )?;
        match reply {
            Value::Nil => Ok(false),
            Value::Int(1) => Ok(true),
            other => Err(self.malformed(what, &other)),
        }
    }

    fn started_at(&self, namespace: &str) -> Result<Option<i64>> {
        if !self.shared.restart_guard {
            return Ok(None);
        }
        let what = "reading when the server started";
        let k = keys(namespace);
        let reply = self.call(what, |s| &s.started_at, false, vec![k.slots], vec![])?;
        let [sec, usec, uptime] = self.items::<3>(what, &reply)?;
        let now = self.store_now(what, sec, usec)?;
        let uptime_s = bulk_i64(uptime).ok_or_else(|| self.malformed(what, uptime))?;
        // Redis counts the uptime in whole seconds of its cached clock, from its start rounded
        // down to the second: the start lies before `now - uptime + 1 s`, which errs late.
        Ok(Some(now - uptime_s.saturating_mul(1_000) + 1_000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(text: &str) -> Result<Arc<RedisStore>> {
        RedisStore::open(&StoreUrl::parse(text)?)
    }

    #[test]
    fn replicas_and_wait_timeout_are_read_and_checked() {
        let s = open("redis://:pw@h:1/0?replicas=2&wait_timeout_ms=300").unwrap();
        assert_eq!((s.shared.replicas, s.shared.wait_timeout_ms), (2, 300));
        let s = open("redis://h:1/0").unwrap();
        assert_eq!((s.shared.replicas, s.shared.wait_timeout_ms), (0, 1000));
        let s = open("redis+sentinel://s1,s2:26380/cosid/3?replicas=1").unwrap();
        assert_eq!(s.shared.replicas, 1);
        let Target::Sentinel {
            sentinels,
            master,
            db,
            ..
        } = &s.shared.target
        else {
            panic!("a sentinel URL gives a sentinel target");
        };
        let addrs: Vec<String> = sentinels.iter().map(|i| i.addr().to_string()).collect();
        assert_eq!(addrs, ["s1:26379", "s2:26380"]);
        assert_eq!((master.as_str(), *db), ("cosid", 3));

        for (bad, says) in [
            (
                "redis://h/0?replicas=x",
                "replicas='x' is not a number of replicas",
            ),
            (
                "redis://h/0?replicas=-1",
                "replicas='-1' is not a number of replicas",
            ),
            (
                "redis://h/0?replicas=65",
                "from 0 (do not wait for replicas) to 64",
            ),
            (
                "redis://h/0?replicas=1&wait_timeout_ms=0",
                "wait_timeout_ms='0' is not a wait",
            ),
            (
                "redis://h/0?replicas=1&wait_timeout_ms=2000",
                "between 1 and 1999",
            ),
            ("redis://h/0?wait_timeout_ms=10", "without replicas=N"),
            ("redis+sentinel://s1/", "has the master name ''"),
            ("redis+sentinel://s1", "has the master name ''"),
            (
                "redis+sentinel://s1/a%20b",
                "has the master name (not shown)",
            ),
            ("redis+sentinel://s1:x/m", "sentinel port 'x', not a port"),
            ("redis+sentinel://s1,/m", "empty sentinel host"),
            ("redis+sentinel://s1/m/x", "database 'x', not a number"),
            (
                "redis+sentinel://s1/m?protocol=resp3",
                "parameter 'protocol'",
            ),
            ("rediss+sentinel://s1/m#insecure", "#fragment"),
            (
                "redis+sentinel://s1/m?sentinel_password=%zz",
                "not valid percent-encoding",
            ),
            (
                "redis://h/0?sentinel_password=x",
                "only a redis+sentinel:// URL takes",
            ),
        ] {
            let e = open(bad).expect_err(bad);
            assert_eq!(e.kind(), crate::ErrorKind::Config, "{bad}: {e}");
            assert!(e.message().contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_cluster_url_names_its_seeds_and_database_0_only() {
        let s = open("redis+cluster://:SECRET@h1,h2:7000,[::1]:7001/0?replicas=1").unwrap();
        assert_eq!(s.shared.replicas, 1);
        let Target::Cluster(cluster) = &s.shared.target else {
            panic!("a cluster URL gives a cluster target");
        };
        assert_eq!(cluster.seeds(), ["h1:6379", "h2:7000", "[::1]:7001"]);
        assert_eq!(s.io.scrub("x SECRET y"), "x *** y");
        assert!(!format!("{s:?} {}", s.describe()).contains("SECRET"));
        for db in ["", "/", "/0", "/0/"] {
            let url = format!("rediss+cluster://h1{db}");
            assert!(open(&url).is_ok(), "{url}");
        }
        let e = open("redis+cluster://h1/2").expect_err("database 2");
        assert!(e.message().contains("has the database '2'"), "{e}");
    }

    #[test]
    fn url_errors_never_show_the_password() {
        for text in [
            "redis+sentinel://u:SECRET@s1:x/m",
            "redis+sentinel://u:SECRET@s1/",
            "redis+sentinel://u:SECRET@s1/m/x",
            "redis+sentinel://u:SECRET@s1/m?replicas=x",
            "redis://u:SECRET@h/0?replicas=1&wait_timeout_ms=0",
        ] {
            let e = open(text).expect_err(text);
            assert!(!format!("{e} {e:?}").contains("SECRET"), "{text}: {e}");
        }
        let s = open("redis+sentinel://u:SECRET@s1/m?replicas=1").unwrap();
        assert!(!format!("{s:?} {}", s.describe()).contains("SECRET"));
        let s = open(
            "redis+sentinel://s1,s2/m?replicas=1&sentinel_user=sen&sentinel_password=SEC%2FRET",
        )
        .unwrap();
        assert!(!format!("{s:?} {}", s.describe()).contains("SEC"));
        assert_eq!(s.io.scrub("x SEC/RET y"), "x *** y");
        let Target::Sentinel { sentinels, .. } = &s.shared.target else {
            panic!("a sentinel URL gives a sentinel target");
        };
        for info in sentinels {
            let settings = info.redis_settings();
            assert_eq!(
                (settings.username(), settings.password()),
                (Some("sen"), Some("SEC/RET"))
            );
        }
    }

    #[test]
    fn only_a_role_reply_of_master_is_a_master() {
        let role = |r: &str| {
            Value::Array(vec![
                Value::BulkString(r.as_bytes().to_vec()),
                Value::Int(0),
            ])
        };
        assert!(is_master(&role("master")));
        for other in ["slave", "sentinel", "MASTER"] {
            assert!(!is_master(&role(other)), "{other}");
        }
        assert!(!is_master(&Value::Nil));
        assert!(!is_master(&Value::Array(vec![])));
    }

    #[test]
    fn only_our_parameters_are_taken_out_of_the_client_url() {
        let p = Parts::of("redis://u:p@h:1/2?replicas=1&protocol=resp3&wait_timeout_ms=5").unwrap();
        assert_eq!(p.client_url(), "redis://u:p@h:1/2?protocol=resp3");
        let p = Parts::of("rediss://h/0?replicas=1#insecure").unwrap();
        assert_eq!(
            (p.param("replicas"), p.client_url().as_str()),
            (Some("1"), "rediss://h/0#insecure")
        );
        assert_eq!(
            master_url("rediss", "u:p@", "::1", 7, 2),
            "rediss://u:p@[::1]:7/2"
        );
    }
}
