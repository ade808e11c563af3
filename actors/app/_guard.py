"""What the ``parlour`` command says when it refuses: one line on stderr for every error a
person can cause, and the checks of a data directory made before anything is created.

``refusal`` maps the library's typed errors (and the few untyped ones a command meets:
LMDB's, the OS's, a missing extra) to the sentence the person reads; ``_cli.main`` calls it
once, around every command. An error it does not know is a bug: one line naming it, and
``--debug`` shows its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import lmdb

from parlour.runtime.errors import ParlourError
from parlour.stores import StoreInUseError

__all__ = [
    "AdminError",
    "OneLineParser",
    "at_least",
    "existing_store",
    "positive",
    "refusal",
    "say",
    "store_dir",
]

SERVE_EXTRA = "uvicorn", "starlette"


class AdminError(Exception):
    """Bad input to a command: the one line the user sees."""


def say(command: str, message: str) -> None:
    """Print ``message``'s first line as the command's refusal, on stderr."""
    line = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"parlour {command}: {line}", file=sys.stderr, flush=True)


def store_dir(path: Path) -> Path:
    """``path`` as a data directory a command may create a store in.

    Raises:
        AdminError: it is a file, or its parent directory does not exist (a mistyped
            path is refused, not created).
    """
    if path.exists() and not path.is_dir():
        raise AdminError(f"{path} is a file, not a parlour data directory: name a directory.")
    parent = path.absolute().parent
    if not path.exists() and not parent.is_dir():
        raise AdminError(
            f"{parent} does not exist, so {path} cannot be made there: create it first or "
            "name another --data-dir."
        )
    return path


def existing_store(path: Path) -> Path:
    """``path``, which must already hold a store (nothing is created at a mistyped path).

    Raises:
        AdminError: it is a file, or holds no store.
    """
    store_dir(path)
    if not (path / "data.mdb").is_file():
        where = "no such directory" if not path.exists() else "the directory holds none"
        raise AdminError(
            f"There is no parlour store at {path} ({where}): check --data-dir "
            "(parlour demo or chat without --resume makes one)."
        )
    return path


def refusal(exc: BaseException, data_dir: Path | None) -> str | None:
    """The one line a person reads for ``exc``, or None for an error that is a bug."""
    if isinstance(exc, AdminError):
        return str(exc)
    if isinstance(exc, StoreInUseError):
        return (
            f"the store at {exc.directory} is in use by another parlour (process "
            f"{exc.holder}): stop it, or name another --data-dir (list, show, history and "
            "export read beside it)."
        )
    if isinstance(exc, lmdb.Error):
        return f"the store at {data_dir} cannot be used: {exc}"
    package = (exc.name or "").partition(".")[0] if isinstance(exc, ImportError) else ""
    if package in SERVE_EXTRA:
        return (
            f"this needs the serve extra ({package} is not installed): pip install -e "
            "'.[serve]' in parlour's checkout."
        )
    if isinstance(exc, (ParlourError, OSError)):  # PermissionError: another user's id
        return str(exc)
    return None


def positive(text: str) -> int:
    """An argument that must be a whole number of at least 1 (argparse's ``type``)."""
    return at_least(1)(text)


def at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``low``..``high``; the refusal names the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"{low} to {high}"
            raise argparse.ArgumentTypeError(f"must be {bound}, not {value}")
        return value

    return parse


class OneLineParser(argparse.ArgumentParser):
    """argparse, refusing in one line (the usage is one ``--help`` away) with status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr, flush=True)
        raise SystemExit(2)
