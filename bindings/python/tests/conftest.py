"""Shared fixtures. Every test runs against the installed wheel (not the source folder), and no
test ever touches the user's real default store: XDG_STATE_HOME points at a temporary folder
before the first runtime is built (child processes inherit it)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

_STATE_HOME = tempfile.mkdtemp(prefix="cosid-py-state-")
os.environ["XDG_STATE_HOME"] = _STATE_HOME

# Helpers and the functions child processes run live in tests/_support.py, importable by the
# tests and by spawned children (which get the parent's sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cosid  # noqa: E402  (after XDG_STATE_HOME is set)
from _support import lease_config  # noqa: E402


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    cosid._shutdown()  # close what a failed test left open, before its files go
    shutil.rmtree(_STATE_HOME, ignore_errors=True)


@pytest.fixture
def memory_store() -> str:
    """A memory store no other test uses."""
    return f"memory:py-{uuid.uuid4().hex}"


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'slots.db'}"


@pytest.fixture
def rt(memory_store: str):
    """A runtime on a private memory store, closed after the test."""
    runtime = cosid.Runtime(lease_config(memory_store, bits=3))
    yield runtime
    runtime.close()


@pytest.fixture
def fast_rt(memory_store: str):
    """A runtime whose layout has 2^20 sequence numbers per millisecond, so big batches never
    wait for the next millisecond."""
    config = lease_config(memory_store, bits=2)
    config["cosid"]["snowflake"] = {"node-bits": 2, "sequence-bits": 20}
    runtime = cosid.Runtime(config)
    yield runtime
    runtime.close()
