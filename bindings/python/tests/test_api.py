"""The API of cosid.Runtime and cosid.Generator, on real stores."""

from __future__ import annotations

import array
import datetime
import json
import pathlib
import re
import sys
import threading

import pytest

import cosid
from _support import lease_config

BASE62 = re.compile(r"^[0-9A-Za-z]{11}$")


def test_next_issues_increasing_ids_on_the_bound_slot(rt: cosid.Runtime) -> None:
    ids = [rt.next() for _ in range(1000)]
    assert all(type(i) is int for i in ids)
    assert ids == sorted(set(ids))
    assert {rt.parse(i).slot for i in ids} == {rt.slot}


def test_next_batch_returns_a_list_of_increasing_ids(rt: cosid.Runtime) -> None:
    first = rt.next()
    batch = rt.next_batch(5000)  # more than one millisecond's 4096 sequence numbers
    assert type(batch) is list and len(batch) == 5000
    assert all(type(i) is int for i in batch)
    assert batch == sorted(set(batch)) and batch[0] > first
    assert rt.next() > batch[-1]
    assert rt.next_batch(0) == []
    assert rt.next_batch(1)[0] > 0


def test_next_into_fills_an_array_in_place(rt: cosid.Runtime) -> None:
    buf = array.array("Q", bytes(8 * 6000))
    before = rt.next()
    assert rt.next_into(buf) == 6000
    ids = buf.tolist()
    assert ids == sorted(set(ids)) and ids[0] > before
    assert rt.next() > ids[-1]


def test_next_into_takes_memoryviews_of_8_byte_ints(rt: cosid.Runtime) -> None:
    raw = bytearray(8 * 10)
    assert rt.next_into(memoryview(raw).cast("Q")) == 10
    ids = memoryview(raw).cast("Q").tolist()
    assert ids == sorted(set(ids)) and ids[0] > 0
    if array.array("L").itemsize == 8:
        longs = array.array("L", bytes(8 * 3))
        assert rt.next_into(memoryview(longs)) == 3 and longs[0] > ids[-1]
    signed = array.array("q", bytes(8 * 3))
    assert rt.next_into(signed) == 3 and signed[0] > ids[-1]
    # An odd offset into a byte buffer: the writes are unaligned, and still land.
    odd = bytearray(8 * 4 + 1)
    view = memoryview(odd)[1:].cast("Q")
    assert rt.next_into(view) == 4 and view[0] > 0
    assert rt.next_into(array.array("Q")) == 0


def test_next_into_fills_numpy_arrays() -> None:
    np = pytest.importorskip("numpy")
    with cosid.Runtime(lease_config("memory:py-numpy")) as rt:
        a = np.zeros(5000, dtype=np.uint64)
        assert rt.next_into(a) == 5000
        assert (np.diff(a.astype(np.int64)) > 0).all()
        grid = np.zeros((4, 8), dtype=np.int64)  # C-contiguous 2-D, signed: filled row by row
        assert rt.next_into(grid) == 32
        flat = grid.ravel()
        assert (np.diff(flat) > 0).all() and int(flat[0]) > int(a[-1])
        with pytest.raises(TypeError, match="C-contiguous"):
            rt.next_into(np.zeros(10, dtype=np.uint64)[::2])
        with pytest.raises(TypeError, match="format"):
            rt.next_into(np.zeros(10, dtype=np.float64))
        with pytest.raises(TypeError, match="format"):
            rt.next_into(np.zeros(10, dtype=np.uint32))
        assert len(rt.next_batch(np.int64(3))) == 3


def test_next_str_is_fixed_width_base62_in_id_order(rt: cosid.Runtime) -> None:
    texts = [rt.next_str() for _ in range(500)]
    assert all(BASE62.match(t) for t in texts)
    assert texts == sorted(texts)
    ids = [cosid.from_base62(t) for t in texts]
    assert ids == sorted(set(ids))
    assert [cosid.to_base62(i) for i in ids] == texts


def test_base62_round_trips_at_the_edges() -> None:
    assert cosid.to_base62(0) == "00000000000"
    assert cosid.to_base62(2**64 - 1) == "LygHa16AHYF"
    for n in (0, 1, 61, 62, 2**63 - 1, 2**64 - 1, 918649515580325888):
        assert cosid.from_base62(cosid.to_base62(n)) == n


def test_parse_takes_an_id_apart(rt: cosid.Runtime) -> None:
    id_ = rt.next()
    parts = rt.parse(id_)
    assert isinstance(parts, cosid.IdParts)
    assert parts.id == id_
    assert parts.slot == rt.slot
    assert parts.sequence >= 0
    layout = rt.layout
    expected_ms = layout.epoch_ms + (id_ >> (layout.node_bits + layout.sequence_bits))
    assert parts.timestamp_ms == expected_ms
    when = datetime.datetime.fromtimestamp(parts.timestamp_ms / 1000, tz=datetime.timezone.utc)
    assert parts.time == when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{parts.timestamp_ms % 1000:03d}Z"
    assert rt.parse(cosid.to_base62(id_)) == parts  # the next_str form parses too
    assert hash(rt.parse(id_)) == hash(parts)
    assert repr(parts).startswith(f"IdParts(id={id_}, timestamp_ms=")
    with pytest.raises(AttributeError):
        parts.slot = 3  # type: ignore[misc]


def test_named_generators_are_separate_id_spaces_on_the_same_slot(rt: cosid.Runtime) -> None:
    orders = rt.generator("orders")
    users = rt.generator("users")
    assert orders.name == "orders" and repr(orders) == "<cosid.Generator name=\"orders\">"
    a = [orders.next() for _ in range(100)] + orders.next_batch(100)
    assert a == sorted(set(a))
    b = users.next_batch(200)
    assert {rt.parse(i).slot for i in a + b} == {rt.slot}
    assert BASE62.match(orders.next_str())
    buf = array.array("Q", bytes(80))
    assert orders.next_into(buf) == 10 and buf[0] > a[-1]
    # The same name is the same generator: its ids keep increasing.
    assert rt.generator("orders").next() > buf[-1]
    # "" is the default generator.
    last = rt.next()
    assert rt.generator("").next() > last


def test_stats_count_ids_and_show_the_window(rt: cosid.Runtime) -> None:
    rt.next()
    rt.next_batch(99)
    rt.generator("g").next_batch(50)
    s = rt.stats()
    assert isinstance(s, cosid.Stats)
    assert s.bound and s.slot == rt.slot
    assert s.acquisitions == 1 and s.slots_lost == 0
    assert s.floor_ms < s.ceiling_ms
    assert 0 < s.ids_issued <= 150
    rt.close()
    assert rt.stats().ids_issued == 150  # exact once closed
    assert "ids_issued=150" in repr(rt.stats())


# The stats fields as the README documents them: the core's names, in its order, the same as the
# C struct's members (Node: their camelCase).
DOCUMENTED_STATS_FIELDS = (
    "ids_issued", "waits", "renewals", "renewal_failures", "acquisitions", "slots_lost",
    "clock_skew_events", "slot", "bound", "floor_ms", "ceiling_ms",
)


def test_stats_carry_exactly_the_core_fields(rt: cosid.Runtime) -> None:
    from cosid import _cosid

    assert _cosid._STATS_FIELDS == DOCUMENTED_STATS_FIELDS
    assert {n for n in dir(cosid.Stats) if not n.startswith("_")} == set(DOCUMENTED_STATS_FIELDS)
    s = rt.stats()
    shown = ", ".join(f"{n}={getattr(s, n)!r}" for n in DOCUMENTED_STATS_FIELDS)
    assert repr(s) == f"Stats({shown})"
    # The stub declares the same properties, in the same order.
    stub = (pathlib.Path(cosid.__file__).parent / "_cosid.pyi").read_text()
    body = stub.split("class Stats:")[1].split("\n@final")[0]
    assert tuple(re.findall(r"def (\w+)\(self\)", body)) == DOCUMENTED_STATS_FIELDS


def test_layout_describes_the_ids(memory_store: str) -> None:
    config = lease_config(memory_store)
    config["cosid"]["snowflake"] = {"timestamp-unit": "s", "timestamp-bits": 31,
                                    "node-bits": 10, "sequence-bits": 22}
    with cosid.Runtime(config) as rt:
        layout = rt.layout
        assert (layout.unit, layout.timestamp_bits, layout.node_bits, layout.sequence_bits) == (
            "s", 31, 10, 22)
        assert layout.epoch_ms == 1577203200000  # 2019-12-24T16:00:00Z, CosId's epoch
        assert layout.max_slot == 1023 and layout.max_sequence == 2**22 - 1
        assert layout.max_id == 2**63 - 1 and not layout.js_safe
        assert layout.runs_out_at_ms > layout.epoch_ms
        parts = rt.parse(rt.next())
        assert parts.timestamp_ms % 1000 == 0
    # The default layout; another namespace (a namespace keeps the layout it was made with).
    with cosid.Runtime(lease_config(memory_store, namespace="default-layout")) as rt:
        assert (rt.layout.timestamp_bits, rt.layout.node_bits, rt.layout.sequence_bits) == (
            41, 10, 12)


def test_events_reach_callbacks_with_their_fields(memory_store: str) -> None:
    seen: list[cosid.Event] = []
    later: list[cosid.Event] = []
    rt = cosid.Runtime(lease_config(memory_store, bits=2), on_event=seen.append)
    rt.on_event(later.append)
    slot = rt.slot
    rt.next()
    rt.close()
    acquired = [e for e in seen if e.kind == "slot_acquired"]
    assert len(acquired) == 1
    ev = acquired[0]
    assert ev.slot == slot and ev.fence is not None and ev.fence >= 1
    assert ev.floor_ms is not None and ev.ceiling_ms is not None and ev.floor_ms < ev.ceiling_ms
    assert ev.next_floor_ms is None and ev.reason is None and ev.error is None and ev.key is None
    assert f"slot {slot} acquired" in ev.message and str(ev) == ev.message
    released = [e for e in later if e.kind == "slot_released"]
    assert len(released) == 1 and released[0].slot == slot
    assert released[0].next_floor_ms is not None
    assert repr(released[0]).startswith('Event(kind="slot_released"')


# The event vocabulary as the README documents it: each kind and its fields. The same names as
# the C struct's members and the Node event's keys.
DOCUMENTED_EVENT_FIELDS = {
    "slot_acquired": ("slot", "fence", "floor_ms", "ceiling_ms"),
    "slot_lost": ("slot", "reason"),
    "duplicate_owner_key": ("slot", "key"),
    "clock_skew": ("skew_ms",),
    "renewal_failed": ("slot", "attempt", "error"),
    "store_reset": ("slot",),
    "acquire_failed": ("error",),
    "slot_released": ("slot", "next_floor_ms"),
    "window_ahead": ("slot", "floor_ms", "reason"),
    "store_unavailable": ("attempt", "error", "waited_ms", "timeout_ms"),
}


def set_fields(event: cosid.Event) -> set[str]:
    every = {f for fields in DOCUMENTED_EVENT_FIELDS.values() for f in fields}
    return {name for name in every if getattr(event, name) is not None}


def test_events_carry_exactly_the_core_vocabulary(memory_store: str) -> None:
    from cosid import _cosid

    # The documented table is the core's, and Event has exactly its fields besides kind, message.
    assert _cosid._EVENT_KINDS == DOCUMENTED_EVENT_FIELDS
    every = {f for fields in DOCUMENTED_EVENT_FIELDS.values() for f in fields}
    attributes = {n for n in dir(cosid.Event) if not n.startswith("_")}
    assert attributes == every | {"kind", "message"}
    # One event of every kind, converted as a callback gets it: exactly its kind's fields set.
    samples = _cosid._sample_events()
    assert [e.kind for e in samples] == list(DOCUMENTED_EVENT_FIELDS)
    for e in samples:
        assert set_fields(e) == set(DOCUMENTED_EVENT_FIELDS[e.kind]), e
        assert e.message
    # And the events a runtime raises.
    seen: list[cosid.Event] = []
    rt = cosid.Runtime(lease_config(memory_store, bits=2), on_event=seen.append)
    rt.next()
    rt.close()
    assert {"slot_acquired", "slot_released"} <= {e.kind for e in seen}
    for e in seen:
        assert set_fields(e) == set(DOCUMENTED_EVENT_FIELDS[e.kind]), e


def test_a_callback_may_use_and_close_its_runtime_on_the_keepers_thread(
    tmp_path: pathlib.Path,
) -> None:
    # A static slot whose state file cannot be written makes the keeper raise renewal_failed on
    # its own thread; the callback then puts the folder back, issues an id and closes the
    # runtime, whose release reaches the callback from inside that close.
    folder, away = tmp_path / "d", tmp_path / "d.away"
    config = {"cosid": {"machine": {"static": {
        "slot": 2, "ahead": "1s", "state-file": str(folder / "state"),
        "not-before": "2020-01-01T00:00:00Z"}}}}
    seen: list[tuple[str, bool, int]] = []
    done = threading.Event()
    state: dict[str, object] = {"depth": 0}

    def on_event(e: cosid.Event) -> None:
        on_main = threading.current_thread() is threading.main_thread()
        seen.append((e.kind, on_main, int(state["depth"])))  # type: ignore[call-overload]
        if e.kind != "renewal_failed" or "rt" not in state or done.is_set():
            return
        folder.unlink()
        away.rename(folder)
        rt = state.pop("rt")
        assert isinstance(rt, cosid.Runtime)
        state["depth"] = 1
        state["id"] = rt.next()
        state["bound"] = rt.stats().bound
        rt.close()
        state["depth"] = 0
        state["closed"] = rt.closed
        done.set()

    rt = cosid.Runtime(config, on_event=on_event)
    state["rt"] = rt
    assert rt.next() > 0
    folder.rename(away)
    folder.write_text("not a folder")
    assert done.wait(20), seen
    assert state["id"] and state["bound"] and state["closed"] and rt.closed
    assert ("renewal_failed", False, 0) in seen
    # The release came last, nested inside the callback's close, on the keeper's thread.
    assert seen[-1] == ("slot_released", False, 1), seen
    rt.close()  # idempotent


def test_a_raising_callback_goes_to_the_unraisable_hook_and_the_runtime_goes_on(
    memory_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    caught: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", caught.append)

    def explode(event: cosid.Event) -> None:
        raise RuntimeError(f"callback failed on {event.kind}")

    rt = cosid.Runtime(lease_config(memory_store), on_event=explode)
    assert rt.next() > 0
    rt.close()
    assert len(caught) == 2  # slot_acquired, slot_released
    first = caught[0]
    assert isinstance(first.exc_value, RuntimeError)  # type: ignore[attr-defined]
    assert "slot_acquired" in str(first.exc_value)  # type: ignore[attr-defined]
    assert first.object is explode  # type: ignore[attr-defined]


def test_context_manager_closes_and_close_is_idempotent(memory_store: str) -> None:
    with cosid.Runtime(lease_config(memory_store)) as rt:
        assert isinstance(rt, cosid.Runtime) and not rt.closed
        rt.next()
    assert rt.closed
    rt.close()
    rt.close()
    with cosid.Runtime(lease_config(memory_store)) as rt2:
        rt2.close()  # closing inside the block is fine too
    # The slot was released: a runtime on a one-slot namespace gets it at once.
    with cosid.Runtime(lease_config(memory_store, bits=0, namespace="one")) as a:
        a.next()
    with cosid.Runtime(lease_config(memory_store, bits=0, namespace="one",
                                    acquire_timeout="50ms")) as b:
        assert b.slot == 0


def test_context_manager_does_not_swallow_exceptions(memory_store: str) -> None:
    with pytest.raises(KeyError):
        with cosid.Runtime(lease_config(memory_store)) as rt:
            raise KeyError("x")
    assert rt.closed


def test_repr_says_namespace_slot_and_state(memory_store: str) -> None:
    rt = cosid.Runtime(lease_config(memory_store, namespace="orders", bits=0))
    assert repr(rt) == '<cosid.Runtime namespace="orders" slot=0 closed=False>'
    assert rt.namespace == "orders"
    rt.close()
    assert repr(rt).endswith("closed=True>")


YAML = """\
cosid:
  namespace: yaml
  machine:
    lease:
      store: {store}
      bits: 2
"""


def test_config_as_yaml_json_dict_path_and_pathlike(
    tmp_path: pathlib.Path, memory_store: str
) -> None:
    text = YAML.format(store=memory_store)
    file = tmp_path / "cosid.yaml"
    file.write_text(text)
    as_json = json.dumps(lease_config(memory_store, namespace="json", bits=2))
    for config, namespace in [
        (text, "yaml"),
        (as_json, "json"),
        (lease_config(memory_store, namespace="dict", bits=2), "dict"),
        (str(file), "yaml"),
        (file, "yaml"),
    ]:
        with cosid.Runtime(config) as rt:
            assert rt.namespace == namespace
            assert rt.next() > 0


def test_config_dict_values_may_be_paths_durations_and_aware_datetimes(
    tmp_path: pathlib.Path, memory_store: str
) -> None:
    config = lease_config(memory_store, ttl=datetime.timedelta(seconds=20))
    config["cosid"]["max-wait"] = datetime.timedelta(milliseconds=1500)
    with cosid.Runtime(config) as rt:
        assert rt.next() > 0
    static = {"cosid": {"machine": {"static": {
        "slot": 7,
        "state-file": tmp_path / "state",
        "not-before": datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc),
    }}}}
    with cosid.Runtime(static) as rt:
        assert rt.slot == 7 and rt.parse(rt.next()).slot == 7
    assert (tmp_path / "state").read_text().startswith("cosid-state 1 ")


def test_no_config_is_the_embedded_sqlite_store_under_xdg_state_home(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    with cosid.Runtime() as a, cosid.Runtime(None) as b:
        assert a.namespace == "default"
        assert a.slot != b.slot  # two runtimes on one host never share a slot
        assert a.next() != b.next()
    assert (tmp_path / "cosid" / "slots.db").is_file()


def test_a_sqlite_store_is_shared_by_runtimes(sqlite_store: str) -> None:
    with cosid.Runtime(lease_config(sqlite_store, bits=1)) as a:
        with cosid.Runtime(lease_config(sqlite_store, bits=1)) as b:
            assert {a.slot, b.slot} == {0, 1}
            ids = a.next_batch(1000) + b.next_batch(1000)
            assert len(set(ids)) == 2000


def test_module_exports_what_it_documents() -> None:
    assert set(cosid.__all__) <= set(dir(cosid))
    assert cosid.MAX_BATCH == 1 << 20
    assert re.match(r"^\d+\.\d+\.\d+", cosid.__version__)
    assert cosid.Runtime.__module__ == "cosid._cosid"


def test_dropping_the_last_reference_releases_the_slot(sqlite_store: str) -> None:
    events: list[str] = []
    rt = cosid.Runtime(lease_config(sqlite_store, bits=0), on_event=lambda e: events.append(e.kind))
    generator = rt.generator("g")
    generator.next()
    del rt  # the generator keeps the runtime alive
    assert generator.next() > 0 and "slot_released" not in events
    del generator  # now the runtime closes, running the callback on this thread
    assert events[-1] == "slot_released"
    with cosid.Runtime(lease_config(sqlite_store, bits=0, acquire_timeout="100ms")) as again:
        assert again.slot == 0


def test_dropping_the_last_reference_while_the_keeper_runs_a_callback_does_not_deadlock(
    sqlite_store: str, tmp_path: pathlib.Path
) -> None:
    # The keeper thread is inside a Python callback (which waits for the GIL once its sleep
    # ends) when the main thread drops the runtime's last reference. The close that follows joins
    # the keeper thread: holding the GIL across that join, the two would wait for each other for
    # good. In a child process, so a deadlock fails this test by its timeout instead of hanging
    # pytest (whose own timeout needs the GIL too).
    import os
    import subprocess

    config = lease_config(sqlite_store, bits=0, ttl="1s")
    # Another process holds the store's write lock (in this one it would not: the lock is the
    # process's, shared by every copy of SQLite in it), so the next renewal fails
    # (renewal_failed, on the keeper's thread) after the store's busy timeout.
    locker = (
        "import sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    script = (
        "import cosid, subprocess, sys, threading, time\n"
        "armed, in_callback = threading.Event(), threading.Event()\n"
        "def on_event(event):\n"
        "    if not armed.is_set() or in_callback.is_set():\n"
        "        return\n"
        "    assert threading.current_thread() is not threading.main_thread(), event\n"
        "    in_callback.set()\n"
        "    time.sleep(0.5)  # lets go of the GIL; the main thread drops the runtime meanwhile\n"
        f"rt = cosid.Runtime({config!r}, on_event=on_event)\n"
        "rt.next()\n"
        f"locker = subprocess.Popen([sys.executable, '-c', {locker!r}, "
        f"{sqlite_store[len('sqlite://'):]!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE, "
        "text=True)\n"
        "assert locker.stdout.readline() == 'locked\\n'\n"
        "armed.set()\n"
        "assert in_callback.wait(30), 'no event on the keeper thread'\n"
        "locker.communicate('go\\n')\n"
        "del rt\n"
        "print('dropped', flush=True)\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail("dropping the runtime while the keeper ran a callback deadlocked")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["dropped"]


def test_interpreter_exit_closes_open_runtimes_and_releases_their_slots(
    sqlite_store: str, tmp_path: pathlib.Path
) -> None:
    import os
    import subprocess

    config = lease_config(sqlite_store, bits=0)
    script = (
        "import cosid, sys\n"
        f"rt = cosid.Runtime({config!r}, on_event=lambda e: print(e.kind, flush=True))\n"
        "rt.next()\n"
        "sys.modules['__main__'].keep = rt  # still referenced at exit, never closed\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["slot_acquired", "slot_released"]
    assert done.stderr == ""
    with cosid.Runtime(lease_config(sqlite_store, bits=0, acquire_timeout="100ms")) as again:
        assert again.slot == 0
