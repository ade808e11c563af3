"""The ``parlour`` command: ``chat`` with the agent, ``demo`` (the main job), ``bench``, and
the store commands (``list``, ``show``, ``history``, ``export``, ``import``, ``delete``,
``fsck``).

A refusal is one line on stderr and a non-zero exit (``--debug`` shows the traceback of an
unexpected error); Ctrl-C ends any command with status 130."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from . import _admin
from ._bench import run_bench, run_cases
from ._cases import CASES
from ._chat import CHAT_HELP, DEFAULT_CONTEXT_WINDOW, ModelChoice, model_client, run_chat
from ._cluster import add_cluster_commands, run_cluster
from ._demo import MIN_WINDOW, run_demo, run_long_demo
from ._guard import AdminError, OneLineParser, at_least, positive, refusal, say, store_dir

DEFAULT_DATA_DIR = Path("parlour-data")
INTERRUPTED = 130  # the shell's status for a process ended by Ctrl-C (128 + SIGINT)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="parlour", description=__doc__)
    parser.add_argument("--verbose", action="store_true", help="log parlour's records to stderr")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an unexpected error"
    )
    parser.add_argument(
        "--version", action="version", version=f"parlour {importlib.metadata.version('parlour')}"
    )
    commands: argparse._SubParsersAction[Any] = parser.add_subparsers(dest="command", required=True)

    _job_commands(commands)
    _admin.register(commands, DEFAULT_DATA_DIR)
    add_cluster_commands(commands)  # parlour cluster status (Ray only when it runs)
    for sub in commands.choices.values():  # global options after the subcommand too
        sub.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS)
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    return parser


def _job_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """The commands that run the agent: chat, demo, bench, serve."""
    chat = commands.add_parser(
        "chat", help="chat with the agent, streaming its answers", description=CHAT_HELP
    )
    chat.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    chat.add_argument("--user", default="me", help="the user id (default: me)")
    chat.add_argument("--resume", metavar="ID", default=None, help="continue a conversation")
    _model_arguments(chat)
    chat.add_argument(
        "--needs-approval",
        metavar="TOOL",
        action="append",
        default=[],
        help="ask y/n before each call of this tool (repeatable)",
    )

    demo = commands.add_parser("demo", help="run, restart and restore conversations offline")
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="the LMDB directory (default: ./parlour-data)",
    )
    demo.add_argument("--conversations", type=positive, default=20)
    _model_arguments(demo)
    demo.add_argument("--workers", type=positive, default=8)
    demo.add_argument(
        "--long", action="store_true", help="one conversation far past a small model window"
    )
    demo.add_argument(
        "--window",
        type=at_least(MIN_WINDOW),
        default=8_000,
        help=f"--long: the model's window in tokens (at least {MIN_WINDOW:,})",
    )
    demo.add_argument("--long-turns", type=positive, default=100, help="--long: the turns to run")

    bench = commands.add_parser("bench", help="durable turns per second through the full path")
    bench.add_argument(
        "--conversations", type=positive, default=200, help="conversations to run (default: 200)"
    )
    bench.add_argument("--turns", type=positive, default=10, help="turns on each (default: 10)")
    bench.add_argument(
        "--workers", type=positive, default=8, help="threads sending turns (default: 8)"
    )
    bench.add_argument(
        "--data-dir", type=Path, default=None, help="the LMDB directory (default: a temporary one)"
    )
    bench.add_argument(
        "--no-sync",
        dest="sync",
        action="store_false",
        help="skip fsync: measures the CPU path, not the disk",
    )
    bench.add_argument(
        "--case",
        choices=[*CASES, "all"],
        default=None,
        help="run a benchmark case against the hand-written floor (ignores the sizes above)",
    )
    bench.add_argument(
        "--rounds",
        type=positive,
        default=1,
        help="--case: run each case this many times and show the medians (default: 1)",
    )

    serve = commands.add_parser("serve", help="the chat API and inspector page over HTTP")
    serve.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    _model_arguments(serve)
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve.add_argument(
        "--port", type=at_least(0, 65535), default=8000, help="the port (0: any free one)"
    )
    serve.add_argument("--user", default="me", help="the user a new token is for")
    serve.add_argument("--new-token", action="store_true", help="issue a token for --user")
    serve.add_argument("--cluster", metavar="NAME", help="run the turns on this Ray cluster")
    serve.add_argument("--shards", type=positive, help="--cluster: how many shards it routes")
    serve.add_argument(
        "--agent",
        metavar="MODULE:FUNCTION",
        help="your agent: a function returning an Agent (default: a chat agent on --model)",
    )
    serve.add_argument("--store", metavar="DSN", help="--cluster: the PostgreSQL store")
    serve.add_argument("--address", default="auto", help="--cluster: the Ray cluster")


def _model_arguments(command: argparse.ArgumentParser) -> None:
    """``--model``, ``--base-url`` and ``--context-window``: read by ``_model``."""
    command.add_argument(
        "--model",
        default="scripted",
        help="a catalog model id, or with --base-url the server's model (default: the offline "
        "scripted one)",
    )
    command.add_argument(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible server (Ollama, vLLM, llama.cpp), e.g. "
        "http://localhost:11434/v1; no API key needed",
    )
    command.add_argument(
        "--context-window",
        type=positive,
        metavar="TOKENS",
        help=f"--base-url: the model's context window, for a model outside the catalog "
        f"(default: {DEFAULT_CONTEXT_WINDOW:,})",
    )


def _model(args: argparse.Namespace) -> ModelChoice:
    return ModelChoice(args.model, args.base_url, args.context_window)


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from . import _serve  # needs the serve extra

    if args.cluster is None:
        return _serve.run_serve(
            store_dir(args.data_dir),
            _model(args),
            args.host,
            args.port,
            args.user,
            args.new_token,
            args.agent,
        )
    if not (args.shards and args.agent and args.store):
        parser.error("serve --cluster needs --shards N, --agent MODULE:FUNCTION and --store DSN")
    config = _serve.ClusterConfig(args.cluster, args.shards, args.agent, args.store, args.address)
    return _serve.run_serve_cluster(
        config, args.data_dir, args.host, args.port, args.user, args.new_token
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``parlour``: parse, run the command, and answer every refusal in one line.

    The one boundary between the library and the person: an error a person can cause
    (``_guard.refusal``) is one line on stderr and status 1, Ctrl-C is status 130; any
    other error is a bug: one line naming it, its traceback with ``--debug``.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    logger.remove()
    logger.enable("parlour")
    logger.add(sys.stderr, level="INFO" if args.verbose else "WARNING")  # serve: once serving
    try:
        return _run(parser, args)
    except KeyboardInterrupt:
        say(args.command, "interrupted")
        return INTERRUPTED
    except Exception as exc:
        line = refusal(exc, getattr(args, "data_dir", None))
        if line is None and args.debug:
            raise
        if line is None:
            why = ": ".join([type(exc).__name__, *str(exc).strip().splitlines()[:1]])
            line = f"unexpected {why} (run again with --debug for the traceback)"
        say(args.command, line)
        return 1


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "chat":
        return run_chat(args.data_dir, args.user, args.resume, _model(args), args.needs_approval)
    if args.command == "demo" and args.long:
        if args.model != "scripted" or args.base_url:
            raise AdminError("demo --long runs on the offline model: drop --model and --base-url")
        return run_long_demo(store_dir(args.data_dir), args.long_turns, args.window)
    if args.command == "demo":
        offline = args.model == "scripted" and not args.base_url
        client = None if offline else model_client(_model(args))
        return run_demo(store_dir(args.data_dir), args.conversations, args.workers, client)
    if args.command == "serve":
        return _serve(parser, args)
    if args.command == "cluster":
        return run_cluster(args)
    if args.command == "bench" and args.case is not None:
        return run_cases(list(CASES) if args.case == "all" else [args.case], args.sync, args.rounds)
    if args.command == "bench":
        data_dir = None if args.data_dir is None else store_dir(args.data_dir)
        return run_bench(data_dir, args.conversations, args.turns, args.workers, args.sync)
    return _admin.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
