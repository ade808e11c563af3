"""Running ``parlour`` as a person does: a real child process, its exit status, its stdout
and stderr; and the one-line refusal every bad input must get."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PARLOUR = [sys.executable, "-m", "parlour.actors.app._cli"]
KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "RAY_ADDRESS")


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without any provider key (offline, as on a fresh machine)."""
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env.update(extra)
    return env


def parlour(
    cwd: Path, *argv: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``parlour ARGV`` run in ``cwd`` to its end."""
    return subprocess.run(
        [*PARLOUR, *argv],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env=env or environment(),
        timeout=300,
    )


def python(
    cwd: Path, code: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``code`` run by this interpreter in ``cwd`` (to fake a missing package first)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env or environment(),
        timeout=300,
    )


def refused(done: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """The one line ``done`` refused with: exactly one line on stderr, ``parlour ...:``, no
    traceback, exit ``status``."""
    lines = done.stderr.splitlines()
    assert done.returncode == status, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("parlour ") and "Traceback" not in done.stderr
    return lines[0]


def read_until(stream: object, marker: str) -> str:
    """What ``stream`` (a child's text stdout) says up to and including ``marker``."""
    seen = ""
    while not seen.endswith(marker):
        char = stream.read(1)  # type: ignore[attr-defined]
        assert char, f"the child ended before {marker!r}: {seen[-500:]!r}"
        seen += char
    return seen
