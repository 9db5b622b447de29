"""The installed wheel: what was imported, its typing marker, and the README's example."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import cosid
from _support import SOURCE_DIR


def readme_example() -> str:
    """The first python block after the README's "## Example" heading."""
    text = (SOURCE_DIR / "README.md").read_text()
    section = text.split("\n## Example\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md has no python example under ## Example"
    return match.group(1)


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    code = readme_example()
    assert len(code.strip().splitlines()) == 3
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, text, parts = done.stdout.strip().split(" ", 2)
    assert int(first) > 0 and cosid.from_base62(text) > int(first)
    assert parts.startswith("IdParts(id=")
    assert (tmp_path / "cosid" / "slots.db").is_file()  # the embedded default store


def test_cosid_is_imported_from_the_installed_wheel() -> None:
    package = Path(cosid.__file__).resolve().parent
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert package.parent == site, f"cosid imported from {package}, not {site}"
    assert not str(package).startswith(str(SOURCE_DIR))
    native = importlib.util.find_spec("cosid._cosid")
    assert native is not None and native.origin is not None
    assert native.origin.endswith(".abi3.so"), native.origin  # one wheel for CPython 3.9+
    for name in ("py.typed", "_cosid.pyi", "_errors.py", "__init__.py"):
        assert (package / name).is_file(), name
