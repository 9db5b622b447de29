"""fork(): a runtime or generator inherited by a child never issues on the parent's slot.

Under the fork policy `new-slot` (the default, `cosid.fork`) an inherited runtime, and every
generator obtained from it before or after the fork, takes a new slot of its own on its first
use in the child; under `fail` every call there raises `ForkedError`. The child's slot is
released when it closes the runtime, at interpreter exit (`atexit`) and when a
`multiprocessing` child ends. These tests fork for real, issue ids concurrently in the parent and
its children on one SQLite file, and check the store afterwards: no id in common, no slot left
held, no panic, no hang.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

import _support
import cosid
from _support import Child, held_slots, lease_config

pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)

def config(store: str, policy: Optional[str], namespace: str = "fork", **lease: Any) -> dict:
    lease.setdefault("bits", 4)
    c = lease_config(store, namespace, **lease)
    if policy is not None:
        c["cosid"]["fork"] = policy
    return c


PER_PROCESS = 20_000


def issue(source: Any, n: int = PER_PROCESS) -> list[int]:
    """`n` ids from a runtime or generator: half one by one, half in batches."""
    ids = [source.next() for _ in range(n // 2)]
    while len(ids) < n:
        ids += source.next_batch(min(1000, n - len(ids)))
    return ids


@pytest.mark.parametrize("policy", [None, "new-slot", "fail"])
@pytest.mark.parametrize("made", ["runtime", "generator-before", "generator-after"])
def test_parent_and_two_children_never_issue_the_same_id(
    tmp_path: Path, policy: Optional[str], made: str
) -> None:
    """Issue 11, item 1: a generator first asked for in a forked child issued on the parent's
    slot. Parent and 2 children issue at once from a runtime, a named generator obtained before
    the fork, or one first asked for in the child."""
    store = f"sqlite://{tmp_path / 'slots.db'}"
    rt = cosid.Runtime(config(store, policy))
    before = rt.generator("orders") if made == "generator-before" else None
    parent_slot = rt.slot
    assert parent_slot is not None

    def source() -> Any:
        if made == "runtime":
            return rt
        if made == "generator-before":
            return before
        return rt.generator("orders")

    go_read, go_write = os.pipe()

    def child() -> Any:
        os.read(go_read, 1)  # start together with the parent and the other child
        ids = issue(source())
        return {"ids": ids, "slot": rt.slot, "stats_slot": rt.stats().slot,
                "parsed": sorted({rt.parse(i).slot for i in ids})}

    children = [Child(child) for _ in range(2)]
    os.close(go_read)
    os.write(go_write, b"gg")
    os.close(go_write)
    parent_ids = issue(source())
    results = [c.result() for c in children]

    assert rt.slot == parent_slot, "the parent keeps its slot"
    assert {rt.parse(i).slot for i in parent_ids} == {parent_slot}
    if policy == "fail":
        for r in results:
            assert (r.get("error"), r.get("status")) == ("ForkedError", "COSID_ERR_FORKED"), r
        return
    everything = list(parent_ids)
    child_slots = []
    for r in results:
        assert "ok" in r, f"the child failed: {r}"
        out = r["ok"]
        assert out["slot"] is not None and out["slot"] != parent_slot, out["slot"]
        assert out["stats_slot"] == out["slot"], "stats() describe the child's own slot"
        assert out["parsed"] == [out["slot"]], "every id of the child carries its own slot"
        child_slots.append(out["slot"])
        everything += out["ids"]
    assert child_slots[0] != child_slots[1]
    assert len(everything) == 3 * PER_PROCESS
    assert len(set(everything)) == len(everything), "an id was issued twice"
    assert rt.next() > max(parent_ids)  # the parent goes on
    rt.close()


def test_an_explicit_owner_key_does_not_give_the_child_the_parents_slot(tmp_path: Path) -> None:
    """One owner key for every worker (`owner-key: host:8080`) must not let a child re-lease
    the parent's own slot: the child's lease is a new incarnation."""
    store = f"sqlite://{tmp_path / 'slots.db'}"
    rt = cosid.Runtime(config(store, "new-slot", owner_key="web:8080"))
    parent_ids = issue(rt, 1000)
    r = Child(lambda: {"ids": issue(rt, 1000), "slot": rt.slot}).result()
    assert "ok" in r, r
    assert r["ok"]["slot"] != rt.slot
    assert not set(r["ok"]["ids"]) & set(parent_ids + issue(rt, 1000))
    rt.close()


@pytest.mark.parametrize("policy", [None, "new-slot", "fail"])
def test_memory_store_child_always_raises_forked_error(memory_store: str,
                                                       policy: Optional[str]) -> None:
    """A `memory:` store lives in the parent's memory: the child cannot share it, whatever the
    policy."""
    rt = cosid.Runtime(config(memory_store, policy))
    gen = rt.generator("orders")
    rt.next()

    def child() -> Any:
        seen = []
        for call in (rt.next, gen.next, lambda: rt.generator("later").next()):
            try:
                call()
                seen.append("issued")
            except cosid.ForkedError as e:
                seen.append(e.status)
        return seen

    r = Child(child).result()
    assert r == {"ok": ["COSID_ERR_FORKED"] * 3}
    assert rt.next() > 0
    rt.close()


# A program run in its own interpreter, so that it exits the normal way (atexit runs) and its
# stderr can be searched for panics. argv: config (JSON), mode.
FORKING_PROGRAM = textwrap.dedent(
    """
    import json, os, sys
    import cosid

    cfg = json.loads(sys.argv[1])
    mode = sys.argv[2]
    rt = cosid.Runtime(cfg)
    orders = rt.generator("orders")
    ids = [rt.next(), orders.next()]
    pids = []
    for i in range(2):
        pid = os.fork()
        if pid == 0:
            if mode == "rebuild":
                # The rebuild of the documentation: the inherited runtime is dropped here.
                rt = cosid.Runtime(cfg)
                orders = rt.generator("orders")
            elif mode == "fail":
                try:
                    rt.next()
                    sys.exit("the inherited runtime issued under fork: fail")
                except cosid.ForkedError:
                    rt = cosid.Runtime(cfg)
                    orders = rt.generator("orders")
            print(rt.next(), orders.next(), rt.slot, flush=True)
            if i == 0:
                rt.close()  # the other child leaves it to atexit
            sys.exit(0)
        pids.append(pid)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"child {pid} failed: {status}")
    print(rt.next(), orders.next(), rt.slot, flush=True)
    # exits the normal way: atexit releases the parent's slot
    """
)


@pytest.mark.parametrize(
    "mode,policy", [("rebuild", None), ("rebuild", "fail"), ("inherit", None), ("fail", "fail")]
)
def test_children_exit_without_panic_and_leave_no_slot_held(
    tmp_path: Path, mode: str, policy: Optional[str]
) -> None:
    """Issue 11, item 3 (the documented rebuild ended with `PanicException: failed to join
    thread` and left the child's slot held) and item 5 (slots held until the ttl after a normal
    exit). Parent and 2 forked children exit normally; one child closes, one leaves it to
    atexit. Afterwards no slot of the namespace is held."""
    store = f"sqlite://{tmp_path / 'slots.db'}"
    cfg = config(store, policy, bits=3, ttl="60s")
    proc = subprocess.run(
        [sys.executable, "-c", FORKING_PROGRAM, json.dumps(cfg), mode],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    for bad in ("Panic", "panicked", "Traceback", "failed to join"):
        assert bad not in proc.stderr, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert len(lines) == 3, proc.stdout
    for column in (0, 1):  # the default generator, then "orders": two id spaces
        ids = [int(line[column]) for line in lines]
        assert len(set(ids)) == len(ids), ids
    *child_slots, parent_slot = [int(line[2]) for line in lines]
    # The parent held its slot all along; a child that ended may pass its slot to the next one.
    assert parent_slot not in child_slots, f"a child had the parent's slot: {lines}"
    assert held_slots(store, "fork", bits=3) == 0


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_multiprocessing_children_issue_distinct_ids_and_release_their_slots(
    tmp_path: Path, method: str
) -> None:
    """The natural code (a runtime made once, used in the workers) under every start method:
    `fork` workers use the inherited runtime (a new slot each), `forkserver` and `spawn`
    workers build their own. The workers never close: their slots are released when they end
    (multiprocessing's finalizers for fork/forkserver, atexit for spawn)."""
    store = f"sqlite://{tmp_path / 'slots.db'}"
    cfg = config(store, None, bits=3, ttl="60s")
    ctx = multiprocessing.get_context(method)
    rt = cosid.Runtime(cfg)
    _support.inherited = rt
    try:
        pool = ctx.Pool(3)
        try:
            results = pool.starmap(_support.pool_task, [(cfg, 2000)] * 12)
        finally:
            pool.close()  # workers end normally (terminate() would SIGTERM them)
            pool.join()
        parent_ids = issue(rt, 2000)
    finally:
        _support.inherited = None
    ids = parent_ids + [i for _, batch in results for i in batch]
    assert len(ids) == len(set(ids)) == 2000 + 12 * 2000
    worker_slots = {slot for slot, _ in results}
    assert rt.slot not in worker_slots
    assert held_slots(store, "fork", bits=3) == 1  # the parent's, still open
    rt.close()
    assert held_slots(store, "fork", bits=3) == 0


def test_fork_stress_many_runtimes_short_ttl_hundreds_of_forks(tmp_path: Path) -> None:
    """Issue 11, item 4: with keepers of 16 runtimes (ttl 1 s) renewing in SQLite while the
    parent forks, a child used to inherit a held lock and hang, or fail with "database is
    locked". 200 children each issue an id (from an inherited runtime, or from one of their own
    when the inherited one's policy is `fail`) and exit; none may hang or fail."""
    store = f"sqlite://{tmp_path / 'slots.db'}"
    configs = [config(store, "new-slot" if i % 2 == 0 else "fail", namespace="stress",
                      bits=8, ttl="1s", tolerance="100ms") for i in range(16)]
    runtimes = [cosid.Runtime(c) for c in configs]
    parent_ids: list[int] = []
    stop = threading.Event()

    def parent_issuing() -> None:
        # With a 1 s ttl on a loaded machine a renewal can come too late: the keeper then takes
        # a new slot, and the call in between says so (never a duplicate). Not what is tested.
        while not stop.is_set():
            for r in runtimes:
                try:
                    parent_ids.append(r.next())
                except (cosid.SlotLostError, cosid.WindowClosedError):
                    time.sleep(0.01)

    issuer = threading.Thread(target=parent_issuing)
    issuer.start()
    child_ids: list[int] = []
    try:
        for wave in range(25):
            children = []
            for j in range(8):
                k = (wave * 8 + j) % 16

                def body(k: int = k) -> Any:
                    inherited = runtimes[k]
                    try:
                        one = inherited.next()
                        inherited.close()  # releases the child's own slot
                        return one
                    except cosid.ForkedError:
                        with cosid.Runtime(configs[k]) as own:
                            return own.next()

                children.append(Child(body))
            for c in children:
                r = c.result()
                assert "ok" in r, f"a child failed: {r}"
                child_ids.append(r["ok"])
    finally:
        stop.set()
        issuer.join()
    assert len(child_ids) == 200
    everything = parent_ids + child_ids
    assert len(set(everything)) == len(everything), "an id was issued twice"
    for r in runtimes:
        r.close()


def test_lone_surrogates_raise_invalid_argument(rt: cosid.Runtime, memory_store: str) -> None:
    """Issue 17: a str with a lone surrogate has no UTF-8 form; it is a bad value
    (`InvalidArgumentError`, a `ValueError`), not a `UnicodeEncodeError`."""
    bad = "\ud800"
    with pytest.raises(cosid.InvalidArgumentError, match="generator name"):
        rt.generator(bad)
    with pytest.raises(cosid.InvalidArgumentError, match="configuration"):
        cosid.Runtime(bad)
    cfg = lease_config(memory_store)
    cfg["cosid"]["namespace"] = "ns" + bad
    with pytest.raises(cosid.InvalidArgumentError, match="namespace"):
        cosid.Runtime(cfg)
    with pytest.raises(cosid.InvalidArgumentError, match="key"):
        cosid.Runtime({"cosid": {bad: 1}})
    with pytest.raises(cosid.InvalidArgumentError, match="base-62"):
        cosid.from_base62(bad)
    with pytest.raises(cosid.InvalidArgumentError, match="base-62"):
        rt.parse(bad)
    with pytest.raises(TypeError):
        rt.generator(b"orders")  # type: ignore[arg-type]


# Holds the write lock of the SQLite file argv[1] until its stdin closes.
LOCKER = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30); "
    "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read(); "
    "c.execute('ROLLBACK')"
)


def interrupt_soon() -> threading.Timer:
    """SIGINT to this process in a moment (Python turns it into KeyboardInterrupt)."""
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@pytest.mark.timeout(30)
def test_ctrl_c_interrupts_a_runtime_waiting_for_a_slot(tmp_path: Path) -> None:
    """Issue 17: `Runtime(...)` waiting for a free slot (up to acquire-timeout, here 120 s)
    must stop at Ctrl-C."""
    store = f"sqlite://{tmp_path / 'slots.db'}"
    holders = [cosid.Runtime(config(store, None, bits=1, owner_key=f"holder-{i}"))
               for i in range(2)]
    try:
        interrupt_soon()
        with pytest.raises(KeyboardInterrupt):
            cosid.Runtime(config(store, None, bits=1, acquire_timeout="120s"))
    finally:
        for h in holders:
            h.close()


@pytest.mark.timeout(30)
def test_ctrl_c_interrupts_a_batch_made_of_short_waits(tmp_path: Path) -> None:
    """Issue 32: with 1 sequence bit a layout issues 2 ids a millisecond, so `next_batch` of a
    million ids is 500,000 waits of at most 1 ms (each too short to be worth a helper thread).
    Ctrl-C must stop it, not wait for the batch's end (the test's 30 s timeout before)."""
    cfg = config(f"sqlite://{tmp_path / 'slots.db'}", None)
    cfg["cosid"]["snowflake"] = {
        "timestamp-bits": 41, "node-bits": 10, "sequence-bits": 1,
    }
    with cosid.Runtime(cfg) as rt:
        interrupt_soon()
        with pytest.raises(KeyboardInterrupt):
            rt.next_batch(1_000_000)
        assert rt.stats().ids_issued < 1_000_000
        rt.next()  # the runtime is still usable


@pytest.mark.timeout(30)
def test_ctrl_c_interrupts_a_long_wait_for_an_id(tmp_path: Path) -> None:
    """Issue 17: `next()` waiting for a renewal (the store is locked by another connection, the
    window ran out; max-wait 120 s) must stop at Ctrl-C."""
    path = tmp_path / "slots.db"
    cfg = config(f"sqlite://{path}", None, ttl="300ms", tolerance="50ms")
    cfg["cosid"]["max-wait"] = "120s"
    rt = cosid.Runtime(cfg)
    rt.next()
    # The lock is taken by another process: POSIX file locks belong to a process, so a second
    # SQLite library in this one (Python's sqlite3) would not block the store's.
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline() == b"locked\n"
        deadline = time.monotonic() + 20
        while rt.stats().ceiling_ms + 50 > time.time() * 1000:
            assert time.monotonic() < deadline, "the window never ran out"
            time.sleep(0.05)
        interrupt_soon()
        with pytest.raises(KeyboardInterrupt):
            rt.next()
    finally:
        locker.communicate(b"", timeout=30)  # the locker rolls back and exits
    try:
        rt.close()
    except cosid.CosIdError:
        pass  # the release may have found the window gone; the interrupt is what is tested


def test_a_host_calling_c_exit_without_python_atexit_releases_the_slot(tmp_path: Path) -> None:
    """uWSGI's master ends with the C library's exit() without running Python's atexit; the
    slot of a runtime still open must be released then too (a C-level exit handler)."""
    store = f"sqlite://{tmp_path / 'slots.db'}"
    cfg = config(store, None, bits=2, ttl="60s")
    program = (
        "import ctypes, json, sys, cosid\n"
        "rt = cosid.Runtime(json.loads(sys.argv[1]))\n"
        "rt.next()\n"
        "print(rt.slot, flush=True)\n"
        "ctypes.CDLL(None).exit(0)  # C exit: Python's atexit does not run\n"
    )
    proc = subprocess.run([sys.executable, "-c", program, json.dumps(cfg)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().isdigit()
    assert held_slots(store, "fork", bits=2) == 0


def test_a_server_re_raising_sigterm_after_its_shutdown_releases_the_slot(tmp_path: Path) -> None:
    """uvicorn (also as gunicorn's UvicornWorker) catches SIGTERM, shuts down, restores the
    handler it found (the default action) and raises the signal again: the process dies without
    Python's atexit. The slot of a runtime still open must be released then too. A signal
    raised while a handler is installed is left alone."""
    store = f"sqlite://{tmp_path / 'slots.db'}"
    cfg = config(store, None, bits=2, ttl="60s")
    program = (
        "import json, os, signal, sys, cosid\n"
        "original = signal.signal(signal.SIGTERM, lambda *_: None)  # the server's capture\n"
        "rt = cosid.Runtime(json.loads(sys.argv[1]))  # the app, imported by the server\n"
        "rt.next()\n"
        "signal.raise_signal(signal.SIGTERM)  # handled: nothing closes\n"
        "rt.next()\n"
        "print(rt.slot, flush=True)\n"
        "signal.signal(signal.SIGTERM, original)\n"
        "signal.raise_signal(signal.SIGTERM)\n"
        "print('still running', flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", program, json.dumps(cfg)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr)
    assert proc.stdout.strip().isdigit(), proc.stdout
    assert held_slots(store, "fork", bits=2) == 0
