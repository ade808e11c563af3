"""Turn roles: user and assistant, matched ignoring case; anything else is refused with
the message that says where system content goes."""

from __future__ import annotations

import pytest

from parlour.runtime import (
    TurnRole,
)
from parlour.runtime.errors import UncorrectableLLMError


def test_turn_role_has_two_members_and_matches_ignoring_case() -> None:
    assert [r.name for r in TurnRole] == ["USER", "ASSISTANT"]
    assert TurnRole.of("user") is TurnRole.USER
    assert TurnRole.of("Assistant") is TurnRole.ASSISTANT


@pytest.mark.parametrize("role", ["system", "tool", None])
def test_turn_role_refuses_anything_else_saying_where_system_content_goes(role: str | None) -> None:
    with pytest.raises(UncorrectableLLMError) as raised:
        TurnRole.of(role)
    assert str(raised.value) == (
        f"Message role '{role}' is not a conversation turn. Turns are user or assistant; "
        "system content goes through the main objective."
    )
