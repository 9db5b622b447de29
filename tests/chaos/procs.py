"""Real `cosid next --follow` processes, and the checks on the ids they printed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from servers import LIBFAKETIME

# CosId's millisecond layout (the default): 41 bits of time, 10 of slot, 12 of sequence.
EPOCH_MS = 1577203200000
TIME_BITS, SLOT_BITS, SEQ_BITS = 41, 10, 12


def decode(id_: int) -> tuple[int, int, int]:
    """(timestamp_ms, slot, sequence) of an id in the default layout."""
    seq = id_ & ((1 << SEQ_BITS) - 1)
    slot = (id_ >> SEQ_BITS) & ((1 << SLOT_BITS) - 1)
    ts = (id_ >> (SEQ_BITS + SLOT_BITS)) + EPOCH_MS
    return ts, slot, seq


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Proc:
    """One `cosid next --follow` process; stdout and stderr go to files in the scenario dir."""

    def __init__(self, ctx, label: str, args: list[str], key: str | None, skew: str | None = None,
                 env: dict[str, str] | None = None, program: list[str] | None = None, lang: str = "cli"):
        self.ctx = ctx
        self.label = label
        self.lang = lang  # "cli", or the binding whose worker `program` is: "c", "py", "node"
        self.key = key
        self.skew = skew
        self.out_path = ctx.dir / f"{label}.out"
        self.err_path = ctx.dir / f"{label}.err"
        cmd = (program or [str(ctx.cosid)]) + args
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        if skew:
            if LIBFAKETIME is None:
                raise RuntimeError("faketime is missing: apt-get install -y faketime")
            # What `faketime -f SKEW` sets, without its wrapper process in between (signals must
            # reach cosid itself). Under a multi-threaded Rust program: no caching, and the
            # monotonic clock left real.
            full_env.update({"LD_PRELOAD": LIBFAKETIME, "FAKETIME": skew, "FAKETIME_NO_CACHE": "1",
                             "FAKETIME_DONT_FAKE_MONOTONIC": "1", "DONT_FAKE_MONOTONIC": "1"})
        self.cmd_display = ctx.redact(" ".join(cmd))
        self.t_start = time.monotonic()
        self.wall_start = now_ms()
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=full_env,
                                      start_new_session=True)
        self.paused = False
        self.killed = False           # by the harness, on purpose
        self.forced = False           # did not stop on SIGTERM in time
        self.wall_end: int | None = None
        self.returncode: int | None = None
        self._ids: list[int] | None = None

    # -- faults --------------------------------------------------------------------------------
    def pause(self) -> None:
        os.kill(self.p.pid, signal.SIGSTOP)
        self.paused = True
        self.ctx.note(f"{self.label} SIGSTOP")

    def resume(self) -> None:
        os.kill(self.p.pid, signal.SIGCONT)
        self.paused = False
        self.ctx.note(f"{self.label} SIGCONT")

    def kill(self) -> None:
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
        self.killed = True
        self.returncode = self.p.wait(timeout=30)
        self.wall_end = now_ms()
        self.ctx.note(f"{self.label} SIGKILL")

    def terminate(self) -> None:
        if self.p.poll() is None:
            if self.paused:
                self.resume()
            os.kill(self.p.pid, signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        if self.returncode is not None:
            return
        try:
            self.returncode = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.forced = True
            os.kill(self.p.pid, signal.SIGKILL)
            self.returncode = self.p.wait(timeout=30)
        self.wall_end = now_ms()

    def alive(self) -> bool:
        return self.p.poll() is None

    # -- results -------------------------------------------------------------------------------
    def has_issued(self) -> bool:
        """Whether the process has written an id yet (read live; `ids()` is read once, at the end)."""
        try:
            return self.out_path.stat().st_size > 0
        except OSError:
            return False

    def ids(self) -> list[int]:
        if self._ids is None:
            data = self.out_path.read_bytes()
            lines = data.split(b"\n")
            # A process killed mid-write may leave a last line without its newline: ignore it.
            self.partial_line = lines[-1] != b""
            self.bad_lines = 0
            ids = []
            for line in lines[:-1]:
                if line.isdigit():
                    ids.append(int(line))
                else:
                    self.bad_lines += 1
            self._ids = ids
        return self._ids

    def stderr(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")
        except OSError:
            return ""

    def messages(self) -> list[str]:
        """Distinct stderr lines, numbers folded, so the report stays short."""
        seen = []
        for line in self.stderr().splitlines():
            line = line.strip()
            if not line:
                continue
            folded = re.sub(r"\d+", "N", line)
            if folded not in seen:
                seen.append(folded)
        return seen

    def max_gap_ms(self) -> tuple[int, int]:
        """The longest stretch without an id (id time), and where it starts."""
        best, at = 0, 0
        prev = None
        for i in self.ids():
            ts = decode(i)[0]
            if prev is not None and ts - prev > best:
                best, at = ts - prev, prev
            prev = ts
        return best, at


@dataclass
class Verdict:
    ids: int = 0
    duplicates: int = 0
    overlaps: int = 0  # (slot, ms) pairs issued by two processes
    failures: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


def check_ids(procs: list[Proc], slot_limit: int, holders: dict | None) -> Verdict:
    """The invariants: no duplicate id; no (slot, millisecond) issued by two processes (their
    windows on a slot are disjoint); per process, ids on one slot strictly increase; every slot
    below the namespace limit; every id on a slot its process was seen holding (`holders`:
    owner key -> slots seen in `cosid slots` snapshots; None for static slots)."""
    v = Verdict()
    seen: dict[int, int] = {}
    owner_of: dict[tuple[int, int], int] = {}
    for n, p in enumerate(procs):
        ids = p.ids()
        v.ids += len(ids)
        if p.bad_lines:
            v.failures.append(f"{p.label}: {p.bad_lines} stdout lines that are not ids")
        last_on_slot: dict[int, int] = {}
        unheld: dict[int, int] = {}
        for i in ids:
            if i in seen:
                v.duplicates += 1
                if v.duplicates <= 5:
                    other = procs[seen[i]].label
                    v.failures.append(f"DUPLICATE id {i} {decode(i)} from {other} and {p.label}")
            else:
                seen[i] = n
            ts, slot, _ = decode(i)
            if slot >= slot_limit:
                v.failures.append(f"{p.label}: id {i} has slot {slot} >= limit {slot_limit}")
            prev = last_on_slot.get(slot)
            if prev is not None and i <= prev:
                v.failures.append(f"{p.label}: id {i} not above the previous id {prev} on slot {slot}")
            last_on_slot[slot] = i
            o = owner_of.setdefault((slot, ts), n)
            if o != n:
                v.overlaps += 1
                if v.overlaps <= 5:
                    v.failures.append(
                        f"OVERLAP slot {slot} ms {ts} issued by {procs[o].label} and {p.label}")
            if holders is not None and not p.skew and slot not in holders.get(p.key, set()):
                unheld[slot] = unheld.get(slot, 0) + 1
        for slot, count in unheld.items():
            v.failures.append(f"{p.label} ({p.key}): {count} ids on slot {slot}, which no snapshot "
                              f"showed it holding")
    return v
