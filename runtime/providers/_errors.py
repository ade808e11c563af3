"""Exception mapping at the seam: no SDK exception type escapes a provider module.

Retryable failures (rate limit, overload, timeout, a dropped connection) become
``RetryableLLMError``; final ones (a bad request, failed authentication, a refused
permission) become ``UncorrectableLLMError``. Both keep the SDK error as ``__cause__``. The
SDKs have already retried with backoff by then (their own ``max_retries``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from parlour.runtime.errors import RetryableLLMError, UncorrectableLLMError

# 408 timeout, 409 conflict, 429 rate limit, 5xx server trouble, 529 overloaded.
_RETRYABLE_STATUS = {408, 409, 429}
_BEDROCK_RETRYABLE = {
    "ThrottlingException",
    "ServiceUnavailableException",
    "InternalServerException",
    "ModelNotReadyException",
    "ModelTimeoutException",
    "ServiceQuotaExceededException",
}


def require_sdk(module: str, extra: str) -> ModuleType:
    """Import an optional SDK, or say exactly what to install.

    Raises:
        ImportError: the SDK is not installed; the message names the pip extra.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"The {module} SDK is not installed; install it with pip install 'parlour[{extra}]'."
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


def _is_retryable_status(status: int) -> bool:
    return status in _RETRYABLE_STATUS or status >= 500


@contextmanager
def map_http_errors(sdk: ModuleType, provider: str, model_id: str) -> Iterator[None]:
    """Map the anthropic or openai SDK's errors (they share one shape) to parlour's."""
    try:
        yield
    except sdk.APIStatusError as exc:
        status = int(exc.status_code)
        text = f"{provider} answered {status} for model {model_id}: {_message(exc)}"
        if _is_retryable_status(status):
            raise RetryableLLMError(text) from exc
        raise UncorrectableLLMError(text) from exc
    except sdk.APIConnectionError as exc:  # timeouts are a subclass
        raise RetryableLLMError(
            f"{provider} could not be reached for model {model_id}: {exc}"
        ) from exc
    except _base_error(sdk) as exc:
        raise UncorrectableLLMError(f"{provider} client error for model {model_id}: {exc}") from exc


def _base_error(sdk: ModuleType) -> type[Exception]:
    base: type[Exception] = getattr(sdk, "AnthropicError", None) or sdk.OpenAIError
    return base


def _message(exc: Any) -> str:
    return str(getattr(exc, "api_message", None) or getattr(exc, "message", None) or exc)


@contextmanager
def map_boto_errors(model_id: str) -> Iterator[None]:
    """Map botocore's errors to parlour's."""
    botocore = require_sdk("botocore.exceptions", "bedrock")
    try:
        yield
    except botocore.ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        text = f"Bedrock answered {code} for model {model_id}: {error.get('Message', exc)}"
        if code in _BEDROCK_RETRYABLE:
            raise RetryableLLMError(text) from exc
        raise UncorrectableLLMError(text) from exc
    except (botocore.ConnectionError, botocore.HTTPClientError) as exc:
        raise RetryableLLMError(
            f"Bedrock could not be reached for model {model_id}: {exc}"
        ) from exc
    except botocore.NoCredentialsError as exc:
        raise UncorrectableLLMError(
            "No AWS credentials for Bedrock: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE), or pass a configured boto3 client."
        ) from exc
    except botocore.BotoCoreError as exc:
        raise UncorrectableLLMError(f"Bedrock client error for model {model_id}: {exc}") from exc
