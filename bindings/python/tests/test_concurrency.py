"""Many threads on one runtime, many processes on one SQLite store, fork safety, and the GIL
released while a call waits."""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any, Callable

import pytest

import _support
import cosid
from _support import Child, lease_config

FORK_WARNING = "ignore:This process .* is multi-threaded:DeprecationWarning"


def run_threads(count: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(count)

    def body(i: int) -> None:
        barrier.wait()
        target(i)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_eight_threads_share_one_runtime_with_no_duplicate(sqlite_store: str) -> None:
    results: list[list[int]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    with cosid.Runtime(lease_config(sqlite_store)) as rt:
        orders = rt.generator("orders")

        def work(i: int) -> None:
            try:
                mine = results[i]
                for _ in range(2000):
                    mine.append(rt.next())
                mine.extend(rt.next_batch(3000))
                mine.append(cosid.from_base62(rt.next_str()))
                for _ in range(100):
                    orders.next()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        run_threads(8, work)
        assert rt.stats().ids_issued >= 8 * 5001
    assert not errors
    for mine in results:
        assert mine == sorted(mine) and len(mine) == 5001  # each thread sees increasing ids
    every = [i for mine in results for i in mine]
    assert len(every) == len(set(every)) == 8 * 5001


def test_eight_spawned_processes_on_one_sqlite_store_with_no_duplicate(sqlite_store: str) -> None:
    config = lease_config(sqlite_store, bits=4)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(8) as pool:
        results = pool.starmap(_support.issue_on_store, [(config, 4000)] * 8)
    ids = [i for _, mine in results for i in mine]
    assert len(ids) == 8 * 4000
    assert len(set(ids)) == len(ids), "duplicate ids across processes"
    # Processes alive at once held distinct slots; every id carries its process's slot.
    with cosid.Runtime(config) as rt:
        for slot, mine in results:
            assert {rt.parse(i).slot for i in mine[:10] + mine[-10:]} == {slot}


@pytest.mark.filterwarnings(FORK_WARNING)
def test_fork_child_refuses_the_parents_runtime_and_builds_its_own(sqlite_store: str) -> None:
    # The `fail` fork policy (the default, `new-slot`, is tested in test_fork.py).
    config = lease_config(sqlite_store, bits=3)
    config["cosid"]["fork"] = "fail"
    rt = cosid.Runtime(config)
    parent_ids = rt.next_batch(100)

    def child() -> Any:
        with pytest.raises(cosid.ForkedError):
            rt.next()
        with cosid.Runtime(config) as own:
            return {"slot": own.slot, "ids": own.next_batch(100)}

    r = Child(child).result()
    assert "ok" in r, r
    child_slot, child_ids = r["ok"]["slot"], r["ok"]["ids"]
    assert child_slot != rt.slot  # the parent still holds its slot
    more = rt.next_batch(100)  # and keeps issuing with it
    everything = parent_ids + more + child_ids
    assert len(set(everything)) == 300
    rt.close()


@pytest.mark.filterwarnings(FORK_WARNING)
def test_multiprocessing_fork_children_refuse_the_inherited_runtime(sqlite_store: str) -> None:
    config = lease_config(sqlite_store, bits=3)
    config["cosid"]["fork"] = "fail"  # the default, new-slot, is tested in test_fork.py
    ctx = multiprocessing.get_context("fork")
    queue: Any = ctx.Queue()
    with cosid.Runtime(config) as rt:
        _support.inherited = rt
        try:
            parent_ids = rt.next_batch(1000)
            children = [ctx.Process(target=_support.forked_child, args=(config, 1000, queue))
                        for _ in range(3)]
            for c in children:
                c.start()
            outcomes = [queue.get(timeout=60) for _ in children]
            for c in children:
                c.join(60)
                assert c.exitcode == 0
            parent_ids += rt.next_batch(1000)
            parent_slot = rt.slot
        finally:
            _support.inherited = None
    ids = list(parent_ids)
    for name, status, slot, child_ids in outcomes:
        assert (name, status) == ("ForkedError", "COSID_ERR_FORKED")
        assert slot != parent_slot
        ids += child_ids
    assert len(ids) == len(set(ids)) == 2000 + 3 * 1000


def check_the_gil_is_released_while(call: Callable[[], object],
                                    raises: type[BaseException]) -> None:
    """Runs `call` (which waits, then raises `raises`) in a thread, and this thread's Python code
    while it waits: were the GIL held for the whole wait, this loop could not run until the wait
    had ended."""
    entered = threading.Event()
    outcome: list[BaseException] = []

    def wait() -> None:
        entered.set()
        try:
            call()
        except raises as e:
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    entered.wait()
    ran_while_waiting = 0
    while t.is_alive() and ran_while_waiting < 200:
        ran_while_waiting += 1
        time.sleep(0.001)
    assert ran_while_waiting == 200 and t.is_alive()
    t.join()
    assert len(outcome) == 1


def test_a_waiting_call_releases_the_gil() -> None:
    # A static slot whose window starts in 2080: next() waits (up to max-wait) for the clock.
    config = {"cosid": {"max-wait": "3s", "machine": {"static": {
        "slot": 2, "not-before": "2080-01-01T00:00:00Z"}}}}
    with cosid.Runtime(config) as rt:
        check_the_gil_is_released_while(rt.next, cosid.ClockBehindError)


def test_building_a_runtime_releases_the_gil(sqlite_store: str) -> None:
    # The only slot is held, so the second runtime retries for acquire-timeout before failing.
    with cosid.Runtime(lease_config(sqlite_store, bits=0)):
        check_the_gil_is_released_while(
            lambda: cosid.Runtime(lease_config(sqlite_store, bits=0, acquire_timeout="3s")),
            cosid.ExhaustedError)
