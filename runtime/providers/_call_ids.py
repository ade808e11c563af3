"""Tool call ids as the HTTP providers take them, whoever made them.

A conversation keeps each call's id as its model gave it, and a conversation can move
between providers (a failover, another model, Bedrock's Claude then Anthropic's). The ids
one side makes, another refuses, and refuses on every later request of the conversation:

- Anthropic takes only ``[A-Za-z0-9_-]+`` and no id twice in one request
  (``tool_use.id: String should match pattern``, ``tool_use ids must be unique``): Bedrock's
  text calls are numbered per turn (``look_up#1``), compatible servers give ids such as
  ``functions.look_up:0`` or ``call_0`` again in every answer, or none.
- OpenAI's Chat Completions takes at most 40 characters (``string too long``): a
  compatible server's ``chatcmpl-tool-`` and a UUID is 46.

``wire_turns`` gives the turns each call's wire id, and each result its call's: the id
itself where it fits all of that and no earlier call of the request has it (the usual
case: the turns are returned as they were), else its allowed characters cut short and a
digest of the id and how often it came before. A call's wire id depends only on what
precedes it, so a request that extends another sends the same ids for the same calls
(the prompt's cached prefix holds), and a result, which follows its call, maps to the id
of the call it answers in the latest turn that called (two calls of one id there: the
first result the first, as the provider pairs them).
"""

from __future__ import annotations

import hashlib
import re
from collections import deque

import msgspec

from .._prepared import Turn
from ..blocks import ContentBlock, ToolResultBlock, ToolUseBlock

LIMIT = 40  # OpenAI's Chat Completions' longest call id
_FITS = re.compile(rf"[A-Za-z0-9_-]{{1,{LIMIT}}}")
_REFUSED = re.compile(r"[^A-Za-z0-9_-]")
_DIGEST = 12  # hex characters of the digest a renamed id ends in


def wire_turns(turns: list[Turn]) -> list[Turn]:
    """``turns`` with every tool call's and result's id as every HTTP provider takes it
    (``turns`` itself when each already does)."""
    calls = [b.id for turn in turns for b in turn.blocks if type(b) is ToolUseBlock]
    if all(map(_FITS.fullmatch, calls)) and len(set(calls)) == len(calls):
        return turns  # the usual case, in one pass (a result answers a call before it)
    taken: set[str] = set()  # the wire ids of the calls so far
    latest: dict[str, deque[str]] = {}  # a call id -> the wire ids of its latest turn's calls
    seen: dict[str, int] = {}  # a call id -> how many calls had it so far
    out: list[Turn] | None = None
    for at, turn in enumerate(turns):
        blocks: list[ContentBlock] | None = None
        calling = False  # this turn's first call starts the calls its results answer
        for index, block in enumerate(turn.blocks):
            if type(block) is ToolUseBlock:
                if not calling:
                    latest, calling = {}, True
                wire = _call(block.id, taken, seen)
                latest.setdefault(block.id, deque()).append(wire)
                if wire == block.id:
                    continue
                renamed: ToolUseBlock | ToolResultBlock = msgspec.structs.replace(block, id=wire)
            elif type(block) is ToolResultBlock:
                wires = latest.get(block.tool_use_id)  # in order: two calls of one id, two results
                wire = _answered(wires) if wires else _fitted(block.tool_use_id)
                if wire == block.tool_use_id:
                    continue
                renamed = msgspec.structs.replace(block, tool_use_id=wire)
            else:
                continue
            if blocks is None:
                blocks = list(turn.blocks)
            blocks[index] = renamed
        if blocks is not None:
            if out is None:
                out = list(turns)
            out[at] = msgspec.structs.replace(turn, blocks=blocks)
    return turns if out is None else out


def _call(call_id: str, taken: set[str], seen: dict[str, int]) -> str:
    """The wire id of the next call with ``call_id``, noted as taken."""
    count = seen.get(call_id, 0)
    seen[call_id] = count + 1
    wire = call_id if _FITS.fullmatch(call_id) and call_id not in taken else None
    while wire is None or wire in taken:
        wire = _renamed(call_id, count)
        count += 1  # another occurrence's digest, should two renamed ids meet
    taken.add(wire)
    return wire


def _answered(wires: deque[str]) -> str:
    """The wire id of the next call of ``wires`` a result answers (the last, once each
    has had one)."""
    return wires.popleft() if len(wires) > 1 else wires[0]


def _fitted(call_id: str) -> str:
    """A result's id with no call before it (the template refuses such a request)."""
    return call_id if _FITS.fullmatch(call_id) else _renamed(call_id, 0)


def _renamed(call_id: str, count: int) -> str:
    """``call_id``'s allowed characters, cut to leave room for a digest of it and ``count``."""
    text = f"{call_id}\0{count}".encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(text, digest_size=_DIGEST // 2).hexdigest()
    kept = _REFUSED.sub("_", call_id)[: LIMIT - _DIGEST - 1] or "call"
    return f"{kept}_{digest}"
