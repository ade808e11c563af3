"""An actor's stop: the flag its refs read (``actor_stopped``) and what its mailbox keeps
of it once it stopped."""

from __future__ import annotations

import threading

__all__ = ["Stopped", "Tombstone"]

_MAKING = threading.Lock()  # a Stopped's condition is made once, under it


class Stopped(threading.Event):
    """An actor's ``actor_stopped``: ``threading.Event``, its condition made only when a
    thread first waits (restores start thousands of actors a second; nearly nobody waits
    for one to stop)."""

    def __init__(self) -> None:  # no Event.__init__: no condition yet
        self._flag = False
        self._cond: threading.Condition | None = None

    def set(self) -> None:
        self._flag = True  # before the condition is read: a waiter that makes it sees this
        cond = self._cond
        if cond is not None:
            with cond:
                cond.notify_all()

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        with _MAKING:
            if self._cond is None:
                self._cond = threading.Condition(threading.Lock())
            cond = self._cond
        with cond:
            return cond.wait_for(lambda: self._flag, timeout)


class Tombstone:
    """What a stopped actor's mailbox holds instead of the actor: its name and its stop
    flag, enough to answer late messages, and no reference back to the actor (whose own
    references to its mailbox and ref would otherwise make a cycle that only the cycle
    collector frees, with the actor's conversation in it)."""

    __slots__ = ("actor_ref", "actor_stopped")

    def __init__(self, name: str, stopped: threading.Event) -> None:
        self.actor_ref, self.actor_stopped = name, stopped

    def __str__(self) -> str:
        return self.actor_ref
