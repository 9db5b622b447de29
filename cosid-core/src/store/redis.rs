//! `redis://` and `rediss://` (TLS): the slot store in Redis (or Valkey).
//!
//! Each primitive is one Lua script, run atomically by the server in one round trip
//! (`EVALSHA`, falling back to `EVAL` once after a server restart emptied its script cache). The
//! store clock is `redis.call('TIME')`, read inside the same script.
//!
//! Keys of namespace `ns`, all with the hash tag `{ns}` so the namespace lives in one hash slot
//! and works on Redis Cluster:
//!
//! | key                  | type   | holds                                                    |
//! |----------------------|--------|----------------------------------------------------------|
//! | `cosid:{ns}:ns`      | string | `VERSION|` and the namespace record's line               |
//! | `cosid:{ns}:slots`   | hash   | field = slot number, value `VERSION|` and the slot's line |
//! | `cosid:{ns}:version` | string | the namespace's version counter                          |
//!
//! Versions come from the counter, incremented by every write, so a version never repeats while
//! the data lives. The counter starts at the server's `TIME` in microseconds when it is created,
//! so after the server lost its data (restarted empty) new versions still lie above the old ones
//! unless the server clock went back. The record lines are those of `store::codec`.
//!
//! What Redis must be set up to keep for uniqueness to hold is in `docs/stores.md`.

use super::blocking::{Failure, IoRuntime, SharedConnection, DEFAULT_TIMEOUT};
use super::{codec, NamespaceSnapshot, SlotStore, StoreUrl};
use crate::error::{Error, Result};
use crate::lease::{NamespaceRecord, SlotRecord, Snapshot, Versioned};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo, RedisError, Script, Value};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Allocates the next version of the namespace (KEYS[n] is the counter).
const NEXT_VERSION: &str = r#"
local function next_version(counter)
  if redis.call('EXISTS', counter) == 0 then
    local t = redis.call('TIME')
    redis.call('SET', counter, t[1] .. string.format('%06d', tonumber(t[2])))
  end
  return redis.call('INCR', counter)
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

/// KEYS: ns, slots. Returns {sec, usec, ns value or nil, every slot value joined by '\n'}
/// (one string rather than 2^bits of them: the client parses one reply item, not thousands).
const SNAPSHOT: &str = r#"
local t = redis.call('TIME')
local slots = table.concat(redis.call('HVALS', KEYS[2]), '\n')
return {t[1], t[2], redis.call('GET', KEYS[1]), slots}
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

/// KEYS: slots, counter. ARGV: slot, expected version ('' for none), record. Returns the new
/// version or nil.
const CAS_SLOT: &str = r#"
local cur = version_of(redis.call('HGET', KEYS[1], ARGV[1]), KEYS[1] .. '[' .. ARGV[1] .. ']')
if type(cur) == 'table' then return cur end
if cur ~= ARGV[2] then return false end
local v = next_version(KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', v) .. '|' .. ARGV[3])
return v
"#;

struct Scripts {
    snapshot: Script,
    read_slot: Script,
    cas_namespace: Script,
    cas_slot: Script,
}

/// The Redis store. Thread-safe; one multiplexed connection shared by all callers, re-opened
/// after a failure (a restarted server is picked up by the next call).
pub struct RedisStore {
    io: IoRuntime,
    shared: Arc<Shared>,
    conn: SharedConnection<MultiplexedConnection>,
}

/// What the IO thread's futures need.
struct Shared {
    client: Client,
    scripts: Scripts,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.io.name())
            .field("timeout", &self.io.timeout())
            .finish_non_exhaustive()
    }
}

struct Keys {
    ns: String,
    slots: String,
    counter: String,
}

fn keys(namespace: &str) -> Keys {
    Keys {
        ns: format!("cosid:{{{namespace}}}:ns"),
        slots: format!("cosid:{{{namespace}}}:slots"),
        counter: format!("cosid:{{{namespace}}}:version"),
    }
}

impl RedisStore {
    /// Opens the store `url` (`redis://[user:password@]host[:port][/db]` or `rediss://…`) with
    /// the default 2 s bound on connecting and on every operation. Connects lazily: a server
    /// that is down now gives `Store` errors from the operations, not from here.
    pub fn open(url: &StoreUrl) -> Result<Arc<RedisStore>> {
        Self::open_with_timeout(url, DEFAULT_TIMEOUT)
    }

    /// Like [`RedisStore::open`], with `timeout` bounding connecting and every operation.
    pub fn open_with_timeout(url: &StoreUrl, timeout: Duration) -> Result<Arc<RedisStore>> {
        let StoreUrl::Redis { url: raw } = url else {
            return Err(Error::config(format!(
                "store '{}' is not a redis:// or rediss:// URL",
                url.redacted()
            )));
        };
        let name = url.redacted();
        let info = raw.as_str().into_connection_info().map_err(|e| {
            Error::config(format!(
                "store URL '{name}' is not a valid Redis URL ({}); use redis://[user:password@]host[:port][/db] or rediss://… for TLS",
                scrub_kind(&e)
            ))
        })?;
        let secrets = info
            .redis_settings()
            .password()
            .map(|p| vec![p.to_string()])
            .unwrap_or_default();
        if raw.to_ascii_lowercase().starts_with("rediss:") {
            // Only the ring provider is built in; make it the process default if none is set
            // (rustls refuses to pick one when several are compiled in).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let io = IoRuntime::new(name.clone(), secrets, timeout)?;
        let client = Client::open(info).map_err(|e| io.error("cannot use the URL", &e))?;
        Ok(Arc::new(RedisStore {
            io,
            shared: Arc::new(Shared {
                client,
                scripts: Scripts {
                    snapshot: Script::new(SNAPSHOT),
                    read_slot: Script::new(READ_SLOT),
                    cas_namespace: Script::new(&format!("{NEXT_VERSION}{CAS_NAMESPACE}")),
                    cas_slot: Script::new(&format!("{NEXT_VERSION}{CAS_SLOT}")),
                },
            }),
            conn: SharedConnection::new(),
        }))
    }

    /// The shared connection and its number, connecting first if there is none.
    fn connection(&self, what: &str) -> Result<(u64, MultiplexedConnection)> {
        self.conn.get(
            |_| true,
            || {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.io.timeout()))
                    .set_response_timeout(Some(self.io.timeout()));
                let shared = self.shared.clone();
                self.io
                    .run(async move {
                        shared
                            .client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                    })
                    .map_err(|f| self.io.failure(what, f))
            },
        )
    }

    /// Runs one script with `keys` and `args` (one round trip); on a connection failure or
    /// timeout the connection is dropped so the next call connects afresh.
    fn call(
        &self,
        what: &str,
        script: fn(&Scripts) -> &Script,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Value> {
        let (number, mut conn) = self.connection(what)?;
        let shared = self.shared.clone();
        let outcome = self.io.run(async move {
            let mut invocation = script(&shared.scripts).prepare_invoke();
            for k in &keys {
                invocation.key(k);
            }
            for a in &args {
                invocation.arg(a);
            }
            invocation.invoke_async::<Value>(&mut conn).await
        });
        outcome.map_err(|f| {
            let keep = matches!(&f, Failure::Failed(e) if !e.is_io_error()
                && !e.is_connection_dropped() && !e.is_connection_refusal() && !e.is_timeout());
            if !keep {
                self.conn.drop_if_current(number);
            }
            self.io.failure(what, f)
        })
    }

    fn place(&self, key: &str) -> String {
        format!("store {} key '{key}'", self.io.name())
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
        let reply = self.call(
            what,
            |s| &s.snapshot,
            vec![k.ns.clone(), k.slots.clone()],
            vec![],
        )?;
        let Value::Array(parts) = &reply else {
            return Err(self.malformed(what, &reply));
        };
        let [sec, usec, ns, slots] = parts.as_slice() else {
            return Err(self.malformed(what, &reply));
        };
        let store_now = self.store_now(what, sec, usec)?;
        let namespace_rec = match ns {
            Value::Nil => None,
            Value::BulkString(raw) => {
                let place = self.place(&k.ns);
                let (version, line) = self.split_versioned(raw, &place)?;
                Some(Versioned {
                    value: codec::decode_namespace(line, &place)?,
                    version,
                })
            }
            other => return Err(self.malformed(what, other)),
        };
        let joined: &[u8] = match slots {
            Value::BulkString(b) => b,
            other => return Err(self.malformed(what, other)),
        };
        let mut records = Vec::new();
        for raw in joined.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            records.push(self.decode_slot(&k, None, raw)?);
        }
        Ok(NamespaceSnapshot {
            namespace: namespace_rec,
            slots: Snapshot {
                store_now,
                slots: records,
            },
        })
    }

    fn cas_namespace(
        &self,
        namespace: &str,
        expected: Option<u64>,
        record: &NamespaceRecord,
    ) -> Result<Option<u64>> {
        let what = "writing the namespace record";
        let k = keys(namespace);
        let reply = self.call(
            what,
            |s| &s.cas_namespace,
            vec![k.ns, k.counter],
            vec![
                expected.map(|v| v.to_string()).unwrap_or_default(),
                codec::encode_namespace(record),
            ],
        )?;
        version_reply(&reply).ok_or_else(|| self.malformed(what, &reply))
    }

    fn read_slot(
        &self,
        namespace: &str,
        slot: u32,
    ) -> Result<(i64, Option<Versioned<SlotRecord>>)> {
        let what = "reading a slot";
        let k = keys(namespace);
        let reply = self.call(
            what,
            |s| &s.read_slot,
            vec![k.slots.clone()],
            vec![slot.to_string()],
        )?;
        let Value::Array(parts) = &reply else {
            return Err(self.malformed(what, &reply));
        };
        let [sec, usec, value] = parts.as_slice() else {
            return Err(self.malformed(what, &reply));
        };
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

    fn cas_slot(
        &self,
        namespace: &str,
        expected: Option<u64>,
        record: &SlotRecord,
    ) -> Result<Option<u64>> {
        let what = "writing a slot record";
        let k = keys(namespace);
        let reply = self.call(
            what,
            |s| &s.cas_slot,
            vec![k.slots, k.counter],
            vec![
                record.slot.to_string(),
                expected.map(|v| v.to_string()).unwrap_or_default(),
                codec::encode_slot(record),
            ],
        )?;
        version_reply(&reply).ok_or_else(|| self.malformed(what, &reply))
    }
}
