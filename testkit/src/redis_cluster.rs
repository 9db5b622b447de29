//! A throwaway Redis Cluster of three primaries (no replicas), for the cluster store tests.
//!
//! [`RedisCluster::start`] starts three `redis-server --cluster-enabled yes` nodes on free
//! loopback ports (client port and cluster bus port both chosen free), each with the password
//! [`CLUSTER_PASSWORD`] and an append-only file fsynced on every write, gives each a third of the
//! 16384 hash slots (`CLUSTER ADDSLOTSRANGE`), joins them (`CLUSTER MEET`), and returns once
//! every node says `cluster_state:ok` and knows the other two. [`RedisCluster::start_tls`]
//! starts the same cluster serving TLS only (client port, cluster bus and replication), with a
//! certificate from a throwaway CA; the testkit itself talks to every node through its Unix
//! socket.
//!
//! [`RedisCluster::url`] is the `redis+cluster://` store URL naming every node.
//! [`RedisCluster::migrate_slot`] moves one hash slot from its owner to the next node the way
//! `redis-cli --cluster reshard` does, in three steps a test can also take one by one while
//! clients run: [`RedisCluster::begin_migration`] (`CLUSTER SETSLOT … IMPORTING` on the target,
//! `MIGRATING` on the owner: from then on the owner answers `ASK` for keys it no longer has),
//! [`RedisCluster::move_keys`] (`MIGRATE … KEYS` of every key of the slot), and
//! [`RedisCluster::finish_migration`] (`CLUSTER SETSLOT … NODE` on every node: the owner
//! answers `MOVED` from then on). [`RedisCluster::redirections`] reads a node's count of `ASK`
//! or `MOVED` replies (`INFO errorstats`), so a test can tell which redirections its clients
//! followed. Every process is tied to this one (see the crate documentation) and killed on drop;
//! every wait is bounded.

use super::redis_ha::{exchange, on_socket};
use super::{binary, free_port, logs_of, on_port, wait_until, Kind, Spawned, NEXT_ID};
use super::{percent_encoded, redis_tls_args, Tls, REDIS_SERVER_ARGS};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Duration;

/// The password of every node of a [`RedisCluster`]: a test fixture, not a secret.
pub const CLUSTER_PASSWORD: &str = "pw-of-the-test-cluster";

/// The environment variable naming a Redis Cluster to use instead of starting one.
pub const CLUSTER_URL_VAR: &str = "COSID_TEST_REDIS_CLUSTER_URL";

/// The number of primaries.
const NODES: usize = 3;

/// One cluster node, killed (and its directory removed) on drop.
#[derive(Debug)]
struct Node {
    bus_port: u16,
    /// The node's cluster id (`CLUSTER MYID`).
    node_id: String,
    /// The node's Unix socket, where the testkit sends it commands in plain text (a TLS node
    /// has no plain-text port).
    socket: PathBuf,
    process: Spawned,
}

impl Node {
    fn port(&self) -> u16 {
        self.process.port
    }

    /// Starts a node; with `tls` (the certificates of [`make_certificates`]) its one client
    /// port serves TLS only, and so do its cluster bus and replication.
    /// `node_timeout_ms` is the `cluster-node-timeout`.
    fn start(tls: Option<&Tls>, node_timeout_ms: u32) -> Node {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (port, bus_port) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "cosid-testkit-{}-{id}-cluster-node",
            std::process::id()
        ));
        let socket = dir.join("redis.sock");
        let process = Spawned::start(
            id,
            dir,
            ("cluster node", port),
            |dir| {
                let mut cmd = Command::new(binary(Kind::Redis));
                cmd.args(["--bind", "127.0.0.1"]);
                match tls {
                    None => cmd.args(["--port", &port.to_string()]),
                    Some(tls) => {
                        redis_tls_args(&mut cmd, port, &tls.dir, &tls.ca);
                        cmd.args(["--tls-cluster", "yes"])
                    }
                };
                cmd.arg("--unixsocket")
                    .arg(dir.join("redis.sock"))
                    .args(["--unixsocketperm", "700"])
                    .args(["--cluster-enabled", "yes"])
                    .args(["--cluster-port", &bus_port.to_string()])
                    .args(["--cluster-config-file", "nodes.conf"])
                    .args(["--cluster-node-timeout", &node_timeout_ms.to_string()])
                    .arg("--dir")
                    .arg(dir)
                    .args(REDIS_SERVER_ARGS)
                    .args(["--requirepass", CLUSTER_PASSWORD])
                    .args(["--masterauth", CLUSTER_PASSWORD]);
                cmd
            },
            || {
                on_socket(&socket, Some(CLUSTER_PASSWORD), &["PING"])
                    .is_some_and(|r| r.starts_with(b"+PONG"))
            },
        );
        let mut node = Node {
            bus_port,
            node_id: String::new(),
            socket,
            process,
        };
        node.node_id = text(&node.command(&["CLUSTER", "MYID"]).expect("CLUSTER MYID"))
            .lines()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        assert_eq!(node.node_id.len(), 40, "cosid-testkit: CLUSTER MYID");
        node
    }

    /// Sends `args` to the node (through its Unix socket); its reply, as [`command`] gives it.
    fn command(&self, args: &[&str]) -> Option<Vec<u8>> {
        on_socket(&self.socket, Some(CLUSTER_PASSWORD), args)
    }

    /// Sends `args` to the node and panics unless it answers `+OK`.
    fn ok(&self, args: &[&str]) {
        let reply = self.command(args);
        assert!(
            reply.as_deref().is_some_and(|r| r.starts_with(b"+OK")),
            "cosid-testkit: {} on port {} answered {:?}",
            args.first().copied().unwrap_or(""),
            self.port(),
            reply.map(|r| text(&r))
        );
    }
}

/// Three primaries that share the hash slots (see the module documentation).
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    /// The certificates of a cluster that serves TLS only ([`RedisCluster::start_tls`]).
    tls: Option<Tls>,
}

/// A hash slot on its way from one node to another (see [`RedisCluster::begin_migration`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The hash slot.
    pub slot: u16,
    /// The port of the node that owned it.
    pub from: u16,
    /// The port of the node it goes to.
    pub to: u16,
}

impl RedisCluster {
    /// Starts three primaries and waits until the cluster serves every hash slot.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(None, 0)
    }

    /// [`RedisCluster::start`] with `replicas` replicas of each primary (`CLUSTER REPLICATE`),
    /// waiting until every replica streams from its primary. The other nodes keep naming a
    /// killed primary as the owner of its slots (the node timeout is long) until
    /// [`RedisCluster::fail_over`] promotes one of its replicas.
    pub fn start_with_replicas(replicas: usize) -> RedisCluster {
        RedisCluster::start_with(None, replicas)
    }

    /// [`RedisCluster::start`] with nodes that serve TLS only: no plain-text port (`port 0`),
    /// the client port a `tls-port`, and TLS on the cluster bus and for replication, with a
    /// certificate for 127.0.0.1 signed by a throwaway CA ([`RedisCluster::tls_ca`]).
    pub fn start_tls() -> RedisCluster {
        RedisCluster::start_with(Some(Tls::make("cluster")), 0)
    }

    /// The primaries are the first [`NODES`] nodes, then `replicas` of each in turn.
    fn start_with(tls: Option<Tls>, replicas: usize) -> RedisCluster {
        let all = NODES * (1 + replicas);
        // Without replicas, long: no test fails a node over, and a killed node must stay named
        // as the owner by the others for as long as a test looks. With replicas, short enough
        // that the cluster's own failover (and a second election, which waits twice the
        // timeout) fits in a test when the one `fail_over` asks for does not go through.
        let node_timeout_ms = if replicas == 0 { 30_000 } else { 5_000 };
        let nodes: Vec<Node> = (0..all)
            .map(|_| Node::start(tls.as_ref(), node_timeout_ms))
            .collect();
        let per = 16384 / NODES;
        for (i, n) in nodes[..NODES].iter().enumerate() {
            let first = i * per;
            let last = if i + 1 == NODES {
                16383
            } else {
                first + per - 1
            };
            n.ok(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ]);
        }
        for n in &nodes[1..] {
            nodes[0].ok(&[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &n.port().to_string(),
                &n.bus_port.to_string(),
            ]);
        }
        let cluster = RedisCluster { nodes, tls };
        cluster.wait_until("every node serves the cluster and knows the others", || {
            cluster.nodes.iter().all(|n| {
                let info = n
                    .command(&["CLUSTER", "INFO"])
                    .map(|r| text(&r))
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{all}"))
                    && info.contains("cluster_slots_assigned:16384")
            })
        });
        for (i, n) in cluster.nodes[NODES..].iter().enumerate() {
            n.ok(&["CLUSTER", "REPLICATE", &cluster.nodes[i % NODES].node_id]);
        }
        cluster.wait_until("every replica streams from its primary", || {
            cluster.nodes[NODES..].iter().all(|n| {
                n.command(&["INFO", "replication"])
                    .is_some_and(|r| text(&r).contains("master_link_status:up"))
            })
        });
        // A primary that still takes a replica for a primary refuses it its vote in a failover
        // ("it is a master node"): every node must have heard of every replica.
        cluster.wait_until("every node knows every replica as one", || {
            cluster.nodes.iter().all(|n| {
                n.command(&["CLUSTER", "NODES"]).is_some_and(|r| {
                    let replicas_seen = text(&r)
                        .lines()
                        .filter(|l| {
                            l.split_whitespace()
                                .nth(2)
                                .is_some_and(|f| f.contains("slave"))
                        })
                        .count();
                    replicas_seen == all - NODES
                })
            })
        });
        cluster
    }

    /// `redis+cluster://` with the password and every node (replicas too), then `query` (`""` or
    /// `"?replicas=1"` and the like); for a TLS cluster `rediss+cluster://` with the CA as
    /// `cacert=` at the end of the query.
    pub fn url(&self, query: &str) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let hosts = hosts.join(",");
        match &self.tls {
            None => format!("redis+cluster://:{CLUSTER_PASSWORD}@{hosts}/0{query}"),
            Some(tls) => {
                let sep = if query.is_empty() { '?' } else { '&' };
                format!(
                    "rediss+cluster://:{CLUSTER_PASSWORD}@{hosts}/0{query}{sep}cacert={}",
                    percent_encoded(&tls.ca)
                )
            }
        }
    }

    /// The PEM file of the CA that signed the nodes' certificate ([`RedisCluster::start_tls`]).
    pub fn tls_ca(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca.as_path())
    }

    /// The client ports of the nodes.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port()).collect()
    }

    /// The hash slot of `key`, as the cluster computes it (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        let reply = self.nodes[0].command(&["CLUSTER", "KEYSLOT", key]);
        integer(reply.as_deref()).unwrap_or_else(|| panic!("cosid-testkit: CLUSTER KEYSLOT {key}"))
            as u16
    }

    /// The port of the node that owns `slot`, as the node on `asked` sees it.
    pub fn owner_seen_by(&self, asked: u16, slot: u16) -> u16 {
        let nodes = text(
            &self
                .node(asked)
                .command(&["CLUSTER", "NODES"])
                .expect("CLUSTER NODES"),
        );
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let owns = fields.iter().skip(8).any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
            });
            if owns {
                let addr = fields
                    .get(1)
                    .and_then(|a| a.split('@').next())
                    .unwrap_or("");
                if let Some(port) = addr.rsplit(':').next().and_then(|p| p.parse().ok()) {
                    return port;
                }
            }
        }
        panic!("cosid-testkit: no node owns hash slot {slot} in CLUSTER NODES:\n{nodes}");
    }

    /// The port of the node that owns `slot` (as the first node that answers sees it).
    pub fn owner(&self, slot: u16) -> u16 {
        let asked = self
            .nodes
            .iter()
            .find(|n| n.command(&["PING"]).is_some())
            .expect("cosid-testkit: no node of the cluster answers");
        self.owner_seen_by(asked.port(), slot)
    }

    /// Fails over the shard that owns `slot`: kills its primary with `SIGKILL`, then has one of
    /// its replicas take over (`CLUSTER FAILOVER FORCE`: the other primaries vote without
    /// waiting for the node timeout; should that election fail, the cluster fails the shard
    /// over itself once the node timeout, 5 s, has passed), and waits until every running node
    /// names the same new owner of `slot`. Returns the ports of the old primary and of the new
    /// one.
    pub fn fail_over(&self, slot: u16) -> (u16, u16) {
        let old = self.owner(slot);
        let old_id = &self.node(old).node_id;
        let replica = self
            .nodes
            .iter()
            .find(|n| self.replica_of(n.port()).as_deref() == Some(old_id.as_str()))
            .unwrap_or_else(|| panic!("cosid-testkit: the primary on port {old} has no replica"))
            .port();
        self.kill_node(old);
        self.node(replica).ok(&["CLUSTER", "FAILOVER", "FORCE"]);
        let mut new = None;
        self.wait_until("every running node names the same promoted replica", || {
            let owners: Vec<u16> = self
                .nodes
                .iter()
                .filter(|n| n.port() != old && n.command(&["PING"]).is_some())
                .map(|n| self.owner_seen_by(n.port(), slot))
                .collect();
            new = owners.first().copied().filter(|o| {
                *o != old && owners.iter().all(|x| x == o) && self.replica_of(*o).is_none()
            });
            new.is_some()
        });
        (old, new.expect("set when the wait ended"))
    }

    /// The id of the primary the node on `port` replicates, as it says itself (`CLUSTER
    /// NODES`, its `myself` line), or `None` for a primary.
    fn replica_of(&self, port: u16) -> Option<String> {
        let nodes = text(&self.node(port).command(&["CLUSTER", "NODES"])?);
        let line = nodes.lines().find(|l| l.contains("myself"))?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields
            .get(3)
            .filter(|id| **id != "-")
            .map(|id| id.to_string())
    }

    /// Starts moving `slot` from its owner to the next node: `CLUSTER SETSLOT slot IMPORTING`
    /// on that node, then `MIGRATING` on the owner. Keys stay where they are until
    /// [`RedisCluster::move_keys`].
    pub fn begin_migration(&self, slot: u16) -> Migration {
        let from = self.owner(slot);
        let i = self
            .nodes
            .iter()
            .position(|n| n.port() == from)
            .expect("the owner is a node of the cluster");
        let to = self.nodes[(i + 1) % NODES].port();
        let s = slot.to_string();
        for (on, state, other) in [(to, "IMPORTING", from), (from, "MIGRATING", to)] {
            let other = &self.node(other).node_id;
            self.node(on).ok(&["CLUSTER", "SETSLOT", &s, state, other]);
        }
        Migration { slot, from, to }
    }

    /// Moves every key of the migration's slot to its target (`CLUSTER GETKEYSINSLOT`, then one
    /// `MIGRATE … KEYS` per batch, until the owner holds none). Returns how many keys moved.
    pub fn move_keys(&self, m: &Migration) -> usize {
        let s = m.slot.to_string();
        let mut moved = 0;
        loop {
            let reply = self
                .node(m.from)
                .command(&["CLUSTER", "GETKEYSINSLOT", &s, "100"])
                .expect("CLUSTER GETKEYSINSLOT");
            let keys: Vec<String> = text(&reply)
                .lines()
                .skip(1)
                .filter(|l| !l.starts_with('$'))
                .map(String::from)
                .collect();
            if keys.is_empty() {
                return moved;
            }
            self.migrate_keys(m, &keys.iter().map(String::as_str).collect::<Vec<_>>());
            moved += keys.len();
        }
    }

    /// Moves `keys` (of the migration's slot) from the old owner to the target with one
    /// `MIGRATE … KEYS`, and panics unless the old owner answers `+OK`.
    pub fn migrate_keys(&self, m: &Migration, keys: &[&str]) {
        let to_port = m.to.to_string();
        let mut args = vec![
            "MIGRATE",
            "127.0.0.1",
            &to_port,
            "",
            "0",
            "5000",
            "AUTH",
            CLUSTER_PASSWORD,
            "KEYS",
        ];
        args.extend_from_slice(keys);
        self.node(m.from).ok(&args);
    }

    /// Ends the migration: `CLUSTER SETSLOT slot NODE target` on the target, the old owner and
    /// the other node, and waits until every node names the target as the owner.
    pub fn finish_migration(&self, m: &Migration) {
        let s = m.slot.to_string();
        let to_id = self.node(m.to).node_id.clone();
        let mut order = vec![m.to, m.from];
        order.extend(
            self.ports()
                .into_iter()
                .filter(|p| *p != m.to && *p != m.from),
        );
        for port in order {
            self.node(port)
                .ok(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        }
        self.wait_until("every node names the new owner of the slot", || {
            self.nodes
                .iter()
                .all(|n| self.owner_seen_by(n.port(), m.slot) == m.to)
        });
    }

    /// Moves `slot` from its owner to the next node, keys and all.
    pub fn migrate_slot(&self, slot: u16) -> Migration {
        let m = self.begin_migration(slot);
        self.move_keys(&m);
        self.finish_migration(&m);
        m
    }

    /// Kills the node on `port` with `SIGKILL` (the other nodes keep naming it as the owner of
    /// its slots until the cluster's node timeout, 30 s, passes).
    pub fn kill_node(&self, port: u16) {
        let node = self.node(port);
        let pid = node.process.child.id();
        // The child is reaped when the node is dropped.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
        wait_until(
            &format!("node {port} stops answering"),
            Duration::from_millis(20),
            || node.command(&["PING"]).is_none(),
            String::new,
        );
    }

    /// How many `ASK` or `MOVED` (`code`) replies the node on `port` has sent since it started
    /// (`INFO errorstats`).
    pub fn redirections(&self, port: u16, code: &str) -> u64 {
        let info = text(
            &self
                .node(port)
                .command(&["INFO", "errorstats"])
                .expect("INFO errorstats"),
        );
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("errorstat_{code}:count=")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    fn node(&self, port: u16) -> &Node {
        on_port(&self.nodes, port, Node::port, "cluster node")
    }

    /// Polls `done` every 50 ms until it holds, or panics naming `what` after
    /// `READY_TIMEOUT` with the nodes' logs.
    fn wait_until(&self, what: &str, done: impl FnMut() -> bool) {
        wait_until(what, Duration::from_millis(50), done, || {
            logs_of("node", self.nodes.iter().map(|n| &n.process))
        });
    }
}

/// The `redis+cluster://` URL of this test binary's shared cluster (started on first use), or
/// [`CLUSTER_URL_VAR`] when set.
pub fn shared_redis_cluster_url() -> String {
    if let Ok(url) = std::env::var(CLUSTER_URL_VAR) {
        if !url.trim().is_empty() {
            return url;
        }
    }
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start).url("")
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// The integer of a `:N` reply.
fn integer(reply: Option<&[u8]>) -> Option<i64> {
    let t = std::str::from_utf8(reply?).ok()?;
    t.strip_prefix(':')?.trim_end().parse().ok()
}

/// The `rediss+cluster://` URL (with `cacert=`) of this test binary's shared TLS cluster
/// ([`RedisCluster::start_tls`], started on first use).
pub fn shared_redis_cluster_tls_url() -> String {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start_tls).url("")
}

/// Sends `AUTH` with [`CLUSTER_PASSWORD`] and then one command to the node on `port` (in plain
/// text: not to a node of [`RedisCluster::start_tls`]), and returns the command's whole reply
/// (raw RESP), or `None` when the node cannot be reached or does not answer within a few
/// seconds.
pub fn command(port: u16, args: &[&str]) -> Option<Vec<u8>> {
    let addr = ([127, 0, 0, 1], port).into();
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(5000))).ok()?;
    exchange(s, Some(CLUSTER_PASSWORD), args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_migrated_slot_changes_owner_with_its_keys() {
        let cluster = RedisCluster::start();
        let slot = cluster.keyslot("{testkit}:k");
        let from = cluster.owner(slot);
        let set = command(from, &["SET", "{testkit}:k", "v"]).expect("SET");
        assert!(set.starts_with(b"+OK"), "{}", text(&set));
        let m = cluster.migrate_slot(slot);
        assert_eq!((m.from, cluster.owner(slot)), (from, m.to));
        let get = command(m.to, &["GET", "{testkit}:k"]).expect("GET");
        assert!(text(&get).contains("\r\nv\r\n"), "{}", text(&get));
        let moved = command(m.from, &["GET", "{testkit}:k"]).expect("GET");
        assert!(moved.starts_with(b"-MOVED"), "{}", text(&moved));
        assert!(cluster.redirections(m.from, "MOVED") >= 1);
    }
}
