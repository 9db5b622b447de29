//! A throwaway etcd cluster of three members on loopback, for the etcd cluster tests and the
//! store benchmark.
//!
//! [`EtcdCluster::start`] starts three `etcd` members (each with a client port and a peer port
//! chosen free, and a data directory of its own) that bootstrap one cluster together
//! (`--initial-cluster` naming all three), and returns once every member answers `/health`
//! (which etcd answers healthy only when the member sees a leader). [`EtcdCluster::url`] is the
//! `etcd://` store URL naming every member. [`EtcdCluster::leader`] asks the members who leads
//! (`/v3/maintenance/status`); [`EtcdCluster::kill`] SIGKILLs one member and
//! [`EtcdCluster::restart`] starts it again on its ports with its data, so a test can take the
//! leader away under load. Every process is tied to this one (see the crate documentation) and
//! killed on drop; every wait is bounded.

use super::READY_TIMEOUT;
use super::{binary, unregister, Kind, NEXT_ID};
use super::{etcd_command, exchange, free_port, kill_child, register, spawn_tied, tail};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The environment variable naming an etcd cluster to use instead of starting one.
pub const CLUSTER_URL_VAR: &str = "COSID_TEST_ETCD_CLUSTER_URL";

/// The number of members.
const MEMBERS: usize = 3;

/// One member: its ports, its directory, and its process while it runs.
#[derive(Debug)]
struct Member {
    /// The member's entry in the testkit's registry (its process and directory).
    id: u64,
    name: String,
    port: u16,
    peer_port: u16,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
}

impl Member {
    fn log(&self) -> PathBuf {
        self.dir.join("member.log")
    }

    fn healthy(&self) -> bool {
        exchange(self.port, b"GET /health HTTP/1.0\r\n\r\n")
            .is_some_and(|r| r.contains("\"health\":\"true\""))
    }

    /// Whether the process still runs.
    fn running(&self) -> bool {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn kill(&self) {
        kill_child(&self.child, self.id, &self.dir);
    }
}

/// Three etcd members forming one cluster (see the module documentation).
#[derive(Debug)]
pub struct EtcdCluster {
    id: u64,
    dir: PathBuf,
    members: Vec<Member>,
    initial_cluster: String,
}

impl EtcdCluster {
    /// Starts three members and waits until each is healthy (sees a leader).
    pub fn start() -> EtcdCluster {
        binary(Kind::Etcd);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "cosid-testkit-{}-{id}-etcd-cluster",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cosid-testkit: cannot create {}: {e}", dir.display()));
        register(id, None, &dir);
        let members: Vec<Member> = (0..MEMBERS)
            .map(|i| Member {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                name: format!("cosid-member-{i}"),
                port: free_port(),
                peer_port: free_port(),
                dir: dir.join(format!("member-{i}")),
                child: Mutex::new(None),
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let cluster = EtcdCluster {
            id,
            dir,
            members,
            initial_cluster,
        };
        for i in 0..MEMBERS {
            cluster.spawn(i);
        }
        cluster.wait_healthy();
        cluster
    }

    /// `etcd://` naming every member's client port.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// The client ports of the members, in their order.
    pub fn ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.port).collect()
    }

    /// The index of the member that leads, as the running members report it (`None` while
    /// none reports one).
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().enumerate().find_map(|(i, m)| {
            if !m.running() {
                return None;
            }
            let status = exchange(
                m.port,
                b"POST /v3/maintenance/status HTTP/1.0\r\nContent-Type: application/json\r\n\
                  Content-Length: 2\r\n\r\n{}",
            )?;
            let own = json_string(&status, "member_id")?;
            let leader = json_string(&status, "leader")?;
            (own == leader && leader != "0").then_some(i)
        })
    }

    /// SIGKILLs member `i` (its data stays).
    pub fn kill(&self, i: usize) {
        self.members[i].kill();
    }

    /// Starts member `i` again on its ports with its data, and waits until every running
    /// member is healthy.
    pub fn restart(&self, i: usize) {
        if !self.members[i].running() {
            self.spawn(i);
        }
        self.wait_healthy();
    }

    fn spawn(&self, i: usize) {
        let m = &self.members[i];
        std::fs::create_dir_all(&m.dir).expect("cosid-testkit: etcd member dir");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(m.log())
            .expect("cosid-testkit: etcd member log");
        let mut cmd = etcd_command(
            &m.name,
            &m.dir.join("data"),
            (m.port, m.peer_port),
            &self.initial_cluster,
        );
        cmd.args([
            "--initial-cluster-token",
            &format!("cosid-test-{}", self.id),
        ])
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out);
        let child = spawn_tied(cmd)
            .unwrap_or_else(|e| panic!("cosid-testkit: cannot start etcd member {i}: {e}"));
        register(m.id, Some(child.id()), &m.dir);
        *m.child.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let mut all = true;
            for (i, m) in self.members.iter().enumerate() {
                let running = m.child.lock().unwrap_or_else(|p| p.into_inner()).is_some();
                if !running {
                    continue;
                }
                if !m.running() {
                    panic!(
                        "cosid-testkit: etcd member {i} exited; its log:\n{}",
                        tail(&m.log())
                    );
                }
                all &= m.healthy();
            }
            if all {
                return;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .members
                    .iter()
                    .enumerate()
                    .map(|(i, m)| format!("member {i}:\n{}", tail(&m.log())))
                    .collect();
                panic!(
                    "cosid-testkit: the etcd cluster was not healthy within {READY_TIMEOUT:?}; \
                     the members' logs:\n{}",
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &self.members {
            m.kill();
            unregister(m.id);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        unregister(self.id);
    }
}

/// The value of `"key":"value"` in a JSON text (etcd's gateway writes ids as strings).
fn json_string(json: &str, key: &str) -> Option<String> {
    let at = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let rest = &json[at..];
    Some(rest[..rest.find('"')?].to_string())
}

/// The URL of this test binary's shared three-member etcd cluster, or
/// `COSID_TEST_ETCD_CLUSTER_URL` when set.
pub fn shared_etcd_cluster_url() -> String {
    if let Ok(url) = std::env::var(CLUSTER_URL_VAR) {
        if !url.trim().is_empty() {
            return url;
        }
    }
    static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();
    CLUSTER.get_or_init(EtcdCluster::start).url()
}

#[cfg(test)]
mod tests {
    use super::json_string;

    #[test]
    fn json_string_reads_a_quoted_value() {
        let status =
            r#"{"header":{"cluster_id":"1","member_id":"42","revision":"3"},"leader":"42"}"#;
        assert_eq!(json_string(status, "member_id").as_deref(), Some("42"));
        assert_eq!(json_string(status, "leader").as_deref(), Some("42"));
        assert_eq!(json_string(status, "raftTerm"), None);
    }
}
