//! A throwaway Redis primary with replicas and three sentinels, for failover tests.
//!
//! [`RedisHa::start`] starts a primary and `replicas` replicas, each a [`Server::redis`] (an
//! append-only file fsynced on every write; the replicas follow the primary by `REPLICAOF`), and
//! three sentinels that monitor the primary under [`MASTER_NAME`] with a quorum of 2,
//! `down-after-milliseconds` 1000 (or [`RedisHa::start_with`]'s) and a `failover-timeout` of at
//! least 5000, all on free loopback ports. It returns once every replica streams from the
//! primary and every sentinel knows the replicas and the other sentinels, so a failover can
//! happen from then on.
//!
//! [`RedisHa::start_tls`] starts the same group serving TLS only: every data node and sentinel
//! has no plain-text port (`port 0`) and a `tls-port`, replication and the sentinels' links to
//! the data nodes are TLS (`tls-replication yes`), all with one certificate from a throwaway
//! CA. The testkit talks to every process through its Unix socket.
//!
//! [`RedisHa::sentinel_url`] is the `redis+sentinel://` (`rediss+sentinel://…&cacert=`) store
//! URL of the group.
//! [`RedisHa::kill_primary`] kills the current primary with `SIGKILL` (a crash),
//! [`RedisHa::failover`] asks the sentinels for a failover while the primary runs, and
//! [`RedisHa::wait_for_new_primary`] waits until the sentinels name another node that says it is
//! the master; [`RedisHa::stop_replicas`] and [`RedisHa::start_node`] stop and start nodes.
//! Every process is tied to this one (see the crate documentation) and stopped on drop, and
//! every wait is bounded.

use super::{binary, free_port, kill_child, logs_of, on_port, wait_until};
use super::{percent_encoded, Kind, Server, Spawned, Tls, NEXT_ID};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The name the sentinels monitor the primary by.
pub const MASTER_NAME: &str = "cosid";

/// The number of sentinels.
const SENTINELS: usize = 3;

/// Starts a sentinel (`redis-server sentinel.conf --sentinel`, killed on drop) with `conf` (in
/// `dir`, with its Unix socket [`socket_of`] added) and waits until it answers there.
fn start_sentinel(dir: PathBuf, port: u16, conf: &str) -> Spawned {
    let socket = dir.join("redis.sock");
    let conf = format!(
        "{conf}unixsocket {}\nunixsocketperm 700\n",
        socket.display()
    );
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    Spawned::start(
        id,
        dir,
        ("sentinel", port),
        |dir| {
            let file = dir.join("sentinel.conf");
            std::fs::write(&file, &conf).expect("cosid-testkit: sentinel.conf");
            let mut cmd = Command::new(binary(Kind::Redis));
            cmd.arg(&file).arg("--sentinel");
            cmd
        },
        || on_socket(&socket, None, &["PING"]).is_some_and(|r| r.starts_with(b"+PONG")),
    )
}

/// Kills `server` with `SIGKILL` (a crash: no append-only file flushed at exit, clients cut
/// off); its data directory stays, so [`Server::start`] brings it back with its data.
fn kill(server: &Server) {
    kill_child(&server.child, server.id, &server.dir);
}

/// A primary, its replicas and three sentinels (see the module documentation).
#[derive(Debug)]
pub struct RedisHa {
    /// The data nodes; the first was the primary at the start.
    nodes: Vec<Server>,
    sentinels: Vec<Spawned>,
    /// The certificates of a group that serves TLS only ([`RedisHa::start_tls`]).
    tls: Option<Tls>,
}

impl RedisHa {
    /// Starts a primary, `replicas` replicas and three sentinels, and waits until a failover
    /// could happen (see the module documentation).
    pub fn start(replicas: usize) -> RedisHa {
        RedisHa::start_with(replicas, Duration::from_secs(1))
    }

    /// [`RedisHa::start`] with the sentinels' `down-after-milliseconds` set to `down_after`
    /// (a group that is not meant to fail over takes a long one, so that a loaded machine does
    /// not make the sentinels think the primary is down).
    pub fn start_with(replicas: usize, down_after: Duration) -> RedisHa {
        RedisHa::start_group(replicas, down_after, None)
    }

    /// [`RedisHa::start_with`] serving TLS only (see the module documentation); the CA is
    /// [`RedisHa::tls_ca`].
    pub fn start_tls(replicas: usize, down_after: Duration) -> RedisHa {
        RedisHa::start_group(replicas, down_after, Some(Tls::make("redis-ha")))
    }

    fn start_group(replicas: usize, down_after: Duration, tls: Option<Tls>) -> RedisHa {
        let nodes: Vec<Server> = (0..=replicas)
            .map(|_| match &tls {
                None => Server::redis(),
                Some(tls) => Server::redis_tls(tls),
            })
            .collect();
        let primary = nodes[0].port();
        for n in &nodes[1..] {
            let _ = on_socket(
                &n.redis_socket(),
                None,
                &["REPLICAOF", "127.0.0.1", &primary.to_string()],
            );
        }
        let tls_conf = tls.as_ref().map_or(String::new(), |t| {
            format!(
                "tls-replication yes\ntls-cert-file {crt}\ntls-key-file {key}\n\
                 tls-ca-cert-file {ca}\ntls-auth-clients no\n",
                crt = t.dir.join("server.crt").display(),
                key = t.dir.join("server.key").display(),
                ca = t.ca.display(),
            )
        });
        let down_after = down_after.as_millis().max(1);
        let sentinels = (0..SENTINELS)
            .map(|i| {
                let port = free_port();
                let dir = std::env::temp_dir().join(format!(
                    "cosid-testkit-{}-{}-sentinel-{i}",
                    std::process::id(),
                    NEXT_ID.fetch_add(1, Ordering::Relaxed)
                ));
                let ports = if tls.is_some() {
                    format!("port 0\ntls-port {port}\n{tls_conf}")
                } else {
                    format!("port {port}\n")
                };
                let conf = format!(
                    "{ports}bind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                     dir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} {down_after}\n\
                     sentinel failover-timeout {MASTER_NAME} {failover_timeout}\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    dir = dir.display(),
                    failover_timeout = (down_after * 5).max(5000),
                );
                start_sentinel(dir, port, &conf)
            })
            .collect();
        let ha = RedisHa {
            nodes,
            sentinels,
            tls,
        };
        ha.wait_until("every replica streams from the primary", || {
            ha.nodes[1..].iter().all(|n| ha.streams(n.port()))
        });
        ha.wait_until(
            "every sentinel knows the replicas and the other sentinels",
            || {
                ha.sentinels.iter().all(|s| {
                    let known = ha
                        .ask(s.port, &["SENTINEL", "MASTER", MASTER_NAME])
                        .map(|r| String::from_utf8_lossy(&r).into_owned())
                        .unwrap_or_default();
                    field(&known, "num-slaves") == Some(replicas)
                        && field(&known, "num-other-sentinels") == Some(SENTINELS - 1)
                })
            },
        );
        ha
    }

    /// `redis+sentinel://` with every sentinel, [`MASTER_NAME`] and database 0, then `query`
    /// (`""`, or `"?replicas=1"` and the like); for a TLS group `rediss+sentinel://` with the
    /// CA as `cacert=` at the end of the query.
    pub fn sentinel_url(&self, query: &str) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        let hosts = hosts.join(",");
        match &self.tls {
            None => format!("redis+sentinel://{hosts}/{MASTER_NAME}/0{query}"),
            Some(tls) => format!(
                "rediss+sentinel://{hosts}/{MASTER_NAME}/0{query}{}cacert={}",
                if query.is_empty() { '?' } else { '&' },
                percent_encoded(&tls.ca)
            ),
        }
    }

    /// The PEM file of the CA that signed the certificate of a TLS group
    /// ([`RedisHa::start_tls`]).
    pub fn tls_ca(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca.as_path())
    }

    /// The ports of the sentinels.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The ports of the data nodes (the first was the primary at the start).
    pub fn node_ports(&self) -> Vec<u16> {
        self.nodes.iter().map(Server::port).collect()
    }

    /// `redis://` of the data node on `port` (`rediss://…?cacert=` for a TLS group).
    pub fn node_url(&self, port: u16) -> String {
        self.node(port).url()
    }

    /// The port of the primary the sentinels name now (the first sentinel that answers).
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = self.ask(
                s.port,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
            )?;
            // *2 $9 127.0.0.1 $N PORT
            let text = String::from_utf8_lossy(&reply).into_owned();
            text.split("\r\n").nth(4)?.parse().ok()
        })
    }

    /// Whether the node on `port` answers `ROLE` with `master`.
    pub fn is_master(&self, port: u16) -> bool {
        self.ask(port, &["ROLE"])
            .is_some_and(|r| r.starts_with(b"*3\r\n$6\r\nmaster"))
    }

    /// Kills the current primary with `SIGKILL` and returns its port.
    pub fn kill_primary(&self) -> u16 {
        let port = self
            .primary_port()
            .expect("cosid-testkit: no sentinel names a primary");
        kill(self.node(port));
        port
    }

    /// Asks a sentinel for a failover (`SENTINEL FAILOVER`): a replica is promoted and the
    /// primary, which keeps running, is turned into a replica of it. Returns the old primary's
    /// port.
    pub fn failover(&self) -> u16 {
        let port = self
            .primary_port()
            .expect("cosid-testkit: no sentinel names a primary");
        let reply = self.ask(
            self.sentinels[0].port,
            &["SENTINEL", "FAILOVER", MASTER_NAME],
        );
        assert!(
            reply.as_deref().is_some_and(|r| r.starts_with(b"+OK")),
            "cosid-testkit: SENTINEL FAILOVER answered {:?}",
            reply.map(|r| String::from_utf8_lossy(&r).into_owned())
        );
        port
    }

    /// Waits (bounded) until the sentinels name a primary other than `old` and that node says
    /// it is the master; returns its port.
    pub fn wait_for_new_primary(&self, old: u16) -> u16 {
        let mut found = None;
        self.wait_until("the sentinels promote a replica", || {
            found = self
                .primary_port()
                .filter(|p| *p != old && self.is_master(*p));
            found.is_some()
        });
        found.expect("set when the wait ended")
    }

    /// Stops every running data node but the primary (`SIGTERM`, data kept) and returns their
    /// ports.
    pub fn stop_replicas(&self) -> Vec<u16> {
        let primary = self.primary_port();
        let mut stopped = Vec::new();
        for n in &self.nodes {
            if Some(n.port()) != primary && n.is_running() {
                n.stop();
                stopped.push(n.port());
            }
        }
        stopped
    }

    /// Starts the data node on `port` again (as a replica of the current primary, with its
    /// data), and waits until it streams from the primary.
    pub fn start_node(&self, port: u16) {
        let primary = self
            .primary_port()
            .expect("cosid-testkit: no sentinel names a primary");
        self.node(port).start();
        if port != primary {
            let _ = self.ask(port, &["REPLICAOF", "127.0.0.1", &primary.to_string()]);
            self.wait_until("the restarted node streams from the primary", || {
                self.streams(port)
            });
        }
    }

    fn node(&self, port: u16) -> &Server {
        on_port(&self.nodes, port, Server::port, "data node")
    }

    /// Sends one command to the data node or sentinel on `port` through its Unix socket;
    /// its reply, as [`command`] gives it.
    fn ask(&self, port: u16, args: &[&str]) -> Option<Vec<u8>> {
        let socket = match self.sentinels.iter().find(|s| s.port == port) {
            Some(s) => s.dir.join("redis.sock"),
            None => self.node(port).redis_socket(),
        };
        on_socket(&socket, None, args)
    }

    /// Whether the data node on `port` is a replica whose link to its primary is up.
    fn streams(&self, port: u16) -> bool {
        self.ask(port, &["INFO", "replication"])
            .is_some_and(|i| String::from_utf8_lossy(&i).contains("master_link_status:up"))
    }

    /// Polls `done` every 100 ms until it holds, or panics naming `what` after
    /// `READY_TIMEOUT` with the logs of the sentinels.
    fn wait_until(&self, what: &str, done: impl FnMut() -> bool) {
        wait_until(what, Duration::from_millis(100), done, || {
            logs_of("sentinel", self.sentinels.iter())
        });
    }
}

/// The number after `name` in a flat RESP reply of field/value pairs.
fn field(reply: &str, name: &str) -> Option<usize> {
    let mut lines = reply.split("\r\n").filter(|l| !l.starts_with('$'));
    lines.find(|l| *l == name)?;
    lines.next()?.parse().ok()
}

/// Sends one command to the server on `port` (in plain text: not to a server of
/// [`RedisHa::start_tls`]) and returns its whole reply (raw RESP), or `None` when it cannot be
/// reached or does not answer within a second.
pub fn command(port: u16, args: &[&str]) -> Option<Vec<u8>> {
    let addr = ([127, 0, 0, 1], port).into();
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(1000))).ok()?;
    exchange(s, None, args)
}

/// [`command`] through the Unix socket at `path`, after `AUTH password` when given.
pub(crate) fn on_socket(path: &Path, password: Option<&str>, args: &[&str]) -> Option<Vec<u8>> {
    let s = UnixStream::connect(path).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(5000))).ok()?;
    exchange(s, password, args)
}

/// Sends `AUTH password` (when given) and `args` on `s`; the whole reply to `args` (raw RESP),
/// or `None` when the stream ends or times out first.
pub(crate) fn exchange(
    mut s: impl Read + Write,
    password: Option<&str>,
    args: &[&str],
) -> Option<Vec<u8>> {
    let auth = password.map(|p| ["AUTH", p]);
    let mut req = Vec::new();
    for cmd in auth.as_ref().map(|a| &a[..]).into_iter().chain([args]) {
        req.extend_from_slice(format!("*{}\r\n", cmd.len()).as_bytes());
        for a in cmd {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    s.write_all(&req).ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // AUTH's reply (skipped), then the command's.
        let skipped = if password.is_some() {
            complete(&got)
        } else {
            Some(0)
        };
        if let Some(first) = skipped {
            if let Some(second) = complete(&got[first..]) {
                return Some(got[first..first + second].to_vec());
            }
        }
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
}

/// The length of the first complete RESP value in `buf`, `None` while it is incomplete.
pub(crate) fn complete(buf: &[u8]) -> Option<usize> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let head = std::str::from_utf8(&buf[1..end]).ok()?;
    let after = end + 2;
    match buf.first()? {
        b'+' | b'-' | b':' => Some(after),
        b'$' => {
            let len: i64 = head.parse().ok()?;
            if len < 0 {
                return Some(after);
            }
            let total = after + len as usize + 2;
            (buf.len() >= total).then_some(total)
        }
        b'*' => {
            let n: i64 = head.parse().ok()?;
            let mut at = after;
            for _ in 0..n.max(0) {
                at += complete(&buf[at..])?;
            }
            Some(at)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_replies_are_read_whole() {
        assert_eq!(complete(b"+OK\r\n"), Some(5));
        assert_eq!(complete(b"$3\r\nab"), None);
        assert_eq!(complete(b"$3\r\nabc\r\n"), Some(9));
        assert_eq!(complete(b"*2\r\n$1\r\na\r\n:5\r\n"), Some(15));
        assert_eq!(complete(b"*2\r\n$1\r\na\r\n"), None);
        assert_eq!(field("*4\r\n$3\r\nabc\r\n$1\r\n2\r\n", "abc"), Some(2));
    }

    #[test]
    fn a_killed_primary_is_replaced_by_a_replica() {
        let ha = RedisHa::start(2);
        let old = ha.primary_port().expect("a primary");
        assert_eq!(old, ha.node_ports()[0]);
        assert!(ha.is_master(old));
        assert_eq!(ha.kill_primary(), old);
        let new = ha.wait_for_new_primary(old);
        assert_ne!(new, old);
        assert!(ha.node_ports().contains(&new));
    }
}
