"""Every command the README shows runs as written: each ``parlour`` flag it names is one its
command takes, each benchmark flag one its script takes, each ``tox`` environment and pip
extra exists, and the commands a newcomer types first (the demo, the store commands, chat,
bench) run as processes, as a person runs them, on a fresh directory.

``parlour serve`` runs as a process in ``tests/actors/serve/test_serve_command.py``; the
README's ``pip install`` lines need the network and are not run here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from parlour.actors.app._cli import main
from parlour.stores import LmdbStore

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PARLOUR = str(Path(sys.executable).parent / "parlour")
SUBCOMMANDS = {"chat", "demo", "bench", "serve", "list", "show", "history", "export"}
SUBCOMMANDS |= {"import", "delete", "fsck", "cluster"}
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def documented() -> list[str]:
    """Each command the README shows: the lines of its ``sh`` blocks (split at ``&&``) and
    every inline ``parlour ...``, ``python benchmarks/...`` and ``tox ...``."""
    found: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        for line in block.splitlines():
            found += [c.strip() for c in line.split("#")[0].split("&&") if c.strip()]
    inline = r"`((?:parlour|python benchmarks/[^\s`]+|tox)(?: [^`]*)?)`"
    found += [" ".join(c.split()) for c in re.findall(inline, README)]
    return found


def run(*args: str, cwd: Path, stdin: str = "", timeout: float = 300) -> str:
    """``parlour args...`` as a person runs it; its stdout. Fails on a non-zero exit."""
    done = subprocess.run(
        [PARLOUR, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    return done.stdout


def parlour_commands() -> dict[str | None, set[str]]:
    """The flags the README names, by subcommand (None: ``parlour`` itself)."""
    flags: dict[str | None, set[str]] = {}
    for command in documented():
        words = command.replace(".venv/bin/parlour", "parlour").split()
        if words[0] != "parlour":
            continue
        sub = next((w for w in words[1:2] if w in SUBCOMMANDS), None)
        flags.setdefault(sub, set()).update(FLAG.findall(command))
    return flags


def test_the_readme_shows_the_commands_a_newcomer_needs() -> None:
    commands = parlour_commands()
    assert {"demo", "chat", "serve", "bench", "list", "show", "export", "import"} <= set(commands)
    assert any(c.startswith("python benchmarks/") for c in documented())


def test_every_parlour_flag_the_readme_names_is_one_its_command_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Read from each command's ``--help`` (in this process: the slow test below runs the
    commands themselves as processes)."""
    for sub, flags in parlour_commands().items():
        with pytest.raises(SystemExit) as exited:
            main([*([sub] if sub else []), "--help"])
        assert exited.value.code == 0, sub
        helped = capsys.readouterr().out
        missing = sorted(f for f in flags if f not in helped)
        assert missing == [], f"parlour {sub or ''} does not take {missing}"


@pytest.mark.slow
def test_every_benchmark_the_readme_names_exists_and_takes_its_flags(tmp_path: Path) -> None:
    scripts: dict[str, set[str]] = {}
    for command in documented():
        if command.startswith("python benchmarks/"):
            script, _, rest = command.removeprefix("python ").partition(" ")
            scripts.setdefault(script, set()).update(FLAG.findall(rest))
    assert len(scripts) >= 10
    for script, flags in sorted(scripts.items()):
        path = ROOT / script
        assert path.is_file(), script
        if "argparse" not in path.read_text():
            assert not flags, f"{script} takes no flags, the README names {flags}"
            continue
        helped = subprocess.run(
            [sys.executable, str(path), "--help"], cwd=tmp_path, capture_output=True, text=True
        )
        assert helped.returncode == 0, (script, helped.stderr[-2000:])
        missing = sorted(f for f in flags if f not in helped.stdout)
        assert missing == [], f"{script} does not take {missing}"


def test_every_tox_environment_and_pip_extra_the_readme_names_exists() -> None:
    tox = (ROOT / "tox.ini").read_text()
    for command in documented():
        if command.startswith("tox -e "):
            assert f"[testenv:{command.split()[2]}]" in tox, command
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = {e for c in documented() if "pip install" in c for e in re.findall(r"\[(\w+)\]", c)}
    assert named and named <= set(extras)


@pytest.mark.slow
def test_the_readme_commands_run_on_a_fresh_directory(tmp_path: Path) -> None:
    """The demo (as the first line runs it), then each store command on what it stored,
    chat and bench, each as a process; every one exits 0 without a traceback."""
    assert "restored 20/20 intact" in run("demo", cwd=tmp_path)  # ./parlour-data
    data = ["--data-dir", "parlour-data"]
    long = run("demo", "--long", "--window", "8000", "--data-dir", "long", cwd=tmp_path)
    assert "compaction levels climbed" in long
    with LmdbStore(tmp_path / "parlour-data") as store:
        cid = store.list_conversations("user-0")[0].conversation_id
    assert cid in run("list", "user-0", "--limit", "5", *data, cwd=tmp_path)
    assert "get_current_time" in run("show", "user-0", cid, *data, cwd=tmp_path)
    run("show", "user-0", cid, "--version", "1", "--json", *data, cwd=tmp_path)
    run("history", "user-0", cid, *data, cwd=tmp_path)
    run("export", "user-0", cid, "--format", "markdown", *data, cwd=tmp_path)
    run("export", "user-0", cid, "--versions", "--output", "all.json", *data, cwd=tmp_path)
    run("export", "user-0", cid, "--format", "json", "--output", "one.json", *data, cwd=tmp_path)
    run("import", "user-0", "one.json", "--as-new", *data, cwd=tmp_path)
    run("delete", "user-0", cid, *data, cwd=tmp_path)
    run("import", "user-0", "one.json", *data, cwd=tmp_path)  # back, as it was
    assert "get_current_time" in run("show", "user-0", cid, *data, cwd=tmp_path)
    run("fsck", *data, cwd=tmp_path)
    assert re.search(r"\d+\.\d+", run("--version", cwd=tmp_path))
    chat = run("chat", "--user", "newcomer", *data, cwd=tmp_path, stdin="Hello there\n\n")
    assert "Hello there" in chat
    bench = ["--conversations", "4", "--turns", "2", "--workers", "2", "--no-sync"]
    assert "turns/s" in run("bench", *bench, "--data-dir", "bench-data", cwd=tmp_path)
