"""compact_session: every outcome, the round trip, kept-tail identity, output layout, in-place safety."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxtool.common.errors import CtxtoolError, UsageError
from ctxtool.compact import (
    DEFAULT_CHAT_MODEL,
    CompactionReport,
    CompactOptions,
    Destination,
    as_copies,
    check_destination,
    compact_session,
    measure_history,
    next_truncation_id,
    undo_compaction,
)
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.compress.summarize.offline import OfflineSummarizer
from ctxtool.compress.summarizer import ModelCall
from ctxtool.session.discover import discover
from ctxtool.session.read import read_session
from ctxtool.session.write import FileChangedError, stringify
from tests.conftest import FIXTURES, REAL_SESSIONS, write_jsonl

NOW = datetime(2026, 8, 21, 10, 0, 0, tzinfo=UTC)
FIXTURE_CHATS = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats"
COMPRESSION_FIXTURE = "session-2026-05-25T09-30-c4e5f6a7.jsonl"


def ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"00000000-0000-4000-8000-{next(counter):012d}"


def run(
    path: Path,
    options: CompactOptions | None = None,
    destination: Destination | None = None,
    summarizer: Any = None,
    **kw: Any,
) -> CompactionReport:
    sp = discover([path]).files[0]
    return compact_session(
        sp,
        summarizer or OfflineSummarizer(),
        options or CompactOptions(force=True),
        destination or Destination("out", path.parents[3] / "out"),
        clock=lambda: NOW,
        new_id=ids(),
        **kw,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the fixture project (never write into fixtures/): <tmp>/gemini/tmp/ctxdemo/chats."""
    chats = tmp_path / "gemini" / "tmp" / "ctxdemo" / "chats"
    shutil.copytree(FIXTURE_CHATS, chats)
    return chats


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def check_round_trip(original_path: Path, report: CompactionReport) -> list[dict[str, Any]]:
    """The compacted file loads, resumes as [snapshot, ack, kept...], keeps the tail byte for byte."""
    assert report.status == "COMPRESSED"
    assert report.output_path is not None
    assert report.tokens_before is not None
    assert report.tokens_after is not None
    original = read_session(original_path)
    out = read_session(report.output_path)
    # Before and after are one measure (Gemini CLI's estimate of what a resume sends), of each file.
    assert report.tokens_before == measure_history(original.messages, report.model or DEFAULT_CHAT_MODEL)
    assert report.tokens_after == measure_history(out.messages, report.model or DEFAULT_CHAT_MODEL)
    assert out.era == original.era
    kept = report.messages_kept
    assert kept is not None
    orig_msgs = list(original.messages)
    out_msgs = list(out.messages)
    tail_orig = orig_msgs[len(orig_msgs) - kept :] if kept else []
    tail_out = out_msgs[len(out_msgs) - kept :] if kept else []
    synced = set(report.synced_messages)
    assert [m["id"] for m in tail_out] == [m["id"] for m in tail_orig]
    for a, b in zip(tail_out, tail_orig, strict=True):
        if a["id"] not in synced:  # a copy: the same record without the billed tokens
            assert stringify(a) == stringify(as_copies([b])[0])
            assert "tokens" not in a
    if kept:
        assert tail_orig[0]["id"] == report.split_message_id
        assert tail_orig[0]["type"] == "user"
    resumed = g.convert_session_to_client_history([dict(m) for m in out_msgs])
    assert resumed[0]["content"]["role"] == "user"
    summary = resumed[0]["content"]["parts"][0]["text"]
    assert summary.startswith("<state_snapshot>")
    assert "generated offline by ctxtool, no model" in summary
    assert resumed[1]["content"] == {"role": "model", "parts": [{"text": g.SUMMARY_ACK_TEXT}]}
    assert resumed[2:] == g.convert_session_to_client_history([dict(m) for m in tail_out])
    return [dict(m) for m in out_msgs]


def test_compression_fixture_round_trip(project: Path) -> None:
    path = project / COMPRESSION_FIXTURE
    report = run(path)
    check_round_trip(path, report)
    assert report.era == "jsonl"
    assert report.anchored is True  # the fixture already holds a <state_snapshot>
    assert report.threshold_tokens_source == "recorded"
    assert report.threshold_tokens == report.recorded_prompt_tokens == 24000
    assert report.output_path == str(project.parents[2] / "out" / "ctxdemo" / "chats" / COMPRESSION_FIXTURE)
    assert report.retention is not None
    assert set(report.retention) == {"requests", "paths", "commands", "errors", "directives"}


@pytest.mark.parametrize(
    "name",
    [
        "session-2026-02-10T09-00-c0ffee01.json",
        "session-2026-03-20T11-00-abcd1234.json",
        "session-2026-03-20T11-00-abcd1234.jsonl",
        "session-2026-04-20T10-00-e1e2e3e4.jsonl",
        "session-2026-04-28T13-05-7f6e5d4c.jsonl",
        COMPRESSION_FIXTURE,
    ],
)
def test_fixture_round_trips(project: Path, name: str) -> None:
    path = project / name
    before = snapshot(project)
    report = run(path)
    check_round_trip(path, report)
    assert snapshot(project) == before  # the input tree is untouched


def test_same_input_same_bytes(project: Path, tmp_path: Path) -> None:
    path = project / COMPRESSION_FIXTURE
    a = run(path, destination=Destination("out", tmp_path / "a"))
    b = run(path, destination=Destination("out", tmp_path / "b"))
    assert a.output_path
    assert b.output_path
    assert Path(a.output_path).read_bytes() == Path(b.output_path).read_bytes()


def test_summary_and_ack_have_the_head_shapes(project: Path) -> None:
    report = run(project / COMPRESSION_FIXTURE)
    assert report.output_path
    lines = Path(report.output_path).read_bytes().splitlines()
    assert lines[2] == (
        b'{"id":"00000000-0000-4000-8000-000000000002","timestamp":"2026-08-21T10:00:00.000Z","type":"gemini",'
        b'"content":[{"text":"Got it. Thanks for the additional context!"}]}'
    )
    assert lines[1].startswith(
        b'{"id":"00000000-0000-4000-8000-000000000001","timestamp":"2026-08-21T10:00:00.000Z","type":"user",'
        b'"content":[{"text":"<state_snapshot>\\n<!-- generated offline by ctxtool'
    )


# --------------------------------------------------------------------------------------------------
# Synthetic sessions for each outcome


def user(i: int, text: str) -> dict[str, Any]:
    return {
        "id": f"u{i}",
        "timestamp": "2026-08-01T00:00:00.000Z",
        "type": "user",
        "content": [{"text": text}],
    }


def gemini(
    i: int, text: str, *, tokens: int | None = None, calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "id": f"g{i}",
        "timestamp": "2026-08-01T00:00:01.000Z",
        "type": "gemini",
        "content": text,
    }
    if calls:
        msg["toolCalls"] = calls
    if tokens is not None:
        msg["tokens"] = {"input": tokens, "output": 10, "cached": 0, "total": tokens + 10}
    msg["model"] = "gemini-2.5-pro"
    return msg


def shell_call(i: int, output: str) -> dict[str, Any]:
    return {
        "id": f"call{i}",
        "name": "run_shell_command",
        "args": {"command": f"make step{i}"},
        "result": output,
        "status": "success",
        "timestamp": "2026-08-01T00:00:01.000Z",
    }


META = {
    "sessionId": "5e551011-0000-4000-8000-000000000000",
    "projectHash": "h",
    "startTime": "t",
    "lastUpdated": "t",
}


def make_session(
    tmp_path: Path, messages: list[dict[str, Any]], name: str = "session-2026-08-01T00-00-5e551011.jsonl"
) -> Path:
    return write_jsonl(tmp_path / "gemini" / "tmp" / "proj" / "chats" / name, [META, *messages])


def chatty(n: int, *, tokens: int, out_chars: int = 200) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i in range(n):
        msgs.append(user(i, f"Step {i}: please edit src/mod{i}.py and run the tests."))
        msgs.append(gemini(i, f"Running step {i}.", calls=[shell_call(i, "x" * out_chars)]))
        msgs.append(gemini(100 + i, f"Done with step {i}.", tokens=tokens))
    return msgs


def test_noop_under_the_threshold(tmp_path: Path) -> None:
    path = make_session(tmp_path, chatty(6, tokens=1000))
    report = run(path, CompactOptions())
    assert report.status == "NOOP"
    # The threshold check read the recorded prompt tokens; nothing changed, so after == before.
    assert (report.threshold_tokens, report.recorded_prompt_tokens) == (1000, 1000)
    assert (
        report.tokens_after
        == report.tokens_before
        == measure_history(read_session(path).messages, "gemini-2.5-pro")
    )
    assert report.written is False
    assert report.output_path is None
    assert not (tmp_path / "gemini" / "out").exists()


def test_threshold_option_triggers(tmp_path: Path) -> None:
    path = make_session(tmp_path, chatty(6, tokens=5000))
    report = run(path, CompactOptions(threshold=0.001))
    assert report.status == "COMPRESSED"
    assert report.threshold == 0.001


def test_noop_when_nothing_precedes_the_split(tmp_path: Path) -> None:
    path = make_session(
        tmp_path, [user(0, "hello"), gemini(0, "calling", tokens=10, calls=[shell_call(0, "ok")])]
    )
    report = run(path)
    assert report.status == "NOOP"
    assert report.split_index == 0
    assert not report.written


class Fixed:
    """A deterministic fake model: answers every call with the same text."""

    name = "fixed"
    deterministic = True

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.calls: list[ModelCall] = []

    def generate(self, call: ModelCall) -> str | None:
        self.calls.append(call)
        return self.text


def test_empty_summary_writes_nothing(tmp_path: Path) -> None:
    path = make_session(tmp_path, chatty(6, tokens=5000))
    fake = Fixed("   ")
    report = run(path, summarizer=fake)
    assert report.status == "COMPRESSION_FAILED_EMPTY_SUMMARY"
    assert [c.kind for c in fake.calls] == ["summary", "probe"]
    assert not report.written
    assert not (tmp_path / "gemini" / "out").exists()


def test_inflated_with_force_writes_nothing(tmp_path: Path) -> None:
    path = make_session(tmp_path, chatty(6, tokens=500))
    report = run(path, summarizer=Fixed("word " * 5000))
    assert report.status == "COMPRESSION_FAILED_INFLATED_TOKEN_COUNT"
    assert report.threshold_tokens == 500
    assert any("would be larger" in n and "> 500 tokens" in n for n in report.notes)
    assert report.tokens_after is None  # nothing was written
    assert not report.written


def test_inflated_without_force_falls_back_to_truncation(tmp_path: Path) -> None:
    # An old shell output of 400,000 chars (~100k tokens) is over the 50k budget: truncation helps.
    msgs = chatty(4, tokens=120_000)
    msgs[1]["toolCalls"][0]["result"] = "y" * 400_000
    path = make_session(tmp_path, msgs)
    report = run(path, CompactOptions(threshold=0.01), summarizer=Fixed("word " * 200_000))
    assert report.status == "CONTENT_TRUNCATED"
    assert any("inflated" in n for n in report.notes)
    assert report.written
    assert report.synced_messages == ["g0"]
    out = read_session(report.output_path or "")
    result = out.messages[1]["toolCalls"][0]["result"]
    saved = report.tool_outputs_truncated[0]
    assert result.startswith("Output too large. Showing first 8,000 and last 32,000 characters.")
    assert saved in result
    assert Path(saved).read_text() == "y" * 400_000
    assert Path(saved).parent == tmp_path / "gemini" / "out" / "proj" / "tool-outputs"
    # every other message is unchanged
    original = read_session(path)
    assert [stringify(m) for m in out.messages[2:]] == [
        stringify(m) for m in as_copies(original.messages[2:])
    ]
    assert out.messages[0] == original.messages[0]


def test_truncate_only(tmp_path: Path) -> None:
    msgs = chatty(4, tokens=120_000)
    msgs[4]["toolCalls"][0]["result"] = "z" * 400_000
    path = make_session(tmp_path, msgs)
    fake = Fixed("never asked")
    report = run(path, CompactOptions(truncate_only=True, force=True), summarizer=fake)
    assert report.status == "CONTENT_TRUNCATED"
    assert fake.calls == []
    assert report.messages_summarised == 0
    assert report.messages_kept == len(msgs)
    assert report.tokens_after is not None
    assert report.tokens_after < 120_000


def test_truncate_only_respects_the_threshold(tmp_path: Path) -> None:
    path = make_session(tmp_path, chatty(4, tokens=1000))
    assert run(path, CompactOptions(truncate_only=True)).status == "NOOP"


def test_truncated_outputs_in_the_kept_span_are_synced(tmp_path: Path) -> None:
    # The newest output alone is 120k tokens, over the 50k budget, and it lies in the kept span (the
    # older outputs of 200k chars each put the 70% split right before the last prompt).
    msgs = chatty(8, tokens=400_000, out_chars=200_000)
    msgs[-2]["toolCalls"][0]["result"] = "k" * 480_000
    path = make_session(tmp_path, msgs)
    report = run(path)
    out = check_round_trip(path, report)
    assert "g7" in report.synced_messages
    assert "Output too large" in out[-2]["toolCalls"][0]["result"]


def test_truncation_ids_never_overwrite_earlier_outputs(tmp_path: Path) -> None:
    tool_dir = tmp_path / "gemini" / "out" / "proj" / "tool-outputs"
    tool_dir.mkdir(parents=True)
    (tool_dir / "run_shell_command_7.txt").write_text("earlier")
    assert next_truncation_id(tool_dir) == 8
    msgs = chatty(4, tokens=120_000)
    msgs[1]["toolCalls"][0]["result"] = "y" * 400_000
    path = make_session(tmp_path, msgs)
    report = run(path, CompactOptions(truncate_only=True, force=True))
    assert report.tool_outputs_truncated[0].endswith("run_shell_command_8.txt")
    assert (tool_dir / "run_shell_command_7.txt").read_text() == "earlier"


def test_dry_run_writes_nothing(project: Path, tmp_path: Path) -> None:
    msgs = chatty(4, tokens=120_000)
    msgs[1]["toolCalls"][0]["result"] = "y" * 400_000
    path = make_session(tmp_path, msgs)
    before = snapshot(tmp_path)
    report = run(path, CompactOptions(force=True, dry_run=True))
    assert report.status == "COMPRESSED"
    assert report.dry_run
    assert not report.written
    assert report.output_path is not None
    assert report.tool_outputs_truncated
    assert report.split_index is not None
    assert report.messages_kept is not None
    assert snapshot(tmp_path) == before
    in_place = run(path, CompactOptions(force=True, dry_run=True), Destination("in-place"))
    assert in_place.backup_path is None
    assert snapshot(tmp_path) == before


def test_dry_run_with_a_model_summarizer_estimates_offline(tmp_path: Path) -> None:
    path = make_session(tmp_path, chatty(6, tokens=5000))
    fake = Fixed("model summary")
    fake.deterministic = False
    report = run(path, CompactOptions(force=True, dry_run=True), summarizer=fake)
    assert fake.calls == []
    assert report.status == "COMPRESSED"
    assert any("offline summary" in n for n in report.notes)


def test_as_new_session(project: Path) -> None:
    path = project / COMPRESSION_FIXTURE
    before = path.read_bytes()
    report = run(path, destination=Destination("new-session"))
    assert report.output_path is not None
    out = Path(report.output_path)
    assert out.parent == project
    assert out.name == "session-2026-08-21T10-00-00000000.jsonl"
    session = read_session(out)
    assert session.session_id == report.session_id == "00000000-0000-4000-8000-000000000001"
    assert session.metadata["startTime"] == "2026-08-21T10:00:00.000Z"
    assert path.read_bytes() == before
    check_round_trip(path, report)


def test_in_place_appends_the_compacted_history_and_keeps_what_was_billed(project: Path) -> None:
    """A .jsonl keeps every record it had; one `$set.messages` record with the compacted history follows."""
    path = project / COMPRESSION_FIXTURE
    before = path.read_bytes()
    report = run(path, destination=Destination("in-place"))
    assert report.written
    assert report.output_path == str(path)
    assert report.backup_path is not None
    assert Path(report.backup_path).read_bytes() == before
    after = path.read_bytes()
    assert after.startswith(before)
    [appended] = after[len(before) :].splitlines()
    record = json.loads(appended)
    assert set(record["$set"]) == {"messages", "lastUpdated", "ctxtoolCompaction"}
    assert all("tokens" not in m for m in record["$set"]["messages"])
    resumed = read_session(path)
    assert resumed.messages[1]["content"][0]["text"] == g.SUMMARY_ACK_TEXT
    # Undo drops that record: the file is what it was.
    undone = undo_compaction(path)
    assert (undone.status, undone.removed) == ("UNDONE", "record")
    assert path.read_bytes() == before
    assert undo_compaction(path).status == "NOTHING"


def test_in_place_on_a_legacy_json_writes_the_jsonl_beside_it(project: Path) -> None:
    """The .json stays as it is; the .jsonl Gemini CLI would write on resume holds its records and the
    compacted history; stats reads the pair as one session; undo removes the .jsonl."""
    path = project / "session-2026-02-10T09-00-c0ffee01.json"
    before = path.read_bytes()
    report = run(path, destination=Destination("in-place"))
    assert report.written
    beside = path.with_suffix(".jsonl")
    assert report.output_path == str(beside)
    assert path.read_bytes() == before
    original, resumed = read_session(path), read_session(beside)
    assert resumed.session_id == original.session_id
    assert resumed.messages[1]["content"][0]["text"] == g.SUMMARY_ACK_TEXT
    assert [m["id"] for m in resumed.billed][: len(original.messages)] == [m["id"] for m in original.messages]
    undone = undo_compaction(path)
    assert (undone.status, undone.removed) == ("UNDONE", "file")
    assert not beside.exists()
    assert path.read_bytes() == before


def test_in_place_refuses_a_json_that_gemini_cli_resumed(project: Path) -> None:
    path = project / "session-2026-03-20T11-00-abcd1234.json"
    with pytest.raises(CtxtoolError, match="resumed"):
        run(path, destination=Destination("in-place"))


def test_a_private_session_stays_private(project: Path) -> None:
    """Backups, in-place replacements and new sessions beside the original keep a 0600 original's mode;
    a copy elsewhere gets the mode a plain open() gives."""
    path = project / COMPRESSION_FIXTURE
    path.chmod(0o600)
    old = os.umask(0o022)
    try:
        beside = run(path, destination=Destination("new-session"))
        in_place = run(path, destination=Destination("in-place"))
        elsewhere = run(path)
    finally:
        os.umask(old)
    assert in_place.backup_path is not None
    for file in (path, Path(in_place.backup_path), Path(str(beside.output_path))):
        assert file.stat().st_mode & 0o777 == 0o600, file.name
    assert Path(str(elsewhere.output_path)).stat().st_mode & 0o777 == 0o644


def test_in_place_refuses_a_file_that_changed(project: Path) -> None:
    path = project / COMPRESSION_FIXTURE
    before = path.read_bytes()
    appended = b'{"$set":{"lastUpdated":"2026-08-21T10:00:00.001Z"}}\n'

    def gemini_cli_appends() -> None:
        with path.open("ab") as fh:
            fh.write(appended)

    with pytest.raises(FileChangedError, match="changed on disk"):
        run(path, destination=Destination("in-place"), before_replace=gemini_cli_appends)
    assert path.read_bytes() == before + appended
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp") and "c4e5f6a7" in p.name]


def test_out_inside_the_input_tree_is_refused(project: Path) -> None:
    sources = discover([project]).files
    with pytest.raises(UsageError, match="inside the input tree"):
        check_destination(sources, Destination("out", project.parent / "compacted"))
    check_destination(sources, Destination("out", project.parents[2] / "elsewhere"))


def test_subagent_layout_is_kept(project: Path) -> None:
    path = next(project.glob("e1e2e3e4-*/q7w8e9.jsonl"))
    report = run(path, destination=Destination("out", project.parents[2] / "out"))
    assert report.output_path is not None
    rel = Path(report.output_path).relative_to(project.parents[2] / "out")
    assert rel.parts == ("ctxdemo", "chats", path.parent.name, "q7w8e9.jsonl")


def test_synthesised_env_is_reported(tmp_path: Path) -> None:
    path = make_session(tmp_path, chatty(6, tokens=5000))
    report = run(path)
    assert report.env_synthesized is True
    assert report.env_source == "stand-in"
    [note] = [n for n in report.notes if "stand-in" in n]
    assert re.search(r"a stand-in of \d+ tokens was assumed: pass --workspace DIR", note)


def test_env_is_built_from_the_project_folder(tmp_path: Path) -> None:
    """A session without a stored <session_context> whose project folder exists gets Gemini CLI 0.61's own
    text: today's date, the temporary folder, the folder structure."""
    path = make_session(tmp_path, chatty(6, tokens=5000))
    project = tmp_path / "work" / "myproj"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print()\n")
    (project / "GEMINI.md").write_text("# memory\n")
    report = compact_session(
        discover([str(path)]).files[0],
        OfflineSummarizer(),
        CompactOptions(force=True, dry_run=True, workspace=project),
        Destination("out", tmp_path / "out"),
    )
    assert report.env_source == "built"
    assert report.env_synthesized is True
    assert any("built from the project folder" in n for n in report.notes)
    assert any("GEMINI.md" in n for n in report.notes)
    assert report.status == "COMPRESSED"


def test_stored_env_message_is_kept_first(tmp_path: Path) -> None:
    env = {
        "id": g.ENVIRONMENT_CONTEXT_ID,
        "timestamp": "2026-08-01T00:00:00.000Z",
        "type": "user",
        "content": [{"text": "<session_context>\nThis is the Gemini CLI.\n</session_context>"}],
    }
    path = make_session(tmp_path, [env, *chatty(6, tokens=5000)])
    report = run(path)
    assert report.env_synthesized is False
    out = read_session(report.output_path or "")
    assert stringify(out.messages[0]) == stringify(env)
    check_round_trip(path, report)


def test_recorded_zero_tokens_fall_back_to_the_estimate(tmp_path: Path) -> None:
    path = make_session(tmp_path, chatty(6, tokens=0))
    report = run(path)
    assert report.threshold_tokens_source == "estimate"
    assert report.recorded_prompt_tokens is None
    assert report.tokens_before is not None
    assert report.tokens_before > 0
    assert any("is 0" in n for n in report.notes)


# --------------------------------------------------------------------------------------------------
# Property: COMPRESSED never increases tokens; the kept tail is identical and starts at a user message

message_plan = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=300), st.integers(min_value=0, max_value=3000), st.booleans()
    ),
    min_size=1,
    max_size=12,
)


@given(plan=message_plan, info=st.booleans())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_compaction_properties(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[int, int, bool]], info: bool
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    msgs: list[dict[str, Any]] = []
    for i, (prompt_len, out_len, with_call) in enumerate(plan):
        msgs.append(user(i, "p" * (prompt_len + 1)))
        if info:
            msgs.append({"id": f"i{i}", "timestamp": "t", "type": "info", "content": "note"})
        calls = [shell_call(i, "o" * out_len)] if with_call else None
        msgs.append(gemini(i, f"answer {i}", tokens=50_000, calls=calls))
    path = make_session(tmp, msgs)
    report = run(path)
    if report.status == "COMPRESSED":
        check_round_trip(path, report)
        assert report.threshold_tokens is not None
        # The replay only writes a history that is no larger, in the terms of its threshold check.
        assert not any("would be larger" in n for n in report.notes)
    else:
        assert not report.written


# --------------------------------------------------------------------------------------------------
# Real sessions

real = pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="real sessions not present")
BIG = [
    "IDAHO-VAULT__session-2026-04-13T18-00-f328310d.json",
    "aim__session-2026-03-18T15-22-ea9f470a.json",
    "TP-Tutor__session-2026-04-25T01-53-b1b4c413.jsonl",
    "Vibe-Coding-Comparison-Project__session-2026-04-25T08-46-c737eb36.jsonl",
]


@pytest.fixture
def real_copy(tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        ext = name.rsplit(".", 1)[1]
        target = (
            tmp_path
            / "gemini"
            / "tmp"
            / name.split("__")[0]
            / "chats"
            / f"session-2026-01-01T00-00-{len(name):08d}.{ext}"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REAL_SESSIONS / name, target)
        return target

    return copy


@real
@pytest.mark.parametrize("name", BIG)
def test_real_sessions_compact_offline(real_copy: Callable[[str], Path], name: str) -> None:
    path = real_copy(name)
    report = run(path)
    check_round_trip(path, report)
    assert report.retention is not None


def test_a_new_session_is_titled_after_the_original() -> None:
    from ctxtool.compact import compacted_title
    from ctxtool.session.read import parse_session_bytes

    plain = parse_session_bytes(
        b'{"sessionId":"s","projectHash":"h"}\n'
        b'{"id":"a","type":"user","content":"/help"}\n'
        b'{"id":"b","type":"user","content":[{"text":"  Build   the thing  "}]}\n'
    )
    assert compacted_title(plain) == "Build the thing (compacted by ctxtool)"
    titled = parse_session_bytes(b'{"sessionId":"s","projectHash":"h","summary":"Fix the login bug"}\n')
    assert compacted_title(titled) == "Fix the login bug (compacted by ctxtool)"


# --------------------------------------------------------------------------------------------------
# Messages without ids (issue 26): a legacy .json gets ids derived from position; a .jsonl is refused


def without_ids(
    messages: list[dict[str, Any]], keep: Callable[[int], bool] = lambda i: False
) -> list[dict[str, Any]]:
    """The messages with ``id`` removed, except at the positions ``keep`` accepts."""
    return [m if keep(i) else {k: v for k, v in m.items() if k != "id"} for i, m in enumerate(messages)]


def make_legacy(tmp_path: Path, messages: list[dict[str, Any]]) -> Path:
    """A legacy .json session, pretty-printed as Gemini CLI wrote it before 0.39."""
    path = tmp_path / "gemini" / "tmp" / "proj" / "chats" / "session-2026-08-01T00-00-5e551011.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**META, "messages": messages}, indent=2), encoding="utf-8")
    return path


def test_a_legacy_session_without_ids_is_written_once(tmp_path: Path) -> None:
    """The defect: every split matched the first id-less message, so the summary was followed by the whole
    history again (more tokens after than before) and split_message_id was the string "None"."""
    original = without_ids(chatty(6, tokens=50_000))
    path = make_legacy(tmp_path, original)
    report = run(path)
    assert report.status == "COMPRESSED"
    assert report.messages_summarised
    assert report.messages_kept
    assert report.messages_summarised + report.messages_kept == len(original)
    assert report.tokens_before is not None
    assert report.tokens_after is not None
    assert report.tokens_after < report.tokens_before
    assert report.output_path is not None
    written = json.loads(Path(report.output_path).read_text(encoding="utf-8"))["messages"]
    # summary, ack, then the kept tail of the original: each message once, now with an id.
    assert len(written) == 2 + report.messages_kept
    tail = written[2:]
    assert [{k: v for k, v in m.items() if k != "id"} for m in tail] == as_copies(original[-len(tail) :])
    ids_written = [m["id"] for m in written]
    assert all(isinstance(i, str) for i in ids_written)
    assert len(set(ids_written)) == len(ids_written)
    assert report.split_message_id == tail[0]["id"]
    assert tail[0]["type"] == "user"
    [note] = [n for n in report.notes if "derived from the session id" in n]
    assert note.startswith("18 messages had no id: each got an id derived from the session id and its")
    # Gemini CLI resumes the written file as ctxtool planned it: summary, ack, then the kept turns.
    resumed = g.convert_session_to_client_history(written)
    assert resumed[1]["content"]["parts"] == [{"text": g.SUMMARY_ACK_TEXT}]
    assert resumed[2:] == g.convert_session_to_client_history(tail)


def test_ids_given_to_a_legacy_session_are_stable(tmp_path: Path) -> None:
    """Same input, same bytes; the ids depend on the session id and the position only."""
    from ctxtool.session.ids import derived_id

    path = make_legacy(tmp_path, without_ids(chatty(6, tokens=50_000)))
    a = run(path, destination=Destination("out", tmp_path / "a"))
    b = run(path, destination=Destination("out", tmp_path / "b"))
    assert a.output_path
    assert b.output_path
    assert Path(a.output_path).read_bytes() == Path(b.output_path).read_bytes()
    assert a.split_message_id == b.split_message_id
    assert a.messages_kept
    first_kept = 18 - a.messages_kept  # the position of the first kept message in the original
    assert a.split_message_id == derived_id(META["sessionId"], first_kept)
    assert (
        json.loads(Path(a.output_path).read_text(encoding="utf-8"))["messages"][2]["id"] == a.split_message_id
    )


def test_partly_missing_and_repeated_ids(tmp_path: Path) -> None:
    """Ids a legacy session has are kept; a missing one and a repeat of an earlier one get derived ids, never
    one the session already uses."""
    from ctxtool.session.ids import derived_id

    msgs = without_ids(chatty(6, tokens=50_000), keep=lambda i: i % 2 == 0)
    msgs[9] = {**msgs[9], "id": msgs[0]["id"]}  # a repeat of message 0's id (a user turn)
    msgs[10] = {**msgs[10], "id": derived_id(META["sessionId"], 11)}  # the id 11 would get: taken
    path = make_legacy(tmp_path, msgs)
    report = run(path)
    assert report.status == "COMPRESSED"
    assert report.messages_summarised
    assert report.messages_kept
    assert report.messages_summarised + report.messages_kept == len(msgs)
    [note] = [n for n in report.notes if "derived from the session id" in n]
    assert note.startswith("8 messages had no id and 1 repeated an earlier message's id")
    assert report.output_path is not None
    written = json.loads(Path(report.output_path).read_text(encoding="utf-8"))["messages"]
    tail = written[2:]
    expected = [m.get("id") for m in msgs[-len(tail) :]]
    for position, (out, had) in enumerate(zip(tail, expected, strict=True), len(msgs) - len(tail)):
        if position == 9:
            assert out["id"] == derived_id(META["sessionId"], 9)
        elif position == 11:
            assert out["id"] == derived_id(META["sessionId"], 11, 1)  # the first choice was taken
        elif had is not None:
            assert out["id"] == had
        else:
            assert out["id"] == derived_id(META["sessionId"], position)
    assert len({m["id"] for m in written}) == len(written)
    assert report.split_message_id == tail[0]["id"]


@pytest.mark.parametrize("strategy", ["gemini-cli", "kode", "pi", "openclaw", "codex"])
def test_every_strategy_writes_unique_ids_for_a_session_without_them(tmp_path: Path, strategy: str) -> None:
    msgs = without_ids(chatty(8, tokens=900_000, out_chars=4000))
    path = make_legacy(tmp_path, msgs)
    report = run(path, CompactOptions(force=True, strategy=strategy))
    assert report.status == "COMPRESSED", report.reason
    assert report.output_path is not None
    written = json.loads(Path(report.output_path).read_text(encoding="utf-8"))["messages"]
    ids_written = [m.get("id") for m in written]
    assert all(isinstance(i, str) and i != "None" for i in ids_written)
    assert len(set(ids_written)) == len(ids_written)
    assert report.split_message_id is None or report.split_message_id in ids_written
    trigger_id = (report.trigger or {}).get("message_id")
    assert trigger_id is None or trigger_id in {m["id"] for m in read_session_ids(path)}


def read_session_ids(path: Path) -> list[dict[str, Any]]:
    """The messages of ``path`` with the ids compact gives them."""
    from ctxtool.session.ids import with_unique_ids

    session = read_session(path)
    return [dict(m) for m in with_unique_ids(session.messages, session.session_id).messages]


def test_a_legacy_session_without_ids_written_as_jsonl_loses_nothing(tmp_path: Path) -> None:
    """--era jsonl: every message line carries its id, so the .jsonl reader (Gemini CLI's rules) keeps all."""
    path = make_legacy(tmp_path, without_ids(chatty(6, tokens=50_000)))
    report = run(path, CompactOptions(force=True, era="jsonl"))
    assert report.output_path is not None
    assert report.messages_kept
    out = read_session(report.output_path)
    assert out.era == "jsonl"
    assert len(out.messages) == 2 + report.messages_kept
    assert out.unknown_records == 0
    assert out.messages[2]["id"] == report.split_message_id


def test_in_place_on_a_legacy_json_without_ids(tmp_path: Path) -> None:
    """The .jsonl written beside the .json records every message with the id the compacted history uses."""
    msgs = without_ids(chatty(6, tokens=50_000))
    path = make_legacy(tmp_path, msgs)
    before = path.read_bytes()
    report = run(path, destination=Destination("in-place"))
    assert report.written
    assert report.messages_kept
    assert path.read_bytes() == before
    beside = read_session(path.with_suffix(".jsonl"))
    assert beside.unknown_records == 0
    recorded = [m["id"] for m in beside.billed][: len(msgs)]
    assert len(set(recorded)) == len(msgs)
    assert [m["id"] for m in beside.messages[2:]] == recorded[-report.messages_kept :]
    assert beside.messages[2]["id"] == report.split_message_id


def test_a_jsonl_with_message_lines_without_ids_is_refused(tmp_path: Path) -> None:
    """Gemini CLI skips a .jsonl message line without an id on resume: compact says so, naming the file and
    the line, and writes nothing."""
    msgs = chatty(6, tokens=50_000)
    msgs[4] = {k: v for k, v in msgs[4].items() if k != "id"}
    path = make_session(tmp_path, msgs)
    with pytest.raises(CtxtoolError) as raised:
        run(path)
    message = str(raised.value)
    assert message.startswith(f'{path}: 1 message record has no "id" (the first on line 6)')
    assert "\n" not in message
    assert 'Give each of them a unique "id"' in message
    assert not (tmp_path / "gemini" / "out").exists()


def test_a_jsonl_whose_id_less_records_a_checkpoint_replaced_compacts(tmp_path: Path) -> None:
    """What Gemini CLI writes when it resumes an id-less legacy session: the messages without ids, then a
    `$set.messages` checkpoint. Once a later checkpoint with ids replaces them, nothing is missing."""
    msgs = chatty(6, tokens=50_000)
    stale = without_ids(msgs[:3])
    path = write_jsonl(
        tmp_path / "gemini" / "tmp" / "proj" / "chats" / "session-2026-08-01T00-00-5e551011.jsonl",
        [META, *stale, {"$set": {"messages": stale}}, {"$set": {"messages": msgs}}],
    )
    report = run(path)
    assert report.status == "COMPRESSED"
    assert report.split_message_id is not None
    # The id-less entries of the last checkpoint are refused, by the checkpoint's line.
    path.write_bytes(path.read_bytes() + stringify({"$set": {"messages": stale}}) + b"\n")
    with pytest.raises(CtxtoolError, match=r'3 message records have no "id" \(the first on line 7\)'):
        run(path)
