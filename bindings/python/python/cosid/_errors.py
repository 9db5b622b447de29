"""The exceptions of cosid: one class per error kind of the core, all derived from CosIdError.

Each class carries ``status``, the name of the matching C API status (``cosid_status_name``), and
``kind``, the core's stable snake_case name of the kind. The native module maps the core's error
*kind* (never its message) to these classes.
"""

from __future__ import annotations

__all__ = [
    "CosIdError",
    "ConfigError",
    "StoreError",
    "WindowClosedError",
    "SlotLostError",
    "ClockBehindError",
    "WaitTimeoutError",
    "ClosedError",
    "ForkedError",
    "InvalidArgumentError",
    "ExhaustedError",
    "NamespaceMismatchError",
    "StateFileError",
]


class CosIdError(Exception):
    """Base class of every error cosid raises. ``status`` names the C API status."""

    status: str = "COSID_ERR_UNKNOWN"
    kind: str = "unknown"


class ConfigError(CosIdError, ValueError):
    """A configuration value is missing, malformed or out of range; the message names the key."""

    status = "COSID_ERR_CONFIG"
    kind = "config"


class StoreError(CosIdError):
    """The slot store failed or could not be reached (the message names it, without secrets)."""

    status = "COSID_ERR_STORE"
    kind = "store"


class WindowClosedError(CosIdError):
    """The window's ceiling is reached and no renewal extended it within ``max-wait``."""

    status = "COSID_ERR_WINDOW_CLOSED"
    kind = "window_closed"


class SlotLostError(CosIdError):
    """The lease on the slot was lost; the runtime is acquiring a new one. Retry shortly."""

    status = "COSID_ERR_SLOT_LOST"
    kind = "slot_lost"


class ClockBehindError(CosIdError):
    """The clock is behind the window's floor or the last issued id for longer than ``max-wait``."""

    status = "COSID_ERR_CLOCK_BEHIND"
    kind = "clock_behind"


class WaitTimeoutError(CosIdError, TimeoutError):
    """A bounded wait ran out (acquiring a slot, the next tick).

    Named so it does not shadow the builtin ``TimeoutError``, which it also derives from, so
    ``except TimeoutError`` catches it too.
    """

    status = "COSID_ERR_TIMEOUT"
    kind = "timeout"


class ClosedError(CosIdError):
    """The runtime (or generator) is closed; build a new runtime to issue more ids."""

    status = "COSID_ERR_CLOSED"
    kind = "closed"


class ForkedError(CosIdError):
    """This process is a fork of the one that built the runtime; build a new runtime here."""

    status = "COSID_ERR_FORKED"
    kind = "forked"


class InvalidArgumentError(CosIdError, ValueError):
    """An argument is out of range or malformed (an id string, a batch size)."""

    status = "COSID_ERR_INVALID_ARGUMENT"
    kind = "invalid_argument"


class ExhaustedError(CosIdError):
    """Every slot of the namespace is held by a live lease."""

    status = "COSID_ERR_EXHAUSTED"
    kind = "exhausted"


class NamespaceMismatchError(CosIdError):
    """The namespace records other ``{limit, tolerance}`` values than this runtime asks for."""

    status = "COSID_ERR_NAMESPACE_MISMATCH"
    kind = "namespace_mismatch"


class StateFileError(CosIdError):
    """A static slot's state file is missing, truncated, corrupt or unwritable."""

    status = "COSID_ERR_STATE_FILE"
    kind = "state_file"


# Tracebacks and reprs say `cosid.ClosedError`, the name users import and catch.
for _name in __all__:
    globals()[_name].__module__ = "cosid"
del _name
