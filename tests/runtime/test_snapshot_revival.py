"""A restored message is the message its constructor would make, slot for slot; a
hand-built snapshot the constructor would refuse is refused on restore too."""

from __future__ import annotations

import msgspec
import pytest

from parlour.runtime import IncomingMessage, Message, OutgoingMessage
from parlour.runtime import blocks as b
from parlour.runtime.snapshots import MessageSnapshot, decode_message_snapshot

_MEMOS = {"_snapshot", "_turn", "_tokens"}  # derived from the message, not given to it


def _made() -> list[Message]:
    return [
        OutgoingMessage("plain ascii question"),
        OutgoingMessage("café, naïve: ünïcode", role="user", cache=True),
        IncomingMessage(blocks=[b.TextBlock(text="an answer")], requested_output_tokens=512),
        IncomingMessage("réponse", compactable=False, app_authored=True),
        Message("system-note", None, [b.TextBlock(text="ünïcode block")]),
    ]


def _slots(message: Message) -> set[str]:
    """Every slot of ``message``'s class, its bases' included: whatever a later change adds."""
    return {n for k in type(message).__mro__ for n in getattr(k, "__slots__", ())} - {"__weakref__"}


@pytest.mark.parametrize("index", range(5))
def test_a_restored_message_has_every_slot_its_constructor_gives(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two constructors (``Message.__init__`` and the restore's ``stored_message``) set
    the same slots to the same values: a slot added to one and not the other fails here,
    whichever one it was added to, and whatever its name."""
    made = _made()[index]
    assert {slot: getattr(made, slot) for slot in _MEMOS} == dict.fromkeys(_MEMOS)
    stored = MessageSnapshot.of(made)
    decoded = decode_message_snapshot(msgspec.json.encode(stored), "conversation-1")

    def no_constructor(*args: object, **kwargs: object) -> None:
        raise AssertionError("a valid record is restored without the constructor")

    with monkeypatch.context() as patched:  # so what is checked is the restore's own path
        patched.setattr(Message, "__init__", no_constructor)
        revived = decoded.to_message(None)
    assert type(revived) is type(made)
    slots = _slots(made)
    assert "response_handler" in slots or type(made) is Message  # the channels' own slot
    unset = {s for s in slots if not hasattr(made, s)} | {
        s for s in slots if not hasattr(revived, s)
    }
    assert unset == set()  # a slot one constructor forgot is unset on its message
    for slot in slots - _MEMOS - {"blocks"}:
        assert getattr(revived, slot) == getattr(made, slot), slot
    assert list(revived.blocks) == list(made.blocks)
    assert (revived._turn, revived._tokens) == (None, None)
    assert revived.raw_content == made.raw_content
    if isinstance(made, (OutgoingMessage, IncomingMessage)):
        assert isinstance(revived, (OutgoingMessage, IncomingMessage))
        assert revived.response_handler is None
    # the block list still hears changes: an added block forgets the memoized snapshot
    assert MessageSnapshot.of(revived) is decoded
    revived.add_text("more")
    assert MessageSnapshot.of(revived) is not decoded
    with pytest.raises(ValueError):
        revived.blocks.append("not a block")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "fields",
    [
        {"role": 7},
        {"role": "us\ud800er"},
        {"raw_content": "lone \udc00 surrogate"},
        {"compactable": 1},
        {"cache": "yes"},
        {"requested_output_tokens": 1.5},
    ],
)
def test_a_hand_built_snapshot_the_constructor_refuses_is_refused_on_restore(
    fields: dict[str, object],
) -> None:
    base: dict[str, object] = {"direction": "outgoing", "role": "user", "blocks": []}
    snapshot = MessageSnapshot(**{**base, **fields})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        snapshot.to_message(None)
