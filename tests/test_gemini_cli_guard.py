"""The guard and archive hooks in the real Gemini CLI 0.61.0 (issue 29), installed by `ctxtool hooks install`.

A scripted session (tests/gemini_cli_harness.py: the fake API records every request Gemini CLI sends) crosses
the guard's warn level, so the next request names the fallback model, then its budget, so Gemini CLI stops the
agent with ctxtool's reason; the session file stays readable and `ctxtool stats` on it equals Gemini CLI's own
`--output-format json` stats; the SessionEnd hook archived it; `hooks uninstall` gives settings.json back byte
for byte. A guard that crashes inside ctxtool leaves the session running.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxtool.cli import run
from tests.gemini_cli_harness import (
    CHAT_MODEL,
    NO_RELAUNCH,
    FakeGeminiAPI,
    Run,
    Workspace,
    call,
    make_workspace,
    text,
    usage,
)
from tests.gemini_cli_scenarios import TOKEN_FIELDS, role_totals

REPO = Path(__file__).resolve().parents[1]
FALLBACK = "gemini-2.5-flash"


def _gemini(binary: Path, ws: Workspace, url: str, args: list[str], extra: dict[str, str]) -> Run:
    """``run_gemini`` with the environment the hooks need to run this checkout's ctxtool."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(ws.home),
        "GEMINI_API_KEY": "fake-key-for-the-local-test-server",
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_HOME": str(ws.home),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "TZ": "UTC",
        "LANG": "en_US.UTF-8",
        "PYTHONPATH": str(REPO),  # the hook runs the venv's ctxtool script: make it this checkout's
        **NO_RELAUNCH,
        **extra,
    }
    assert url.startswith("http://127.0.0.1:")
    done = subprocess.run(
        [str(binary), *args], cwd=ws.project, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    return Run(done.returncode, done.stdout, done.stderr)


def _stats(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> dict[str, Any]:
    capsysbinary.readouterr()
    assert run(["stats", *args, "--format", "json", "--no-cache"]) == 0
    out: dict[str, Any] = orjson.loads(capsysbinary.readouterr().out)
    return out


def _install(ws: Workspace, monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(ws.home))
    assert run(["hooks", "install", "--scope", "user", *args]) == 0


def test_the_guard_warns_then_stops_a_real_session_and_the_archive_keeps_it(
    gemini_cli: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    ws = make_workspace(tmp_path)
    (ws.project / "notes.txt").write_text("hello\n")
    settings = ws.gemini_dir / "settings.json"
    original = settings.read_bytes()
    archive = tmp_path / "history"
    cache = tmp_path / "cache"
    _install(ws, monkeypatch, "--max-session-tokens", "1000", "--fallback-model", FALLBACK,
             "--archive", str(archive))  # fmt: skip
    hooks = orjson.loads(settings.read_bytes())["hooks"]
    assert hooks["BeforeModel"][0]["hooks"][0]["name"] == "ctxtool-guard"
    assert Path(hooks["BeforeModel"][0]["hooks"][0]["command"].split()[0]).is_absolute()

    notes = str(ws.project / "notes.txt")
    api = FakeGeminiAPI()
    first = call("read_file", {"file_path": notes}, usage(850, 10))  # 860 tokens: past 80% of 1000
    api.chat.extend(
        [
            # Slow enough that the folder Gemini CLI wrote the new session file into is older than two
            # seconds when the second call scans it: the third call then reads only the appended records.
            dataclasses.replace(first, delay=2.5),
            call("read_file", {"file_path": notes}, usage(900, 12)),  # 1,772: past the budget
            text("never sent: the guard stops the agent first", usage(950, 5)),
        ]
    )
    calls = _log_calls(tmp_path)
    with api.serving() as url:
        done = _gemini(gemini_cli, ws, url,
                       ["-m", CHAT_MODEL, "--approval-mode", "yolo", "-p", "read notes.txt twice",
                        "--output-format", "json"],
                       {"CTXTOOL_CACHE_DIR": str(cache),
                        "PYTHONPATH": f"{calls}{os.pathsep}{REPO}"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    sent = api.chat_requests()
    # The first request is under the warn level; the second, past it, goes to the fallback model; the third
    # is never sent: the guard stopped the agent.
    assert [r.model for r in sent] == [CHAT_MODEL, FALLBACK]
    assert len(api.chat) == 1
    stopped = f"{done.stdout}\n{done.stderr}"
    assert "Agent execution stopped: ctxtool guard: session tokens is 1,772" in stopped
    assert "budget of 1,000 (--max-session-tokens)" in stopped
    assert "ctxtool hooks install --max-session-tokens" in stopped
    assert "Hook system message: ctxtool guard: session tokens 860 of 1,000 (86%" in stopped
    # The first two calls listed the new session's folder again (it had just changed); the third, which
    # stopped the agent, added up the records appended since the second and read nothing else.
    assert (calls / "log").read_text().split() == ["call", "full", "call", "full", "call"]

    # The session file stays readable, and ctxtool counts what Gemini CLI counted.
    [session] = ws.session_files()
    gemini = role_totals([done.json()["stats"]], "main")
    [row] = _stats(capsysbinary, str(session), "--by", "session", "--strict")["rows"]
    fields = {"prompt": "prompt_tokens", "candidates": "output", "cached": "cached", "thoughts": "thoughts",
              "tool": "tool", "total": "total"}  # fmt: skip
    assert {"requests": row["requests"], **{k: row[fields[k]] for k in TOKEN_FIELDS}} == gemini
    assert row["models"] == sorted([CHAT_MODEL, FALLBACK])

    # SessionEnd archived it: the dataset holds the session with the same figures.
    [kept] = _stats(capsysbinary, str(archive), "--by", "session")["rows"]
    assert (kept["session_id"], kept["requests"], kept["total"]) == (row["session_id"], 2, row["total"])

    # Uninstall gives the settings back byte for byte.
    assert run(["hooks", "uninstall", "--scope", "user"]) == 0
    assert settings.read_bytes() == original


def _log_calls(tmp_path: Path) -> Path:
    """A sitecustomize (the hook's Python loads it first) that logs each guard call, and each full tally
    (``ctxtool.hooks.rescan``), to ``<folder>/log``; returns the folder."""
    folder = tmp_path / "calls"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import ctxtool.hooks.ledger as ledger\n"
        "import ctxtool.hooks.rescan as rescan\n"
        "def logged(name, real):\n"
        "    def wrapper(*args, **kwargs):\n"
        f"        with open({str(folder / 'log')!r}, 'a') as fh:\n"
        "            fh.write(name + '\\n')\n"
        "        return real(*args, **kwargs)\n"
        "    return wrapper\n"
        "ledger.spend = logged('call', ledger.spend)\n"
        "rescan.spend = logged('full', rescan.spend)\n"
    )
    return folder


def test_a_guard_that_crashes_leaves_the_session_running(
    gemini_cli: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(tmp_path)
    (ws.project / "notes.txt").write_text("hello\n")
    _install(ws, monkeypatch, "--max-session-tokens", "1", "--no-archive")
    # Something inside ctxtool fails on every call (a sitecustomize the hook's Python loads first).
    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / "sitecustomize.py").write_text(
        "import ctxtool.hooks.ledger as ledger\n"
        "def spend(*args, **kwargs):\n"
        "    raise RuntimeError('simulated failure inside ctxtool')\n"
        "ledger.spend = spend\n"
    )
    api = FakeGeminiAPI()
    api.chat.extend(
        [
            call("read_file", {"file_path": str(ws.project / "notes.txt")}, usage(850, 10)),
            text("The notes say hello.", usage(900, 5)),
        ]
    )
    with api.serving() as url:
        done = _gemini(gemini_cli, ws, url,
                       ["-m", CHAT_MODEL, "--approval-mode", "yolo", "-p", "read notes.txt",
                        "--output-format", "json"],
                       {"PYTHONPATH": f"{crash}{os.pathsep}{REPO}",
                        "CTXTOOL_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # Both requests were sent (a budget of 1 token would have stopped the second) and answered.
    assert len(api.chat_requests()) == 2
    assert api.chat == []
    assert done.json()["response"].strip() == "The notes say hello."
    out = f"{done.stdout}\n{done.stderr}"
    assert "simulated failure inside ctxtool; the call was allowed (fail open)" in out
