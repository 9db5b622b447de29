//! The runtime's configuration: the YAML (or JSON) schema of the README's Configuration
//! section, parsed with every error naming the key, the value and the fix.
//!
//! ```yaml
//! cosid:
//!   namespace: orders
//!   max-wait: 3s               # longest a call to next() waits
//!   fork: new-slot             # or fail: what an inherited runtime does in a fork() child
//!   snowflake: { epoch: 2019-12-24T16:00:00Z, timestamp-unit: ms, timestamp-bits: 41, node-bits: 10, sequence-bits: 12 }
//!   machine:
//!     lease: { store: sqlite:///var/lib/cosid/slots.db, ttl: 30s, tolerance: 1s, bits: 10,
//!              owner-key: "${HOSTNAME}:8080", preferred-slot: "${POD_ORDINAL:-}", acquire-timeout: 30s }
//!     # or
//!     static: { slot: "${POD_ORDINAL}", state-file: /var/lib/cosid/state, ahead: 10s, not-before: 2026-12-01T00:00:00Z }
//! ```
//!
//! `${VAR}` and `${VAR:-default}` expand from the environment inside the string values of
//! configuration text and files ([`Config::from_yaml`], [`Config::from_path`]), after YAML parsing,
//! so an expansion can never change the document's structure. An already structured value
//! ([`Config::from_value`], which the Python and Node bindings use for their dictionaries and
//! objects) is taken literally: a value that came from elsewhere (a tenant name used as a
//! namespace) cannot read the environment. Unknown keys are refused.
//!
//! Configuration text is bounded before it is parsed: at most [`MAX_CONFIG_BYTES`] bytes and
//! [`MAX_CONFIG_DEPTH`] levels of nested brackets, so a hostile document fails at once.

use crate::error::{Error, Result};
pub use crate::fork::ForkPolicy;
use crate::layout::{Layout, TimeUnit, COSID_EPOCH_MS};
use serde_yaml_ng::{Mapping, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A complete, validated configuration.
///
/// ```
/// let config = cosid_core::Config::from_yaml(
///     "cosid: {namespace: orders, machine: {lease: {store: 'sqlite:///var/lib/cosid/slots.db', ttl: 30s}}}",
/// )?;
/// assert_eq!(config.namespace, "orders");
/// # Ok::<(), cosid_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The namespace whose slots this runtime leases.
    pub namespace: String,
    /// The id layout.
    pub layout: Layout,
    /// The longest one call to `next()` waits before it returns an error.
    pub max_wait: Duration,
    /// Where the slot comes from.
    pub machine: Machine,
    /// What an inherited runtime does in a `fork()` child (`cosid.fork`).
    pub fork: ForkPolicy,
}

/// Where a runtime's slot comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Machine {
    /// Leased from a store (the default).
    Lease(LeaseConfig),
    /// Fixed by the deployment, with a local state file.
    Static(StaticConfig),
}

/// `cosid.machine.lease`. `Debug` shows the store URL without its password.
#[derive(Clone, PartialEq)]
pub struct LeaseConfig {
    /// Store URL.
    pub store: String,
    /// Lease duration.
    pub ttl: Duration,
    /// How far past expiry a holder may still issue (recorded per namespace).
    pub tolerance: Duration,
    /// `2^bits` slots; at most the layout's node bits.
    pub bits: u8,
    /// The owner key (default `host:pid`).
    pub owner_key: Option<String>,
    /// A slot to prefer if free.
    pub preferred_slot: Option<u32>,
    /// How long start-up retries an exhausted namespace or unreachable store.
    pub acquire_timeout: Duration,
}

/// `cosid.machine.static`.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticConfig {
    /// The slot.
    pub slot: u32,
    /// The state file that keeps the ceiling across restarts.
    pub state_file: Option<PathBuf>,
    /// How far ahead of now each written ceiling is.
    pub ahead: Duration,
    /// The floor while the state file does not exist yet, ms.
    pub not_before_ms: Option<i64>,
}

impl std::fmt::Debug for LeaseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseConfig")
            .field("store", &redacted_store(&self.store))
            .field("ttl", &self.ttl)
            .field("tolerance", &self.tolerance)
            .field("bits", &self.bits)
            .field("owner_key", &self.owner_key)
            .field("preferred_slot", &self.preferred_slot)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish()
    }
}

/// A store URL as messages may show it: redacted when it parses, its scheme at most otherwise.
fn redacted_store(url: &str) -> String {
    match crate::store::StoreUrl::parse(url) {
        Ok(u) => u.redacted(),
        Err(_) => "(a store URL that does not parse; not shown)".into(),
    }
}

impl LeaseConfig {
    /// The checks the parser makes on a lease's values, for a configuration changed after
    /// parsing (command-line flags, code): a too short ttl, an acquire-timeout of zero.
    pub fn check(&self) -> Result<()> {
        if let Some(key) = &self.owner_key {
            crate::bounds::check_len(
                "cosid.machine.lease.owner-key",
                key,
                crate::bounds::MAX_OWNER_KEY_BYTES,
            )?;
        }
        if self.ttl < Duration::from_millis(30) {
            return Err(Error::config(format!(
                "cosid.machine.lease.ttl {} is too short; use at least 30ms (30s is the default)",
                crate::time::format_duration(self.ttl)
            )));
        }
        for (key, d) in [
            ("ttl", self.ttl),
            ("tolerance", self.tolerance),
            ("acquire-timeout", self.acquire_timeout),
        ] {
            if d > MAX_DURATION {
                return Err(Error::config(format!(
                    "cosid.machine.lease.{key} {} is longer than a year; use a shorter one",
                    crate::time::format_duration(d)
                )));
            }
        }
        Ok(())
    }
}

/// The longest duration a setting takes (the duration parser's bound).
const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            store: String::new(),
            ttl: Duration::from_secs(30),
            tolerance: Duration::from_secs(1),
            bits: 10,
            owner_key: None,
            preferred_slot: None,
            acquire_timeout: Duration::from_secs(30),
        }
    }
}

/// The default namespace.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The default `max-wait`.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(3);
/// The largest configuration text accepted, in bytes (a real one is well under 4 KiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// The deepest nesting of brackets (`[`, `{`) accepted in configuration text (the schema needs 4).
pub const MAX_CONFIG_DEPTH: usize = 64;
/// The most opening brackets (`[`, `{`) accepted anywhere in configuration text, quoted or not:
/// a bound on the nesting that no quoting can hide from [`MAX_CONFIG_DEPTH`]'s count.
pub const MAX_CONFIG_BRACKETS: usize = 1024;

/// The host-wide directory of the embedded default store. An administrator creates it once, for
/// every service user of the host that must share slots (`install -d -m 2770 -g cosid
/// /var/lib/cosid`, and those users in group `cosid`).
pub const HOST_STORE_DIR: &str = "/var/lib/cosid";

/// The embedded store's default location, which decides who is coordinated (only processes
/// that open the same file are):
/// 1. `/var/lib/cosid/slots.db` when `/var/lib/cosid` is a directory this process may write:
///    every process of the host whose user may write there;
/// 2. else `$XDG_STATE_HOME/cosid/slots.db`, else `~/.local/state/cosid/slots.db`: the
///    processes of this user on this host (in this container) only. Two users, or two
///    containers, each get a file of their own and are NOT coordinated with each other.
pub fn default_store_path() -> Result<PathBuf> {
    default_store_path_with(Path::new(HOST_STORE_DIR))
}

fn default_store_path_with(host: &Path) -> Result<PathBuf> {
    if host.is_dir() && writable_dir(host) {
        return Ok(host.join("slots.db"));
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("cosid").join("slots.db"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/cosid/slots.db")),
        None => Err(Error::config(
            "neither XDG_STATE_HOME nor HOME is set, so there is no default store path; set one, \
             or configure cosid.machine.lease.store",
        )),
    }
}

impl Config {
    /// The configuration used when there is none: the embedded SQLite store at its default path.
    pub fn embedded_default() -> Result<Config> {
        Ok(Config {
            namespace: DEFAULT_NAMESPACE.into(),
            layout: Layout::MILLIS,
            max_wait: DEFAULT_MAX_WAIT,
            machine: Machine::Lease(LeaseConfig {
                store: format!("sqlite://{}", default_store_path()?.display()),
                ..LeaseConfig::default()
            }),
            fork: ForkPolicy::default(),
        })
    }

    /// Parses a YAML (or JSON) document, expanding `${VAR}` and `${VAR:-default}` in its string
    /// values. Text over [`MAX_CONFIG_BYTES`] or nested deeper than [`MAX_CONFIG_DEPTH`] is
    /// refused before it is parsed.
    pub fn from_yaml(text: &str) -> Result<Config> {
        check_text_bounds(text)?;
        let mut doc: Value = serde_yaml_ng::from_str(text).map_err(|e| {
            Error::config(format!(
                "the configuration is not valid YAML or JSON: {}",
                yaml_error_text(&e.to_string())
            ))
        })?;
        expand_tree(&mut doc, "")?;
        Config::from_value(&doc)
    }

    /// Reads and parses a configuration file.
    pub fn from_path(path: &Path) -> Result<Config> {
        // Opened without blocking and read to at most one byte past the limit, so a FIFO,
        // /dev/zero or a huge file fails at once (crate::bounds::read_file).
        let bytes = crate::bounds::read_file(path, MAX_CONFIG_BYTES as u64).map_err(|e| {
            let message = format!("cannot read configuration file '{}': {e}", path.display());
            match e {
                crate::bounds::FileError::Io(io) => Error::config(message).with_source(io),
                _ => Error::config(message),
            }
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            Error::config(format!(
                "configuration file '{}' is not UTF-8 text (bad byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ))
        })?;
        Config::from_yaml(&text)
            .map_err(|e| Error::config(format!("{} (in '{}')", e.message(), path.display())))
    }

    /// A configuration given as one string, as the Python and Node bindings take it: a path when
    /// it is one line (surrounding whitespace ignored) naming an existing file, and otherwise a
    /// YAML or JSON document. An empty string, or one word that names no file (most likely a
    /// mistyped path), is a configuration error that says so; a word that could be a store URL
    /// is not quoted in it (it may hold a password).
    pub fn from_text(text: &str) -> Result<Config> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(Error::config(
                "the configuration string is empty; pass a YAML or JSON document, a file path, \
                 or nothing for the embedded default",
            ));
        }
        let one_line = !trimmed.contains('\n');
        if one_line && Path::new(trimmed).is_file() {
            return Config::from_path(Path::new(trimmed));
        }
        check_text_bounds(text)?;
        let not_a_file = || {
            format!(
                "{} names no existing file and is not a YAML or JSON document with a top-level \
                 'cosid' key; check the path",
                text_for_message(trimmed)
            )
        };
        if one_line
            && matches!(
                serde_yaml_ng::from_str::<Value>(text),
                Ok(Value::String(_) | Value::Null)
            )
        {
            return Err(Error::config(not_a_file()));
        }
        Config::from_yaml(text).map_err(|e| match one_line {
            true => Error::config(format!(
                "{} (read as a YAML or JSON document because {} names no existing file)",
                e.message(),
                text_for_message(trimmed)
            )),
            false => e,
        })
    }

    /// Interprets an already structured document (`serde_yaml_ng::Value`), e.g. built from a
    /// binding's dictionary or object. Its values are taken literally: `${VAR}` is **not**
    /// expanded here (only [`Config::from_yaml`] and [`Config::from_path`] expand, in
    /// configuration text the deployment wrote), so a value from elsewhere cannot read the
    /// environment.
    pub fn from_value(doc: &Value) -> Result<Config> {
        let root = as_map(doc, "the document")?;
        let mut root_keys = Keys::new(root, "");
        let cosid = root_keys.take("cosid").ok_or_else(|| {
            Error::config("the configuration has no top-level 'cosid' key; start it with `cosid:`")
        })?;
        root_keys.finish()?;
        let cosid_map = as_map(cosid, "cosid")?;
        let mut k = Keys::new(cosid_map, "cosid");

        let namespace = match k.take("namespace") {
            Some(v) => scalar_string(v, "cosid.namespace")?,
            None => DEFAULT_NAMESPACE.to_string(),
        };
        if namespace.is_empty() {
            return Err(Error::config(
                "cosid.namespace is empty; give the namespace a name",
            ));
        }
        crate::bounds::check_len(
            "cosid.namespace",
            &namespace,
            crate::bounds::MAX_NAMESPACE_BYTES,
        )?;
        let max_wait = match k.take("max-wait") {
            Some(v) => duration(v, "cosid.max-wait")?,
            None => DEFAULT_MAX_WAIT,
        };
        let fork = match k.take("fork") {
            Some(v) => {
                let name = scalar_string(v, "cosid.fork")?;
                ForkPolicy::from_name(&name).ok_or_else(|| {
                    Error::config(format!(
                        "cosid.fork '{}' is not a fork policy; use new-slot (a forked child takes \
                         a slot of its own on first use) or fail (it fails with Forked)",
                        crate::bounds::quote(&name)
                    ))
                })?
            }
            None => ForkPolicy::default(),
        };
        let layout = match k.take("snowflake") {
            Some(v) => parse_layout(v)?,
            None => Layout::MILLIS,
        };
        let machine = match k.take("machine") {
            Some(v) => parse_machine(v, &layout)?,
            // The default lease, with its bits capped to the layout's node bits (as
            // parse_machine does): a slot above the layout's max_slot would spill into the
            // timestamp bits of the id (found by fuzz/fuzz_targets/parse_config.rs).
            None => {
                let default = LeaseConfig::default();
                Machine::Lease(LeaseConfig {
                    store: format!("sqlite://{}", default_store_path()?.display()),
                    bits: default.bits.min(layout.node_bits()),
                    ..default
                })
            }
        };
        k.finish()?;
        Ok(Config {
            namespace,
            layout,
            max_wait,
            machine,
            fork,
        })
    }
}

fn parse_layout(v: &Value) -> Result<Layout> {
    let mut k = Keys::new(as_map(v, "cosid.snowflake")?, "cosid.snowflake");
    let preset = match k.take("preset") {
        Some(v) => Some(scalar_string(v, "cosid.snowflake.preset")?),
        None => None,
    };
    let base = match preset.as_deref() {
        None | Some("millis") => Layout::MILLIS,
        Some("seconds") => Layout::SECONDS,
        Some("safe-js-millis") => Layout::SAFE_JS_MILLIS,
        Some("safe-js-seconds") => Layout::SAFE_JS_SECONDS,
        Some(other) => {
            return Err(Error::config(format!(
                "cosid.snowflake.preset '{other}' is not a preset; use millis, seconds, safe-js-millis or safe-js-seconds"
            )))
        }
    };
    let epoch_ms = match k.take("epoch") {
        Some(v) => crate::time::parse_rfc3339(&scalar_string(v, "cosid.snowflake.epoch")?)
            .map_err(|e| Error::config(format!("cosid.snowflake.epoch: {}", e.message())))?,
        None => COSID_EPOCH_MS,
    };
    let unit = match k.take("timestamp-unit") {
        Some(v) => {
            let name = scalar_string(v, "cosid.snowflake.timestamp-unit")?;
            TimeUnit::from_name(&name).ok_or_else(|| {
                Error::config(format!(
                    "cosid.snowflake.timestamp-unit '{}' is not a unit; use ms or s",
                    crate::bounds::quote(&name)
                ))
            })?
        }
        None => base.unit(),
    };
    // Each width's own range (the layout then checks that they add up to at most 63).
    let bits = |k: &mut Keys, key: &str, default: u8, range: (i64, i64)| -> Result<u8> {
        match k.take(key) {
            Some(v) => {
                let n = integer(v, &format!("cosid.snowflake.{key}"))?;
                if n < range.0 || n > range.1 {
                    return Err(Error::config(format!(
                        "cosid.snowflake.{key} {n} is out of range; use {} to {}",
                        range.0, range.1
                    )));
                }
                Ok(n as u8)
            }
            None => Ok(default),
        }
    };
    let ts = bits(&mut k, "timestamp-bits", base.timestamp_bits(), (8, 61))?;
    let node = bits(&mut k, "node-bits", base.node_bits(), (1, 20))?;
    let seq = bits(&mut k, "sequence-bits", base.sequence_bits(), (1, 30))?;
    let js_safe = match k.take("js-safe") {
        Some(v) => boolean(v, "cosid.snowflake.js-safe")?,
        None => base.is_js_safe(),
    };
    k.finish()?;
    Layout::new(epoch_ms, unit, ts, node, seq, js_safe)
        .map_err(|e| Error::config(format!("cosid.snowflake: {}", e.message())))
}

fn parse_machine(v: &Value, layout: &Layout) -> Result<Machine> {
    let mut k = Keys::new(as_map(v, "cosid.machine")?, "cosid.machine");
    let lease = k.take("lease");
    let stat = k.take("static");
    k.finish()?;
    match (lease, stat) {
        (Some(_), Some(_)) => Err(Error::config(
            "cosid.machine has both 'lease' and 'static'; keep one of them",
        )),
        (None, Some(s)) => parse_static(s, layout).map(Machine::Static),
        (Some(l), None) => parse_lease(l, layout).map(Machine::Lease),
        (None, None) => Err(Error::config(
            "cosid.machine has neither 'lease' nor 'static'; add one (or drop 'machine' for the embedded default)",
        )),
    }
}

fn parse_lease(v: &Value, layout: &Layout) -> Result<LeaseConfig> {
    let p = "cosid.machine.lease";
    let mut k = Keys::new(as_map(v, p)?, p);
    let store = match k.take("store") {
        Some(v) => {
            let s = scalar_string(v, "cosid.machine.lease.store")?;
            crate::store::StoreUrl::parse(&s).map_err(|e| {
                Error::config(format!("cosid.machine.lease.store: {}", e.message()))
            })?;
            s
        }
        None => format!("sqlite://{}", default_store_path()?.display()),
    };
    let mut c = LeaseConfig {
        store,
        ..LeaseConfig::default()
    };
    if let Some(v) = k.take("ttl") {
        c.ttl = duration(v, "cosid.machine.lease.ttl")?;
    }
    if let Some(v) = k.take("tolerance") {
        c.tolerance = duration(v, "cosid.machine.lease.tolerance")?;
    }
    if let Some(v) = k.take("bits") {
        let n = integer(v, "cosid.machine.lease.bits")?;
        if n < 0 || n > layout.node_bits() as i64 {
            return Err(Error::config(format!(
                "cosid.machine.lease.bits {n} is larger than the layout's node-bits ({}); use 0 to {}",
                layout.node_bits(),
                layout.node_bits()
            )));
        }
        c.bits = n as u8;
    } else {
        c.bits = c.bits.min(layout.node_bits());
    }
    if let Some(v) = k.take("owner-key") {
        let key = scalar_string(v, "cosid.machine.lease.owner-key")?;
        if !key.is_empty() {
            c.owner_key = Some(key);
        }
    }
    if let Some(v) = k.take("preferred-slot") {
        c.preferred_slot = optional_integer(v, "cosid.machine.lease.preferred-slot")?
            .map(|n| slot_in_range(n, 1 << c.bits, "cosid.machine.lease.preferred-slot"))
            .transpose()?;
    }
    if let Some(v) = k.take("acquire-timeout") {
        c.acquire_timeout = duration(v, "cosid.machine.lease.acquire-timeout")?;
    } else {
        c.acquire_timeout = c.ttl;
    }
    k.finish()?;
    c.check()?;
    Ok(c)
}

fn parse_static(v: &Value, layout: &Layout) -> Result<StaticConfig> {
    let p = "cosid.machine.static";
    let mut k = Keys::new(as_map(v, p)?, p);
    let slot = match k.take("slot") {
        Some(v) => optional_integer(v, "cosid.machine.static.slot")?.ok_or_else(|| {
            Error::config("cosid.machine.static.slot is empty; set it (e.g. to the pod ordinal)")
        })?,
        None => {
            return Err(Error::config(
                "cosid.machine.static.slot is missing; static slots need a slot",
            ))
        }
    };
    let slot = slot_in_range(
        slot,
        layout.max_slot() as i64 + 1,
        "cosid.machine.static.slot",
    )?;
    let state_file = match k.take("state-file") {
        Some(v) => {
            let s = scalar_string(v, "cosid.machine.static.state-file")?;
            (!s.is_empty()).then(|| PathBuf::from(s))
        }
        None => None,
    };
    let ahead = match k.take("ahead") {
        Some(v) => duration(v, "cosid.machine.static.ahead")?,
        None => Duration::from_secs(10),
    };
    if ahead < Duration::from_millis(10) {
        return Err(Error::config(
            "cosid.machine.static.ahead must be at least 10ms (10s is the default)",
        ));
    }
    let not_before_ms = match k.take("not-before") {
        Some(v) => {
            let s = scalar_string(v, "cosid.machine.static.not-before")?;
            if s.is_empty() {
                None
            } else {
                Some(crate::time::parse_rfc3339(&s).map_err(|e| {
                    Error::config(format!("cosid.machine.static.not-before: {}", e.message()))
                })?)
            }
        }
        None => None,
    };
    k.finish()?;
    Ok(StaticConfig {
        slot,
        state_file,
        ahead,
        not_before_ms,
    })
}

fn slot_in_range(n: i64, limit: i64, key: &str) -> Result<u32> {
    if n < 0 || n >= limit {
        return Err(Error::config(format!(
            "{key} {n} is out of range; use 0 to {}",
            limit - 1
        )));
    }
    Ok(n as u32)
}

/// The keys of one mapping, taken one by one; what is left over is refused as unknown.
struct Keys<'a> {
    map: &'a Mapping,
    path: &'a str,
    taken: Vec<String>,
}

impl<'a> Keys<'a> {
    fn new(map: &'a Mapping, path: &'a str) -> Self {
        Keys {
            map,
            path,
            taken: Vec::new(),
        }
    }

    fn take(&mut self, key: &str) -> Option<&'a Value> {
        self.taken.push(key.to_string());
        self.map.get(key)
    }

    fn finish(self) -> Result<()> {
        for key in self.map.keys() {
            let name = match key {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::Null => "null".to_string(),
                other => format!("({})", type_name(other)),
            };
            // A key is shown, so a URL or connection string pasted as a key is not.
            let shown = if name.contains(['@', '=', ' ']) || name.contains("//") {
                "(a key that looks like a URL or connection string, not shown)".to_string()
            } else {
                name.clone()
            };
            if !self.taken.contains(&name) {
                let full = if self.path.is_empty() {
                    shown
                } else {
                    format!("{}.{shown}", self.path)
                };
                let hint = self
                    .taken
                    .iter()
                    .filter(|k| edit_distance(k, &name) <= 2)
                    .map(|k| format!(" (did you mean '{k}'?)"))
                    .next()
                    .unwrap_or_else(|| format!("; known keys: {}", self.taken.join(", ")));
                return Err(Error::config(format!("unknown key '{full}'{hint}")));
            }
        }
        Ok(())
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

fn as_map<'a>(v: &'a Value, key: &str) -> Result<&'a Mapping> {
    match v {
        Value::Mapping(m) => Ok(m),
        other => Err(Error::config(format!(
            "{key} must be a mapping, not {}",
            type_name(other)
        ))),
    }
}

/// A scalar as text (`${VAR}` was expanded before, in configuration text only).
fn scalar_string(v: &Value, key: &str) -> Result<String> {
    Ok(match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => {
            return Err(Error::config(format!(
                "{key} must be a single value, not {}",
                type_name(other)
            )))
        }
    })
}

/// Refuses configuration text too large or too deeply nested to parse quickly
/// ([`Config::from_yaml`] calls it first; call it before parsing configuration text any other
/// way). The depth counts
/// the brackets outside quoted strings and comments (an unbalanced closing one counts nothing);
/// as a quote the parser does not see as one could hide brackets from that count, the opening
/// brackets of the whole text are bounded too.
pub fn check_text_bounds(text: &str) -> Result<()> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(Error::config(format!(
            "the configuration is {} bytes; the limit is {MAX_CONFIG_BYTES} bytes (1 MiB)",
            text.len()
        )));
    }
    let (mut depth, mut quote, mut comment, mut prev) = (0usize, None::<u8>, false, b'\n');
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if comment {
            comment = c != b'\n';
        } else if let Some(q) = quote {
            if c == b'\\' && q == b'"' {
                i += 1; // an escaped character
            } else if c == q {
                quote = None;
            }
        } else {
            match c {
                b'"' | b'\'' if !prev.is_ascii_alphanumeric() => quote = Some(c),
                b'#' if prev.is_ascii_whitespace() => comment = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_CONFIG_DEPTH {
                        return Err(Error::config(format!(
                            "the configuration nests brackets deeper than {MAX_CONFIG_DEPTH} \
                             levels (at byte {i}); the limit is {MAX_CONFIG_DEPTH}"
                        )));
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        prev = c;
        i += 1;
    }
    let brackets = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
    if brackets > MAX_CONFIG_BRACKETS {
        return Err(Error::config(format!(
            "the configuration holds {brackets} opening brackets ('[' or '{{'); the limit is \
             {MAX_CONFIG_BRACKETS}"
        )));
    }
    Ok(())
}

/// How a message may show configuration text that was not understood: quoted when it is short
/// and holds nothing a credential could be in (`@`, `:`, `=`, `//`, `?`, `%`, whitespace),
/// otherwise by its length only.
pub fn text_for_message(text: &str) -> String {
    let risky = text.contains(['@', ':', '=', '?', '%']) || text.contains("//");
    if text.chars().count() <= 80 && !risky && !text.chars().any(char::is_whitespace) {
        format!("'{}'", text.escape_debug())
    } else {
        format!(
            "a text of {} characters (not shown, as it may hold a password)",
            text.chars().count()
        )
    }
}

/// The YAML parser's message, with its wording for an integer too large for any setting
/// ("invalid type: integer `N` as u128, expected any YAML value") said plainly.
fn yaml_error_text(text: &str) -> String {
    let Some(start) = text.find("invalid type: integer `") else {
        return text.to_string();
    };
    let digits_start = start + "invalid type: integer `".len();
    let Some(len) = text[digits_start..].find('`') else {
        return text.to_string();
    };
    let number = &text[digits_start..digits_start + len];
    let Some(end) = text[digits_start..]
        .find("expected any YAML value")
        .map(|i| digits_start + i + "expected any YAML value".len())
    else {
        return text.to_string();
    };
    format!(
        "{}the number {number} is too large for any setting (the largest is {}){}",
        &text[..start],
        i64::MAX,
        &text[end..]
    )
}

/// Expands `${VAR}` in every string value of a document parsed from configuration text, naming
/// each value by its key path.
fn expand_tree(v: &mut Value, path: &str) -> Result<()> {
    match v {
        Value::String(s) if s.contains("${") => *s = expand_env(s, path)?,
        Value::Mapping(m) => {
            for (k, child) in m.iter_mut() {
                let name = match k {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => "?".to_string(),
                };
                let child_path = if path.is_empty() {
                    name
                } else {
                    format!("{path}.{name}")
                };
                expand_tree(child, &child_path)?;
            }
        }
        Value::Sequence(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                expand_tree(child, &format!("{path}[{i}]"))?;
            }
        }
        Value::Tagged(t) => expand_tree(&mut t.value, path)?,
        _ => {}
    }
    Ok(())
}

/// Expands `${VAR}` and `${VAR:-default}` from the environment. An unset `${VAR}` without a
/// default is an error naming the variable and the key; so is a variable whose value is not
/// UTF-8 (never silently replaced by the default). Messages never echo the value around a
/// reference (it may be a store URL with a password): they give the key and a position.
pub fn expand_env(text: &str, key: &str) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let at = text.len() - rest.len() + start + 1;
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| {
            Error::config(format!(
                "{key}: the '${{' at character {at} of the value has no closing '}}'; write \
                 ${{VAR}} or ${{VAR:-default}} (the value is not shown, as it may hold a password)"
            ))
        })?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(Error::config(format!(
                "{key}: the '${{…}}' at character {at} of the value is not a variable reference; \
                 write ${{VAR}} or ${{VAR:-default}} with VAR made of letters, digits and '_'"
            )));
        }
        let value = match std::env::var(name) {
            Ok(v) => Some(v),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Error::config(format!(
                    "{key}: environment variable {name} is set but its value is not UTF-8; \
                     set it to UTF-8 text"
                )))
            }
        };
        match (value.filter(|v| !v.is_empty() || default.is_none()), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(Error::config(format!(
                    "{key}: environment variable {name} is not set; set it or write ${{{name}:-default}}"
                )))
            }
        }
        // Checked as the value grows: `${BIG}` written many times stops here, not after
        // building a value of gigabytes.
        if out.len() > crate::bounds::MAX_VALUE_BYTES {
            return Err(too_long_expansion(key));
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if out.len() > crate::bounds::MAX_VALUE_BYTES {
        return Err(too_long_expansion(key));
    }
    Ok(out)
}

/// The error of a value longer than [`crate::bounds::MAX_VALUE_BYTES`] once expanded (not
/// quoted: the environment may hold a password).
fn too_long_expansion(key: &str) -> Error {
    Error::config(format!(
        "{key}: the value with its ${{VAR}} expanded is longer than the limit of {} bytes (64 \
         KiB); check the variables it names (the value is not shown, as it may hold a password)",
        crate::bounds::MAX_VALUE_BYTES
    ))
}

fn duration(v: &Value, key: &str) -> Result<Duration> {
    let s = scalar_string(v, key)?;
    crate::time::parse_duration(&s).map_err(|e| Error::config(format!("{key}: {}", e.message())))
}

fn integer(v: &Value, key: &str) -> Result<i64> {
    optional_integer(v, key)?
        .ok_or_else(|| Error::config(format!("{key} is empty; give a whole number")))
}

fn optional_integer(v: &Value, key: &str) -> Result<Option<i64>> {
    if let Value::Number(n) = v {
        return n
            .as_i64()
            .map(Some)
            .ok_or_else(|| Error::config(format!("{key} {n} is not a whole number")));
    }
    let s = scalar_string(v, key)?;
    if s.trim().is_empty() {
        return Ok(None);
    }
    s.trim().parse::<i64>().map(Some).map_err(|_| {
        Error::config(format!(
            "{key} '{}' is not a whole number",
            crate::bounds::quote(&s)
        ))
    })
}

fn boolean(v: &Value, key: &str) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        _ => match scalar_string(v, key)?.as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(Error::config(format!(
                "{key} '{other}' is not true or false"
            ))),
        },
    }
}

/// Whether this process may create files in `dir` (access(2) with the real ids, as a service
/// would open it).
fn writable_dir(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_a_path_when_it_names_a_file_and_a_document_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cosid.yaml");
        std::fs::write(&file, "cosid:\n  namespace: from-file\n").unwrap();
        let padded = format!("  {}\n", file.display());
        assert_eq!(Config::from_text(&padded).unwrap().namespace, "from-file");
        let doc = "cosid:\n  namespace: inline\n";
        assert_eq!(Config::from_text(doc).unwrap().namespace, "inline");
        assert_eq!(
            Config::from_text("{cosid: {namespace: json}}")
                .unwrap()
                .namespace,
            "json"
        );
        for (text, says) in [
            ("", "empty"),
            ("  \n ", "empty"),
            (
                "/etc/cosid/missing.yaml",
                "names no existing file and is not",
            ),
            ("cosid: [", "names no existing file"),
        ] {
            let e = Config::from_text(text).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{text:?}");
            assert!(e.message().contains(says), "{text:?}: {e}");
        }
        // A word that could be a store URL with a password is not quoted back.
        let e = Config::from_text("redis://u:hunter2@h").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn the_default_store_is_host_wide_where_the_host_directory_is_writable() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            default_store_path_with(dir.path()).unwrap(),
            dir.path().join("slots.db")
        );
        let missing = dir.path().join("no-such-dir");
        let per_user = default_store_path_with(&missing).unwrap();
        assert!(
            per_user.ends_with("cosid/slots.db"),
            "{}",
            per_user.display()
        );
        assert!(!per_user.starts_with(&missing));
    }
    use crate::error::ErrorKind;

    fn err(yaml: &str) -> String {
        let e = Config::from_yaml(yaml).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        e.to_string()
    }

    #[test]
    fn the_design_example_parses() {
        std::env::set_var("COSID_TEST_HOST_A", "web-1");
        let c = Config::from_yaml(
            "cosid:\n  namespace: orders\n  snowflake:\n    epoch: 2019-12-24T16:00:00Z\n    timestamp-unit: ms\n    timestamp-bits: 41\n    node-bits: 10\n    sequence-bits: 12\n  machine:\n    lease:\n      store: sqlite:///tmp/x.db\n      ttl: 30s\n      tolerance: 1s\n      bits: 10\n      owner-key: ${COSID_TEST_HOST_A}:8080\n      preferred-slot: ${COSID_TEST_UNSET_ORDINAL:-}\n      acquire-timeout: 30s\n",
        )
        .unwrap();
        assert_eq!(c.namespace, "orders");
        assert_eq!(c.layout, Layout::MILLIS);
        let Machine::Lease(l) = c.machine else {
            panic!()
        };
        assert_eq!(l.owner_key.as_deref(), Some("web-1:8080"));
        assert_eq!(l.preferred_slot, None);
        assert_eq!((l.ttl, l.bits), (Duration::from_secs(30), 10));
    }

    #[test]
    fn json_and_static_parse() {
        let c = Config::from_yaml(
            r#"{"cosid": {"machine": {"static": {"slot": 3, "state-file": "/tmp/s", "ahead": "5s", "not-before": "2026-12-01T00:00:00Z"}}}}"#,
        )
        .unwrap();
        let Machine::Static(s) = c.machine else {
            panic!()
        };
        assert_eq!((s.slot, s.ahead), (3, Duration::from_secs(5)));
        assert_eq!(
            s.not_before_ms,
            Some(crate::time::parse_rfc3339("2026-12-01T00:00:00Z").unwrap())
        );
    }

    #[test]
    fn every_bad_value_names_its_key() {
        let cases = [
            ("cosid: {namespace: [1]}", "cosid.namespace"),
            ("cosid: {max-wait: 3}", "cosid.max-wait"),
            ("cosid: {tll: 3s}", "unknown key 'cosid.tll'"),
            ("cosid: {machine: {lease: {tll: 3s}}}", "did you mean 'ttl'"),
            (
                "cosid: {machine: {lease: {ttl: fast}}}",
                "cosid.machine.lease.ttl",
            ),
            (
                "cosid: {machine: {lease: {store: 'ftp://x'}}}",
                "cosid.machine.lease.store",
            ),
            (
                "cosid: {machine: {lease: {store: 'memory:', bits: 11}}}",
                "larger than the layout's node-bits",
            ),
            (
                "cosid: {machine: {lease: {store: 'memory:', preferred-slot: 4096}}}",
                "preferred-slot 4096",
            ),
            (
                "cosid: {machine: {lease: {store: 'memory:', owner-key: '${COSID_TEST_NOPE_X}'}}}",
                "COSID_TEST_NOPE_X is not set",
            ),
            (
                "cosid: {machine: {static: {slot: 1024}}}",
                "cosid.machine.static.slot 1024",
            ),
            (
                "cosid: {machine: {static: {slot: x}}}",
                "cosid.machine.static.slot 'x'",
            ),
            ("cosid: {machine: {static: {}}}", "slot is missing"),
            (
                "cosid: {machine: {static: {slot: 1, not-before: yesterday}}}",
                "not-before",
            ),
            ("cosid: {machine: {static: {slot: 1}, lease: {}}}", "both"),
            (
                "cosid: {snowflake: {sequence-bits: 0}}",
                "sequence-bits 0 is out of range; use 1 to 30",
            ),
            (
                "cosid: {snowflake: {timestamp-unit: h}}",
                "timestamp-unit 'h'",
            ),
            ("cosid: {snowflake: {node-bits: 300}}", "node-bits 300"),
            (
                "cosid: {snowflake: {epoch: 2999-01-01T00:00:00Z}}",
                "in the future",
            ),
            ("cosid: {snowflake: {preset: fast}}", "preset 'fast'"),
            ("cosid: 3", "cosid must be a mapping"),
            ("other: {}", "top-level 'cosid'"),
            ("cosid: {namespace: ''}", "empty"),
            ("cosid: [", "not valid YAML"),
        ];
        for (yaml, needle) in cases {
            let e = err(yaml);
            assert!(e.contains(needle), "{yaml}: {e}");
        }
    }

    #[test]
    fn each_bit_width_names_its_own_range() {
        for (yaml, needle) in [
            (
                "cosid: {snowflake: {sequence-bits: 300}}",
                "sequence-bits 300 is out of range; use 1 to 30",
            ),
            (
                "cosid: {snowflake: {node-bits: 21}}",
                "node-bits 21 is out of range; use 1 to 20",
            ),
            (
                "cosid: {snowflake: {timestamp-bits: 64}}",
                "timestamp-bits 64 is out of range; use 8 to 61",
            ),
        ] {
            let e = err(yaml);
            assert!(e.contains(needle), "{yaml}: {e}");
        }
    }

    #[test]
    fn a_huge_integer_is_named_plainly() {
        let e = err("cosid:\n  snowflake:\n    timestamp-bits: 99999999999999999999999\n");
        assert!(!e.contains("u128"), "{e}");
        assert!(
            e.contains("the number 99999999999999999999999 is too large"),
            "{e}"
        );
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn keys_that_are_not_text_are_named_as_written() {
        let e = err("cosid: {1: x}");
        assert!(e.contains("unknown key 'cosid.1'"), "{e}");
        assert!(!e.contains("Number"), "{e}");
    }

    #[test]
    fn deep_or_huge_text_is_refused_before_parsing() {
        let deep = format!("cosid: {}", "[".repeat(100_000));
        let e = err(&deep);
        assert!(e.contains("deeper than 64 levels"), "{e}");
        let deep_maps = format!("cosid: {}", "{a: ".repeat(65));
        assert!(err(&deep_maps).contains("deeper than 64"));
        let huge = format!("cosid: {{namespace: '{}'}}", "x".repeat(MAX_CONFIG_BYTES));
        let e = err(&huge);
        assert!(e.contains("the limit is 1048576 bytes"), "{e}");
        // A quote that YAML reads as text cannot hide the brackets after it.
        let hidden = format!("cosid:\n  namespace: a 'b\n  x: {}", "[".repeat(100_000));
        let e = err(&hidden);
        assert!(
            e.contains("100000 opening brackets") && e.contains("the limit is 1024"),
            "{e}"
        );
        // Brackets inside quoted strings and comments do not count toward the depth.
        let quoted = format!(
            "cosid: {{namespace: '{}'}} # {}\n",
            "[".repeat(100),
            "{".repeat(100)
        );
        assert_eq!(
            Config::from_yaml(&quoted).unwrap().namespace,
            "[".repeat(100)
        );
    }

    #[test]
    fn text_for_a_message_never_shows_what_may_be_a_credential() {
        assert_eq!(text_for_message("/etc/cosid.yml"), "'/etc/cosid.yml'");
        for secret in [
            "redis://:S3CRET@h",
            "host=h password=S3CRET",
            "u:S3CRET@h",
            "S3CRET@h",
        ] {
            assert!(!text_for_message(secret).contains("S3CRET"), "{secret}");
        }
    }

    #[test]
    fn a_huge_file_is_refused_without_reading_it_whole() {
        let e = Config::from_path(Path::new("/dev/zero")).unwrap_err();
        assert!(e.message().contains("not a regular file"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES + 1]).unwrap();
        let e = Config::from_path(&big).unwrap_err();
        assert!(e.message().contains("limit of 1048576 bytes"), "{e}");
    }

    #[test]
    fn a_structured_value_is_taken_literally() {
        std::env::set_var("COSID_TEST_LITERAL", "expanded");
        let doc: Value = serde_yaml_ng::from_str(
            "cosid: {namespace: '${COSID_TEST_LITERAL}', machine: {lease: {store: 'memory:', owner-key: '${HOME}'}}}",
        )
        .unwrap();
        let c = Config::from_value(&doc).unwrap();
        assert_eq!(c.namespace, "${COSID_TEST_LITERAL}");
        let Machine::Lease(l) = c.machine else {
            panic!()
        };
        assert_eq!(l.owner_key.as_deref(), Some("${HOME}"));
        // The same text as configuration text expands.
        let c = Config::from_yaml("cosid: {namespace: '${COSID_TEST_LITERAL}'}").unwrap();
        assert_eq!(c.namespace, "expanded");
    }

    #[test]
    fn a_variable_that_is_not_utf8_is_an_error_naming_it() {
        use std::os::unix::ffi::OsStringExt;
        std::env::set_var(
            "COSID_TEST_NOT_UTF8",
            std::ffi::OsString::from_vec(vec![b'a', 0xff]),
        );
        let e = expand_env("${COSID_TEST_NOT_UTF8:-fallback}", "cosid.namespace").unwrap_err();
        assert!(e.message().contains("COSID_TEST_NOT_UTF8"), "{e}");
        assert!(e.message().contains("not UTF-8"), "{e}");
    }

    #[test]
    fn messages_never_echo_a_value_around_a_reference() {
        let e = err("cosid: {machine: {lease: {store: 'redis://:SECRET@h${X'}}}");
        assert!(!e.contains("SECRET"), "{e}");
        assert!(e.contains("cosid.machine.lease.store"), "{e}");
        let e = err("cosid: {machine: {lease: {store: 'redis://:SECRET@h${A B}'}}}");
        assert!(!e.contains("SECRET"), "{e}");
        let c =
            Config::from_yaml("cosid: {machine: {lease: {store: 'redis://u:SECRET@h'}}}").unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("SECRET") && shown.contains("redis://***@h"),
            "{shown}"
        );
    }

    #[test]
    fn lease_checks_apply_to_values_set_after_parsing() {
        let mut l = LeaseConfig {
            store: "memory:".into(),
            ..LeaseConfig::default()
        };
        assert!(l.check().is_ok());
        l.ttl = Duration::ZERO;
        assert!(l.check().unwrap_err().message().contains("ttl 0"));
    }

    #[test]
    fn env_expansion() {
        std::env::set_var("COSID_TEST_EXP", "v");
        assert_eq!(
            expand_env("a${COSID_TEST_EXP}b${COSID_TEST_NONE_Y:-d}c", "k").unwrap(),
            "avbdc"
        );
        assert!(expand_env("${", "k").is_err());
        assert!(expand_env("${A B}", "k").is_err());
    }
}
