"""Time as a seam: everything that expires reads a ``Clock``, so tests never sleep."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()
