"""Turn roles and the seat's declaration enums."""

from __future__ import annotations

import enum

from .errors import UncorrectableLLMError


class TurnRole(enum.Enum):
    """The only two roles a turn can have; system content is structurally not a turn."""

    USER = "user"
    ASSISTANT = "assistant"

    @classmethod
    def of(cls, role: str | None) -> TurnRole:
        """Map a message's role string to a turn role, ignoring case.

        Raises:
            UncorrectableLLMError: for anything but user or assistant; never relabels.
        """
        if role is not None:
            member = _ROLES.get(role.lower())
            if member is not None:
                return member
        raise UncorrectableLLMError(
            f"Message role '{role}' is not a conversation turn. Turns are user or assistant; "
            "system content goes through the main objective."
        )


_ROLES = {"user": TurnRole.USER, "assistant": TurnRole.ASSISTANT}


class Grade(enum.Enum):
    """Which model a seat asks for, by capability."""

    SMALL = "small"
    MEDIUM = "medium"
    LARGE = "large"
    MEGA = "mega"


class Depth(enum.Enum):
    """How much effort (thinking) a seat asks for."""

    IMMEDIATE = "immediate"
    STANDARD = "standard"
    THOROUGH = "thorough"
    ULTRA_THOROUGH = "ultra_thorough"


class OutputSize(enum.Enum):
    """How much answer a seat asks for, as a rung the model catalog translates to tokens."""

    VERDICT = "verdict"
    COMPACT = "compact"
    STANDARD = "standard"
    EXTENDED = "extended"
    MAX = "max"


class Input(enum.Enum):
    """Inputs beyond text that a conversation carries."""

    IMAGES = "images"
    DOCUMENTS = "documents"
