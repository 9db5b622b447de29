"""The coroutines the ``..._async`` id methods return (made by the native module).

``ready`` holds an id (or ids) the method had at once; ``failed`` an error it met at once;
``waiting`` starts a wait on the generator's waiting thread when it is first awaited and awaits
the future that thread settles on this loop. Leaving the ``await`` early (a cancelled task, a
closed coroutine) cancels the future: the ids issued for it are dropped.
"""

from __future__ import annotations

from typing import Any, Callable


async def ready(value: Any) -> Any:
    return value


async def failed(error: BaseException) -> Any:
    raise error


async def waiting(start: Callable[[], Any]) -> Any:
    fut = start()
    try:
        return await fut
    finally:
        fut.cancel()  # nothing when it is done; else its ids are dropped when they come


# Named as the methods are, for Python's "coroutine ... was never awaited" warning.
for _f in (ready, failed, waiting):
    _f.__name__ = _f.__qualname__ = "next_async"
del _f
