"""The HTTP plumbing of the app: JSON errors, bearer tokens and the session cookie, bounded
JSON bodies, Server-Sent Events, and the access log (with a span per request)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from loguru import logger
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...agent._otel import span
from ._tokens import TokenBook

__all__ = [
    "COOKIE",
    "AccessLog",
    "ApiError",
    "error_response",
    "json_body",
    "last_event_id",
    "sse",
    "token_of",
    "user_of",
]

COOKIE = "parlour_token"
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:"),
]


class ApiError(Exception):
    """A request the API refuses: answered as ``{"error": message, "status": status}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status)


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, str(exc.detail))


async def internal_error(request: Request, exc: Exception) -> Response:
    logger.opt(exception=exc).error("{} {} failed", request.method, request.url.path)
    return error_response(500, "The server failed this request; its log says why.")


EXCEPTION_HANDLERS: Mapping[Any, Any] = {
    ApiError: api_error,
    HTTPException: http_error,
    Exception: internal_error,
}


def token_of(request: Request) -> str | None:
    """The bearer token of the Authorization header, else the session cookie's."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE)


def user_of(request: Request, book: TokenBook) -> str:
    """The user the request's token belongs to.

    Raises:
        ApiError: 401 when the token is missing or unknown.
    """
    user_id = book.user_for(token_of(request))
    if user_id is None:
        raise ApiError(401, "A valid bearer token (or the session cookie) is required.")
    return user_id


async def json_body(
    request: Request, limit: int, fields: frozenset[str] = frozenset({"text"})
) -> dict[str, Any]:
    """The request's JSON object, read up to ``limit`` bytes, with only ``fields`` in it.

    Raises:
        ApiError: 415 when it is not declared JSON, 413 beyond ``limit``, 400 when it is
            not a JSON object (nested too deeply to read, too), or holds a string that is
            not Unicode text (a lone surrogate), 422 naming a field it does not take.
    """
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise ApiError(415, "The request body must be JSON (Content-Type: application/json).")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"The request body is over the {limit}-byte limit.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"The request body is over the {limit}-byte limit.")
    try:
        value = json.loads(body)
    except ValueError:
        raise ApiError(400, "The request body is not valid JSON.") from None
    except RecursionError:  # deep nesting fits in a small body; json recurses on it
        raise ApiError(400, "The request body is nested too deeply.") from None
    if not isinstance(value, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    unknown = sorted(set(value) - fields)
    if unknown:
        named = ", ".join(repr(name[:100]) for name in unknown[:10])
        taken = ", ".join(sorted(fields))
        raise ApiError(422, f"Unknown field {named}; the body takes only: {taken}.")
    for key, item in value.items():
        if isinstance(item, str) and not _is_text(item):
            raise ApiError(400, f"The field {key!r} holds a lone surrogate, not Unicode text.")
    return value


def _is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text (JSON's ``\\ud800`` escapes decode to lone
    surrogates, which no store, model or UTF-8 encoder takes)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Frames that begin a turn, or come between turns: they clear the client's last event id
# (an empty ``id:``), so a reconnect never resumes a later turn after an earlier one's seq.
_CLEARS_ID = frozenset({"turn_start", "ping"})


def _frame(event: dict[str, Any]) -> str:
    data = json.dumps(event, separators=(",", ":"))
    kind = event["type"]
    seq = event.get("seq")
    if seq:  # a turn's event: its number is the id a reconnect sends back (Last-Event-ID)
        return f"id: {seq}\nevent: {kind}\ndata: {data}\n\n"
    if kind in _CLEARS_ID:
        return f"id:\nevent: {kind}\ndata: {data}\n\n"
    return f"event: {kind}\ndata: {data}\n\n"


def last_event_id(request: Request) -> int | None:
    """The seq a reconnecting ``EventSource`` has seen up to (its ``Last-Event-ID``
    header, the ``id`` of the last event it got); None without one, or for one that is no
    event number (the follow then starts as a fresh one does)."""
    raw = request.headers.get("last-event-id", "").strip()
    return int(raw) if raw.isdigit() and len(raw) <= 18 else None


def sse(batches: AsyncIterator[list[dict[str, Any]]]) -> StreamingResponse:
    """A Server-Sent Events response: one ``event:``/``data:`` pair per event, each batch
    of events in one write. A turn's event (one with a ``seq``) is sent with ``id: <seq>``;
    a ``turn_start`` or a ``ping`` with an empty ``id:``, which clears the client's."""

    async def frames() -> AsyncIterator[bytes]:
        async for batch in batches:
            yield "".join(_frame(event) for event in batch).encode()

    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)


class AccessLog:
    """ASGI middleware: one ``parlour`` log record per HTTP request (method, path, status,
    milliseconds), a ``parlour.http`` span around it, and the security headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [0]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        method, path = scope["method"], scope["path"]
        attributes = {"http.request.method": method, "url.path": path}
        try:
            with span("parlour.http", **attributes):
                await self.app(scope, receive, sending)
        finally:
            ms = (time.perf_counter() - started) * 1000
            logger.bind(method=method, path=path, status=status[0], ms=round(ms, 1)).info(
                "{} {} {} {:.1f}ms", method, path, status[0], ms
            )
