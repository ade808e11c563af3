"""The store commands on the demo's data, as a new user would try them: list, show,
history, export, import, delete, fsck; bad input is one line on stderr, never a traceback;
read-only commands never create a store and work beside a running writer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import lmdb
import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from parlour.actors import Agent, ConversationService
from parlour.actors.app._cli import main
from parlour.actors.app._demo import run_demo
from parlour.runtime import (
    ConversationContext,
    Depth,
    IncomingMessage,
    OutgoingMessage,
    OutputSize,
    is_interrupted_result,
)
from parlour.runtime.blocks import PojoBlock, ToolResultBlock, ToolUseBlock
from parlour.runtime.providers import AnthropicClient
from parlour.runtime.snapshots import ConversationPersistenceSnapshot, encode_snapshot
from parlour.runtime.testing import MockProvider, anthropic_message, mock_anthropic_sdk
from parlour.stores import LmdbStore


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``parlour demo`` leaves behind: four conversations of four users."""
    data = tmp_path_factory.mktemp("demo") / "data"
    assert run_demo(data, conversations=4, workers=2) == 0
    return data


@pytest.fixture
def data(demo_data: Path, tmp_path: Path) -> Path:
    """A private copy of the demo's data, for commands that write."""
    return Path(shutil.copytree(demo_data, tmp_path / "data"))


def _first(data: Path, user: str = "user-0") -> str:
    with LmdbStore(data, readonly=True) as store:
        return store.list_conversations(user)[0].conversation_id


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_list_and_show_print_tables_of_the_demos_conversations(
    demo_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _first(demo_data)
    status, out, _ = _run(capsys, "list", "user-0", "--data-dir", str(demo_data))
    assert status == 0 and out.startswith(f"{cid}\t") and "Conversation 0" in out  # piped
    status, out, _ = _run(capsys, "show", "user-0", cid, "--data-dir", str(demo_data))
    assert status == 0 and "get_current_time" in out and "assistant" in out
    status, out, _ = _run(capsys, "show", "user-0", cid, "--json", "--data-dir", str(demo_data))
    assert status == 0 and json.loads(out)["conversation_id"] == cid
    status, out, _ = _run(
        capsys, "show", "user-0", cid, "--version", "1", "--data-dir", str(demo_data)
    )
    assert status == 0 and "(version 1)" in out


def test_history_lists_every_kept_version_newest_first(
    demo_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _first(demo_data)
    with LmdbStore(demo_data, readonly=True) as store:
        versions = [v.version for v in store.get_version_history(cid, "user-0")]
    assert versions == list(range(len(versions), 0, -1)) and len(versions) > 2
    status, out, _ = _run(capsys, "history", "user-0", cid, "--data-dir", str(demo_data))
    shown = [int(line.split()[1]) for line in out.splitlines() if line[:1] == "│"]
    assert status == 0 and shown == versions


def test_an_export_imports_back_as_stored_with_its_versions(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid, exported = _first(data), tmp_path / "export.json"
    argv = ["export", "user-0", cid, "--versions", "--output", str(exported)]
    assert _run(capsys, *argv, "--data-dir", str(data))[0] == 0
    document = json.loads(exported.read_bytes())
    assert document["format"] == "parlour-conversation" and document["format_version"] == 1
    status, out, _ = _run(
        capsys, "import", "user-9", str(exported), "--as-new", "--data-dir", str(data)
    )
    assert status == 0
    with LmdbStore(data, readonly=True) as store:
        [copy] = store.list_conversations("user-9")
        assert copy.conversation_id != cid and copy.conversation_id in out
        original, imported = store.load(cid, "user-0"), store.load(copy.conversation_id, "user-9")
        assert original is not None and imported is not None
        assert _stored_form(imported) == _stored_form(original)
        old = store.get_version_history(cid, "user-0")
        new = store.get_version_history(copy.conversation_id, "user-9")
        assert len(new) == len(old)
        for a, b in zip(reversed(old), reversed(new), strict=True):
            before = store.load_version(cid, a.version, "user-0")
            after = store.load_version(copy.conversation_id, b.version, "user-9")
            assert before is not None and after is not None
            assert _stored_form(after) == _stored_form(before)


def _stored_form(snapshot: ConversationPersistenceSnapshot) -> bytes:
    """The stored bytes, less what an import changes (id, owner, version)."""
    return encode_snapshot(
        msgspec.structs.replace(snapshot, conversation_id="-", user_id="-", stored_version=0)
    )


def test_an_import_refuses_an_id_another_user_holds_and_changes_nothing(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid, exported = _first(data), tmp_path / "export.json"
    _run(capsys, "export", "user-0", cid, "--output", str(exported), "--data-dir", str(data))
    with LmdbStore(data, readonly=True) as store:
        before = store.version_of(cid, "user-0")
    for user in ("user-1", "user-0"):  # another user's id; one's own (a second copy)
        status, _, err = _run(capsys, "import", user, str(exported), "--data-dir", str(data))
        assert status == 1 and "nothing was imported" in err and len(err.splitlines()) == 1
    with LmdbStore(data, readonly=True) as store:
        assert store.version_of(cid, "user-0") == before
        assert cid not in [s.conversation_id for s in store.list_conversations("user-1")]


def test_an_import_carries_a_class_it_cannot_import_unchanged_and_never_imports_it(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = ConversationContext("foreign-class", user_id="ann")
    c.add_user_message("see the value")
    snapshot = c.to_snapshot()
    message = snapshot.messages[0]
    block = PojoBlock(value={"n": 1}, class_path="parlour_nowhere.module:Thing")
    snapshot.messages[0] = msgspec.structs.replace(message, blocks=[*message.blocks, block])
    raw = encode_snapshot(snapshot)
    exported = tmp_path / "export.json"
    exported.write_bytes(
        b'{"format":"parlour-conversation","format_version":1,"conversation_id":"foreign-class",'
        b'"user_id":"ann","exported_at":"2026-01-01T00:00:00Z","snapshot":' + raw + b"}"
    )
    assert _run(capsys, "import", "ann", str(exported), "--data-dir", str(data))[0] == 0
    assert "parlour_nowhere" not in sys.modules
    with LmdbStore(data, readonly=True) as store:
        stored = store.load("foreign-class", "ann")
    assert stored is not None
    assert _stored_form(stored) == _stored_form(snapshot)


def test_a_markdown_export_is_the_transcript(
    demo_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _first(demo_data)
    status, out, _ = _run(
        capsys, "export", "user-0", cid, "--format", "markdown", "--data-dir", str(demo_data)
    )
    assert status == 0 and out.startswith("# Conversation 0")
    assert "<tool call get_current_time" in out and "[assistant]" in out


def test_delete_removes_the_conversation_and_its_history(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _first(data)
    assert _run(capsys, "delete", "user-0", cid, "--data-dir", str(data))[0] == 0
    with LmdbStore(data, readonly=True) as store:
        assert store.load(cid, "user-0") is None
        assert store.get_version_history(cid, "user-0") == []
    status, _, err = _run(capsys, "delete", "user-0", cid, "--data-dir", str(data))
    assert status == 1 and f"no conversation {cid}" in err


def test_fsck_finds_a_record_that_does_not_decode_and_quarantines_it_on_request(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _first(data)
    env = lmdb.open(str(data), max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(cid.encode(), b"{damaged", db=env.open_db(b"bodies", txn=txn))
    env.close()
    status, out, err = _run(capsys, "fsck", "--data-dir", str(data))
    assert status == 1 and cid in out and "--quarantine" in err
    assert _run(capsys, "fsck", "--quarantine", "--data-dir", str(data))[0] == 0
    status, out, _ = _run(capsys, "fsck", "--data-dir", str(data))
    assert status == 0 and "every record decodes" in out
    with LmdbStore(data, readonly=True) as store:
        [moved] = store.quarantined(cid)
        assert moved.body == b"{damaged"
        assert len(store.list_conversations("user-1")) == 1  # the others are untouched


KILLED = "killed-mid-tool"


def _kill_mid_tool(data: Path) -> None:
    """Store what a process killed while its tool ran leaves: the model's call, last."""
    context = ConversationContext(KILLED, user_id="carol")
    context.add_user_message("Where is order 42?")
    call = ToolUseBlock(id="toolu_1", name="lookup", input_json='{"order_id": "42"}')
    context.add_message(IncomingMessage(blocks=[call]))
    with LmdbStore(data) as store:
        store.create_context(context.to_snapshot(), "carol")


def lookup(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: the order.
    """
    return f"order {order_id} shipped"


def test_fsck_reports_a_conversation_killed_mid_tool_and_exits_non_zero(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _kill_mid_tool(data)
    status, out, err = _run(capsys, "fsck", "--data-dir", str(data))
    assert status == 1 and "every record decodes" in out
    assert "1 conversations interrupted" in out and KILLED in out and "carol" in out
    assert err == "parlour fsck: 1 interrupted; --repair answers their calls\n"
    with LmdbStore(data, readonly=True) as store:
        assert store.interrupted() == [(KILLED, "carol", 1)]
        assert len(store.get_version_history(KILLED, "carol")) == 1  # a report writes nothing


def test_the_store_counts_only_calls_no_later_result_answers(tmp_path: Path) -> None:
    context = ConversationContext("mixed", user_id="dave")
    calls = [ToolUseBlock(id=i, name="lookup", input_json="{}") for i in ("a", "b", "c")]
    context.add_message(IncomingMessage(blocks=calls[:1]))
    context.add_message(OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="a", content="ok")]))
    context.add_message(IncomingMessage(blocks=calls[1:]))
    answered = ConversationContext("answered", user_id="dave")
    answered.add_message(IncomingMessage(blocks=calls[:1]))
    answered.add_message(OutgoingMessage(blocks=[ToolResultBlock(tool_use_id="a", content="")]))
    with LmdbStore(tmp_path / "db") as store:
        store.create_context(context.to_snapshot(), "dave")
        store.create_context(answered.to_snapshot(), "dave")
        assert store.interrupted() == [("mixed", "dave", 2)]


def test_fsck_repair_answers_the_call_as_a_new_version_and_leaves_the_healthy_alone(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _kill_mid_tool(data)
    healthy = _first(data)
    with LmdbStore(data, readonly=True) as store:
        before = store.version_of(healthy, "user-0")
    status, out, _ = _run(capsys, "fsck", "--repair", "--data-dir", str(data))
    assert status == 0 and "repaired 1" in out and KILLED in out and "calls repaired" in out
    with LmdbStore(data, readonly=True) as store:
        assert store.interrupted() == []
        repaired = store.load(KILLED, "carol")
        assert repaired is not None and repaired.stored_version == 2
        [answer] = repaired.messages[-1].blocks
        assert isinstance(answer, ToolResultBlock) and answer.tool_use_id == "toolu_1"
        assert is_interrupted_result(answer, "lookup") and repaired.messages[-1].role == "user"
        old = store.load_version(KILLED, 1, "carol")
        assert old is not None and isinstance(old.messages[-1].blocks[0], ToolUseBlock)
        assert store.version_of(healthy, "user-0") == before
    status, out, _ = _run(capsys, "fsck", "--data-dir", str(data))
    assert status == 0 and "every tool call has its result" in out


def test_a_repaired_conversation_renders_for_anthropic_with_each_call_paired(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _kill_mid_tool(data)
    assert _run(capsys, "fsck", "--repair", "--data-dir", str(data))[0] == 0
    server = MockProvider(anthropic_message("It shipped yesterday."))
    model = AnthropicClient("claude-sonnet-4-5", client=mock_anthropic_sdk(server))
    agent = Agent(model, tools=[lookup], output=OutputSize.COMPACT, depth=Depth.IMMEDIATE)
    with LmdbStore(data) as store, ConversationService(store) as service:
        chat = agent.chat(service, user_id="carol", conversation_id=KILLED)
        assert chat.interrupted  # repaired, not finished: resume or a new message goes on
        assert chat.send("Hello again?").text == "It shipped yesterday."
    messages = server.last_body["messages"]
    shape = [m["role"] + ":" + ",".join(b["type"] for b in m["content"]) for m in messages]
    assert shape == ["user:text", "assistant:tool_use", "user:tool_result", "user:text"]
    result = messages[2]["content"][0]
    assert result["tool_use_id"] == messages[1]["content"][0]["id"] and result["is_error"]


def _corrupt_store(tmp_path: Path) -> Path:
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "data.mdb").write_bytes(b"not an lmdb file" * 512)
    return tmp_path / "corrupt"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["list", "user-0", "--data-dir", "{missing}"], "There is no parlour store"),
        (["show", "user-0", "x", "--data-dir", "{file}"], "is a file"),
        (["history", "user-0", "x", "--data-dir", "{corrupt}"], "cannot be used"),
        (["show", "user-0", "no-such-id", "--data-dir", "{demo}"], "no conversation no-such-id"),
        (["show", "user-1", "{cid}", "--data-dir", "{demo}"], "does not own"),
        (["export", "user-0", "no-such-id", "--data-dir", "{demo}"], "no conversation"),
        (["import", "user-0", "{file}", "--data-dir", "{demo}"], "is not a parlour export"),
        (["fsck", "--data-dir", "{missing}"], "There is no parlour store"),
        (["fsck", "--repair", "--data-dir", "{missing}"], "There is no parlour store"),
        (["fsck", "--repair", "--data-dir", "{corrupt}"], "cannot be used"),
        (["delete", "user-0", "x", "--data-dir", "{missing}"], "There is no parlour store"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(
    demo_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    says: str,
) -> None:
    (tmp_path / "file").write_text("not a directory")
    places = {
        "missing": str(tmp_path / "mistyped"),
        "file": str(tmp_path / "file"),
        "corrupt": str(_corrupt_store(tmp_path)),
        "demo": str(demo_data),
        "cid": _first(demo_data),
    }
    status, _, err = _run(capsys, *(arg.format(**places) for arg in argv))
    assert status == 1
    assert len(err.strip().splitlines()) == 1 and err.startswith("parlour ") and says in err
    assert "Traceback" not in err
    assert not (tmp_path / "mistyped").exists()  # no store created at a mistyped path


HOLDER = """
import sys
from parlour.stores import LmdbStore
store = LmdbStore(sys.argv[1])
print("holding", flush=True)
sys.stdin.read()
store.close()
"""


def test_read_only_commands_work_while_a_writer_process_holds_the_directory(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cid = _first(data)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        d = ["--data-dir", str(data)]
        assert _run(capsys, "list", "user-0", *d)[0] == 0
        assert _run(capsys, "show", "user-0", cid, *d)[0] == 0
        assert _run(capsys, "history", "user-0", cid, *d)[0] == 0
        assert _run(capsys, "export", "user-0", cid, *d)[0] == 0
        assert _run(capsys, "fsck", *d)[0] == 0
        status, _, err = _run(capsys, "delete", "user-0", cid, *d)
        assert status == 1 and f"process {holder.pid}" in err and len(err.splitlines()) == 1
    finally:
        holder.communicate("", timeout=30)
    with LmdbStore(data, readonly=True) as store:
        assert store.load(cid, "user-0") is not None  # the refused delete deleted nothing


def test_global_options_come_after_the_subcommand_too_and_version_exists(
    demo_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(capsys, "list", "user-0", "--data-dir", str(demo_data), "--verbose")[0] == 0
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("parlour 0.")


_VALID = {
    "format": "parlour-conversation",
    "format_version": 1,
    "conversation_id": "ok-id",
    "user_id": "ann",
    "exported_at": "2026-01-01T00:00:00Z",
    "snapshot": json.loads(encode_snapshot(ConversationContext("ok-id").to_snapshot())),
}
_documents = st.one_of(
    st.just(json.dumps(_VALID).encode()),
    st.binary(max_size=200),
    st.builds(
        lambda fmt, version, cid, snapshot: json.dumps(
            {
                "format": fmt,
                "format_version": version,
                "conversation_id": cid,
                "user_id": "ann",
                "exported_at": "2026-01-01T00:00:00Z",
                "snapshot": snapshot,
            }
        ).encode(),
        st.sampled_from(["parlour-conversation", "other"]),
        st.integers(-1, 3),
        st.sampled_from(["", "a\x00b", "ok-id", "x" * 600]),
        st.one_of(
            st.dictionaries(
                st.sampled_from(["conversation_id", "version", "messages"]), st.integers()
            ),
            st.just(
                {"conversation_id": "ok-id", "created_at": "2026-01-01T00:00:00Z", "version": 99}
            ),
            st.just(
                {
                    "conversation_id": "ok-id",
                    "created_at": "2026-01-01T00:00:00Z",
                    "messages": [{"direction": "sideways"}],
                }
            ),
            st.just(json.loads(encode_snapshot(ConversationContext("ok-id").to_snapshot()))),
        ),
    ),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=_documents)
def test_any_export_file_imports_once_or_is_refused_in_one_line_importing_nothing(
    demo_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], document: bytes
) -> None:
    data = tmp_path / "data"
    if not data.exists():
        shutil.copytree(demo_data, data)
    exported = tmp_path / "bad.json"
    exported.write_bytes(document)
    status, _, err = _run(capsys, "import", "ann", str(exported), "--data-dir", str(data))
    with LmdbStore(data, readonly=True) as store:
        held = store.list_conversations("ann")
    event(f"status {status}")
    if status == 0:  # a valid document after all: imported exactly once
        assert len(held) == 1 and document.count(b'"ok-id"') == 2
        with LmdbStore(data) as store:
            store.delete(held[0].conversation_id, "ann")
    else:
        assert status == 1 and held == []
        assert len(err.strip().splitlines()) == 1 and err.startswith("parlour import: ")
