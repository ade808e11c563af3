"""Test doubles for the model-call limiter: timers that run on a ``FakeClock``."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from parlour.runtime.testing import FakeClock


class JumpingTimer:
    """A limiter ``Timer`` on a ``FakeClock``: each alarm, from a thread of its own, moves
    the clock to its time (never back) and rings. Time passes only when the head waiter
    needs it, so a limiter runs at exactly its limits, as fast as the machine allows.

    Given ``quiet`` (with ``changed``, notified whenever it may have become true), time
    moves only once it holds, as trio's autojump clock moves only when every task waits:
    a test whose calls are counted at a model passes ``quiet`` = every granted call has
    reached it and settled, so no call granted before a jump arrives after it."""

    def __init__(
        self,
        clock: FakeClock,
        quiet: Callable[[], bool] | None = None,
        changed: threading.Condition | None = None,
    ) -> None:
        self.clock, self.quiet, self.changed = clock, quiet, changed
        self._alarms: queue.SimpleQueue[tuple[float, Callable[[], None]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name="jumping-timer", daemon=True)
        self._thread.start()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self._alarms.put((self.clock.now() + delay, fn))

    def stop(self) -> None:
        self._alarms.put(None)
        self._thread.join(10)

    def _run(self) -> None:
        while (alarm := self._alarms.get()) is not None:
            due, fn = alarm
            if self.quiet is not None and self.changed is not None:
                with self.changed:  # a settle notifies nobody: look again every 5 ms
                    while not self.quiet():
                        self.changed.wait(0.005)
            if due > self.clock.now():
                self.clock.advance(due - self.clock.now())
            fn()


class WatchedTimer:
    """A limiter ``Timer`` that never rings by itself: ``armed`` is set when a waiter first
    needs time to pass (so a test knows a call is waiting for room), and ``ring`` moves the
    clock to the latest alarm's time and rings them all."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.armed = threading.Event()
        self.alarms: list[tuple[float, Callable[[], None]]] = []
        self.on_arm: Callable[[], None] | None = None

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.alarms.append((self.clock.now() + delay, fn))
        self.armed.set()
        if self.on_arm is not None:
            self.on_arm()

    def ring(self) -> None:
        alarms, self.alarms = self.alarms, []
        for due, fn in alarms:
            if due > self.clock.now():
                self.clock.advance(due - self.clock.now())
            fn()
