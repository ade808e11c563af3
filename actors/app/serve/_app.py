"""The ASGI application: the chat API over the agent host, and the inspector page.

Every ``/api`` route needs a token (a bearer header, or the cookie ``POST /api/session``
sets); a conversation of another user is answered exactly like a missing one (404).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from parlour.runtime.errors import IllegalStateError
from parlour.stores import PersistentStore

from . import _approvals as approvals
from . import _views as views
from ._host import ChatHost, ShuttingDownError
from ._http import (
    COOKIE,
    EXCEPTION_HANDLERS,
    AccessLog,
    ApiError,
    json_body,
    last_event_id,
    sse,
    token_of,
    user_of,
)
from ._tokens import TokenBook
from ._turns import Turns

__all__ = ["build"]

STATIC = Path(__file__).parent / "static"
_ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
_ID = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")
_COOKIE_AGE_S = 30 * 24 * 3600
_MAX_VERSION = 2**63 - 1


@dataclass(frozen=True)
class _Ctx:
    turns: Turns
    host: ChatHost
    store: PersistentStore
    tokens: TokenBook
    max_body_bytes: int
    max_text_chars: int
    page_limit: int
    keeps_history: bool


def build(
    turns: Turns,
    store: PersistentStore,
    tokens: TokenBook | Mapping[str, str],
    limits: tuple[int, int, int],
) -> Starlette:
    """The app over ``turns`` (local or on a cluster), reading ``store``; ``limits`` are
    (max body bytes, max text characters, page limit). ``asgi_app`` and
    ``cluster_asgi_app`` are its public faces."""
    book = tokens if isinstance(tokens, TokenBook) else TokenBook(tokens)
    host = ChatHost(turns)
    history = views.keeps_history(store)
    ctx = _Ctx(turns, host, store, book, *limits, history)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await host.aclose()

    app = Starlette(
        routes=_routes(),
        middleware=[Middleware(AccessLog)],
        exception_handlers=dict(EXCEPTION_HANDLERS),
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.host = host
    return app


def _routes() -> list[Route]:
    conv = "/api/conversations/{conversation_id}"
    return [
        Route("/", _index),
        Route("/healthz", _healthz),
        Route("/static/{name}", _static),
        Route("/api/session", _login, methods=["POST"]),
        Route("/api/session", _logout, methods=["DELETE"]),
        Route("/api/me", _me),
        Route("/api/conversations", _list),
        Route("/api/conversations", _create, methods=["POST"]),
        Route(conv, _read),
        Route(conv, _delete, methods=["DELETE"]),
        Route(conv + "/export", _export),
        Route(conv + "/versions", _versions),
        Route(conv + "/versions/{version}", _version),
        Route(conv + "/messages", _send, methods=["POST"]),
        Route(conv + "/events", _events),
        Route(conv + "/cancel", _cancel, methods=["POST"]),
        Route(conv + "/approvals", _approvals),
        Route(conv + "/approvals/{call_id}", _decide, methods=["POST"]),
    ]


def _ctx(request: Request) -> _Ctx:
    ctx: _Ctx = request.app.state.ctx
    return ctx


def _missing(conversation_id: str) -> ApiError:
    return ApiError(404, f"No conversation {conversation_id[:200]}.")


async def _mine(request: Request) -> tuple[_Ctx, str, str]:
    """The context, the user, and a conversation id the user may see.

    Raises:
        ApiError: 401 without a valid token; 404 when the conversation is missing or is
            another user's (the same answer).
    """
    ctx = _ctx(request)
    user_id = user_of(request, ctx.tokens)
    cid = request.path_params["conversation_id"]
    if not _ID.match(cid):
        raise _missing(cid)
    if ctx.host.is_fresh(user_id, cid):
        return ctx, user_id, cid
    if not await asyncio.to_thread(ctx.store.exists, cid, user_id):
        raise _missing(cid)
    return ctx, user_id, cid


# -- the page, health, the session ------------------------------------------------------------


async def _index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})


async def _static(request: Request) -> Response:
    """The page's own files, from a fixed list: nothing else on disk is reachable."""
    name = request.path_params["name"]
    if name not in _ASSETS:
        raise ApiError(404, f"No file {name[:100]}.")
    return FileResponse(STATIC / name, media_type=_ASSETS[name])


async def _healthz(request: Request) -> Response:
    host = _ctx(request).host
    if host.closing:
        return JSONResponse({"status": "shutting_down"}, status_code=503)
    return JSONResponse({"status": "ok", "running_turns": host.running_turns()})


async def _login(request: Request) -> Response:
    """Exchange the bearer token for an HttpOnly, SameSite=Strict session cookie."""
    ctx = _ctx(request)
    user_id = user_of(request, ctx.tokens)
    response = JSONResponse({"user_id": user_id})
    response.set_cookie(
        COOKIE,
        token_of(request) or "",
        max_age=_COOKIE_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def _logout(request: Request) -> Response:
    response = Response(status_code=204)
    response.delete_cookie(COOKIE, httponly=True, samesite="strict")
    return response


async def _me(request: Request) -> Response:
    ctx = _ctx(request)
    user_id = user_of(request, ctx.tokens)
    spec = ctx.turns.spec
    return JSONResponse(
        {"user_id": user_id, "model": spec.id, "window_tokens": spec.max_context_tokens}
    )


# -- conversations ----------------------------------------------------------------------------


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ApiError(400, f"Query parameter {name} must be an integer from {low} to {high}.")
    return int(raw)


async def _list(request: Request) -> Response:
    """``?cursor=N&limit=M&q=words``: one page of the user's conversations, newest first
    (with ``q``, those whose title holds it, in any case)."""
    ctx = _ctx(request)
    user_id = user_of(request, ctx.tokens)
    limit = _int_param(request, "limit", 20, 1, ctx.page_limit)
    cursor = _int_param(request, "cursor", 0, 0, 10**9)
    query = request.query_params.get("q", "")[:200]
    summaries = await asyncio.to_thread(ctx.store.list_conversations, user_id)
    fresh = ctx.host.fresh(user_id)
    return JSONResponse(views.page_of(summaries, fresh, cursor, limit, query))


async def _create(request: Request) -> Response:
    """A new conversation; with a body ``{"text": ...}``, started with that message (its
    turn runs detached: follow it on ``.../events``, or read the conversation)."""
    ctx = _ctx(request)
    user_id = user_of(request, ctx.tokens)
    text = None
    if _has_body(request):
        body = await json_body(request, ctx.max_body_bytes)
        text = _text_of(body, ctx.max_text_chars) if body else None
    try:
        cid = ctx.host.create(user_id)
        created: dict[str, Any] = {"conversation_id": cid}
        if text is not None:
            status, _, _ = await ctx.host.send(user_id, cid, text)
            created["accepted"] = status
    except ShuttingDownError as exc:
        raise ApiError(503, str(exc)) from None
    return JSONResponse(created, status_code=201)


def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return bool(request.headers.get("content-type")) or (length not in (None, "0"))


async def _read(request: Request) -> Response:
    ctx, user_id, cid = await _mine(request)
    spec = ctx.turns.spec
    snapshot = await asyncio.to_thread(views.load_mine, ctx.store, cid, user_id)
    if snapshot is None:
        view = views.empty_view(cid, spec)
    else:
        formatter = ctx.turns.formatter
        view = await asyncio.to_thread(views.conversation_view, snapshot, spec, formatter)
    view["running"] = ctx.host.running(user_id, cid)
    view["interrupted"] = view["interrupted"] and not view["running"]
    view["versions_supported"] = ctx.keeps_history
    return JSONResponse(view)


async def _delete(request: Request) -> Response:
    ctx, user_id, cid = await _mine(request)
    if ctx.host.running(user_id, cid):
        raise ApiError(409, f"Conversation {cid} has a running turn; cancel it first.")
    if not ctx.host.is_fresh(user_id, cid):
        try:
            await asyncio.to_thread(ctx.turns.remove, cid, user_id)
        except IllegalStateError:
            raise ApiError(409, f"Conversation {cid} is in use; try again shortly.") from None
    ctx.host.forget(user_id, cid)
    return Response(status_code=204)


async def _export(request: Request) -> Response:
    ctx, user_id, cid = await _mine(request)
    snapshot = await asyncio.to_thread(views.load_mine, ctx.store, cid, user_id)
    if snapshot is None:
        raise _missing(cid)
    disposition = f'attachment; filename="{cid}.json"'
    return Response(
        views.export(snapshot),
        media_type="application/json",
        headers={"content-disposition": disposition},
    )


async def _versions(request: Request) -> Response:
    ctx, user_id, cid = await _mine(request)
    try:
        found = await asyncio.to_thread(views.versions_of, ctx.store, cid, user_id)
    except NotImplementedError as exc:
        raise ApiError(501, str(exc)) from None
    return JSONResponse({"versions": found})


async def _version(request: Request) -> Response:
    ctx, user_id, cid = await _mine(request)
    raw = request.path_params["version"]
    at = _version_of(raw)
    try:
        snapshot = await asyncio.to_thread(views.load_version, ctx.store, cid, user_id, at)
    except NotImplementedError as exc:
        raise ApiError(501, str(exc)) from None
    if snapshot is None:
        raise ApiError(404, f"Conversation {cid} has no version {raw[:40]}; see its /versions.")
    spec = ctx.turns.spec
    return JSONResponse(await asyncio.to_thread(views.conversation_view, snapshot, spec))


def _version_of(raw: str) -> int | dt.datetime:
    """A version's number (a number past any version a store keeps is refused here, before
    it reaches one that stores 64-bit numbers) or a time.

    Raises:
        ApiError: 404 for a number past 2**63 - 1; 400 for neither a number nor a time.
    """
    if raw.isdigit():
        if len(raw) > 19 or int(raw) > _MAX_VERSION:
            raise ApiError(404, f"No version {raw[:40]}: versions are numbered up to 2**63 - 1.")
        return int(raw)
    try:
        at = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise ApiError(400, "A version is named by its number or an ISO 8601 timestamp.") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


# -- turns ------------------------------------------------------------------------------------


async def _send(request: Request) -> Response:
    """``{"text": ...}``: offered to the running turn, or a turn of its own. Answered with
    the turn's events as SSE (``Accept: application/json``: 202 with how it was taken)."""
    ctx, user_id, cid = await _mine(request)
    text = _text_of(await json_body(request, ctx.max_body_bytes), ctx.max_text_chars)
    try:
        status, feed, start = await ctx.host.send(user_id, cid, text)
    except ShuttingDownError as exc:
        raise ApiError(503, str(exc)) from None
    accepted: dict[str, Any] = {"type": "accepted", "status": status, "conversation_id": cid}
    accept = request.headers.get("accept", "")
    if "application/json" in accept and "text/event-stream" not in accept:
        return JSONResponse(accepted, status_code=202)

    async def events() -> AsyncIterator[list[dict[str, Any]]]:
        yield [accepted]
        async for batch in feed.follow(start):
            yield batch

    return sse(events())


def _text_of(body: dict[str, Any], limit: int) -> str:
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ApiError(400, 'The body must be {"text": "..."} with a non-empty text.')
    if len(text) > limit:
        raise ApiError(413, f"A message is at most {limit} characters, not {len(text)}.")
    return text


async def _events(request: Request) -> Response:
    """The conversation's turns as SSE: the running one from its start, then each next
    one (``?once=1``: only the running one, nothing when idle). A reconnecting
    ``EventSource``'s ``Last-Event-ID`` resumes the running turn after that event."""
    ctx, user_id, cid = await _mine(request)
    once = request.query_params.get("once") == "1"
    after = last_event_id(request)
    return sse(ctx.host.watch(user_id, cid, once=once, after=after))


async def _cancel(request: Request) -> Response:
    ctx, user_id, cid = await _mine(request)
    return JSONResponse({"cancelled": await ctx.host.cancel(user_id, cid)})


async def _approvals(request: Request) -> Response:
    ctx, user_id, cid = await _mine(request)
    return await approvals.pending(ctx.store, user_id, cid)


async def _decide(request: Request) -> Response:
    ctx, user_id, cid = await _mine(request)
    return await approvals.decide(request, ctx.host, ctx.store, user_id, cid, ctx.max_body_bytes)
