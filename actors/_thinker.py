"""The thinker: the job that drives turns over a conversation, as far as the service cares.

Beside it, what the service's ``join`` and ``offer`` need of a thinker hosting a running
turn (``Joinable``) and the base of the events such a turn streams (``Event``): the service
finds the owning thinker and asks it, knowing nothing of the agent that implements both.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Protocol, runtime_checkable

import msgspec
from loguru import logger

from parlour.runtime import DeclaredTool, Depth, Grade, OutputSize, Transcript
from parlour.runtime.snapshots import MessageSnapshot


class _Draws:
    """Random hex digits for minted ids, from the operating system's CSPRNG (``os.urandom``,
    what ``secrets`` uses) 4 KiB at a time, in slots of 16 bytes. Each ``os.urandom`` is a
    system call that lets the interpreter lock go; with other threads waiting for it, taking
    it back costs a context switch, which on a busy service cost more than the rest of
    minting (measured: restores on 8 threads about a fifth faster drawing once per 256
    thinkers). No lock either: a slot is the next number of the pool's own counter
    (``next`` is atomic), so no two draws share one, and a pool drawn dry is replaced
    whole. A forked child starts with an empty pool, so it never repeats its parent's.

    Thread-safety: ``hex`` from any thread.
    """

    SLOT = 16
    _POOL = 4096
    _state: tuple[bytes, Iterator[int]]  # a pool and the counter of its slots

    def __init__(self) -> None:
        self.clear()

    def hex(self, size: int) -> str:
        """``size`` (at most ``SLOT``) random bytes as ``2 * size`` hex digits, drawn once."""
        while True:
            pool, slots = self._state  # one read: a pool and its own counter
            at = next(slots) * self.SLOT
            if at + self.SLOT <= len(pool):
                return pool[at : at + size].hex()
            self._state = (os.urandom(self._POOL), itertools.count())

    def clear(self) -> None:
        self._state = (b"", itertools.count())


_draws = _Draws()
if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_draws.clear)


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


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event a turn streams: a frozen msgspec struct whose subclasses each
    declare their wire tag (``{"type": <tag>, "seq": <n>, ...}``).

    Attributes:
        seq: the event's place in its turn, 1, 2, 3... in the order the turn published its
            events; a follower that has seen up to ``seq`` resumes after it
            (``ConversationService.join(..., after=seq)``). 0 on an event no turn has
            published, and in a wire form from before events were numbered.
        turn: the id of the turn that published it ("" where ``seq`` is 0): a resumed
            turn keeps its id, so a follower tells one turn's events from the next's.
    """

    seq: int = 0
    turn: str = ""


@runtime_checkable
class Joinable(Protocol):
    """A thinker hosting a running turn that others may follow and offer messages to (the
    agent's ``AgentThinker``); what ``ConversationService.join`` and ``offer`` ask of the
    conversation's owning thinker. A thinker without both methods is never joined.
    """

    def follow(self, after: int | None = None) -> AsyncGenerator[Event, None]:
        """The running turn's events: with ``after`` None, from now on, headed by its text
        so far; else every event numbered above ``after``, those already published first
        (each once, in order). The iteration ends with the turn, at once when none runs.
        Iterated on any event loop; a follower that stops early closes it (``aclose``),
        which stops the feed."""
        ...

    def offer(self, text: str) -> bool:
        """Hand ``text`` to the running turn for its next boundary; False when none runs
        or it takes no more (any thread)."""
        ...


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
        drawn = _draws.hex(14)  # both ids from one draw
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
        drawn = _draws.hex(8)
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
