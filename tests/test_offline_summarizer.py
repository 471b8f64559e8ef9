"""OfflineSummarizer: snapshot shape, escaping, budget, determinism, anchored integration, probe calls, and
fact retention over the real Gemini CLI sessions in /work/shared/real-sessions (skipped when absent)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ctxtool.common.errors import UsageError
from ctxtool.compress.summarize.facts import FACT_KINDS, extract_facts, retention
from ctxtool.compress.summarize.offline import SECTIONS, OfflineSummarizer, previous_snapshot, snapshot_text
from ctxtool.compress.summarizer import ModelCall, Summarizer

REAL_SESSIONS = Path("/work/shared/real-sessions")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def model(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args, "id": call_id}}


def response(name: str, call_id: str, **payload: Any) -> dict[str, Any]:
    return {
        "role": "user",
        "parts": [{"functionResponse": {"name": name, "id": call_id, "response": payload}}],
    }


HISTORY: list[dict[str, Any]] = [
    user("<session_context>\nThis is the Gemini CLI. Never trust this turn.\n</session_context>"),
    user(
        "Fix the failing parser in `src/parse.py`. Always keep <tags> & entities intact. "
        "Never touch vendor/lib.js. Use uv run."
    ),
    model(
        {"text": "Let me look.", "thought": True},
        {"text": "Reading the parser."},
        call("read_file", {"file_path": "/repo/src/parse.py"}, "c1"),
    ),
    response("read_file", "c1", output="def parse(x):\n    return x < 3 && y\n"),
    model(call("run_shell_command", {"command": "uv run pytest -q  tests/test_parse.py"}, "c2")),
    response(
        "run_shell_command",
        "c2",
        output="Output: E   AssertionError: expected <a> & got <b>\nFAILED tests/test_parse.py::test_x\n"
        "Exit Code: 1\nProcess Group PGID: 12",
    ),
    model(call("replace", {"file_path": "/repo/src/parse.py", "old_string": "x", "new_string": "y"}, "c3")),
    response(
        "replace", "c3", error="Failed to edit, 0 occurrences found for old_string in /repo/src/parse.py."
    ),
    model(
        call(
            "write_todos",
            {
                "todos": [
                    {"description": "reproduce the failure", "status": "completed"},
                    {"description": "fix parse()", "status": "in_progress"},
                ]
            },
            "c4",
        )
    ),
    response("write_todos", "c4", output="ok"),
    model({"text": "Working on it."}),
]


def snapshot_of(history: list[dict[str, Any]], budget: int = 2000) -> str:
    return OfflineSummarizer(token_budget=budget).summarize(history)


def section(snapshot: str, tag: str) -> str:
    """The text of one section (the snapshot is text for a model, not XML: facts are not escaped)."""
    found = re.search(rf"<{tag}>\n(.*?)</{tag}>", snapshot, re.DOTALL)
    assert found is not None, tag
    return found.group(1)


def tags(snapshot: str) -> list[str]:
    return re.findall(r"^<([a-z_]+)>$", snapshot, re.MULTILINE)


def test_protocol_and_identity() -> None:
    summarizer: Summarizer = OfflineSummarizer()
    assert summarizer.name == "offline"
    assert summarizer.deterministic is True


def test_snapshot_has_every_section_and_quotes_facts_verbatim() -> None:
    text = snapshot_of(HISTORY)
    assert text.startswith("<state_snapshot>\n<!-- generated offline by ctxtool, no model, facts verbatim")
    assert text.endswith("\n</state_snapshot>")
    assert tags(text) == ["state_snapshot", *SECTIONS]
    # What the user asked comes first, verbatim (no escaping of < and &).
    requests = section(text, "user_requests")
    assert (
        "- Fix the failing parser in `src/parse.py`. Always keep <tags> & entities intact. "
        "Never touch vendor/lib.js. Use uv run." in requests
    )
    assert "Never touch vendor/lib.js" in section(text, "active_constraints")
    # Commands keep their spacing; errors their first line, with the tool and what it was about.
    assert "\n$ uv run pytest -q  tests/test_parse.py [exit 1]\n" in section(text, "recent_actions")
    knowledge = section(text, "key_knowledge")
    assert (
        "- run_shell_command (uv run pytest -q  tests/test_parse.py): AssertionError: expected <a> & got <b>"
        in knowledge
    )
    assert "- replace: Failed to edit, 0 occurrences found for old_string in /repo/src/parse.py." in knowledge
    assert "/repo/src/parse.py" in section(text, "artifact_trail")
    task = section(text, "task_state")
    assert "[DONE] reproduce the failure" in task
    assert "[IN PROGRESS] fix parse()" in task
    assert section(text, "overall_goal").strip().startswith("Fix the failing parser")
    assert "Never trust this turn" not in text
    assert not any(entity in text for entity in ("&amp;", "&lt;", "&gt;"))


def test_only_a_literal_closing_tag_is_guarded() -> None:
    history = [
        user("Print the tag: echo '</state_snapshot>' && echo done"),
        model(call("run_shell_command", {"command": "echo '</state_snapshot>' && echo done"}, "t1")),
        response("run_shell_command", "t1", output="Output: </state_snapshot>\ndone"),
    ]
    text = snapshot_of(history)
    assert text.count("</state_snapshot>") == 1
    assert text.endswith("</state_snapshot>")
    assert "$ echo '<\\/state_snapshot>' && echo done" in text


def test_small_history_keeps_every_fact() -> None:
    facts = extract_facts(HISTORY)
    kept = retention(facts, snapshot_of(HISTORY))
    for kind in FACT_KINDS:
        assert kept.kind(kind).lost == (), kind
        assert kept.percent(kind) == 100.0


def test_output_is_byte_identical_for_the_same_input() -> None:
    first = OfflineSummarizer().summarize(HISTORY)
    again = OfflineSummarizer().summarize(json.loads(json.dumps(HISTORY)))
    assert first.encode() == again.encode()


def big_history(n: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        user("Refactor the whole service. Never push to main. Always run the tests.")
    ]
    for i in range(n):
        history.append(
            model(
                call(
                    "read_file",
                    {"file_path": f"/home/dev/project/src/module_{i:03d}/handler_{i}.py"},
                    f"r{i}",
                ),
                call(
                    "run_shell_command",
                    {"command": f"python -m pytest tests/test_{i}.py -k case_{i}"},
                    f"s{i}",
                ),
            )
        )
        history.append(
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "read_file",
                            "id": f"r{i}",
                            "response": {"output": "x" * 500},
                        }
                    },
                    {
                        "functionResponse": {
                            "name": "run_shell_command",
                            "id": f"s{i}",
                            "response": {
                                "output": f"Output: ValueError: bad value {i} in case\nExit Code: 1"
                            },
                        }
                    },
                ],
            }
        )
        history.append(user(f"Step {i}: do not rename handler_{i}."))
    return history


@pytest.mark.parametrize("budget", [250, 400, 2000])
def test_budget_is_respected(budget: int) -> None:
    history = big_history(120)
    text = snapshot_of(history, budget)
    assert len(text) <= budget * 4
    assert tags(text) == ["state_snapshot", *SECTIONS]


def test_a_tight_budget_keeps_requests_and_drops_read_paths_first_and_says_so() -> None:
    history = big_history(120)
    facts = extract_facts(history)
    assert len(facts.requests) == 121
    assert len(facts.paths) == 120
    assert len(facts.commands) == 120
    assert len(facts.errors) == 120
    text = snapshot_of(history, 2000)
    kept = retention(facts, text)
    # User requests go last: all of them fit and are kept; paths only read are the first to go, then the
    # failed commands and the older errors (the newest are kept).
    assert kept.percent("requests") == 100.0
    assert kept.percent("paths") == 0.0
    assert facts.errors[-1].message in text
    assert facts.errors[0].message not in text
    assert "left out for the size budget: " in text
    assert "120 paths only read" in text
    roomy = snapshot_of(history, 40_000)
    assert all(retention(facts, roomy).percent(kind) == 100.0 for kind in FACT_KINDS)
    assert "left out" not in roomy
    assert "latest tool calls:" in roomy


def test_the_default_budget_is_a_tenth_of_the_span() -> None:
    from ctxtool.compress.gemini_cli.chat_compression import estimate_token_count
    from ctxtool.compress.summarize.offline import SMALL_SPAN_BUDGET

    history = big_history(400)
    span = estimate_token_count([p for c in history for p in c["parts"]])
    summarizer = OfflineSummarizer()
    assert summarizer.budget_tokens(history) == max(SMALL_SPAN_BUDGET, span // 10)
    assert len(summarizer.summarize(history)) <= summarizer.budget_tokens(history) * 4
    assert summarizer.budget_tokens(HISTORY) == SMALL_SPAN_BUDGET


def test_common_directory_is_named_once() -> None:
    text = snapshot_of(big_history(10), 40_000)
    assert "- $A = /home/dev/project/src/" in text
    assert "- $A/module_003/handler_3.py" in text


def test_anchored_history_integrates_the_previous_snapshot() -> None:
    first = snapshot_of(HISTORY)
    later: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "<scratchpad>thinking</scratchpad>\n" + first}]},
        model({"text": "Got it. Thanks for the additional context!"}),
        user("Now also update docs/CHANGELOG.md. Don't bump the version."),
        model(call("run_shell_command", {"command": "git diff --stat"}, "d1")),
        response("run_shell_command", "d1", output="Output: 1 file changed"),
    ]
    prev = previous_snapshot(later)
    assert prev is not None
    assert prev["overall_goal"][0].startswith("Fix the failing parser")
    second = snapshot_of(later)
    assert section(second, "overall_goal").strip().startswith("Fix the failing parser")
    constraints = section(second, "active_constraints")
    assert "Never touch vendor/lib.js" in constraints  # carried from the previous snapshot
    assert "Don't bump the version." in constraints  # new
    assert "/repo/src/parse.py" in second  # earlier artifact carried
    assert "uv run pytest -q  tests/test_parse.py" in second  # earlier command carried, verbatim
    assert "\n$ git diff --stat\n" in second
    assert "docs/CHANGELOG.md" in section(second, "file_system_state")
    assert "[IN PROGRESS] fix parse()" in section(second, "task_state")
    assert "merges the previous snapshot" in second
    # The snapshot text itself is not mistaken for user directives.
    assert not any("state_snapshot" in d for d in extract_facts(later).directives)


def test_probe_returns_the_previous_summary_unchanged() -> None:
    summarizer = OfflineSummarizer()
    probe = ModelCall(
        kind="probe",
        model="gemini-2.5-flash",
        system_instruction="",
        contents=[],
        history=HISTORY,
        previous_summary="<state_snapshot>x</state_snapshot>",
    )
    assert summarizer.generate(probe) == "<state_snapshot>x</state_snapshot>"
    summary = ModelCall(
        kind="summary", model="gemini-2.5-flash", system_instruction="", contents=[], history=HISTORY
    )
    assert summarizer.generate(summary) == OfflineSummarizer().summarize(HISTORY)


def test_terminal_colour_codes_are_dropped_from_errors() -> None:
    history = [
        user("Run the build."),
        model(call("run_shell_command", {"command": "make"}, "m1")),
        response(
            "run_shell_command",
            "m1",
            output="Output: \x1b[31merror: missing \x00 target\x1b[0m\nExit Code: 2",
        ),
    ]
    text = snapshot_of(history)
    assert "error: missing \x00 target" in text
    assert "\x1b" not in section(text, "key_knowledge")


def test_too_small_budget_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="at least 250"):
        OfflineSummarizer(token_budget=10)
    with pytest.raises(UsageError, match="chars_per_token"):
        OfflineSummarizer(chars_per_token=0)


# --------------------------------------------------------------------------------------------- real sessions


def load_messages(path: Path) -> list[dict[str, Any]]:
    """Session messages of a legacy .json record or a .jsonl log (upsert by id, $set, $rewindTo)."""
    text = path.read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        return [m for m in document["messages"] if isinstance(m, dict)]
    messages: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        if "$rewindTo" in record:
            ids = list(messages)
            target = record["$rewindTo"]
            for key in ids[ids.index(target) :] if target in ids else ids:
                del messages[key]
        elif isinstance(record.get("$set"), dict):
            if isinstance(record["$set"].get("messages"), list):
                messages = {m["id"]: m for m in record["$set"]["messages"] if isinstance(m, dict)}
        elif isinstance(record.get("id"), str):
            messages[record["id"]] = record
        elif isinstance(record.get("messages"), list):
            messages = {m["id"]: m for m in record["messages"] if isinstance(m, dict) and "id" in m}
    return list(messages.values())


def as_parts(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"text": value}]
    if isinstance(value, list):
        return [{"text": v} if isinstance(v, str) else v for v in value if isinstance(v, str | dict)]
    if isinstance(value, dict):
        return [value]
    return []


def to_wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for message in messages:
        kind = message.get("type")
        if kind == "user":
            parts = as_parts(message.get("content"))
            if parts:
                history.append({"role": "user", "parts": parts})
        elif kind == "gemini":
            parts = [
                p for p in as_parts(message.get("content")) if p.get("text") or len(p) > 1 or "text" not in p
            ]
            calls = message.get("toolCalls") or []
            for tc in calls:
                parts.append(
                    {
                        "functionCall": {
                            "name": tc.get("name"),
                            "args": tc.get("args") or {},
                            "id": tc.get("id"),
                        }
                    }
                )
            if parts:
                history.append({"role": "model", "parts": parts})
            results: list[dict[str, Any]] = []
            for tc in calls:
                result = tc.get("result")
                if isinstance(result, str) and result:
                    results.append(
                        {
                            "functionResponse": {
                                "id": tc.get("id"),
                                "name": tc.get("name"),
                                "response": {"output": result},
                            }
                        }
                    )
                elif result:
                    results.extend(as_parts(result))
            if results:
                history.append({"role": "user", "parts": results})
    return history


def split_point(history: list[dict[str, Any]], fraction: float = 0.7) -> int:
    """Index of the first plain user turn at or after ``fraction`` of the characters (Gemini CLI's rule)."""
    counts = [len(json.dumps(c, separators=(",", ":"), ensure_ascii=False)) for c in history]
    target = sum(counts) * fraction
    last = 0
    cumulative = 0
    for index, content in enumerate(history):
        is_prompt = content["role"] == "user" and not any("functionResponse" in p for p in content["parts"])
        if is_prompt:
            if cumulative >= target:
                return index
            last = index
        cumulative += counts[index]
    return last


def real_histories() -> list[tuple[str, list[dict[str, Any]]]]:
    out = []
    for path in sorted(REAL_SESSIONS.iterdir()):
        if path.suffix not in (".json", ".jsonl"):
            continue
        history = to_wire(load_messages(path))
        cut = split_point(history)
        if cut == 0:
            cut = round(len(history) * 0.7)
        if history[:cut]:
            out.append((path.name, history[:cut]))
    return out


def commands_ceiling(summarizer: OfflineSummarizer, history: list[dict[str, Any]]) -> int:
    """How many commands of a history could survive if the whole budget went to command lines alone."""
    room = summarizer.budget_tokens(history) * 4 - len(summarizer.summarize([])) - 80
    costs = sorted(len(snapshot_text("$ " + c.command)) + 1 for c in extract_facts(history).commands)
    fitted = 0
    for cost in costs:
        if cost > room:
            break
        room -= cost
        fitted += 1
    return fitted


@dataclass(frozen=True)
class RealFigures:
    percent: dict[str, float]
    kept: dict[str, int]
    total: dict[str, int]
    commands_ceiling: float
    rows: tuple[str, ...]


@functools.cache
def real_figures() -> RealFigures:
    """Summarise the first 70% of every real session at the default budget and measure retention."""
    summarizer = OfflineSummarizer()
    kept = dict.fromkeys(FACT_KINDS, 0)
    total = dict.fromkeys(FACT_KINDS, 0)
    ceiling_kept = 0
    rows = []
    for name, history in real_histories():
        snapshot = summarizer.summarize(history)
        assert len(snapshot) <= summarizer.budget_tokens(history) * 4, name
        assert snapshot == summarizer.summarize(history), name
        measured = retention(extract_facts(history), snapshot)
        cells = []
        for kind in FACT_KINDS:
            k = measured.kind(kind)
            kept[kind] += len(k.kept)
            total[kind] += k.total
            cells.append(f"{len(k.kept)}/{k.total}")
        rows.append(f"{name[:60]:60} " + " ".join(f"{c:>9}" for c in cells))
        ceiling_kept += commands_ceiling(summarizer, history)
    percent = {kind: 100.0 * kept[kind] / total[kind] for kind in FACT_KINDS if total[kind]}
    ceiling = 100.0 * ceiling_kept / total["commands"] if total["commands"] else 100.0
    return RealFigures(percent, kept, total, ceiling, tuple(rows))


needs_real_sessions = pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="real sessions folder absent")


@needs_real_sessions
def test_real_sessions_retention() -> None:
    figures = real_figures()
    percent = figures.percent
    # The retention table, shown only when an assertion fails (a passing run prints nothing).
    table = "\n".join(
        [
            f"real-session retention at the default budget (kept/total: {' '.join(FACT_KINDS)})",
            *figures.rows,
            "aggregate: "
            + ", ".join(f"{k} {percent[k]:.1f}% ({figures.kept[k]}/{figures.total[k]})" for k in percent),
            f"commands ceiling (whole budget spent on commands alone): {figures.commands_ceiling:.1f}%",
        ]
    )
    assert set(percent) == set(FACT_KINDS), table
    assert percent["paths"] >= 98.0, table
    assert percent["errors"] >= 95.0, table
    assert percent["directives"] >= 90.0, table
    assert percent["commands"] >= 95.0, table
    assert percent["requests"] >= 95.0, table


@needs_real_sessions
def test_the_eight_largest_real_sessions_keep_every_kind_verbatim() -> None:
    """Issue 12's targets: over the 8 largest real sessions, the offline snapshot of the first 70% keeps
    paths >= 98%, commands, errors and user requests >= 95%, verbatim; each snapshot is at most 10% of its
    span (Gemini CLI's estimate); no XML entity appears unless the span had it."""
    from ctxtool.compress.gemini_cli.chat_compression import estimate_token_count

    largest = {p.name for p in sorted(REAL_SESSIONS.glob("*.json*"), key=lambda p: -p.stat().st_size)[:8]}
    summarizer = OfflineSummarizer()
    kept = dict.fromkeys(FACT_KINDS, 0)
    total = dict.fromkeys(FACT_KINDS, 0)
    seen = 0
    for name, history in real_histories():
        if name not in largest:
            continue
        seen += 1
        snapshot = summarizer.summarize(history)
        span = estimate_token_count([p for c in history for p in c["parts"]])
        assert estimate_token_count([{"text": snapshot}]) <= span * 0.10, name
        source = json.dumps(history, ensure_ascii=False)
        for entity in ("&amp;", "&lt;", "&gt;"):
            assert entity not in snapshot or entity in source, (name, entity)
        measured = retention(extract_facts(history), snapshot)
        for kind in FACT_KINDS:
            kept[kind] += len(measured.kind(kind).kept)
            total[kind] += measured.kind(kind).total
    assert seen == 8
    share = {k: 100.0 * kept[k] / total[k] for k in FACT_KINDS if total[k]}
    assert share["paths"] >= 98.0
    assert share["commands"] >= 95.0
    assert share["errors"] >= 95.0
    assert share["requests"] >= 95.0


def test_converter_handles_jsonl_replay(tmp_path: Path) -> None:
    lines = [
        {"sessionId": "s", "projectHash": "h"},
        {"id": "1", "type": "user", "content": "first"},
        {"id": "2", "type": "gemini", "content": "answer"},
        {"id": "2", "type": "gemini", "content": "answer, edited"},
        {"id": "3", "type": "user", "content": "second"},
        {"$rewindTo": "3"},
        {"$set": {"lastUpdated": "x"}},
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n")
    assert [m["content"] for m in load_messages(path)] == ["first", "answer, edited"]
    checkpoint = tmp_path / "c.jsonl"
    checkpoint.write_text(
        json.dumps({"$set": {"messages": [{"id": "9", "type": "user", "content": "only"}]}})
    )
    assert [m["id"] for m in load_messages(checkpoint)] == ["9"]
    assert (
        re.sub(r"\s", "", json.dumps(to_wire(load_messages(path))[1]))
        == '{"role":"model","parts":[{"text":"answer,edited"}]}'
    )
