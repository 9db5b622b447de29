"""The Celery recipe: the tasks module a new user writes, run by `celery worker --pool prefork`.

The runtime is the one `app` makes at import (a module-level `rt = cosid.Runtime(cfg)` and its
"orders" generator); the worker imports this module before it forks the pool's children, so the
children inherit the runtime and each takes a slot of its own on first use. Each task takes one
id from each and writes them as PRIMARY KEYs to PostgreSQL (`app.record`).

The pool's children (billiard processes) end with `os._exit`, which skips `atexit`: the runtime
is closed in Celery's `worker_process_shutdown` signal, as bindings/python/README.md says, so a
child replaced by `--max-tasks-per-child` or stopped at shutdown gives its slot back.

The broker and result settings are in celery_config.py (folders under PREFORK_CELERY_DIR).
"""

from __future__ import annotations

import os

import psycopg
from celery import Celery
from celery.signals import worker_process_shutdown

import app
from celery_config import configure

rt = app.rt


celery = configure(Celery("celery_recipe"), os.environ["PREFORK_CELERY_DIR"])


@celery.task(name="celery_recipe.record")
def record() -> list[str]:
    """["ok", "<id> <order id> <pid>"] or ["error", "<what failed>"] (counted by the sender)."""
    try:
        return ["ok", app.record()]
    except psycopg.errors.UniqueViolation as e:
        return ["error", f"duplicate id (PRIMARY KEY violation): {e}"]
    except Exception as e:  # noqa: BLE001  (counted by the sender)
        return ["error", f"{type(e).__name__}: {e}"]


@worker_process_shutdown.connect
def _release_cosid_slot(**_):
    rt.close()
