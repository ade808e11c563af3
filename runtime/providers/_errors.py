"""Exception mapping at the seam: no SDK exception type escapes a provider module.

Each provider module owns its error map: one ordered table from the SDK's exception
classes (named, since the SDKs are optional imports) to a verdict, mid-stream forms
included. ``map_errors`` applies a table around a call; the first row whose class matches
decides. A verdict is ``RetryableLLMError`` or ``UncorrectableLLMError`` itself, or a
function of the exception returning the class and the message. Either way the parlour
error keeps the SDK error as ``__cause__``. The SDKs have already retried with backoff by
then (their own ``max_retries``).

::

    ParlourError
    ├── RetryableLLMError       rate limit, overload, timeout, server trouble, dropped link
    └── UncorrectableLLMError   bad request, authentication, permission, anything unknown
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from ..errors import ParlourError, RetryableLLMError, UncorrectableLLMError

# (what failed, the model id) -> the parlour error class and its message
Verdict = type[ParlourError] | Callable[[Any, str], tuple[type[ParlourError], str]]
ErrorMap = Sequence[tuple[str, Verdict]]

# 408 timeout, 409 conflict, 429 rate limit, 5xx server trouble (529 is Anthropic's overload)
_RETRYABLE_STATUS = {408, 409, 429}


def require_sdk(module: str, extra: str) -> ModuleType:
    """Import an optional SDK, or say exactly what to install.

    Raises:
        ImportError: the SDK is not installed; the message names the pip extra.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"The {module} SDK is not installed; install it with pip install -e '.[{extra}]' "
            "in parlour's checkout."
        ) from exc


def require_key(explicit: str | None, env_var: str, provider: str) -> str:
    """The API key given, else the one in ``env_var``.

    Raises:
        UncorrectableLLMError: neither is set; the message names the variable.
    """
    key = explicit or os.environ.get(env_var)
    if not key:
        raise UncorrectableLLMError(
            f"No {provider} API key: set {env_var} or pass api_key=... to the client."
        )
    return key


def status_verdict(status: int) -> type[ParlourError]:
    """The class an HTTP status maps to: 408, 409, 429 and 5xx retry, the rest are final."""
    if status in _RETRYABLE_STATUS or status >= 500:
        return RetryableLLMError
    return UncorrectableLLMError


def classify(
    sdk: ModuleType, table: ErrorMap, exc: BaseException, provider: str, model_id: str
) -> tuple[type[ParlourError], str] | None:
    """The verdict of the first row of ``table`` whose class ``exc`` is, or None."""
    for name, verdict in table:
        cls = getattr(sdk, name, None)
        if cls is None or not isinstance(exc, cls):
            continue
        if isinstance(verdict, type):
            return verdict, f"{provider} client error for model {model_id}: {exc}"
        return verdict(exc, model_id)
    return None


@contextmanager
def map_errors(sdk: ModuleType, table: ErrorMap, provider: str, model_id: str) -> Iterator[None]:
    """Translate any exception of ``sdk`` raised inside into parlour's, by ``table``.

    Raises:
        RetryableLLMError, UncorrectableLLMError: as the table decides, ``from`` the SDK's.
    """
    try:
        yield
    except Exception as exc:
        found = classify(sdk, table, exc, provider, model_id)
        if found is None:
            raise
        cls, text = found
        raise cls(text) from exc


def error_message(exc: Any) -> str:
    """The human part of an SDK error: its API message, else its text."""
    return str(getattr(exc, "api_message", None) or getattr(exc, "message", None) or exc)
