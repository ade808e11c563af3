"""The thinker: the job that drives turns over a conversation, as far as the service cares."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from loguru import logger

from parlour.runtime import ConversationContext, DeclaredTool, Depth, Grade, OutputSize, Transcript
from parlour.runtime.snapshots import MessageSnapshot


@runtime_checkable
class Thinker(Protocol):
    """What ``ConversationService`` needs of a job."""

    job_id: str
    user_id: str
    workflow_id: str
    grade: Grade | None
    depth: Depth | None
    output_declaration: OutputSize | int | None
    interactive: bool
    retain_duration: dt.timedelta

    @property
    def conversation_id(self) -> str: ...

    def mint_conversation_id(self) -> str: ...

    def set_conversation_id(self, conversation_id: str) -> None: ...

    def is_conversation_minted(self) -> bool: ...

    def build_tool_definition_blocks(self) -> Sequence[DeclaredTool]: ...

    def cancel_workflow(self, reason: str) -> None: ...


class BasicThinker:
    """A ready ``Thinker``: identity, declarations, a tool palette, a cancellation hook.

    Subclass it (the class name shapes minted ids) or use it as it is.
    """

    def __init__(
        self,
        user_id: str,
        *,
        job_id: str | None = None,
        workflow_id: str | None = None,
        tools: Sequence[DeclaredTool] = (),
        grade: Grade | None = None,
        depth: Depth | None = None,
        output_declaration: OutputSize | int | None = None,
        interactive: bool = False,
        retain_duration: dt.timedelta = dt.timedelta(minutes=5),
    ) -> None:
        drawn = secrets.token_hex(14)  # one draw for both ids: each is a syscall
        self.job_id = job_id or f"{type(self).__name__}-{drawn[:4]}-{drawn[4:16]}"
        self.user_id = user_id
        self.workflow_id = workflow_id or f"wf-{drawn[16:]}"
        self.grade = grade
        self.depth = depth
        self.output_declaration = output_declaration
        self.interactive = interactive
        self.retain_duration = retain_duration
        self.tools = list(tools)
        self.cancelled: str | None = None
        self._kept: list[MessageSnapshot] | None = None
        self._conversation_id: str | None = None
        self._minted = False

    @property
    def conversation_id(self) -> str:
        """The minted or adopted id; else the job id (a temporary conversation)."""
        return self._conversation_id or self.job_id

    def mint_conversation_id(self) -> str:
        """A new durable identity, e.g. ``ChatThinker-conv-a26f-52b01fa3bd75``."""
        drawn = secrets.token_hex(8)
        self._conversation_id = f"{type(self).__name__}-conv-{drawn[:4]}-{drawn[4:]}"
        self._minted = True
        return self._conversation_id

    def set_conversation_id(self, conversation_id: str) -> None:
        """Adopt an existing conversation: obtaining it fails if no store holds it."""
        self._conversation_id = conversation_id
        self._minted = False

    def is_conversation_minted(self) -> bool:
        return self._minted

    def build_tool_definition_blocks(self) -> Sequence[DeclaredTool]:
        return self.tools

    def cancel_workflow(self, reason: str) -> None:
        self.cancelled = reason

    def keep_transcript(self, messages: Sequence[MessageSnapshot]) -> None:
        """Called by the service in the releasing thread with the conversation's messages
        as they were at release (frozen snapshots: later edits cannot leak in)."""
        self._kept = list(messages)

    def transcript(self) -> str | None:
        """The conversation as it was at this thinker's last release, for a reader other
        than the model; None before the thinker has run."""
        if self._kept is None:
            return None
        return Transcript.render_messages(s.to_message(None) for s in self._kept)


def keep_transcript(thinker: Thinker, kept: list[MessageSnapshot]) -> None:
    """Hand ``kept`` to the thinker's ``keep_transcript`` hook, if it has one; a raising
    hook is logged."""
    keep = getattr(thinker, "keep_transcript", None)
    if keep is None:
        return
    try:
        keep(kept)
    except Exception:  # a hook never stops the handoff, which has already happened
        logger.exception("keep_transcript failed for job {}", thinker.job_id)


def transcript_of(context: ConversationContext) -> list[MessageSnapshot]:
    """The conversation as it is: the memoized snapshot first (one attribute read per
    message unchanged since the last save), built only for a changed one."""
    of = MessageSnapshot.of
    return [m._snapshot or of(m) for m in context.messages]
