"""Throwaway stores for the chaos harness: redis-server, PostgreSQL, etcd, MariaDB, and an SQLite
file.

Every server listens on 127.0.0.1 only, on a free port, with a data directory under the
scenario's own directory. Each can be killed (like a crash), started again with its data,
restarted empty, and run under libfaketime with a clock the harness moves.

Redis, PostgreSQL and MariaDB always run with a password (the harness later greps every captured output
for it). Nothing here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from proxy import Proxy

LIBFAKETIME = None
for _cand in (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
):
    if os.path.exists(_cand):
        LIBFAKETIME = _cand
        break


_GIVEN_PORTS: set[int] = set()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port nothing listens on, for a server about to start.

    Taken below the kernel's ephemeral range, never from it: a port of that range that is free
    now can go to any outgoing connection (the clients open many) before the server binds it,
    and the server then dies with "Address already in use". Below the range only another
    listener can take it; no port is handed out twice by one harness.
    """
    lowest, below = 15000, _ephemeral_low() - 1
    if below > lowest + 1000:
        span = below - lowest
        start = (os.getpid() * 2654435761 ^ time.time_ns()) % span
        for i in range(span):
            port = lowest + (start + i * 7919) % span
            if port in _GIVEN_PORTS:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _GIVEN_PORTS.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def connected(port: int, pids: list[int]) -> set[int]:
    """The processes among `pids` with an established TCP connection to 127.0.0.1:`port`."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[3] == "01" and int(cols[2].split(":")[1], 16) == port:  # 01: established
                inodes.add(f"socket:[{cols[9]}]")
    out = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    out.add(pid)
                    break
            except OSError:
                continue
    return out


def faketime_env(clock_file: Path) -> dict[str, str]:
    """Environment that runs a program under libfaketime reading its offset from `clock_file`."""
    if LIBFAKETIME is None:
        raise RuntimeError("libfaketime is missing: apt-get install -y faketime")
    return {
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME_TIMESTAMP_FILE": str(clock_file),
        # Re-read the file at most once a second (a server calls the clock very often).
        "FAKETIME_CACHE_DURATION": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "DONT_FAKE_MONOTONIC": "1",
    }


#: the compiled clockshim.c (set by the harness), for servers libfaketime cannot run
CLOCKSHIM: str | None = None


def build_clockshim(out_dir: Path) -> str:
    src = Path(__file__).resolve().parent / "clockshim.c"
    out = out_dir / "clockshim.so"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler to build tests/chaos/clockshim.c: apt-get install -y gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(src)], check=True, capture_output=True)
    return str(out)


def clockshim_env(clock_file: Path) -> dict[str, str]:
    if CLOCKSHIM is None:
        raise RuntimeError("the clock shim is not built")
    return {"LD_PRELOAD": CLOCKSHIM, "CHAOS_CLOCK_FILE": str(clock_file)}


class Server:
    """Base: a child process with a log, started and stopped by the harness."""

    kind = "?"
    #: the store can be killed and restarted (SQLite is a file: no)
    restartable = True

    def __init__(self, root: Path, password: str, clock_file: Path | None = None):
        self.root = root
        self.password = password
        self.clock_file = clock_file
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = root / f"{self.kind}.log"
        self.down_since: float | None = None
        self.paused = False

    def rotated_hosts(self, members: list) -> str:
        """`127.0.0.1:port,...` of `members`, from the next one at each call (`self.turn`): the
        URLs of a store of several servers spread processes and snapshots over them."""
        self.turn += 1
        k = self.turn % len(members)
        return ",".join(f"127.0.0.1:{m.port}" for m in members[k:] + members[:k])

    # -- lifecycle -----------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.clock_file is not None:
            env.update(self.clock_env(self.clock_file))
        return env

    def clock_env(self, clock_file: Path) -> dict[str, str]:
        return faketime_env(clock_file)

    def command(self) -> list[str]:
        raise NotImplementedError

    def popen_extra(self) -> dict:
        return {}

    def start(self, timeout: float = 60) -> None:
        if self.launch():
            self.wait_ready(timeout)

    def launch(self) -> bool:
        """Starts the process without waiting for it to serve; False if it was running."""
        if self.proc is not None and self.proc.poll() is None:
            return False
        self.paused = False
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env(),
                start_new_session=True,
                **self.popen_extra(),
            )
        return True

    def wait_ready(self, timeout: float = 60) -> None:
        if not self.ready(timeout):
            self.kill()
            raise RuntimeError(f"{self.kind} did not start on port {self.port}; see {self.log}:\n" + tail(self.log))
        self.down_since = None

    def ready(self, timeout: float) -> bool:
        return wait_port(self.port, timeout, self.proc)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets (the kernel still accepts connections) but
        answers nothing."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            os.killpg(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        """Kills the server like a crash (data on disk stays)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)
        self.proc = None
        self.down_since = time.monotonic()

    def stop(self) -> None:
        """Stops gracefully (falls back to kill)."""
        if self.proc is None:
            return
        self.resume()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def wipe(self) -> None:
        raise NotImplementedError

    def restart_empty(self) -> None:
        self.kill()
        self.wipe()
        self.start()

    def url(self, port: int | None = None, password: str | None = None) -> str:
        raise NotImplementedError

    def redacted_url(self, port: int | None = None) -> str:
        return self.url(port, password="***")


def tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


class Sqlite(Server):
    kind = "sqlite"
    restartable = False

    def __init__(self, root: Path, password: str = "", clock_file: Path | None = None):
        super().__init__(root, password, None)
        self.path = root / "slots.db"

    def start(self, timeout: float = 0) -> None:
        pass

    def kill(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def url(self, port=None, password=None) -> str:
        return f"sqlite://{self.path}"

    def redacted_url(self, port=None) -> str:
        return self.url()


class Redis(Server):
    """One redis-server; alone (the default) or a node of a `RedisSentinel` group (`name`)."""

    kind = "redis"

    def __init__(self, root: Path, password: str, clock_file: Path | None = None, tls: dict | None = None,
                 name: str | None = None):
        super().__init__(root, password, clock_file)
        self.data = root / "redis-data" / name if name else root / "redis-data"
        if name:
            self.log = root / f"redis-{name}.log"
        self.data.mkdir(parents=True, exist_ok=True)
        self.tls = tls  # {"cert":…, "key":…, "ca":…}
        self.extra: list[str] = []  # more `--name value` settings
        #: RDB persistence instead of the fsynced append-only file: only what `save()` wrote
        #: survives a kill (no automatic saves), as on a server that snapshots now and then
        self.rdb = False

    def clock_env(self, clock_file: Path) -> dict[str, str]:
        # libfaketime cannot run redis-server (its jemalloc recurses into clock_gettime while
        # libfaketime initialises): the harness's own shim moves its wall clock instead.
        return clockshim_env(clock_file)

    def command(self) -> list[str]:
        cmd = [
            "redis-server",
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            "--dir", str(self.data),
            "--save", "",
        ]
        if self.rdb:
            cmd += ["--appendonly", "no", "--dbfilename", "dump.rdb"]
        else:
            # Every acknowledged write is on disk before the reply: a SIGKILL loses nothing.
            cmd += ["--appendonly", "yes", "--appendfsync", "always"]
        cmd += [
            "--requirepass", self.password,
            "--daemonize", "no",
            "--loglevel", "notice",
        ]
        if self.tls:
            cmd += [
                "--port", "0",
                "--tls-port", str(self.port),
                "--tls-cert-file", self.tls["cert"],
                "--tls-key-file", self.tls["key"],
                "--tls-ca-cert-file", self.tls["ca"],
                "--tls-auth-clients", "no",
            ]
        else:
            cmd += ["--port", str(self.port)]
        return cmd + self.extra

    def wipe(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir(parents=True, exist_ok=True)

    def command_reply(self, *args: str):
        """One command on the running server (with the password); its reply."""
        return resp(self.port, *args, password=self.password, timeout=10.0)

    def flushall(self) -> None:
        """`FLUSHALL` on the running server: every key gone, no restart."""
        if self.command_reply("FLUSHALL") != "OK":
            raise RuntimeError(f"FLUSHALL on port {self.port} did not answer OK")

    def snapshot_rdb(self, to: Path) -> None:
        """`SAVE` (the RDB file written before the reply), copied to `to`."""
        if self.command_reply("SAVE") != "OK":
            raise RuntimeError(f"SAVE on port {self.port} did not answer OK")
        shutil.copy(self.data / "dump.rdb", to)

    def restart_from_rdb(self, rdb: Path) -> None:
        """SIGKILL, then a start that loads `rdb` (an older snapshot): every write since it is
        lost, while the keys it holds come back."""
        self.kill()
        for f in self.data.iterdir():
            if f.is_file():
                f.unlink()
        shutil.copy(rdb, self.data / "dump.rdb")
        self.start()

    def url(self, port=None, password=None) -> str:
        pw = self.password if password is None else password
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://:{pw}@127.0.0.1:{port or self.port}/0"


def _postgres_bin(name: str) -> str:
    base = Path("/usr/lib/postgresql")
    if base.is_dir():
        for v in sorted(base.iterdir(), reverse=True):
            p = v / "bin" / name
            if p.exists():
                return str(p)
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(f"PostgreSQL's {name} is missing: apt-get install -y postgresql")


class PostgresTemplate:
    """One initdb per harness run (slow), copied for every scenario (fast).

    The cluster has a role `cosid` with a password (scram-sha-256 for every TCP connection) and a
    database `cosid` it owns. As root, PostgreSQL runs as the `postgres` user.
    """

    def __init__(self, root: Path, password: str):
        self.dir = root / "pg-template"
        self.password = password
        self.user = None
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no 'postgres' user: apt-get install -y postgresql")
            self.user = (pw.pw_uid, pw.pw_gid)
        self._make()

    def chown(self, path: Path) -> None:
        if self.user is None:
            return
        uid, gid = self.user
        os.chown(path, uid, gid)
        for dirpath, dirnames, filenames in os.walk(path):
            for n in dirnames + filenames:
                try:
                    os.lchown(os.path.join(dirpath, n), uid, gid)
                except OSError:
                    pass

    def popen_extra(self) -> dict:
        if self.user is None:
            return {}
        return {"user": self.user[0], "group": self.user[1], "extra_groups": []}

    def _make(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        pwfile = self.dir.parent / "pg-pwfile"
        pwfile.write_text(self.password + "\n")
        self.chown(self.dir)
        self.chown(pwfile)
        data = self.dir / "data"
        out = subprocess.run(
            [_postgres_bin("initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(pwfile),
             "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "--no-locale", "-E", "UTF8"],
            capture_output=True, text=True, **self.popen_extra(),
        )
        pwfile.unlink()
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stdout}{out.stderr}")
        # Only TCP from loopback, with a password.
        (data / "pg_hba.conf").write_text(
            "local all all trust\n"
            "host all all 127.0.0.1/32 scram-sha-256\n"
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
        )
        self.chown(data)
        server = Postgres(self.dir, self, data_dir=data)
        server.start()
        out = subprocess.run(
            [_postgres_bin("psql"), "-h", str(server.sockdir), "-p", str(server.port), "-U", "postgres",
             "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-q",
             "-c", f"CREATE ROLE cosid LOGIN PASSWORD '{self.password}'",
             "-c", "CREATE DATABASE cosid OWNER cosid"],
            capture_output=True, text=True, **self.popen_extra(),
        )
        server.stop_clean()
        if out.returncode != 0:
            raise RuntimeError(f"creating the cosid role failed: {out.stdout}{out.stderr}")
        self.data = data


class Postgres(Server):
    kind = "postgres"

    def __init__(self, root: Path, template: PostgresTemplate, password: str | None = None,
                 clock_file: Path | None = None, tls: dict | None = None, data_dir: Path | None = None):
        super().__init__(root, password or template.password, clock_file)
        self.template = template
        self.tls = tls
        self.extra: list[str] = []  # more `-c name=value` settings
        root.mkdir(parents=True, exist_ok=True)
        self.sockdir = root / "pg-sock"
        self.sockdir.mkdir(parents=True, exist_ok=True)
        template.chown(self.sockdir)
        if data_dir is not None:
            self.data = data_dir
        else:
            self.data = root / "pg-data"
            self.wipe()

    def wipe(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.copytree(self.template.data, self.data, symlinks=True)
        for stale in ("postmaster.pid", "postmaster.opts"):
            (self.data / stale).unlink(missing_ok=True)
        self.template.chown(self.data)
        os.chmod(self.data, 0o700)

    def popen_extra(self) -> dict:
        return self.template.popen_extra()

    def command(self) -> list[str]:
        cmd = [
            _postgres_bin("postgres"), "-D", str(self.data), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={self.sockdir}",
            "-c", "max_connections=200",
            "-c", "fsync=on", "-c", "synchronous_commit=on",
            "-c", "log_min_messages=warning",
        ] + self.extra
        if self.tls:
            cmd += ["-c", "ssl=on", "-c", f"ssl_cert_file={self.tls['cert']}",
                    "-c", f"ssl_key_file={self.tls['key']}"]
        return cmd

    def start(self, timeout: float = 60) -> None:
        if self.tls:
            # TLS only: a plain-text connection is refused, so a working client used TLS.
            (self.data / "pg_hba.conf").write_text(
                "local all all trust\n"
                "hostssl all all 127.0.0.1/32 scram-sha-256\n"
                "hostnossl all all 127.0.0.1/32 reject\n")
            self.template.chown(self.data / "pg_hba.conf")
        super().start(timeout)

    def ready(self, timeout: float) -> bool:
        # The port opens before recovery ends; ask pg_isready.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            r = subprocess.run([_postgres_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                               capture_output=True)
            if r.returncode == 0:
                return True
            time.sleep(0.1)
        return False

    def kill(self) -> None:
        """Immediate shutdown (SIGQUIT): what a crash looks like, crash recovery on restart."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGQUIT)
                self.proc.wait(timeout=20)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        super().kill()

    def stop_clean(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        super().kill()

    def stop(self) -> None:
        self.stop_clean()

    def sql(self, sql: str) -> str:
        """Runs `sql` on the database `cosid` as the superuser (over the Unix socket)."""
        out = subprocess.run(
            [_postgres_bin("psql"), "-h", str(self.sockdir), "-p", str(self.port), "-U", "postgres",
             "-d", "cosid", "-v", "ON_ERROR_STOP=1", "-Atq", "-c", sql],
            capture_output=True, text=True, timeout=60, **self.popen_extra())
        if out.returncode != 0:
            raise RuntimeError(f"psql on port {self.port} failed on {sql!r}: {out.stdout}{out.stderr}")
        return out.stdout

    def url(self, port=None, password=None, sslmode: str | None = None) -> str:
        pw = self.password if password is None else password
        if sslmode is None:
            sslmode = "verify-full" if self.tls else "disable"
        q = f"?sslmode={sslmode}"
        if self.tls and sslmode.startswith("verify"):
            q += f"&sslrootcert={self.tls['ca']}"
        return f"postgres://cosid:{pw}@127.0.0.1:{port or self.port}/cosid{q}"


def _mysql_bin(names: list[str]) -> str:
    for n in names:
        found = shutil.which(n) or (f"/usr/sbin/{n}" if os.path.exists(f"/usr/sbin/{n}") else None)
        if found:
            return found
    raise RuntimeError(f"none of {names} is installed: apt-get install -y mariadb-server")


class Mysql(Server):
    """One MariaDB server (`mariadbd`; MySQL's `mysqld` where that is installed): InnoDB with
    `innodb_flush_log_at_trx_commit=1` and no binary log (every acknowledged commit is on disk: a
    SIGKILL loses nothing), a database `cosid` and a user `cosid` with the password, made at
    every start by an init file (idempotent), TCP on 127.0.0.1 only. As root it runs with
    `--user=root`. With `tls` ({"cert", "key", "ca"}) it takes TLS connections only
    (`require_secure_transport`), and `url()` asks for `ssl-mode=verify_identity` with the CA."""

    kind = "mysql"

    def __init__(self, root: Path, password: str, clock_file: Path | None = None, tls: dict | None = None):
        super().__init__(root, password, clock_file)
        self.tls = tls
        self.data = root / "mysql-data"
        self.init_file = root / "mysql-init.sql"
        # The password as mysql_native_password's hash: the harness greps every file of a
        # scenario for the passwords, and this one must not count.
        digest = hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()
        self.init_file.write_text(
            "CREATE DATABASE IF NOT EXISTS cosid;\n"
            f"CREATE USER IF NOT EXISTS 'cosid'@'%' IDENTIFIED BY PASSWORD '*{digest}';\n"
            "GRANT ALL PRIVILEGES ON cosid.* TO 'cosid'@'%';\n")
        os.chmod(self.init_file, 0o600)
        self.wipe()

    def wipe(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        # Its own temporary directory: installs running at once in /tmp collide on the names
        # of their temporary tables.
        self.tmp = self.root / "mysql-tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)
        cmd = [_mysql_bin(["mariadb-install-db", "mysql_install_db"]), "--no-defaults",
               f"--datadir={self.data}", f"--tmpdir={self.tmp}", "--auth-root-authentication-method=normal",
               "--skip-test-db", "--skip-name-resolve"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        out = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {out.stdout[-1000:]}{out.stderr[-1000:]}")

    def command(self) -> list[str]:
        cmd = [
            _mysql_bin(["mariadbd", "mysqld"]), "--no-defaults", f"--datadir={self.data}",
            f"--port={self.port}", "--bind-address=127.0.0.1",
            f"--socket={self.root / 'mysqld.sock'}", f"--pid-file={self.root / 'mysqld.pid'}",
            f"--init-file={self.init_file}", f"--tmpdir={self.tmp}", "--skip-name-resolve", "--skip-log-bin",
            "--innodb-flush-log-at-trx-commit=1", "--innodb-buffer-pool-size=32M", "--max-connections=300",
        ]
        if self.tls:
            cmd += [f"--ssl-cert={self.tls['cert']}", f"--ssl-key={self.tls['key']}", f"--ssl-ca={self.tls['ca']}",
                    "--require-secure-transport=ON"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        return cmd

    def ready(self, timeout: float) -> bool:
        # The port opens after crash recovery and the init file; the greeting says it serves.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.settimeout(1.0)
                    greeting = s.recv(64)
                    if len(greeting) > 4 and greeting[4] == 10:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def sql(self, sql: str) -> str:
        """Runs `sql` on the database `cosid` as root (over the Unix socket, no password)."""
        out = subprocess.run(
            [_mysql_bin(["mariadb", "mysql"]), "--no-defaults", f"--socket={self.root / 'mysqld.sock'}",
             "-uroot", "--batch", "--skip-column-names", "cosid", "-e", sql],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"mariadb on port {self.port} failed on {sql!r}: {out.stdout}{out.stderr}")
        return out.stdout

    def url(self, port=None, password=None, ssl_mode: str | None = None) -> str:
        pw = self.password if password is None else password
        if ssl_mode is None:
            ssl_mode = "verify_identity" if self.tls else None
        q = ""
        if ssl_mode:
            q = f"?ssl-mode={ssl_mode}"
            if self.tls and ssl_mode.startswith("verify"):
                q += f"&ssl-ca={self.tls['ca']}"
        return f"mysql://cosid:{pw}@127.0.0.1:{port or self.port}/cosid{q}"


class Etcd(Server):
    """One etcd member; alone (the default) or one of an `EtcdCluster`."""

    kind = "etcd"

    def __init__(self, root: Path, password: str = "", clock_file: Path | None = None, name: str = "chaos"):
        super().__init__(root, password, clock_file)
        self.name = name
        self.peer_port = free_port()
        #: the peer URL the other members dial (a cluster puts a proxy there)
        self.peer_url = f"http://127.0.0.1:{self.peer_port}"
        #: `--initial-cluster`; None: this member alone
        self.initial_cluster: str | None = None
        self.token = "etcd-cluster"
        if name == "chaos":
            self.data = root / "etcd-data"
        else:
            self.data = root / "etcd-data" / name
            self.log = root / f"etcd-{name}.log"

    def command(self) -> list[str]:
        client = f"http://127.0.0.1:{self.port}"
        return [
            "etcd", "--name", self.name, "--data-dir", str(self.data),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster or f"{self.name}={self.peer_url}",
            "--initial-cluster-state", "new", "--initial-cluster-token", self.token,
            "--log-level", "warn", "--logger", "zap",
        ]

    def status(self, timeout: float = 1.0) -> dict | None:
        """The member's own view (`/v3/maintenance/status`, answered without the quorum):
        `member` and `leader` ids (0: it knows no leader), `raft_index`; None if it does not
        answer."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v3/maintenance/status", data=b"{}",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                st = json.load(r)
            return {"member": int(st["header"]["member_id"]), "leader": int(st.get("leader", 0)),
                    "raft_index": int(st.get("raftIndex", 0))}
        except (OSError, ValueError, KeyError):
            return None

    def wipe(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)

    def _gateway(self, call: str, body: dict) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v3/kv/{call}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.load(r)

    def put(self, key: str, value: str) -> int:
        """Puts `key` (through the JSON gateway, as cosid does); the store's revision after it."""
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        return int(self._gateway("put", {"key": b64(key), "value": b64(value)})["header"]["revision"])

    def mod_revision(self, key: str) -> tuple[int | None, int]:
        """(`key`'s mod_revision or None when it does not exist, the store's revision)."""
        r = self._gateway("range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = r.get("kvs") or []
        return (int(kvs[0]["mod_revision"]) if kvs else None), int(r["header"]["revision"])

    def url(self, port=None, password=None) -> str:
        return f"etcd://127.0.0.1:{port or self.port}"

    def redacted_url(self, port=None) -> str:
        return self.url(port)


class EtcdMember(Etcd):
    """A member of a cluster: ready once it serves and knows a leader."""

    def ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if not wait_port(self.port, timeout, self.proc):
            return False
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            st = self.status()
            if st and st["leader"]:
                return True
            time.sleep(0.1)
        return False


class EtcdCluster(Server):
    """`size` etcd members on 127.0.0.1, each with its client port, its data directory and a
    proxy (tests/chaos/proxy.py) in front of its peer port: the others reach it only through
    that proxy, so `partition(m)` can cut it off from the rest while its clients still reach it.
    Killed, restarted and wiped as a whole like any server, or member by member."""

    kind = "etcd"

    def __init__(self, root: Path, password: str = "", clock_file: Path | None = None, size: int = 3):
        super().__init__(root, password, clock_file)
        (root / "etcd-data").mkdir(parents=True, exist_ok=True)
        self.members = [EtcdMember(root, password, clock_file, name=f"m{i}") for i in range(size)]
        self.proxies = [Proxy(m.peer_port) for m in self.members]
        for m, px in zip(self.members, self.proxies):
            m.peer_url = f"http://127.0.0.1:{px.port}"
        cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for m in self.members:
            m.initial_cluster = cluster
            m.token = f"chaos-{root.name}"
        self.port = self.members[0].port
        self.turn = 0
        self.partitioned: EtcdMember | None = None

    def start(self, timeout: float = 60) -> None:
        # Each member waits for a quorum: start them all, then wait.
        for m in self.members:
            m.launch()
        for m in self.members:
            m.wait_ready(timeout)
        self.down_since = None

    def kill(self) -> None:
        for m in self.members:
            m.kill()
        self.down_since = time.monotonic()

    def stop(self) -> None:
        self.heal()
        for m in self.members:
            m.stop()
        for px in self.proxies:
            px.close()

    def wipe(self) -> None:
        for m in self.members:
            m.wipe()

    def url(self, port=None, password=None) -> str:
        """Names every member, from the next one at each call: processes and snapshots spread
        over the cluster."""
        return "etcd://" + self.rotated_hosts(self.members)

    def redacted_url(self, port=None) -> str:
        return self.url(port)

    # -- members ---------------------------------------------------------------------------------
    def leader(self) -> EtcdMember | None:
        """The member the others follow, by their own `status`; None if they do not agree."""
        views = [(m, m.status()) for m in self.members if not m.paused and m.proc is not None]
        leaders = {st["leader"] for _, st in views if st}
        if len(leaders) != 1:
            return None
        lead = leaders.pop()
        return next((m for m, st in views if st and st["member"] == lead), None)

    def wait_leader(self, timeout: float = 30) -> EtcdMember | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.leader()
            if m is not None:
                return m
            time.sleep(0.1)
        return None

    def partition(self, m: EtcdMember) -> None:
        """Cuts `m` off from the other members, both ways; its client port stays open. Inbound:
        its proxy resets everything. Outbound: `m` dials the others' proxies, which reset the
        connections whose first request names `m` as its sender (etcd's `X-Server-From`)."""
        st = m.status()
        assert st is not None, f"{m.name} does not answer"
        self.partitioned = m
        marker = f"X-Server-From: {st['member']:x}\r\n".encode()
        for other, px in zip(self.members, self.proxies):
            if other is m:
                px.cut()
            else:
                px.refuse(marker)

    def heal(self) -> None:
        for px in self.proxies:
            px.set_pass()
            px.refuse(None)
        self.partitioned = None


class PostgresPair(Server):
    """A PostgreSQL primary with a streaming standby made from it by `pg_basebackup`, in
    synchronous replication (`synchronous_standby_names`, `synchronous_commit=on`: a commit is
    acknowledged once the standby has flushed it), each behind a proxy (tests/chaos/proxy.py).
    Clients get one URL naming both proxies with `target_session_attrs=read-write`, so `cut()` on
    the primary's proxy takes the primary away from every client while it keeps running, and
    `promote()` makes the standby the server they find."""

    kind = "postgres"

    def __init__(self, root: Path, template: PostgresTemplate, clock_file: Path | None = None):
        super().__init__(root, template.password, clock_file)
        self.template = template
        self.primary = Postgres(root / "primary", template, clock_file=clock_file)
        self.primary.extra = ["-c", "synchronous_standby_names=standby"]
        standby_data = root / "standby" / "pg-data"
        self.standby = Postgres(root / "standby", template, clock_file=clock_file, data_dir=standby_data)
        self.proxies = {"primary": Proxy(self.primary.port), "standby": Proxy(self.standby.port)}
        self.port = self.proxies["primary"].port

    def _as_postgres(self, args: list[str], what: str) -> str:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60, **self.template.popen_extra())
        if out.returncode != 0:
            raise RuntimeError(f"{what} failed: {out.stdout}{out.stderr}")
        return out.stdout

    def psql(self, server: Postgres, sql: str) -> str:
        return self._as_postgres(
            [_postgres_bin("psql"), "-h", str(server.sockdir), "-p", str(server.port), "-U", "postgres",
             "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-Atq", "-c", sql], f"psql on port {server.port}")

    def start(self, timeout: float = 60) -> None:
        # Replication over the primary's Unix socket, trusted like every local connection.
        hba = self.primary.data / "pg_hba.conf"
        hba.write_text(hba.read_text() + "local replication all trust\n")
        self.template.chown(hba)
        self.primary.start(timeout)
        data = self.standby.data
        shutil.rmtree(data, ignore_errors=True)
        data.parent.mkdir(parents=True, exist_ok=True)
        self.template.chown(data.parent)
        self._as_postgres(
            [_postgres_bin("pg_basebackup"), "-h", str(self.primary.sockdir), "-p", str(self.primary.port),
             "-U", "postgres", "-D", str(data), "-X", "stream", "--no-sync"], "pg_basebackup")
        (data / "standby.signal").write_text("")
        with open(data / "postgresql.auto.conf", "a") as f:
            f.write(f"primary_conninfo = 'host={self.primary.sockdir} port={self.primary.port} "
                    "user=postgres application_name=standby'\n")
        self.template.chown(data)
        os.chmod(data, 0o700)
        self.standby.start(timeout)
        deadline = time.monotonic() + timeout
        while self.psql(self.primary, "SELECT sync_state FROM pg_stat_replication").strip() != "sync":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not reach synchronous streaming; see {self.standby.log}:\n"
                                   + tail(self.standby.log))
            time.sleep(0.2)
        self.down_since = None

    def promote(self) -> None:
        """Promotes the standby and waits until it takes writes."""
        self._as_postgres([_postgres_bin("pg_ctl"), "promote", "-w", "-t", "30", "-D", str(self.standby.data)],
                          "pg_ctl promote")

    def in_recovery(self, server: Postgres) -> bool:
        return self.psql(server, "SELECT pg_is_in_recovery()").strip() == "t"

    def kill(self) -> None:
        self.primary.kill()
        self.standby.kill()
        self.down_since = time.monotonic()

    def stop(self) -> None:
        for px in self.proxies.values():
            px.close()
        self.standby.stop_clean()
        self.primary.stop_clean()

    def wipe(self) -> None:
        raise RuntimeError("a PostgreSQL pair is not wiped: start a new one")

    def url(self, port=None, password=None) -> str:
        pw = self.password if password is None else password
        hosts = ",".join(f"127.0.0.1:{px.port}" for px in self.proxies.values())
        return f"postgres://cosid:{pw}@{hosts}/cosid?sslmode=disable&target_session_attrs=read-write"


class RespError(Exception):
    """An error reply from a Redis server or sentinel."""


def resp(port: int, *args: str, password: str | None = None, timeout: float = 1.0):
    """Sends one command (after `AUTH password` when given) to 127.0.0.1:`port` and returns the
    reply decoded (str, int, list or None); None too when the server does not answer within
    `timeout`. An error reply raises `RespError`."""
    cmds = ([("AUTH", password)] if password else []) + [args]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"".join(_resp_encode(c) for c in cmds))
            f = s.makefile("rb")
            reply = None
            for _ in cmds:
                reply = _resp_read(f)
            return reply
    except OSError:
        return None


def _resp_encode(args) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = str(a).encode()
        out.append(f"${len(b)}\r\n".encode() + b + b"\r\n")
    return b"".join(out)


def _resp_read(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise OSError("connection closed mid-reply")
    kind, body = line[:1], line[1:-2].decode(errors="replace")
    if kind == b"+":
        return body
    if kind == b"-":
        raise RespError(body)
    if kind == b":":
        return int(body)
    if kind == b"$":
        n = int(body)
        return None if n < 0 else f.read(n + 2)[:-2].decode(errors="replace")
    if kind == b"*":
        n = int(body)
        return None if n < 0 else [_resp_read(f) for _ in range(n)]
    raise OSError(f"not a RESP reply: {line[:40]!r}")


class Sentinel(Server):
    """One Redis Sentinel (`redis-server sentinel.conf --sentinel`). Its configuration holds the
    master's password (`auth-pass`), so it lives in a data directory the password grep skips;
    the sentinel itself asks for no password (loopback only)."""

    kind = "sentinel"

    def __init__(self, root: Path, password: str, n: int, master: str, primary_port: int,
                 down_after_ms: int, failover_timeout_ms: int):
        super().__init__(root, password, None)
        self.log = root / f"sentinel-{n}.log"
        self.dir = root / "redis-data" / f"sentinel-{n}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.conf = self.dir / "sentinel.conf"
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir {self.dir}\n"
            f"sentinel monitor {master} 127.0.0.1 {primary_port} 2\n"
            f"sentinel auth-pass {master} {password}\n"
            f"sentinel down-after-milliseconds {master} {down_after_ms}\n"
            f"sentinel failover-timeout {master} {failover_timeout_ms}\n"
            f"sentinel parallel-syncs {master} 1\n")

    def command(self) -> list[str]:
        return ["redis-server", str(self.conf), "--sentinel"]

    def ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            if resp(self.port, "PING") == "PONG":
                return True
            time.sleep(0.05)
        return False

    def wipe(self) -> None:
        raise RuntimeError("a sentinel is not wiped: start a new group")


class RedisSentinel(Server):
    """A Redis primary, `replicas` replicas (`replicaof` it, same password as `masterauth`) and
    three sentinels monitoring it as `MASTER` with a quorum of 2, `down-after-milliseconds` 750
    and a short `failover-timeout`, all on 127.0.0.1. Clients get one `redis+sentinel://` URL
    naming the three sentinels, from the next one at each call, with `?replicas=N`
    (`wait_replicas`; 0: no `WAIT`).

    `lagging=True` sets up the case `WAIT` is there for: the first replica, with the best
    `replica-priority` (the one Sentinel promotes), follows the primary through a proxy
    (tests/chaos/proxy.py) that `lag()` black-holes, so from then on it receives none of the
    writes the primary acknowledges. (Sentinel would point a replica that follows another
    address back at the primary after `failover-timeout`: that timeout is long here.)"""

    kind = "redis"
    MASTER = "cosid"

    def __init__(self, root: Path, password: str, clock_file: Path | None = None, replicas: int = 2,
                 lagging: bool = False):
        super().__init__(root, password, clock_file)
        self.nodes = [Redis(root, password, clock_file, name=f"n{i}") for i in range(replicas + 1)]
        primary = self.nodes[0].port
        self.proxy = Proxy(primary) if lagging else None
        for i, n in enumerate(self.nodes):
            # Every node may become a replica, of a primary that asks for the password.
            n.extra = ["--masterauth", password]
            if i == 0:
                continue
            upstream = self.proxy.port if self.proxy and i == 1 else primary
            n.extra += ["--replicaof", "127.0.0.1", str(upstream),
                        "--replica-priority", "1" if self.proxy and i == 1 else "100"]
        #: how long the primary must not answer before the sentinels judge it down: short, so
        #: the failover ends within the ttl, while windows granted just before the kill still run
        self.down_after_ms = 750
        self.sentinels = [Sentinel(root, password, i, self.MASTER, primary, down_after_ms=self.down_after_ms,
                                   failover_timeout_ms=30000 if lagging else 3000) for i in range(3)]
        self.port = primary
        self.wait_replicas = 1
        self.turn = 0

    def _until(self, what: str, cond, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Redis Sentinel group: {what} not within {timeout:.0f}s; see the logs in {self.root}")
            time.sleep(0.1)

    def info(self, node: Redis, section: str = "replication") -> dict[str, str]:
        try:
            text = resp(node.port, "INFO", section, password=self.password) or ""
        except RespError:
            return {}
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def start(self, timeout: float = 60) -> None:
        for n in self.nodes:
            n.launch()
        for n in self.nodes:
            n.wait_ready(timeout)
        self._until("every replica streams from the primary",
                    lambda: all(self.info(n).get("master_link_status") == "up" for n in self.nodes[1:]), timeout)
        for s in self.sentinels:
            s.launch()
        for s in self.sentinels:
            s.wait_ready(timeout)

        def known() -> bool:
            for s in self.sentinels:
                try:
                    r = resp(s.port, "SENTINEL", "MASTER", self.MASTER) or []
                except RespError:
                    return False
                fields = dict(zip(r[::2], r[1::2]))
                if (fields.get("num-slaves") != str(len(self.nodes) - 1)
                        or fields.get("num-other-sentinels") != str(len(self.sentinels) - 1)):
                    return False
            return True
        self._until("every sentinel knows the replicas and the other sentinels", known, timeout)
        self.down_since = None

    def primary(self) -> Redis | None:
        """The node the first sentinel that answers names as the master."""
        for s in self.sentinels:
            try:
                r = resp(s.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.MASTER)
            except RespError:
                continue
            if r:
                return next((n for n in self.nodes if n.port == int(r[1])), None)
        return None

    def is_master(self, node: Redis) -> bool:
        try:
            r = resp(node.port, "ROLE", password=self.password)
        except RespError:
            return False
        return bool(r) and r[0] == "master"

    def lag(self) -> Redis:
        """Black-holes the lagging replica's link to the primary (it stays connected, so
        Sentinel still counts it a candidate); returns that replica."""
        assert self.proxy is not None, "not a lagging group"
        self.proxy.blackhole()
        return self.nodes[1]

    def wait_promoted(self, old: Redis, timeout: float = 20) -> Redis:
        """Waits until the sentinels name a node other than `old` that says it is the master."""
        found: list[Redis] = []

        def promoted() -> bool:
            n = self.primary()
            if n is not None and n is not old and self.is_master(n):
                found.append(n)
                return True
            return False
        self._until("the sentinels promote a replica", promoted, timeout)
        return found[0]

    def online_replicas(self, node: Redis) -> int:
        """How many replicas stream from `node` past their initial sync (`state=online` in its
        INFO replication): the ones whose acknowledgements `WAIT` counts."""
        return sum(1 for k, v in self.info(node).items() if k.startswith("slave") and k[5:].isdigit()
                   and "state=online" in v)

    def wait_settled(self, replicas: int, timeout: float) -> Redis | None:
        """Waits until every sentinel names one node as the master, that node says it is the
        master, and at least `replicas` replicas stream from it; returns it, or None after
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            named = set()
            for s in self.sentinels:
                try:
                    r = resp(s.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.MASTER)
                except RespError:
                    r = None
                named.add(int(r[1]) if r else None)
            if len(named) == 1 and None not in named:
                port = named.pop()
                node = next((n for n in self.nodes if n.port == port), None)
                if node is not None and self.is_master(node) and self.online_replicas(node) >= replicas:
                    return node
            time.sleep(0.2)
        return None

    def kill(self) -> None:
        for n in self.nodes:
            n.kill()
        self.down_since = time.monotonic()

    def stop(self) -> None:
        for s in self.sentinels:  # first, so they start no failover while the nodes stop
            s.stop()
        for n in self.nodes:
            n.stop()
        if self.proxy:
            self.proxy.close()

    def wipe(self) -> None:
        raise RuntimeError("a Redis Sentinel group is not wiped: start a new one")

    def url(self, port=None, password=None) -> str:
        pw = self.password if password is None else password
        hosts = self.rotated_hosts(self.sentinels)
        return f"redis+sentinel://:{pw}@{hosts}/{self.MASTER}/0?replicas={self.wait_replicas}"


class RedisCluster(Server):
    """A Redis Cluster of three primaries (no replicas) on 127.0.0.1, each with the password (and
    it as `masterauth`), an append-only file fsynced on every write, a cluster bus port of its own
    and a third of the 16384 hash slots; joined with `CLUSTER MEET`. Clients get one
    `redis+cluster://` URL naming the three nodes, from the next one at each call.

    `begin_migration`, `move_keys` and `finish_migration` move one hash slot to the next node
    the way `redis-cli --cluster reshard` does (`SETSLOT … IMPORTING`/`MIGRATING`, `MIGRATE …
    KEYS`, `SETSLOT … NODE` on every node); `redirections` reads a node's count of `ASK` or
    `MOVED` replies (`INFO errorstats`)."""

    kind = "redis"

    def __init__(self, root: Path, password: str, clock_file: Path | None = None):
        super().__init__(root, password, clock_file)
        self.nodes = [Redis(root, password, clock_file, name=f"c{i}") for i in range(3)]
        for n in self.nodes:
            n.bus_port = free_port()
            n.extra = ["--masterauth", password, "--cluster-enabled", "yes",
                       "--cluster-config-file", "nodes.conf", "--cluster-port", str(n.bus_port),
                       "--cluster-node-timeout", "5000"]
        self.port = self.nodes[0].port
        self.turn = 0
        self.ids: dict[int, str] = {}

    def cmd(self, port: int, *args: str):
        return resp(port, *args, password=self.password, timeout=5.0)

    def _until(self, what: str, cond, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Redis Cluster: {what} not within {timeout:.0f}s; see the logs in {self.root}")
            time.sleep(0.1)

    def start(self, timeout: float = 60) -> None:
        for n in self.nodes:
            n.launch()
        for n in self.nodes:
            n.wait_ready(timeout)
        for i, n in enumerate(self.nodes):
            self.ids[n.port] = self.cmd(n.port, "CLUSTER", "MYID")
            first, last = i * 5461, 16383 if i == 2 else i * 5461 + 5460
            self.cmd(n.port, "CLUSTER", "ADDSLOTSRANGE", str(first), str(last))
        for n in self.nodes[1:]:
            self.cmd(self.nodes[0].port, "CLUSTER", "MEET", "127.0.0.1", str(n.port), str(n.bus_port))

        def ok() -> bool:
            for n in self.nodes:
                try:
                    info = self.cmd(n.port, "CLUSTER", "INFO") or ""
                except RespError:
                    return False
                if "cluster_state:ok" not in info or "cluster_known_nodes:3" not in info:
                    return False
            return True
        self._until("every node serves the cluster and knows the others", ok, timeout)

    def keyslot(self, key: str) -> int:
        return int(self.cmd(self.port, "CLUSTER", "KEYSLOT", key))

    def owner(self, slot: int, asked: int | None = None) -> int:
        """The port of the node that owns `slot`, as the node on `asked` (the first) sees it."""
        text = self.cmd(asked or self.port, "CLUSTER", "NODES") or ""
        for line in text.splitlines():
            f = line.split()
            for r in f[8:]:
                a, _, b = r.partition("-")
                if a.isdigit() and int(a) <= slot <= int(b or a):
                    return int(f[1].split("@")[0].rsplit(":", 1)[1])
        raise RuntimeError(f"Redis Cluster: no node owns hash slot {slot}")

    def begin_migration(self, slot: int) -> tuple[int, int]:
        src = self.owner(slot)
        ports = [n.port for n in self.nodes]
        dst = ports[(ports.index(src) + 1) % len(ports)]
        self.cmd(dst, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", self.ids[src])
        self.cmd(src, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", self.ids[dst])
        return src, dst

    def move_keys(self, slot: int, src: int, dst: int) -> int:
        moved = 0
        while True:
            keys = self.cmd(src, "CLUSTER", "GETKEYSINSLOT", str(slot), "100") or []
            if not keys:
                return moved
            self.cmd(src, "MIGRATE", "127.0.0.1", str(dst), "", "0", "5000", "AUTH", self.password, "KEYS", *keys)
            moved += len(keys)

    def finish_migration(self, slot: int, src: int, dst: int) -> None:
        for port in [dst, src] + [n.port for n in self.nodes if n.port not in (src, dst)]:
            self.cmd(port, "CLUSTER", "SETSLOT", str(slot), "NODE", self.ids[dst])
        self._until("every node names the new owner",
                    lambda: all(self.owner(slot, n.port) == dst for n in self.nodes), 30)

    def redirections(self, port: int, code: str) -> int:
        text = self.cmd(port, "INFO", "errorstats") or ""
        for line in text.splitlines():
            if line.startswith(f"errorstat_{code}:count="):
                return int(line.split("=", 1)[1])
        return 0

    def kill(self) -> None:
        for n in self.nodes:
            n.kill()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def wipe(self) -> None:
        raise RuntimeError("a Redis Cluster is not wiped: start a new one")

    def url(self, port=None, password=None) -> str:
        pw = self.password if password is None else password
        hosts = self.rotated_hosts(self.nodes)
        return f"redis+cluster://:{pw}@{hosts}/0"
