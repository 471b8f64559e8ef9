"""With Gemini CLI installed, it lists a session ctxtool compacted as one it can resume (skipped otherwise).

The check runs Gemini CLI itself (`gemini --list-sessions`, which reads and parses every session file of
the project) against a temporary GEMINI_CLI_HOME; it makes no model call.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxtool.cli import run
from tests.conftest import FIXTURES, REAL_SESSIONS

GEMINI = shutil.which("gemini")


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
        record = fresh(json.loads(line)) if line.strip() else None
        if n == 0 and isinstance(record, dict):
            record["projectHash"] = hashlib.sha256(str(project_root).encode()).hexdigest()
        lines.append(json.dumps(record, separators=(",", ":")) if record is not None else "")
    session_id = json.loads(lines[0])["sessionId"]
    target = chats / f"session-{datetime.now(UTC):%Y-%m-%dT%H-%M}-{session_id[:8]}.jsonl"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


@pytest.mark.skipif(GEMINI is None, reason="Gemini CLI is not installed")
@pytest.mark.parametrize(
    ("fixture", "title", "era"),
    [
        ("session-2026-05-25T09-30-c4e5f6a7.jsonl", "Refactor the storage layer to use SQLite", None),
        ("session-2026-02-10T09-00-c0ffee01.json", "파서 off-by-one 버그와 툴바 UI 수정", None),
        ("session-2026-02-10T09-00-c0ffee01.json", "파서 off-by-one 버그와 툴바 UI 수정", "jsonl"),
    ],
)
def test_gemini_cli_lists_the_compacted_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture: str, title: str, era: str | None
) -> None:
    assert GEMINI is not None
    home, project, chats = gemini_project(tmp_path)
    src = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / fixture
    original = recent_copy(src, project, chats)
    extra = ["--era", era] if era else []
    assert run(["compact", str(original), "--force", "--as-new-session", "-f", "json", *extra]) == 0
    report = json.loads(capsys.readouterr().out)["sessions"][0]
    assert report["status"] == "COMPRESSED"
    assert Path(report["output_path"]).suffix == f".{era or original.suffix[1:]}"
    env = {**os.environ, "GEMINI_CLI_HOME": str(home), "GEMINI_API_KEY": "not-used-for-listing"}
    proc = subprocess.run(
        [GEMINI, "--list-sessions"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    listing = proc.stdout + proc.stderr
    assert "Available sessions for this project (2)" in listing, listing
    assert report["session_id"] in listing
    # Listed under the original's title (its summary, else its first prompt), marked as a compacted copy.
    assert f"{title} (compacted by ctxtool)" in listing


def gemini_project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(GEMINI_CLI_HOME, project folder, its chats/ folder) for a project Gemini CLI knows."""
    home, project = tmp_path / "home", tmp_path / "proj"
    project.mkdir()
    chats = home / ".gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    (home / ".gemini" / "tmp" / "proj" / ".project_root").write_text(str(project))
    (home / ".gemini" / "projects.json").write_text(json.dumps({"projects": {str(project): "proj"}}))
    return home, project, chats


@pytest.mark.skipif(GEMINI is None, reason="Gemini CLI is not installed")
@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="../shared/real-sessions is not here")
def test_gemini_cli_lists_every_strategy_output_of_the_real_sessions(tmp_path: Path) -> None:
    """Every session written by every strategy from the real (main) sessions is one Gemini CLI lists."""
    assert GEMINI is not None
    home, project, chats = gemini_project(tmp_path)
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

    env = {**os.environ, "GEMINI_CLI_HOME": str(home), "GEMINI_API_KEY": "not-used-for-listing"}
    proc = subprocess.run(
        [GEMINI, "--list-sessions"], cwd=project, env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    listed = set(re.findall(r"\[([^\]\s]+)\]\s*$", proc.stdout + proc.stderr, re.M))
    # Gemini CLI's session cleanup (on by default) deletes files it cannot list while listing: sessions
    # with nothing to resume (the a2a server's header-only files, a lone warning) and top-level subagent
    # sessions. ctxtool writes neither: such a session is a NOOP, and subagents are not copied here.
    for path in written:
        assert path.exists(), f"Gemini CLI's cleanup removed {path.name}"
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text.splitlines()[0] if path.suffix == ".jsonl" else text)
        assert doc["sessionId"] in listed, f"{path.name} is not listed by Gemini CLI"
