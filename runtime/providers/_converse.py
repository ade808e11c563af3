"""The Converse wire form: the request builder and the text envelope of tool calls.

Converse takes no native tools here (parlour speaks its text tool dialect on Bedrock), so
tool traffic is text both ways: definitions and results are written as text, and calls are
parsed out of the answer's ``tool_calls`` envelope. The builder also keeps Converse's own
rules: roles alternate starting with a user turn, no blank text, document names of its
allowed characters and formats of its ``DocumentFormat`` enum, and over a whole request
at most five documents, no two of one name, text beside every document; at most twenty
images a message.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any

from .._prepared import Turn
from .._roles import TurnRole
from ..blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    ReasoningBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinitionBlock,
    ToolResultBlock,
    ToolUseBlock,
    render_tool_text,
)
from ._shared import block_text, check_size, image_subtype, is_blank, system_texts
from ._template import WireRequest
from ._user_media import user_media

# What a history that opens with an assistant turn is preceded by (Converse refuses it).
DEFAULT_USER_OPENER = "Hello."
# Converse's DocumentFormat enum, by MIME type.
DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/x-markdown": "md",
}
# A document name may hold only alphanumerics, single whitespace, hyphens, parentheses and
# square brackets (a "." is refused).
_NAME_REFUSED = re.compile(r"[^A-Za-z0-9\s\-()\[\]]+")
# the most Converse takes of one image and of one document, in bytes
_IMAGE_LIMIT, _DOCUMENT_LIMIT = 3_750_000, 4_500_000
_DOCUMENTS, _IMAGES = 5, 20  # the most documents a request, and images a message, may hold
_ARGUMENT_KEYS = ("arguments", "input", "parameters")

Content = dict[str, Any]


# -- blocks --------------------------------------------------------------------------------------


def encode_block(block: ContentBlock, conversation_id: str | None = None) -> Content | None:
    """One block as a Converse content block; None for what the text dialect leaves out.

    Tool traffic travels as text: a definition by its ``render_tool_text``, a result as a
    labelled text. Calls, thinking and blank text have no block form here (a turn's calls
    are written by ``_assistant_content``).

    Raises:
        ValueError: an image or a file of a type Converse does not take.
    """
    match block:
        case ToolDefinitionBlock():
            return {"text": render_tool_text(block)}
        case ToolUseBlock() | ThinkingBlock() | RedactedThinkingBlock() | ReasoningBlock():
            return None
        case ToolResultBlock(tool_use_id=call_id, content=content, is_error=is_error):
            label = "Tool error" if is_error else "Tool result"
            return {"text": f"{label} for {call_id}: {content}"}
        case ImageBlock(data=data, mime_type=mime):
            image_format = image_subtype(mime, "Converse", conversation_id)
            raw = base64.b64decode(data)
            check_size(len(raw), _IMAGE_LIMIT, "Converse", "an image", conversation_id)
            return {"image": {"format": image_format, "source": {"bytes": raw}}}
        case FileBlock():
            return {"document": _document(block, conversation_id)}
        case _:
            text = block_text(block)
            return None if is_blank(text) else {"text": text}


def _document(block: FileBlock, conversation_id: str | None) -> Content:
    document_format = DOCUMENT_FORMATS.get(block.mime_type.lower())
    if document_format is None:
        raise ValueError(
            f"Conversation {conversation_id}: Converse takes documents as "
            f"{', '.join(sorted(set(DOCUMENT_FORMATS.values())))}, and file "
            f"{block.filename!r} is {block.mime_type}."
        )
    raw = base64.b64decode(block.data)
    check_size(len(raw), _DOCUMENT_LIMIT, "Converse", "a document", conversation_id)
    name = document_name(block.filename)
    return {"format": document_format, "name": name, "source": {"bytes": raw}}


def document_name(filename: str | None) -> str:
    """``filename`` in Converse's allowed characters: each refused run becomes one space,
    whitespace runs collapse; nothing left is ``document``."""
    name = " ".join(_NAME_REFUSED.sub(" ", filename or "").split())
    return name[:200] or "document"


# -- turns ---------------------------------------------------------------------------------------


def _assistant_content(turn: Turn, conversation_id: str | None) -> list[Content]:
    """The turn's content; calls its text does not already carry are written as the text
    envelope, and a turn of thinking alone as its reasoning: never nothing (a history
    first served natively reaches Converse whole)."""
    content = [c for c in (encode_block(b, conversation_id) for b in turn.blocks) if c]
    calls = [b for b in turn.blocks if isinstance(b, ToolUseBlock)]
    said = "".join(b.text for b in turn.blocks if isinstance(b, TextBlock))
    if calls and _signature(parse_tool_calls(said)) != _signature(calls):
        content.append({"text": _envelope(calls)})
    if not content:
        reasoning = [b for b in turn.blocks if isinstance(b, _REASONING)]
        if reasoning:
            text = "".join(_reasoning_text(b) for b in reasoning)
            content.append({"text": json.dumps({"reasoning": text or "(redacted)"})})
    return content


_REASONING = (ThinkingBlock, RedactedThinkingBlock, ReasoningBlock)


def _reasoning_text(block: ContentBlock) -> str:
    if isinstance(block, ThinkingBlock):
        return block.text
    return block.summary if isinstance(block, ReasoningBlock) else ""


def _signature(calls: list[ToolUseBlock]) -> list[tuple[str, Any]]:
    return [(c.name, _arguments(c.input_json)) for c in calls]


def _arguments(input_json: str) -> Any:
    try:
        return json.loads(input_json)
    except json.JSONDecodeError:
        return input_json


def _envelope(calls: list[ToolUseBlock]) -> str:
    entries = [{"id": c.id, "name": c.name, "input": _arguments(c.input_json)} for c in calls]
    return json.dumps({"tool_calls": entries})


def _messages(turns: list[Turn], conversation_id: str | None, opener: str) -> list[Content]:
    """Alternating messages starting with a user one: consecutive same-role turns become
    one message whose blocks keep their order; a turn with nothing to send is skipped."""
    messages: list[Content] = []
    for turn in turns:
        if turn.role is TurnRole.ASSISTANT:
            content = _assistant_content(turn, conversation_id)
        else:
            content = [c for c in (encode_block(b, conversation_id) for b in turn.blocks) if c]
        if not content:
            continue
        if messages and messages[-1]["role"] == turn.role.value:
            messages[-1]["content"].extend(content)
        else:
            messages.append({"role": turn.role.value, "content": content})
    if messages and messages[0]["role"] == TurnRole.ASSISTANT.value:
        messages.insert(0, {"role": TurnRole.USER.value, "content": [{"text": opener}]})
    _keep_documents_sendable(messages)
    for message in messages:  # the latest twenty images of each; each earlier one a note
        images = [c for c in message["content"] if "image" in c]
        for content in images[: max(0, len(images) - _IMAGES)]:
            content.clear()
            content["text"] = f"(An image was attached here; a message sends its latest {_IMAGES}.)"
    return messages


def _keep_documents_sendable(messages: list[Content]) -> None:
    """Hold Converse's rules for documents across the request, which it refuses otherwise
    (and would refuse every later request of the conversation): at most five documents
    (the latest; each earlier one goes as a note naming it), no two of one name (a later
    one is numbered: ``report pdf (2)``), and a message that holds a document holds text
    (its documents' names, where it had none)."""
    documents = [(m, c) for m in messages for c in m["content"] if "document" in c]
    used: set[str] = set()
    for order, (_, content) in enumerate(documents):
        name = base = content["document"]["name"]
        count = 1
        while name in used:
            count += 1
            name = base[: 200 - len(f" ({count})")].rstrip() + f" ({count})"
        used.add(name)
        content["document"]["name"] = name
        if order < len(documents) - _DOCUMENTS:  # a note in its place, as an image's
            content.clear()
            content["text"] = (
                f"(A document, {name}, was attached here; only the latest "
                f"{_DOCUMENTS} documents are sent.)"
            )
    for message in {id(m): m for m, _ in documents}.values():
        if not any("text" in c for c in message["content"]):
            names = [c["document"]["name"] for c in message["content"] if "document" in c]
            message["content"].append({"text": ", ".join(names)})


def build_converse_request(
    request: WireRequest, *, opener: str = DEFAULT_USER_OPENER
) -> dict[str, Any]:
    """The ``converse`` keyword arguments for ``request``.

    The objective, tool palette included, is the system blocks. Roles alternate, starting
    with a user turn: consecutive same-role turns are one message, and a history that opens
    with an assistant turn is preceded by a user ``opener``.

    Raises:
        ValueError: an image or a document of a type Converse does not take.
    """
    prepared = request.prepared
    params: dict[str, Any] = {
        "modelId": request.spec.id,
        "messages": _messages(user_media(prepared.turns), request.conversation_id, opener),
        "inferenceConfig": {"maxTokens": request.max_tokens},
    }
    if system := [{"text": text} for text in system_texts(prepared)]:
        params["system"] = system
    return params


# -- tool calls out of the answer text -----------------------------------------------------------


def _envelopes(text: str) -> Iterator[dict[str, Any]]:
    decoder = json.JSONDecoder()
    at = text.find("{")
    while at != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict):
            yield value
        at = text.find("{", end)


def parse_tool_calls(text: str) -> list[ToolUseBlock]:
    """The calls in the first JSON envelope of ``text`` holding a ``tool_calls`` list.

    A call without an id gets ``name#position`` (1-based, its place in the turn); a call
    that has an id keeps it. Entries without a name are skipped.
    """
    for envelope in _envelopes(text):
        calls = envelope.get("tool_calls")
        if isinstance(calls, list):
            return _to_blocks(calls)
    return []


def _to_blocks(calls: list[Any]) -> list[ToolUseBlock]:
    blocks: list[ToolUseBlock] = []
    for position, call in enumerate(calls, start=1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        arguments: Any = next((call[k] for k in _ARGUMENT_KEYS if k in call), {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        call_id = call.get("id") or f"{call['name']}#{position}"
        blocks.append(ToolUseBlock(id=str(call_id), name=call["name"], input_json=arguments))
    return blocks
