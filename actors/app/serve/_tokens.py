"""Bearer tokens mapped to user ids: a small JSON file, an environment variable, or a dict.

The file keeps only each token's SHA-256 digest, so a copy of it opens nothing; a token is
looked up by its digest, so the lookup time says nothing about which tokens exist.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

__all__ = ["TokenBook"]

ENV_VAR = "PARLOUR_TOKENS"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenBook:
    """Who a bearer token belongs to.

    Args:
        tokens: plain tokens mapped to user ids (from code or the environment).
        digests: SHA-256 hex digests of tokens mapped to user ids (from a token file).

    Raises:
        ValueError: a token or a user id is empty.

    Thread-safety: lookups may come from any thread; ``issue`` is for one thread at start-up.
    """

    def __init__(
        self, tokens: Mapping[str, str] = {}, digests: Mapping[str, str] | None = None
    ) -> None:
        self._users: dict[str, str] = dict(digests or {})
        for token, user_id in tokens.items():
            if not token or not user_id:
                raise ValueError("A token and its user id must both be non-empty.")
            self._users[_digest(token)] = user_id

    @classmethod
    def from_env(cls, value: str | None = None) -> TokenBook:
        """Tokens from ``PARLOUR_TOKENS`` (``token:user,token:user``); empty when unset.

        Raises:
            ValueError: an entry is not ``token:user``.
        """
        raw = os.environ.get(ENV_VAR, "") if value is None else value
        pairs: dict[str, str] = {}
        for entry in filter(None, (e.strip() for e in raw.split(","))):
            token, sep, user_id = entry.partition(":")
            if not sep:
                raise ValueError(f"{ENV_VAR} entries are token:user; {entry[:4]}... is not.")
            pairs[token] = user_id
        return cls(pairs)

    @classmethod
    def load(cls, path: Path) -> TokenBook:
        """The book stored at ``path``; an empty one when the file does not exist.

        Raises:
            ValueError: the file is not a token file.
        """
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            digests = {str(k): str(v) for k, v in data["sha256"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path} is not a parlour token file: {exc}") from exc
        return cls(digests=digests)

    def save(self, path: Path) -> None:
        """Write the digests to ``path``, readable by its owner only."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps({"sha256": self._users}, indent=1, sort_keys=True))
        partial.chmod(0o600)
        partial.replace(path)

    def issue(self, user_id: str) -> str:
        """A new token for ``user_id``; only its digest is kept."""
        if not user_id:
            raise ValueError("A token needs a non-empty user id.")
        token = secrets.token_urlsafe(24)
        self._users[_digest(token)] = user_id
        return token

    def merged(self, other: TokenBook) -> TokenBook:
        """A book holding both books' tokens (``other`` wins a clash)."""
        return TokenBook(digests={**self._users, **other._users})

    def user_for(self, token: str | None) -> str | None:
        """The user ``token`` belongs to, or None."""
        if not token:
            return None
        return self._users.get(_digest(token))

    def __len__(self) -> int:
        return len(self._users)
