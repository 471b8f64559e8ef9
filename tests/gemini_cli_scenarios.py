"""Scripted conversations played by the real Gemini CLI against the fake API, and what Gemini CLI counted.

Each scenario is a list of runs (``gemini -p PROMPT``, later ones with ``--resume latest``), each answered by
scripted replies with known usage: tool calls that succeed and fail, an empty answer, compressions forced by
a tiny ``model.compressionThreshold``. Playing one gives the session file(s) Gemini CLI wrote and, per run,
the token stats Gemini CLI printed itself (``--output-format json``): the reference ``ctxtool stats`` is
checked against (tests/test_gemini_cli_accounting.py).

``python -m tests.gemini_cli_scenarios DIR`` (``make gemini-cli-fixtures``) plays every scenario and writes
``DIR/<scenario>/`` with the session files and ``gemini-stats.json``; the committed copy lives in
``tests/recorded/gemini-cli-<version>/``. Regenerate it when Gemini CLI releases.

What Gemini CLI 0.61.0 bills but never writes to the session file, so no reader of the file can count it
(found while writing these scenarios; kept out of them, documented in docs/tokens.md):
* an answer with no parts at all, or with thoughts only: Gemini CLI retries the request (with a nudge for
  thoughts-only answers) and records only the retry, while its own stats count both;
* its compression calls (summary and verification probe, role ``utility_compressor``).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.gemini_cli_harness import (
    CHAT_MODEL,
    GEMINI_CLI_VERSION,
    FakeGeminiAPI,
    Reply,
    Workspace,
    call,
    install_gemini_cli,
    make_workspace,
    run_gemini,
    text,
    usage,
)

RECORDED = Path(__file__).resolve().parent / "recorded" / f"gemini-cli-{GEMINI_CLI_VERSION}"
STATS_FILE = "gemini-stats.json"
TOKEN_FIELDS = ("prompt", "candidates", "cached", "thoughts", "tool", "total")


@dataclass(frozen=True)
class Run:
    """One ``gemini -p`` invocation and the chat replies it consumes, in order."""

    prompt: str
    replies: Callable[[Workspace], list[Reply]]


@dataclass(frozen=True)
class Scenario:
    name: str
    runs: list[Run]
    settings: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


def _snapshot_reply(body: dict[str, Any], model: str) -> Reply:
    """The compression summary (and the verification probe's answer) with usage of its own."""
    return text(
        "<state_snapshot>\n<overall_goal>Read the files.</overall_goal>\n</state_snapshot>", usage(700, 45)
    )


def _tools_and_resumes() -> Scenario:
    def first(ws: Workspace) -> list[Reply]:
        return [
            call(
                "read_file",
                {"file_path": str(ws.project / "notes.txt")},
                usage(9000, 14, cached=7000, thoughts=30, tool=5),
            ),
            call(
                "read_file",
                {"file_path": str(ws.project / "missing.txt")},
                usage(9200, 12, cached=8000, thoughts=20),
            ),
            text(
                "The notes say hello; missing.txt does not exist.", usage(9400, 16, cached=8000, thoughts=12)
            ),
        ]

    def second(ws: Workspace) -> list[Reply]:
        return [
            call(
                "run_shell_command",
                {"command": "echo built && ls", "description": "build"},
                usage(9700, 20, cached=9000),
            ),
            text("Built.", usage(9900, 3, cached=9000, thoughts=8)),
        ]

    def third(ws: Workspace) -> list[Reply]:
        # A tool call, then an answer with an empty text part: Gemini CLI records it with tokens, no model.
        return [
            call("read_file", {"file_path": str(ws.project / "notes.txt")}, usage(10100, 11, cached=9000)),
            Reply([{"text": ""}], usage(10300, 0, cached=9000)),
        ]

    return Scenario(
        "tools-and-resumes",
        [
            Run("read notes.txt and missing.txt", first),
            Run("now build it", second),
            Run("read the notes again", third),
        ],
        files={"notes.txt": "hello\n"},
    )


def _compressions() -> Scenario:
    def turn(k: int) -> Callable[[Workspace], list[Reply]]:
        def replies(ws: Workspace) -> list[Reply]:
            base = 20_000 * k
            return [
                call(
                    "read_file",
                    {"file_path": str(ws.project / f"f{2 * k}.txt")},
                    usage(base + 1000, 12, cached=800, thoughts=4),
                ),
                call(
                    "read_file",
                    {"file_path": str(ws.project / f"f{2 * k + 1}.txt")},
                    usage(base + 2000, 12, cached=900, tool=2),
                ),
                text(f"Read files {2 * k} and {2 * k + 1}.", usage(base + 3000, 9, cached=1000, thoughts=6)),
            ]

        return replies

    return Scenario(
        "compressions",
        [Run("read f0 and f1", turn(0)), Run("read f2 and f3", turn(1)), Run("read f4 and f5", turn(2))],
        # A tiny threshold makes Gemini CLI compress before every request where it can split the history.
        settings={"model": {"compressionThreshold": 0.0001}},
        files={f"f{i}.txt": f"file {i} " * 200 for i in range(6)},
    )


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "tools-and-resumes": _tools_and_resumes,
    "compressions": _compressions,
}


@dataclass(frozen=True)
class Played:
    workspace: Workspace
    stats: list[dict[str, Any]]  # each run's ``stats`` object, as Gemini CLI printed it
    compressions: int  # compression rounds: summary requests Gemini CLI sent

    def session_files(self) -> list[Path]:
        return self.workspace.session_files()


def play(binary: Path, scenario: Scenario, root: Path) -> Played:
    """Play ``scenario`` with the real Gemini CLI in a fresh workspace under ``root``."""
    workspace = make_workspace(root, scenario.settings)
    for name, content in scenario.files.items():
        (workspace.project / name).write_text(content)
    api = FakeGeminiAPI(utility=_snapshot_reply)
    stats: list[dict[str, Any]] = []
    with api.serving() as url:
        for index, run in enumerate(scenario.runs):
            api.chat.extend(run.replies(workspace))
            args = ["-m", CHAT_MODEL, "--approval-mode", "yolo"]
            if index:
                args += ["--resume", "latest"]
            done = run_gemini(binary, workspace, url, [*args, "-p", run.prompt, "--output-format", "json"])
            if done.returncode != 0:
                raise AssertionError(f"gemini exited {done.returncode}: {done.stderr[-2000:]}")
            stats.append(done.json()["stats"])
            if api.chat:
                raise AssertionError(f"run {index} left {len(api.chat)} scripted replies unused")
    summaries = [
        r
        for r in api.utility_requests()
        if "<state_snapshot>" in json.dumps(r.body.get("contents", [])[-1:])
        and "Critically evaluate" not in json.dumps(r.body.get("contents", [])[-1:])
    ]
    return Played(workspace, stats, len(summaries))


def role_totals(stats: list[dict[str, Any]], role: str) -> dict[str, int]:
    """Gemini CLI's own figures for ``role`` summed over runs and models: requests and token fields."""
    out = dict.fromkeys(("requests", *TOKEN_FIELDS), 0)
    for run in stats:
        for model in run["models"].values():
            found = model.get("roles", {}).get(role)
            if found is None:
                continue
            out["requests"] += found["totalRequests"]
            for key in TOKEN_FIELDS:
                out[key] += found["tokens"][key]
    return out


def write_recording(played: Played, target: Path) -> None:
    """Copy what Gemini CLI wrote and counted to ``target``: its session files and ``gemini-stats.json``."""
    if target.exists():
        shutil.rmtree(target)
    chats = target / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    for path in played.session_files():
        shutil.copy2(path, chats / path.name)
    (target / "tmp" / "proj" / ".project_root").write_text(str(played.workspace.project))
    document = {
        "gemini_cli": GEMINI_CLI_VERSION,
        "chat_model": CHAT_MODEL,
        "prompts": sum(1 for _ in played.stats),
        "compressions": played.compressions,
        "runs": played.stats,
    }
    (target / STATS_FILE).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else RECORDED
    binary = install_gemini_cli()
    for name, build in SCENARIOS.items():
        root = Path("/tmp") / "ctxtool-scenarios" / name
        shutil.rmtree(root, ignore_errors=True)
        played = play(binary, build(), root)
        write_recording(played, out / name)
        print(f"{name}: {len(played.stats)} runs, {played.compressions} compressions -> {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
