"""Every bad input to ``parlour`` is one line on stderr and a non-zero exit, never a
traceback, and never a store made at a mistyped path: each run as a person runs it, in a
child process."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli import PARLOUR, environment, parlour, python, read_until, refused

HOLDER = """
import sys
from parlour.stores import LmdbStore
store = LmdbStore(sys.argv[1])
print("holding", flush=True)
sys.stdin.read()
store.close()
"""


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("not a directory")
    return tmp_path / "notes.txt"


@pytest.mark.parametrize(
    "command",
    [["demo"], ["chat"], ["bench", "--conversations", "2", "--turns", "1"], ["serve"]],
)
def test_a_data_dir_that_is_a_file_is_refused_by_every_command_that_runs_the_agent(
    tmp_path: Path, a_file: Path, command: list[str]
) -> None:
    line = refused(parlour(tmp_path, *command, "--data-dir", str(a_file)))
    assert f"{a_file} is a file, not a parlour data directory" in line
    assert a_file.read_text() == "not a directory"


def test_a_data_dir_under_a_missing_directory_is_refused_not_made(tmp_path: Path) -> None:
    line = refused(parlour(tmp_path, "demo", "--data-dir", str(tmp_path / "typo" / "data")))
    assert "does not exist" in line and "create it first" in line
    assert not (tmp_path / "typo").exists()


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A store directory another process holds open for writing, and that process's pid."""
    data = tmp_path / "held"
    holder = subprocess.Popen(
        [PARLOUR[0], "-c", HOLDER, str(data)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    yield data, holder.pid
    holder.communicate("", timeout=60)


@pytest.mark.parametrize("command", [["demo", "--conversations", "2"], ["chat"]])
def test_demo_and_chat_beside_a_running_writer_say_who_holds_it_and_what_to_do(
    tmp_path: Path, writer: tuple[Path, int], command: list[str]
) -> None:
    data, pid = writer
    line = refused(parlour(tmp_path, *command, "--data-dir", str(data), stdin="hi\n"))
    assert f"in use by another parlour (process {pid})" in line
    assert "name another --data-dir" in line and "readonly=True" not in line


@pytest.mark.parametrize("command", [["demo", "--conversations", "2"], ["chat"]])
def test_demo_and_chat_on_a_corrupt_store_are_refused(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "data.mdb").write_bytes(b"not an lmdb file" * 512)
    line = refused(parlour(tmp_path, *command, "--data-dir", str(tmp_path / "corrupt")))
    assert "cannot be used" in line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["show", "u", "c", "--version", "-1"], "argument --version: must be at least 1, not -1"),
        (["list", "u", "--limit", "0"], "argument --limit: must be at least 1, not 0"),
        (["demo", "--long", "--window", "10"], "argument --window: must be at least 6000, not 10"),
        (["demo", "--long", "--long-turns", "0"], "argument --long-turns: must be at least 1"),
        (["demo", "--conversations", "0"], "argument --conversations: must be at least 1"),
        (["bench", "--turns", "x"], "argument --turns: 'x' is not a whole number"),
        (["serve", "--port", "99999"], "argument --port: must be 0 to 65535, not 99999"),
    ],
)
def test_an_argument_out_of_range_is_refused_before_anything_runs(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    line = refused(parlour(tmp_path, *argv, "--data-dir", str(tmp_path / "data")), status=2)
    assert says in line and line.endswith("--help)")
    assert not (tmp_path / "data").exists()


def test_serve_on_a_port_in_use_is_refused_and_creates_no_store(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        line = refused(parlour(tmp_path, "serve", "--port", port, "--data-dir", "data"))
    assert f"cannot listen on 127.0.0.1:{port}" in line and "another --port" in line
    assert not (tmp_path / "data").exists()


def _ray_running() -> bool:
    """A Ray head runs on this machine (its gcs_server process), as Ray's "auto" looks."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "gcs_server":
                return True
        except OSError:  # the process ended meanwhile
            continue
    return False


@pytest.mark.parametrize(
    "argv",
    [
        ["cluster", "status", "--name", "c", "--shards", "1"],
        [
            "serve",
            "--cluster",
            "c",
            "--shards",
            "1",
            "--agent",
            "m:f",
            "--store",
            "dsn",
            "--data-dir",
            "d",
        ],
    ],
)
def test_the_cluster_commands_without_ray_running_say_how_to_start_it(
    tmp_path: Path, argv: list[str]
) -> None:
    if _ray_running():  # "auto" would find that cluster (another run's) and use it
        pytest.skip("a Ray cluster runs on this machine")
    line = refused(parlour(tmp_path, *argv))
    assert "no Ray cluster is running at --address auto" in line and "ray start --head" in line
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_a_real_model_without_its_key_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    line = refused(parlour(tmp_path, command, "--model", "claude-sonnet-4-5", "--data-dir", "d"))
    assert "set ANTHROPIC_API_KEY" in line
    assert not (tmp_path / "d").exists()


MISSING = """
import sys
sys.modules[{name!r}] = None  # as if it were not installed
from parlour.actors.app._cli import main
sys.exit(main({argv!r}))
"""


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_a_real_model_without_its_sdk_names_the_extra_in_one_line(
    tmp_path: Path, command: str
) -> None:
    argv = [command, "--model", "claude-sonnet-4-5", "--data-dir", "d"]
    done = python(
        tmp_path,
        MISSING.format(name="anthropic", argv=argv),
        environment(ANTHROPIC_API_KEY="sk-test"),
    )
    assert "pip install -e '.[anthropic]'" in refused(done)


@pytest.mark.parametrize("package", ["uvicorn", "starlette"])
def test_serve_without_the_serve_extra_says_how_to_install_it(tmp_path: Path, package: str) -> None:
    done = python(tmp_path, MISSING.format(name=package, argv=["serve", "--data-dir", "d"]))
    line = refused(done)
    assert f"{package} is not installed" in line and "pip install -e '.[serve]'" in line
    assert not (tmp_path / "d").exists()


def test_export_to_a_directory_says_to_name_a_file_not_that_the_store_is_broken(
    tmp_path: Path,
) -> None:
    assert parlour(tmp_path, "demo", "--conversations", "1", "--data-dir", "d").returncode == 0
    listed = parlour(tmp_path, "list", "user-0", "--data-dir", "d")
    cid = listed.stdout.split("\t")[0]
    line = refused(parlour(tmp_path, "export", "user-0", cid, "--output", ".", "--data-dir", "d"))
    assert line == "parlour export: --output . is a directory: name a file to write."


UNEXPECTED = """
import sys
from parlour.actors.app import _admin
def broken(args, console):
    raise RuntimeError("a bug\\nwith a second line")
_admin._RUNNERS["fsck"] = broken
from parlour.actors.app._cli import main
sys.exit(main({argv!r}))
"""


def test_an_unexpected_error_is_one_line_naming_it_and_debug_shows_the_traceback(
    tmp_path: Path,
) -> None:
    line = refused(python(tmp_path, UNEXPECTED.format(argv=["fsck"])))
    assert line == (
        "parlour fsck: unexpected RuntimeError: a bug (run again with --debug for the traceback)"
    )
    debugged = python(tmp_path, UNEXPECTED.format(argv=["fsck", "--debug"]))
    assert debugged.returncode == 1 and "Traceback" in debugged.stderr
    assert "RuntimeError: a bug" in debugged.stderr


@pytest.mark.parametrize(
    ("argv", "caption"),
    [
        (["--conversations", "2000", "--turns", "50", "--data-dir", "b"], "LMDB commits\n"),
        (["--case", "default", "--rounds", "3"], "every path\n"),
    ],
)
def test_ctrl_c_in_bench_stops_it_in_one_line_with_status_130(
    tmp_path: Path, argv: list[str], caption: str
) -> None:
    child = subprocess.Popen(
        [*PARLOUR, "bench", *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    assert child.stdout is not None
    read_until(child.stdout, caption)  # printed as the turns start
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    done = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    assert refused(done, status=130) == "parlour bench: interrupted"
    assert "turns/s" not in out  # no table of a run cut short
