#!/usr/bin/env python3
"""Bytes on the wire for one start of a runtime: `cosid next` (connect, open the namespace,
acquire a slot, issue one id, release the slot) through a byte-counting TCP proxy in front of
the store, on a namespace where H other slots are held by live `cosid next --follow` processes.
Today an acquisition reads the whole namespace (one snapshot), so the bytes grow with H; this
measures by how much.

Usage (store URLs, e.g. from scripts/with-test-servers):
  scripts/with-test-servers redis,postgres,etcd sh -c 'benches/acquire_bytes.py \\
    --cosid target/release/cosid --store "$COSID_TEST_REDIS_URL" \\
    --store "$COSID_TEST_POSTGRES_URL" --store "$COSID_TEST_ETCD_URL"' [--held 0,64,512]

Each figure is the median of 5 starts; the holders run without the proxy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "chaos"))
from proxy import Proxy  # noqa: E402


def via(url: str, proxy: Proxy) -> str:
    """`url` with its host and port replaced by the proxy's."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = parts.netloc.replace(f"{host}:{parts.port}", f"127.0.0.1:{proxy.port}")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def hold(cosid: str, store: str, namespace: str, n: int, env: dict[str, str]) -> list[subprocess.Popen]:
    """N `cosid next --follow` processes, each holding a slot once it printed its first id."""
    procs = [subprocess.Popen([cosid, "next", "--follow", "--rate", "1", "--store", store, "--namespace", namespace,
                               "--owner-key", f"holder-{i}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=env)
             for i in range(n)]
    for p in procs:
        if not p.stdout.readline():
            sys.exit(f"a holder exited {p.wait()} before printing an id")
    return procs


def one_start(cosid: str, store: str, namespace: str, proxy: Proxy, env: dict[str, str]) -> tuple[int, int]:
    up, down = proxy.bytes_up, proxy.bytes_down
    done = subprocess.run([cosid, "next", "--store", store, "--namespace", namespace, "--owner-key", "measured"],
                          capture_output=True, text=True, env=env, timeout=60)
    if done.returncode != 0:
        sys.exit(f"cosid next exited {done.returncode}: {done.stderr}")
    time.sleep(0.2)  # the proxy's pumps pass the last bytes
    return proxy.bytes_up - up, proxy.bytes_down - down


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cosid", required=True)
    ap.add_argument("--store", action="append", required=True)
    ap.add_argument("--held", default="0,64,512")
    args = ap.parse_args()
    env = dict(os.environ, XDG_STATE_HOME=tempfile.mkdtemp(prefix="cosid-bytes-"))
    print("| store | slots held by others | bytes sent | bytes received | per held slot (received) |")
    print("|---|---:|---:|---:|---:|")
    for store in args.store:
        kind = urllib.parse.urlsplit(store).scheme
        port = urllib.parse.urlsplit(store).port
        proxy = Proxy(port)
        base = None
        try:
            for held in [int(h) for h in args.held.split(",")]:
                namespace = f"bytes-{kind}-{held}-{os.getpid()}"
                holders = hold(args.cosid, store, namespace, held, env)
                try:
                    runs = [one_start(args.cosid, via(store, proxy), namespace, proxy, env) for _ in range(5)]
                finally:
                    for p in holders:
                        p.terminate()
                    for p in holders:
                        p.wait()
                sent = statistics.median(r[0] for r in runs)
                received = statistics.median(r[1] for r in runs)
                if base is None:
                    base = received
                per = f"{(received - base) / held:.0f}" if held else ""
                print(f"| {kind} | {held} | {sent:.0f} | {received:.0f} | {per} |", flush=True)
        finally:
            proxy.close()


if __name__ == "__main__":
    main()
