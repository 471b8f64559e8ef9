"""ctxtool's ``--summarizer gemini --prompt-from-gemini-cli`` compression asks what Gemini CLI 0.61.0 asks
when it compresses the same session, and the chat that follows is the same (issue 11, test b).

Each session is compressed twice in one workspace (same project folder, same temporary folder, same day):
by ``ctxtool compact`` against one fake API, and by Gemini CLI itself (``model.compressionThreshold`` tiny,
``--resume``) against another. Both fakes answer the summary and the verification calls with the same
texts. Compared: the split (through the contents), the model, the generationConfig, the system instruction
and every text of both calls; then Gemini CLI resumes ctxtool's compacted session, and its chat request must
equal the one Gemini CLI sent after its own compression.

A second test runs Gemini CLI's compression for many chat models and checks the model and generationConfig
``ctxtool.compress.gemini_cli.model_configs`` predicts for each.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from ctxtool.compress.gemini_cli.model_configs import compression_model
from tests.conftest import FIXTURES, REAL_SESSIONS
from tests.gemini_cli_harness import (
    FakeGeminiAPI,
    Recorded,
    Reply,
    Workspace,
    installed_package_dir,
    make_workspace,
    register_project,
    run_gemini,
    text,
    usage,
)
from tests.test_gemini_cli_resume import recent_copy

CHATS = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats"
SOURCES = (
    CHATS / "session-2026-05-25T09-30-c4e5f6a7.jsonl",  # .jsonl, compressed once already (anchored)
    CHATS / "session-2026-04-20T10-00-e1e2e3e4.jsonl",  # .jsonl
    CHATS / "session-2026-02-10T09-00-c0ffee01.json",  # legacy .json
)
REAL = (
    "TP-Tutor__session-2026-04-25T01-53-b1b4c413.jsonl",
    "aim__session-2026-03-18T02-47-daa0ceb2.json",
)
CHAT_MODEL = "gemini-3.1-pro-preview"
PROMPT = "continue from here"
SUMMARY = "<state_snapshot>\n<overall_goal>first draft</overall_goal>\n</state_snapshot>"
FINAL = "<state_snapshot>\n<overall_goal>final, checked</overall_goal>\n</state_snapshot>"


def _summarizer(body: dict[str, Any], model: str) -> Reply:
    """The same answers for ctxtool and Gemini CLI: the probe (whose history ends with the model's summary
    and one user turn) gets FINAL, the summary call SUMMARY."""
    contents = body.get("contents", [])
    probe = (
        len(contents) >= 2
        and contents[-2].get("role") == "model"
        and contents[-2]["parts"] == [{"text": SUMMARY}]
    )
    return text(FINAL if probe else SUMMARY, usage(50, 10))


def _settings(workspace: Workspace, compress: bool) -> None:
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    if compress:
        settings["model"] = {"compressionThreshold": 0.0001}  # type: ignore[dict-item]
    (workspace.gemini_dir / "settings.json").write_text(json.dumps(settings))


def _session_id(path: Path) -> str:
    if path.suffix == ".json":
        return str(json.loads(path.read_text(encoding="utf-8"))["sessionId"])
    return str(json.loads(path.read_text(encoding="utf-8").splitlines()[0])["sessionId"])


def _ctxtool_compact(session: Path, url: str) -> dict[str, Any]:
    ctxtool = os.path.join(os.path.dirname(sys.executable), "ctxtool")
    env = {
        **os.environ,
        "GEMINI_API_KEY": "fake-key-for-the-local-test-server",
        "GOOGLE_GEMINI_BASE_URL": url,
        "CTXTOOL_GEMINI_CLI_PATH": str(installed_package_dir()),
    }
    env.pop("GOOGLE_GENAI_USE_VERTEXAI", None)
    import subprocess

    done = subprocess.run(
        [ctxtool, "compact", str(session), "--summarizer", "gemini", "--prompt-from-gemini-cli",
         "--threshold", "0.0001", "--as-new-session", "--chat-model", CHAT_MODEL, "-f", "json"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["sessions"]
    assert isinstance(row, dict)
    return row


def _call(recorded: Recorded) -> dict[str, Any]:
    body = recorded.body
    return {
        "model": recorded.model,
        "generationConfig": body.get("generationConfig", {}),
        "systemInstruction": body.get("systemInstruction"),
        "contents": body["contents"],
    }


def _without_signatures(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return contents


def _sources() -> list[Path]:
    real = [REAL_SESSIONS / name for name in REAL] if REAL_SESSIONS.is_dir() else []
    return [*SOURCES, *real]


@pytest.mark.parametrize("source", _sources(), ids=lambda p: p.name)
def test_ctxtool_compresses_as_gemini_cli_does(gemini_cli: Path, tmp_path: Path, source: Path) -> None:
    workspace = make_workspace(tmp_path)
    chats = register_project(workspace)
    (workspace.project / "README.md").write_text("demo\n")
    (workspace.project / "src").mkdir()
    (workspace.project / "src" / "app.py").write_text("print('hi')\n")
    original = recent_copy(source, workspace.project, chats)
    pristine = original.read_bytes()

    # ctxtool compresses the session (Gemini CLI's compression settings do not matter to it).
    _settings(workspace, compress=False)
    ours = FakeGeminiAPI(utility=_summarizer)
    with ours.serving() as url:
        row = _ctxtool_compact(original, url)
    assert row["status"] == "COMPRESSED", row
    assert row["env_source"] in ("stored", "built"), row
    written = Path(row["output_path"])
    assert original.read_bytes() == pristine

    # Gemini CLI resumes what ctxtool wrote: the chat request that follows ctxtool's compression.
    resumed = FakeGeminiAPI(chat=[text("ok", usage(100, 2))], utility=_summarizer)
    with resumed.serving() as url:
        done = run_gemini(gemini_cli, workspace, url,
                          ["-m", CHAT_MODEL, "--resume", str(row["session_id"]), "-p", PROMPT])  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert resumed.utility_requests() == [], "Gemini CLI compressed ctxtool's output again"
    [after_ours] = resumed.chat_requests()
    written.unlink()  # Gemini CLI's own run must see the session alone

    # Gemini CLI compresses the same session itself before answering the prompt.
    _settings(workspace, compress=True)
    theirs = FakeGeminiAPI(chat=[text("ok", usage(100, 2))], utility=_summarizer)
    with theirs.serving() as url:
        done = run_gemini(gemini_cli, workspace, url,
                          ["-m", CHAT_MODEL, "--resume", _session_id(original), "-p", PROMPT])  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    [after_theirs] = theirs.chat_requests()

    ctxtool_calls = [_call(r) for r in ours.utility_requests()]
    gemini_calls = [_call(r) for r in theirs.utility_requests()]
    assert len(gemini_calls) == 2, [r.model for r in theirs.utility_requests()]
    for name, mine, reference in zip(("summary", "probe"), ctxtool_calls, gemini_calls, strict=True):
        for key in ("model", "generationConfig", "systemInstruction"):
            assert mine[key] == reference[key], (name, key)
        assert len(mine["contents"]) == len(reference["contents"]), f"{name}: another split"
        assert mine["contents"] == reference["contents"], name
    assert after_ours.body["contents"] == after_theirs.body["contents"]
    assert after_ours.model == after_theirs.model


CHAT_MODELS = (
    "gemini-3.1-pro-preview", "gemini-3-pro-preview", "gemini-2.5-pro", "gemini-2.5-flash",
    "gemini-2.5-flash-lite", "gemini-3-flash-preview", "gemini-3.5-flash", "gemini-3.8-flash",
    "gemini-3.1-flash-lite", "gemini-3.5-flash-lite", "gemini-3-flash", "gemini-2.0-flash", "gemma-4-31b-it",
)  # fmt: skip


def test_compression_model_and_config_for_every_chat_model(gemini_cli: Path, tmp_path: Path) -> None:
    """For each chat model, the model and generationConfig of Gemini CLI's two compression calls are what
    ``compression_model`` predicts for the API-key backend."""

    def observed(model: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        workspace = make_workspace(tmp_path / model, {"model": {"compressionThreshold": 0.0001}})
        chats = register_project(workspace)
        session = recent_copy(SOURCES[0], workspace.project, chats)
        api = FakeGeminiAPI(chat=[text("ok", usage(100, 2))], utility=_summarizer)
        with api.serving() as url:
            done = run_gemini(gemini_cli, workspace, url,
                              ["-m", model, "--resume", _session_id(session), "-p", PROMPT])  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return model, [(r.model, r.body.get("generationConfig", {})) for r in api.utility_requests()]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(observed, CHAT_MODELS))
    wrong = []
    for model, calls in results:
        predicted = compression_model(model)
        expected = [(predicted.model, predicted.generation_config)] * 2
        if calls != expected:
            wrong.append((model, calls[:1], expected[0]))
    assert not wrong


def _session_with_outputs(chats: Path, project: Path, sizes: list[int]) -> tuple[Path, str]:
    """A .jsonl session whose model read one file per entry of ``sizes`` (lines of about 80 characters)."""
    import hashlib
    import uuid
    from datetime import UTC, datetime

    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    sid = str(uuid.uuid4())
    header = {"sessionId": sid, "projectHash": hashlib.sha256(str(project).encode()).hexdigest(),
              "startTime": now, "lastUpdated": now, "kind": "main"}  # fmt: skip
    records: list[dict[str, Any]] = [header, {"id": "u1", "timestamp": now, "type": "user",
                                              "content": [{"text": "read the files"}]}]  # fmt: skip
    for i, lines in enumerate(sizes):
        body = "\n".join(f"line {n} of file {i} " + "x" * 60 for n in range(lines))
        call = {"id": f"read_file_{i}", "name": "read_file", "args": {"file_path": f"f{i}.txt"},
                "status": "success", "timestamp": now,
                "result": [{"functionResponse": {"id": f"read_file_{i}", "name": "read_file",
                                                 "response": {"output": body}}}]}  # fmt: skip
        records.append({"id": f"g{i}", "timestamp": now, "type": "gemini", "content": [{"text": ""}],
                        "model": CHAT_MODEL, "toolCalls": [call]})  # fmt: skip
    records.append({"id": "gz", "timestamp": now, "type": "gemini", "content": [{"text": "done"}],
                    "model": CHAT_MODEL})  # fmt: skip
    path = chats / f"session-{datetime.now(UTC):%Y-%m-%dT%H-%M}-{sid[:8]}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path, sid


@pytest.mark.parametrize("sizes", [[2500] * 4, [1000] * 3, [1000] * 5, [300] * 2], ids=str)
def test_tool_output_masking_plan_matches_gemini_cli(
    gemini_cli: Path, tmp_path: Path, sizes: list[int]
) -> None:
    """``plan_tool_output_masking`` picks as many outputs as Gemini CLI 0.61 masks in the request it sends."""
    from ctxtool.compress.gemini_cli.chat_compression import (
        convert_session_to_client_history,
        plan_tool_output_masking,
    )
    from ctxtool.session.read import read_session

    workspace = make_workspace(tmp_path)
    chats = register_project(workspace)
    path, sid = _session_with_outputs(chats, workspace.project, sizes)
    history = [t["content"] for t in convert_session_to_client_history(read_session(path).messages)]
    plan = plan_tool_output_masking([{"role": "user", "parts": [{"text": "<session_context>"}]}, *history])
    api = FakeGeminiAPI(chat=[text("ok", usage(100, 2))])
    with api.serving() as url:
        done = run_gemini(gemini_cli, workspace, url, ["-m", CHAT_MODEL, "--resume", sid, "-p", "next"])
    assert done.returncode == 0, done.stderr[-2000:]
    [request] = api.chat_requests()
    masked = sum(
        "<tool_output_masked>" in json.dumps(p.get("functionResponse", {}))
        for c in request.body["contents"]
        for p in c["parts"]
    )
    assert masked == len(plan.parts)
