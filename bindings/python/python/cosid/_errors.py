"""The exceptions of cosid: one class per error kind of the core, all derived from CosIdError.

Each class carries ``kind``, the core's stable snake_case name of the kind, and ``status``, the
name of the matching C API status (``cosid_status_name``), which is derived from it. The native module maps the core's error
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

    # Raised as itself only for a kind this build has no class for, with the core's names set
    # on the instance. The class's own status is the C API's name for a value that is none.
    status: str = "COSID_UNKNOWN_STATUS"
    kind: str = "unknown"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # The C API names the status of a kind after it: `COSID_ERR_` and the kind in capitals.
        cls.status = "COSID_ERR_" + cls.kind.upper()


class ConfigError(CosIdError, ValueError):
    """A configuration value is missing, malformed or out of range; the message names the key."""

    kind = "config"


class StoreError(CosIdError):
    """The slot store failed or could not be reached (the message names it, without secrets)."""

    kind = "store"


class WindowClosedError(CosIdError):
    """The window's ceiling is reached and no renewal extended it within ``max-wait``."""

    kind = "window_closed"


class SlotLostError(CosIdError):
    """The lease on the slot was lost; the runtime is acquiring a new one. Retry shortly."""

    kind = "slot_lost"


class ClockBehindError(CosIdError):
    """The clock is behind the window's floor or the last issued id for longer than ``max-wait``."""

    kind = "clock_behind"


class WaitTimeoutError(CosIdError, TimeoutError):
    """A bounded wait ran out (acquiring a slot, the next tick).

    Named so it does not shadow the builtin ``TimeoutError``, which it also derives from, so
    ``except TimeoutError`` catches it too.
    """

    kind = "timeout"


class ClosedError(CosIdError):
    """The runtime (or generator) is closed; build a new runtime to issue more ids."""

    kind = "closed"


class ForkedError(CosIdError):
    """This process is a fork of the one that built the runtime; build a new runtime here."""

    kind = "forked"


class InvalidArgumentError(CosIdError, ValueError):
    """An argument is out of range or malformed (an id string, a batch size)."""

    kind = "invalid_argument"


class ExhaustedError(CosIdError):
    """Every slot of the namespace is held by a live lease."""

    kind = "exhausted"


class NamespaceMismatchError(CosIdError):
    """The namespace records other ``{limit, tolerance}`` values than this runtime asks for."""

    kind = "namespace_mismatch"


class StateFileError(CosIdError):
    """A static slot's state file is missing, truncated, corrupt or unwritable."""

    kind = "state_file"


# Tracebacks and reprs say `cosid.ClosedError`, the name users import and catch.
for _name in __all__:
    globals()[_name].__module__ = "cosid"
del _name
