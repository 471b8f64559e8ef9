"""Gemini CLI 0.61.0 itself reads what ctxtool writes: it lists every compacted session and, resumed, sends
the model exactly the history ctxtool wrote (issue 11, test a).

Every run points Gemini CLI at the fake API of tests/gemini_cli_harness.py (0.61 may ask the model for
session titles while listing, and a resume sends a chat turn), never at a real endpoint. Under ``CI=true`` a
missing Gemini CLI fails the suite (tests/conftest.py ``gemini_cli``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxtool.cli import run
from ctxtool.compress.gemini_cli.chat_compression import convert_session_to_client_history
from ctxtool.session.read import read_session
from tests.conftest import FIXTURES, REAL_SESSIONS
from tests.gemini_cli_harness import (
    CHAT_MODEL,
    FakeGeminiAPI,
    make_workspace,
    register_project,
    run_gemini,
    text,
    usage,
)

STRATEGIES = ("gemini-cli", "kode", "pi", "openclaw", "codex")
CHATS = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats"
# One fixture per on-disk era (fixtures/README.md), then real sessions: legacy .json and .jsonl.
FIXTURE_SOURCES = (
    FIXTURES / "gemini" / "tmp" / "2136a2490b0bdc8f317d3e16aecb6c0b6c264127ce17e17345fe6c0dc2ce7069" / "chats"
    / "session-2025-09-12T10-15-4b1e9c2a.json",  # legacy .json, v0.4
    CHATS / "session-2026-02-10T09-00-c0ffee01.json",  # legacy .json, v0.31+
    CHATS / "session-2026-03-02T14-20-d00dfeed.json",  # compact one-line .json
    CHATS / "session-2026-04-20T10-00-e1e2e3e4.jsonl",  # .jsonl, v0.39+
    CHATS / "session-2026-04-22T16-40-5e7a0b1c.jsonl",  # .jsonl with $rewindTo
    CHATS / "session-2026-05-25T09-30-c4e5f6a7.jsonl",  # .jsonl, v0.44+, compressed once already
)  # fmt: skip
REAL_SOURCES = (
    "aim__session-2026-03-18T02-47-daa0ceb2.json",
    "Myflix__session-2026-02-25T07-36-c8af175c.json",
    "TP-Tutor__session-2026-04-25T01-53-b1b4c413.jsonl",
    "TP-Tutor__session-2026-04-24T23-16-c8b2cbd9.jsonl",
)
PROMPT = "continue from here"


def recent_copy(src: Path, project_root: Path, chats: Path) -> Path:
    """The fixture with today's timestamps (Gemini CLI deletes sessions older than 30 days) and this
    project's hash (it lists only the project's own sessions)."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def fresh(value: object) -> object:
        if isinstance(value, dict):
            return {
                k: now if k in ("timestamp", "startTime", "lastUpdated") else fresh(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [fresh(v) for v in value]
        return value

    if src.suffix == ".json":  # a legacy single document
        doc = fresh(json.loads(src.read_text(encoding="utf-8")))
        assert isinstance(doc, dict)
        doc["projectHash"] = hashlib.sha256(str(project_root).encode()).hexdigest()
        target = chats / f"session-{datetime.now(UTC):%Y-%m-%dT%H-%M}-{doc['sessionId'][:8]}.json"
        target.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        return target
    lines = []
    for n, line in enumerate(src.read_text(encoding="utf-8").splitlines()):
        try:
            record = fresh(json.loads(line)) if line.strip() else None
        except json.JSONDecodeError:
            lines.append(line)  # a broken line stays as it is (Gemini CLI skips it too)
            continue
        if n == 0 and isinstance(record, dict):
            record["projectHash"] = hashlib.sha256(str(project_root).encode()).hexdigest()
        lines.append(json.dumps(record, separators=(",", ":")) if record is not None else "")
    session_id = json.loads(lines[0])["sessionId"]
    target = chats / f"session-{datetime.now(UTC):%Y-%m-%dT%H-%M}-{session_id[:8]}.jsonl"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


@pytest.mark.parametrize(
    ("fixture", "title", "era"),
    [
        ("session-2026-05-25T09-30-c4e5f6a7.jsonl", "Refactor the storage layer to use SQLite", None),
        ("session-2026-02-10T09-00-c0ffee01.json", "파서 off-by-one 버그와 툴바 UI 수정", None),
        ("session-2026-02-10T09-00-c0ffee01.json", "파서 off-by-one 버그와 툴바 UI 수정", "jsonl"),
    ],
)
def test_gemini_cli_lists_the_compacted_session(
    gemini_cli: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fixture: str,
    title: str,
    era: str | None,
) -> None:
    workspace = make_workspace(tmp_path)
    chats = register_project(workspace)
    original = recent_copy(CHATS / fixture, workspace.project, chats)
    extra = ["--era", era] if era else []
    assert run(["compact", str(original), "--force", "--as-new-session", "-f", "json", *extra]) == 0
    report = json.loads(capsys.readouterr().out)["sessions"][0]
    assert report["status"] == "COMPRESSED"
    assert Path(report["output_path"]).suffix == f".{era or original.suffix[1:]}"
    api = FakeGeminiAPI(utility=lambda body, model: text("A title from the fake", usage(20, 4)))
    with api.serving() as url:
        done = run_gemini(gemini_cli, workspace, url, ["--list-sessions"])
    listing = done.stdout + done.stderr
    assert "Available sessions for this project (2)" in listing, listing
    assert report["session_id"] in listing
    # Listed under the original's title (its summary, else its first prompt), marked as a compacted copy.
    assert f"{title} (compacted by ctxtool)" in listing
    assert api.chat_requests() == []


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="../shared/real-sessions is not here")
def test_gemini_cli_lists_every_strategy_output_of_the_real_sessions(
    gemini_cli: Path, tmp_path: Path
) -> None:
    """Every session written by every strategy from the real (main) sessions is one Gemini CLI lists."""
    workspace = make_workspace(tmp_path)
    chats = register_project(workspace)
    project = workspace.project
    originals = []
    for src in sorted(REAL_SESSIONS.glob("*.json*")):
        staging = tmp_path / "staging"
        staging.mkdir(exist_ok=True)
        try:
            copy = recent_copy(src, project, staging)
        except ValueError:
            continue  # a .jsonl holding one pretty-printed document: the helper rewrites line by line
        text = copy.read_text(encoding="utf-8")
        if json.loads(text.splitlines()[0] if copy.suffix == ".jsonl" else text).get("kind") == "subagent":
            continue  # these live in chats/<parent-id>/, where Gemini CLI neither lists nor cleans up
        if not (chats / copy.name).exists():  # two sources with one session id prefix: keep the first
            originals.append(copy.replace(chats / copy.name))
    assert len(originals) >= 20
    ctxtool = [os.path.join(os.path.dirname(sys.executable), "ctxtool")]
    written = []
    for strategy in ("gemini-cli", "kode", "pi", "openclaw", "codex"):
        proc = subprocess.run(
            [*ctxtool, "compact", *map(str, originals), "--force", "--as-new-session", "-f", "json",
             "--strategy", strategy],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(proc.stdout)["sessions"]
        assert {r["status"] for r in rows} <= {"COMPRESSED", "NOOP"}, strategy
        written += [Path(r["output_path"]) for r in rows if r["written"]]
    assert len(written) >= 4 * len(originals)

    api = FakeGeminiAPI(utility=lambda body, model: text("A title from the fake", usage(20, 4)))
    with api.serving() as url:
        done = run_gemini(gemini_cli, workspace, url, ["--list-sessions"], timeout=300)
    listed = set(re.findall(r"\[([^\]\s]+)\]\s*$", done.stdout + done.stderr, re.M))
    # Gemini CLI's session cleanup (on by default) deletes files it cannot list while listing: sessions
    # with nothing to resume (the a2a server's header-only files, a lone warning) and top-level subagent
    # sessions. ctxtool writes neither: such a session is a NOOP, and subagents are not copied here.
    for path in written:
        assert path.exists(), f"Gemini CLI's cleanup removed {path.name}"
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text.splitlines()[0] if path.suffix == ".jsonl" else text)
        assert doc["sessionId"] in listed, f"{path.name} is not listed by Gemini CLI"


def _strip_session_context(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The contents without the ``<session_context>`` part Gemini CLI puts first on a resume (merged into
    the first user content, or a content of its own)."""
    first = sent[0]
    parts = first["parts"]
    assert parts[0]["text"].startswith("<session_context>"), parts[0]
    rest = [{**first, "parts": parts[1:]}] if parts[1:] else []
    return rest + sent[1:]


# Gemini CLI 0.61.0 closes a history that ends with an unanswered tool response with this model turn before
# the next prompt (geminiChat.ts ``closeUnansweredToolResponseTurn``, ``INTERRUPTED_RESPONSE_PLACEHOLDER``).
INTERRUPTED = "[The previous response was interrupted before it completed.]"


def _expected_request(written: Path) -> list[dict[str, Any]]:
    """What resuming ``written`` and typing PROMPT should send: the history ctxtool wrote (as ctxtool's port
    of ``convertSessionToClientHistory`` reads it), then the prompt, through the steps Gemini CLI 0.61.0
    applies to every request (geminiChat.ts): thought parts dropped (``stripThoughts``), consecutive turns
    of one role merged (``coalesceConsecutiveRoles``), ``<tool>__`` prefixes cut from call ids and empty
    text parts dropped (``stripToolCallIdPrefixes``)."""
    history: list[dict[str, Any]] = [
        dict(turn["content"]) for turn in convert_session_to_client_history(read_session(written).messages)
    ]
    last = history[-1] if history else None
    if last and last["role"] == "user" and any("functionResponse" in p for p in last["parts"]):
        history.append({"role": "model", "parts": [{"text": INTERRUPTED}]})
    history.append({"role": "user", "parts": [{"text": PROMPT}]})
    merged: list[dict[str, Any]] = []
    for content in history:
        parts = [_without_prefix(p) for p in content["parts"] if not p.get("thought")]
        parts = [p for p in parts if not (p.get("text") == "" and len(p) == 1)]
        if not parts:
            continue
        if merged and merged[-1]["role"] == content["role"]:
            merged[-1] = {**merged[-1], "parts": [*merged[-1]["parts"], *parts]}
        else:
            merged.append({**content, "parts": parts})
    return merged


def _without_prefix(part: dict[str, Any]) -> dict[str, Any]:
    out = dict(part)
    for key in ("functionCall", "functionResponse"):
        value = out.get(key)
        if isinstance(value, dict) and isinstance(value.get("id"), str):
            name = (value.get("name") or "").strip() or "generic_tool"
            if value["id"].startswith(f"{name}__"):
                out[key] = {**value, "id": value["id"][len(name) + 2 :]}
    if out.get("text") == "" and len(out) > 1:
        del out["text"]
    return out


def _as_compared(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request without what Gemini CLI adds for the API alone: the synthetic ``thoughtSignature`` it puts
    on a model turn's first function call (geminiChat.ts ``stripThoughts``)."""
    return [
        {**c, "parts": [{k: v for k, v in p.items() if k != "thoughtSignature"} for p in c["parts"]]}
        for c in _strip_session_context(sent)
    ]


def _resume(gemini: Path, written: Path, session_id: str, root: Path) -> list[dict[str, Any]]:
    """Resume a copy of ``written`` in a workspace of its own; the contents of the chat request sent."""
    workspace = make_workspace(root)
    chats = register_project(workspace)
    data = written.read_bytes()
    (chats / written.name).write_bytes(data)
    api = FakeGeminiAPI(
        chat=[text("Resumed.", usage(100, 2))], utility=lambda b, m: text("title", usage(5, 1))
    )
    with api.serving() as url:
        done = run_gemini(gemini, workspace, url, ["-m", CHAT_MODEL, "--resume", session_id, "-p", PROMPT])
    assert done.returncode == 0, done.stderr[-2000:]
    [request] = api.chat_requests()
    contents: list[dict[str, Any]] = request.body["contents"]
    return contents


def _sources() -> list[Path]:
    real = [REAL_SESSIONS / name for name in REAL_SOURCES] if REAL_SESSIONS.is_dir() else []
    return [*FIXTURE_SOURCES, *real]


def test_gemini_cli_resumes_exactly_what_every_strategy_wrote(gemini_cli: Path, tmp_path: Path) -> None:
    """Every strategy, fixtures of every era and real sessions (.json and .jsonl): Gemini CLI 0.61 resumes
    the written session and its chat request carries exactly the history ctxtool wrote."""
    workspace = make_workspace(tmp_path / "src")
    chats = register_project(workspace)
    source_of = {recent_copy(src, workspace.project, chats): src for src in _sources()}
    originals = list(source_of)
    ctxtool = os.path.join(os.path.dirname(sys.executable), "ctxtool")
    jobs: list[tuple[str, Path, Path, str]] = []
    for strategy in STRATEGIES:
        proc = subprocess.run(
            [ctxtool, "compact", *map(str, originals), "--force", "--as-new-session", "-f", "json",
             "--strategy", strategy],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(proc.stdout)["sessions"]
        written = [
            (Path(r["input_path"]), Path(r["output_path"]), r["session_id"]) for r in rows if r["written"]
        ]
        # Every source with something to compress is written (the small fixtures may be NOOP for some).
        assert len(written) >= 4, (strategy, [(r["path"], r["status"]) for r in rows])
        jobs += [(strategy, src, out, sid) for src, out, sid in written]
    assert len({j[0] for j in jobs}) == len(STRATEGIES)

    def check(job: tuple[int, tuple[str, Path, Path, str]]) -> str | None:
        index, (strategy, src, out, sid) = job
        sent = _resume(gemini_cli, out, sid, tmp_path / f"resume-{index}")
        if _as_compared(sent) != _expected_request(out):
            return f"{strategy} {src.name}: Gemini CLI sent another history than the file holds"
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f for f in pool.map(check, enumerate(jobs)) if f]
    assert failures == []
    if REAL_SESSIONS.is_dir():  # real sessions of both eras were written and resumed
        real = {source_of[src] for _, src, _, _ in jobs if source_of[src].parent == REAL_SESSIONS}
        assert len(real) >= 3
        assert {p.suffix for p in real} == {".json", ".jsonl"}


def test_sessions_under_the_seatbelt_root_are_read_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Gemini CLI 0.61 in macOS Seatbelt writes to <home>/.cache/.gemini/tmp (storage.ts
    ``getGlobalRuntimeDir``): with no PATH, ctxtool reads it beside <home>/.gemini/tmp."""
    home = tmp_path / "home"
    plain = home / ".gemini" / "tmp" / "a" / "chats"
    sandboxed = home / ".cache" / ".gemini" / "tmp" / "b" / "chats"
    for folder, name in (
        (plain, "session-2026-05-25T09-30-c4e5f6a7.jsonl"),
        (sandboxed, "session-2026-02-10T09-00-c0ffee01.json"),
    ):
        folder.mkdir(parents=True)
        (folder / name).write_bytes((CHATS / name).read_bytes())
    monkeypatch.setenv("GEMINI_CLI_HOME", str(home))
    assert run(["stats", "--by", "session", "--format", "json", "--no-cache"]) == 0
    rows = json.loads(capsysbinary.readouterr().out)["rows"]
    assert sorted(Path(r["file"]).parent.parent.name for r in rows) == ["a", "b"]


@pytest.mark.parametrize(
    "fixture", ["session-2026-05-25T09-30-c4e5f6a7.jsonl", "session-2026-02-10T09-00-c0ffee01.json"]
)
def test_gemini_cli_resumes_what_compact_in_place_wrote(
    gemini_cli: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture: str
) -> None:
    """--in-place keeps the recorded history and adds the compacted one (a `$set.messages` record; for a
    legacy .json, in the .jsonl beside it): Gemini CLI resumes exactly the compacted history."""
    workspace = make_workspace(tmp_path)
    chats = register_project(workspace)
    original = recent_copy(CHATS / fixture, workspace.project, chats)
    assert run(["compact", str(original), "--force", "--in-place", "-f", "json"]) == 0
    report = json.loads(capsys.readouterr().out)["sessions"][0]
    written = Path(report["output_path"])
    assert written.suffix == ".jsonl"
    for leftover in chats.glob("*.ctxtool-backup-*"):
        leftover.unlink()  # the backup is not a session; keep the folder to what Gemini CLI reads
    session_id = read_session(written).session_id
    assert session_id is not None
    assert read_session(written).messages[1]["content"][0]["text"] == g_ack()
    expected = _expected_request(written)  # before Gemini CLI appends this turn to the file
    api = FakeGeminiAPI(
        chat=[text("Resumed.", usage(100, 2))], utility=lambda b, m: text("title", usage(5, 1))
    )
    with api.serving() as url:
        done = run_gemini(
            gemini_cli, workspace, url, ["-m", CHAT_MODEL, "--resume", session_id, "-p", PROMPT]
        )
    assert done.returncode == 0, done.stderr[-2000:]
    [request] = api.chat_requests()
    assert _as_compared(request.body["contents"]) == expected


def g_ack() -> str:
    from ctxtool.compress.gemini_cli.chat_compression import SUMMARY_ACK_TEXT

    return SUMMARY_ACK_TEXT


# --- sessions whose messages have no ids (issue 26) ---------------------------------------------------------


def _id_less_legacy(chats: Path, project: Path) -> tuple[Path, list[str]]:
    """A legacy .json session as a converter writes it: no message ids, but for two (one repeated); today's
    timestamps and this project's hash. Returns it and its prompts, in order."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    prompts = [f"Question {i}: how does step {i} of the parser work? " * 8 for i in range(8)]
    messages: list[dict[str, Any]] = []
    for i, prompt in enumerate(prompts):
        messages.append({"timestamp": now, "type": "user", "content": [{"text": prompt}]})
        messages.append({"timestamp": now, "type": "gemini", "content": f"Step {i} reads a token. " * 120})
    messages[4]["id"] = messages[9]["id"] = "same-id"  # a repeated id: Gemini CLI's .jsonl reader keeps one
    session_id = "0dd1e55a-0000-4000-8000-000000000026"
    doc = {
        "sessionId": session_id,
        "projectHash": hashlib.sha256(str(project).encode()).hexdigest(),
        "startTime": now,
        "lastUpdated": now,
        "messages": messages,
    }
    path = chats / f"session-{datetime.now(UTC):%Y-%m-%dT%H-%M}-{session_id[:8]}.json"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path, prompts


def _texts(contents: list[dict[str, Any]]) -> list[str]:
    return [p["text"] for c in contents for p in c["parts"] if isinstance(p.get("text"), str)]


@pytest.mark.parametrize("era", [None, "jsonl"])
def test_gemini_cli_resumes_the_compacted_copy_of_a_session_without_ids(
    gemini_cli: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], era: str | None
) -> None:
    """The output of an id-less legacy session carries ids derived from position: Gemini CLI 0.61 resumes
    it with each kept message once, and resumes it again after it rewrote the file (a message without a
    unique id would be gone the second time, which is what Gemini CLI does to the id-less original)."""
    workspace = make_workspace(tmp_path)
    chats = register_project(workspace)
    original, prompts = _id_less_legacy(chats, workspace.project)
    extra = ["--era", era] if era else []
    assert run(["compact", str(original), "--force", "--as-new-session", "-f", "json", *extra]) == 0
    report = json.loads(capsys.readouterr().out)["sessions"][0]
    assert report["status"] == "COMPRESSED"
    written = Path(report["output_path"])
    assert written.suffix == f".{era or 'json'}"
    kept = read_session(written).messages[2:]
    assert report["split_message_id"] == kept[0]["id"]
    assert len(kept) == report["messages_kept"] < 16
    kept_prompts = prompts[len(prompts) - len(kept) // 2 :]
    original.unlink()  # resume the copy alone (same project, so its files stay where Gemini CLI looks)

    expected = _expected_request(written)
    api = FakeGeminiAPI(
        chat=[text("Resumed.", usage(100, 2)), text("Again.", usage(120, 2))],
        utility=lambda b, m: text("title", usage(5, 1)),
    )
    with api.serving() as url:
        first = run_gemini(
            gemini_cli, workspace, url, ["-m", CHAT_MODEL, "--resume", report["session_id"], "-p", PROMPT]
        )
        assert first.returncode == 0, first.stderr[-2000:]
        second = run_gemini(
            gemini_cli,
            workspace,
            url,
            ["-m", CHAT_MODEL, "--resume", report["session_id"], "-p", "and then?"],
        )
        assert second.returncode == 0, second.stderr[-2000:]
    one, two = (r.body["contents"] for r in api.chat_requests())
    assert _as_compared(one) == expected
    sent = _texts(_as_compared(one))
    assert sent[0].startswith("<state_snapshot>")
    assert sent[1] == g_ack()
    # Each kept prompt once; no summarised one as a turn of its own (the summary quotes them in its text).
    assert [t for t in sent if t in prompts] == kept_prompts
    # The second resume reads the .jsonl Gemini CLI wrote: the same history, then the first exchange.
    assert _as_compared(two) == [
        *_as_compared(one)[:-1],
        {"role": "user", "parts": [{"text": PROMPT}]},
        {"role": "model", "parts": [{"text": "Resumed."}]},
        {"role": "user", "parts": [{"text": "and then?"}]},
    ]


def test_gemini_cli_skips_jsonl_message_lines_without_ids(
    gemini_cli: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Why compact refuses a .jsonl whose message lines lack ids: Gemini CLI 0.61 resumes it without them
    (loadConversationRecord keeps only records with a string id), as ctxtool's reader does."""
    workspace = make_workspace(tmp_path)
    chats = register_project(workspace)
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    session_id = "0dd1e55a-0000-4000-8000-00000000jsnl"
    meta = {
        "sessionId": session_id,
        "projectHash": hashlib.sha256(str(workspace.project).encode()).hexdigest(),
        "startTime": now,
        "lastUpdated": now,
    }
    records = [
        meta,
        {"timestamp": now, "type": "user", "content": [{"text": "a question without an id"}]},
        {"timestamp": now, "type": "gemini", "content": "an answer without an id"},
        {"id": "u2", "timestamp": now, "type": "user", "content": [{"text": "a question with an id"}]},
        {"id": "g2", "timestamp": now, "type": "gemini", "content": "an answer with an id"},
    ]
    path = chats / f"session-{datetime.now(UTC):%Y-%m-%dT%H-%M}-{session_id[:8]}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert [m["id"] for m in read_session(path).messages] == ["u2", "g2"]
    assert run(["compact", str(path), "--force", "-f", "json", "--out", str(tmp_path / "out")]) == 1
    [error] = capsys.readouterr().err.strip().splitlines()
    assert error.startswith(f'Error: {path}: 2 message records have no "id" (the first on line 2)')
    expected = _expected_request(path)
    sent = _resume(gemini_cli, path, session_id, tmp_path / "resume")
    assert _as_compared(sent) == expected
    assert "a question without an id" not in json.dumps(sent)
    assert "a question with an id" in _texts(sent)
