"""Types of the native module cosid._cosid (checked against it by mypy.stubtest)."""

import os
from collections.abc import Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any, ClassVar, Final, Literal, Optional, Union, final

from typing_extensions import Self

__all__ = [
    "Event",
    "Generator",
    "IdParts",
    "Layout",
    "MAX_BATCH",
    "Runtime",
    "Stats",
    "format_id",
    "from_base62",
    "parse_id",
    "to_base62",
]

__version__: Final[str]
MAX_BATCH: Final[int]
"""The most ids one ``next_batch`` call returns; ``next_into`` has no limit."""
_ERROR_KINDS: Final[list[str]]
_EVENT_KINDS: Final[dict[str, tuple[str, ...]]]
_STATS_FIELDS: Final[tuple[str, ...]]

def to_base62(id: int, /) -> str:
    """The fixed-width base-62 text of an id: 11 characters of ``0-9A-Za-z``, ordered like the ids."""

def from_base62(text: str, /) -> int:
    """The id that ``to_base62`` wrote as ``text``; ``InvalidArgumentError`` for any other text."""

def format_id(id: int, format: str, /, *, layout: Union[Layout, str, None] = None) -> str:
    """The text of ``id`` in ``format``: ``"dec"``, ``"hex"``, ``"base62"`` (``"radix62"``),
    ``"radix36"`` or ``"friendly"``, with options after commas, as ``cosid --format`` takes
    them: ``"radix62,pad-start=false,char-size=10"``, ``"friendly,zone=Asia/Shanghai,pad-start=true"``,
    and in every form ``prefix=``, ``suffix=`` and ``date-prefix=yyMMdd`` (docs/id-text.md).
    ``layout``: a ``Layout`` (``Runtime.layout``) or a preset name; default ``"millis"``.
    ``InvalidArgumentError`` for a bad format, or an id the layout or setting cannot hold."""

def parse_id(text: str, format: str, /, *, layout: Union[Layout, str, None] = None) -> int:
    """The id that ``format_id`` wrote as ``text`` with the same ``format`` and ``layout``;
    ``InvalidArgumentError`` for any other text."""

def _shutdown() -> None: ...
def _error_for_kind(kind: str, message: str) -> BaseException: ...
def _status_for_kind(kind: str) -> str: ...
def _sample_events() -> list[Event]: ...
@final
class IdParts:
    """An id taken apart: the same fields as ``cosid parse`` prints."""

    @property
    def id(self) -> int: ...
    @property
    def timestamp_ms(self) -> int:
        """The start of the id's time unit, ms since the Unix epoch."""

    @property
    def time(self) -> str:
        """``timestamp_ms`` as RFC 3339 in UTC with milliseconds."""

    @property
    def slot(self) -> int: ...
    @property
    def sequence(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Layout:
    """The bit layout of a runtime's ids."""

    @property
    def epoch_ms(self) -> int: ...
    @property
    def unit(self) -> Literal["ms", "s"]: ...
    @property
    def timestamp_bits(self) -> int: ...
    @property
    def node_bits(self) -> int: ...
    @property
    def sequence_bits(self) -> int: ...
    @property
    def js_safe(self) -> bool: ...
    @property
    def max_slot(self) -> int: ...
    @property
    def max_sequence(self) -> int: ...
    @property
    def max_id(self) -> int: ...
    @property
    def runs_out_at_ms(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Stats:
    """A runtime's counters and window, read at one moment. The attributes are the core's stats
    fields, the same names as the C struct ``cosid_stats``; ``slot`` is ``None`` while no slot is
    bound."""

    @property
    def ids_issued(self) -> int: ...
    @property
    def waits(self) -> int: ...
    @property
    def renewals(self) -> int: ...
    @property
    def renewal_failures(self) -> int: ...
    @property
    def acquisitions(self) -> int: ...
    @property
    def slots_lost(self) -> int: ...
    @property
    def clock_skew_events(self) -> int: ...
    @property
    def slot(self) -> Optional[int]: ...
    @property
    def bound(self) -> bool: ...
    @property
    def floor_ms(self) -> int: ...
    @property
    def ceiling_ms(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

@final
class Event:
    """Something the runtime's keeper noticed. The attributes are cosid's event vocabulary, the
    same names as the C API's ``cosid_event`` members and the Node event's keys; those that do not
    belong to the event's kind are None."""

    @property
    def kind(self) -> str:
        """A stable snake_case name: slot_acquired, slot_lost, duplicate_owner_key, clock_skew,
        renewal_failed, store_reset, acquire_failed, slot_released, window_ahead or store_unavailable
        (later versions may add more)."""

    @property
    def message(self) -> str:
        """The whole event as one English line."""

    @property
    def slot(self) -> Optional[int]:
        """The slot concerned (every kind but clock_skew, acquire_failed and store_unavailable)."""

    @property
    def fence(self) -> Optional[int]:
        """slot_acquired: the fence of the new ownership."""

    @property
    def floor_ms(self) -> Optional[int]:
        """slot_acquired, window_ahead: the window's lower bound (excluded), ms since the Unix
        epoch."""

    @property
    def ceiling_ms(self) -> Optional[int]:
        """slot_acquired: the window's upper bound (included), ms since the Unix epoch."""

    @property
    def next_floor_ms(self) -> Optional[int]:
        """slot_released: the floor the slot's next holder gets, ms since the Unix epoch."""

    @property
    def skew_ms(self) -> Optional[int]:
        """clock_skew: this host's clock minus the store's, ms (positive: this host is ahead)."""

    @property
    def attempt(self) -> Optional[int]:
        """renewal_failed, store_unavailable: consecutive failures so far (1 the first time)."""

    @property
    def reason(self) -> Optional[str]:
        """slot_lost: why the lease was lost; window_ahead: why the window opens later than now."""

    @property
    def error(self) -> Optional[str]:
        """renewal_failed, acquire_failed, store_unavailable: the error."""

    @property
    def key(self) -> Optional[str]:
        """duplicate_owner_key: the owner key that two live runtimes hold."""

    @property
    def waited_ms(self) -> Optional[int]:
        """store_unavailable: how long the start has waited so far, ms."""

    @property
    def timeout_ms(self) -> Optional[int]:
        """store_unavailable: how long the start waits at most (acquire-timeout), ms."""

@final
class Generator:
    """A named generator of a Runtime: its own id space on the runtime's slot. Thread-safe."""

    def next(self) -> int: ...
    def next_batch(self, n: int) -> list[int]:
        """Like ``Runtime.next_batch``: all or nothing."""

    def next_into(self, buffer: Any) -> int:
        """Like ``Runtime.next_into``: all or nothing, the buffer is left as it was on an error."""

    def next_str(self) -> str: ...
    def next_async(self) -> Coroutine[Any, Any, int]:
        """Like ``Runtime.next_async``."""

    def next_batch_async(self, n: int) -> Coroutine[Any, Any, list[int]]:
        """Like ``Runtime.next_batch_async``."""

    def next_into_async(self, buffer: Any) -> Coroutine[Any, Any, int]:
        """Like ``Runtime.next_into_async``."""

    def next_str_async(self) -> Coroutine[Any, Any, str]:
        """Like ``Runtime.next_str_async``."""

    @property
    def name(self) -> str: ...

@final
class Runtime:
    """A running id source: a slot kept by a background thread, and named generators on it.

    Thread-safe: share one runtime between threads. Ids of one generator are unique across every
    process of the namespace and strictly increase per generator within one binding.

    ``config`` is None (the embedded default store), a YAML or JSON ``str``, a ``dict``, or a
    path. An ``os.PathLike`` is always a path; a ``str`` is a path when it has no newline and
    names an existing file, and a document otherwise. A ``str`` with a lone surrogate raises
    ``InvalidArgumentError``. Waiting for a free slot (up to ``acquire-timeout``) stops at
    Ctrl-C (``KeyboardInterrupt``).

    Fork: after ``os.fork()`` the child's copy follows ``cosid.fork`` in the configuration.
    ``new-slot`` (the default): on its first use in the child it takes a slot of its own (a new
    lease, the same configuration), and so does every generator obtained from it, before or
    after the fork; ``slot`` and ``stats()`` then describe the child's slot, and the parent keeps
    its own. ``fail``: every call in the child raises ``ForkedError``; build a new runtime there.
    A ``memory:`` store or a static slot cannot be shared with a child: ``ForkedError`` there.

    Exit: ``close()``, the ``with`` block, interpreter exit (``atexit``) and the end of a
    ``multiprocessing`` child release the slot; a process killed by a signal it does not handle
    (SIGKILL, SIGTERM without a handler) cannot, and its slot is free once the ttl runs out.
    """

    def __new__(
        cls,
        config: Union[None, str, os.PathLike[str], Mapping[str, Any]] = None,
        *,
        on_event: Optional[Callable[[Event], object]] = None,
    ) -> Self: ...
    def next(self) -> int:
        """One id."""

    def next_batch(self, n: int) -> list[int]:
        """``n`` ids (0 to ``MAX_BATCH``), in increasing order. All or nothing: on an error no
        id is returned (ids reserved before it are issued and dropped, never reissued)."""

    def next_into(self, buffer: Any) -> int:
        """Fills a writable C-contiguous buffer of 64-bit integers (``array('Q')``, a numpy
        ``uint64`` or ``int64`` array, ``memoryview(...).cast('Q')``) with ids; returns the count.
        All or nothing: on an error (``KeyboardInterrupt`` during a wait too) the buffer is left
        as it was."""

    def next_str(self) -> str:
        """One id as 11 base-62 characters (sorting the strings sorts the ids)."""

    def next_async(self) -> Coroutine[Any, Any, int]:
        """A coroutine of one id. An id available at the call is taken then, and the coroutine
        only returns it (no thread, no future); a wait (the next millisecond, a window being
        renewed, up to ``max-wait``) starts when it is awaited and runs off the event loop, which
        keeps running other tasks. Errors are raised at the ``await``, with the classes of
        ``next()``. Cancelling the awaiting task drops the ids issued for it (skipped, never
        reissued)."""

    def next_batch_async(self, n: int) -> Coroutine[Any, Any, list[int]]:
        """A coroutine of ``n`` ids, as ``next_batch`` (all or nothing), waiting off the event
        loop."""

    def next_into_async(self, buffer: Any) -> Coroutine[Any, Any, int]:
        """A coroutine filling ``buffer`` with ids, as ``next_into`` (all or nothing), waiting off
        the event loop; after a wait the buffer is written on the loop's thread as the ``await``
        returns: do not resize it meanwhile."""

    def next_str_async(self) -> Coroutine[Any, Any, str]:
        """A coroutine of one id as 11 base-62 characters, as ``next_str``."""

    def parse(self, id: Union[int, str]) -> IdParts:
        """An id (an int, or the base-62 text of ``next_str``) taken apart with this layout."""

    def generator(self, name: str) -> Generator:
        """The generator called ``name``, created on first use; ``""`` is the default one.
        In a forked child it follows the runtime's fork policy, like every other call."""

    def stats(self) -> Stats: ...
    def on_event(self, callback: Callable[[Event], object]) -> None:
        """Calls ``callback(event)`` on the keeper's thread for every later event."""

    def close(self) -> None:
        """Ordered shutdown: generators stop, the slot is released. Idempotent. In a forked child
        it releases the child's own slot (if it took one) and never touches the parent's."""

    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
        /,
    ) -> bool: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def namespace(self) -> str: ...
    @property
    def slot(self) -> Optional[int]: ...
    @property
    def closed(self) -> bool: ...
