"""cosid: distributed Snowflake ids, unique whatever the clocks do.

>>> import cosid
>>> with cosid.Runtime() as rt:          # the embedded SQLite store, $XDG_STATE_HOME/cosid/
...     rt.next()                        # doctest: +SKIP
351823749135859712

``Runtime(config)`` takes ``None`` (the embedded default), a YAML or JSON ``str``, a ``dict``, or
a path: an ``os.PathLike`` is always a path; a ``str`` is a path when it has no newline and names
an existing file, and a YAML/JSON document otherwise.

A ``Runtime`` is thread-safe: share one between threads. After ``os.fork()`` the child's copy
raises ``ForkedError``; build a new ``Runtime`` in the child. Every error derives from
``CosIdError`` and carries ``status``, the C API status name.
"""

from __future__ import annotations

import atexit

from cosid._cosid import (
    MAX_BATCH,
    Event,
    Generator,
    IdParts,
    Layout,
    Runtime,
    Stats,
    __version__,
    _shutdown,
    from_base62,
    to_base62,
)
from cosid._errors import (
    ClockBehindError,
    ClosedError,
    ConfigError,
    CosIdError,
    ExhaustedError,
    ForkedError,
    InvalidArgumentError,
    NamespaceMismatchError,
    SlotLostError,
    StateFileError,
    StoreError,
    WaitTimeoutError,
    WindowClosedError,
)

__all__ = [
    "MAX_BATCH",
    "ClockBehindError",
    "ClosedError",
    "ConfigError",
    "CosIdError",
    "Event",
    "ExhaustedError",
    "ForkedError",
    "Generator",
    "IdParts",
    "InvalidArgumentError",
    "Layout",
    "NamespaceMismatchError",
    "Runtime",
    "SlotLostError",
    "StateFileError",
    "Stats",
    "StoreError",
    "WaitTimeoutError",
    "WindowClosedError",
    "__version__",
    "from_base62",
    "to_base62",
]

# Close every runtime still open at exit (releasing its slot with its exact last timestamp),
# while the interpreter can still run event callbacks; after this, callbacks are no longer called.
atexit.register(_shutdown)
