//! Store latency on loopback: acquire, renew and release per store (criterion's figures, then
//! a table of median and p99 from plain samples), the round trips each operation costs, the
//! physical floor (one bare round trip with the same client library, measured in the same run),
//! and the time for 1024 runtimes to all hold a slot.
//!
//! Servers are the throwaway ones `cosid-testkit` starts (Redis with an append-only file fsynced
//! on every write, PostgreSQL with its default `synchronous_commit = on`, a one-member etcd,
//! MariaDB with `innodb_flush_log_at_trx_commit = 1`), the same as the tests'. SQLite (synchronous=FULL) and the in-process store are measured beside
//! them as the local reference.
//!
//! `cargo bench -p cosid-core --features redis,postgres,etcd,mysql --bench stores`
//! (`COSID_BENCH_STORES=postgres,postgres-sync-standby` for some of the stores only). Besides
//! the single servers: Redis through Sentinel with `replicas=1` (a primary, two replicas, three
//! sentinels), PostgreSQL with a synchronous standby, as docs/stores.md sets them up for a
//! failover, a Redis Cluster of three primaries (`redis-cluster`) and an etcd cluster of three
//! members (`etcd-cluster-3`).

use cosid_core::lease::{AcquireRequest, LeaseClient, Owner, Renewal, SlotLease};
use cosid_core::store::hooked::Hooked;
use cosid_core::store::{self, SharedStore};
use cosid_testkit::etcd_cluster::EtcdCluster;
use cosid_testkit::pg_standby::PgPair;
use cosid_testkit::redis_cluster::{RedisCluster, CLUSTER_PASSWORD};
use cosid_testkit::redis_ha::RedisHa;
use cosid_testkit::Server;
use criterion::{BenchmarkId, Criterion};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[path = "common/counting.rs"]
mod counting;
#[path = "common/select.rs"]
mod select;
use counting::Counting;
use select::{wanted, TERMS};

/// One store under measurement.
struct Target {
    name: &'static str,
    url: String,
    counting: Arc<Hooked<Counting>>,
    /// One bare round trip with the store's own client library, for the floor column.
    floor: Option<Box<dyn Fn()>>,
    /// Keeps the server running.
    _server: Option<Server>,
    /// Keeps a replicated PostgreSQL pair running.
    _pair: Option<PgPair>,
    /// Keeps a replicated Redis group running.
    _ha: Option<RedisHa>,
    /// Keeps a cluster running (Redis Cluster, etcd members).
    _cluster: Option<Box<dyn std::any::Any>>,
    _dir: Option<tempfile::TempDir>,
}

impl Target {
    fn new(name: &'static str, url: String, server: Option<Server>) -> Target {
        let inner = store::open(&url).unwrap_or_else(|e| panic!("open {url}: {e}"));
        Target {
            name,
            url,
            counting: Counting::new(inner),
            floor: None,
            _server: server,
            _pair: None,
            _ha: None,
            _cluster: None,
            _dir: None,
        }
    }

    /// A single server of the bench's own, its floor the bare round trip `floor` makes to its
    /// URL: the four single servers are set up alike.
    fn single(name: &'static str, server: Server, floor: fn(&str) -> Box<dyn Fn()>) -> Target {
        let mut t = Target::new(name, server.url(), Some(server));
        t.floor = Some(floor(&t.url));
        t
    }

    fn store(&self) -> SharedStore {
        self.counting.clone()
    }

    fn client(&self, ns: &str, bits: u8) -> LeaseClient {
        LeaseClient::new(self.store(), ns, bits, TERMS).expect("a lease client")
    }
}

fn req(owner: Owner) -> AcquireRequest {
    AcquireRequest {
        owner,
        preferred_slot: None,
        floor_at_least: 0,
    }
}

fn unique(what: &str) -> String {
    format!("bench-{what}-{}", uuid::Uuid::new_v4().simple())
}

fn renewed(c: &LeaseClient, lease: &SlotLease) -> SlotLease {
    match c.renew(lease).expect("renew") {
        Renewal::Renewed(l) => l,
        Renewal::Lost(r) => panic!("lost: {r:?}"),
    }
}

/// The stores measured: all of them, or those `COSID_BENCH_STORES` names (comma-separated
/// names of the table's first column, e.g. `postgres,postgres-sync-standby`).
fn targets() -> Vec<Target> {
    let mut out = Vec::new();
    if wanted("memory") {
        out.push(Target::new("memory", "memory:bench".into(), None));
    }
    if wanted("sqlite") {
        let dir = tempfile::tempdir().unwrap();
        let mut sqlite = Target::new(
            "sqlite",
            format!("sqlite://{}", dir.path().join("slots.db").display()),
            None,
        );
        sqlite._dir = Some(dir);
        out.push(sqlite);
    }
    if wanted("redis") {
        out.push(Target::single("redis", Server::redis(), redis_ping));
    }
    if wanted("redis-sentinel-replicas-1") {
        // Two replicas, three sentinels; every compare-and-set waits for one replica's
        // acknowledgement (`WAIT 1`) in the same round trip. A long down-after keeps a loaded
        // machine from failing the primary over during the run.
        let ha = RedisHa::start_with(2, Duration::from_secs(60));
        let mut t = Target::new(
            "redis-sentinel-replicas-1",
            ha.sentinel_url("?replicas=1"),
            None,
        );
        let primary = ha.primary_port().expect("the sentinels name a primary");
        t.floor = Some(redis_ping(&ha.node_url(primary)));
        t._ha = Some(ha);
        out.push(t);
    }
    if wanted("postgres") {
        out.push(Target::single(
            "postgres",
            Server::postgres(),
            postgres_select_1,
        ));
    }
    if wanted("postgres-sync-standby") {
        // Every commit waits for the standby to flush it (synchronous_commit = on with a
        // synchronous standby named): what docs/stores.md asks of a failover setup.
        let pair = PgPair::start();
        let mut t = Target::new("postgres-sync-standby", pair.url(""), None);
        t.floor = Some(postgres_select_1(&pair.primary().url()));
        t._pair = Some(pair);
        out.push(t);
    }
    if wanted("mysql") {
        out.push(Target::single("mysql", Server::mysql(), mysql_select_1));
    }
    if wanted("etcd") {
        out.push(Target::single("etcd", Server::etcd(), |url| {
            etcd_get(etcd_port(url))
        }));
    }
    if wanted("redis-cluster") {
        // Three primaries; the namespace's keys share one hash slot, so every operation goes
        // to one node (the client learns it from the first `MOVED`).
        let cluster = RedisCluster::start();
        let mut t = Target::new("redis-cluster", cluster.url(""), None);
        let node = format!(
            "redis://:{CLUSTER_PASSWORD}@127.0.0.1:{}/0",
            cluster.ports()[0]
        );
        t.floor = Some(redis_ping(&node));
        t._cluster = Some(Box::new(cluster));
        out.push(t);
    }
    if wanted("etcd-cluster-3") {
        // Three members: every write is committed by two of them (the leader and one
        // follower) before it is acknowledged, every read is linearizable (a round of the
        // leader's heartbeats).
        let cluster = EtcdCluster::start();
        let mut t = Target::new("etcd-cluster-3", cluster.url(), None);
        let leader = cluster.leader().unwrap_or(0);
        t.floor = Some(etcd_get(cluster.ports()[leader]));
        t._cluster = Some(Box::new(cluster));
        out.push(t);
    }
    assert!(
        !out.is_empty(),
        "COSID_BENCH_STORES={:?} names no store of memory, sqlite, redis, \
         redis-sentinel-replicas-1, redis-cluster, postgres, postgres-sync-standby, mysql, \
         etcd, etcd-cluster-3",
        std::env::var("COSID_BENCH_STORES").ok()
    );
    out
}

fn redis_ping(url: &str) -> Box<dyn Fn()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = redis::Client::open(url).unwrap();
    let conn = rt
        .block_on(client.get_multiplexed_async_connection())
        .unwrap();
    Box::new(move || {
        let mut conn = conn.clone();
        let _: String = rt
            .block_on(redis::cmd("PING").query_async(&mut conn))
            .unwrap();
    })
}

fn postgres_select_1(url: &str) -> Box<dyn Fn()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (client, stmt) = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let stmt = client.prepare("SELECT 1").await.unwrap();
        (client, stmt)
    });
    Box::new(move || {
        rt.block_on(client.query_one(&stmt, &[])).unwrap();
    })
}

/// A prepared `SELECT 1` on one mysql_async connection (as the store sends its statements).
fn mysql_select_1(url: &str) -> Box<dyn Fn()> {
    use mysql_async::prelude::Queryable;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = rt
        .block_on(mysql_async::Conn::from_url(url))
        .expect("a connection");
    let conn = std::cell::RefCell::new(conn);
    Box::new(move || {
        let mut c = conn.borrow_mut();
        let one: Option<i64> = rt.block_on(c.exec_first("SELECT 1", ())).unwrap();
        assert_eq!(one, Some(1));
    })
}

fn etcd_port(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// One linearizable read of a key through etcd's JSON gateway (as the store reads), on one
/// keep-alive HTTP/1.1 connection.
fn etcd_get(port: u16) -> Box<dyn Fn()> {
    use std::io::{BufRead, BufReader, Read, Write};
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_nodelay(true).unwrap();
    let conn = std::cell::RefCell::new(BufReader::new(stream));
    // base64 of "cosid-bench-floor".
    let body = r#"{"key":"Y29zaWQtYmVuY2gtZmxvb3I="}"#;
    let request = format!(
        "POST /v3/kv/range HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    Box::new(move || {
        let mut conn = conn.borrow_mut();
        conn.get_mut().write_all(request.as_bytes()).unwrap();
        let mut length = None;
        let mut line = String::new();
        loop {
            line.clear();
            conn.read_line(&mut line).unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = Some(v.trim().parse::<usize>().unwrap());
                }
            }
        }
        let mut answer = vec![0; length.expect("a small answer has a Content-Length")];
        conn.read_exact(&mut answer).unwrap();
    })
}

fn criterion_benches(c: &mut Criterion, targets: &[Target]) {
    let mut group = c.benchmark_group("stores");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for t in targets {
        let lc = t.client(&unique("crit"), 10);
        group.bench_function(BenchmarkId::new("acquire", t.name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    let start = Instant::now();
                    let got = lc.acquire(&req(Owner::new(format!("o{i}")))).unwrap();
                    total += start.elapsed();
                    lc.release(&got.lease, None).unwrap();
                }
                total
            })
        });
        let held = lc.acquire(&req(Owner::new("renewer"))).unwrap().lease;
        group.bench_function(BenchmarkId::new("renew", t.name), |b| {
            b.iter(|| renewed(&lc, &held))
        });
        lc.release(&held, None).unwrap();
        group.bench_function(BenchmarkId::new("release", t.name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    let got = lc.acquire(&req(Owner::new(format!("r{i}")))).unwrap();
                    let start = Instant::now();
                    assert!(lc.release(&got.lease, None).unwrap());
                    total += start.elapsed();
                }
                total
            })
        });
        if let Some(floor) = &t.floor {
            group.bench_function(BenchmarkId::new("floor-round-trip", t.name), |b| {
                b.iter(floor)
            });
        }
    }
    group.finish();
}

/// Median and p99 of `n` samples of `f`, in µs.
fn percentiles(n: usize, mut f: impl FnMut() -> Duration) -> (f64, f64) {
    let mut v: Vec<Duration> = (0..n).map(|_| f()).collect();
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (us(v[n / 2]), us(v[(n * 99) / 100]))
}

/// The time for 1024 runtimes (32 threads with a store handle each, 32 owners in turn on each)
/// to all hold a slot in a new namespace of 1024 slots.
fn all_1024_hold_a_slot(url: &str) -> Duration {
    let ns = unique("1024");
    let handles: Vec<SharedStore> = (0..32).map(|_| store::open(url).unwrap()).collect();
    // Every handle connects (and PostgreSQL checks its schema) before the clock starts.
    for h in &handles {
        h.read_slot(&ns, 0).unwrap();
    }
    let barrier = Arc::new(Barrier::new(33));
    let threads: Vec<_> = handles
        .into_iter()
        .enumerate()
        .map(|(t, h)| {
            let (ns, barrier) = (ns.clone(), barrier.clone());
            std::thread::spawn(move || {
                let c = LeaseClient::new(h, &ns, 10, TERMS).unwrap();
                barrier.wait();
                for i in 0..32 {
                    c.acquire(&req(Owner::new(format!("rt-{t}-{i}")))).unwrap();
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for t in threads {
        t.join().unwrap();
    }
    start.elapsed()
}

fn summary(targets: &[Target]) {
    const N: usize = 1000;
    println!();
    println!("| store | acquire p50 | acquire p99 | renew p50 | renew p99 | release p50 | release p99 | floor p50 | round trips acquire / renew / release | 1024 runtimes hold a slot (median of 3) |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|");
    for t in targets {
        let lc = t.client(&unique("table"), 10);
        // Round trips: primitives per operation, on a namespace that exists.
        lc.open_namespace().unwrap();
        t.counting.take();
        let a = lc.acquire(&req(Owner::new("count"))).unwrap().lease;
        let rt_acquire = t.counting.take().0;
        let a = renewed(&lc, &a);
        let rt_renew = t.counting.take().0;
        lc.release(&a, None).unwrap();
        let rt_release = t.counting.take().0;

        let (acq50, acq99) = percentiles(N, || {
            let start = Instant::now();
            let got = lc.acquire(&req(Owner::new("p"))).unwrap();
            let d = start.elapsed();
            lc.release(&got.lease, None).unwrap();
            d
        });
        let held = lc.acquire(&req(Owner::new("renewer"))).unwrap().lease;
        let (ren50, ren99) = percentiles(N, || {
            let start = Instant::now();
            renewed(&lc, &held);
            start.elapsed()
        });
        lc.release(&held, None).unwrap();
        let (rel50, rel99) = percentiles(N, || {
            let got = lc.acquire(&req(Owner::new("q"))).unwrap();
            let start = Instant::now();
            lc.release(&got.lease, None).unwrap();
            start.elapsed()
        });
        let floor = t.floor.as_ref().map_or("-".to_string(), |f| {
            let (p50, _) = percentiles(N, || {
                let start = Instant::now();
                f();
                start.elapsed()
            });
            format!("{p50:.0} µs")
        });
        let all = if t.name == "memory" {
            // Every handle of `memory:` is one store: the same measurement, in-process.
            all_1024_hold_a_slot(&t.url)
        } else {
            let mut runs: Vec<Duration> = (0..3).map(|_| all_1024_hold_a_slot(&t.url)).collect();
            runs.sort();
            runs[1]
        };
        println!(
            "| {} | {acq50:.0} µs | {acq99:.0} µs | {ren50:.0} µs | {ren99:.0} µs | {rel50:.0} µs | {rel99:.0} µs | {floor} | {rt_acquire} / {rt_renew} / {rt_release} | {:.0} ms |",
            t.name,
            all.as_secs_f64() * 1e3
        );
    }
    if let Some(t) = targets.iter().find(|t| t.name == "redis") {
        // The server's own count: one EVALSHA per primitive.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let calls = |rt: &tokio::runtime::Runtime| -> u64 {
            rt.block_on(async {
                let c = redis::Client::open(t.url.as_str()).unwrap();
                let mut conn = c.get_multiplexed_async_connection().await.unwrap();
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                info.lines()
                    .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            })
        };
        let lc = t.client(&unique("evalsha"), 10);
        lc.open_namespace().unwrap();
        let before = calls(&rt);
        let a = lc.acquire(&req(Owner::new("s"))).unwrap().lease;
        let a = renewed(&lc, &a);
        lc.release(&a, None).unwrap();
        println!(
            "\nredis-server counted {} EVALSHA for one acquire + renew + release",
            calls(&rt) - before
        );
    }
}

fn main() {
    let targets = targets();
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c, &targets);
    summary(&targets);
    c.final_summary();
}
