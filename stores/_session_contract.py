"""The ``SessionStore`` conformance suite (re-exported by ``parlour.stores.testing``): what
every session cache promises, as pytest tests. A cache runs it by subclassing
``SessionStoreContract`` with a ``session`` fixture. A cache may drop any entry at any
time, so a get may always miss; what it returns must be the newest put, of the asking user.
"""

from __future__ import annotations

import pytest

from ._contract import snapshot
from ._protocols import SessionStore


class SessionStoreContract:
    """The suite. Subclass it with a ``session`` fixture."""

    @pytest.fixture
    def session(self) -> SessionStore:
        raise NotImplementedError("A SessionStoreContract subclass provides the session fixture.")

    def test_its_capability_is_declared_as_a_bool_and_it_is_a_session_store(
        self, session: SessionStore
    ) -> None:
        assert type(session.lets_go_while_waiting) is bool
        assert isinstance(session, SessionStore)

    def test_a_get_answers_the_newest_put_or_nothing(self, session: SessionStore) -> None:
        first, newer = snapshot(text="first"), snapshot(text="newer", version=1)
        session.put(first)
        assert session.get("c1", "alice") in (None, first)
        session.put(newer)
        assert session.get("c1", "alice") in (None, newer)

    def test_another_users_get_misses(self, session: SessionStore) -> None:
        session.put(snapshot())
        assert session.get("c1", "mallory") is None

    def test_a_deleted_entry_misses_and_others_stay_as_they_were(
        self, session: SessionStore
    ) -> None:
        kept = snapshot("c2")
        session.put(snapshot())
        session.put(kept)
        session.delete("c1")
        session.delete("never-put")
        assert session.get("c1", "alice") is None
        assert session.get("c2", "alice") in (None, kept)
