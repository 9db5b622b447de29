"""The installed wheel reaches every store: Redis, PostgreSQL, etcd and MariaDB servers started for
the run (scripts/test-python runs pytest under scripts/with-test-servers, which sets
COSID_TEST_*_URL).
A test whose server is not named fails: a store test is never skipped."""

from __future__ import annotations

import multiprocessing
import os
import uuid

import pytest

import cosid
from _support import issue_on_store, lease_config

KINDS = ["redis", "postgres", "etcd", "mysql"]


def store_url(kind: str) -> str:
    var = f"COSID_TEST_{kind.upper()}_URL"
    url = os.environ.get(var, "").strip()
    if not url:
        pytest.fail(
            f"{var} is not set: run these tests through scripts/test-python (it starts the "
            f"servers), or with scripts/with-test-servers {kind} pytest ..., or point {var} at "
            "a server the tests may use"
        )
    return url


def namespace() -> str:
    return f"py-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("kind", KINDS)
def test_runtimes_on_one_namespace_hold_different_slots_and_issue_disjoint_ids(kind: str) -> None:
    url = store_url(kind)
    ns = namespace()
    a = cosid.Runtime(lease_config(url, ns, bits=4))
    b = cosid.Runtime(lease_config(url, ns, bits=4))
    try:
        assert a.slot is not None and b.slot is not None
        assert a.slot != b.slot
        ids_a = a.next_batch(5_000) + [a.next() for _ in range(1_000)]
        ids_b = b.next_batch(5_000) + [b.next() for _ in range(1_000)]
        assert ids_a == sorted(ids_a) and ids_b == sorted(ids_b)
        assert len(set(ids_a) | set(ids_b)) == len(ids_a) + len(ids_b)
        assert {a.parse(i).slot for i in ids_a} == {a.slot}
        assert {b.parse(i).slot for i in ids_b} == {b.slot}
        assert a.stats().bound and a.stats().ceiling_ms > a.stats().floor_ms
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_released_slot_is_taken_again_by_the_next_runtime(kind: str) -> None:
    url = store_url(kind)
    ns = namespace()
    # One slot only (bits 0): the second runtime can start only because close() released it.
    with cosid.Runtime(lease_config(url, ns, bits=0)) as first:
        last = first.next()
    with cosid.Runtime(lease_config(url, ns, bits=0, acquire_timeout="5s")) as second:
        assert second.slot == 0
        assert second.next() > last


@pytest.mark.parametrize("kind", KINDS)
def test_processes_on_one_namespace_never_share_an_id(kind: str) -> None:
    url = store_url(kind)
    config = lease_config(url, namespace(), bits=4)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        results = pool.starmap(issue_on_store, [(config, 4_000)] * 3)
    slots = [slot for slot, _ in results]
    ids = [i for _, batch in results for i in batch]
    assert len(ids) == 12_000
    assert len(set(ids)) == len(ids)
    # Each process issued on its own slot while it held it (slots may be reused after a
    # release, so the ids, not the slot numbers, carry the proof).
    assert all(0 <= s < 16 for s in slots)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1",
        "postgres://cosid@127.0.0.1:1/cosid",
        "etcd://127.0.0.1:1",
        "mysql://cosid@127.0.0.1:1/cosid",
    ],
)
def test_an_unreachable_store_is_a_store_error_naming_it(url: str) -> None:
    """The wheel carries every store client: an unreachable server is a StoreError (or a timeout)
    naming the address, never a ConfigError saying the build lacks the store."""
    with pytest.raises((cosid.StoreError, cosid.WaitTimeoutError)) as info:
        cosid.Runtime(lease_config(url, namespace(), acquire_timeout="300ms"))
    assert "127.0.0.1:1" in str(info.value)
    assert "feature" not in str(info.value)
