"""The named databases of an LmdbStore environment, apart from the layout that opens them, so
the record modules can name them without importing the layout."""

from __future__ import annotations

from typing import Any, NamedTuple

NAMES = (
    b"heads",
    b"bodies",
    b"messages",
    b"owners",
    b"tombstones",
    b"meta",
    b"quarantine",
    b"versions",
    b"chains",
    b"usage",
)


class Databases(NamedTuple):
    """The named databases of one environment.

    heads, bodies, messages, usage: a conversation's records (see ``_records``); owners:
    user id -> sorted duplicates of (order, conversation id), the owner index; tombstones:
    a deleted id -> the last version it had; meta: the layout version; quarantine: damaged
    records; versions: the version history (see ``_versions``); chains: where stores written
    before kept the history's chain (the header holds it now), only dropped.
    """

    heads: Any
    bodies: Any
    messages: Any
    owners: Any
    tombstones: Any
    meta: Any
    quarantine: Any
    versions: Any
    chains: Any
    usage: Any
