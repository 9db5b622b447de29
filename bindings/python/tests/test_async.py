"""The ..._async id methods: the fast path without a loop round trip, waits off the event loop
(a real redis-server frozen with SIGSTOP), errors at the await as the synchronous methods'
classes, cancellation."""

from __future__ import annotations

import array
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import cosid
from _support import lease_config


def test_an_available_id_is_returned_by_the_first_step_without_a_loop(rt: cosid.Runtime) -> None:
    # The fast path makes no future and needs no event loop: the coroutine's first step returns
    # the id.
    for aw in (rt.next_async(), rt.next_str_async(), rt.next_batch_async(3)):
        with pytest.raises(StopIteration) as done:
            aw.send(None)
        value = done.value.value
        assert isinstance(value, (int, str, list)) and value not in (0, "", [])


def test_every_async_method_issues_unique_increasing_ids(rt: cosid.Runtime) -> None:
    orders = rt.generator("orders")

    async def main() -> list[Any]:
        buf = array.array("Q", [0] * 500)
        got = await asyncio.gather(
            rt.next_async(), rt.next_batch_async(1_000), rt.next_str_async(),
            rt.next_into_async(buf), orders.next_async(), orders.next_batch_async(10),
            orders.next_str_async(), asyncio.create_task(rt.next_async()))
        return [*got, list(buf)]

    one, batch, text, count, o_one, o_batch, o_text, task_id, filled = asyncio.run(main())
    assert count == 500 and 0 not in filled
    ids = [one, *batch, cosid.from_base62(text), *filled, task_id]
    assert len(set(ids)) == len(ids)
    assert batch == sorted(batch) and filled == sorted(filled)
    assert len({o_one, *o_batch, cosid.from_base62(o_text)}) == 12
    assert isinstance(text, str) and len(text) == 11


def test_a_batch_longer_than_a_millisecond_of_sequence_waits_off_the_loop(
        rt: cosid.Runtime) -> None:
    # 2^12 ids per millisecond in the default layout: 100,000 need about 25 time units, so the
    # batch waits, on the generator's waiting thread; the loop keeps running meanwhile.
    async def main() -> tuple[list[int], int]:
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        ids = await rt.next_batch_async(100_000)
        during = ticks - before
        done = True
        await t
        return ids, during

    ids, during = asyncio.run(main())
    assert len(ids) == 100_000 and len(set(ids)) == 100_000 and ids == sorted(ids)
    assert during > 0, "the event loop did not run while the batch waited"


def test_errors_arrive_at_the_await_as_the_synchronous_classes(rt: cosid.Runtime) -> None:
    async def main() -> None:
        bad = rt.next_batch_async(-1)  # no error yet: raised at the await
        with pytest.raises(cosid.InvalidArgumentError, match="negative"):
            await bad
        with pytest.raises(TypeError, match="bool"):
            await rt.next_batch_async(True)
        with pytest.raises(TypeError, match="next_into needs"):
            await rt.next_into_async(bytearray(8))
        aw = rt.next_async()
        await aw
        with pytest.raises(RuntimeError, match="cannot reuse"):
            await aw
        rt.close()
        with pytest.raises(cosid.ClosedError):
            await rt.next_async()

    asyncio.run(main())


def test_a_task_can_be_created_from_the_awaitable(rt: cosid.Runtime) -> None:
    coro = rt.next_async()
    assert asyncio.iscoroutine(coro)
    coro.close()

    async def main() -> int:
        return await asyncio.wait_for(asyncio.create_task(rt.next_async()), timeout=60)

    assert isinstance(asyncio.run(main()), int)


# --- a frozen store ----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """A redis-server of this test's own (it is frozen with SIGSTOP), as (url, process)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (Debian: apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("redis-server did not start within 30s")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}", proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=30)


def test_while_the_store_is_frozen_the_loop_keeps_running_and_the_error_class_is_the_same(
        redis_server: tuple[str, subprocess.Popen]) -> None:
    url, server = redis_server
    config = lease_config(url, f"py-{uuid.uuid4().hex[:12]}", bits=2, ttl="1s")
    config["cosid"]["max-wait"] = "500ms"
    rt = cosid.Runtime(config)

    async def main() -> dict[str, Any]:
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        assert isinstance(await rt.next_async(), int)
        os.kill(server.pid, signal.SIGSTOP)
        # Ids flow until the window's ceiling passes; then a call waits for a renewal that
        # cannot come, for max-wait, and fails.
        while True:
            before = ticks
            try:
                await rt.next_async()
            except cosid.CosIdError as e:
                error, during = e, ticks - before
                break
            await asyncio.sleep(0.001)
        # A cancelled wait: the task ends with CancelledError; what the waiting thread issues
        # for it later is dropped.
        waiting = asyncio.create_task(rt.next_async())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # Several calls waiting at once fail together, with the same class.
        buf = array.array("Q", [0] * 4)
        together = await asyncio.gather(
            rt.next_async(), rt.next_batch_async(5), rt.next_str_async(),
            rt.next_into_async(buf), return_exceptions=True)
        # The synchronous call, in the same state, blocks the loop: the ticker cannot run.
        before = ticks
        try:
            rt.next()
            sync_error: BaseException | None = None
        except cosid.CosIdError as e:
            sync_error = e
        blocked = ticks - before
        done = True
        await t
        return {"error": error, "during": during, "together": together, "buf": list(buf),
                "sync_error": sync_error, "blocked": blocked}

    try:
        r = asyncio.run(main())
    finally:
        server.send_signal(signal.SIGCONT)
        rt.close()
    assert r["during"] > 0, "the event loop did not run while next_async waited"
    assert isinstance(r["error"], cosid.WindowClosedError), r["error"]
    assert r["error"].status == "COSID_ERR_WINDOW_CLOSED"
    assert [type(e) for e in r["together"]] == [cosid.WindowClosedError] * 4, r["together"]
    assert r["buf"] == [0] * 4  # all or nothing
    assert type(r["sync_error"]) is cosid.WindowClosedError
    assert r["blocked"] == 0
