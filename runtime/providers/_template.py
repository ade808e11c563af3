"""The shared client template, the wire request it hands a dialect, and the normalized response.

Each provider dialect implements ``_send`` (and ``_stream`` when it can stream); everything
else lives here once: binding the conversation to a model, resolving the output budget and
the wire maximum, rendering, timing, the prefix-stability check, and the truncation and
refusal discipline. The offline ``ScriptedClient`` goes through the same template.
"""

from __future__ import annotations

import datetime as dt
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import cast

import msgspec

from .._context import ConversationContext
from .._handlers import ContentFormatter, GenericContentFormatter
from .._messages import OutgoingMessage
from .._pairing import check_rendered
from .._prepared import PreparedConversation, Turn
from .._roles import Depth, TurnRole
from ..blocks import ContentBlock
from ..errors import (
    IllegalStateError,
    OutputCeilingError,
    OutputTruncationRetry,
    ProviderRefusalError,
    UncorrectableLLMError,
)
from ..models._budget import ModelBinding, OutputDeclaration
from ..models._spec import ModelSpec
from ._image_size import check_sides
from ._prefix import PrefixMonitor
from ._response import LLMResponse, ResponseStream, StopReason
from ._workers import called_on, model_workers

TextCallback = Callable[[str], None]

__all__ = ["LLMClient", "ResponseStream", "TextCallback", "WireRequest"]


class WireRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a dialect needs to build one call, decided once by the template.

    ``max_tokens`` is the binding's ``output_reserve(spec)``: the exact wire maximum
    every dialect sends (``max_tokens``, ``max_completion_tokens``, ``maxTokens``).
    """

    prepared: PreparedConversation
    spec: ModelSpec
    depth: Depth
    output_budget: int
    max_tokens: int
    thinking_active: bool
    conversation_id: str | None = None
    # the most the provider may leave the call without a byte, where the SDK takes one (its
    # own default otherwise): the caller's model timeout, so a stalled call cannot outlast it
    timeout_s: float | None = None

    @property
    def thinking_budget(self) -> int:
        """The reasoning tokens this call books (0 when it books none)."""
        if not self.spec.thinking_mode.reasoning_reserved(self.depth):
            return 0
        return self.spec.get_thinking_budget(self.depth)


class LLMClient(ABC):
    """The template every client goes through: bind, budget, render, send, check, time.

    Args (for subclasses):
        spec: the model this client serves a conversation that has no resolved binding.
        depth, output_declaration: the declarations of the binding this client attaches to
            an unbound conversation that declares none itself. None for both means the seat
            must declare them, and a call without them raises ``UncorrectableLLMError``.

    Thread-safety: a client holds no per-call state, so one instance serves many threads;
    the prefix monitor's per-conversation records are written only by each conversation's
    owner.
    """

    formatter: ContentFormatter = GenericContentFormatter()
    _serves_any = False  # the scripted client stands in for any provider's model
    # (the name in messages, the most pixels on an image's side) where the provider refuses
    # larger ones; read from each image's header by ``check_attachments``
    image_sides: tuple[str, int] | None = None

    def __init__(
        self,
        spec: ModelSpec,
        *,
        depth: Depth | None = None,
        output_declaration: OutputDeclaration | None = None,
    ) -> None:
        self.spec = spec
        self.default_depth = depth
        self.default_output = output_declaration
        self.prefix_monitor = PrefixMonitor()

    @property
    def model_id(self) -> str:
        return self.spec.id

    @property
    def answers_inline(self) -> bool:
        """True when an answer takes no I/O and cannot block, so a turn may ask for it in
        its own thread: no model worker, no timeout to watch. False for every client that
        waits on a provider."""
        return False

    # -- the template --------------------------------------------------------------------------

    def respond(
        self,
        conversation: ConversationContext,
        thinking_active: bool | None = None,
        *,
        on_text: TextCallback | None = None,
        timeout_s: float | None = None,
    ) -> LLMResponse:
        """Ask the model for the next assistant turn of ``conversation``.

        The conversation is only read, except that an unbound one gets this client's
        binding and a truncation raises the sent message's ``requested_output_tokens``. The
        caller adds ``response.to_message()`` itself. With ``on_text`` the answer streams:
        each text delta is passed to it as it arrives, and the same response is returned.
        ``timeout_s`` bounds how long the provider may stay silent, where the SDK takes a
        per-request timeout (Anthropic, OpenAI); a call past it is a ``RetryableLLMError``.

        Raises:
            OutputTruncationRetry: truncated while a larger budget exists; retry as it is.
            OutputCeilingError: truncated at the model's own ceiling.
            ProviderRefusalError: the provider refused to answer.
            RetryableLLMError: rate limit, overload or timeout (after the SDK's own retries).
            UncorrectableLLMError: nothing declares an output size or depth, a bad request,
                failed authentication.
        """
        request = self.build_request(conversation, thinking_active)
        if timeout_s is not None:
            request = msgspec.structs.replace(request, timeout_s=timeout_s)
        start = _now()
        return self._finish(conversation, request, self._send_with(request, on_text), start)

    async def arespond(
        self,
        conversation: ConversationContext,
        thinking_active: bool | None = None,
        *,
        on_text: TextCallback | None = None,
    ) -> LLMResponse:
        """``respond`` for asyncio code: the same request, checks and errors.

        Clients over an async SDK (Anthropic, OpenAI) never leave the event loop, and call
        ``on_text`` on it. The default, for a blocking SDK (boto3), sends on the loop's
        default executor so the loop is never blocked; ``on_text`` is then called from that
        worker thread while the coroutine waits. The conversation is only touched by the
        awaiting owner, as with ``respond``.

        Raises:
            The same as ``respond``.
        """
        request = self.build_request(conversation, thinking_active)
        start = _now()
        response = await self._asend(request, on_text)
        return self._finish(conversation, request, response, start)

    def stream(
        self, conversation: ConversationContext, thinking_active: bool | None = None
    ) -> ResponseStream:
        """Like ``respond``, as an iterator of the answer's text deltas; the response is
        ``stream.response`` once iteration ends (it raises what ``respond`` raises)."""
        request = self.build_request(conversation, thinking_active)
        start = _now()
        return ResponseStream(
            self._stream(request),
            lambda response: self._finish(conversation, request, response, start),
        )

    def build_request(
        self, conversation: ConversationContext, thinking_active: bool | None = None
    ) -> WireRequest:
        """Bind, resolve the budget and the wire maximum, render, check the tool pairing and
        the prefix.

        Raises:
            UnpairedToolCallError: a tool call without its result, or a result without its
                call (nothing is sent).
            UncorrectableLLMError: nothing declares an output size or a depth, or the
                conversation is bound to another provider's model.
        """
        binding = self._bind(conversation)
        spec = binding.get_model()
        depth = binding.resolve_depth()
        budget = binding.budget_on(spec)  # before the render appends anything
        max_tokens = binding.reserve_for(spec, budget, depth)  # output_reserve, resolved once
        active = (
            spec.thinking_mode.thinking_active(spec, depth)
            if thinking_active is None
            else thinking_active
        )
        prepared = conversation.prepare_messages_for_llm(self.formatter, active)
        cid = conversation.conversation_id
        check_rendered(prepared.turns, cid, conversation._settled_turns)  # before any send
        native = self.formatter.supports_native_tool_calling()
        self.prefix_monitor.check(spec.id, conversation.conversation_id, prepared, native)
        return WireRequest(
            prepared=prepared,
            spec=spec,
            depth=depth,
            output_budget=budget,
            max_tokens=max_tokens,
            thinking_active=active,
            conversation_id=conversation.conversation_id,
        )

    def reservation(self, conversation: ConversationContext) -> tuple[ModelSpec, int]:
        """The model the next call of ``conversation`` goes to and its output reserve: the
        exact wire maximum ``respond`` sends next, for a rate limiter to book (binding an
        unbound conversation as ``respond`` does; nothing else changes).

        Raises:
            UncorrectableLLMError: as ``build_request``.
        """
        binding = self._bind(conversation)
        spec = binding.get_model()
        return spec, binding.reserve_for(spec, binding.budget_on(spec), binding.resolve_depth())

    def preview(
        self, conversation: ConversationContext, thinking_active: bool | None = None
    ) -> WireRequest:
        """The request ``respond`` would send for ``conversation`` now, built on a copy.

        Nothing of ``conversation`` changes: no freeze, no binding, no announcement
        appended, no prefix record. The copy shares the messages (their response handlers
        included) and renders as the original would: frozen when it is frozen.

        Raises:
            UncorrectableLLMError: as ``build_request``.
        """
        return self.build_request(_render_copy(conversation), thinking_active)

    def bind(self, conversation: ConversationContext) -> None:
        """Give an unbound ``conversation`` this client's binding, as ``respond`` does at its
        first call; a bound one is left as it is (``respond`` checks it). A caller that saves
        before that call binds first: the save records the model that will answer
        (``prior_spec_id``), so the call changes nothing the next save must write again."""
        if conversation.model_binding is None:
            self._bind(conversation)

    def _bind(self, conversation: ConversationContext) -> ModelBinding:
        """The conversation's binding, resolved: as it was, else on this client's spec (an
        unbound conversation gets a binding of this client's defaults)."""
        binding = conversation.model_binding
        if binding is None:
            binding = ModelBinding(self.spec.grade, self.default_depth, self.default_output)
            conversation.set_model_binding(binding)
        spec = binding.spec
        if spec is None:
            binding.resolve(self.spec)
        elif spec.provider not in (self.spec.provider, "scripted") and not self._serves_any:
            raise UncorrectableLLMError(
                f"Conversation {conversation.conversation_id} is bound to {spec.id} "
                f"({spec.provider}); this client speaks {self.spec.provider}."
            )
        return binding

    def _finish(
        self,
        conversation: ConversationContext,
        request: WireRequest,
        response: LLMResponse,
        start: dt.datetime,
    ) -> LLMResponse:
        response.start_time = start
        response.end_time = _now()
        response.requested_output_tokens = request.max_tokens
        if response.stop_reason is StopReason.CONTENT_FILTERED:
            raise ProviderRefusalError(
                request.spec.id, response.refusal_category, response.refusal_explanation
            )
        if _truncated(response, request):
            _escalate(conversation, request)
        return response

    def check_attachments(
        self, blocks: Sequence[ContentBlock], conversation_id: str | None = None
    ) -> None:
        """Refuse, before they enter a conversation, the blocks a user's message would carry
        that this client's provider cannot take: an image or a file of a type it lacks, or
        past its size, or an image past its pixels on a side (``image_sides``). Stored,
        such a block would fail every later request of the conversation. The dialect's own
        encoder decides the rest (``encode`` of a request holding them alone); a client
        without one (the scripted model) takes anything.

        Raises:
            ValueError: a block the provider cannot take, naming the conversation and why.
        """
        if not blocks:
            return
        turn = Turn(role=TurnRole.USER, blocks=list(blocks))
        self.encode(
            WireRequest(
                prepared=PreparedConversation(system_text="", turns=[turn]),
                spec=self.spec,
                depth=Depth.IMMEDIATE,
                output_budget=1,
                max_tokens=1,
                thinking_active=False,
                conversation_id=conversation_id,
            )
        )
        if self.image_sides is not None:
            check_sides(blocks, *self.image_sides, conversation_id)

    # -- the dialect ---------------------------------------------------------------------------

    def encode(self, request: WireRequest) -> object:
        """The call's body for ``request`` in this client's dialect; None for a client that
        sends none (the scripted model)."""
        return None

    @abstractmethod
    def _send(self, request: WireRequest) -> LLMResponse:
        """Send one request in this client's dialect; map SDK errors at the seam."""

    async def _asend(self, request: WireRequest, on_text: TextCallback | None) -> LLMResponse:
        """Send for ``arespond``; this default runs the blocking send on a model worker
        (never a cap, as the loop's default executor would be)."""
        send = functools.partial(self._send_with, request, on_text)
        return cast(LLMResponse, await called_on(model_workers, send))

    def _send_with(self, request: WireRequest, on_text: TextCallback | None) -> LLMResponse:
        """Send once; with ``on_text``, over the stream, passing it each delta."""
        if on_text is None:
            return self._send(request)
        for chunk in self._stream(request):
            if isinstance(chunk, str):
                on_text(chunk)
            else:
                return chunk
        raise IllegalStateError(f"The stream of {request.spec.id} ended without a response.")

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        """Yield the answer's text deltas, then the complete response. The default sends
        once and yields the whole text; dialects that can stream override it."""
        response = self._send(request)
        if response.text:
            yield response.text
        yield response


def _render_copy(conversation: ConversationContext) -> ConversationContext:
    copy = conversation.to_snapshot().to_conversation()
    copy.messages = list(conversation.messages)  # the same messages, handlers and all
    copy.conversation_id = None  # anonymous: no prefix record is read or written
    binding = conversation.model_binding
    if binding is not None:
        copy.set_model_binding(
            ModelBinding(binding.grade, binding.depth, binding.output_declaration, binding.spec)
        )
    if conversation.is_frozen():
        # A restored copy is unfrozen; the original's next render is a frozen one (late tools
        # announced in the stream, not joining the head), so the copy must render frozen too.
        copy._objective.freeze()
    return copy


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _truncated(response: LLMResponse, request: WireRequest) -> bool:
    if response.stop_reason is StopReason.MAX_TOKENS:
        return True
    # The backstop: an unknown stop reason whose output filled the wire maximum.
    return (
        response.stop_reason is StopReason.UNKNOWN
        and response.usage.output_tokens >= request.max_tokens
    )


def _escalate(conversation: ConversationContext, request: WireRequest) -> None:
    """Raise the sent message to the ceiling and signal a retry, while a larger budget
    exists; at the ceiling the model's own limit refused the answer."""
    ceiling = request.spec.max_output_tokens
    if request.output_budget >= ceiling:
        raise OutputCeilingError(request.spec.id, ceiling)
    sent = conversation.messages[-1] if conversation.messages else None
    if not isinstance(sent, OutgoingMessage):
        raise UncorrectableLLMError(
            f"Model {request.spec.id} truncated its answer at {request.output_budget} tokens "
            "and the conversation has no outgoing message to carry a larger budget."
        )
    sent.requested_output_tokens = ceiling
    raise OutputTruncationRetry(request.output_budget, ceiling)
