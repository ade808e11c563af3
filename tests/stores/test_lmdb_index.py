"""The checks and the owner index a save passes through: a remembered id answers as a fresh
check does; a save at an unchanged time leaves the user's listing exactly one entry per
conversation, in order."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parlour.runtime import ConversationContext
from parlour.stores import LmdbStore, _ids


def _answer(check: object, value: object) -> object:
    try:
        return check(value)  # type: ignore[operator]
    except ValueError as exc:
        return str(exc)


@given(st.one_of(st.text(max_size=600), st.integers(), st.none(), st.binary(max_size=8)))
def test_an_id_checked_before_answers_as_it_did_the_first_time(value: object) -> None:
    for check in (_ids.conversation_key, _ids.user_key):
        first = _answer(check, value)
        assert _answer(check, value) == first
        if isinstance(first, bytes):
            assert isinstance(value, str) and first == value.encode()


def test_the_remembered_ids_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ids, "_CHECKED_MOST", 8)
    for n in range(50):
        assert _ids.conversation_key(f"c{n}") == f"c{n}".encode()
    assert len(_ids._conversation_keys) <= 8


def test_saves_at_one_unchanging_time_keep_one_listing_entry_each(tmp_path: Path) -> None:
    moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with LmdbStore(tmp_path, now=lambda: moment) as store:
        versions = {}
        for cid in ("a", "b"):
            c = ConversationContext(cid, user_id="alice")
            c.add_user_message(f"{cid} first")
            versions[cid] = store.create_context(c.to_snapshot(), "alice")
            for turn in range(3):
                c.add_user_message(f"{cid} turn {turn}")
                c.stored_version = versions[cid]
                versions[cid] = store.save_context(c.to_snapshot(), "alice")
        listed = store.list_conversations("alice")
        assert [s.conversation_id for s in listed] == ["a", "b"]  # same time: by id
        assert versions == {"a": 4, "b": 4}
        assert store.delete("a", "alice")
        assert [s.conversation_id for s in store.list_conversations("alice")] == ["b"]
