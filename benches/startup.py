#!/usr/bin/env python3
"""What carrying every store costs a process that starts: wall time and peak memory of short
processes, each run many times, side by side with the same process of a build that has only the
embedded SQLite store, and with the bare interpreter for the bindings.

Usage:
  benches/startup.py --full target/release/cosid --minimal target/minimal/release/cosid
                     [--python PY] [--node-dir bindings/node] [--runs 40]

The minimal `cosid` is built with
  CARGO_TARGET_DIR=target/minimal cargo build --release -p cosid-cli --no-default-features --features sqlite
Each figure is the median of `--runs` runs after 3 unmeasured ones (page cache warm), with the
machine's other load as it is: compare the rows of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(probe: str, cmd: list[str], runs: int, env: dict | None = None) -> tuple[float, float]:
    """Median wall time (ms) of `cmd` (which must exit 0) and its peak RSS (MB)."""
    walls = []
    for i in range(runs + 3):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, timeout=60)
        wall = (time.perf_counter() - t0) * 1000
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.decode(errors='replace')}")
        if i >= 3:
            walls.append(wall)
    return statistics.median(walls), rss_of(probe, cmd, env)


RSS_PROBE = r"""
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
int main(int argc, char **argv) {
    (void)argc;
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    printf("%ld\n", ru.ru_maxrss);
    return 0;
}
"""


def rss_probe(tmp: Path) -> str:
    """A small C program that runs a command and prints its peak RSS in KiB. Not Python: a
    child's peak RSS starts from its parent's at fork(), and a probe of 1 MB keeps that out."""
    src, exe = tmp / "rss_probe.c", tmp / "rss_probe"
    src.write_text(RSS_PROBE)
    subprocess.run(["cc", "-O1", "-o", str(exe), str(src)], check=True)
    return str(exe)


def rss_of(probe: str, cmd: list[str], env: dict | None) -> float:
    """Peak RSS (MB) of one run of `cmd`."""
    out = subprocess.run([probe, *cmd], capture_output=True, text=True, env=env, timeout=60, check=True)
    return int(out.stdout.strip()) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", required=True, help="cosid built with every store")
    ap.add_argument("--minimal", required=True, help="cosid built with the SQLite store only")
    ap.add_argument("--python", default=None, help="a Python that imports the cosid wheel")
    ap.add_argument("--node-dir", default=None, help="a folder where `require('cosid')`… resolves the addon")
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cosid-startup-"))
    probe = rss_probe(tmp)
    rows = []

    def row(case: str, cmd: list[str], env: dict | None = None) -> None:
        wall, rss = measure(probe, cmd, args.runs, env)
        rows.append((case, wall, rss))
        print(f"{case}: {wall:.2f} ms, {rss:.1f} MB", file=sys.stderr)

    for name, exe in (("every store", args.full), ("SQLite only", args.minimal)):
        size = Path(exe).stat().st_size / 1e6
        row(f"`cosid --version` ({name}, {size:.1f} MB binary)", [exe, "--version"])
        db = tmp / f"{name.split()[0].lower()}.db"
        row(f"`cosid next` on one SQLite file, first id and release ({name})",
            [exe, "next", "--store", f"sqlite://{db}", "--namespace", "bench"])
    if args.python:
        row("`python -c pass`", [args.python, "-c", "pass"])
        row("`python -c 'import cosid'` (every store)", [args.python, "-c", "import cosid"])
    if args.node_dir:
        env = dict(os.environ, NODE_PATH=str(Path(args.node_dir).resolve().parent))
        row("`node -e ''`", ["node", "-e", ""], env)
        row("`node -e \"require('cosid')\"` (every store)",
            ["node", "-e", f"require({str(Path(args.node_dir).resolve())!r})"], env)

    print("| process | median wall time | peak RSS |")
    print("|---|---:|---:|")
    for case, wall, rss in rows:
        print(f"| {case} | {wall:.2f} ms | {rss:.1f} MB |")


if __name__ == "__main__":
    main()
