//! Throwaway Redis, PostgreSQL, etcd and MariaDB servers for cosid's store tests.
//!
//! Each server runs on free loopback ports with a temporary data directory, as a child of this
//! process that can never outlive it: it is spawned from one long-lived thread with
//! `PR_SET_PDEATHSIG` = `SIGKILL` (the signal follows the *thread* that forked, hence the
//! dedicated thread), and an `atexit` hook kills it and removes its directory when the test
//! binary exits normally. A [`Server`] also stops on drop.
//!
//! - [`shared_redis_url`], [`shared_postgres_url`], [`shared_etcd_url`], [`shared_mysql_url`]:
//!   one server per test binary (a `OnceLock`), or the server named by `COSID_TEST_REDIS_URL`,
//!   `COSID_TEST_POSTGRES_URL`, `COSID_TEST_ETCD_URL` or `COSID_TEST_MYSQL_URL` when set. For
//!   tests that leave the server running.
//! - [`Server::redis`], [`Server::postgres`], [`Server::etcd`], [`Server::mysql`]: a server of
//!   the caller's own,
//!   for fault tests that stop it, start it again ([`Server::stop`], [`Server::start`]: same data
//!   directory, same port) or restart it empty ([`Server::restart_empty`]).
//!
//! A missing server binary is a panic that names the Debian package to install: a store test is
//! never skipped silently.
//!
//! PostgreSQL refuses to run as root; when the tests run as root its `initdb` and `postgres`
//! run as the `postgres` user (uid and gid set in the child before `exec`, which is what
//! `runuser -u postgres --` does, without an extra process in between that could outlive us).
//! MariaDB (`mariadbd`, or a MySQL `mysqld`) runs with `--user=root` then, which it accepts when
//! told.

pub mod etcd_cluster;
pub mod pg_standby;
pub mod race;
pub mod redis_cluster;
pub mod redis_ha;

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a server may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The settings every throwaway Redis server of the testkit runs with: every write on disk
/// before it is acknowledged (AOF, fsync always; no RDB snapshots), in the foreground, open on
/// loopback, and at most 1000 clients (so that a connect storm from a test is seen, not
/// absorbed).
const REDIS_SERVER_ARGS: [&str; 12] = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--save",
    "",
    "--daemonize",
    "no",
    "--protected-mode",
    "no",
    "--maxclients",
    "1000",
];
/// How long a graceful stop may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `redis-server`.
    Redis,
    /// PostgreSQL (`initdb` + `postgres`).
    Postgres,
    /// `etcd`.
    Etcd,
    /// MariaDB (`mariadb-install-db` + `mariadbd`; MySQL's `mysqld` when that is what is
    /// installed).
    Mysql,
}

impl Kind {
    fn env_var(self) -> &'static str {
        match self {
            Kind::Redis => "COSID_TEST_REDIS_URL",
            Kind::Postgres => "COSID_TEST_POSTGRES_URL",
            Kind::Etcd => "COSID_TEST_ETCD_URL",
            Kind::Mysql => "COSID_TEST_MYSQL_URL",
        }
    }
}

/// A throwaway server: started on creation, stopped (and its data removed) on drop.
#[derive(Debug)]
pub struct Server {
    kind: Kind,
    id: u64,
    port: u16,
    peer_port: u16,
    dir: PathBuf,
    /// The uid/gid to run PostgreSQL as (when we are root).
    run_as: Option<(u32, u32)>,
    /// The CA that signed the server's certificate, when it serves TLS.
    tls_ca: Option<PathBuf>,
    /// The directory of the server's certificate and key (`server.crt`, `server.key`), when
    /// it serves TLS.
    tls_dir: Option<PathBuf>,
    child: Mutex<Option<Child>>,
}

impl Server {
    /// A new `redis-server` with an append-only file fsynced on every write.
    pub fn redis() -> Server {
        Server::new(Kind::Redis)
    }

    /// A new PostgreSQL cluster (`initdb`, trust authentication, user `postgres`).
    pub fn postgres() -> Server {
        Server::new(Kind::Postgres)
    }

    /// A new PostgreSQL cluster that also serves TLS (`ssl = on`) with a certificate for
    /// `127.0.0.1` and `localhost` signed by a throwaway CA ([`Server::tls_ca`]). Needs the
    /// `openssl` command (Debian `openssl`).
    pub fn postgres_tls() -> Server {
        Server::with_tls(Kind::Postgres, true)
    }

    /// A new single-member etcd cluster.
    pub fn etcd() -> Server {
        Server::new(Kind::Etcd)
    }

    /// A new MariaDB server (InnoDB, `innodb_flush_log_at_trx_commit = 1`, no binary log) with a
    /// database `cosid`, a user `cosid` without a password and a user [`MYSQL_PASSWORD_USER`]
    /// with one, both allowed everything.
    pub fn mysql() -> Server {
        Server::new(Kind::Mysql)
    }

    /// [`Server::mysql`] serving TLS only (`require_secure_transport`), with a certificate for
    /// `127.0.0.1` and `localhost` signed by a throwaway CA ([`Server::tls_ca`]). Needs the
    /// `openssl` command (Debian `openssl`).
    pub fn mysql_tls() -> Server {
        Server::with_tls(Kind::Mysql, true)
    }

    fn new(kind: Kind) -> Server {
        Server::with_tls(kind, false)
    }

    fn with_tls(kind: Kind, tls: bool) -> Server {
        Server::with_certificates(kind, |dir, owner| {
            tls.then(|| {
                let ca = make_certificates(dir, owner);
                (dir.join("tls"), ca)
            })
        })
    }

    /// A `redis-server` that serves TLS only (`port 0`, its port a `tls-port`, replication
    /// over TLS) with the certificate of `tls`, which the other servers of its group share.
    fn redis_tls(tls: &Tls) -> Server {
        Server::with_certificates(Kind::Redis, |_, _| Some((tls.dir.clone(), tls.ca.clone())))
    }

    /// A new server of `kind`; `certs` makes (or names) the directory of its certificate and
    /// key and its CA's file, given its directory and the user to give them to, when it serves
    /// TLS.
    fn with_certificates(
        kind: Kind,
        certs: impl FnOnce(&Path, Option<(u32, u32)>) -> Option<(PathBuf, PathBuf)>,
    ) -> Server {
        // Panics naming the Debian package when the server is not installed.
        binary(kind);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "cosid-testkit-{}-{}-{:?}",
            std::process::id(),
            id,
            kind
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cosid-testkit: cannot create {}: {e}", dir.display()));
        let run_as = if kind == Kind::Postgres && unsafe { libc::geteuid() } == 0 {
            let ids = postgres_user().unwrap_or_else(|| {
                panic!(
                    "cosid-testkit: running as root, and there is no 'postgres' user to run \
                     PostgreSQL as (it refuses root); install the Debian package `postgresql` \
                     (apt-get install -y postgresql), which creates it"
                )
            });
            chown(&dir, ids);
            Some(ids)
        } else {
            None
        };
        register(id, None, &dir);
        let mut server = Server {
            kind,
            id,
            port: free_port(),
            peer_port: if kind == Kind::Etcd { free_port() } else { 0 },
            dir,
            run_as,
            tls_ca: None,
            tls_dir: None,
            child: Mutex::new(None),
        };
        if let Some((dir, ca)) = certs(&server.dir, server.run_as) {
            server.tls_dir = Some(dir);
            server.tls_ca = Some(ca);
        }
        server.init_data();
        server.start();
        server
    }

    /// Which server this is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The store URL cosid opens for this server.
    pub fn url(&self) -> String {
        match self.kind {
            Kind::Redis => match &self.tls_ca {
                None => format!("redis://127.0.0.1:{}/0", self.port),
                Some(ca) => format!(
                    "rediss://127.0.0.1:{}/0?cacert={}",
                    self.port,
                    percent_encoded(ca)
                ),
            },
            Kind::Postgres => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
            Kind::Etcd => format!("etcd://127.0.0.1:{}", self.port),
            Kind::Mysql => format!("mysql://cosid@127.0.0.1:{}/cosid", self.port),
        }
    }

    /// The PEM file of the CA that signed the server's certificate ([`Server::postgres_tls`]).
    pub fn tls_ca(&self) -> Option<&Path> {
        self.tls_ca.as_deref()
    }

    /// Whether the server process is running.
    pub fn is_running(&self) -> bool {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Starts the server (again) on the same port with the same data directory, and waits until
    /// it answers. A no-op when it runs.
    pub fn start(&self) {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = guard.as_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                return;
            }
        }
        let log = self.dir.join("server.log");
        let mut cmd = self.command();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("cosid-testkit: cannot open the server log");
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
        let mut child = spawn_tied(cmd).unwrap_or_else(|e| {
            panic!(
                "cosid-testkit: cannot start {:?} ({}): {e}",
                self.kind,
                binary(self.kind).display()
            )
        });
        register(self.id, Some(child.id()), &self.dir);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "cosid-testkit: {:?} exited at start ({status}); its log:\n{}",
                    self.kind,
                    tail(&log)
                );
            }
            if self.ready() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "cosid-testkit: {:?} on port {} not ready within {:?}; its log:\n{}",
                    self.kind,
                    self.port,
                    READY_TIMEOUT,
                    tail(&log)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        *guard = Some(child);
    }

    /// Stops the server gracefully (data kept: Redis flushes its append-only file, PostgreSQL
    /// does a fast shutdown, etcd a clean stop), killing it if it does not stop in time.
    pub fn stop(&self) {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = guard.take() {
            let sig = match self.kind {
                Kind::Postgres => libc::SIGINT,
                _ => libc::SIGTERM,
            };
            unsafe {
                libc::kill(child.id() as libc::pid_t, sig);
            }
            let deadline = Instant::now() + STOP_TIMEOUT;
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            register(self.id, None, &self.dir);
        }
    }

    /// Stops the server, deletes all its data, and starts it again empty on the same port: what
    /// a store that lost its data looks like to its clients.
    pub fn restart_empty(&self) {
        self.stop();
        let data = self.data_dir();
        let _ = std::fs::remove_dir_all(&data);
        self.init_data();
        self.start();
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn init_data(&self) {
        let data = self.data_dir();
        match self.kind {
            Kind::Redis | Kind::Etcd => {
                std::fs::create_dir_all(&data).expect("cosid-testkit: data dir");
            }
            Kind::Mysql => {
                let install = mysql_bin(&["mariadb-install-db", "mysql_install_db"]);
                // A temporary directory of its own: installs running at once in the shared /tmp
                // collide on the names of their temporary tables.
                let tmp = self.dir.join("tmp");
                std::fs::create_dir_all(&tmp).expect("cosid-testkit: tmp dir");
                let mut cmd = Command::new(&install);
                cmd.arg("--no-defaults")
                    .arg(format!("--datadir={}", data.display()))
                    .arg(format!("--tmpdir={}", tmp.display()))
                    .args([
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                        "--skip-name-resolve",
                    ])
                    .stdin(Stdio::null());
                if unsafe { libc::geteuid() } == 0 {
                    cmd.arg("--user=root");
                }
                run(cmd, &install.display().to_string());
                let (pw_user, pw) = MYSQL_PASSWORD_USER;
                std::fs::write(
                    self.dir.join("init.sql"),
                    format!(
                        "CREATE DATABASE IF NOT EXISTS cosid;\n\
                         CREATE USER IF NOT EXISTS 'cosid'@'%';\n\
                         GRANT ALL PRIVILEGES ON *.* TO 'cosid'@'%';\n\
                         CREATE USER IF NOT EXISTS '{pw_user}'@'%' IDENTIFIED BY '{pw}';\n\
                         GRANT ALL PRIVILEGES ON *.* TO '{pw_user}'@'%';\n"
                    ),
                )
                .expect("cosid-testkit: init.sql");
            }
            Kind::Postgres => {
                let mut cmd = Command::new(pg_bin("initdb"));
                cmd.arg("-D")
                    .arg(&data)
                    .args([
                        "-U",
                        "postgres",
                        "--auth=trust",
                        "--no-sync",
                        "--no-locale",
                        "-E",
                        "UTF8",
                    ])
                    .stdin(Stdio::null());
                self.as_postgres_user(&mut cmd);
                run(cmd, &pg_bin("initdb").display().to_string());
            }
        }
    }

    fn as_postgres_user(&self, cmd: &mut Command) {
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid)
                .gid(gid)
                .env("HOME", &self.dir)
                .env("USER", "postgres");
        }
        cmd.current_dir(&self.dir);
    }

    fn command(&self) -> Command {
        let data = self.data_dir();
        match self.kind {
            Kind::Redis => {
                let mut cmd = Command::new(binary(Kind::Redis));
                cmd.args(["--bind", "127.0.0.1"]);
                match (&self.tls_dir, &self.tls_ca) {
                    (Some(dir), Some(ca)) => {
                        redis_tls_args(&mut cmd, self.port, dir, ca);
                    }
                    _ => {
                        cmd.args(["--port", &self.port.to_string()]);
                    }
                }
                cmd.arg("--unixsocket")
                    .arg(self.redis_socket())
                    .args(["--unixsocketperm", "700"])
                    .arg("--dir")
                    .arg(&data)
                    .args(REDIS_SERVER_ARGS);
                cmd
            }
            Kind::Postgres => {
                let mut cmd = Command::new(pg_bin("postgres"));
                cmd.arg("-D")
                    .arg(&data)
                    .args(["-p", &self.port.to_string()])
                    .args(["-c", "listen_addresses=127.0.0.1"])
                    .arg("-c")
                    .arg(format!("unix_socket_directories={}", self.dir.display()))
                    .args(["-c", "max_connections=300"]);
                if let Some(tls) = &self.tls_dir {
                    cmd.args(["-c", "ssl=on"])
                        .arg("-c")
                        .arg(format!(
                            "ssl_cert_file={}",
                            tls.join("server.crt").display()
                        ))
                        .arg("-c")
                        .arg(format!("ssl_key_file={}", tls.join("server.key").display()));
                }
                self.as_postgres_user(&mut cmd);
                cmd
            }
            Kind::Mysql => {
                let mut cmd = Command::new(binary(Kind::Mysql));
                // --no-defaults first: no my.cnf of the machine applies.
                cmd.arg("--no-defaults")
                    .arg(format!("--datadir={}", data.display()))
                    .arg(format!("--port={}", self.port))
                    .arg("--bind-address=127.0.0.1")
                    .arg(format!(
                        "--socket={}",
                        self.dir.join("mysqld.sock").display()
                    ))
                    .arg(format!(
                        "--pid-file={}",
                        self.dir.join("mysqld.pid").display()
                    ))
                    .arg(format!(
                        "--init-file={}",
                        self.dir.join("init.sql").display()
                    ))
                    .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
                    .args([
                        "--skip-name-resolve",
                        "--skip-log-bin",
                        "--innodb-buffer-pool-size=32M",
                        "--innodb-flush-log-at-trx-commit=1",
                        "--max-connections=300",
                    ]);
                if let (Some(ca), Some(tls)) = (&self.tls_ca, &self.tls_dir) {
                    cmd.arg(format!("--ssl-cert={}", tls.join("server.crt").display()))
                        .arg(format!("--ssl-key={}", tls.join("server.key").display()))
                        .arg(format!("--ssl-ca={}", ca.display()))
                        .arg("--require-secure-transport=ON");
                }
                if unsafe { libc::geteuid() } == 0 {
                    cmd.arg("--user=root");
                }
                cmd
            }
            Kind::Etcd => {
                let peer = format!("http://127.0.0.1:{}", self.peer_port);
                etcd_command(
                    "cosid-test",
                    &data.join("member-data"),
                    (self.port, self.peer_port),
                    &format!("cosid-test={peer}"),
                )
            }
        }
    }

    /// The Unix socket of a Redis server, where the testkit talks to it in plain text (whether
    /// or not its port serves TLS).
    fn redis_socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    fn ready(&self) -> bool {
        match self.kind {
            Kind::Redis => redis_ha::on_socket(&self.redis_socket(), None, &["PING"])
                .is_some_and(|r| r.starts_with(b"+PONG")),
            Kind::Etcd => exchange(self.port, b"GET /health HTTP/1.0\r\n\r\n")
                .is_some_and(|r| r.contains("\"health\":\"true\"")),
            // The handshake packet: protocol version 10 after the 4-byte header.
            Kind::Mysql => greeting(self.port).is_some_and(|g| g.get(4) == Some(&10)),
            Kind::Postgres => Command::new(pg_bin("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-t", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = guard.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        unregister(self.id);
    }
}

/// The URL of this test binary's shared Redis (started on first use), or `COSID_TEST_REDIS_URL`.
pub fn shared_redis_url() -> String {
    shared(Kind::Redis)
}

/// The URL of this test binary's shared PostgreSQL, or `COSID_TEST_POSTGRES_URL`.
pub fn shared_postgres_url() -> String {
    shared(Kind::Postgres)
}

/// The URL of this test binary's shared etcd, or `COSID_TEST_ETCD_URL`.
pub fn shared_etcd_url() -> String {
    shared(Kind::Etcd)
}

/// The URL of this test binary's shared MariaDB, or `COSID_TEST_MYSQL_URL`.
pub fn shared_mysql_url() -> String {
    shared(Kind::Mysql)
}

/// The user with a password on a [`Server::mysql`] (the `cosid` user of its URL has none), and
/// that password: a test fixture, not a secret.
pub const MYSQL_PASSWORD_USER: (&str, &str) = ("cosid_pw", "pw-of-the-test-server");

fn shared(kind: Kind) -> String {
    if let Ok(url) = std::env::var(kind.env_var()) {
        if !url.trim().is_empty() {
            return url;
        }
    }
    static REDIS: OnceLock<Server> = OnceLock::new();
    static POSTGRES: OnceLock<Server> = OnceLock::new();
    static ETCD: OnceLock<Server> = OnceLock::new();
    static MYSQL: OnceLock<Server> = OnceLock::new();
    let cell = match kind {
        Kind::Redis => &REDIS,
        Kind::Postgres => &POSTGRES,
        Kind::Etcd => &ETCD,
        Kind::Mysql => &MYSQL,
    };
    cell.get_or_init(|| Server::new(kind)).url()
}

/// A name no other test (of this or another run against the same server) uses.
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Server processes and directories to clean up at exit: id -> (pid, dir).
type Registry = Mutex<HashMap<u64, (Option<u32>, PathBuf)>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        unsafe {
            libc::atexit(cleanup_at_exit);
        }
        Mutex::default()
    })
}

fn register(id: u64, pid: Option<u32>, dir: &Path) {
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, (pid, dir.to_path_buf()));
}

fn unregister(id: u64) {
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
}

extern "C" fn cleanup_at_exit() {
    let Ok(mut reg) = registry().try_lock() else {
        return;
    };
    for (_, (pid, dir)) in reg.drain() {
        if let Some(pid) = pid {
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
                libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Spawns `cmd` from the testkit's one long-lived thread, with `PR_SET_PDEATHSIG` = `SIGKILL`:
/// the kernel kills the child when that thread (so, this process) ends, however it ends.
fn spawn_tied(mut cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let tx = SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("cosid-testkit-spawner".into())
                .spawn(move || {
                    for (mut cmd, reply) in rx {
                        let _ = reply.send(cmd.spawn());
                    }
                    // The sender lives in a static: this thread never ends.
                })
                .expect("cosid-testkit: spawner thread");
            Mutex::new(tx)
        })
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.send((cmd, reply_tx))
        .expect("cosid-testkit: spawner thread gone");
    reply_rx.recv().expect("cosid-testkit: spawner thread gone")
}

/// The throwaway CA and the one certificate every server of a TLS group (a Redis Cluster, a
/// Redis primary with its replicas and sentinels) serves, and shows the others as a client, in
/// a directory removed on drop.
#[derive(Debug)]
struct Tls {
    id: u64,
    /// Holds `server.crt` and `server.key`.
    dir: PathBuf,
    /// The CA's PEM file.
    ca: PathBuf,
}

impl Tls {
    fn make(group: &str) -> Tls {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let top = std::env::temp_dir().join(format!(
            "cosid-testkit-{}-{id}-{group}-tls",
            std::process::id()
        ));
        register(id, None, &top);
        let ca = make_certificates(&top, None);
        let dir = ca.parent().expect("the CA's directory").to_path_buf();
        Tls { id, dir, ca }
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        if let Some(top) = self.dir.parent() {
            let _ = std::fs::remove_dir_all(top);
        }
        unregister(self.id);
    }
}

/// The arguments of a `redis-server` (a data node or a sentinel) that serves TLS only on
/// `port`, with the certificate and key in `dir` and the CA `ca` for its peers: no plain-text
/// port, TLS for replication (and on a cluster bus, when it has one), clients not asked for a
/// certificate.
fn redis_tls_args(cmd: &mut Command, port: u16, dir: &Path, ca: &Path) {
    cmd.args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--tls-replication", "yes"])
        .arg("--tls-cert-file")
        .arg(dir.join("server.crt"))
        .arg("--tls-key-file")
        .arg(dir.join("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(ca)
        .args(["--tls-auth-clients", "no"]);
}

/// `path` as a URL query value: every byte but letters, digits and `/-_.` as `%XX`.
fn percent_encoded(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str()
        .as_bytes()
        .iter()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' => {
                char::from(*b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A throwaway CA and a server certificate for 127.0.0.1 and localhost signed by it, in
/// `dir/tls`; the key readable only by the server's user. Returns the CA's PEM file. The
/// certificate is good for a client too (`clientAuth`): the nodes of a TLS Redis Cluster show
/// it to each other on the cluster bus.
fn make_certificates(dir: &Path, owner: Option<(u32, u32)>) -> PathBuf {
    let tls = dir.join("tls");
    std::fs::create_dir_all(&tls).expect("cosid-testkit: tls dir");
    let openssl = on_path("openssl").unwrap_or_else(|| {
        panic!(
            "cosid-testkit: `openssl` is not on PATH (needed to make a test certificate); \
             install the Debian package `openssl`"
        )
    });
    std::fs::write(
        tls.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .expect("cosid-testkit: tls ext");
    let run = |args: &[&str]| {
        let out = Command::new(&openssl)
            .args(args)
            .current_dir(&tls)
            .stdin(Stdio::null())
            .output()
            .expect("cosid-testkit: run openssl");
        assert!(
            out.status.success(),
            "cosid-testkit: openssl {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=cosid-testkit-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    use std::os::unix::fs::PermissionsExt;
    let key = tls.join("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
        .expect("cosid-testkit: key mode");
    if let Some(ids) = owner {
        chown(&tls, ids);
        for f in ["server.key", "server.crt"] {
            chown(&tls.join(f), ids);
        }
    }
    tls.join("ca.pem")
}

/// A loopback port nothing listens on, for a server about to start.
///
/// Taken *below* the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), never from it:
/// a port of that range that is free now can be handed to any outgoing connection (the tests
/// open thousands) before the server binds it, and the server then dies with "Address already
/// in use". Below the range only another listener can take it, so the candidates start at a
/// point drawn from the process id and the clock (test programs run side by side) and no port
/// is handed out twice by one process. Falls back to the kernel's choice when the range leaves
/// no room below it.
fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    const LOWEST: u32 = 15000;
    let below = ephemeral_low().saturating_sub(1);
    if below > LOWEST + 1000 {
        let span = below - LOWEST;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let start = (std::process::id().wrapping_mul(2_654_435_761) ^ nanos) % span;
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..span {
            let port = (LOWEST + (start + i * 7919) % span) as u16;
            if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.push(port);
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cosid-testkit: no free loopback port")
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// An etcd member called `name` on 127.0.0.1's `(client, peer)` ports with its data in
/// `data_dir`, bootstrapping the cluster `initial_cluster` (`name=http://…,…`) when its data
/// directory is new (a member with data rejoins the cluster its data names).
fn etcd_command(name: &str, data_dir: &Path, ports: (u16, u16), initial_cluster: &str) -> Command {
    let client = format!("http://127.0.0.1:{}", ports.0);
    let peer = format!("http://127.0.0.1:{}", ports.1);
    let mut cmd = Command::new(binary(Kind::Etcd));
    cmd.args(["--name", name])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen-client-urls", &client])
        .args(["--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", initial_cluster])
        .args(["--initial-cluster-state", "new"])
        .args(["--logger", "zap", "--log-level", "warn"]);
    cmd
}

/// SIGKILLs the process in `child` (a crash: nothing flushed at exit) if one runs there, and
/// forgets its pid in the registry entry `id` (the pid may be reused from now on); the
/// directory `dir` stays, so the process can be started again with its data.
fn kill_child(child: &Mutex<Option<Child>>, id: u64, dir: &Path) {
    let mut guard = child.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(mut child) = guard.take() {
        let _ = child.kill();
        let _ = child.wait();
        register(id, None, dir);
    }
}

/// A process of a multi-process test server (a Redis Cluster node, a sentinel) that owns its
/// directory: registered for the exit hook, and killed with its directory removed on drop.
#[derive(Debug)]
struct Spawned {
    id: u64,
    /// The port it serves on.
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Spawned {
    /// Creates `dir`, runs the command `setup` makes there with its output in `server.log`, and
    /// waits until `ready` holds; `id` is its registry entry, `name` and `port` name it in
    /// panics. One start for every such process, so each is registered and bounded the same way.
    fn start(
        id: u64,
        dir: PathBuf,
        (name, port): (&str, u16),
        setup: impl FnOnce(&Path) -> Command,
        ready: impl Fn() -> bool,
    ) -> Spawned {
        let what = format!("the {name} on port {port}");
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cosid-testkit: cannot create {}: {e}", dir.display()));
        register(id, None, &dir);
        let mut cmd = setup(&dir);
        let log = dir.join("server.log");
        let out = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cosid-testkit: cannot create the log of {what}: {e}"));
        cmd.current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
        let child =
            spawn_tied(cmd).unwrap_or_else(|e| panic!("cosid-testkit: cannot start {what}: {e}"));
        register(id, Some(child.id()), &dir);
        let mut spawned = Spawned {
            id,
            port,
            dir,
            child,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        while !ready() {
            let exited = matches!(spawned.child.try_wait(), Ok(Some(_)));
            if exited || Instant::now() > deadline {
                panic!(
                    "cosid-testkit: {what} did not start; its log:\n{}",
                    tail(&log)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        spawned
    }

    /// The last lines of the process's log.
    fn log_tail(&self) -> String {
        tail(&self.dir.join("server.log"))
    }
}

/// The logs of a group's processes, each headed `name on port …`: what a panic about the
/// group shows.
fn logs_of<'a>(name: &str, processes: impl Iterator<Item = &'a Spawned>) -> String {
    let logs: Vec<String> = processes
        .map(|p| format!("{name} on port {}:\n{}", p.port, p.log_tail()))
        .collect();
    logs.join("\n")
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        unregister(self.id);
    }
}

/// The one of a group's `members` serving on `port` (`port_of` reads a member's); a panic
/// naming the `kind` of member when none does. How a group finds the node a test names.
fn on_port<'a, T>(members: &'a [T], port: u16, port_of: fn(&T) -> u16, kind: &str) -> &'a T {
    members
        .iter()
        .find(|m| port_of(m) == port)
        .unwrap_or_else(|| panic!("cosid-testkit: no {kind} on port {port}"))
}

/// Polls `done` every `every` until it holds, or panics naming `what` with `logs()` (read only
/// then) after [`READY_TIMEOUT`]: the one bounded wait of the testkit's servers.
fn wait_until(
    what: &str,
    every: Duration,
    mut done: impl FnMut() -> bool,
    logs: impl FnOnce() -> String,
) {
    let deadline = Instant::now() + READY_TIMEOUT;
    while !done() {
        if Instant::now() > deadline {
            panic!(
                "cosid-testkit: not done within {READY_TIMEOUT:?}: {what}\n{}",
                logs()
            );
        }
        std::thread::sleep(every);
    }
}

/// Runs `cmd` (`what` names it), panicking with its output when it fails; its standard output.
fn run(mut cmd: Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cosid-testkit: cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "cosid-testkit: {what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn exchange(port: u16, request: &[u8]) -> Option<String> {
    let addr = ([127, 0, 0, 1], port).into();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(1000))).ok()?;
    s.write_all(request).ok()?;
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if got.ends_with(b"\r\n") && got.starts_with(b"+") {
            break;
        }
    }
    Some(String::from_utf8_lossy(&got).into_owned())
}

/// The first packet a MySQL server sends on a new connection.
fn greeting(port: u16) -> Option<Vec<u8>> {
    let addr = ([127, 0, 0, 1], port).into();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(1000))).ok()?;
    let mut buf = vec![0u8; 256];
    let n = s.read(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The server binary, or a panic naming the Debian package that provides it.
fn binary(kind: Kind) -> PathBuf {
    match kind {
        Kind::Redis => on_path("redis-server").unwrap_or_else(|| {
            panic!(
                "cosid-testkit: `redis-server` is not on PATH; install the Debian package \
                 `redis-server` (apt-get install -y redis-server), or point \
                 COSID_TEST_REDIS_URL at a server the tests may use"
            )
        }),
        Kind::Etcd => on_path("etcd").unwrap_or_else(|| {
            panic!(
                "cosid-testkit: `etcd` is not on PATH; install the Debian package `etcd-server` \
                 (apt-get install -y etcd-server), or point COSID_TEST_ETCD_URL at a server the \
                 tests may use"
            )
        }),
        Kind::Postgres => pg_bin("postgres"),
        Kind::Mysql => mysql_bin(&["mariadbd", "mysqld"]),
    }
}

/// The first of `names` on PATH or in /usr/sbin (not on every user's PATH), or a panic naming
/// the Debian package.
fn mysql_bin(names: &[&str]) -> PathBuf {
    names
        .iter()
        .find_map(|n| {
            on_path(n).or_else(|| Some(Path::new("/usr/sbin").join(n)).filter(|p| p.is_file()))
        })
        .unwrap_or_else(|| {
            panic!(
                "cosid-testkit: none of {names:?} is on PATH or in /usr/sbin; install the Debian \
                 package `mariadb-server` (apt-get install -y mariadb-server), or point \
                 COSID_TEST_MYSQL_URL at a server the tests may use"
            )
        })
}

/// A PostgreSQL server program: from `$COSID_PG_BIN`, the newest `/usr/lib/postgresql/*/bin`,
/// or PATH; a panic naming the Debian package when there is none.
fn pg_bin(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("COSID_PG_BIN") {
        dirs.push(PathBuf::from(d));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    dirs.extend(versions.into_iter().rev().map(|(_, p)| p));
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .or_else(|| on_path(name))
        .unwrap_or_else(|| {
            panic!(
                "cosid-testkit: PostgreSQL's `{name}` was found neither in \
                 /usr/lib/postgresql/*/bin nor on PATH; install the Debian package `postgresql` \
                 (apt-get install -y postgresql), or point COSID_TEST_POSTGRES_URL at a server \
                 the tests may use"
            )
        })
}

fn postgres_user() -> Option<(u32, u32)> {
    let name = CString::new("postgres").ok()?;
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    let pw = unsafe { &*pw };
    Some((pw.pw_uid, pw.pw_gid))
}

fn chown(dir: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap_or_else(|e| {
        panic!(
            "cosid-testkit: cannot give {} to the postgres user: {e}",
            dir.display()
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race CI lost once: a server's port taken from the ephemeral range went to an
    /// outgoing connection before the server bound it. Ports come from below that range (when
    /// it leaves room), are free, and one process never gets the same one twice.
    #[test]
    fn free_ports_are_below_the_ephemeral_range_free_and_never_repeated() {
        let low = ephemeral_low();
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "a port was handed out twice");
        if low > 16_000 {
            assert!(
                ports.iter().all(|&p| u32::from(p) < low),
                "ports in the ephemeral range (from {low}): {ports:?}"
            );
        }
        for p in ports {
            assert!(
                TcpListener::bind(("127.0.0.1", p)).is_ok(),
                "port {p} was handed out but is in use"
            );
        }
    }

    #[test]
    fn a_server_is_started_stopped_and_restarted_empty() {
        let redis = Server::redis();
        assert!(redis.is_running());
        assert!(exchange(redis.port(), b"SET k v\r\n").is_some_and(|r| r.starts_with("+OK")));
        redis.stop();
        assert!(!redis.is_running());
        redis.start();
        assert!(exchange(redis.port(), b"GET k\r\n").is_some_and(|r| r.contains("v")));
        redis.restart_empty();
        assert!(exchange(redis.port(), b"GET k\r\n").is_some_and(|r| r.starts_with("$-1")));
    }

    #[test]
    fn postgres_etcd_and_mysql_start_restart_and_stop() {
        for server in [Server::postgres(), Server::etcd(), Server::mysql()] {
            assert!(server.ready(), "{:?}", server.kind());
            server.stop();
            assert!(!server.is_running() && !server.ready());
            server.start();
            assert!(server.is_running() && server.ready());
            server.restart_empty();
            assert!(server.is_running() && server.ready());
        }
    }
}
