//! Store URLs, parsed once, with credentials kept out of every message.

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
    /// `redis://…` or `rediss://…`.
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
}

impl StoreUrl {
    /// Parses a store URL, naming the value and the accepted forms when it does not parse.
    pub fn parse(text: &str) -> Result<StoreUrl> {
        let t = text.trim();
        let bad = |why: &str| {
            Error::config(format!(
                "store URL '{}' {why}; use memory:, sqlite:///path/slots.db, redis://host:6379, \
                 postgres://user@host/db or etcd://host:2379",
                redact(t)
            ))
        };
        let Some((scheme, rest)) = t.split_once(':') else {
            return Err(bad("has no scheme"));
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
            "redis" | "rediss" => Self::network(t, rest, &bad).map(|url| StoreUrl::Redis { url }),
            "postgres" | "postgresql" => {
                Self::network(t, rest, &bad).map(|url| StoreUrl::Postgres { url })
            }
            "etcd" | "etcds" => Self::network(t, rest, &bad).map(|url| StoreUrl::Etcd { url }),
            _ => Err(bad(&format!("has the unknown scheme '{scheme}'"))),
        }
    }

    fn network(t: &str, rest: &str, bad: &dyn Fn(&str) -> Error) -> Result<String> {
        let Some(authority) = rest.strip_prefix("//") else {
            return Err(bad("must have // after the scheme"));
        };
        let host_part = authority.split(['/', '?']).next().unwrap_or("");
        let host_part = host_part.rsplit_once('@').map_or(host_part, |(_, h)| h);
        if host_part.is_empty() {
            return Err(bad("has no host"));
        }
        Ok(t.to_string())
    }

    /// The cargo feature that builds this store.
    pub fn feature(&self) -> &'static str {
        match self {
            StoreUrl::Memory { .. } => "memory",
            StoreUrl::Sqlite { .. } => "sqlite",
            StoreUrl::Redis { .. } => "redis",
            StoreUrl::Postgres { .. } => "postgres",
            StoreUrl::Etcd { .. } => "etcd",
        }
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        match self {
            StoreUrl::Memory { name } => format!("memory:{name}"),
            StoreUrl::Sqlite { path } => format!("sqlite://{}", path.display()),
            StoreUrl::Redis { url } | StoreUrl::Postgres { url } | StoreUrl::Etcd { url } => {
                redact(url)
            }
        }
    }
}

/// `scheme://user:secret@host/…?password=x` becomes `scheme://user:***@host/…?password=***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let end = out[start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..end].rfind('@').map(|i| start + i) {
            if let Some(colon) = out[start..at].find(':').map(|i| start + i) {
                out.replace_range(colon + 1..at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("password")
                        || k.eq_ignore_ascii_case("sslpassword") =>
                {
                    format!("{k}=***")
                }
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
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
        assert!(matches!(
            StoreUrl::parse("rediss://h:6380").unwrap(),
            StoreUrl::Redis { .. }
        ));
        assert!(matches!(
            StoreUrl::parse("postgresql://u@h/db").unwrap(),
            StoreUrl::Postgres { .. }
        ));
        assert!(matches!(
            StoreUrl::parse("etcd://a:2379,b:2379").unwrap(),
            StoreUrl::Etcd { .. }
        ));
    }

    #[test]
    fn refuses_malformed_urls_naming_them() {
        for bad in [
            "",
            "slots.db",
            "ftp://x",
            "sqlite:/x",
            "sqlite://",
            "redis://",
            "redis:h",
            "memory:a b",
        ] {
            let e = StoreUrl::parse(bad).unwrap_err();
            assert!(e.message().contains(&format!("'{bad}'")), "{e}");
        }
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
        assert!(shown.contains("app:***@db"));
        assert_eq!(redact("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
    }
}
