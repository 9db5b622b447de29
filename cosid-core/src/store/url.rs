//! Store URLs, parsed once, with credentials kept out of every message.

use crate::bounds::{MAX_HOSTS, MAX_HOST_BYTES, MAX_STORE_URL_BYTES};
use crate::error::{Error, Result};
use std::fmt;
use std::path::PathBuf;

/// A parsed store URL. `Debug` and `Display` never show a password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory:` or `memory:NAME`: one process.
    Memory {
        /// The in-process store's name ("" for the default one).
        name: String,
    },
    /// `sqlite://PATH` (`sqlite:///abs/path` or `sqlite://relative/path`).
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// `redis://…`, `rediss://…`, `redis+sentinel://…` / `rediss+sentinel://…` (the master
    /// that Redis Sentinel names), or `redis+cluster://…` / `rediss+cluster://…` (a Redis
    /// Cluster).
    Redis {
        /// The URL as given (may hold a password).
        url: String,
    },
    /// `postgres://…` or `postgresql://…`.
    Postgres {
        /// The URL as given (may hold a password).
        url: String,
    },
    /// `etcd://host:port[,host:port…]` (or `etcds://` for TLS).
    Etcd {
        /// The URL as given (may hold a password).
        url: String,
    },
    /// `mysql://…` or `mariadb://…` (MySQL or MariaDB).
    Mysql {
        /// The URL as given (may hold a password).
        url: String,
    },
}

impl StoreUrl {
    /// Parses a store URL, naming the accepted forms when it does not parse.
    ///
    /// A refused text is never echoed (it may be a connection string with a password in any
    /// shape): the message shows its scheme at most.
    pub fn parse(text: &str) -> Result<StoreUrl> {
        let t = text.trim();
        // Only a scheme cosid knows is shown: any other text before a ':' may be a user name
        // or a password (`SECRET@host:1`).
        let scheme_shown = t
            .split_once(':')
            .map(|(s, _)| s)
            .filter(|s| KNOWN_SCHEMES.contains(&s.to_ascii_lowercase().as_str()));
        let bad = |why: &str| {
            let what = match scheme_shown {
                Some(s) => format!("store URL '{s}:…'"),
                None => "the store URL".to_string(),
            };
            Error::config(format!(
                "{what} {why} (the rest of the text is not shown, as it may hold a password); \
                 use memory:, sqlite:///path/slots.db, redis://host:6379, \
                 postgres://user@host/db, etcd://host:2379 or mysql://user@host/db"
            ))
        };
        if t.is_empty() {
            return Err(bad("is empty"));
        }
        // Every message shows the URL (redacted): a newline or another control character in it
        // would break the message's one line, and no URL holds one unencoded.
        if t.chars().any(char::is_control) {
            return Err(bad(
                "holds a control character (a newline, a tab, …); percent-encode it (%0A, %09)",
            ));
        }
        let Some((scheme, rest)) = t.split_once(':') else {
            return Err(no_scheme(t).unwrap_or_else(|| bad("has no scheme")));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "memory" => {
                let name = rest.trim_start_matches("//");
                if !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                {
                    return Err(bad(
                        "has a memory store name with characters other than [A-Za-z0-9-_.]",
                    ));
                }
                Ok(StoreUrl::Memory {
                    name: name.to_string(),
                })
            }
            "sqlite" => {
                let Some(path) = rest.strip_prefix("//") else {
                    return Err(bad("must start with sqlite://"));
                };
                if path.is_empty() {
                    return Err(bad("has no file path"));
                }
                Ok(StoreUrl::Sqlite {
                    path: PathBuf::from(path),
                })
            }
            "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
            | "rediss+cluster" => Self::network(t, rest, &bad).map(|url| StoreUrl::Redis { url }),
            "postgres" | "postgresql" => {
                Self::network(t, rest, &bad).map(|url| StoreUrl::Postgres { url })
            }
            "etcd" | "etcds" => Self::network(t, rest, &bad).map(|url| StoreUrl::Etcd { url }),
            "mysql" | "mariadb" => Self::network(t, rest, &bad).map(|url| StoreUrl::Mysql { url }),
            _ if looks_like_scheme(scheme) => Err(bad(&unknown_scheme(scheme, rest))),
            _ => Err(no_scheme(t).unwrap_or_else(|| bad("has no scheme"))),
        }
    }

    fn network(t: &str, rest: &str, bad: &dyn Fn(&str) -> Error) -> Result<String> {
        let Some(authority) = rest.strip_prefix("//") else {
            return Err(bad("must have // after the scheme"));
        };
        // The host follows the last '@' (a password may hold '/', '?', '#' or '@').
        let after_user = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host_part = after_user.split(['/', '?', '#']).next().unwrap_or("");
        if host_part.is_empty() {
            return Err(bad("has no host"));
        }
        // Hosts are not secret (they follow the last '@'): the messages quote them, cut.
        let hosts: Vec<&str> = host_part.split(',').collect();
        if hosts.len() > MAX_HOSTS {
            return Err(Error::config(format!(
                "the store URL lists {} hosts, more than the limit of {MAX_HOSTS}; list a few \
                 (a Cluster's client learns the other nodes from them)",
                hosts.len()
            )));
        }
        for host in hosts {
            // The port and an IPv6 address's brackets are not the name.
            let name = match host.rsplit_once(':') {
                Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
                _ => host,
            };
            let name = name.trim_start_matches('[').trim_end_matches(']');
            if name.len() > MAX_HOST_BYTES {
                return Err(Error::config(format!(
                    "the store URL's host '{}' is {} bytes long, more than the limit of \
                     {MAX_HOST_BYTES} (a DNS name's)",
                    crate::bounds::quote_at_most(name, 40),
                    name.len()
                )));
            }
        }
        if t.len() > MAX_STORE_URL_BYTES {
            return Err(bad(&format!(
                "is {} bytes long, more than the limit of {MAX_STORE_URL_BYTES} (32 KiB)",
                t.len()
            )));
        }
        check_params(t)?;
        Ok(t.to_string())
    }

    /// Checks the URL's query against its scheme's table ([`params_of`]), as
    /// [`StoreUrl::parse`] does: for a `StoreUrl` built by hand, which the stores' `open`
    /// check again.
    pub(crate) fn check_params(&self) -> Result<()> {
        match self {
            StoreUrl::Redis { url }
            | StoreUrl::Postgres { url }
            | StoreUrl::Etcd { url }
            | StoreUrl::Mysql { url } => check_params(url),
            StoreUrl::Memory { .. } | StoreUrl::Sqlite { .. } => Ok(()),
        }
    }

    /// The cargo feature that builds this store.
    pub fn feature(&self) -> &'static str {
        match self {
            StoreUrl::Memory { .. } => "memory",
            StoreUrl::Sqlite { .. } => "sqlite",
            StoreUrl::Redis { .. } => "redis",
            StoreUrl::Postgres { .. } => "postgres",
            StoreUrl::Etcd { .. } => "etcd",
            StoreUrl::Mysql { .. } => "mysql",
        }
    }

    /// The error a store's `open` gives for a URL of another store: `wanted` names the forms it
    /// takes ("a postgres:// or postgresql:// URL").
    #[cfg(any(
        feature = "redis",
        feature = "postgres",
        feature = "etcd",
        feature = "mysql"
    ))]
    pub(crate) fn not_a(&self, wanted: &str) -> Error {
        Error::config(format!("store '{}' is not {wanted}", self.redacted()))
    }

    /// The URL with any credential replaced by `***` (see `redact`).
    pub fn redacted(&self) -> String {
        match self {
            StoreUrl::Memory { name } => format!("memory:{name}"),
            StoreUrl::Sqlite { path } => redact(&format!("sqlite://{}", path.display())),
            StoreUrl::Redis { url }
            | StoreUrl::Postgres { url }
            | StoreUrl::Etcd { url }
            | StoreUrl::Mysql { url } => redact(url),
        }
    }
}

/// The restart guard's setting in a network store URL (`restart-guard=on` or `off`; on when
/// absent) and the URL without that parameter, for the store's own parser, which does not know
/// it. With the guard on, the store reports when its server started ([`super::SlotStore::started_at`])
/// and that a namespace missing from it may be one it lost
/// ([`super::SlotStore::may_forget_namespaces`]).
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "etcd"
))]
pub(crate) fn take_restart_guard(raw: &str, name: &str) -> Result<(String, bool)> {
    // The query starts after the host, which follows the last '@' (a password may hold '?').
    let host_at = raw.rfind('@').unwrap_or(0);
    let Some(q) = raw[host_at..].find('?').map(|i| i + host_at) else {
        return Ok((raw.to_string(), true));
    };
    let (base, rest) = (&raw[..q], &raw[q + 1..]);
    let (query, fragment) = match rest.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (rest, None),
    };
    let mut guard = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let Some(value) = pair.strip_prefix("restart-guard") else {
            kept.push(pair);
            continue;
        };
        let setting = match value {
            "=on" => true,
            "=off" => false,
            _ if !value.is_empty() && !value.starts_with('=') => {
                kept.push(pair);
                continue;
            }
            _ => {
                return Err(Error::config(format!(
                    "store URL '{name}' has restart-guard{value}; use restart-guard=on (the \
                     default: a namespace's first runtime waits ttl + tolerance once, and \
                     every start on a server younger than that waits until then) or \
                     restart-guard=off (a server known to be new, that never loses its data)"
                )))
            }
        };
        if guard.replace(setting).is_some() {
            return Err(Error::config(format!(
                "store URL '{name}' gives restart-guard twice; give it once"
            )));
        }
    }
    let mut url = base.to_string();
    if !kept.is_empty() {
        url.push('?');
        url.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        url.push('#');
        url.push_str(fragment);
    }
    Ok((url, guard.unwrap_or(true)))
}

/// The query parameters each network scheme takes, by the words a message calls its URLs:
/// the one table every URL is checked against, so that a parameter no store reads (misspelled,
/// of another case, percent-encoded, another store's) is refused whatever the scheme, never
/// ignored. `restart-guard` is every scheme's ([`take_restart_guard`] takes it out before the
/// store reads the rest).
fn params_of(scheme: &str) -> Option<(&'static str, &'static [&'static str], &'static str)> {
    Some(match scheme {
        "redis" | "rediss" => (
            "Redis",
            &["replicas", "wait_timeout_ms", "cacert", "restart-guard"],
            "redis://[user:password@]host[:port][/db][?replicas=N] (rediss:// for TLS)",
        ),
        "redis+sentinel" | "rediss+sentinel" => (
            "Sentinel",
            &[
                "replicas",
                "wait_timeout_ms",
                "sentinel_user",
                "sentinel_password",
                "cacert",
                "restart-guard",
            ],
            "redis+sentinel://[user:password@]sentinel1[:26379][,sentinel2…]/MASTERNAME[/db][?replicas=N]",
        ),
        "redis+cluster" | "rediss+cluster" => (
            "cluster",
            &["replicas", "wait_timeout_ms", "cacert", "restart-guard"],
            "redis+cluster://[user:password@]node1[:6379][,node2[:6379]…][/0][?replicas=N]",
        ),
        // cosid's own, then the ones tokio-postgres reads from a URL.
        "postgres" | "postgresql" => (
            "PostgreSQL",
            &[
                "sslmode",
                "sslrootcert",
                "target_session_attrs",
                "restart-guard",
                "user",
                "password",
                "dbname",
                "options",
                "application_name",
                "connect_timeout",
                "tcp_user_timeout",
                "keepalives",
                "keepalives_idle",
                "keepalives_interval",
                "keepalives_retries",
                "channel_binding",
                "load_balance_hosts",
                "sslnegotiation",
            ],
            "postgres://user[:password]@host[:5432]/db[?sslmode=…]",
        ),
        "etcd" | "etcds" => (
            "etcd",
            &["cacert", "restart-guard"],
            "etcd://[user:password@]host:2379[,host:2379…] (etcds://…[?cacert=/ca.pem] for TLS)",
        ),
        "mysql" | "mariadb" => (
            "MySQL",
            &["ssl-mode", "ssl-ca", "restart-guard"],
            "mysql://user[:password]@host[:port]/database[?ssl-mode=…&ssl-ca=…]",
        ),
        _ => return None,
    })
}

/// Refuses a query parameter of `url` that its scheme's table ([`params_of`]) lacks, and one
/// given twice. The message names the parameter (when it is short and plain, and is written
/// `key=value`: a bare word may be a pasted password) but never a value, and shows the URL up
/// to its query only, redacted.
fn check_params(url: &str) -> Result<()> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Ok(());
    };
    let scheme = scheme.to_ascii_lowercase();
    let Some((kind, table, form)) = params_of(&scheme) else {
        return Ok(());
    };
    // The query starts after the host, which follows the last '@' (a password may hold '?').
    let host_at = url.rfind('@').unwrap_or(0);
    let Some(q) = url[host_at..].find('?').map(|i| i + host_at) else {
        return Ok(());
    };
    let query = url[q + 1..].split('#').next().unwrap_or("");
    let base = redact(&url[..q]);
    // An '@' after a '?' cannot be placed for sure (a password in the user information may
    // hold '?', a query value may hold '@'): then no name is shown, since any may be a piece of
    // a secret.
    let ambiguous = url
        .find('?')
        .is_some_and(|first| url[first..].contains('@'));
    let shown = |pair: &str| match pair.split_once('=') {
        Some((k, _))
            if !ambiguous
                && k.len() <= 40
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.%+".contains(c)) =>
        {
            format!("'{k}'")
        }
        Some(_) => "(a name not shown)".to_string(),
        None => "without '=' (not shown, as it may be a password)".to_string(),
    };
    let mut seen: Vec<&str> = Vec::new();
    // After a credential's key, what looks like a pair may be a piece of its value (a password
    // holding '&' or '='): as `redact` hides it all, no name from there on is shown.
    let mut after_secret = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split_once('=').map(|(k, _)| k);
        let hidden = after_secret;
        let shown = |pair: &str| match hidden {
            true => "(not shown, as it follows a credential)".to_string(),
            false => shown(pair),
        };
        after_secret |= key.is_some_and(is_secret_key);
        match key {
            Some(k) if table.contains(&k) => {
                if seen.contains(&k) {
                    return Err(Error::config(format!(
                        "store URL '{base}?…' gives the parameter '{k}' twice; give it once"
                    )));
                }
                seen.push(k);
            }
            _ => {
                let elsewhere = match key {
                    Some("sentinel_user" | "sentinel_password") => {
                        "; only a redis+sentinel:// URL takes sentinel_user and sentinel_password"
                    }
                    _ => "",
                };
                return Err(Error::config(format!(
                    "store URL '{base}?…' has the parameter {} that a {kind} URL does not take \
                     (it takes {}; names are case-sensitive and not percent-encoded){elsewhere}; \
                     use {form}",
                    shown(pair),
                    table.join(", ")
                )));
            }
        }
    }
    Ok(())
}

/// The schemes of [`StoreUrl::parse`].
const KNOWN_SCHEMES: [&str; 14] = [
    "memory",
    "sqlite",
    "redis",
    "rediss",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
    "postgres",
    "postgresql",
    "etcd",
    "etcds",
    "mysql",
    "mariadb",
];

/// A URL scheme as RFC 3986 writes it (a letter, then letters, digits, `+`, `-`, `.`), short.
fn looks_like_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && s.len() <= 16
}

/// The refusal of an unknown scheme: "has an unknown scheme", with the scheme and the closest
/// known one when the text is shaped `SCHEME://…`. Only then is the scheme shown: in other
/// shapes the text before the first ':' may be a user name or a password (`SECRET:x@host`).
fn unknown_scheme(scheme: &str, rest: &str) -> String {
    if !rest.starts_with("//") {
        return "has an unknown scheme".to_string();
    }
    match closest_scheme(&scheme.to_ascii_lowercase()) {
        Some(known) => format!("has an unknown scheme '{scheme}': did you mean {known}://?"),
        None => format!("has an unknown scheme '{scheme}'"),
    }
}

/// The known scheme a mistyped or foreign one most likely means: a common other name for a
/// store (`http` for etcd's endpoints, `psql`, `file`), else the one at most one edit away (two
/// for longer schemes), if exactly one is that close.
fn closest_scheme(scheme: &str) -> Option<&'static str> {
    const OTHER_NAMES: [(&str, &str); 11] = [
        ("http", "etcd"),
        ("https", "etcds"),
        ("pg", "postgres"),
        ("pgsql", "postgres"),
        ("psql", "postgres"),
        ("file", "sqlite"),
        ("sqlite3", "sqlite"),
        ("mem", "memory"),
        ("valkey", "redis"),
        ("valkeys", "rediss"),
        ("maria", "mariadb"),
    ];
    if let Some((_, known)) = OTHER_NAMES.iter().find(|(other, _)| *other == scheme) {
        return Some(known);
    }
    let reach = if scheme.chars().count() <= 4 { 1 } else { 2 };
    let mut best: Option<(usize, &'static str)> = None;
    let mut tied = false;
    for known in KNOWN_SCHEMES {
        let d = edit_distance(scheme, known);
        match best {
            Some((b, _)) if d > b => {}
            Some((b, _)) if d == b => tied = true,
            _ => {
                best = Some((d, known));
                tied = false;
            }
        }
    }
    best.filter(|(d, _)| *d <= reach && !tied).map(|(_, k)| k)
}

/// Levenshtein distance (insertions, deletions and substitutions), on short ASCII schemes.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The refusal of a text without a scheme that is a file path (`/tmp/x.db`, `./slots.db`,
/// `slots.db`), showing the SQLite URL that names it. Other texts get the general refusal:
/// only a path of one word without `@` or `=` is shown, as no connection string has that shape.
fn no_scheme(t: &str) -> Option<Error> {
    let path_like = t.starts_with('/')
        || t.starts_with("./")
        || t.starts_with("../")
        || [".db", ".db3", ".sqlite", ".sqlite3"]
            .iter()
            .any(|ext| t.ends_with(ext) && t.len() > ext.len());
    // `~` is the shell's: sqlite://~/x.db would name a directory called `~`.
    if !path_like
        || t.starts_with('~')
        || t.chars()
            .any(|c| c.is_whitespace() || c.is_control() || "@=".contains(c))
    {
        return None;
    }
    // The text is echoed only when it names a file that exists, or a database file in a
    // directory that exists: anything else may be a secret pasted in the wrong place.
    let path = std::path::Path::new(t);
    let db_name = [".db", ".db3", ".sqlite", ".sqlite3"]
        .iter()
        .any(|ext| t.ends_with(ext));
    let dir_exists = match path.parent() {
        Some(d) if d.as_os_str().is_empty() => true,
        Some(d) => d.is_dir(),
        None => false,
    };
    if path.is_file() || (db_name && dir_exists) {
        return Some(Error::config(format!(
            "the store URL has no scheme; for the SQLite file '{t}' write sqlite://{t} (other \
             stores: memory:, redis://host:6379, postgres://user@host/db, etcd://host:2379 or \
             mysql://user@host/db)"
        )));
    }
    Some(Error::config(
        "the store URL has no scheme; for an SQLite file write sqlite:// and its path \
         (sqlite:///path/slots.db), for another store its URL (memory:, \
         redis://host:6379, postgres://user@host/db, etcd://host:2379 or mysql://user@host/db)",
    ))
}

/// Query keys whose values are credentials.
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["pass", "pwd", "secret", "token", "key"]
        .iter()
        .any(|w| k.contains(w))
}

/// Removes credentials from a URL by its structure, whatever characters they hold:
///
/// * everything between `//` and the **last** `@` (the user information, whose password may
///   hold `/`, `?`, `#`, `:` or `@`) becomes `***`, user name included;
/// * from the value of the first query parameter whose key names a credential (`password`,
///   `sslpassword`, `token`, …) to the end, the text becomes `***` (the value may hold `&`, `#`
///   or `@`).
///
/// Where the two overlap, both are hidden. `scheme://user:secret@host/…?sslmode=require&password=x`
/// becomes `scheme://***@host/…?sslmode=require&password=***`.
pub fn redact(url: &str) -> String {
    let authority = url.find("//").map_or(0, |i| i + 2);
    let mut hidden: Vec<(usize, usize)> = Vec::new();
    if let Some(at) = url[authority..].rfind('@').map(|i| authority + i) {
        // The user name too: where a password holds ':' (or is written without a user), the
        // text before the first ':' is a piece of it.
        hidden.push((authority, at));
    }
    if let Some(value) = first_secret_value(url) {
        hidden.push((value, url.len()));
    }
    hidden.sort_unstable();
    let mut out = String::with_capacity(url.len());
    let mut pos = 0;
    for (start, end) in hidden {
        if end <= pos && start < pos {
            continue; // inside a range already hidden
        }
        if start >= pos {
            out.push_str(&url[pos..start]);
            out.push_str("***");
        }
        pos = pos.max(end);
    }
    out.push_str(&url[pos..]);
    out
}

/// Where the value of the first credential parameter (`?password=`, `&token=`, …) starts.
fn first_secret_value(url: &str) -> Option<usize> {
    url.match_indices(['?', '&']).find_map(|(i, _)| {
        let rest = &url[i + 1..];
        let eq = rest.find(['=', '&', '?'])?;
        (rest.as_bytes()[eq] == b'=' && is_secret_key(&rest[..eq])).then_some(i + 1 + eq + 1)
    })
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({})", self.redacted())
    }
}

#[cfg(test)]
mod tests {
    #[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
    #[test]
    fn the_restart_guard_is_taken_out_of_the_query_and_on_by_default() {
        let take = |u: &str| super::take_restart_guard(u, "shown");
        // (URL, the URL left, the guard's setting)
        for (url, left, guard) in [
            ("redis://h/0", "redis://h/0", true),
            ("redis://h/0?restart-guard=off", "redis://h/0", false),
            (
                "postgres://u:p?w@h/db?sslmode=disable&restart-guard=on&x=1#f",
                "postgres://u:p?w@h/db?sslmode=disable&x=1#f",
                true,
            ),
            // A password with the parameter's text in it is not the parameter.
            (
                "mysql://u:restart-guard=off@h/db",
                "mysql://u:restart-guard=off@h/db",
                true,
            ),
            (
                "redis://h/0?restart-guardian=1",
                "redis://h/0?restart-guardian=1",
                true,
            ),
        ] {
            assert_eq!(take(url).unwrap(), (left.into(), guard), "{url}");
        }
        for bad in ["restart-guard=maybe", "restart-guard", "restart-guard="] {
            let e = take(&format!("redis://h/0?{bad}")).unwrap_err();
            assert!(e.message().contains("restart-guard=off"), "{e}");
            assert!(e.message().contains("'shown'"), "{e}");
        }
        let e = take("redis://h/0?restart-guard=on&restart-guard=off").unwrap_err();
        assert!(e.message().contains("twice"), "{e}");
    }

    use super::*;

    #[test]
    fn parses_every_scheme() {
        assert_eq!(
            StoreUrl::parse("memory:").unwrap(),
            StoreUrl::Memory { name: "".into() }
        );
        assert_eq!(
            StoreUrl::parse("memory:t1").unwrap(),
            StoreUrl::Memory { name: "t1".into() }
        );
        assert_eq!(
            StoreUrl::parse("sqlite:///var/lib/cosid/slots.db").unwrap(),
            StoreUrl::Sqlite {
                path: "/var/lib/cosid/slots.db".into()
            }
        );
        // The network stores' URLs: which variant each is, told by `feature` (one feature a
        // variant, so this is the variant's check written once).
        for (url, feature) in [
            ("rediss://h:6380", "redis"),
            ("redis+sentinel://s1:26379,s2/cosid/0?replicas=1", "redis"),
            ("redis+cluster://n1:7000,n2/0", "redis"),
            ("rediss+cluster://:pw@n1", "redis"),
            ("postgresql://u@h/db", "postgres"),
            ("etcd://a:2379,b:2379", "etcd"),
            ("mysql://u:pw@h:3306/db", "mysql"),
            ("MariaDB://u@h/db", "mysql"),
        ] {
            assert_eq!(StoreUrl::parse(url).unwrap().feature(), feature, "{url}");
        }
    }

    #[test]
    fn refuses_malformed_urls_naming_them() {
        for (bad, shown) in [
            ("", "the store URL is empty"),
            ("slots.db", "the store URL has no scheme"),
            ("ftp://x", "the store URL has an unknown scheme"),
            ("sqlite:/x", "'sqlite:…' must start with sqlite://"),
            ("sqlite://", "'sqlite:…' has no file path"),
            ("redis://", "'redis:…' has no host"),
            ("redis:h", "'redis:…' must have //"),
            ("redis+sentinel:///m", "'redis+sentinel:…' has no host"),
            ("mysql://u:pw@/db", "'mysql:…' has no host"),
            ("mariadb:h/db", "'mariadb:…' must have //"),
            ("memory:a b", "'memory:…' has a memory store name"),
            ("redis://h\n/0", "'redis:…' holds a control character"),
            (
                "postgres://u:p\tw@h/db",
                "'postgres:…' holds a control character",
            ),
        ] {
            let e = StoreUrl::parse(bad).unwrap_err();
            assert!(e.message().contains(shown), "{bad:?}: {e}");
        }
    }

    #[test]
    fn every_scheme_refuses_a_parameter_it_does_not_take_or_gets_twice() {
        for (url, says) in [
            (
                "redis://h/0?replica=1",
                "parameter 'replica' that a Redis URL",
            ),
            ("redis://h/0?Replicas=1", "parameter 'Replicas'"),
            ("redis://h/0?replicas%3D1", "without '='"),
            ("redis://h/0?replicas%3D1=2", "parameter 'replicas%3D1'"),
            ("redis://h/0?replcias=2", "parameter 'replcias'"),
            (
                "redis://h/0?replicas=1&replicas=0",
                "gives the parameter 'replicas' twice",
            ),
            ("rediss://h/0?protocol=resp3", "parameter 'protocol'"),
            (
                "redis://h/0?sentinel_user=u",
                "only a redis+sentinel:// URL takes",
            ),
            ("redis+sentinel://s/m?replica=1", "that a Sentinel URL"),
            ("redis+cluster://n/0?replica=1", "that a cluster URL"),
            ("postgres://u@h/db?sslmod=require", "parameter 'sslmod'"),
            ("postgres://u@h/db?sslmode=require&sslmode=disable", "twice"),
            (
                "etcd://h:2379?cacrt=/x",
                "parameter 'cacrt' that a etcd URL",
            ),
            ("mysql://u@h/db?ssl_mode=required", "parameter 'ssl_mode'"),
            ("mariadb://u@h/db?ssl-ca=/a&ssl-ca=/b", "twice"),
        ] {
            let e = StoreUrl::parse(url).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Config, "{url}: {e}");
            assert!(e.message().contains(says), "{url}: {e}");
        }
        // Never a value, nor a bare word (a password pasted in the wrong place).
        for url in [
            "redis://h/0?replica=S3CRET",
            "redis://h/0?S3CRET",
            "postgres://u@h/db?x=S3CRET",
            "redis://u:S3CRET@h/0?replica=1",
            "postgres://u@h/db?password=pa&S3CRET=1",
            "postgres://u@h/db?password=pa&S3CRET",
        ] {
            let e = StoreUrl::parse(url).unwrap_err();
            assert!(!e.to_string().contains("S3CRET"), "{url}: {e}");
        }
        for url in [
            "redis://h/0?replicas=1&wait_timeout_ms=50&restart-guard=off",
            "rediss://h/0?cacert=%2Fca.pem",
            "redis+sentinel://s/m?sentinel_user=u&sentinel_password=p&replicas=1",
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca&application_name=x",
            "etcds://h:2379?cacert=/ca.pem&restart-guard=off",
            "mysql://u@h/db?ssl-mode=verify_ca&ssl-ca=/ca.pem",
            // A password holding '?' and '=' is not a query.
            "redis://u:p?replica=1@h/0",
        ] {
            StoreUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn hosts_and_lengths_past_their_limits_are_refused_naming_the_limit() {
        let seeds = vec!["n:7000"; MAX_HOSTS + 1].join(",");
        let e = StoreUrl::parse(&format!("redis+cluster://{seeds}/0")).unwrap_err();
        assert!(
            e.message().contains("65 hosts, more than the limit of 64"),
            "{e}"
        );
        let ok = vec!["n:7000"; MAX_HOSTS].join(",");
        StoreUrl::parse(&format!("redis+cluster://{ok}/0")).unwrap();
        let long = "h".repeat(100_000);
        for url in [
            format!("redis://{long}:6379/0"),
            format!("etcd://a:2379,{long}"),
            format!("postgres://u:pw@[{long}]:5432/db"),
        ] {
            let e = StoreUrl::parse(&url).unwrap_err();
            assert!(
                e.message()
                    .contains("100000 bytes long, more than the limit of 253"),
                "{e}"
            );
            assert!(e.message().len() < 300, "{}", e.message().len());
        }
        StoreUrl::parse(&format!("redis://{}:6379/0", "h".repeat(253))).unwrap();
        let e = StoreUrl::parse(&format!("redis://h/0?cacert={}", "x".repeat(40_000))).unwrap_err();
        assert!(e.message().contains("more than the limit of 32768"), "{e}");
        assert!(!e.message().contains("xxxx"), "{e}");
    }

    #[test]
    fn passwords_never_show() {
        let u = StoreUrl::parse("postgres://app:s3cret@db:5432/ids?sslmode=require&password=x2")
            .unwrap();
        let shown = format!("{u} {u:?} {}", u.redacted());
        assert!(
            !shown.contains("s3cret") && !shown.contains("x2"),
            "{shown}"
        );
        assert!(shown.contains("postgres://***@db:5432/ids?sslmode=require&password=***"));
        assert_eq!(redact("redis://:pw@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
    }

    /// Passwords holding the characters that end a URL part, connection strings that are not
    /// URLs, and URLs that do not parse: the password never shows.
    #[test]
    fn passwords_of_any_shape_never_show() {
        for text in [
            "redis://:pa/SECRET@host",
            "redis://u:pa?SECRET@host:6379/0",
            "redis://u:pa#SECRET@host",
            "redis://u:pa@SECRET@host",
            "postgres://u:x:SECRET@db/ids",
            "postgres://db/ids?sslmode=require&password=pa&SECRET",
            "postgres://db/ids?password=pa#SECRET",
            "postgres://SECRET@db/ids",
            "host=db user=app password=SECRET dbname=ids",
            "postgres:host=db password=SECRET",
            "redis//:SECRET@h",
            "redis:/:SECRET@h",
            "SECRET@h:1",
            "SECRET:x@h",
            "u:SECRET@h",
            "etcd://u:pa/SECRET@h:2379",
            "mysql://u:pa/SECRET@h:3306/db",
            "mariadb://u:pa?SECRET@h/db?ssl-mode=required",
            "mysql://SECRET@h/db",
            "redis+sentinel://u:pa/SECRET@s1,s2/m/0?replicas=1",
            "redis+sentinel://:SECRET@s1:26379/m",
            "memory:u:SECRET@h",
            "sqlite://u:SECRET@h/x.db",
        ] {
            let shown = match StoreUrl::parse(text) {
                Ok(u) => format!("{u} {u:?} {}", u.redacted()),
                Err(e) => format!("{e} {e:?}"),
            };
            assert!(!shown.contains("SECRET"), "{text:?} shows {shown}");
        }
        assert_eq!(redact("redis://:pa/SECRET@host/0"), "redis://***@host/0");
        assert_eq!(redact("redis://SECRET:pa@host/0"), "redis://***@host/0");
        assert_eq!(
            redact("redis+sentinel://u:SECRET@s1,s2:26380/m/1?replicas=1"),
            "redis+sentinel://***@s1,s2:26380/m/1?replicas=1"
        );
        assert_eq!(
            redact("redis+cluster://:SECRET@n1:7000,n2:7001/0?replicas=1"),
            "redis+cluster://***@n1:7000,n2:7001/0?replicas=1"
        );
        assert_eq!(
            redact("postgres://h/d?password=pa@SECRET&x=1"),
            "postgres://***"
        );
    }
}
