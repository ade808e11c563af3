"""The base of the clients over an HTTP SDK (anthropic, openai): one way to build the SDK
client, with the SDK's own retry, to report what is missing, and to send and stream under
the dialect's error map. A dialect supplies its encoder, one call and one streamed call.

A call's body goes to the SDK client's own ``post``, not to its typed method
(``messages.create``, ``chat.completions.create``): the SDK still makes the request
(headers, authentication, timeout, retries with backoff, status errors), but no longer
walks the whole conversation on every call to prepare a body parlour built to its request
types already. That walk grows with the conversation: OpenAI's typed transform cost about
0.3 ms a message (109 ms of CPU a call at 200 messages, against 2.3 ms now). Anthropic's
client also copies the body before encoding it, about half of a 200-message call, so to
its own client class the body goes as JSON bytes (``content=``); a cloud's client builds
its URL from the body and gets the mapping (``_posted``). ``benchmarks/sdk_stream.py
--messages`` measures it; the tests hold the request on the wire to the typed method's.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, ClassVar

import msgspec

from .._handlers import NativeToolsFormatter
from .._roles import Depth
from ..models._catalog import ModelCatalog
from ..models._spec import ModelSpec
from ._errors import ErrorMap, map_errors, require_key, require_sdk
from ._response import LLMResponse
from ._shared import OutputDeclaration, check_base_url, spec_of
from ._template import LLMClient, TextCallback, WireRequest

UNSET: Any = object()
# the header by which the SDKs' own ``with_raw_response`` and ``with_streaming_response`` ask
# their ``post`` for the response unparsed ("true") or unread ("stream")
RAW_RESPONSE = "X-Stainless-Raw-Response"


def wire_json(body: Mapping[str, Any]) -> bytes:
    """``body`` as the JSON bytes a call sends: msgspec's encoding, or where msgspec cannot
    encode a text (a lone surrogate, which UTF-8 cannot hold) the standard library's, which
    escapes it as the SDKs' own encoders do. A float that is not finite (in a tool call's
    input) goes as ``null``, where the SDKs' encoders wrote ``NaN``, which is not JSON."""
    try:
        return msgspec.json.encode(body)
    except UnicodeEncodeError:
        return json.dumps(body).encode()


def injected(client: Any, legacy: Any, legacy_name: str) -> Any:
    """The SDK client given as ``client=``, or under its deprecated name ``legacy_name``.

    Raises:
        TypeError: both were given.
    """
    if legacy is UNSET:
        return client
    if client is not None:
        raise TypeError(f"Pass the SDK client once: client=..., not also {legacy_name}=....")
    warnings.warn(
        f"{legacy_name}= is deprecated; pass the SDK client as client=...",
        DeprecationWarning,
        stacklevel=3,
    )
    return legacy


class HttpSdkClient(LLMClient):
    """A native-tools client over an HTTP SDK whose client class is ``provider``.

    Args:
        model: a catalog id or a ``ModelSpec`` (default: the dialect's ``default_model``).
        api_key: else the dialect's environment variable.
        client: a ready SDK client (tests pass one over a mock transport); when given,
            ``api_key`` and ``max_retries`` are not used for it. ``sdk_client=`` is its
            deprecated name.
        async_client: a ready async SDK client (``AsyncAnthropic``, ``AsyncOpenAI``) for
            ``arespond``; else one is made from the key at the first ``arespond``. Given
            alone (no ``client``), no key is wanted until a blocking call is made.
        max_retries: the SDK's own retry with backoff for rate limits, overload, timeouts.
        base_url: another server speaking the dialect (else the dialect's ``base_url_env``
            variable, else the provider's own). A dialect whose ``keyless`` is true needs no
            key for another server (a local OpenAI-compatible one).
        catalog, depth, output_declaration: see ``LLMClient``.

    Raises:
        ImportError: the SDK is missing; the message names the pip extra.
        UncorrectableLLMError: no API key is configured (and neither SDK client is given);
            the message names the variable.
        ValueError: ``base_url`` is not an http(s) URL with a host.
    """

    formatter = NativeToolsFormatter()
    module: ClassVar[str]  # the SDK's import name, also its pip extra
    provider: ClassVar[str]  # the SDK's client class, also the name in messages
    env_var: ClassVar[str]
    default_model: ClassVar[str]
    error_map: ClassVar[ErrorMap]  # the dialect's table, in its own module
    endpoint: ClassVar[str]  # the path a call's body is posted to
    # the request options the SDK's own method adds to its post (OpenAI's authentication)
    post_options: ClassVar[Mapping[str, Any]] = {}
    # the SDK client classes (by name in the SDK's module) a body is posted to as bytes
    plain_clients: ClassVar[tuple[str, ...]] = ()
    base_url_env: ClassVar[str | None] = None  # the variable the SDK reads its server from
    keyless: ClassVar[bool] = False  # another server (a base URL) may need no key
    # sent as the key to a server that asked for none: the SDK refuses to run without one
    KEYLESS_PLACEHOLDER: ClassVar[str] = "no-key"

    def __init__(
        self,
        model: str | ModelSpec | None = None,
        *,
        api_key: str | None = None,
        client: Any = None,
        max_retries: int = 2,
        catalog: ModelCatalog | None = None,
        depth: Depth | None = None,
        output_declaration: OutputDeclaration | None = None,
        async_client: Any = None,
        sdk_client: Any = UNSET,
        base_url: str | None = None,
    ) -> None:
        super().__init__(
            spec_of(model or self.default_model, catalog),
            depth=depth,
            output_declaration=output_declaration,
        )
        self._sdk = require_sdk(self.module, self.module)
        client = injected(client, sdk_client, "sdk_client")
        self._api_key, self._max_retries = api_key, max_retries
        from_env = os.environ.get(self.base_url_env) if self.base_url_env else None
        given = base_url or from_env
        self.base_url = check_base_url(given) if given else None
        if client is None and async_client is None:
            client = self._make(self.provider)  # no key is refused here, not at first use
        self._client = client
        self._async_client = async_client

    @property
    def sdk_client(self) -> Any:
        """The SDK client the blocking calls use; given only an ``async_client``, it is
        made from the key at the first blocking call.

        Raises:
            UncorrectableLLMError: none was given and no API key is configured.
        """
        if self._client is None:
            self._client = self._make(self.provider)
        return self._client

    @sdk_client.setter
    def sdk_client(self, client: Any) -> None:
        self._client = client

    def _make(self, cls_name: str) -> Any:
        options: dict[str, Any] = {"max_retries": self._max_retries}
        if self.base_url is not None:
            options["base_url"] = self.base_url
        if self.keyless and self.base_url is not None:
            key = self._api_key or os.environ.get(self.env_var) or self.KEYLESS_PLACEHOLDER
        else:
            key = require_key(self._api_key, self.env_var, self.provider)
        return getattr(self._sdk, cls_name)(api_key=key, **options)

    @property
    def async_sdk_client(self) -> Any:
        """The async SDK client ``arespond`` uses, made from the key on first use.

        Raises:
            UncorrectableLLMError: none was given and no API key is configured.
        """
        if self._async_client is None:
            self._async_client = self._make(f"Async{self.provider}")
        return self._async_client

    def _read(self, response: Any) -> Iterator[bytes]:
        """The bytes of a streamed ``response`` that parlour reads itself, a failure to read
        them raised as the SDK raises it from its own stream (``APITimeoutError``,
        ``APIConnectionError``), so the error map judges both alike."""
        chunks = response.iter_bytes()
        while True:
            try:
                chunk = next(chunks, None)
            except Exception as exc:
                raise self._read_error(response, exc) from exc
            if chunk is None:
                return
            yield chunk

    async def _aread(self, response: Any) -> AsyncIterator[bytes]:
        """``_read`` for the async SDK client."""
        chunks = response.aiter_bytes()
        while True:
            try:
                chunk = await anext(chunks, None)
            except Exception as exc:
                raise self._read_error(response, exc) from exc
            if chunk is None:
                return
            yield chunk

    def _read_error(self, response: Any, exc: Exception) -> Exception:
        import httpx2

        if isinstance(exc, httpx2.TimeoutException):
            return self._sdk.APITimeoutError(request=response.request)  # type: ignore[no-any-return]
        if isinstance(exc, httpx2.TransportError):
            reason = str(exc) or type(exc).__name__
            message = f"Connection failed while reading the answer: {reason}"
            return self._sdk.APIConnectionError(message=message, request=response.request)  # type: ignore[no-any-return]
        return exc

    def _body(self, request: WireRequest) -> dict[str, Any]:
        """The call's body: the dialect's, and the request's timeout under ``timeout`` (the
        SDKs take it per request; ``_posted`` keeps it out of the wire's JSON)."""
        body = self.encode(request)
        if request.timeout_s is not None:
            body["timeout"] = request.timeout_s
        return body

    def _posted(self, sdk: Any, body: Mapping[str, Any], raw: str | None = None) -> dict[str, Any]:
        """The keyword arguments of ``sdk.post`` for ``body`` (``_body``'s): the JSON, the
        request's timeout, the dialect's options, and with ``raw`` the response asked for
        unparsed (``"true"``) or unread (``"stream"``). The JSON goes as bytes
        (``wire_json``) to a client of one of the dialect's ``plain_clients`` classes, else
        as the mapping, which the SDK encodes: a cloud's client (Azure's, Vertex's, the SDK's
        Bedrock one) builds its URL from the body's fields."""
        headers: dict[str, str] = {}
        options: dict[str, Any] = {"headers": headers, **self.post_options}
        if raw is not None:
            headers[RAW_RESPONSE] = raw
        if "timeout" in body:
            options["timeout"] = body["timeout"]
            body = {key: value for key, value in body.items() if key != "timeout"}
        if not any(type(sdk) is getattr(self._sdk, name) for name in self.plain_clients):
            return {"body": body, "options": options}
        headers["Content-Type"] = "application/json"
        return {"content": wire_json(body), "options": options}

    def _whole(self, body: Mapping[str, Any]) -> Any:
        """The HTTP response of posting ``body`` with the blocking SDK client, read whole by
        the SDK inside its retries (and its status errors)."""
        import httpx2

        sdk = self.sdk_client
        return sdk.post(self.endpoint, cast_to=httpx2.Response, **self._posted(sdk, body))

    async def _awhole(self, body: Mapping[str, Any]) -> Any:
        """``_whole`` with the async SDK client."""
        import httpx2

        sdk = self.async_sdk_client
        return await sdk.post(self.endpoint, cast_to=httpx2.Response, **self._posted(sdk, body))

    @contextlib.contextmanager
    def _streamed(self, body: Mapping[str, Any]) -> Iterator[Any]:
        """The HTTP response of posting ``body`` with the blocking SDK client, its stream not
        yet read (the SDK's retries and status errors on the way); closed after the block."""
        import httpx2

        sdk = self.sdk_client
        posted = self._posted(sdk, body, "stream")
        response = sdk.post(self.endpoint, cast_to=httpx2.Response, **posted)
        try:
            yield response
        finally:
            response.close()

    @contextlib.asynccontextmanager
    async def _astreamed(self, body: Mapping[str, Any]) -> AsyncIterator[Any]:
        """``_streamed`` with the async SDK client."""
        import httpx2

        sdk = self.async_sdk_client
        posted = self._posted(sdk, body, "stream")
        response = await sdk.post(self.endpoint, cast_to=httpx2.Response, **posted)
        try:
            yield response
        finally:
            await response.aclose()

    async def _asend(self, request: WireRequest, on_text: TextCallback | None) -> LLMResponse:
        body = self._body(request)
        with map_errors(self._sdk, self.error_map, self.provider, request.spec.id):
            return await self._acall(body, on_text)

    def _send(self, request: WireRequest) -> LLMResponse:
        body = self._body(request)
        with map_errors(self._sdk, self.error_map, self.provider, request.spec.id):
            return self._call(body)

    def _stream(self, request: WireRequest) -> Iterator[str | LLMResponse]:
        body = self._body(request)
        with map_errors(self._sdk, self.error_map, self.provider, request.spec.id):
            yield from self._call_streaming(body)

    @abstractmethod
    def encode(self, request: WireRequest) -> dict[str, Any]:
        """The call's JSON body for ``request`` (the dialect's builder)."""

    @abstractmethod
    def _call(self, body: dict[str, Any]) -> LLMResponse:
        """One call with ``body``; SDK errors propagate to the error map."""

    @abstractmethod
    async def _acall(self, body: dict[str, Any], on_text: TextCallback | None) -> LLMResponse:
        """One call on the async SDK client; with ``on_text``, over its stream."""

    @abstractmethod
    def _call_streaming(self, body: dict[str, Any]) -> Iterator[str | LLMResponse]:
        """One streamed call: text deltas, then the response."""
