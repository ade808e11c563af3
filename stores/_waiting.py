"""Letting go while waiting: a thread may hold a gate that other threads need (the actors'
turn gate: one turn's own work at a time), and every wait of a store runs inside
``waiting()``, which lets the calling thread's gate go for the wait and takes it back after.
A store whose every wait does so says ``lets_go_while_waiting = True``; the gate's owner
uses it only then.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Protocol

__all__ = ["Gate", "held_gate", "hold", "waiting"]


class Gate(Protocol):
    """What ``waiting`` needs of a held gate."""

    def let_go(self) -> None:
        """Release the gate (this thread holds it)."""
        ...

    def take_back(self) -> None:
        """Take the gate again, waiting for it."""
        ...


_local = threading.local()


def held_gate() -> Gate | None:
    """The gate this thread holds, or None."""
    return getattr(_local, "gate", None)


def hold(gate: Gate | None) -> None:
    """Record ``gate`` as the one this thread holds (None: none)."""
    _local.gate = gate


def waiting() -> contextlib.AbstractContextManager[None]:
    """``with waiting():`` marks the block as a wait: the calling thread's gate, if it holds
    one, is let go for it and taken back after (nothing is built when it holds none)."""
    gate = getattr(_local, "gate", None)
    return _NOTHING if gate is None else _LetGo(gate)


_NOTHING = contextlib.nullcontext()  # reusable: it holds nothing


class _LetGo:
    __slots__ = ("_gate",)

    def __init__(self, gate: Gate) -> None:
        self._gate = gate

    def __enter__(self) -> None:
        _local.gate = None
        self._gate.let_go()

    def __exit__(self, *exc: object) -> None:
        self._gate.take_back()
        _local.gate = self._gate
