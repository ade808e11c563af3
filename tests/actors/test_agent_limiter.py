"""The model-call limiter under the agent host: many chats on threads and a loop held to a
provider's limits, waits given up by a force release or a cancellation, bookings no
bucket could hold, the catalog's limits, and the booking against the wire's max_tokens."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from parlour.actors import Agent, ConversationService, TurnCancelledError
from parlour.actors.tuning import (
    BookingTooLargeError,
    Limiter,
    follow_catalog_limits,
    limiter_for,
    limits_for,
    set_model_limits,
)
from parlour.runtime import (
    ConversationContext,
    Depth,
    LLMResponse,
    ModelBinding,
    ModelCatalog,
    ModelSpec,
    OutputSize,
    RateLimits,
    ScriptedClient,
    Usage,
)
from parlour.runtime.blocks import TextBlock
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.testing import (
    FakeClock,
    MockProvider,
    anthropic_message,
    fake_spec,
    mock_anthropic_sdk,
    mock_async_anthropic_sdk,
)

from .agent_helpers import stored
from .limiter_helpers import JumpingTimer, WatchedTimer


@pytest.fixture(autouse=True)
def no_limits() -> Iterator[None]:
    yield
    for name in ("scripted", "anthropic", "claude-haiku-4-5", "claude-test"):
        set_model_limits(name)
    follow_catalog_limits(False)


def agent_for(client: Any, **kwargs: Any) -> Agent:
    kwargs.setdefault("output", OutputSize.VERDICT)
    kwargs.setdefault("depth", Depth.IMMEDIATE)
    return Agent(client, objective="Answer briefly.", **kwargs)


class _Provider(ScriptedClient):
    """A provider with its own limits, kept as Anthropic keeps them: on the test's clock, a
    bucket of requests and one of tokens, the tokens debited with the reported input plus
    the whole ``max_tokens`` as a request arrives and the unused output refunded as it is
    answered. Every other answer uses its whole reserve. A request it cannot take is
    recorded as refused (a 429)."""

    def __init__(self, clock: FakeClock, requests: int, tokens: int) -> None:
        super().__init__()
        self.clock, self.limits = clock, (requests, tokens)
        self.levels = [float(requests), float(tokens)]
        self.at = clock.now()
        self.arrivals: list[float] = []
        self.refused: list[float] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition()

    def _answer(self, request: Any) -> LLMResponse:
        with self.lock:
            used_in = 1  # the provider's own counts
            used_out = request.max_tokens if len(self.arrivals) % 2 else 3
            now = self.clock.now()
            for i, capacity in enumerate(self.limits):
                self.levels[i] = min(capacity, self.levels[i] + (now - self.at) * capacity / 60)
            self.at = now
            cost = used_in + request.max_tokens
            if self.levels[0] < 1 - 1e-6 or self.levels[1] < cost - 1e-3:
                self.refused.append(now)
            self.levels[0] -= 1
            self.levels[1] -= cost
            self.arrivals.append(now)
            self.levels[1] = min(self.limits[1], self.levels[1] + request.max_tokens - used_out)
        with self.changed:
            self.changed.notify_all()
        return LLMResponse(
            model_id="scripted",
            blocks=[TextBlock(text="ok")],
            usage=Usage(input_tokens=used_in, output_tokens=used_out),
        )

    def _send(self, request: Any) -> LLMResponse:
        return self._answer(request)

    async def _asend(self, request: Any, on_text: Any) -> LLMResponse:
        await asyncio.sleep(0)  # others run meanwhile, as over a network
        return self._answer(request)


def test_hundreds_of_chats_on_threads_and_a_loop_never_pass_the_providers_limits(
    service: ConversationService,
) -> None:
    clock = FakeClock()
    rpm, tpm = 40, 20_000  # with VERDICT's 1,024-token reserve, both bind
    provider = _Provider(clock, rpm, tpm)
    limiters: list[Limiter] = []

    def quiet() -> bool:  # every call granted has reached the provider and settled
        stats = limiters[0].statistics()
        return stats.in_flight == 0 and stats.granted == len(provider.arrivals)

    timer = JumpingTimer(clock, quiet, provider.changed)
    limiter = set_model_limits(
        "scripted", requests_per_minute=rpm, tokens_per_minute=tpm, clock=clock, timer=timer
    )
    assert limiter is not None
    limiters.append(limiter)
    agent = agent_for(provider)
    threaded = [agent.chat(service, user_id="alice") for _ in range(120)]
    looped = [agent.chat(service, user_id="alice") for _ in range(120)]
    replies: list[str] = []

    def one(chat: Any) -> None:
        replies.append(chat.send("Hi").text)

    async def on_the_loop() -> None:
        for reply in await asyncio.gather(*(c.asend("Hi") for c in looped)):
            replies.append(reply.text)

    threads = [threading.Thread(target=one, args=(c,)) for c in threaded]
    threads.append(threading.Thread(target=asyncio.run, args=(on_the_loop(),)))
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        timer.stop()
    assert replies == ["ok"] * 240
    assert provider.refused == []
    arrivals = sorted(provider.arrivals)
    assert len(arrivals) == 240
    for i, start in enumerate(arrivals):  # requests in any window, counted at the model
        for j in range(i, len(arrivals)):
            assert j - i + 1 <= rpm + rpm * (arrivals[j] - start) / 60 + 1e-6
    assert arrivals[-1] - arrivals[0] >= 60 * (240 - rpm) / rpm - 1e-6  # it did wait
    stats = limiter.statistics()
    assert (stats.in_flight, stats.waiting, stats.granted) == (0, 0, 240)
    assert all(len(stored(service, c.conversation_id, "alice").messages) == 2 for c in threaded)


def _one_request_a_minute() -> tuple[FakeClock, WatchedTimer, Limiter]:
    clock = FakeClock()
    timer = WatchedTimer(clock)
    limiter = set_model_limits("scripted", requests_per_minute=1, clock=clock, timer=timer)
    assert limiter is not None
    return clock, timer, limiter


def _assert_nothing_booked_later(clock: FakeClock, timer: WatchedTimer, limiter: Limiter) -> None:
    timer.ring()
    clock.advance(120)
    limiter.tick()
    stats = limiter.statistics()
    assert (stats.granted, stats.in_flight, stats.waiting, stats.requests) == (1, 0, 0, 1.0)


@pytest.mark.parametrize("path", ["send", "stream"])
def test_a_force_release_while_waiting_for_room_ends_the_turn_and_books_nothing(
    service: ConversationService, path: str
) -> None:
    clock, timer, limiter = _one_request_a_minute()
    calls: list[str] = []
    client = ScriptedClient([lambda prepared: _ok(calls)] * 4)
    agent = agent_for(client)
    first, second = agent.chat(service, user_id="alice"), agent.chat(service, user_id="alice")
    first.send("Hi")  # takes the minute's one request
    failure: list[BaseException] = []

    def waiting_turn() -> None:
        try:
            if path == "send":
                second.send("Hi")
            else:
                list(second.stream("Hi"))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=waiting_turn)
    thread.start()
    assert timer.armed.wait(10)  # the second turn's call waits for room
    assert service.force_release(second.conversation_id, "alice") is not None
    thread.join(10)
    assert [type(e) for e in failure] == [TurnCancelledError]
    assert calls == ["x"]
    _assert_nothing_booked_later(clock, timer, limiter)
    assert [m.raw_content for m in stored(service, second.conversation_id, "alice").messages] == [
        "Hi"
    ]


@pytest.mark.parametrize("how", ["cancel", "force_release"])
def test_an_asend_waiting_for_room_gives_the_wait_up_when_cancelled_or_released(
    service: ConversationService, how: str
) -> None:
    clock, timer, limiter = _one_request_a_minute()
    agent = agent_for(ScriptedClient())
    first, second = agent.chat(service, user_id="alice"), agent.chat(service, user_id="alice")

    async def scenario() -> None:
        await first.asend("Hi")
        loop, waiting = asyncio.get_running_loop(), asyncio.Event()

        def on_arm() -> None:  # the second turn's call waits for room
            loop.call_soon_threadsafe(waiting.set)

        timer.on_arm = on_arm
        task = asyncio.create_task(second.asend("Hi"))
        await waiting.wait()
        if how == "cancel":
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            assert service.force_release(second.conversation_id, "alice") is not None
            with pytest.raises(TurnCancelledError):
                await task

    asyncio.run(scenario())
    _assert_nothing_booked_later(clock, timer, limiter)


def test_a_call_that_books_more_than_a_whole_bucket_fails_its_turn_at_once(
    service: ConversationService,
) -> None:
    set_model_limits("scripted", output_tokens_per_minute=8_000)
    calls: list[str] = []
    chat = agent_for(
        ScriptedClient([lambda prepared: _ok(calls)]),
        output=OutputSize.STANDARD,
    ).chat(service, user_id="alice")
    with pytest.raises(BookingTooLargeError, match="books 16,000 output tokens, more than"):
        chat.send("Hi")
    assert calls == []
    assert len(stored(service, chat.conversation_id, "alice").messages) == 1


def test_the_catalogs_limits_are_followed_when_opted_in_and_the_applications_win(
    service: ConversationService,
) -> None:
    haiku = ModelCatalog.default().get("claude-haiku-4-5")
    assert haiku.rate_limits == RateLimits(
        requests_per_minute=50, input_tokens_per_minute=50_000, output_tokens_per_minute=10_000
    )
    assert limiter_for(haiku) is None  # nothing by default
    follow_catalog_limits(clock=FakeClock())
    followed = limiter_for(haiku)
    assert followed is not None and followed.limits == haiku.rate_limits
    assert limiter_for(haiku) is followed  # one limiter per model, shared by its calls
    usage = agent_for(ScriptedClient(spec=haiku)).chat(service, user_id="alice").send("Hi").usage
    stats = followed.statistics()  # the one call, settled on its reported usage
    assert (stats.granted, stats.requests) == (1, 49)
    assert (stats.input_tokens, stats.output_tokens) == (
        50_000 - usage.input_tokens,
        10_000 - usage.output_tokens,
    )
    assert limiter_for(ModelSpec.custom("local", context_window=32_000)) is None
    set_model_limits("anthropic", concurrency=2)
    assert limiter_for(haiku) is not followed
    assert limits_for("anthropic") == RateLimits(concurrency=2)
    own = set_model_limits("claude-haiku-4-5", requests_per_minute=7)
    assert limiter_for(haiku) is own and limits_for("claude-haiku-4-5") == RateLimits(
        requests_per_minute=7
    )
    set_model_limits("claude-haiku-4-5")
    set_model_limits("anthropic")
    follow_catalog_limits(False)
    assert limiter_for(haiku) is None


@pytest.mark.parametrize("path", ["send", "asend"])
def test_a_call_books_its_estimate_plus_its_reserve_and_settles_cache_reads_outside_itpm(
    service: ConversationService, path: str
) -> None:
    """It books the input estimate and the output reserve it sends as ``max_tokens``, and
    settles on the reported usage: 30 uncached and 20 cached input tokens, 7 output; the
    input-token limit keeps the 30 alone, as Anthropic counts it."""
    spec = fake_spec(id="claude-test", provider="anthropic")
    seen: list[tuple[float, float, float]] = []
    limiter = set_model_limits(
        "claude-test",
        tokens_per_minute=1_000_000,
        input_tokens_per_minute=1_000_000,
        output_tokens_per_minute=1_000_000,
        clock=FakeClock(),
    )
    assert limiter is not None
    recorded = MockProvider(
        anthropic_message("Hi there.", input_tokens=30, output_tokens=7, cache_read=20)
    )

    def provider(request: Any) -> Any:  # what is booked while the request is on the wire
        stats = limiter.statistics()
        assert stats.tokens is not None and stats.input_tokens is not None
        assert stats.output_tokens is not None
        seen.append((stats.tokens, stats.input_tokens, stats.output_tokens))
        return recorded(request)

    expected: list[tuple[int, int]] = []

    def before(context: ConversationContext, ledger: Any) -> None:
        expected.append(
            (context.get_total_tokens(spec), ModelBinding.of(context).output_reserve(spec))
        )

    if path == "send":
        client = AnthropicClient(spec, client=mock_anthropic_sdk(provider))
    else:
        client = AnthropicClient(spec, async_client=mock_async_anthropic_sdk(provider))
    chat = agent_for(
        client, output=OutputSize.STANDARD, depth=Depth.STANDARD, before_model_call=before
    ).chat(service, user_id="alice")
    if path == "send":
        chat.send("How are you?")
    else:
        asyncio.run(chat.asend("How are you?"))
    ((estimate, reserve),) = expected
    assert reserve == 16_000 + 8_000  # the STANDARD rung plus STANDARD's thinking
    ((tokens, input_tokens, output_tokens),) = seen
    assert 1_000_000 - tokens == estimate + reserve
    assert (1_000_000 - input_tokens, 1_000_000 - output_tokens) == (estimate, reserve)
    assert recorded.bodies[0]["max_tokens"] == reserve
    stats = limiter.statistics()  # settled: 50 in (20 of them cached), 7 out
    assert (stats.tokens, stats.input_tokens, stats.output_tokens) == (
        1_000_000 - 57,
        1_000_000 - 30,
        1_000_000 - 7,
    )
    assert stats.in_flight == 0


def _ok(calls: list[str]) -> LLMResponse:
    calls.append("x")
    return LLMResponse(model_id="scripted", blocks=[TextBlock(text="ok")])
