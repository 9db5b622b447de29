"""Bad arguments get clear errors: TypeError for a wrong type, InvalidArgumentError (a
ValueError) or ConfigError (a ValueError) for a bad value. Never a crash or a silent default."""

from __future__ import annotations

import array
import pathlib
from typing import Any

import pytest

import cosid
from _support import lease_config


@pytest.mark.parametrize("n", [-1, -(10**30)])
def test_negative_batch_sizes(rt: cosid.Runtime, n: int) -> None:
    with pytest.raises(cosid.InvalidArgumentError, match="negative"):
        rt.next_batch(n)
    with pytest.raises(ValueError):
        rt.generator("g").next_batch(n)


@pytest.mark.parametrize("n", [cosid.MAX_BATCH + 1, 2**63, 10**30])
def test_huge_batch_sizes(rt: cosid.Runtime, n: int) -> None:
    with pytest.raises(cosid.InvalidArgumentError, match="too large.*next_into"):
        rt.next_batch(n)


@pytest.mark.parametrize("n", [1.5, 2.0, "3", None, True, [1], b"1"])
def test_batch_sizes_of_the_wrong_type(rt: cosid.Runtime, n: Any) -> None:
    with pytest.raises(TypeError, match="batch size must be an int"):
        rt.next_batch(n)


def test_an_index_like_batch_size_is_an_int(rt: cosid.Runtime) -> None:
    class Three:
        def __index__(self) -> int:
            return 3

    assert len(rt.next_batch(Three())) == 3  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "buffer, message",
    [
        ([0, 0], "got list"),
        (b"\0" * 8, "bytes"),
        (bytearray(8), "format 'B'"),
        (array.array("d", [0.0]), "format 'd'"),
        (array.array("I", [0, 0]), "4-byte items"),
        (memoryview(array.array("Q", [0, 0])).toreadonly(), "read-only|not writable"),
        (memoryview(array.array("Q", [0, 0, 0, 0]))[::2], "C-contiguous"),
        (None, "NoneType"),
    ],
)
def test_next_into_refuses_what_is_not_a_writable_u64_buffer(
    rt: cosid.Runtime, buffer: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=message) as info:
        rt.next_into(buffer)
    assert "array.array('Q')" in str(info.value)  # says what would work


def test_next_into_a_read_only_buffer_leaves_nothing_issued(rt: cosid.Runtime) -> None:
    with pytest.raises(TypeError):
        rt.next_into(memoryview(array.array("Q", [0])).toreadonly())
    assert rt.stats().ids_issued == 0


@pytest.mark.parametrize("bad", [-1, 2**64, -(2**70)])
def test_ids_out_of_range(rt: cosid.Runtime, bad: int) -> None:
    with pytest.raises(cosid.InvalidArgumentError, match="not an id"):
        rt.parse(bad)
    with pytest.raises(cosid.InvalidArgumentError, match="not an id"):
        cosid.to_base62(bad)


def test_an_id_wider_than_the_layout(rt: cosid.Runtime) -> None:
    with pytest.raises(cosid.InvalidArgumentError, match="wider than this 63-bit layout"):
        rt.parse(2**63)


@pytest.mark.parametrize("bad", [1.0, None, True, b"00000000000", [1]])
def test_ids_of_the_wrong_type(rt: cosid.Runtime, bad: Any) -> None:
    with pytest.raises(TypeError):
        rt.parse(bad)
    with pytest.raises(TypeError):
        cosid.to_base62(bad)


@pytest.mark.parametrize("bad", [5, None, b"00000000000"])
def test_from_base62_needs_a_str(bad: Any) -> None:
    with pytest.raises(TypeError, match="must be a str"):
        cosid.from_base62(bad)


@pytest.mark.parametrize("bad", ["", "a\nb", "x" * 200])
def test_bad_generator_names(rt: cosid.Runtime, bad: str) -> None:
    if bad == "":
        assert rt.generator(bad).name == ""  # the default generator
        return
    with pytest.raises(cosid.InvalidArgumentError, match="generator name"):
        rt.generator(bad)


def test_generator_name_of_the_wrong_type(rt: cosid.Runtime) -> None:
    with pytest.raises(TypeError):
        rt.generator(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("config", [42, 1.5, b"cosid: {}", ["cosid"], object()])
def test_config_of_the_wrong_type(config: Any) -> None:
    with pytest.raises(TypeError, match="config must be None, a YAML/JSON str, a dict, or a path"):
        cosid.Runtime(config)


def test_malformed_config_documents() -> None:
    for text in ["cosid: [", "{", "cosid:\n  namespace: [a, b]\n", "- just\n- a list\n"]:
        with pytest.raises(cosid.ConfigError):
            cosid.Runtime(text)


def test_a_one_line_str_that_names_no_file_says_so() -> None:
    with pytest.raises(cosid.ConfigError, match="names no existing file"):
        cosid.Runtime("/etc/no-such-cosid.yaml")


def test_a_missing_path_is_a_config_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(cosid.ConfigError, match="cannot read configuration file"):
        cosid.Runtime(tmp_path / "missing.yaml")


def test_config_dicts_with_bad_keys_and_values(memory_store: str) -> None:
    with pytest.raises(TypeError, match="configuration keys are str"):
        cosid.Runtime({"cosid": {1: "x"}})
    with pytest.raises(TypeError, match="configuration values are"):
        cosid.Runtime({"cosid": {"namespace": object()}})
    with pytest.raises(cosid.ConfigError, match="does not fit in 64 bits"):
        cosid.Runtime({"cosid": {"namespace": 2**70}})
    loop: dict[str, Any] = {}
    loop["cosid"] = loop
    with pytest.raises(cosid.ConfigError, match="nests more than"):
        cosid.Runtime(loop)
    import datetime

    with pytest.raises(cosid.ConfigError, match="no time zone"):
        cosid.Runtime({"cosid": {"machine": {"static": {
            "slot": 1, "not-before": datetime.datetime(2020, 1, 1)}}}})
    with pytest.raises(cosid.ConfigError, match="milliseconds"):
        cosid.Runtime(lease_config(memory_store, ttl=datetime.timedelta(microseconds=1500)))


def test_on_event_needs_a_callable(rt: cosid.Runtime, memory_store: str) -> None:
    with pytest.raises(TypeError, match="must be callable"):
        rt.on_event(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable"):
        cosid.Runtime(lease_config(memory_store), on_event="print")  # type: ignore[arg-type]


def test_runtime_cannot_be_pickled(rt: cosid.Runtime) -> None:
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(rt)
