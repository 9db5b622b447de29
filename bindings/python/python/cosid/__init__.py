"""cosid: distributed Snowflake ids, unique whatever the clocks do.

>>> import cosid
>>> with cosid.Runtime() as rt:          # the embedded SQLite store, $XDG_STATE_HOME/cosid/
...     rt.next()                        # doctest: +SKIP
351823749135859712

``Runtime(config)`` takes ``None`` (the embedded default), a YAML or JSON ``str``, a ``dict``, or
a path: an ``os.PathLike`` is always a path; a ``str`` is a path when it has no newline and names
an existing file, and a YAML/JSON document otherwise.

A ``Runtime`` is thread-safe: share one between threads. After ``os.fork()`` (gunicorn
``--preload``, uWSGI, Celery prefork, ``multiprocessing`` with ``fork``) the child's copy follows
the configuration's fork policy, ``cosid.fork``: ``new-slot`` (the default) takes a slot of its
own on its first use in the child, with every generator obtained from it, before or after the
fork; ``fail`` raises ``ForkedError`` at every call in the child. A ``memory:`` store or a static
slot cannot be shared with a child, so those always raise ``ForkedError`` there. Every error
derives from ``CosIdError`` and carries ``status``, the C API status name.

Runtimes still open are closed (their slots released) at interpreter exit (``atexit``), when
a ``multiprocessing`` child ends (``fork`` and ``forkserver`` children leave with ``os._exit``,
which skips ``atexit``), and when the process ends itself with ``signal.raise_signal`` and the
signal's default action (uvicorn and gunicorn's ``UvicornWorker`` re-raise SIGTERM that way after their
own shutdown, which skips ``atexit``). A process killed by a signal it does not handle (SIGKILL,
or SIGTERM without a handler) from outside cannot release: its slot is free again once the
lease's ttl runs out.
"""

from __future__ import annotations

import atexit
import functools
import signal

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
    format_id,
    from_base62,
    parse_id,
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
    "format_id",
    "from_base62",
    "parse_id",
    "to_base62",
]

# Close every runtime still open at exit (releasing its slot with its exact last timestamp),
# while the interpreter can still run event callbacks; after this, callbacks are no longer called.
atexit.register(_shutdown)


class _MultiprocessingExit:
    """Closes the runtimes of a ``multiprocessing`` child when it ends.

    ``fork`` and ``forkserver`` children end with ``os._exit`` after running
    ``multiprocessing``'s own finalizers, never ``atexit``. A child starts by clearing the
    finalizers it inherited, then runs the after-fork hooks: the hook below registers a finalizer
    in each child, which closes that child's runtimes (the inherited ones that took a slot of
    their own, and the ones built there). ``spawn`` children exit normally and run ``atexit``.
    """

    def __init__(self) -> None:
        from multiprocessing import process, util

        util.register_after_fork(self, _MultiprocessingExit._in_child)
        # Imported for the first time inside a child that is already running (the hooks ran
        # before this import): register the finalizer now.
        if process.parent_process() is not None:
            self._in_child()

    def _in_child(self) -> None:
        from multiprocessing import util

        # exitpriority: run before multiprocessing's own finalizers of default priority 0, so
        # queues and pipes the program still uses are open while the slot is released.
        util.Finalize(None, _shutdown, exitpriority=10)


# Kept alive for the life of the module (register_after_fork holds it weakly).
_multiprocessing_exit = _MultiprocessingExit()


# Signals whose default action ends the process.
_ENDING_SIGNALS = frozenset(
    getattr(signal, name)
    for name in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM",
                 "SIGPIPE", "SIGABRT")
    if hasattr(signal, name)
)


def _release_before_raise_signal() -> None:
    """Closes the open runtimes before ``signal.raise_signal`` ends the process.

    An ASGI server that caught SIGTERM shuts down, restores the handler it found (the default
    action) and raises the signal again so that the process ends the way its parent expects
    (uvicorn, also as gunicorn's ``UvicornWorker``). The process then dies without running
    ``atexit``, and no handler of ours could stand in the way: the server restores the one it
    found before the app, and cosid with it, was imported. So ``signal.raise_signal`` is wrapped:
    when the signal's handler is the default action, the signal ends the process and is not
    blocked, the runtimes are closed first (their slots released). Any other call is passed on
    untouched.
    """
    original = signal.raise_signal
    if getattr(original, "_cosid_releases", False):  # the module imported again
        return

    @functools.wraps(original)
    def raise_signal(signalnum: int, /) -> None:
        try:
            ends = (signalnum in _ENDING_SIGNALS
                    and signal.getsignal(signalnum) == signal.SIG_DFL
                    and signalnum not in signal.pthread_sigmask(signal.SIG_BLOCK, ()))
        except (TypeError, ValueError, OSError):
            ends = False
        if ends:
            _shutdown()
        original(signalnum)

    raise_signal._cosid_releases = True  # type: ignore[attr-defined]
    signal.raise_signal = raise_signal


_release_before_raise_signal()
