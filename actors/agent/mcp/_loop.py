"""``LoopThread``: an event loop of its own in a daemon thread, where a toolset's MCP session
lives. The MCP SDK is asyncio-only and its session is bound to the loop it was opened on,
while one agent serves chats on many threads and many loops: so every coroutine that
touches the session runs here, handed over with ``submit``, and its caller waits for it in
its own way (``concurrent.futures.Future.result`` in a thread, ``asyncio.wrap_future`` on
a loop).

Thread-safety: ``submit`` and ``stop`` may be called from any thread (``stop`` not from the
loop's own thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """A loop in a thread named ``name``, started on the first ``submit``, stopped by ``stop``
    (and started again by a later ``submit``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def submit(self, coro: Coroutine[Any, Any, T]) -> cf.Future[T]:
        """Run ``coro`` on the loop; its future, resolved with what it returns or raises."""
        with self._guard:
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=loop.run_forever, name=self.name, daemon=True
                )
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(coro, loop)

    @property
    def running(self) -> bool:
        """True from the first ``submit`` until ``stop``."""
        return self._loop is not None

    def stop(self) -> None:
        """Stop the loop once the coroutines submitted so far ended, and close it (a no-op
        when it never started). Whatever still runs on it is cancelled first."""
        with self._guard:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


async def _cancel_all() -> None:
    current = asyncio.current_task()
    pending = [task for task in asyncio.all_tasks() if task is not current]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
