#!/usr/bin/env python3
"""cosid chaos harness: real `cosid next --follow` processes, real stores, real faults.

Each scenario starts its own store (redis-server, PostgreSQL, etcd, MariaDB or an SQLite file) on
127.0.0.1, runs several `cosid next --follow` processes in one namespace with a short ttl (2s)
and tolerance (500ms) so that faults bite within seconds, applies a fault (clock skew with
libfaketime, the store's clock jumping, SIGSTOP past the ttl, SIGKILL and restart, duplicate
owner keys, the store killed or wiped, the network cut or slowed, static slots with the clock
set back or a corrupt state file), stops every process with SIGTERM, and checks every id
printed: no duplicate, no (slot, millisecond) issued by two processes, ids increasing per
process and slot, every id on a slot its process was seen holding, every process issued or
said why not, every process stopped cleanly on SIGTERM, and no password in any output.

Usage:
  chaos.py [--cosid PATH] [--stores sqlite,redis,postgres,etcd,mysql] [--only NAME,...]
           [--minutes N] [--jobs N] [--report FILE] [--update-docs docs/reliability.md]

Without --minutes: the short form, every scenario once on every store it applies to.
With --minutes N: the long form, all scenarios in rotation until N minutes have passed.
Ends with a line `N passed, N failed` (scenario runs); exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402
from procs import Proc, Verdict, check_ids, decode  # noqa: E402
from proxy import Proxy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STORES = ["sqlite", "redis", "postgres", "etcd", "mysql"]
TTL, TOLERANCE = "2s", "500ms"
TTL_S, TOL_S = 2.0, 0.5
EXPIRY_S = TTL_S + TOL_S
SLOT_LIMIT = 1 << 10  # bits: 10, the default
PRINT_LOCK = threading.Lock()
#: set by SIGINT/SIGTERM: scenarios stop at their next sleep, everything started is stopped
ABORT = threading.Event()



def with_param(url: str, param: str) -> str:
    """`url` with one more query parameter (the query starts after the host, past any '@')."""
    return url + ("&" if "?" in url[url.rfind("@") + 1:] else "?") + param

class Aborted(Exception):
    pass


def say(msg: str) -> None:
    with PRINT_LOCK:
        print(msg, flush=True)


class ScenarioFailure(Exception):
    pass


@dataclass
class Row:
    scenario: str
    store: str
    processes: str
    ids: int
    duplicates: int
    overlaps: int
    stopped: str
    events: str
    ok: bool
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    nprocs: int = 0
    #: a scenario of a setup without the guarantee: duplicates and overlaps are its finding
    unsafe: bool = False
    #: per language ("cli", "c", "py", "node"): [processes, ids issued]
    langs: dict = field(default_factory=dict)


#: The languages of the processes, in the order the report names them.
LANGS = {"cli": "CLI", "c": "C", "py": "Python", "node": "Node"}


def sum_languages(rows) -> dict:
    """{lang: [processes, ids]} summed over `rows`."""
    langs: dict[str, list[int]] = {}
    for r in rows:
        for k, (n, ids) in r.langs.items():
            entry = langs.setdefault(k, [0, 0])
            entry[0] += n
            entry[1] += ids
    return langs


def by_language(langs: dict) -> str:
    """"3 CLI (8123 ids), 1 C (2710 ids), …" from {lang: [processes, ids]}."""
    return ", ".join(f"{langs[k][0]} {name} ({langs[k][1]} ids)" for k, name in LANGS.items() if k in langs)


class Run:
    """State shared by every scenario of one harness run."""

    def __init__(self, args):
        self.args = args
        self.cosid = Path(args.cosid).resolve()
        self.work = Path(tempfile.mkdtemp(prefix="cosid-chaos-", dir=args.workdir))
        os.chmod(self.work, 0o755)  # PostgreSQL runs as the postgres user and must get in
        # Passwords: random per run, long enough that a hit in a grep is never chance.
        self.redis_password = "rp-" + secrets.token_hex(12)
        self.pg_password = "pp-" + secrets.token_hex(12)
        self.mysql_password = "mp-" + secrets.token_hex(12)
        self.passwords = [self.redis_password, self.pg_password, self.mysql_password]
        self._pg_template = None
        self._pg_lock = threading.Lock()
        self._certs = None
        self._certs_lock = threading.Lock()
        self.counter = 0
        self.counter_lock = threading.Lock()
        self.python = find_python(args.python)
        self.py_stores = probe_wheel_stores(self.python) if self.python else set()
        self.cworker, self.c_why = build_cworker(Path(args.libcosid), self.work)
        self.c_stores = probe_c_stores(self.cworker) if self.cworker else set()
        self.node, self.node_why = find_node()
        self.node_stores = probe_c_stores(self.node) if self.node else set()

    def pg_template(self):
        with self._pg_lock:
            if self._pg_template is None:
                self._pg_template = servers.PostgresTemplate(self.work, self.pg_password)
            return self._pg_template

    def certs(self) -> dict:
        """A CA and a server certificate for 127.0.0.1/localhost, made with openssl."""
        with self._certs_lock:
            if self._certs is None:
                d = self.work / "tls"
                d.mkdir(exist_ok=True)
                run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)  # noqa: E731
                run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=cosid chaos CA", "-keyout", "ca.key", "-out", "ca.pem",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
                run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-keyout", "server.key", "-out", "server.csr")
                (d / "ext.cnf").write_text(
                    "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                    "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
                run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                    "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "server.pem")
                self._certs = {"dir": d, "ca": str(d / "ca.pem"), "cert": str(d / "server.pem"),
                               "key": str(d / "server.key")}
            return self._certs

    def next_id(self) -> int:
        with self.counter_lock:
            self.counter += 1
            return self.counter


def find_python(given: str | None) -> str | None:
    """A Python that imports the cosid wheel: --python, else the test environment that
    scripts/test-python leaves in target/py-venv-test. None when there is none."""
    cands = [given] if given else [str(ROOT / "target/py-venv-test/bin/python")]
    for c in cands:
        if c and Path(c).exists():
            r = subprocess.run([c, "-c", "import cosid"], capture_output=True, cwd="/")
            if r.returncode == 0:
                return c
            if given:
                raise SystemExit(f"chaos: {c} cannot import cosid: {r.stderr.decode()[-300:]}")
    return None


def probe_wheel_stores(python: str) -> set[str]:
    """The store kinds the installed wheel was built with (a store it lacks is a ConfigError
    naming the missing feature; one it has fails to connect to port 1 with a StoreError)."""
    probe = (
        "import cosid, sys\n"
        "urls = {'redis': 'redis://127.0.0.1:1/0', 'postgres': 'postgres://x@127.0.0.1:1/x', 'etcd': 'etcd://127.0.0.1:1',\n"
        "        'mysql': 'mysql://x@127.0.0.1:1/x'}\n"
        "for kind, url in urls.items():\n"
        "    try:\n"
        "        cosid.Runtime({'cosid': {'namespace': 'probe', 'machine': {'lease': {'store': url, 'acquire-timeout': '100ms'}}}}).close()\n"
        "    except cosid.ConfigError:\n"
        "        continue\n"
        "    except Exception:\n"
        "        pass\n"
        "    print(kind)\n")
    try:
        r = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, cwd="/")
    except subprocess.TimeoutExpired:
        return {"sqlite"}
    return {"sqlite"} | set(r.stdout.split())


def build_cworker(libdir: Path, work: Path) -> tuple[str | None, str]:
    """Compiles tests/chaos/cworker.c against include/cosid.h and libcosid.so in `libdir`."""
    header = ROOT / "include" / "cosid.h"
    lib = libdir / "libcosid.so"
    if not header.exists() or not lib.exists():
        return None, f"no {lib.relative_to(ROOT) if str(lib).startswith(str(ROOT)) else lib} or include/cosid.h"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no C compiler"
    out = work / "cworker"
    # A cargo build leaves libcosid.so alone, without the link its SONAME (libcosid.so.0.MINOR)
    # names, which the loader looks for: lay the library out as an install does.
    soname = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    found = re.search(r"\(SONAME\).*\[(.+)\]", soname)
    linkdir = work / "libcosid"
    linkdir.mkdir(exist_ok=True)
    for name in {"libcosid.so", found.group(1) if found else "libcosid.so"}:
        (linkdir / name).unlink(missing_ok=True)
        (linkdir / name).symlink_to(lib.resolve())
    r = subprocess.run([cc, "-O2", "-Wall", "-I", str(header.parent), str(Path(__file__).resolve().parent / "cworker.c"),
                        "-L", str(linkdir), "-lcosid", f"-Wl,-rpath,{linkdir}", "-o", str(out)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"chaos: cannot build tests/chaos/cworker.c against {lib}:\n{r.stderr[-2000:]}")
    return str(out), ""


def find_node() -> tuple[list[str] | None, str]:
    """`node nodeworker.js` when node and the built addon (bindings/node/*.node, made by
    scripts/test-node) are there."""
    node = shutil.which("node")
    addon_dir = ROOT / "bindings" / "node"
    if node is None:
        return None, "no node"
    if not list(addon_dir.glob("*.node")):
        return None, "the addon is not built (bindings/node/*.node; scripts/test-node builds it)"
    return [node, str(Path(__file__).resolve().parent / "nodeworker.js")], ""


def probe_c_stores(worker) -> set[str]:
    """Store kinds a worker's library was built with: a missing one exits 1 (COSID_ERR_CONFIG),
    an unreachable one 2 (COSID_ERR_STORE) or another error."""
    worker = [worker] if isinstance(worker, str) else list(worker)
    urls = {"redis": "redis://127.0.0.1:1/0", "postgres": "postgres://x@127.0.0.1:1/x", "etcd": "etcd://127.0.0.1:1",
            "mysql": "mysql://x@127.0.0.1:1/x"}
    kinds = {"sqlite"}
    for kind, url in urls.items():
        try:
            r = subprocess.run(worker + ["--store", url, "--namespace", "probe", "--owner-key", "probe", "--ttl", "100ms"],
                               capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            continue
        if r.returncode != 1:
            kinds.add(kind)
    return kinds


class Ctx:
    """One scenario run on one store."""

    def __init__(self, run: Run, scenario: str, store: str):
        self.run = run
        self.scenario = scenario
        self.store_kind = store
        n = run.next_id()
        self.dir = run.work / f"{n:04d}-{scenario}-{store}"
        self.dir.mkdir(parents=True)
        self.cosid = run.cosid
        self.namespace = f"chaos-{scenario}-{n}"
        self.server: servers.Server | None = None
        self.proxy: Proxy | None = None
        self.procs: list[Proc] = []
        self.t0 = time.monotonic()
        self.timeline: list[str] = []
        self.events: list[str] = []
        self.failures: list[str] = []
        self.holders: dict[str, set[int]] | None = {}
        self.windows: list[dict] = []
        self._poll_stop = threading.Event()
        self._poller: threading.Thread | None = None
        self.extra_redactions: list[str] = []
        self.after_checks: list = []
        self.cmd_env: dict[str, str] = {}  # for every cosid command of this scenario (TLS: the CA)

    # -- helpers -------------------------------------------------------------------------------
    def note(self, what: str) -> None:
        self.timeline.append(f"{time.monotonic() - self.t0:5.1f}s {what}")

    def event(self, what: str) -> None:
        if what not in self.events:
            self.events.append(what)

    def fail(self, what: str) -> None:
        self.failures.append(what)

    def check(self, cond: bool, what: str) -> None:
        if not cond:
            self.fail(what)

    def redact(self, text: str) -> str:
        for pw in self.run.passwords + self.extra_redactions:
            if pw:
                text = text.replace(pw, "***")
        return text

    def sleep(self, seconds: float) -> None:
        if ABORT.wait(max(0.0, seconds)):
            raise Aborted("interrupted")

    # -- the store -----------------------------------------------------------------------------
    def start_store(self, clock: bool = False, tls: bool = False, cluster: bool = False,
                    standby: bool = False, sentinel: bool = False, lagging: bool = False,
                    rdb: bool = False) -> servers.Server:
        kind = self.store_kind
        clock_file = None
        if clock:
            clock_file = self.dir / "store-clock"
            clock_file.write_text("+0\n")
        certs = self.run.certs() if tls else None
        if kind == "sqlite":
            s = servers.Sqlite(self.dir)
        elif kind == "redis":
            if sentinel:
                s = servers.RedisSentinel(self.dir, self.run.redis_password, clock_file, lagging=lagging)
            elif cluster:
                s = servers.RedisCluster(self.dir, self.run.redis_password, clock_file)
            else:
                s = servers.Redis(self.dir, self.run.redis_password, clock_file, tls=certs)
                s.rdb = rdb
        elif kind == "postgres":
            if certs:
                # PostgreSQL wants its key private and owned by itself.
                key = self.dir / "pg-server.key"
                shutil.copy(certs["key"], key)
                os.chmod(key, 0o600)
                self.run.pg_template().chown(key)
                certs = dict(certs, key=str(key))
            if standby:
                s = servers.PostgresPair(self.dir, self.run.pg_template(), clock_file=clock_file)
            else:
                s = servers.Postgres(self.dir, self.run.pg_template(), clock_file=clock_file, tls=certs)
        elif kind == "etcd":
            s = (servers.EtcdCluster if cluster else servers.Etcd)(self.dir, clock_file=clock_file)
        elif kind == "mysql":
            s = servers.Mysql(self.dir, self.run.mysql_password, clock_file=clock_file, tls=certs)
        else:
            raise ValueError(kind)
        if certs:
            # The client trusts the harness's CA (rustls-native-certs reads SSL_CERT_FILE).
            self.cmd_env["SSL_CERT_FILE"] = certs["ca"]
        s.start()
        self.server = s
        self.note(f"{kind} up on port {s.port}")
        return s

    def set_store_clock(self, offset_s: int) -> None:
        assert self.server is not None and self.server.clock_file is not None
        self.server.clock_file.write_text(f"{offset_s:+d}\n")
        self.note(f"store clock set to {offset_s:+d}s")

    def with_proxy(self) -> Proxy:
        assert self.server is not None
        self.proxy = Proxy(self.server.port)
        return self.proxy

    def url(self, via_proxy: bool = False, restart_guard: bool = False) -> str:
        """The store's URL. Every scenario starts a new server, on which no runtime held a slot
        before, so the URL turns the restart guard off (`restart-guard=off`: Redis, PostgreSQL,
        MariaDB and etcd) unless `restart_guard`: processes start at once instead of waiting out
        the ttl after the server's start or a namespace's creation. The guard's own scenarios ask
        for it."""
        assert self.server is not None
        url = self.server.url(self.proxy.port if via_proxy and self.proxy else None)
        if restart_guard or self.server.kind not in ("redis", "sentinel", "postgres", "mysql", "etcd"):
            return url
        return with_param(url, "restart-guard=off")

    # -- processes -----------------------------------------------------------------------------
    def spawn(self, label: str, key: str | None = None, skew: str | None = None, via_proxy: bool = False,
              rate: int | None = None, url: str | None = None, env: dict | None = None,
              preferred_slot: int | None = None, lang: str = "cli", extra: list | None = None,
              acquire_timeout: str | None = None, ttl: str = TTL, bits: int | None = None) -> Proc:
        key = key or f"{self.namespace}-{label}"
        env = dict(self.cmd_env, **(env or {}))
        worker = self.binding_worker(label, lang)
        if worker is not None:
            program, name = worker
            label += f"-{lang}"
            args = ["--store", url or self.url(via_proxy), "--namespace", self.namespace, "--owner-key", key,
                    "--ttl", ttl, "--tolerance", TOLERANCE, "--rate", str(rate or self.run.args.rate)]
            if lang == "c":
                args += extra or []
            p = Proc(self, label, args, key, skew=skew, env=env, program=program, lang=lang)
            self.procs.append(p)
            self.note(f"{label} started ({name})" + (" via proxy" if via_proxy else ""))
            return p
        args = ["next", "--follow", "--rate", str(rate or self.run.args.rate), "--format", "dec",
                "--store", url or self.url(via_proxy), "--namespace", self.namespace,
                "--owner-key", key, "--ttl", ttl, "--tolerance", TOLERANCE]
        if preferred_slot is not None or acquire_timeout is not None or bits is not None:
            # No flag for them: a configuration file, which the flags above complete.
            cfg = self.dir / f"{label}.yaml"
            cfg.write_text("cosid:\n  machine:\n    lease:\n      store: 'memory:'\n"
                           + (f"      preferred-slot: {preferred_slot}\n" if preferred_slot is not None else "")
                           + (f"      bits: {bits}\n" if bits is not None else "")
                           + f"      acquire-timeout: {acquire_timeout or ttl}\n")
            args += ["--config", str(cfg)]
        p = Proc(self, label, args, key, skew=skew, env=env)
        self.procs.append(p)
        self.note(f"{label} started" + (f" (clock {skew})" if skew else "") + (" via proxy" if via_proxy else ""))
        return p

    def binding_worker(self, label: str, lang: str) -> tuple[list[str], str] | None:
        """The worker program and name of the binding `lang` ("node", "c" or "py") when it runs
        on this store; None when the cosid CLI runs instead (the binding is not there, or was
        built without the store: that is said). One choice for every binding's processes."""
        workers = {
            "node": (self.run.node, self.run.node_stores, "Node addon"),
            "c": (self.run.cworker, self.run.c_stores, "C library"),
            "py": (self.run.python, self.run.py_stores, "Python wheel"),
        }
        if lang not in workers:
            return None
        found, stores, name = workers[lang]
        if found is None:
            return None  # the report says the binding was not there
        if self.store_kind not in stores:
            self.event(f"{label}: the cosid CLI instead of the {name}, which was built without {self.store_kind}")
            return None
        if lang == "node":
            program = list(found)
        elif lang == "py":
            program = [found, str(Path(__file__).resolve().parent / "pyworker.py")]
        else:
            program = [found]
        return program, name

    def spawn_static(self, label: str, config: Path, skew: str | None = None) -> Proc:
        args = ["next", "--follow", "--rate", str(self.run.args.rate), "--format", "dec", "--config", str(config)]
        p = Proc(self, label, args, None, skew=skew, env=dict(self.cmd_env))
        self.procs.append(p)
        self.note(f"{label} started" + (f" (clock {skew})" if skew else ""))
        return p

    def spawn_many(self, n: int, gap: float = 0.25, **kw) -> list[Proc]:
        out = []
        for i in range(n):
            out.append(self.spawn(f"p{i}", **kw))
            self.sleep(gap)
        return out

    def cosid_cmd(self, args: list[str], timeout: float = 20, env: dict | None = None,
                  label: str = "cmd") -> subprocess.CompletedProcess:
        """Runs a one-shot `cosid` command, keeps its output for the password grep."""
        full_env = dict(os.environ)
        full_env.update(self.cmd_env)
        if env:
            full_env.update(env)
        try:
            r = subprocess.run([str(self.cosid)] + args, capture_output=True, text=True, timeout=timeout,
                               env=full_env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            r = subprocess.CompletedProcess(e.cmd, -999, e.stdout or "", (e.stderr or "") + "\n<timeout>")
            if isinstance(r.stdout, bytes):
                r.stdout = r.stdout.decode(errors="replace")
            if isinstance(r.stderr, bytes):
                r.stderr = r.stderr.decode(errors="replace")
        n = len(list(self.dir.glob(f"{label}-*.log")))
        (self.dir / f"{label}-{n}.log").write_text(
            f"$ cosid {self.redact(' '.join(args))}\nexit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}\n")
        return r

    # -- slot snapshots (`cosid slots --json`) ---------------------------------------------------
    def slots(self) -> list[dict] | None:
        if self.server is None or self.store_kind == "static":
            return None
        r = self.cosid_cmd(["slots", "--store", self.url(), "--namespace", self.namespace, "--json"],
                           timeout=10, label="slots")
        if r.returncode != 0:
            return None
        out = []
        for line in r.stdout.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                self.fail(f"`cosid slots --json` printed a line that is not JSON: {line[:80]!r}")
        return out

    def start_polling(self, every: float = 0.3) -> None:
        def loop():
            while not self._poll_stop.wait(every):
                snap = self.slots()
                if snap is None:
                    continue
                for r in snap:
                    if r.get("holder") is not None:
                        self.holders.setdefault(r["holder"], set()).add(r["slot"])
                        self.windows.append(r)
        self._poller = threading.Thread(target=loop, daemon=True, name="chaos-poller")
        self._poller.start()

    def stop_polling(self) -> None:
        self._poll_stop.set()
        if self._poller:
            self._poller.join(timeout=30)

    def held_by(self, key: str) -> set[int]:
        snap = self.slots() or []
        return {r["slot"] for r in snap if r.get("holder") == key and r.get("state") == "held"}

    # -- teardown ------------------------------------------------------------------------------
    def stop_all(self) -> None:
        for p in self.procs:
            if p.returncode is None:
                p.terminate()
        for p in self.procs:
            p.wait(timeout=15)
        self.note("all processes stopped")

    def close(self) -> None:
        for p in self.procs:
            if p.returncode is None:
                try:
                    p.kill()
                except Exception:
                    pass
        if self.proxy:
            self.proxy.close()
        if self.server:
            self.server.stop()


# ------------------------------------------------------------------------------------------------
# Running one scenario


def run_one(run: Run, scenario, store: str) -> Row:
    name, fn = scenario.name, scenario.fn
    ctx = Ctx(run, name, store)
    t0 = time.monotonic()
    crashed = None
    try:
        if store not in ("static",):
            ctx.start_store(**scenario.store_opts)
            ctx.start_polling()
        else:
            ctx.holders = None
        fn(ctx)
    except Exception as e:  # noqa: BLE001 - any harness or product failure is a scenario failure
        crashed = f"{type(e).__name__}: {e}"
        (ctx.dir / "traceback.txt").write_text(traceback.format_exc())
    finally:
        try:
            ctx.stop_all()
        except Exception as e:  # noqa: BLE001
            ctx.fail(f"stopping processes: {e}")
        ctx.stop_polling()
        ctx.close()
    if crashed:
        ctx.fail(f"scenario raised {ctx.redact(crashed)}")
    else:
        for check in ctx.after_checks:
            try:
                check()
            except Exception as e:  # noqa: BLE001
                ctx.fail(f"check raised {type(e).__name__}: {ctx.redact(str(e))}")
                (ctx.dir / "traceback.txt").write_text(traceback.format_exc())
    holders = ctx.holders if scenario.check_holders and store not in scenario.no_holder_check else None
    verdict = check_ids(ctx.procs, SLOT_LIMIT, holders)
    if scenario.expect_unsafe:
        report_unsafe(ctx, verdict)
    ctx.failures.extend(verdict.failures)
    check_processes(ctx, scenario)
    check_decoding(ctx)
    for hit in grep_passwords(run, ctx.dir):
        ctx.fail(hit)
    row = make_row(ctx, scenario, store, verdict)
    row.seconds = time.monotonic() - t0
    row.unsafe = scenario.expect_unsafe
    (ctx.dir / "timeline.txt").write_text("\n".join(ctx.timeline) + "\n")
    status = ("ok" if row.ok else "FAILED") + (" (unsafe setup: duplicates reported, not failed)" if row.unsafe else "")
    say(f"[{status}] {name} on {store}: {row.nprocs} processes ({by_language(row.langs)}), {row.ids} ids, "
        f"{row.duplicates} duplicates ({row.seconds:.0f}s)")
    for f in row.failures[:12]:
        say(f"    - {f}")
    if row.ok and not run.args.keep:
        shutil.rmtree(ctx.dir, ignore_errors=True)
    return row


def report_unsafe(ctx: Ctx, v: Verdict) -> None:
    """A scenario of a setup that does not keep the guarantee (`expect_unsafe`): the duplicates
    and (slot, ms) overlaps found are what it reports, first in its events, not failures. Every
    other check still fails it."""
    found = [f for f in v.failures if f.startswith(("DUPLICATE", "OVERLAP"))]
    v.failures = [f for f in v.failures if f not in found]
    ctx.events.insert(0, f"UNSAFE SETUP, duplicates reported, not failed: {v.duplicates} duplicate ids and "
                         f"{v.overlaps} (slot, ms) issued by two processes" + (" (" + "; ".join(found[:2]) + ")" if found else ""))


def check_decoding(ctx: Ctx) -> None:
    """The harness's layout math agrees with `cosid parse` (a few ids per scenario)."""
    sample = []
    for p in ctx.procs:
        ids = p.ids()
        if ids:
            sample += [ids[0], ids[-1]]
    if not sample:
        return
    sample = sample[:6]
    r = ctx.cosid_cmd(["parse"] + [str(i) for i in sample], label="parse")
    if r.returncode != 0:
        ctx.fail(f"cosid parse failed: {r.stderr.strip()[:200]}")
        return
    for id_, line in zip(sample, r.stdout.splitlines()):
        info = json.loads(line)
        ts, slot, seq = decode(id_)
        if (info.get("timestamp_ms"), info.get("slot"), info.get("sequence")) != (ts, slot, seq):
            ctx.fail(f"cosid parse {id_} gives {line}, the harness decodes ({ts}, {slot}, {seq})")


PANIC = re.compile(r"panicked at|RUST_BACKTRACE|Segmentation fault|core dumped", re.I)


def check_processes(ctx: Ctx, scenario) -> None:
    """Every process stopped cleanly on SIGTERM (or was killed on purpose), issued ids or said
    clearly why not, and never crashed."""
    for p in ctx.procs:
        err = p.stderr()
        if PANIC.search(err):
            ctx.fail(f"{p.label} crashed: {ctx.redact(err.strip().splitlines()[-1])[:200]}")
        if p.forced:
            ctx.fail(f"{p.label} did not exit within 15s of SIGTERM")
        if p.killed:
            continue
        if p.returncode != 0:
            if "cosid: error:" in err:
                if not scenario.errors_ok:
                    ctx.fail(f"{p.label} exited {p.returncode}: {ctx.redact(err.strip().splitlines()[-1])[:200]}")
            else:
                ctx.fail(f"{p.label} exited {p.returncode} without an error message")
        said = ("cosid: waiting:", "cosid: error:", "cosid: stopped by a signal")
        if not p.ids() and not any(s in err for s in said):
            ctx.fail(f"{p.label} issued no id and said nothing on stderr")


def fold(msg: str) -> str:
    msg = re.sub(r"\b\d{4}-\d\d-\d\dT[\d:.]+Z\b", "T", msg)
    msg = re.sub(r"\d+", "N", msg)
    return msg


def make_row(ctx: Ctx, scenario, store: str, v: Verdict) -> Row:
    # Service stops: per process, the longest stretch without an id.
    stops = []
    for p in ctx.procs:
        gap, _ = p.max_gap_ms()
        if gap >= 400:
            stops.append(f"{p.label} {gap / 1000:.1f}s")
        elif not p.ids():
            stops.append(f"{p.label} never issued")
    # Messages the processes printed, folded and counted.
    counts: dict[str, int] = {}
    work = str(ctx.run.work)
    for p in ctx.procs:
        for m in p.messages():
            m = fold(ctx.redact(m.replace(work, "$WORK")))[:160]
            m = re.sub(r"^cosid: ", "", m)
            m = re.sub(r"; (raise max-wait|the keeper is acquiring|retry shortly).*$", "", m)
            counts[m] = counts.get(m, 0) + 1
    msgs = [f"{m} (x{c})" if c > 1 else m for m, c in counts.items()]
    events = [e.replace(work, "$WORK")[:200] for e in ctx.events] + msgs
    stopped = ("; ".join(stops) + (" — " + scenario.why if scenario.why else "")) if stops else "none"
    n_procs = len(ctx.procs)
    langs: dict[str, list[int]] = {}
    for p in ctx.procs:
        entry = langs.setdefault(p.lang, [0, 0])
        entry[0] += 1
        entry[1] += len(p.ids())
    desc = f"{n_procs}" + (f" ({scenario.procs_note})" if scenario.procs_note else "")
    if langs:
        desc += f": {by_language(langs)}"
    return Row(scenario.name, store, desc, v.ids, v.duplicates, v.overlaps, stopped,
               "; ".join(events) if events else "-", ok=not ctx.failures,
               failures=[ctx.redact(f) for f in ctx.failures], nprocs=n_procs, langs=langs)


# ------------------------------------------------------------------------------------------------
# Credentials: grep everything captured


SKIP_SUFFIXES = (".db", ".db-wal", ".db-shm", ".pem", ".key", ".csr", ".srl", ".so", ".aof", ".rdb")
SKIP_DIRS = {"redis-data", "pg-data", "etcd-data", "pg-template", "tls", "state"}


def grep_passwords(run: Run, where: Path) -> list[str]:
    """Files under `where` that contain a password (data directories excluded: a store keeps
    its own credentials)."""
    hits = []
    for path in where.rglob("*"):
        if not path.is_file() or path.suffix in SKIP_SUFFIXES:
            continue
        if SKIP_DIRS.intersection(path.relative_to(where).parts):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for pw in run.passwords:
            if pw.encode() in data:
                hits.append(f"{path.relative_to(run.work)} contains a password")
    return hits


# ------------------------------------------------------------------------------------------------
# Report


def render_rows(rows: list[Row]) -> str:
    out = ["| scenario | store | processes | ids issued | duplicates | (slot, ms) overlaps | service stopped (longest gap per process) and why | events and errors raised | result |",
           "|---|---|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        cell = lambda s: s.replace("|", "\\|").replace("\n", " ")  # noqa: E731
        res = "pass" if r.ok else "FAIL: " + "; ".join(r.failures[:3])
        if r.unsafe and r.ok:
            res = "reported (unsafe setup: duplicates are its finding, not checked)"
        out.append(f"| {r.scenario} | {r.store} | {cell(r.processes)} | {r.ids} | {r.duplicates} | {r.overlaps} | "
                   f"{cell(r.stopped)} | {cell(r.events)} | {cell(res)} |")
    return "\n".join(out)


def aggregate(rows: list[Row]) -> list[Row]:
    """Long form: one row per (scenario, store) with sums."""
    by: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        by.setdefault((r.scenario, r.store), []).append(r)
    out = []
    for (s, st), rs in by.items():
        fails = [f for r in rs for f in r.failures]
        ev: list[str] = []
        for r in rs:
            for e in r.events.split("; "):
                e2 = re.sub(r" \(x\d+\)$", "", e)
                if e2 != "-" and fold(e2) not in {fold(x) for x in ev}:
                    ev.append(e2)
        stops = [r.stopped for r in rs if r.stopped != "none"]
        langs = sum_languages(rs)
        out.append(Row(s, st, f"{len(rs)} runs, {sum(r.nprocs for r in rs)} processes"
                       + (f": {by_language(langs)}" if langs else ""),
                       sum(r.ids for r in rs), sum(r.duplicates for r in rs), sum(r.overlaps for r in rs),
                       (stops[-1] + f" (last of {len(stops)} runs with a stop)") if stops else "none",
                       "; ".join(ev[:8]) or "-", ok=not fails, failures=fails,
                       unsafe=any(r.unsafe for r in rs), langs=langs))
    return out


def write_report(args, rows: list[Row], mode: str, elapsed: float, cmdline: str, extra: list[str]) -> str:
    passed = sum(r.ok for r in rows)
    failed = len(rows) - passed
    import scenarios
    order = {sc.name: n for n, sc in enumerate(scenarios.REGISTRY)}
    store_order = {s: n for n, s in enumerate(STORES + ["static", "all"])}
    rows = sorted(rows, key=lambda r: (order.get(r.scenario, 999), store_order.get(r.store, 99)))
    table = render_rows(rows if mode == "short" else aggregate(rows))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    total_ids = sum(r.ids for r in rows)
    dups = sum(r.duplicates for r in rows if not getattr(r, "unsafe", False))
    unsafe = [r for r in rows if getattr(r, "unsafe", False)]
    shown = ""
    if unsafe:
        # One entry per scenario and store (the long form runs each many times), runs summed.
        lost: dict[tuple[str, str], list[int]] = {}
        for r in unsafe:
            entry = lost.setdefault((r.scenario, r.store), [0, 0])
            entry[0] += r.duplicates
            entry[1] += 1
        found = ", ".join(f"{d} in {s} on {st}" + (f" ({n} runs)" if n > 1 else "")
                          for (s, st), (d, n) in lost.items())
        shown = (f" The setups that do not keep the guarantee, run to show what they lose "
                 f"(duplicates reported, not failed): {found}.")
    langs = sum_languages(rows)
    head = (f"Run {stamp}, {elapsed / 60:.1f} minutes, command:\n\n    {cmdline}\n\n"
            f"{len(rows)} scenario runs: {passed} passed, {failed} failed; {total_ids} ids issued, "
            f"{dups} duplicates in the scenarios that check for them.{shown}"
            + (f" Processes by language: {by_language(langs)}." if langs else "") + "\n")
    body = head + "\n" + "\n".join(f"- {e}" for e in extra) + ("\n\n" if extra else "\n") + table + "\n"
    return body


def splice(doc: Path, mode: str, body: str) -> None:
    start, end = f"<!-- chaos:{mode}:start -->", f"<!-- chaos:{mode}:end -->"
    text = doc.read_text() if doc.exists() else ""
    block = f"{start}\n{body}{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


# ------------------------------------------------------------------------------------------------


def main() -> int:
    import scenarios  # noqa: E402

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cosid", default=str(ROOT / "target/release/cosid"))
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--minutes", type=float, default=0, help="long form: rotate for N minutes")
    ap.add_argument("--jobs", type=int, default=3, help="scenario runs at once (different stores)")
    ap.add_argument("--rate", type=int, default=1000, help="ids per second per process")
    ap.add_argument("--workdir", default=None, help="where scenario directories go (default: TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the scenario directories")
    ap.add_argument("--report", default=str(ROOT / "target/chaos/reliability.md"))
    ap.add_argument("--update-docs", default=None, metavar="DOC",
                    help="also write the table into DOC (docs/reliability.md) between chaos markers")
    ap.add_argument("--section", default=None, metavar="NAME",
                    help="the markers --update-docs writes between: chaos:NAME:start/end (default: short, "
                         "or long with --minutes); e.g. long-replicated for a soak of some scenarios")
    ap.add_argument("--python", default=None,
                    help="a Python that imports the cosid wheel (default: target/py-venv-test/bin/python, "
                         "which scripts/test-python makes); without one, Python processes are left out")
    ap.add_argument("--libcosid", default=str(ROOT / "target/release"),
                    help="the folder with libcosid.so (default target/release; scripts/test-chaos builds it "
                         "with every store); without it, C processes are left out")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()

    stores = [s for s in args.stores.split(",") if s]
    for s in stores:
        if s not in STORES:
            ap.error(f"--stores: unknown store '{s}'; use {','.join(STORES)}")
    only = {s for s in args.only.split(",") if s}
    plan = scenarios.plan(stores, only)
    if args.list:
        for sc, st in plan:
            print(f"{sc.name} {st}")
        return 0
    if not plan:
        ap.error("no scenario selected")
    if not Path(args.cosid).exists():
        print(f"chaos: {args.cosid} does not exist; build it: cargo build --release -p cosid-cli --features etcd",
              file=sys.stderr)
        return 2
    if servers.LIBFAKETIME is None or shutil.which("faketime") is None:
        print("chaos: faketime is missing (apt-get install -y faketime)", file=sys.stderr)
        return 2

    run = Run(args)
    if any(sc.name == "store-clock-jump" and st == "redis" for sc, st in plan):
        servers.CLOCKSHIM = servers.build_clockshim(run.work)
    # scripts/test-chaos names itself (the command a reader reruns); paths relative to the repo.
    cmdline = os.environ.get("CHAOS_COMMAND") or (
        "python3 tests/chaos/chaos.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    cmdline = cmdline.replace(str(ROOT) + "/", "")
    say(f"chaos: {len(plan)} scenario runs per round, work dir {run.work}")
    t0 = time.monotonic()
    deadline = t0 + args.minutes * 60 if args.minutes else None
    rows: list[Row] = []
    rows_lock = threading.Lock()
    rounds = 0

    def one_round():
        # Group by store: runs on different stores go at once, one store's runs one at a time.
        groups: dict[str, list] = {}
        for sc, st in plan:
            groups.setdefault(st, []).append(sc)
        queue = list(groups.items())
        qlock = threading.Lock()

        def worker():
            while True:
                with qlock:
                    if not queue:
                        return
                    st, scs = queue.pop(0)
                for sc in scs:
                    if ABORT.is_set() or (deadline and time.monotonic() > deadline + 60):
                        return
                    row = run_one(run, sc, st)
                    with rows_lock:
                        rows.append(row)

        threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)  # the main thread keeps receiving signals

    def on_signal(signum, _frame):
        say(f"chaos: signal {signum}: stopping every process and server it started")
        ABORT.set()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    max_rounds = 1 if not deadline else 10_000
    while rounds < max_rounds and not ABORT.is_set():
        rounds += 1
        one_round()
        if not deadline or time.monotonic() >= deadline:
            break
        say(f"chaos: round {rounds} done, {len(rows)} runs, {sum(r.ids for r in rows)} ids, "
            f"{sum(not r.ok for r in rows)} failed, {(deadline - time.monotonic()) / 60:.1f} minutes left")

    # The per-scenario greps ran after each scenario; this row adds the files outside them.
    hits = [f for r in rows for f in r.failures if "contains a password" in f]
    hits += grep_passwords(run, run.work) if run.work.exists() else []
    n_files = sum(1 for _ in run.work.rglob("*")) if run.work.exists() else 0
    cred = Row("credentials never printed (grep of every captured output and log)", "all",
               "every process", 0, 0, 0, "none",
               f"{len(run.passwords)} passwords searched in every scenario's files", ok=not hits,
               failures=sorted(set(hits)))
    rows.append(cred)
    say(f"[{'ok' if cred.ok else 'FAILED'}] {cred.scenario}")
    for h in hits[:10]:
        say(f"    - {h}")
    _ = n_files

    elapsed = time.monotonic() - t0
    mode = "long" if args.minutes else "short"
    extra = [f"rounds: {rounds}" if mode == "long" else "one run of every scenario on every store it applies to"]
    extra += scenarios.NOTES
    order = {sc.name: n for n, sc in enumerate(scenarios.REGISTRY)}

    def joined(lang: str) -> str:
        """The scenarios in which processes of `lang` ran in this run (from the rows, not a list
        kept by hand)."""
        names = sorted({r.scenario for r in rows if r.langs.get(lang, [0])[0]}, key=lambda n: order.get(n, 999))
        return f"join {', '.join(names)}" if names else "joined no scenario of this run"
    if run.python:
        extra.append("Python wheel processes (`tests/chaos/pyworker.py`, labels ending in `-py`, run with "
                     f"`{Path(run.python).relative_to(ROOT) if str(run.python).startswith(str(ROOT)) else run.python}`) "
                     f"{joined('py')} on the stores the wheel was built with ({', '.join(sorted(run.py_stores))}), "
                     "and print the keeper's events.")
    else:
        extra.append("Python wheel processes were LEFT OUT: no Python with the cosid wheel was found "
                     "(run scripts/test-python first, or pass --python).")
    if run.cworker:
        extra.append("C library processes (`tests/chaos/cworker.c`, compiled against include/cosid.h and "
                     f"libcosid.so, labels ending in `-c`) {joined('c')} on the stores the library was "
                     f"built with ({', '.join(sorted(run.c_stores))}), and print the keeper's events.")
    else:
        extra.append(f"C library processes were LEFT OUT: {run.c_why} (scripts/test-chaos builds it).")
    if run.node:
        extra.append("Node addon processes (`tests/chaos/nodeworker.js` on bindings/node, labels ending in `-node`) "
                     f"{joined('node')} on the stores the addon was built with "
                     f"({', '.join(sorted(run.node_stores))}), and print the keeper's events.")
    else:
        extra.append(f"Node addon processes were LEFT OUT: {run.node_why}.")
    body = write_report(args, rows, mode, elapsed, cmdline, extra)
    report = Path(args.report)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(body)
    if args.update_docs:
        splice(Path(args.update_docs), args.section or mode, body)
    passed = sum(r.ok for r in rows)
    failed = len(rows) - passed + (1 if ABORT.is_set() else 0)
    say(f"chaos: report in {report}; work dir {run.work}")
    # The failures once more at the very end, where a CI log cut to its last lines still shows them.
    for r in rows:
        if not r.ok:
            say(f"FAILED: {r.scenario} on {r.store}:")
            for f in r.failures[:12]:
                say(f"    - {f}")
    if not args.keep and failed == 0:
        shutil.rmtree(run.work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
