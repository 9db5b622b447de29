//! `etcd://` and `etcds://` (TLS): the slot store in etcd (v3 API).
//!
//! URL: `etcd://[user:password@]host[:port][,host[:port]…][/?cacert=/path/ca.pem]`, port 2379 by
//! default; `etcds://` connects with TLS, checking the servers against `cacert` or else the
//! system's roots.
//!
//! Keys of namespace `ns`: `cosid/ns/<ns>` (the namespace record) and `cosid/slot/<ns>/<slot>`
//! (one per slot), each holding the JSON form of `store::codec`. The version of a record is the
//! key's `mod_revision`, which etcd never repeats while its data lives.
//!
//! - A snapshot is one linearizable range read over the namespace's slot keys plus the
//!   namespace key, in one `Txn` of two `Get`s (one round trip, one revision); `read_slot` is one
//!   linearizable `Get`.
//! - Each compare-and-set is one transaction: `mod_revision(key) == expected` (or
//!   `create_revision(key) == 0` when no record is expected) then `Put`; the new version is the
//!   revision of that transaction.
//!
//! **Clock.** etcd has no clock a client can read, so the store clock is this host's clock, read
//! when the answer arrives. Windows stay disjoint by construction (floors and ceilings only
//! grow, and every change is a compare-and-set); what the host clock moves is only *when*
//! leases expire: a host whose clock runs ahead sees other holders' leases expire early and
//! takes over their slots early (their windows are still respected: its floor is at least their
//! ceiling), one whose clock runs behind keeps slots busy longer.
//!
//! **A store that lost its data** restarts its revisions from 1, so a compare-and-set that was
//! in flight across the loss could, in principle, match a new key's revision; `docs/stores.md`
//! says why etcd data must not be lost (as with every store, a lost store is detected at the
//! next renewal and the keeper's `floor_at_least` keeps this runtime's windows disjoint).

use super::blocking::{IoRuntime, DEFAULT_TIMEOUT};
use super::{codec, NamespaceSnapshot, SlotStore, StoreUrl};
use crate::clock::system_now_ms;
use crate::error::{Error, Result};
use crate::lease::{NamespaceRecord, SlotRecord, Snapshot, Versioned};
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, TlsOptions, Txn,
    TxnOp, TxnOpResponse,
};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The etcd store. Thread-safe; one gRPC channel shared by all callers (it reconnects by
/// itself), re-created after a failure.
pub struct EtcdStore {
    io: IoRuntime,
    endpoints: Vec<String>,
    /// Holds the password: never printed.
    options: ConnectOptions,
    client: Mutex<Option<Client>>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.io.name())
            .field("endpoints", &self.endpoints)
            .field("timeout", &self.io.timeout())
            .finish_non_exhaustive()
    }
}

fn ns_key(namespace: &str) -> String {
    format!("cosid/ns/{namespace}")
}

fn slot_prefix(namespace: &str) -> String {
    format!("cosid/slot/{namespace}/")
}

fn slot_key(namespace: &str, slot: u32) -> String {
    format!("cosid/slot/{namespace}/{slot}")
}

/// The parts of an etcd URL.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    tls: bool,
    user: Option<(String, String)>,
    endpoints: Vec<String>,
    cacert: Option<String>,
}

fn parse(raw: &str, name: &str) -> Result<Parsed> {
    let bad = |why: &str| {
        Error::config(format!(
            "store URL '{name}' {why}; use etcd://[user:password@]host[:port][,host[:port]…] \
             or etcds://… for TLS"
        ))
    };
    let (scheme, rest) = raw.split_once("://").ok_or_else(|| bad("has no //"))?;
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "etcd" => false,
        "etcds" => true,
        _ => return Err(bad("is not etcd:// or etcds://")),
    };
    // The hosts follow the last '@' (a password may hold '/' or '@'). An '@' after a '?' cannot
    // be placed (a query value's, or a password's that holds '?'): refused rather than guessed,
    // so that no piece of a password is ever taken for a host.
    if rest.find('?').is_some_and(|q| rest[q..].contains('@')) {
        return Err(bad(
            "has an '@' after a '?'; percent-encode '@' and '?' in a password (%40, %3F)",
        ));
    }
    let hosts_start = rest.rfind('@').map_or(0, |i| i + 1);
    let (authority, tail) = match rest[hosts_start..].find(['/', '?']) {
        Some(i) => rest.split_at(hosts_start + i),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let user = match userinfo {
        None => None,
        Some(u) => {
            let (name, password) = u
                .split_once(':')
                .ok_or_else(|| bad("has a user without a password"))?;
            Some((percent_decode(name), percent_decode(password)))
        }
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    if !path.is_empty() && path != "/" {
        return Err(bad("has a path, which etcd URLs do not take"));
    }
    let mut cacert = None;
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("cacert", v)) => cacert = Some(percent_decode(v)),
            // Not echoed: the parameter may be a credential.
            _ => return Err(bad("has a parameter other than cacert=")),
        }
    }
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(bad("has an empty host"));
        }
        let with_port = if host
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !host.ends_with(']')
        {
            host.to_string()
        } else {
            format!("{host}:2379")
        };
        endpoints.push(format!(
            "{}://{with_port}",
            if tls { "https" } else { "http" }
        ));
    }
    if cacert.is_some() && !tls {
        return Err(bad("gives cacert without TLS; use etcds://"));
    }
    Ok(Parsed {
        tls,
        user,
        endpoints,
        cacert,
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl EtcdStore {
    /// Opens the store `url` with the default 2 s bound on connecting and on every operation.
    /// Connects lazily: a cluster that is down now gives `Store` errors from the operations.
    pub fn open(url: &StoreUrl) -> Result<Arc<EtcdStore>> {
        Self::open_with_timeout(url, DEFAULT_TIMEOUT)
    }

    /// Like [`EtcdStore::open`], with `timeout` bounding connecting and every operation.
    pub fn open_with_timeout(url: &StoreUrl, timeout: Duration) -> Result<Arc<EtcdStore>> {
        let StoreUrl::Etcd { url: raw } = url else {
            return Err(Error::config(format!(
                "store '{}' is not an etcd:// or etcds:// URL",
                url.redacted()
            )));
        };
        let name = url.redacted();
        let parsed = parse(raw, &name)?;
        let mut options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout)
            .with_keep_alive(Duration::from_secs(10), timeout);
        let mut secrets = Vec::new();
        if let Some((user, password)) = &parsed.user {
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
            secrets.push(password.clone());
        }
        if parsed.tls {
            let mut tls = TlsOptions::new().with_native_roots();
            if let Some(path) = &parsed.cacert {
                let pem = std::fs::read(path).map_err(|e| {
                    Error::config(format!("store '{name}': cannot read cacert '{path}': {e}"))
                })?;
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            options = options.with_tls(tls);
        }
        let io = IoRuntime::new(name, secrets, timeout)?;
        Ok(Arc::new(EtcdStore {
            io,
            endpoints: parsed.endpoints,
            options,
            client: Mutex::new(None),
        }))
    }

    /// Runs `op` with the shared client, connecting first when there is none; any failure drops
    /// the client so the next call starts afresh (a fresh token, a fresh channel).
    fn with_client<T, F, Fut>(&self, what: &str, op: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let cached = self
            .client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let endpoints = self.endpoints.clone();
        let options = self.options.clone();
        let outcome = self.io.run(async move {
            let client = match cached {
                Some(c) => c,
                None => Client::connect(endpoints, Some(options)).await?,
            };
            let value = op(client.clone()).await?;
            Ok::<_, etcd_client::Error>((value, client))
        });
        match outcome {
            Ok((value, client)) => {
                let mut guard = self.client.lock().unwrap_or_else(|p| p.into_inner());
                if guard.is_none() {
                    *guard = Some(client);
                }
                Ok(value)
            }
            Err(f) => {
                *self.client.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Err(self.io.failure(what, f))
            }
        }
    }

    fn place(&self, key: &[u8]) -> String {
        format!(
            "store {} key '{}'",
            self.io.name(),
            String::from_utf8_lossy(key)
        )
    }

    fn versioned_slot(&self, kv: &KeyValue) -> Result<Versioned<SlotRecord>> {
        let place = self.place(kv.key());
        let value = codec::decode_slot(kv.value(), &place)?;
        if !kv.key().ends_with(format!("/{}", value.slot).as_bytes()) {
            return Err(Error::store(format!(
                "{place} holds the record of slot {}",
                value.slot
            )));
        }
        Ok(Versioned {
            value,
            version: kv.mod_revision() as u64,
        })
    }

    fn cas(
        &self,
        what: &str,
        key: String,
        expected: Option<u64>,
        value: String,
    ) -> Result<Option<u64>> {
        let compare = match expected {
            None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            Some(v) => {
                let Ok(v) = i64::try_from(v) else {
                    return Ok(None);
                };
                Compare::mod_revision(key.clone(), CompareOp::Equal, v)
            }
        };
        let txn = Txn::new()
            .when(vec![compare])
            .and_then(vec![TxnOp::put(key, value, None)]);
        let resp = self.with_client(what, |mut c| async move { c.txn(txn).await })?;
        if !resp.succeeded() {
            return Ok(None);
        }
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| self.io.error(what, &"the answer has no header"))?;
        Ok(Some(revision as u64))
    }
}

impl SlotStore for EtcdStore {
    fn describe(&self) -> String {
        self.io.name().to_string()
    }

    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let what = "reading a namespace snapshot";
        let txn = Txn::new().and_then(vec![
            TxnOp::get(ns_key(namespace), None),
            TxnOp::get(
                slot_prefix(namespace),
                Some(GetOptions::new().with_prefix()),
            ),
        ]);
        let resp = self.with_client(what, |mut c| async move { c.txn(txn).await })?;
        let store_now = system_now_ms();
        let mut gets = resp.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        });
        let (Some(Some(ns)), Some(Some(slots))) = (gets.next(), gets.next()) else {
            return Err(self.io.error(what, &"the answer lacks the two reads"));
        };
        let namespace_rec = match ns.kvs().first() {
            None => None,
            Some(kv) => Some(Versioned {
                value: codec::decode_namespace(kv.value(), &self.place(kv.key()))?,
                version: kv.mod_revision() as u64,
            }),
        };
        let mut records = Vec::with_capacity(slots.kvs().len());
        for kv in slots.kvs() {
            records.push(self.versioned_slot(kv)?);
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
        self.cas(
            "writing the namespace record",
            ns_key(namespace),
            expected,
            codec::encode_namespace(record),
        )
    }

    fn read_slot(
        &self,
        namespace: &str,
        slot: u32,
    ) -> Result<(i64, Option<Versioned<SlotRecord>>)> {
        let key = slot_key(namespace, slot);
        let resp = self.with_client(
            "reading a slot",
            |mut c| async move { c.get(key, None).await },
        )?;
        let now = system_now_ms();
        match resp.kvs().first() {
            None => Ok((now, None)),
            Some(kv) => Ok((now, Some(self.versioned_slot(kv)?))),
        }
    }

    fn cas_slot(
        &self,
        namespace: &str,
        expected: Option<u64>,
        record: &SlotRecord,
    ) -> Result<Option<u64>> {
        self.cas(
            "writing a slot record",
            slot_key(namespace, record.slot),
            expected,
            codec::encode_slot(record),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_endpoints_user_and_tls() {
        let p = parse("etcd://a:2379,b,c:1", "x").unwrap();
        assert_eq!(
            p.endpoints,
            ["http://a:2379", "http://b:2379", "http://c:1"]
        );
        assert!(!p.tls && p.user.is_none());
        let p = parse("etcds://root:p%40ss@h:2379/?cacert=/ca.pem", "x").unwrap();
        assert_eq!(p.endpoints, ["https://h:2379"]);
        assert_eq!(p.user, Some(("root".into(), "p@ss".into())));
        assert_eq!(p.cacert.as_deref(), Some("/ca.pem"));
        for bad in [
            "etcd://h/db",
            "etcd://h?x=1",
            "etcd://a,,b",
            "etcd://u@h",
            "etcd://h?cacert=/x",
        ] {
            assert_eq!(
                parse(bad, "shown").unwrap_err().kind(),
                crate::error::ErrorKind::Config,
                "{bad}"
            );
        }
    }
}
