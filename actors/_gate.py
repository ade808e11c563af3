"""The turn gate: one turn's own work at a time in a process, each turn letting it go
whenever it waits.

Why: a turn is Python work under the interpreter lock with short waits between (its
durable commit, the fsync). With many turns in threads at once, every LMDB call and lock
lets the interpreter lock go, and another turn's thread takes it for a slice of its own
work: the turns interleave in small pieces, and a commit's leader is kept from finishing
its batch while the others' writers wait on it. Measured (``benchmarks/turns.py --case
default``: 8 threads, fsync'd): the agent path 1,880 -> 2,310 turns/s gated, p50 4.2 ->
3.4 ms; the bare service path 2,350 -> 3,170.
Gated, the other turns' threads wait on the gate, not for the interpreter lock, so a
turn's work runs whole until it waits, and they take turns at its waits.

A gated turn lets the gate go for every wait: the store's (``parlour.stores._waiting``:
the wait for its commit, the fsync, a close), a lease held by another owner, a model call
on a worker, tools, a retry's pause, a compaction, the ``before_model_call`` hook, and
``ConversationService.stop`` (which waits for the owners' turns). A thread waiting for the
gate holds nothing another thread needs, except the commit lock of a leader taking the
gate back after its fsync, which only ``close`` waits for (and lets the gate go first);
what a gated turn waits for without letting go (an actor's answer, a release) is a
handler's work, and handlers never wait for the gate. So gated turns never wait on one
another in a cycle.

The gate is used only where it pays and is safe: a sync ``send`` on a store whose waits
let it go (``lets_go_while_waiting``), with the interpreter lock in force (a free-threaded
build runs turns in parallel instead) and more than one CPU to run on (decided when the
chat is made). Any code that runs turns in threads may hold it the same way
(``with turn_gate.held(): ...``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from contextlib import AbstractContextManager

from parlour.stores import PersistentStore, SessionStore
from parlour.stores._waiting import held_gate, hold, waiting

__all__ = ["TurnGate", "turn_gate", "waiting"]


class TurnGate:
    """A lock a turn holds for its own work and lets go while it waits.

    Thread-safety: any thread; a thread holds the gate at most once (``held`` inside a
    held gate is a no-op, so a turn run from within a turn's tool does not wait for itself).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holding = _Holding(self)  # no state of its own: one serves every thread

    def let_go(self) -> None:
        self._lock.release()

    def take_back(self) -> None:
        self._lock.acquire()

    def is_held(self) -> bool:
        """True while some thread holds it."""
        return self._lock.locked()

    def held(self) -> AbstractContextManager[None]:
        """Hold the gate for the block (waiting for it first), except while the block waits
        inside ``waiting()``; a no-op in a thread that holds it already. Use it at once
        (``with gate.held():``)."""
        return _ALREADY if held_gate() is not None else self._holding


class _Holding:
    """The hold of ``TurnGate.held``: a plain class, not a generator (it is taken every
    gated turn), and stateless, so one per gate serves every thread."""

    __slots__ = ("_gate",)

    def __init__(self, gate: TurnGate) -> None:
        self._gate = gate

    def __enter__(self) -> None:
        self._gate._lock.acquire()
        hold(self._gate)

    def __exit__(self, *exc: object) -> None:
        hold(None)
        self._gate._lock.release()


_ALREADY = contextlib.nullcontext()  # reusable: it holds nothing


turn_gate = TurnGate()  # the process's: every gated turn shares it


def gating(store: PersistentStore | None, session: SessionStore | None) -> bool:
    """Whether turns on a service with ``store`` and ``session`` should be gated: each
    lets the gate go while it waits (or there is none), the interpreter lock is on, and
    the process may run on more than one CPU (on one, the interpreter lock already changes
    hands without waking another CPU, and the gate's own hand-offs cost more than they
    save: measured 2,290 free against 2,190 gated turns/s under ``one_core``)."""
    if not getattr(sys, "_is_gil_enabled", lambda: True)() or _cpus() < 2:
        return False
    return (store is None or store.lets_go_while_waiting) and (
        session is None or session.lets_go_while_waiting
    )


def _cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
