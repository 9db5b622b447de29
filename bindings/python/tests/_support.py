"""Helpers for the tests, and functions run in child processes (importable by spawned children,
which get the parent's sys.path)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

import cosid


# bindings/python, where README.md is.
SOURCE_DIR = Path(__file__).resolve().parent.parent


def lease_config(store: str, namespace: str = "test", **lease: Any) -> dict[str, Any]:
    """A configuration dict for a leased slot on `store` (lease keys with '_' become '-')."""
    section: dict[str, Any] = {"store": store}
    section.update({k.replace("_", "-"): v for k, v in lease.items()})
    return {"cosid": {"namespace": namespace, "machine": {"lease": section}}}


# The parent's runtime, set before a fork so the child inherits it.
inherited: Optional[cosid.Runtime] = None


def issue_on_store(config: dict[str, Any], count: int) -> tuple[int, list[int]]:
    """Builds a runtime on `config`, issues `count` ids (singly and in batches), closes it."""
    with cosid.Runtime(config) as rt:
        slot = rt.slot
        assert slot is not None
        ids = [rt.next() for _ in range(count // 2)]
        ids += rt.next_batch(count - len(ids))
    return slot, ids


def forked_child(config: dict[str, Any], count: int, queue: Any) -> None:
    """In a child forked from a parent holding `inherited`: the parent's runtime must refuse,
    and a new runtime must work. Puts (error class name, status, slot, ids) on `queue`."""
    assert inherited is not None
    try:
        inherited.next()
        outcome = ("no error", "", -1, [])
    except cosid.CosIdError as e:
        slot, ids = issue_on_store(config, count)
        outcome = (type(e).__name__, e.status, slot, ids)
    queue.put(outcome)


def held_slots(store: str, namespace: str, bits: int, ttl: str = "60s") -> int:
    """How many of the namespace's 2**bits slots are held by a live lease right now: tries to
    take every slot with runtimes (owner keys of their own) that give up at once, and counts
    the ones that found no free slot. Everything it takes it releases. `ttl` is the
    namespace's (it records its ttl and refuses a runtime of another)."""
    probes = []
    held = 0
    try:
        for i in range(1 << bits):
            cfg = lease_config(store, namespace, bits=bits, owner_key=f"probe-{i}",
                               acquire_timeout="0s", ttl=ttl)
            try:
                probes.append(cosid.Runtime(cfg))
            except cosid.ExhaustedError:
                held += 1
    finally:
        for p in probes:
            p.close()
    return held


# The runtime of a pool worker: the inherited one (fork start method) or one made on first use.
_worker_rt: Optional[cosid.Runtime] = None


def pool_task(config: dict[str, Any], count: int) -> tuple[int, list[int]]:
    """A task of a multiprocessing pool: issues `count` ids with the process's runtime (the
    inherited `inherited` after a fork, else one built once per worker and never closed here:
    the worker's end releases it). Returns (slot, ids)."""
    global _worker_rt
    rt = inherited
    if rt is None:
        if _worker_rt is None:
            _worker_rt = cosid.Runtime(config)
        rt = _worker_rt
    ids = [rt.next() for _ in range(count)]
    slot = rt.slot
    assert slot is not None
    return slot, ids


# How long a child may take before the test calls it hung (a bound, not an expectation).
CHILD_DEADLINE = 60.0


class Child:
    """A forked child running `body()`; its JSON-able result comes back through a pipe."""

    def __init__(self, body: Callable[[], Any]) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 3
            try:
                os.close(read)
                try:
                    result: Any = {"ok": body()}
                except BaseException as e:  # noqa: BLE001  (reported to the parent)
                    result = {"error": type(e).__name__, "message": str(e),
                              "status": getattr(e, "status", None)}
                with os.fdopen(write, "wb") as f:
                    f.write(json.dumps(result).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self.pid = pid
        self.read = read

    def result(self) -> Any:
        chunks = []
        while chunk := os.read(self.read, 1 << 16):
            chunks.append(chunk)
        os.close(self.read)
        status = wait_bounded(self.pid)
        assert status == 0, f"child {self.pid} exited with status {status}"
        return json.loads(b"".join(chunks).decode())


def wait_bounded(pid: int, deadline: float = CHILD_DEADLINE) -> int:
    """Waits for `pid`; a child still running after `deadline` seconds is killed and reported."""
    end = time.monotonic() + deadline
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"child {pid} hung for {deadline}s and was killed")
        time.sleep(0.01)
