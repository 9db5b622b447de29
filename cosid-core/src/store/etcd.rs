//! `etcd://` and `etcds://` (TLS): the slot store in etcd (v3 API).
//!
//! URL: `etcd://[user:password@]host[:port][,host[:port]…][/?cacert=/path/ca.pem]`, port 2379 by
//! default; `etcds://` connects with TLS, checking the servers against `cacert` or else the
//! system's roots.
//!
//! cosid speaks etcd's HTTP/JSON gateway (`gateway`), served by every etcd since 3.4 on its
//! client port: no gRPC code is generated, so building needs no `protoc`.
//!
//! Keys of namespace `ns`: `cosid/ns/<ns>` (the namespace record) and `cosid/slot/<ns>/<slot>`
//! (one per slot), each holding the JSON form of `store::codec`, and `cosid/lineage` (a random
//! id written into a store that has none, by the first write or snapshot). The version of a
//! record is the key's `mod_revision` together with the lineage it was read or written under
//! (see "A store that lost its data" below).
//!
//! - A snapshot is one linearizable transaction of range reads: the namespace key, the lineage
//!   and the namespace's slot keys (one round trip, one revision). After the first, only the
//!   slots changed since the last snapshot's revision are transferred and merged into it (see
//!   `EtcdStore::read_snapshot` for when that is sound); `read_slot` is one linearizable
//!   transaction reading the slot's key and the lineage.
//! - Each compare-and-set is one transaction: `mod_revision(key) == expected` and the lineage
//!   still the one the expected version names (or `create_revision(key) == 0` when no record is
//!   expected, the lineage then read, or created if there is none, in the success branch), then
//!   `Put`; the new version is the revision of that transaction under that lineage. A
//!   compare-and-set over several slots (`cas_first_slot`) is one transaction too: each write's
//!   in the failure branch of the one before, so the first whose compare holds is the one put,
//!   in one round trip and one raft entry.
//!
//! **Clock.** etcd has no clock a client can read, so the store clock is this host's clock, read
//! when the answer arrives. Windows stay disjoint by construction (floors and ceilings only
//! grow, and every change is a compare-and-set); what the host clock moves is only *when*
//! leases expire: a host whose clock runs ahead sees other holders' leases expire early and
//! takes over their slots early (their windows are still respected: its floor is at least their
//! ceiling), one whose clock runs behind keeps slots busy longer.
//!
//! **A store that lost its data** (its data directory deleted, or a member started afresh)
//! restarts its revisions from 1, so a `mod_revision` alone would repeat: a holder's read-free
//! renewal (`LeaseClient::renew_at`, a compare-and-set against the version its last write
//! returned) could match the record a newcomer wrote after the loss at the same revision, and
//! write over the newcomer's lease unseen. So a version is `generation << 48 | mod_revision`,
//! where the generation names the value of `cosid/lineage` ("no lineage key" being a value too)
//! read in the same transaction as the record, or compared, created or read in the write that
//! returned it; and every compare-and-set checks that lineage in its own transaction (`value ==`
//! it, or `create_revision == 0` for "none"). Every write that succeeds leaves a lineage in the
//! store (it creates one when there is none), so a record written after a loss is always under
//! another lineage than any version handed out before it: those versions match nothing, and
//! the holder's fallback read reports the lease lost. A version whose generation this process
//! never gave matches nothing, and is not sent.
//!
//! Generations number, in the order first seen, the lineages this process has seen, in one
//! table for the whole process (not per store object): a version then means the same to every
//! `EtcdStore` of the process, so one carried from one store object to another can be stale,
//! never misread. 48 bits of revision outlast any cluster (2^48 writes is nearly 900 years at
//! 10,000 writes a second, where 2^40 would last under four years; a revision beyond it is a
//! `Store` error, never wrapped), and 16 bits of generation allow 65,535 lineages per process
//! (one per cluster opened and per loss seen; beyond, a `Store` error). A restore from a
//! snapshot (`etcdctl snapshot restore`) brings back the lineage with the data and takes
//! revisions back only to the snapshot's: that is a lost-write event, not covered here
//! (`docs/stores.md`).

mod gateway;

use super::blocking::{Failure, IoRuntime, DEFAULT_TIMEOUT};
use super::{
    codec, Cas, NamespaceSnapshot, NamespaceWrite, SlotRead, SlotStore, SlotWrite, StoreUrl,
};
use crate::clock::system_now_ms;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::{SlotRecord, Snapshot, Versioned};
use gateway::{b64, CallError, Endpoint, Gateway, Kv, RangeAnswer, TxnAnswer};
use rustls::RootCertStore;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The etcd store. Thread-safe; its callers share a small pool of keep-alive HTTP connections
/// to the cluster's JSON gateway (a failed connection is dropped and the next one made afresh,
/// from the next member).
pub struct EtcdStore {
    io: IoRuntime,
    endpoints: Vec<String>,
    /// Holds the password: never printed.
    gateway: Arc<Gateway>,
    /// Per namespace, its slots as last read, so that a snapshot transfers only the slots
    /// changed since (see [`EtcdStore::read_snapshot`]).
    cache: Mutex<HashMap<String, Arc<Cached>>>,
    /// Per namespace, the snapshot reads in flight (see [`SlotStore::snapshot`]).
    flights: Mutex<HashMap<String, Flight>>,
    flight_done: Condvar,
    /// Whether a namespace created here starts ttl + tolerance after its creation
    /// ([`SlotStore::may_forget_namespaces`]): `restart-guard=off` in the URL turns it off.
    restart_guard: bool,
}

/// The snapshot reads of one namespace: one at a time, numbered.
#[derive(Default)]
struct Flight {
    /// Reads started and finished so far.
    started: u64,
    finished: u64,
    running: bool,
    /// The outcome of read number `finished` (an error as its kind, message and permanence).
    last: Option<std::result::Result<NamespaceSnapshot, (ErrorKind, String, bool)>>,
}

/// The key holding the store's lineage: a random id written into a store that has none (by the
/// first write or snapshot), so a store that lost its data (and restarted its revisions) is told
/// from the one read before, by snapshots and by every compare-and-set.
const LINEAGE_KEY: &str = "cosid/lineage";

/// A namespace's slots as of one read.
struct Cached {
    /// The value of [`LINEAGE_KEY`] when read.
    lineage: Vec<u8>,
    /// The store's revision of the read.
    revision: i64,
    /// Slot records by key.
    slots: BTreeMap<Vec<u8>, Versioned<SlotRecord>>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.io
            .debug_store(f, "EtcdStore", ("endpoints", &self.endpoints))
    }
}

fn ns_key(namespace: &str) -> String {
    format!("cosid/ns/{namespace}")
}

fn slot_prefix(namespace: &str) -> String {
    format!("cosid/slot/{namespace}/")
}

/// Bits of a version that carry the key's `mod_revision`; the bits above carry the generation
/// of the lineage it was read or written under (see the module doc, "A store that lost its
/// data").
const REVISION_BITS: u32 = 48;
const REVISION_MASK: u64 = (1 << REVISION_BITS) - 1;
/// The largest generation a version can carry.
const MAX_GENERATION: u64 = u64::MAX >> REVISION_BITS;

/// The lineages this process has seen, in the order first seen: generation `g` is
/// `LINEAGES[g - 1]` (`None`: no lineage key). One table for the whole process, so that a
/// version means the same to every [`EtcdStore`] of it: a version carried from one store
/// object to another can be stale, never misread. Entries are never removed (a process sees
/// a new lineage only when a store it talks to lost its data, or when it opens another
/// cluster), so a generation names one lineage for the life of the process.
static LINEAGES: Mutex<Vec<Option<Vec<u8>>>> = Mutex::new(Vec::new());

/// The generation of `lineage` (the value of [`LINEAGE_KEY`], `None` when the key is absent),
/// numbered on first sight; `None` when the process has seen [`MAX_GENERATION`] lineages
/// already.
fn generation(lineage: Option<&[u8]>) -> Option<u64> {
    let mut seen = LINEAGES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = seen.iter().position(|l| l.as_deref() == lineage) {
        return Some(i as u64 + 1);
    }
    let next = seen.len() as u64 + 1;
    if next > MAX_GENERATION {
        return None;
    }
    seen.push(lineage.map(<[u8]>::to_vec));
    Some(next)
}

/// The lineage of `generation`: `None` when the process gave no lineage that generation,
/// `Some(None)` for "no lineage key".
fn lineage_of(generation: u64) -> Option<Option<Vec<u8>>> {
    let seen = LINEAGES.lock().unwrap_or_else(|p| p.into_inner());
    let i = usize::try_from(generation.checked_sub(1)?).ok()?;
    seen.get(i).cloned()
}

/// The version of a record at `mod_revision` under lineage `generation`; `None` when the
/// revision does not fit in [`REVISION_BITS`] (or is no revision etcd gives a key).
fn pack(generation: u64, mod_revision: i64) -> Option<u64> {
    let revision = u64::try_from(mod_revision).ok().filter(|r| *r >= 1)?;
    (revision <= REVISION_MASK && (1..=MAX_GENERATION).contains(&generation))
        .then_some(generation << REVISION_BITS | revision)
}

/// The generation and the `mod_revision` a version carries.
fn unpack(version: u64) -> (u64, i64) {
    (version >> REVISION_BITS, (version & REVISION_MASK) as i64)
}

/// What a compare-and-set compares, besides writing its key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Guard {
    /// No record expected: `create_revision(key) == 0`. The lineage is read in the same
    /// transaction (and created when there is none), to know whose generation the new version
    /// is.
    Create,
    /// `mod_revision(key) == revision` and the store's lineage is still `lineage` (`None`: no
    /// lineage key, which the write then creates).
    Version {
        revision: i64,
        lineage: Option<Vec<u8>>,
    },
}

impl Guard {
    /// The guard of a write expecting `expected`; `None` for a version that names a
    /// generation this process never gave a lineage (or no revision): no version this process
    /// handed out, so it matches no record, and nothing is sent.
    fn of(expected: Option<u64>) -> Option<Guard> {
        let Some(v) = expected else {
            return Some(Guard::Create);
        };
        let (generation, revision) = unpack(v);
        let lineage = lineage_of(generation)?;
        (revision >= 1).then_some(Guard::Version { revision, lineage })
    }
}

/// A transaction that puts `value` at `key` if `guard` holds. Every write that succeeds leaves a lineage in the store: `fresh` is
/// put as [`LINEAGE_KEY`] when the store has none, in the same transaction, so that records
/// written after a store lost its data are always under another lineage than those before.
fn put_if(key: &str, guard: &Guard, value: &str, fresh: &str) -> Value {
    let lineage_key = b64(LINEAGE_KEY.as_bytes());
    let lineage_absent = json!({
        "key": lineage_key, "result": "EQUAL", "target": "CREATE", "create_revision": "0",
    });
    let create_lineage = json!({
        "request_put": { "key": lineage_key, "value": b64(fresh.as_bytes()) },
    });
    let key = b64(key.as_bytes());
    let put = json!({ "request_put": { "key": key, "value": b64(value.as_bytes()) } });
    let (compare, success) = match guard {
        Guard::Create => (
            vec![json!({
                "key": key, "result": "EQUAL", "target": "CREATE", "create_revision": "0",
            })],
            // The lineage as of this write: the one created here, or the one read.
            vec![
                json!({ "request_txn": {
                    "compare": [lineage_absent],
                    "success": [create_lineage],
                    "failure": [{ "request_range": { "key": lineage_key } }],
                } }),
                put,
            ],
        ),
        Guard::Version { revision, lineage } => {
            let record = json!({
                "key": key, "result": "EQUAL", "target": "MOD",
                "mod_revision": revision.to_string(),
            });
            match lineage {
                Some(lineage) => (
                    vec![
                        record,
                        json!({
                            "key": lineage_key, "result": "EQUAL", "target": "VALUE",
                            "value": b64(lineage),
                        }),
                    ],
                    vec![put],
                ),
                None => (vec![record, lineage_absent], vec![create_lineage, put]),
            }
        }
    };
    json!({ "compare": compare, "success": success })
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
            let decode = |part: &str| {
                crate::percent::decode(part).ok_or_else(|| {
                    bad(
                        "has a user name or password that is not percent-encoded UTF-8 (every \
                         '%' must start two hex digits, e.g. %40 for '@')",
                    )
                })
            };
            Some((decode(name)?, decode(password)?))
        }
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    if !path.is_empty() && path != "/" {
        return Err(bad("has a path, which etcd URLs do not take"));
    }
    let mut cacert = None;
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("cacert", v)) => {
                cacert =
                    Some(crate::percent::decode(v).ok_or_else(|| {
                        bad("has a cacert= that is not percent-encoded UTF-8 (every '%' must start \
                         two hex digits)")
                    })?)
            }
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

/// A member of the cluster from one of [`Parsed::endpoints`] (`http://host:port`).
fn endpoint(url: &str) -> Endpoint {
    let authority = url.split_once("://").map_or(url, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => match p.parse::<u16>() {
            Ok(p) => (h, p),
            Err(_) => (authority, 2379),
        },
        None => (authority, 2379),
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Endpoint {
        host: host.to_string(),
        port,
    }
}

/// The TLS setup of `etcds://`: the servers are checked against `cacert` and the system's
/// roots, names included.
fn tls_config(cacert: Option<&str>, name: &str) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = RootCertStore::empty();
    if let Some(path) = cacert {
        let certs = super::ca_file::read(path, "cacert", name)?.1;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(Error::config(format!(
                "store '{name}': cacert '{path}' holds no usable certificate"
            )));
        }
    }
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if roots.is_empty() {
        return Err(Error::config(format!(
            "store '{name}': etcds:// needs root certificates, and the system has none; give \
             one with ?cacert=/path/ca.pem"
        )));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::config(format!("store '{name}': TLS setup: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The key just after every key that starts with `prefix` (etcd's `range_end` of a prefix).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
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
            return Err(url.not_a("an etcd:// or etcds:// URL"));
        };
        let name = url.redacted();
        let (raw, restart_guard) = super::url::take_restart_guard(raw, &name)?;
        let parsed = parse(&raw, &name)?;
        let secrets = parsed
            .user
            .iter()
            .map(|(_, password)| password.clone())
            .collect();
        let tls = match parsed.tls {
            true => Some(tls_config(parsed.cacert.as_deref(), &name)?),
            false => None,
        };
        let io = IoRuntime::new(name, secrets, timeout)?;
        let gateway = Gateway::new(
            parsed.endpoints.iter().map(|e| endpoint(e)).collect(),
            tls,
            parsed.user,
            timeout,
        );
        Ok(Arc::new(EtcdStore {
            io,
            endpoints: parsed.endpoints,
            gateway: Arc::new(gateway),
            cache: Mutex::new(HashMap::new()),
            flights: Mutex::new(HashMap::new()),
            flight_done: Condvar::new(),
            restart_guard,
        }))
    }

    /// POSTs `body` to the gateway's `path`, bounded by the operation timeout, and returns
    /// the answer's JSON text (parsed by the caller, on its own thread).
    fn call(&self, what: &str, path: &'static str, body: Value) -> Result<Vec<u8>> {
        let gateway = Arc::clone(&self.gateway);
        self.io
            .run(async move { gateway.call(path, &body).await })
            .map_err(|f| {
                let permanent = matches!(&f, Failure::Failed(e) if e.refused_for_good());
                self.io.failure(what, f).permanent_if(permanent)
            })
    }

    fn place(&self, key: &[u8]) -> String {
        format!(
            "store {} key '{}'",
            self.io.name(),
            String::from_utf8_lossy(key)
        )
    }

    fn malformed(&self, what: &str, e: CallError) -> Error {
        self.io.error(what, &format!("a malformed answer: {e}"))
    }

    /// The slot record of `kv`, read under lineage `generation`.
    fn versioned_slot(
        &self,
        what: &str,
        kv: &Kv,
        generation: u64,
    ) -> Result<Versioned<SlotRecord>> {
        let place = self.place(&kv.key);
        let value = codec::decode_slot(&kv.value, &place)?;
        if !kv.key.ends_with(format!("/{}", value.slot).as_bytes()) {
            return Err(Error::store(format!(
                "{place} holds the record of slot {}",
                value.slot
            )));
        }
        Ok(Versioned {
            value,
            version: self.version(what, &kv.key, generation, kv.mod_revision)?,
        })
    }

    /// The version of `key` at `mod_revision`, read or written under lineage `generation`.
    fn version(&self, what: &str, key: &[u8], generation: u64, mod_revision: i64) -> Result<u64> {
        pack(generation, mod_revision).ok_or_else(|| {
            let key = String::from_utf8_lossy(key);
            let why = if mod_revision < 1 {
                format!("a malformed answer: key '{key}' has revision {mod_revision}")
            } else {
                format!(
                    "key '{key}' is at revision {mod_revision}, beyond the 2^{REVISION_BITS} \
                     revisions cosid's versions carry beside the store's lineage; give cosid an \
                     etcd cluster of its own, whose revisions count only cosid's writes"
                )
            };
            self.io.error(what, &why)
        })
    }

    /// The generation of `lineage` (`None`: the store has no lineage key).
    fn generation(&self, what: &str, lineage: Option<&[u8]>) -> Result<u64> {
        generation(lineage).ok_or_else(|| {
            self.io.error(
                what,
                &format!(
                    "this process has seen {MAX_GENERATION} lineages of etcd stores (one per \
                     cluster opened and per store that lost its data), all its versions can \
                     name; restart the process"
                ),
            )
        })
    }

    /// The value of [`LINEAGE_KEY`] in a read of it (`None`: no such key).
    fn lineage_in(&self, what: &str, read: &RangeAnswer) -> Result<Option<Vec<u8>>> {
        Ok(read
            .kvs()
            .map_err(|e| self.malformed(what, e))?
            .into_iter()
            .next()
            .map(|kv| kv.value))
    }

    fn cas(
        &self,
        what: &str,
        key: String,
        expected: Option<u64>,
        value: String,
    ) -> Result<Option<u64>> {
        let Some(guard) = Guard::of(expected) else {
            return Ok(None);
        };
        let fresh = uuid::Uuid::new_v4().to_string();
        let txn = put_if(&key, &guard, &value, &fresh);
        let body = self.call(what, "/v3/kv/txn", txn)?;
        let resp: TxnAnswer = gateway::parse(&body).map_err(|e| self.malformed(what, e))?;
        if !resp.succeeded {
            return Ok(None);
        }
        self.written(what, key.as_bytes(), &resp, &resp, &guard, &fresh)
            .map(Some)
    }

    /// The version of what a write guarded by `guard` put at `key`: the revision of the
    /// transaction (`top`), under the lineage the write's own branch (`branch`, which
    /// succeeded) compared, created (`fresh`) or read.
    fn written(
        &self,
        what: &str,
        key: &[u8],
        top: &TxnAnswer,
        branch: &TxnAnswer,
        guard: &Guard,
        fresh: &str,
    ) -> Result<u64> {
        let revision = self.revision(what, top)?;
        let lineage = match guard {
            Guard::Version {
                lineage: Some(lineage),
                ..
            } => lineage.clone(),
            Guard::Version { lineage: None, .. } => fresh.as_bytes().to_vec(),
            Guard::Create => {
                let sub = branch
                    .responses
                    .first()
                    .and_then(|op| op.response_txn.as_deref())
                    .ok_or_else(|| self.io.error(what, &"a malformed answer: no lineage"))?;
                if sub.succeeded {
                    fresh.as_bytes().to_vec()
                } else {
                    let read = sub
                        .responses
                        .first()
                        .and_then(|op| op.response_range.as_ref())
                        .ok_or_else(|| self.io.error(what, &"a malformed answer: no lineage"))?;
                    // The lineage key existed (the compare that creates it failed).
                    self.lineage_in(what, read)?.ok_or_else(|| {
                        self.io
                            .error(what, &"a malformed answer: the lineage vanished")
                    })?
                }
            }
        };
        let generation = self.generation(what, Some(&lineage))?;
        self.version(what, key, generation, revision)
    }

    /// The revision a transaction that wrote was committed at: the `mod_revision` of what it
    /// wrote.
    fn revision(&self, what: &str, resp: &TxnAnswer) -> Result<i64> {
        resp.header
            .as_ref()
            .map(|h| h.revision.0)
            .filter(|r| *r > 0)
            .ok_or_else(|| self.io.error(what, &"the answer has no revision"))
    }

    /// One linearizable read of the namespace: its record, the store's lineage and its slots,
    /// in one transaction. With `base` (the slots as of an earlier read), only the slots changed
    /// since are transferred; `None` when `base` cannot be brought up to date (another lineage,
    /// a revision gone back, a slot key deleted), for the caller to read everything instead.
    fn read_snapshot(
        &self,
        namespace: &str,
        base: Option<&Cached>,
    ) -> Result<Option<NamespaceSnapshot>> {
        let what = "reading a namespace snapshot";
        let prefix = slot_prefix(namespace);
        let mut slots_read = json!({
            "key": b64(prefix.as_bytes()),
            "range_end": b64(&prefix_end(&prefix)),
        });
        if let Some(base) = base {
            slots_read["min_mod_revision"] = json!((base.revision + 1).to_string());
        }
        let txn = json!({
            "success": [
                { "request_range": { "key": b64(ns_key(namespace).as_bytes()) } },
                { "request_range": { "key": b64(LINEAGE_KEY.as_bytes()) } },
                { "request_range": slots_read },
            ],
        });
        let body = self.call(what, "/v3/kv/txn", txn)?;
        let store_now = system_now_ms();
        let resp: TxnAnswer = gateway::parse(&body).map_err(|e| self.malformed(what, e))?;
        let revision = resp.header.as_ref().map_or(0, |h| h.revision.0);
        let ranges: Vec<&RangeAnswer> = resp
            .responses
            .iter()
            .filter_map(|op| op.response_range.as_ref())
            .collect();
        let [ns, lineage, slots] = ranges[..] else {
            return Err(self.io.error(what, &"the answer lacks the three reads"));
        };
        let ns = ns.kvs().map_err(|e| self.malformed(what, e))?;
        let lineage = self.lineage_in(what, lineage)?;
        // Every version of this read names its lineage: see the module doc.
        let generation = self.generation(what, lineage.as_deref())?;
        let count = slots.count();
        let slots = slots.kvs().map_err(|e| self.malformed(what, e))?;
        let namespace_rec = match ns.first() {
            None => None,
            Some(kv) => Some(Versioned {
                value: codec::decode_namespace(&kv.value, &self.place(&kv.key))?,
                version: self.version(what, &kv.key, generation, kv.mod_revision)?,
            }),
        };
        let mut records = match base {
            None => BTreeMap::new(),
            Some(base) => {
                // The earlier read holds for this one only in the same lineage (the store did
                // not lose its data since: revisions are then never reused) and at a revision
                // not gone back.
                if lineage.as_deref() != Some(base.lineage.as_slice()) || revision < base.revision {
                    return Ok(None);
                }
                base.slots.clone()
            }
        };
        for kv in &slots {
            records.insert(kv.key.clone(), self.versioned_slot(what, kv, generation)?);
        }
        // Every slot key changed since the earlier read is in `slots`, so only a key deleted
        // since can make the counts differ.
        if usize::try_from(count).ok() != Some(records.len()) && base.is_some() {
            return Ok(None);
        }
        match lineage {
            Some(lineage) if revision > 0 => {
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                let newer = cache.get(namespace).is_none_or(|c| c.revision < revision);
                if newer {
                    cache.insert(
                        namespace.to_string(),
                        Arc::new(Cached {
                            lineage,
                            revision,
                            slots: records.clone(),
                        }),
                    );
                }
            }
            Some(_) => {}
            // A store new (or emptied): give it a lineage, so that the next reads need only
            // the changes (every write gives it one too). A store that refuses the write (a
            // read-only user) is read in full.
            None => {
                let lineage_key = b64(LINEAGE_KEY.as_bytes());
                let mark = json!({
                    "compare": [{
                        "key": lineage_key, "result": "EQUAL", "target": "CREATE",
                        "create_revision": "0",
                    }],
                    "success": [{ "request_put": {
                        "key": lineage_key,
                        "value": b64(uuid::Uuid::new_v4().to_string().as_bytes()),
                    } }],
                });
                let _ = self.call("marking the store's lineage", "/v3/kv/txn", mark);
            }
        }
        Ok(Some(NamespaceSnapshot {
            namespace: namespace_rec,
            slots: Snapshot {
                store_now,
                slots: records.into_values().collect(),
            },
        }))
    }
}

impl EtcdStore {
    /// One snapshot read (see [`EtcdStore::read_snapshot`]).
    fn snapshot_now(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let base = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(namespace)
            .cloned();
        if let Some(base) = base {
            if let Some(snap) = self.read_snapshot(namespace, Some(&base))? {
                return Ok(snap);
            }
        }
        Ok(self
            .read_snapshot(namespace, None)?
            .expect("a full read always gives a snapshot"))
    }
}

impl SlotStore for EtcdStore {
    fn may_forget_namespaces(&self) -> bool {
        self.restart_guard
    }

    /// Callers that ask while a snapshot of the namespace is being read share the next read
    /// (which starts after they asked, so it is as fresh as one of their own): a crowd of
    /// acquirers costs the server one read at a time, not one each.
    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let deadline =
            Instant::now() + self.io.timeout().saturating_mul(2) + Duration::from_secs(1);
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        let wanted = flights.entry(namespace.to_string()).or_default().started + 1;
        loop {
            let flight = flights.entry(namespace.to_string()).or_default();
            if flight.finished >= wanted {
                if let Some(last) = &flight.last {
                    return last.clone().map_err(|(kind, message, permanent)| {
                        let e = Error::new(kind, message);
                        if permanent {
                            e.permanent()
                        } else {
                            e
                        }
                    });
                }
            }
            if !flight.running {
                flight.running = true;
                flight.started += 1;
                let round = flight.started;
                drop(flights);
                let got = self.snapshot_now(namespace);
                let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
                let flight = flights.entry(namespace.to_string()).or_default();
                flight.running = false;
                flight.finished = round;
                flight.last = Some(match &got {
                    Ok(snap) => Ok(snap.clone()),
                    Err(e) => Err((e.kind(), e.to_string(), e.is_permanent())),
                });
                self.flight_done.notify_all();
                return got;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self
                    .io
                    .failure("reading a namespace snapshot", Failure::<String>::TimedOut));
            }
            flights = self
                .flight_done
                .wait_timeout(flights, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn describe(&self) -> String {
        self.io.name().to_string()
    }

    fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        self.cas(
            "writing the namespace record",
            ns_key(namespace),
            expected,
            codec::encode_namespace(record),
        )
    }

    /// One linearizable read of the slot's key and the store's lineage, in one transaction, so
    /// that the version names the lineage of this very read.
    fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead> {
        let what = "reading a slot";
        let key = slot_key(namespace, slot);
        let txn = json!({
            "success": [
                { "request_range": { "key": b64(key.as_bytes()) } },
                { "request_range": { "key": b64(LINEAGE_KEY.as_bytes()) } },
            ],
        });
        let body = self.call(what, "/v3/kv/txn", txn)?;
        let now = system_now_ms();
        let resp: TxnAnswer = gateway::parse(&body).map_err(|e| self.malformed(what, e))?;
        let ranges: Vec<&RangeAnswer> = resp
            .responses
            .iter()
            .filter_map(|op| op.response_range.as_ref())
            .collect();
        let [found, lineage] = ranges[..] else {
            return Err(self.io.error(what, &"the answer lacks the two reads"));
        };
        let found = found.kvs().map_err(|e| self.malformed(what, e))?;
        match found.first() {
            None => Ok((now, None)),
            Some(kv) => {
                let lineage = self.lineage_in(what, lineage)?;
                let generation = self.generation(what, lineage.as_deref())?;
                Ok((now, Some(self.versioned_slot(what, kv, generation)?)))
            }
        }
    }

    fn deletes_slots(&self) -> bool {
        true
    }

    /// One transaction: the record's mod revision and the store's lineage compared (as every
    /// compare-and-set compares them), then the key deleted. A snapshot brought up to date from
    /// an earlier one sees the deletion by the count of slot keys and reads everything.
    fn delete_slot(&self, namespace: &str, slot: u32, expected: u64) -> Result<bool> {
        let what = "deleting a slot record";
        let Some(Guard::Version { revision, lineage }) = Guard::of(Some(expected)) else {
            return Ok(false);
        };
        let key = b64(slot_key(namespace, slot).as_bytes());
        let lineage_key = b64(LINEAGE_KEY.as_bytes());
        let lineage_holds = match lineage {
            Some(lineage) => json!({
                "key": lineage_key, "result": "EQUAL", "target": "VALUE",
                "value": b64(&lineage),
            }),
            None => json!({
                "key": lineage_key, "result": "EQUAL", "target": "CREATE",
                "create_revision": "0",
            }),
        };
        let txn = json!({
            "compare": [
                json!({
                    "key": key, "result": "EQUAL", "target": "MOD",
                    "mod_revision": revision.to_string(),
                }),
                lineage_holds,
            ],
            "success": [{ "request_delete_range": { "key": key } }],
        });
        let body = self.call(what, "/v3/kv/txn", txn)?;
        let resp: TxnAnswer = gateway::parse(&body).map_err(|e| self.malformed(what, e))?;
        Ok(resp.succeeded)
    }

    fn cas_slot(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        self.cas(
            "writing a slot record",
            slot_key(namespace, record.slot),
            expected,
            codec::encode_slot(record),
        )
    }

    /// One transaction, so one round trip and one raft entry: each write's compare-and-set,
    /// with the next write's transaction nested in its failure branch.
    fn cas_first_slot(
        &self,
        namespace: &str,
        writes: &[SlotWrite<'_>],
    ) -> Result<Option<(usize, u64)>> {
        let what = "writing a slot record";
        let fresh = uuid::Uuid::new_v4().to_string();
        // A write whose version this process never handed out matches nothing: left out of the
        // transaction, as a compare that fails would be.
        let sent: Vec<(usize, String, Guard)> = writes
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                let key = slot_key(namespace, w.record.slot);
                Guard::of(w.expected).map(|guard| (i, key, guard))
            })
            .collect();
        let mut nested: Option<Value> = None;
        for (i, key, guard) in sent.iter().rev() {
            let mut txn = put_if(key, guard, &codec::encode_slot(writes[*i].record), &fresh);
            if let Some(next) = nested.take() {
                txn["failure"] = json!([{ "request_txn": next }]);
            }
            nested = Some(txn);
        }
        let Some(txn) = nested else {
            return Ok(None);
        };
        let body = self.call(what, "/v3/kv/txn", txn)?;
        let resp: TxnAnswer = gateway::parse(&body).map_err(|e| self.malformed(what, e))?;
        // The write made is the one whose transaction succeeded, as deep as it is nested.
        let mut answer = &resp;
        for (n, (i, key, guard)) in sent.iter().enumerate() {
            if answer.succeeded {
                let version = self.written(what, key.as_bytes(), &resp, answer, guard, &fresh)?;
                return Ok(Some((*i, version)));
            }
            match answer
                .responses
                .first()
                .and_then(|op| op.response_txn.as_deref())
            {
                Some(next) => answer = next,
                None if n + 1 == sent.len() => break,
                None => {
                    return Err(self.io.error(
                        what,
                        &format!(
                            "a malformed answer: write {} of {} failed without the answer of \
                             the next",
                            n + 1,
                            sent.len()
                        ),
                    ))
                }
            }
        }
        Ok(None)
    }

    /// The store clock is this host's, read when the answer arrives, as `read_slot` reads it.
    fn host_clock_ms(&self) -> Option<i64> {
        Some(system_now_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NamespaceRecord;

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

    #[test]
    fn credentials_that_are_not_percent_encoded_are_refused_without_showing_them() {
        // "%a" and then a two-byte character: once a panic, slicing through the character.
        for bad in [
            "etcd://root:x%a\u{e9}SECRET@h",
            "etcd://r%zz:SECRET@h",
            "etcd://root:SECRET%C3@h",
            "etcds://root:SECRET@h/?cacert=%a\u{e9}",
        ] {
            let e = parse(bad, "shown").unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Config, "{bad}");
            assert!(e.message().contains("percent-encoded"), "{e}");
            assert!(!e.to_string().contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn endpoints_split_into_host_and_port() {
        let p = parse("etcd://a,b:1,[::1],[fe80::2]:7", "x").unwrap();
        let eps: Vec<_> = p.endpoints.iter().map(|e| endpoint(e)).collect();
        let want = [("a", 2379), ("b", 1), ("::1", 2379), ("fe80::2", 7)];
        assert_eq!(eps.len(), want.len());
        for (ep, (host, port)) in eps.iter().zip(want) {
            assert_eq!((ep.host.as_str(), ep.port), (host, port));
        }
    }

    #[test]
    fn prefix_ranges_end_after_the_prefix() {
        assert_eq!(prefix_end("cosid/slot/a/"), b"cosid/slot/a0");
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80");
    }

    #[test]
    fn cacert_that_cannot_be_read_is_a_config_error_naming_it() {
        let url = StoreUrl::parse("etcds://u:SECRET@h/?cacert=/nonexistent/ca.pem").unwrap();
        let e = EtcdStore::open(&url).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Config, "{e}");
        assert!(e.message().contains("/nonexistent/ca.pem"), "{e}");
        assert!(!format!("{e} {e:?}").contains("SECRET"), "{e}");
    }

    fn floors(store: &EtcdStore, ns: &str) -> Vec<(u32, i64)> {
        let mut got: Vec<(u32, i64)> = store
            .snapshot(ns)
            .unwrap()
            .slots
            .slots
            .iter()
            .map(|r| (r.value.slot, r.value.next_floor))
            .collect();
        got.sort_unstable();
        got
    }

    fn put_slot(store: &EtcdStore, ns: &str, slot: u32, next_floor: i64) {
        let expected = store.read_slot(ns, slot).unwrap().1.map(|v| v.version);
        let record = SlotRecord {
            next_floor,
            ..SlotRecord::vacant(slot)
        };
        assert!(store
            .cas_slot(ns, SlotWrite::new(expected, &record))
            .unwrap()
            .is_some());
    }

    #[test]
    fn versions_carry_the_lineage_generation_and_the_revision() {
        for (generation, revision) in [(1, 1), (2, 12_345), (MAX_GENERATION, REVISION_MASK as i64)]
        {
            let v = pack(generation, revision).unwrap();
            assert_eq!(unpack(v), (generation, revision));
        }
        // No revision etcd gives a key, one beyond the bits, no generation this gives.
        for (generation, revision) in [
            (1, 0),
            (1, -1),
            (1, 1 << REVISION_BITS),
            (1, i64::MAX),
            (0, 5),
            (MAX_GENERATION + 1, 5),
        ] {
            assert_eq!(pack(generation, revision), None, "{generation} {revision}");
        }
        let lineage = uuid::Uuid::new_v4().to_string().into_bytes();
        let g = generation(Some(&lineage)).unwrap();
        assert_eq!(
            generation(Some(&lineage)),
            Some(g),
            "one generation per lineage"
        );
        assert_eq!(lineage_of(g), Some(Some(lineage.clone())));
        let absent = generation(None).unwrap();
        assert_ne!(absent, g);
        assert_eq!(lineage_of(absent), Some(None));
        assert_eq!(lineage_of(0), None);
        assert_eq!(lineage_of(MAX_GENERATION), None);
        // A version of a generation never given, or of revision 0, is sent as nothing.
        assert_eq!(Guard::of(Some(pack(MAX_GENERATION, 7).unwrap())), None);
        assert_eq!(Guard::of(Some(g << REVISION_BITS)), None);
        assert_eq!(
            Guard::of(Some(pack(g, 7).unwrap())),
            Some(Guard::Version {
                revision: 7,
                lineage: Some(lineage)
            })
        );
        assert_eq!(Guard::of(None), Some(Guard::Create));
    }

    /// The value of the lineage key, read directly.
    fn lineage_now(store: &EtcdStore) -> Option<Vec<u8>> {
        let body = store
            .call(
                "reading",
                "/v3/kv/range",
                json!({ "key": b64(LINEAGE_KEY.as_bytes()) }),
            )
            .unwrap();
        let read: RangeAnswer = gateway::parse(&body).unwrap();
        read.kvs().unwrap().into_iter().next().map(|kv| kv.value)
    }

    /// The first write into an empty store gives it a lineage, and the version it returns
    /// names it. A version of the right revision under any other lineage (one this process
    /// never saw, another store's, "no lineage") writes nothing, alone or among several writes;
    /// the version handed out does.
    #[test]
    fn a_version_under_another_lineage_matches_nothing() {
        let server = cosid_testkit::Server::etcd();
        let url = StoreUrl::parse(&server.url()).unwrap();
        let store = EtcdStore::open_with_timeout(&url, Duration::from_secs(20)).unwrap();
        let ns = "lineages";
        assert_eq!(lineage_now(&store), None);
        let v = store
            .cas_slot(ns, SlotWrite::new(None, &SlotRecord::vacant(0)))
            .unwrap()
            .unwrap();
        let lineage = lineage_now(&store).expect("the first write gave the store a lineage");
        let (g, revision) = unpack(v);
        assert_eq!(lineage_of(g), Some(Some(lineage.clone())));
        assert_eq!(store.read_slot(ns, 0).unwrap().1.unwrap().version, v);

        let other = generation(Some(b"another store's lineage")).unwrap();
        let absent = generation(None).unwrap();
        let next = SlotRecord {
            next_floor: 5,
            ..SlotRecord::vacant(0)
        };
        for stale in [
            pack(MAX_GENERATION, revision).unwrap(),
            pack(other, revision).unwrap(),
            pack(absent, revision).unwrap(),
            revision as u64,
        ] {
            let got = store.cas_slot(ns, SlotWrite::new(Some(stale), &next));
            assert_eq!(got.unwrap(), None, "{stale:#x}");
            let got = store.cas_first_slot(ns, &[SlotWrite::new(Some(stale), &next)]);
            assert_eq!(got.unwrap(), None, "{stale:#x}");
        }
        assert_eq!(store.read_slot(ns, 0).unwrap().1.unwrap().version, v);
        let ns_record = NamespaceRecord {
            limit: 2,
            tolerance_ms: 1,
            not_before_ms: 0,
            layout: None,
            ttl_ms: None,
        };
        let nv = store
            .cas_namespace(ns, NamespaceWrite::new(None, &ns_record))
            .unwrap()
            .unwrap();
        let (_, ns_revision) = unpack(nv);
        let stale = pack(other, ns_revision).unwrap();
        let got = store.cas_namespace(ns, NamespaceWrite::new(Some(stale), &ns_record));
        assert_eq!(got.unwrap(), None);
        assert_eq!(store.snapshot(ns).unwrap().namespace.unwrap().version, nv);

        // Among several: the stale write is passed over, the next one (a new slot) made.
        let stale = pack(other, revision).unwrap();
        let (i, v1) = store
            .cas_first_slot(
                ns,
                &[
                    SlotWrite::new(Some(stale), &next),
                    SlotWrite::new(None, &SlotRecord::vacant(1)),
                ],
            )
            .unwrap()
            .unwrap();
        assert_eq!((i, unpack(v1).0), (1, g));
        let v = store
            .cas_slot(ns, SlotWrite::new(Some(v), &next))
            .unwrap()
            .expect("the version handed out writes");
        assert_eq!(unpack(v).0, g);
    }

    /// A store whose lineage key is gone (a store written before lineages): a read's versions
    /// name "no lineage"; the write with one creates a lineage in the same transaction and
    /// returns a version under it; the versions read before no longer match.
    #[test]
    fn a_write_under_no_lineage_creates_one() {
        let server = cosid_testkit::Server::etcd();
        let url = StoreUrl::parse(&server.url()).unwrap();
        let store = EtcdStore::open_with_timeout(&url, Duration::from_secs(20)).unwrap();
        let ns = "no-lineage";
        for slot in 0..2 {
            put_slot(&store, ns, slot, 1);
        }
        let first = lineage_now(&store).unwrap();
        let deleted = json!({ "key": b64(LINEAGE_KEY.as_bytes()) });
        store
            .call("deleting", "/v3/kv/deleterange", deleted)
            .unwrap();
        let read = |slot| store.read_slot(ns, slot).unwrap().1.unwrap().version;
        let (v0, v1) = (read(0), read(1));
        let absent = generation(None).unwrap();
        assert_eq!((unpack(v0).0, unpack(v1).0), (absent, absent));
        let next = SlotRecord {
            next_floor: 9,
            ..SlotRecord::vacant(0)
        };
        let v = store
            .cas_slot(ns, SlotWrite::new(Some(v0), &next))
            .unwrap()
            .expect("a version read under no lineage writes while there is none");
        let second = lineage_now(&store).expect("the write created a lineage");
        assert_ne!(second, first);
        assert_eq!(lineage_of(unpack(v).0), Some(Some(second)));
        let next1 = SlotRecord {
            next_floor: 9,
            ..SlotRecord::vacant(1)
        };
        let got = store.cas_slot(ns, SlotWrite::new(Some(v1), &next1));
        assert_eq!(
            got.unwrap(),
            None,
            "read under no lineage, and the store has one now"
        );
        assert_eq!(read(0), v);
    }

    /// Snapshots after the first transfer only the slots changed since; what they give is the
    /// store's state all the same: a changed slot, a new one, a slot key deleted behind the
    /// store's back, and a store that lost its data and restarted its revisions (whose keys
    /// carry revisions the earlier read had seen, and as many of them).
    #[test]
    fn snapshots_follow_changes_deletions_and_a_store_restarted_empty() {
        let server = cosid_testkit::Server::etcd();
        let url = StoreUrl::parse(&server.url()).unwrap();
        let store = EtcdStore::open_with_timeout(&url, Duration::from_secs(20)).unwrap();
        let ns = "incremental";
        for slot in 0..4 {
            put_slot(&store, ns, slot, 100 + i64::from(slot));
        }
        for n in 0..30 {
            put_slot(&store, ns, 0, 200 + n);
        }
        let full = floors(&store, ns);
        assert_eq!(full, [(0, 229), (1, 101), (2, 102), (3, 103)]);
        assert_eq!(floors(&store, ns), full, "a snapshot with nothing changed");

        put_slot(&store, ns, 2, 302);
        put_slot(&store, ns, 4, 304);
        assert_eq!(
            floors(&store, ns),
            [(0, 229), (1, 101), (2, 302), (3, 103), (4, 304)]
        );

        let deleted = json!({ "key": b64(slot_key(ns, 1).as_bytes()) });
        store
            .call("deleting", "/v3/kv/deleterange", deleted)
            .unwrap();
        assert_eq!(floors(&store, ns), [(0, 229), (2, 302), (3, 103), (4, 304)]);

        // The same keys again, with revisions below the last read's, then enough writes
        // elsewhere to bring the store's revision past it.
        server.restart_empty();
        for slot in [0, 2, 3, 4] {
            put_slot(&store, ns, slot, 900 + i64::from(slot));
        }
        let record = NamespaceRecord {
            limit: 8,
            tolerance_ms: 1,
            not_before_ms: 0,
            layout: None,
            ttl_ms: None,
        };
        let mut version = None;
        for _ in 0..60 {
            version = store
                .cas_namespace(ns, NamespaceWrite::new(version, &record))
                .unwrap();
            assert!(version.is_some());
        }
        assert_eq!(floors(&store, ns), [(0, 900), (2, 902), (3, 903), (4, 904)]);
    }

    /// With authentication on: the URL's user gets a token and uses it; a token the server no
    /// longer takes (authentication was turned off and on since it was given) is replaced and the request sent
    /// again; a store without a user, or with a wrong password, gets a `Store` error that does
    /// not show the password.
    #[test]
    fn authenticates_and_renews_a_refused_token() {
        let server = cosid_testkit::Server::etcd();
        let url = server.url();
        let open = |url: &str| {
            EtcdStore::open_with_timeout(&StoreUrl::parse(url).unwrap(), Duration::from_secs(20))
                .unwrap()
        };
        let plain = open(&url);
        for (path, body) in [
            ("/v3/auth/role/add", json!({ "name": "root" })),
            (
                "/v3/auth/user/add",
                json!({ "name": "root", "password": "pw-SECRET" }),
            ),
            (
                "/v3/auth/user/grant",
                json!({ "user": "root", "role": "root" }),
            ),
            ("/v3/auth/enable", json!({})),
        ] {
            plain.call("setting up", path, body).unwrap();
        }
        let with_user = url.replacen("etcd://", "etcd://root:pw-SECRET@", 1);
        let authed = open(&with_user);
        let ns = "auth";
        assert!(authed
            .cas_slot(ns, SlotWrite::new(None, &SlotRecord::vacant(0)))
            .unwrap()
            .is_some());
        assert_eq!(authed.snapshot(ns).unwrap().slots.slots.len(), 1);

        // Authentication off and on again: every token given before is forgotten.
        authed
            .call("turning auth off", "/v3/auth/disable", json!({}))
            .unwrap();
        plain
            .call("turning auth on", "/v3/auth/enable", json!({}))
            .unwrap();
        assert_eq!(authed.snapshot(ns).unwrap().slots.slots.len(), 1);
        assert!(authed.read_slot(ns, 0).unwrap().1.is_some());

        for (store, why) in [
            (plain, "user name is empty"),
            (
                open(&url.replacen("etcd://", "etcd://root:wrong-SECRET@", 1)),
                "authentication failed",
            ),
        ] {
            let e = store.snapshot(ns).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Store, "{e}");
            assert!(e.message().contains(why), "{e}");
            assert!(!format!("{e} {e:?} {store:?}").contains("SECRET"), "{e}");
        }
    }

    /// `etcds://` against a real etcd serving TLS (its certificate, for 127.0.0.1, signed by a
    /// throwaway CA made with `openssl`): works with `?cacert=` naming the CA; without it (the
    /// system's roots do not know that CA) and over plain `etcd://` it is a `Store` error.
    #[test]
    fn etcds_checks_the_server_against_cacert() {
        use std::process::{Command, Stdio};
        let dir = tempfile::tempdir().unwrap();
        let path = |f: &str| dir.path().join(f).display().to_string();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .output()
                .expect("`openssl` runs (Debian package `openssl`)");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        std::fs::write(
            path("ext"),
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let key = ["-newkey", "rsa:2048", "-nodes", "-days", "2"];
        openssl(
            &[
                &["req", "-x509"][..],
                &key,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-subj",
                    "/CN=cosid-test-ca",
                ],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"][..],
                &key,
                &[
                    "-keyout",
                    "s.key",
                    "-out",
                    "s.csr",
                    "-subj",
                    "/CN=127.0.0.1",
                ],
            ]
            .concat(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            "s.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext",
            "-out",
            "s.pem",
        ]);
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (port, peer) = (free(), free());
        let client = format!("https://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer}");
        let mut etcd = Command::new("etcd")
            .args(["--name", "tls", "--data-dir", &path("data")])
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("tls={peer}")])
            .args(["--cert-file", &path("s.pem"), "--key-file", &path("s.key")])
            .args(["--log-level", "error", "--logger", "zap"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("`etcd` runs (Debian package `etcd-server`)");
        let open = |url: String| {
            EtcdStore::open_with_timeout(&StoreUrl::parse(&url).unwrap(), Duration::from_secs(5))
                .unwrap()
        };
        let good = open(format!(
            "etcds://127.0.0.1:{port}/?cacert={}",
            path("ca.pem")
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let outcome = loop {
            match good.cas_slot("tls", SlotWrite::new(None, &SlotRecord::vacant(0))) {
                Ok(v) => break Ok(v),
                Err(e) if std::time::Instant::now() > deadline => break Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        let unknown_ca = open(format!("etcds://127.0.0.1:{port}")).snapshot("tls");
        let plain = open(format!("etcd://127.0.0.1:{port}")).snapshot("tls");
        let snapshot = good.snapshot("tls");
        let _ = etcd.kill();
        let _ = etcd.wait();
        assert!(outcome.expect("etcds:// with cacert= works").is_some());
        assert_eq!(snapshot.unwrap().slots.slots.len(), 1);
        for e in [unknown_ca.unwrap_err(), plain.unwrap_err()] {
            assert_eq!(e.kind(), crate::error::ErrorKind::Store, "{e}");
        }
    }
}
