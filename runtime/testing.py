"""Test doubles shipped with the library, so applications test their agents the same way.

``ScriptedClient`` is the offline model; ``FakeClock`` is a clock tests advance by hand.
"""

from __future__ import annotations

from parlour.runtime._scripted import ScriptedClient

__all__ = ["FakeClock", "ScriptedClient"]


class FakeClock:
    """A clock that moves only when told to. Thread-safe for reads (a float attribute)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
