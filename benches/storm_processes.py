#!/usr/bin/env python3
"""A start-up storm of real processes: N `cosid next --follow` processes started at once on one
new namespace, timed until every one has printed its first id, beside the time N `cosid parse`
processes (same binary, no store) take to start and exit: the start-up baseline. The ratio is
what the store and the lease protocol add to a fleet's start.

Usage (a store URL, e.g. from scripts/with-test-servers):
  scripts/with-test-servers redis \\
    sh -c 'benches/storm_processes.py --cosid target/release/cosid --store "$COSID_TEST_REDIS_URL"'
  [--counts 64,256,1024] [--runs 3]

Each figure is the median of --runs runs; every run uses a namespace of its own (1024 slots),
and its processes are stopped (SIGTERM, so they release their slots) before the next run.
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def baseline(cosid: str, n: int) -> float:
    """Seconds until N `cosid parse 1` processes, started at once, have all exited."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([cosid, "parse", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(n)]
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"cosid parse exited {p.returncode}")
    return time.monotonic() - t0


def storm(cosid: str, store: str, n: int, namespace: str, timeout: float) -> float:
    """Seconds until N `cosid next --follow` processes, started at once, have each printed an id."""
    # A state directory of the run's own: no sticky slot from an earlier run.
    env = dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(prefix="cosid-storm-"))
    sel = selectors.DefaultSelector()
    t0 = time.monotonic()
    procs = []
    for i in range(n):
        p = subprocess.Popen([cosid, "next", "--follow", "--rate", "1", "--store", store, "--namespace", namespace,
                              "--owner-key", f"storm-{i}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        procs.append(p)
        sel.register(p.stdout, selectors.EVENT_READ, p)
    waiting = n
    last = None
    deadline = t0 + timeout
    try:
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                sys.exit(f"{waiting} of {n} processes printed no id within {timeout:.0f}s")
            for key, _ in sel.select(timeout=left):
                line = key.fileobj.readline()
                if not line:
                    p = key.data
                    sys.exit(f"a process exited before its first id: {p.stderr.read().decode()[-300:]}")
                sel.unregister(key.fileobj)
                waiting -= 1
                last = time.monotonic()
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
            for f in (p.stdout, p.stderr):
                f.close()
    return last - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cosid", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--counts", default="64,256,1024")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    # Two pipes a process: raise the open-file limit to what the largest storm needs.
    need = 3 * max(int(c) for c in args.counts.split(",")) + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    print(f"{'N':>6} {'baseline (parse)':>17} {'storm (next --follow)':>22} {'ratio':>6}")
    for n in (int(c) for c in args.counts.split(",")):
        base = statistics.median(baseline(args.cosid, n) for _ in range(args.runs))
        runs = [storm(args.cosid, args.store, n, f"storm-{n}-{os.getpid()}-{r}", args.timeout)
                for r in range(args.runs)]
        s = statistics.median(runs)
        print(f"{n:>6} {base * 1000:>15.0f}ms {s * 1000:>20.0f}ms {s / base:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
