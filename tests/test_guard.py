"""ctxtool guard, archive and hooks (issue 29): the tally equals `ctxtool stats`, warm calls read only new
bytes, the verdicts, failing open, and settings.json edits that keep everything else."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxtool import frames
from ctxtool.audit import parse_limit as audit_limit
from ctxtool.cli import run
from ctxtool.hooks import guard, ledger, settings
from ctxtool.hooks.ledger import Spend, Tally
from tests.conftest import FIXTURES, write_jsonl

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "real-sessions"
MODEL = "gemini-2.5-pro"


def _same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (
        a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    )


def _assert_equals_stats(root: Path, cache: Path) -> None:
    corpus = frames.load([str(root)])
    rows = frames.report(corpus, "session").iter_rows(named=True)
    for row in rows:
        s = ledger.spend(row["file"], roots=[root], cache_dir=cache).session
        assert (s.requests, s.total) == (row["requests"], row["total"]), row["file"]
        assert _same(s.known_cost, row["cost"]), row["file"]
        assert _same(s.context_share, row["context_share"]), row["file"]
    for day in frames.report(corpus, "day").iter_rows(named=True):
        if day["day"] is None:
            continue
        at = datetime.fromisoformat(f"{day['day'].isoformat()}T12:00:00+00:00")
        assert _same(ledger.spend(None, roots=[root], cache_dir=cache, now=at).day_cost, day["cost"])


def test_the_tally_equals_stats_on_the_fixtures(tmp_path: Path) -> None:
    _assert_equals_stats(FIXTURES, tmp_path / "cache")


@pytest.mark.skipif(not REAL.exists(), reason="real sessions absent")
def test_the_tally_equals_stats_on_real_sessions(tmp_path: Path) -> None:
    _assert_equals_stats(REAL, tmp_path / "cache")


def _record(
    i: int, day: str = "2026-11-20", tokens: int = 1000, model: str | None = MODEL
) -> list[dict[str, Any]]:
    reply: dict[str, Any] = {
        "id": f"g{i}",
        "timestamp": f"{day}T10:00:{i:02d}.000Z",
        "type": "gemini",
        "content": "ok",
        "tokens": {
            "input": tokens,
            "output": 10,
            "cached": 0,
            "thoughts": 0,
            "tool": 0,
            "total": tokens + 10,
        },
    }
    if model:
        reply["model"] = model
    return [
        {"id": f"u{i}", "timestamp": f"{day}T10:00:{i:02d}.000Z", "type": "user", "content": f"q{i}"},
        reply,
    ]


def _home(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / ".gemini" / "tmp"
    meta = {"sessionId": "s1", "projectHash": "h", "startTime": "2026-11-20T10:00:00.000Z", "kind": "main"}
    session = write_jsonl(root / "p" / "chats" / "session-2026-11-20T10-00-s1.jsonl",
                          [meta, *_record(0, model=None), *_record(1)])  # fmt: skip
    return root, session


def test_a_warm_call_reads_only_what_was_appended(tmp_path: Path) -> None:
    root, session = _home(tmp_path)
    other = {"sessionId": "s2", "projectHash": "h", "startTime": "2026-11-20T09:00:00.000Z", "kind": "main"}
    write_jsonl(root / "q" / "chats" / "session-2026-11-20T09-00-s2.jsonl", [other, *_record(5, tokens=5000)])
    at = datetime(2026, 11, 20, 12, tzinfo=UTC)
    first = ledger.spend(session, cache_dir=tmp_path / "c", now=at)
    assert first.files_read == 2
    # The request without a model takes the model of the request after it (as stats prices it).
    assert (first.session.requests, first.session.total, first.session.unpriced) == (2, 2020, 0)
    again = ledger.spend(session, cache_dir=tmp_path / "c", now=at)
    assert (again.files_read, again.session.total) == (0, 2020)
    with session.open("ab") as fh:
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in _record(2)))
    grown = ledger.spend(session, cache_dir=tmp_path / "c", now=at)
    assert (grown.files_read, grown.files_resumed) == (1, 1)
    assert (grown.session.requests, grown.session.total) == (3, 3030)
    assert grown.today.days["2026-11-20"][1] == 4  # the other session's request counts for the day
    assert _same(grown.day_cost, grown.session.known_cost + ledger.spend(  # type: ignore[operator]
        root / "q" / "chats" / "session-2026-11-20T09-00-s2.jsonl", cache_dir=tmp_path / "c", now=at
    ).session.known_cost)  # fmt: skip


def _spend(total: int = 0, cost: float = 0.0, day_cost: float = 0.0, peak: int | None = None) -> Spend:
    session = Tally(requests=1, total=total, cost=cost, priced=1, peak_live=peak, limit=1_048_576)
    today = Tally(days={"2026-11-20": [day_cost, 1, 0]})
    return Spend(session=session, today=today, day="2026-11-20", session_file="x")


def test_verdicts_allow_warn_and_stop() -> None:
    opts = guard.parse_args(
        ["--max-session-cost", "2", "--max-daily-cost", "$20", "--fallback-model", "flash"]
    )
    assert guard.decide(_spend(cost=1.5, day_cost=15.9), opts) == {}
    warned = guard.decide(_spend(cost=1.7), opts, {"model": MODEL})
    assert warned["hookSpecificOutput"] == {"hookEventName": "BeforeModel", "llm_request": {"model": "flash"}}
    assert warned["systemMessage"] == (
        "ctxtool guard: session cost $1.70 of $2.00 (85%, --max-session-cost); this request uses flash "
        f"instead of {MODEL}"
    )
    stopped = guard.decide(_spend(cost=2.5), opts)
    assert stopped["continue"] is False
    assert stopped["stopReason"] == (
        "ctxtool guard: session cost is $2.50, at or past its budget of $2.00 (--max-session-cost). "
        "To go on, raise it: ctxtool hooks install --max-session-cost 4 --max-daily-cost 20 "
        "--fallback-model flash or start a new session."
    )
    daily = guard.decide(_spend(day_cost=21), opts)
    assert "today's cost (UTC, every session) is $21.00" in daily["stopReason"]
    assert daily["stopReason"].endswith("or wait for the next UTC day.")
    share = guard.parse_args(["--max-context-share", "50%", "--warn-at", "90%", "--scope", "project"])
    assert guard.decide(_spend(peak=400_000), share) == {}
    assert (
        "--scope project --max-context-share 75%" in guard.decide(_spend(peak=600_000), share)["stopReason"]
    )
    tokens = guard.parse_args(["--max-session-tokens", "2M"])
    assert guard.decide(_spend(total=1_700_000), tokens)["systemMessage"].endswith(
        "it stops the session at 100%"
    )


@pytest.mark.parametrize(
    ("flag", "metric", "text"),
    [("--max-session-tokens", "max-session-tokens", t) for t in ("2M", "500k", "2_000_000", "1,500")]
    + [("--max-session-cost", "max-session-cost", t) for t in ("5", "$2.50", "0")]
    + [("--max-context-share", "max-context-share", t) for t in ("50%", "0.5", "100%")],
)
def test_budgets_read_as_audit_reads_them(flag: str, metric: str, text: str) -> None:
    kind = {f: k for f, k, _ in guard.BUDGETS}[flag]
    assert guard.parse_limit(kind, flag, text) == audit_limit(metric, text)


def test_the_hot_path_takes_the_options_of_the_typer_command() -> None:
    import typer.main

    from ctxtool.cli import app, register

    register(["guard"])
    command = typer.main.get_command(app).commands["guard"]  # type: ignore[attr-defined]
    flags = {o for p in command.params for o in p.opts}
    assert flags - {"--help"} == {*guard.VALUE_OPTIONS, *guard.FLAG_OPTIONS}


def test_errors_fail_open_and_never_exit_2(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert guard.run(["--max-session-cost", "1"], io.StringIO("not json"), out, err) == 0
    assert out.getvalue() == ""
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().endswith("; the call was allowed (fail open)\n")
    out = io.StringIO()
    assert guard.run(["--max-session-cost", "x", "--fail-closed"], io.StringIO("{}"), out, io.StringIO()) == 0
    assert json.loads(out.getvalue())["continue"] is False
    # The whole program, as Gemini CLI runs it: a bad option still exits 0.
    done = subprocess.run([sys.executable, "-m", "ctxtool", "guard", "--bogus"], input="{}", text=True,
                          capture_output=True, cwd=REPO, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "")
    assert "unknown argument '--bogus'" in done.stderr


def test_the_guard_answers_a_hook_event(tmp_path: Path) -> None:
    _, session = _home(tmp_path)
    event = json.dumps(
        {"session_id": "s1", "transcript_path": str(session), "hook_event_name": "BeforeModel"}
    )
    done = subprocess.run(
        [sys.executable, "-m", "ctxtool", "guard", "--max-session-tokens", "2000",
         "--cache-dir", str(tmp_path / "c")],
        input=event, text=True, capture_output=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0
    assert json.loads(done.stdout)["stopReason"].startswith("ctxtool guard: session tokens is 2,020")


SETTINGS = """// my settings
{
    // the theme
    "theme": "dark", /* inline */
    "hooks": {
        "BeforeModel": [{"matcher": "*", "hooks": [{"name": "mine", "type": "command", "command": "a"}]}],
        "AfterModel": []
    }
}
"""


@pytest.mark.parametrize("original", [SETTINGS, '{"security":{"auth":{"selectedType":"x"}}}', "{}\n", None])
def test_install_and_uninstall_keep_everything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, original: str | None
) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    path = tmp_path / ".gemini" / "settings.json"
    if original is not None:
        path.parent.mkdir(parents=True)
        path.write_text(original)
    args = ["hooks", "install", "--max-session-cost", "5", "--archive", str(tmp_path / "h")]
    assert run(args) == 0
    installed = path.read_text()
    data = json.loads(
        "\n".join(x.split("/*")[0] for x in installed.splitlines() if not x.lstrip().startswith("//"))
    )
    names = [h["name"] for groups in data["hooks"].values() for g in groups for h in g["hooks"]]
    assert sorted(names) == sorted(["ctxtool-guard", "ctxtool-archive", "ctxtool-archive", *(
        ["mine"] if original == SETTINGS else [])])  # fmt: skip
    guard_command = next(h for h in settings.status(path) if h["event"] == "BeforeModel")["command"]
    assert guard_command.split()[1:] == ["guard", "--max-session-cost", "5"]
    if original == SETTINGS:
        assert installed.startswith(
            '// my settings\n{\n    // the theme\n    "theme": "dark", /* inline */\n'
        )
    assert run(args) == 0  # idempotent
    assert path.read_text() == installed
    assert run(["hooks", "status"]) == 0
    assert run(["hooks", "uninstall"]) == 0
    assert path.read_text() == (original if original is not None else "{}\n")
    assert (path.parent / "settings.json.ctxtool-backup").read_text() == installed


def test_a_settings_file_gemini_cli_cannot_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    path = tmp_path / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"theme": "dark",}')
    assert run(["hooks", "install", "--max-session-cost", "5"]) == 1
    assert path.read_text() == '{"theme": "dark",}'


def test_archive_adds_the_session_to_the_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, session = _home(tmp_path)
    event = json.dumps({"session_id": "s1", "transcript_path": str(session), "reason": "exit"})
    monkeypatch.setattr(sys, "stdin", io.StringIO(event))
    assert run(["archive", "--to", str(tmp_path / "history")]) == 0
    from ctxtool.export import load_dataset

    corpus = load_dataset(tmp_path / "history")
    assert corpus.sessions.get_column("session_id").to_list() == ["s1"]
    assert corpus.requests.height == 2
