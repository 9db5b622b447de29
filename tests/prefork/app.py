"""The WSGI and ASGI applications of the prefork recipes: the code a new user writes first.

A runtime and a named generator made once, at import, in the module; every request takes one id
from each and writes it as the PRIMARY KEY of a PostgreSQL table (one table per id space: the
default generator and "orders" are separate id spaces, which may hold equal numbers). A
duplicate id would make the INSERT fail: the request then answers 500 and names the violation.

`asgi` is the same application for uvicorn and gunicorn's UvicornWorker, awaiting its ids
(`next_async`): nothing in it closes the runtime (its lifespan handler only answers), so the
slot's release at a server's stop is cosid's own doing.

Settings come from the environment: PREFORK_COSID_CONFIG (JSON), PREFORK_DSN, PREFORK_TABLE.
"""

from __future__ import annotations

import json
import os

import psycopg

import cosid

rt = cosid.Runtime(json.loads(os.environ["PREFORK_COSID_CONFIG"]))
orders = rt.generator("orders")

TABLE = os.environ["PREFORK_TABLE"]
_conn: "psycopg.Connection | None" = None
_conn_pid = 0


def db() -> psycopg.Connection:
    """One connection per process (a connection inherited over fork is not ours to use)."""
    global _conn, _conn_pid
    if _conn is None or _conn_pid != os.getpid():
        _conn = psycopg.connect(os.environ["PREFORK_DSN"], autocommit=True)
        _conn_pid = os.getpid()
    return _conn


def record() -> str:
    """Takes an id from each generator and inserts both; returns them as text."""
    return insert(rt.next(), orders.next())


async def record_async() -> str:
    """`record` for the ASGI app: the ids awaited (the inserts block the loop: a test app)."""
    return insert(await rt.next_async(), await orders.next_async())


def insert(a: int, b: int) -> str:
    pid = os.getpid()
    with db().cursor() as cur:
        cur.execute(f"INSERT INTO {TABLE}_ids (id, pid) VALUES (%s, %s)", (a, pid))
        cur.execute(f"INSERT INTO {TABLE}_orders (id, pid) VALUES (%s, %s)", (b, pid))
    return f"{a} {b} {pid}"


def application(environ, start_response):
    try:
        body, status = record(), "200 OK"
    except psycopg.errors.UniqueViolation as e:
        body, status = f"duplicate id (PRIMARY KEY violation): {e}", "500 Internal Server Error"
    except Exception as e:  # noqa: BLE001  (reported to the client, which counts it)
        body, status = f"{type(e).__name__}: {e}", "500 Internal Server Error"
    data = body.encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(data)))])
    return [data]


async def asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    try:
        body, status = await record_async(), 200
    except psycopg.errors.UniqueViolation as e:
        body, status = f"duplicate id (PRIMARY KEY violation): {e}", 500
    except Exception as e:  # noqa: BLE001  (reported to the client, which counts it)
        body, status = f"{type(e).__name__}: {e}", 500
    data = body.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
