"""Every exception class: its place in the hierarchy, its C API status, and a real way to make
it happen (all but SlotLostError, which needs a store that loses a live lease; its mapping is
checked through the same code path as every other kind)."""

from __future__ import annotations

import array
import pathlib
import shutil
import time

import pytest

import cosid
from _support import Child, lease_config

# core kind name -> (class, C API status name)
EXPECTED = {
    "config": (cosid.ConfigError, "COSID_ERR_CONFIG"),
    "store": (cosid.StoreError, "COSID_ERR_STORE"),
    "window_closed": (cosid.WindowClosedError, "COSID_ERR_WINDOW_CLOSED"),
    "slot_lost": (cosid.SlotLostError, "COSID_ERR_SLOT_LOST"),
    "clock_behind": (cosid.ClockBehindError, "COSID_ERR_CLOCK_BEHIND"),
    "timeout": (cosid.WaitTimeoutError, "COSID_ERR_TIMEOUT"),
    "closed": (cosid.ClosedError, "COSID_ERR_CLOSED"),
    "forked": (cosid.ForkedError, "COSID_ERR_FORKED"),
    "invalid_argument": (cosid.InvalidArgumentError, "COSID_ERR_INVALID_ARGUMENT"),
    "exhausted": (cosid.ExhaustedError, "COSID_ERR_EXHAUSTED"),
    "namespace_mismatch": (cosid.NamespaceMismatchError, "COSID_ERR_NAMESPACE_MISMATCH"),
    "state_file": (cosid.StateFileError, "COSID_ERR_STATE_FILE"),
}


def test_every_core_error_kind_has_its_own_class_and_status() -> None:
    from cosid import _cosid

    assert sorted(_cosid._ERROR_KINDS) == sorted(EXPECTED), "a core kind without a class"
    classes = set()
    for kind, (cls, status) in EXPECTED.items():
        err = _cosid._error_for_kind(kind, f"a {kind} error")
        assert type(err) is cls
        assert isinstance(err, cosid.CosIdError)
        assert err.status == cls.status == status == _cosid._status_for_kind(kind)  # type: ignore[attr-defined]
        assert err.kind == kind  # type: ignore[attr-defined]
        assert str(err) == f"a {kind} error"
        assert cls.__module__ == "cosid" and getattr(cosid, cls.__name__) is cls
        classes.add(cls)
    assert len(classes) == len(EXPECTED)
    # The base class names no status, as the C API names a value that is none.
    assert (cosid.CosIdError.status, cosid.CosIdError.kind) == ("COSID_UNKNOWN_STATUS", "unknown")


def test_value_and_timeout_errors_are_also_builtin_classes() -> None:
    assert issubclass(cosid.InvalidArgumentError, ValueError)
    assert issubclass(cosid.ConfigError, ValueError)
    assert issubclass(cosid.WaitTimeoutError, TimeoutError)
    assert cosid.WaitTimeoutError is not TimeoutError
    for cls, _ in EXPECTED.values():
        assert issubclass(cls, cosid.CosIdError) and issubclass(cls, Exception)


def test_closed_after_close(memory_store: str) -> None:
    rt = cosid.Runtime(lease_config(memory_store))
    orders = rt.generator("orders")
    rt.close()
    calls = [
        rt.next,
        lambda: rt.next_batch(3),
        lambda: rt.next_into(array.array("Q", bytes(8))),
        rt.next_str,
        lambda: rt.generator("new"),
        orders.next,
        lambda: orders.next_batch(2),
    ]
    for call in calls:
        with pytest.raises(cosid.ClosedError, match="closed") as info:
            call()
        assert info.value.status == "COSID_ERR_CLOSED"


def test_config_errors_name_the_problem(memory_store: str) -> None:
    with pytest.raises(cosid.ConfigError, match="not valid YAML") as info:
        cosid.Runtime("cosid: [unclosed\n")
    assert info.value.status == "COSID_ERR_CONFIG"
    with pytest.raises(cosid.ConfigError, match="did you mean 'namespace'"):
        cosid.Runtime({"cosid": {"namespce": "x"}})
    with pytest.raises(cosid.ConfigError, match="ttl"):
        cosid.Runtime(lease_config(memory_store, ttl="soon"))
    with pytest.raises(cosid.ConfigError, match="no top-level 'cosid' key"):
        cosid.Runtime({"other": 1})
    with pytest.raises(ValueError):  # a ConfigError is a ValueError
        cosid.Runtime(lease_config("nosuchscheme://x"))


def test_namespace_mismatch_on_one_sqlite_file(sqlite_store: str) -> None:
    with cosid.Runtime(lease_config(sqlite_store, tolerance="1s")):
        with pytest.raises(cosid.NamespaceMismatchError, match="tolerance") as info:
            cosid.Runtime(lease_config(sqlite_store, tolerance="2s"))
    assert info.value.status == "COSID_ERR_NAMESPACE_MISMATCH"


def test_exhausted_when_the_only_slot_is_held(sqlite_store: str) -> None:
    with cosid.Runtime(lease_config(sqlite_store, bits=0)):
        with pytest.raises(cosid.ExhaustedError, match="held by live leases") as info:
            cosid.Runtime(lease_config(sqlite_store, bits=0, acquire_timeout="100ms"))
    assert info.value.status == "COSID_ERR_EXHAUSTED"


def test_store_error_when_the_sqlite_file_cannot_be_created() -> None:
    with pytest.raises(cosid.StoreError, match="/proc/x") as info:
        cosid.Runtime(lease_config("sqlite:///proc/x/slots.db"))
    assert info.value.status == "COSID_ERR_STORE"


def test_invalid_argument_for_a_bad_id_string(rt: cosid.Runtime) -> None:
    for bad in ["", "abc", "!!!!!!!!!!!", "zzzzzzzzzzz", "00000000000 "]:
        with pytest.raises(cosid.InvalidArgumentError, match="base-62") as info:
            cosid.from_base62(bad)
        assert info.value.status == "COSID_ERR_INVALID_ARGUMENT"
        with pytest.raises(cosid.InvalidArgumentError):
            rt.parse(bad)


def test_wait_timeout_when_a_batch_outruns_the_sequence_with_no_wait_allowed(
    memory_store: str,
) -> None:
    config = lease_config(memory_store)
    config["cosid"]["max-wait"] = "0"
    config["cosid"]["snowflake"] = {"sequence-bits": 1}  # 2 ids per millisecond
    with cosid.Runtime(config) as rt:
        with pytest.raises(cosid.WaitTimeoutError, match="next time unit") as info:
            rt.next_batch(1000)
        assert info.value.status == "COSID_ERR_TIMEOUT"
        with pytest.raises(TimeoutError):
            rt.next_batch(1000)


def test_clock_behind_when_the_window_starts_in_the_future() -> None:
    config = {"cosid": {"max-wait": "10ms", "machine": {"static": {
        "slot": 3, "not-before": "2080-01-01T00:00:00Z"}}}}
    with cosid.Runtime(config) as rt:
        with pytest.raises(cosid.ClockBehindError, match="behind") as info:
            rt.next()
        assert info.value.status == "COSID_ERR_CLOCK_BEHIND"


def test_state_file_error_for_a_corrupt_state_file(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    state.write_text("garbage\n")
    config = {"cosid": {"machine": {"static": {"slot": 1, "state-file": str(state)}}}}
    with pytest.raises(cosid.StateFileError, match="corrupt") as info:
        cosid.Runtime(config)
    assert info.value.status == "COSID_ERR_STATE_FILE"


def test_window_closed_when_the_ceiling_cannot_be_extended(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    config = {"cosid": {"max-wait": "10ms", "machine": {"static": {
        "slot": 1, "ahead": "100ms", "state-file": str(folder / "state")}}}}
    failures: list[cosid.Event] = []
    rt = cosid.Runtime(config, on_event=lambda e: failures.append(e)
                       if e.kind == "renewal_failed" else None)
    assert rt.next() > 0
    # From now on no ceiling can be written durably, so none is granted: the window ends at
    # most `ahead` after the last successful write.
    shutil.rmtree(folder)
    folder.write_text("not a folder")
    time.sleep(0.4)
    with pytest.raises(cosid.WindowClosedError, match="ceiling") as info:
        rt.next()
    assert info.value.status == "COSID_ERR_WINDOW_CLOSED"
    assert failures and failures[0].error is not None
    # Releasing writes the last timestamp to the state file, which cannot be written.
    with pytest.raises(cosid.StateFileError):
        rt.close()
    assert rt.closed


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_gets_forked_error(memory_store: str) -> None:
    rt = cosid.Runtime(lease_config(memory_store))
    rt.next()
    r = Child(rt.next).result()
    assert (r.get("error"), r.get("status")) == ("ForkedError", "COSID_ERR_FORKED"), r
    assert rt.next() > 0  # the parent is untouched
    rt.close()


def test_a_dict_value_is_taken_literally(memory_store: str) -> None:
    """${VAR} expands in configuration text and files only: a dict's "${HOME}" is the text
    "${HOME}" (here refused as a namespace for its braces), never the home directory."""
    with pytest.raises(cosid.ConfigError) as info:
        cosid.Runtime(lease_config(memory_store, namespace="${HOME}"))
    assert "namespace '${HOME}'" in str(info.value)


def test_a_store_url_passed_as_the_configuration_is_not_echoed() -> None:
    with pytest.raises(cosid.ConfigError) as info:
        cosid.Runtime("redis://:S3CRETPW@db.example")
    assert "S3CRETPW" not in str(info.value)
    assert "names no existing file" in str(info.value)
