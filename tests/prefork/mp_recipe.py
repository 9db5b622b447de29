"""The multiprocessing recipe: a pool of 4 workers (replaced every 100 tasks) running
`app.record` (one id from the runtime and one from its "orders" generator, written to
PostgreSQL), with the start method given on the command line; the parent records too.

The runtime is made once at import of `app`: with `fork` the workers inherit it (each takes a
slot of its own on first use); with `forkserver` and `spawn` each worker imports `app` again and
makes its own. Nothing is closed by hand: the workers' slots are released when they end
(multiprocessing's finalizers), the parent's at exit (atexit).

argv: start method, number of tasks. Prints one JSON line: {"ok": n, "errors": [...]}.
"""

from __future__ import annotations

import json
import multiprocessing
import sys

import app


def task(_: int) -> tuple[str, str]:
    try:
        return "ok", app.record()
    except Exception as e:  # noqa: BLE001  (counted by the parent)
        return "error", f"{type(e).__name__}: {e}"


def main() -> None:
    method, n = sys.argv[1], int(sys.argv[2])
    ctx = multiprocessing.get_context(method)
    outcomes = [task(-1)]  # the parent holds its slot and issues too
    pool = ctx.Pool(4, maxtasksperchild=100)
    try:
        outcomes += pool.map(task, range(n), chunksize=5)
    finally:
        pool.close()  # the workers end normally (terminate() would kill them with SIGTERM)
        pool.join()
    outcomes.append(task(-2))
    errors = [text for kind, text in outcomes if kind != "ok"]
    print(json.dumps({"ok": len(outcomes) - len(errors), "errors": errors[:20],
                      "error_count": len(errors)}), flush=True)


if __name__ == "__main__":
    main()
