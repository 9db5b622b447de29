"""cosid's Python binding against its peers and the physical floor, in one run.

Run by scripts/bench-python (which builds the wheel and installs the peers):
    python bench.py [--quick]

Every figure is the best of N timeit-style repeats of a burst of calls, in ns per call (or per
id for batches). The best of many short bursts is the cost of the call itself, undisturbed by
other processes on a shared machine; the median is printed beside it.

A cosid slot with the default layout (12 sequence bits) issues at most 4096 ids per
millisecond, so a loop that asks faster than that waits for the next millisecond: that cap is
the layout's, measured apart as "sustained". The per-call rows use a layout with 20 sequence
bits so that they measure the binding, not the clock.
"""

from __future__ import annotations

import argparse
import array
import itertools
import os
import platform
import statistics
import sys
import tempfile
import timeit
import uuid
from typing import Callable

import cosid

try:
    import uuid_utils
except ImportError:  # pragma: no cover - reported in the table
    uuid_utils = None
try:
    from snowflake import SnowflakeGenerator
except ImportError:  # pragma: no cover
    SnowflakeGenerator = None


def measure(fn: Callable[[], object], number: int, repeat: int) -> tuple[float, float]:
    """(best, median) ns per call of `fn` over `repeat` bursts of `number` calls."""
    timer = timeit.Timer("f()", globals={"f": fn})
    timer.timeit(number)  # warm up
    runs = [t / number * 1e9 for t in timer.repeat(repeat=repeat, number=number)]
    return min(runs), statistics.median(runs)


def config(store: str, **snowflake: int) -> dict:
    doc: dict = {"cosid": {"namespace": "bench",
                           "machine": {"lease": {"store": store, "bits": 2}}}}
    if snowflake:
        doc["cosid"]["snowflake"] = {k.replace("_", "-"): v for k, v in snowflake.items()}
    return doc


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args()
    repeat = 20 if args.quick else 200
    batch_repeat = 10 if args.quick else 100

    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="cosid-bench-")
    wide = cosid.Runtime(config("memory:bench-wide", node_bits=2, sequence_bits=20))
    default = cosid.Runtime(config("memory:bench-default"))

    rows: list[tuple[str, str, float, float]] = []

    def row(name: str, what: str, fn: Callable[[], object], number: int, per: int = 1,
            rep: int = repeat) -> None:
        best, median = measure(fn, number, rep)
        rows.append((name, what, best / per, median / per))

    # The floor: a native call that returns a new 64-bit int, and a no-op native method call.
    row("floor: `itertools.count(2**60).__next__()`", "new int from C", itertools.count(2**60).__next__, 2000)
    row("floor: `(12345).__index__()`", "no-op native method", (12345).__index__, 2000)
    row("**`Runtime.next()`** (20 sequence bits)", "cosid, per call", wide.next, 2000)
    row("`Runtime.next()` (default 41/10/12 layout)", "cosid, per call", default.next, 2000)
    row("`Generator.next()` (named, 20 sequence bits)", "cosid, per call", wide.generator("g").next, 2000)
    row("`Runtime.next_str()` (20 sequence bits)", "cosid, base-62 str", wide.next_str, 2000)
    if uuid_utils is not None:
        row("`uuid_utils.uuid7()`", "Rust-backed UUIDv7", uuid_utils.uuid7, 2000)
    row("`uuid.uuid4()`", "stdlib UUIDv4", uuid.uuid4, 2000)
    if SnowflakeGenerator is not None:
        gen = SnowflakeGenerator(42)
        row("`next(snowflake.SnowflakeGenerator)` (snowflake-id)", "pure Python", gen.__next__, 2000)

    n = 4096
    row("floor: `list(range(2**60, 2**60 + 4096))`", "4096 new ints, per id",
        lambda: list(range(2**60, 2**60 + n)), 20, per=n, rep=batch_repeat)
    row("**`Runtime.next_batch(4096)`** (20 sequence bits)", "list of ints, per id",
        lambda: wide.next_batch(n), 20, per=n, rep=batch_repeat)
    buf = array.array("Q", bytes(8 * n))
    row("**`Runtime.next_into(array('Q', 4096))`** (20 sequence bits)", "zero-copy, per id",
        lambda: wide.next_into(buf), 20, per=n, rep=batch_repeat)
    if uuid_utils is not None:
        row("`[uuid_utils.uuid7() for _ in range(4096)]`", "per id",
            lambda: [uuid_utils.uuid7() for _ in range(n)], 5, per=n, rep=batch_repeat)

    # Sustained: long loops on the default layout, capped at 4096 ids per ms per slot.
    best, median = measure(default.next, 200_000, 3 if args.quick else 5)
    rows.append(("`Runtime.next()` sustained, default layout", "200k calls in a row", best, median))
    best, median = measure(lambda: default.next_batch(n), 200, 3 if args.quick else 5)
    rows.append(("`Runtime.next_batch(4096)` sustained, default layout", "200 batches in a row",
                 best / n, median / n))

    wide.close()
    default.close()

    print(f"Python {platform.python_version()} ({platform.python_implementation()}), "
          f"{platform.machine()}, cosid {cosid.__version__}, "
          f"uuid_utils {getattr(uuid_utils, '__version__', 'missing')}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"best of {repeat} bursts (batches: best of {batch_repeat}); median beside it\n")
    print("| what | kind | best ns | median ns |")
    print("| --- | --- | ---: | ---: |")
    for name, what, best, median in rows:
        print(f"| {name} | {what} | {best:.1f} | {median:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
