"""Conventions every command shares: the bare overview and the exit status of a PATH that names nothing."""

from __future__ import annotations

import io
import json
import re
import shutil
from datetime import date
from pathlib import Path

import pytest

from ctxtool.cli import run
from tests.conftest import FIXTURES


def test_bare_ctxtool_prints_an_overview_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(FIXTURES / "gemini", tmp_path / ".gemini")
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    assert run([]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    # The bundled data root holds 16 session files (subagents and a .json/.jsonl pair included), 3 projects.
    assert f"Looks in {tmp_path / '.gemini' / 'tmp'}:\n  16 session files in 3 project folders.\n" in out
    assert "Their sessions made 33 requests in 3 projects (ctxtool stats --by project)." in out
    assert "ctxtool stats" in out
    assert "ctxtool audit" in out
    assert "Exit status: 0 ok;" in out
    assert max(len(line) for line in out.splitlines() if not line.startswith("Looks in")) <= 80


@pytest.mark.parametrize("columns", [40, 60, 120])
def test_the_overview_wraps_to_the_terminal(
    columns: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bare ``ctxtool`` on a narrow terminal: every line within its width (a description goes on under its
    command, an option is never broken at its hyphens); on a wide one, lines of at most 80 columns."""
    shutil.copytree(FIXTURES / "gemini", tmp_path / ".gemini")
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", str(columns))
    assert run([]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("Looks in")]
    assert max(len(line) for line in lines) <= min(columns, 80)
    assert any("(--max-session-tokens 2M)" in line for line in lines)
    assert any(line.startswith("  ctxtool stats") for line in lines)


def test_the_overview_counts_the_projects_stats_by_project_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A project folder whose only session made no request (the a2a server writes header-only files) is a
    folder the overview finds, but no row of ``stats --by project``: the overview says both, and its
    projects and requests are the rows and requests of ``stats --by project``."""
    import json

    shutil.copytree(FIXTURES / "gemini", tmp_path / ".gemini")
    idle = tmp_path / ".gemini" / "tmp" / "idle-box" / "chats" / "session-2026-07-24T10-00-a2a-serv.jsonl"
    idle.parent.mkdir(parents=True)
    idle.write_text('{"sessionId":"a2a-server","projectHash":"x","startTime":"2026-07-24T10:00:00.000Z"}\n')
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    assert run(["stats", "--by", "project", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    requests = sum(int(r["requests"]) for r in rows)
    assert run([]) == 0
    out = capsys.readouterr().out
    assert "  17 session files in 4 project folders.\n" in out
    assert (
        f"Their sessions made {requests} requests in {len(rows)} projects (ctxtool stats --by project)."
        in out
    )
    assert len(rows) == 3


def test_bare_ctxtool_without_sessions_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    assert run([]) == 0
    assert f"Looks in {tmp_path / '.gemini' / 'tmp'}:\n  not there yet" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_an_explicit_path_that_matches_nothing_is_an_error(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["stats", str(tmp_path / "nope"), "--format", fmt, "--no-cache"]) == 1
    assert "Error: " in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert run(["stats", str(tmp_path / "empty"), "--format", fmt, "--no-cache"]) == 1
    assert "Error: no session in" in capsys.readouterr().err
    # The rest of a batch is still reported, and the exit status still says one PATH was wrong.
    assert (
        run(["stats", str(FIXTURES / "gemini"), str(tmp_path / "nope"), "--format", fmt, "--no-cache"]) == 1
    )
    out, err = capsys.readouterr()
    assert "c4e5f6a7" in out
    assert f"Error: {tmp_path / 'nope'}: matches no session file" in err


@pytest.mark.parametrize(
    "command",
    [
        ["stats", "--format", "json", "--no-cache"],
        ["audit", "--max-session-tokens", "2M", "--no-config"],
        ["report", "--no-cache", "--output", "report.html"],
    ],
)
@pytest.mark.parametrize("wrong", ["nope", "empty"])
def test_a_path_that_matched_no_session_beside_good_ones_exits_1(
    command: list[str],
    wrong: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every command that reads PATHs: one that matches no file, or a folder holding no session file, is an
    error (exit 1) and is named on stderr, though the other PATHs are still reported."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    assert run([command[0], str(FIXTURES / "gemini"), str(tmp_path / wrong), *command[1:]]) == 1
    err = capsys.readouterr().err
    assert str(tmp_path / wrong) in err
    assert "could not be read" not in err
    if command[0] == "report":
        assert (tmp_path / "report.html").exists()


def test_exit_statuses_are_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 ok; 1 an error" in out
    assert "3 a budget exceeded (audit)" in out


@pytest.mark.parametrize(
    ("choice", "tty", "env", "expected"),
    [
        ("auto", True, {}, True),
        ("auto", False, {}, False),
        ("auto", True, {"NO_COLOR": "1"}, False),
        ("auto", False, {"FORCE_COLOR": "1"}, True),
        ("auto", True, {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
        ("auto", True, {"FORCE_COLOR": "0"}, True),
        ("auto", False, {"FORCE_COLOR": "0"}, False),
        ("auto", True, {"TERM": "dumb"}, False),
        ("auto", False, {"TERM": "dumb", "FORCE_COLOR": "1"}, True),
        ("always", False, {"NO_COLOR": "1", "TERM": "dumb"}, True),
        ("never", True, {"FORCE_COLOR": "1"}, False),
    ],
)
def test_colour_follows_the_conventions(choice: str, tty: bool, env: dict[str, str], expected: bool) -> None:
    from ctxtool.render.tables import wants_color

    assert wants_color(choice, tty=tty, env=env) is expected


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("env", "color", "coloured"),
    [
        ({"NO_COLOR": "1"}, "auto", False),  # NO_COLOR on a terminal (ignored before issue 14)
        ({}, "auto", True),
        ({"TERM": "dumb"}, "auto", False),
        ({"TERM": "dumb"}, "always", True),
        ({}, "never", False),
    ],
)
def test_a_terminal_gets_colour_unless_the_environment_says_no(
    env: dict[str, str], color: str, coloured: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxtool.render import tables as render

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stream = _Terminal()
    console = render.make_console(stream, width=80, color=color)
    console.print("x", style="red")
    assert ("\x1b[" in stream.getvalue()) is coloured


@pytest.mark.parametrize(
    ("command", "name", "check"),
    [
        (["stats", str(FIXTURES / "gemini")], "x.csv", lambda b: b.startswith(b"session,session_id,")),
        (["stats", str(FIXTURES / "gemini")], "x.json", lambda b: b.startswith(b'{\n  "schema_version"')),
        (["stats", str(FIXTURES / "gemini")], "x.jsonl", lambda b: b.count(b"\n") == 14),
        (["stats", str(FIXTURES / "gemini")], "x.parquet", lambda b: b.startswith(b"PAR1")),
        (["stats", str(FIXTURES / "gemini")], "x.txt", lambda b: b.startswith(b"ctxtool stats --by session")),
        (
            ["audit", str(FIXTURES / "gemini"), "--no-config", "--max-session-tokens", "1M"],
            "r.xml",
            lambda b: b.startswith(b"<?xml"),
        ),
        (
            ["audit", str(FIXTURES / "gemini"), "--no-config", "--max-session-tokens", "1M"],
            "r.md",
            lambda b: b.startswith(b"#"),
        ),
    ],
)
def test_output_writes_the_format_its_suffix_names(
    command: list[str], name: str, check: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / name
    assert run([*command, "--output", str(target)]) == 0
    data = target.read_bytes()
    assert callable(check)
    assert check(data), data[:80]
    assert b"\xe2\x94\x83" not in data or name == "x.txt"  # no box drawing (┃) in a machine format


def test_a_format_that_contradicts_the_output_suffix_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(FIXTURES / "gemini")
    assert run(["stats", root, "--output", str(tmp_path / "x.csv"), "--format", "json"]) == 2
    assert "--format json contradicts --output" in capsys.readouterr().err
    assert run(["stats", root, "--output", str(tmp_path / "x.md")]) == 2
    assert "names markdown, which this command does not write" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    # Agreeing is fine.
    assert run(["stats", root, "--output", str(tmp_path / "x.csv"), "--format", "csv"]) == 0


@pytest.mark.parametrize("command", ["stats", "audit", "diff"])
def test_a_spreadsheet_suffix_is_a_usage_error_not_a_text_table(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o x.xlsx` used to write a box-drawn table into x.xlsx and exit 0."""
    one = str(next((FIXTURES / "gemini").rglob("session-*.jsonl")))
    paths = [one, one] if command == "diff" else [str(FIXTURES / "gemini")]
    if command == "audit":
        paths += ["--no-config", "--max-session-tokens", "2M"]
    assert run([command, *paths, "-o", str(tmp_path / "x.xlsx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"Error: --output {tmp_path / 'x.xlsx'} names xlsx, which this command does not write"
    )
    assert len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())
    # A text suffix still gets the table.
    assert run([command, *paths, "-o", str(tmp_path / "x.txt")]) in (0, 3)
    assert (tmp_path / "x.txt").read_text().strip()


def test_limit_keeps_the_totals_of_everything_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    root = str(FIXTURES / "gemini")
    assert run(["stats", root, "--no-cache", "--width", "120"]) == 0
    whole = capsys.readouterr().out
    assert (
        run(["stats", root, "--no-cache", "--width", "120", "--sort", "total", "--desc", "--limit", "3"]) == 0
    )
    top = capsys.readouterr().out
    assert "ctxtool stats --by session: top 3 of 14 rows (totals of all 14)" in top

    def total_cells(text: str) -> list[str]:
        line = next(line for line in text.splitlines() if line.startswith("│ total"))
        return [c.strip() for c in line.split("│")]

    assert total_cells(top) == total_cells(whole)  # the same totals, cell by cell
    assert run(["stats", root, "--no-cache", "--limit", "3", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 3
    assert doc["rows_total"] == 14


def test_by_week_and_month_in_a_time_zone(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    root = str(FIXTURES / "gemini")

    def rows(*args: str) -> list[dict[str, object]]:
        assert run(["stats", root, "--no-cache", "--format", "json", *args]) == 0
        return list(json.loads(capsys.readouterr().out)["rows"])

    weeks = rows("--by", "week")
    # 2025-09-12 (a Friday, the first fixture) falls in the week of Monday 2025-09-08.
    assert weeks[0]["week"] == "2025-09-08"
    assert all(date.fromisoformat(str(w["week"])).weekday() == 0 for w in weeks)  # every key a Monday
    months = rows("--by", "month")
    assert [m["month"] for m in months][:3] == ["2025-09", "2026-02", "2026-03"]
    assert sum(int(m["requests"]) for m in months) == sum(int(w["requests"]) for w in weeks) == 33
    # 2026-03-02 14:20 UTC is already 2026-03-03 at UTC+14.
    utc_days = [d["day"] for d in rows("--by", "day")]
    kiritimati = [d["day"] for d in rows("--by", "day", "--timezone", "Pacific/Kiritimati")]
    assert "2026-03-02" in utc_days
    assert "2026-03-02" not in kiritimati
    assert "2026-03-03" in kiritimati
    assert run(["stats", root, "--timezone", "Mars/Olympus"]) == 2
    assert "is not a time zone" in capsys.readouterr().err


def test_session_is_an_id_or_a_unique_prefix_never_a_substring(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    root = str(FIXTURES / "gemini")

    def sessions(*ids: str) -> list[str]:
        args = [a for i in ids for a in ("--session", i)]
        assert run(["stats", root, "--no-cache", "--by", "session", "--format", "json", *args]) == 0
        return [str(r["session"]) for r in json.loads(capsys.readouterr().out)["rows"]]

    assert sessions("c4e5f6a7") == ["session-2026-05-25T09-30-c4e5f6a7"]  # the short id
    assert sessions("c4e") == ["session-2026-05-25T09-30-c4e5f6a7"]
    assert sessions("c4e5f6a7-b8c9-4dae-8f01-23456789abcd") == ["session-2026-05-25T09-30-c4e5f6a7"]
    assert sessions("session-2026-02-10T09-00-c0ffee01") == ["session-2026-02-10T09-00-c0ffee01"]
    # The a2a server's constant id names both its sessions; that is not ambiguous, it is their id.
    assert len(sessions("a2a-server")) == 2
    # "f6a7" is inside c4e5f6a7 but starts no id: not a match (it used to be, as a substring).
    assert sessions("f6a7") == []
    assert sessions("2026-05") == []
    assert run(["stats", root, "--no-cache", "--session", "c"]) == 2
    err = capsys.readouterr().err
    assert "--session c is ambiguous: 2 sessions have an id starting with it:" in err
    assert "c0ffee01-2a3b-4c5d-8e9f-0a1b2c3d4e5f (session-2026-02-10T09-00-c0ffee01)" in err
    assert "(session-2026-05-25T09-30-c4e5f6a7)" in err


def test_a_prefix_of_an_id_several_files_share_lists_the_files_and_how_to_pick_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The a2a server gives every session the id ``a2a-server``: more characters cannot tell them apart, so
    ``--session a2a`` lists them by file, with start and project, and says how to name one."""
    import json

    root = FIXTURES / "gemini"
    chats = root / "tmp" / "ops-box" / "chats"
    files = [
        chats / "session-2026-07-22T01-38-a2a-serv.jsonl",
        chats / "session-2026-07-23T09-12-a2a-serv.jsonl",
    ]
    for command in (
        ["stats", str(root), "--no-cache"],
        ["audit", str(root), "--no-config", "--max-session-tokens", "1M"],
    ):
        assert run([*command, "--session", "a2a"]) == 2
        err = capsys.readouterr().err
        first, *candidates = err.splitlines()
        assert "--session a2a matches 2 sessions that all have the id a2a-server" in first
        assert "Give more characters" not in err
        assert "Name one by its file: --session with its path or file name" in first
        assert "--session a2a-server takes all 2" in first
        assert candidates == [
            f"  {files[0]}  (started 2026-07-22 01:38 UTC, project ops-box)",
            f"  {files[1]}  (started 2026-07-23 09:12 UTC, project ops-box)",
        ]

    def picked(wanted: str) -> list[str]:
        assert (
            run(["stats", str(root), "--no-cache", "--by", "session", "--format", "json", "-s", wanted]) == 0
        )
        return [str(r["file"]) for r in json.loads(capsys.readouterr().out)["rows"]]

    # The advice works: the path or the file name names one session.
    assert picked(str(files[1])) == [str(files[1])]
    assert picked(files[0].name) == [str(files[0])]


def test_audit_lists_failures_and_a_summary_and_all_lists_passes(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["audit", str(FIXTURES / "gemini"), "--no-config", "--max-session-tokens", "40k"]
    assert run(args) == 3
    out = capsys.readouterr().out
    assert "PASS " not in out
    assert out.count("│ FAIL ") == 2
    assert "FAIL: 2 budgets exceeded; 12 of 14 checks passed (--all lists them)." in " ".join(out.split())
    assert run([*args, "--all"]) == 3
    out = capsys.readouterr().out
    assert out.count("│ PASS ") == 12
    assert out.count("│ FAIL ") == 2
    assert run(["audit", str(FIXTURES / "gemini"), "--no-config", "--max-session-tokens", "1M"]) == 0
    assert capsys.readouterr().out.strip() == (
        "PASS: within budget (14 checks passed or skipped); --all lists the checks."
    )


@pytest.mark.parametrize("command", ["stats", "compact", "compare", "diff", "audit", "export", "report"])
def test_every_command_help_has_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([command, "--help"]) == 0
    out = capsys.readouterr().out
    examples = out.split("Examples:", 1)[1].split("Exit status", 1)[0]
    lines = [line.strip() for line in examples.splitlines() if line.strip()]
    assert 2 <= len(lines) <= 3
    assert all(line.startswith(("ctxtool ", "duckdb ")) for line in lines)


def test_shell_completion_is_enabled(capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--install-completion" in out
    assert "--show-completion" in out
    env = {
        "_CTXTOOL_COMPLETE": "complete_bash",
        "COMP_WORDS": "ctxtool stats --ti",
        "COMP_CWORD": "2",
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
    }
    script = "from ctxtool.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["--timezone"]


def test_json_has_totals_and_integers_as_integers(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    root = str(FIXTURES / "gemini")
    assert run(["stats", root, "--no-cache", "--by", "model", "--format", "json", "--limit", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["requests"] == 33  # of every row, not only the one --limit shows
    assert doc["totals"]["total"] == 478448
    assert doc["totals"]["sessions"] == 14
    assert doc["rows_total"] == 4
    args = ["audit", root, "--no-config", "--max-session-tokens", "40k", "--max-compressions", "3"]
    assert run([*args, "--format", "json"]) == 3
    audit = json.loads(capsys.readouterr().out)
    tokens = [c for c in audit["checks"] if c["rule"] == "max-session-tokens"]
    assert all(type(c["value"]) is int and type(c["limit"]) is int for c in tokens)
    assert type(audit["summary"]["max-compressions"]) is int
    assert type(audit["summary"]["max-context-share"]) is float
    assert all(type(r["limit"]) is int for r in audit["rules"])
    assert all(type(s["metrics"]["max-turn-tokens"]) is int for s in audit["sessions"])


@pytest.mark.parametrize(
    ("tty", "ci", "expected"),
    [
        (True, None, True),
        (True, "true", False),
        (True, "1", False),
        (False, None, False),
        (True, "false", True),
    ],
)
def test_progress_only_on_a_terminal_and_not_under_ci(
    tty: bool, ci: str | None, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from ctxtool.cli.options import progress_wanted

    monkeypatch.setattr(sys, "stderr", _Terminal() if tty else io.StringIO())
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert progress_wanted() is expected


# --------------------------------------------------------------------------------------------------
# Help: every command and subcommand, at COLUMNS=80


def _command_paths() -> list[tuple[str, ...]]:
    """Every command and subcommand path (``("hooks", "install")``), walked from the click tree."""
    import typer.main

    from ctxtool.cli import app, register

    register()
    found: list[tuple[str, ...]] = []

    def walk(command: object, path: tuple[str, ...]) -> None:
        found.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def _help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    assert run([*path, "--help"]) == 0, path
    return capsys.readouterr().out


def test_the_walk_reaches_subcommands() -> None:
    paths = _command_paths()
    assert ("hooks", "install") in paths
    assert ("cache", "clear") in paths
    assert ("compact",) in paths


def test_every_help_fits_80_columns_and_60_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for path in _command_paths():
        out = _help(path, capsys)
        name = " ".join(("ctxtool", *path))
        wide = [line for line in out.splitlines() if len(line) > 80]
        assert not wide, f"{name} --help: {wide}"
        assert len(out.splitlines()) <= 60, f"{name} --help: {len(out.splitlines())} lines"


def test_help_names_no_file_outside_the_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ctxtool is installed without the repository's shared/ folder and its specs."""
    monkeypatch.setenv("COLUMNS", "80")
    for path in _command_paths():
        out = _help(path, capsys)
        for word in ("shared/", "spec/", "other-strategies"):
            assert word not in out, f"ctxtool {' '.join(path)} --help names {word}"


def test_usage_lines_show_readable_metavars(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    usages = {path: _help(path, capsys).splitlines()[0] for path in _command_paths()}
    for usage in usages.values():
        assert "{" not in usage, usage
    assert usages[("compact",)] == "Usage: ctxtool compact [OPTIONS] SESSION..."
    assert usages[("stats",)] == "Usage: ctxtool stats [OPTIONS] [PATH]..."
    assert usages[("diff",)] == "Usage: ctxtool diff [OPTIONS] BEFORE AFTER"


def test_one_meaning_per_short_flag() -> None:
    """A short flag names the same option in every command that has it (-o is --output everywhere)."""
    import typer.main

    from ctxtool.cli import app, register

    register()
    meanings: dict[str, dict[str, set[str]]] = {}  # short flag -> command -> that option's long names

    def walk(command: object, name: str) -> None:
        for param in getattr(command, "params", []):
            if param.param_type_name != "option":
                continue
            longs = {o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")}
            for short in (o for o in param.opts if not o.startswith("--")):
                assert short not in meanings.get(short, {}).get(name, set()), f"{name}: {short} twice"
                meanings.setdefault(short, {})[name] = longs
        for sub_name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{name} {sub_name}")

    walk(typer.main.get_command(app), "ctxtool")
    for short, by_command in meanings.items():
        common = set.intersection(*by_command.values())
        assert common, f"{short} means different options: {by_command}"
    assert {next(iter(longs)) for longs in meanings["-n"].values()} == {"--limit"}
    assert all("--output" in longs for longs in meanings["-o"].values())
    assert "--dry-run" not in str(meanings.get("-n"))


# --output names what a command writes: a file, except where it writes a folder of them.
_OUTPUT_FOLDERS = {"ctxtool compact": "DIR|FILE", "ctxtool export": "DIR|URL"}


def test_one_metavar_per_option() -> None:
    """Every option that takes a value and every argument names it in capitals, as the README does
    (``--format FORMAT``, ``--output FILE``, ``PATH...``), never typer's ``<path>`` or ``<int range>``; and an
    option several commands share names its value the same in each (``--top N``, ``--cache-dir DIR``)."""
    import typer.main

    from ctxtool.cli import app, register

    register()
    metavars: dict[str, dict[str, str]] = {}  # long flag -> command -> metavar
    offenders = []

    def walk(command: object, name: str) -> None:
        for param in getattr(command, "params", []):
            if param.param_type_name == "option" and (param.is_flag or param.count or param.hidden):
                continue
            shown = param.metavar or ""
            if not shown or shown[0] in "<[" or not shown.split("|")[0][:1].isalpha():
                offenders.append(f"{name} {param.opts[0]}: {shown or 'typer default'}")
            elif param.param_type_name == "argument" and not shown.isupper():
                offenders.append(f"{name} {param.name}: {shown}")
            if param.param_type_name == "option":
                for flag in (o for o in param.opts if o.startswith("--")):
                    metavars.setdefault(flag, {})[name] = shown
        for sub_name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{name} {sub_name}")

    walk(typer.main.get_command(app), "ctxtool")
    assert offenders == []
    for flag, by_command in metavars.items():
        if flag == "--output":
            by_command = {c: m for c, m in by_command.items() if _OUTPUT_FOLDERS.get(c) != m}
        assert len(set(by_command.values())) <= 1, f"{flag}: {by_command}"


@pytest.mark.parametrize(
    ("args", "status"),
    [
        ([], 0),  # the bare overview
        (["stats", "--no-cache"], 0),
        (["stats", "--no-cache", "--format", "json"], 0),
        (["audit", "--no-config", "--max-session-tokens", "1"], 3),
        (["compact", "--dry-run", "--list-profiles"], 0),
        (["--help"], 0),
    ],
)
@pytest.mark.parametrize("stream", ["stdout", "both"])
def test_a_reader_that_stops_early_ends_the_run_quietly_with_its_status(
    args: list[str], status: int, stream: str, tmp_path: Path
) -> None:
    """``ctxtool … | head -1``: the console script, writing into a pipe whose reader has gone (closed before
    the run starts, so every write meets it however large the pipe's buffer), prints no traceback and ends
    with the status it would have ended with (``audit`` over budget: 3), not typer's silent 1."""
    import os
    import subprocess
    import sys

    shutil.copytree(FIXTURES / "gemini", tmp_path / ".gemini")
    env = {**os.environ, "GEMINI_CLI_HOME": str(tmp_path), "CTXTOOL_CACHE_DIR": str(tmp_path / "cache")}
    read_end, write_end = os.pipe()
    os.close(read_end)
    errors = tmp_path / "stderr"
    with errors.open("wb") as err:
        done = subprocess.run(
            [sys.executable, "-m", "ctxtool", *args],
            stdout=write_end,
            stderr=write_end if stream == "both" else err,
            env=env,
            check=False,
            timeout=120,
        )
    os.close(write_end)
    # only the fixtures' own warning (a broken line), whatever the stream: no traceback, no error
    assert all(line.startswith("warning: ") for line in errors.read_text().splitlines())
    assert done.returncode == status


@pytest.mark.parametrize(
    "command",
    [
        ["stats", "--format", "json"],
        ["audit", "--no-config", "--max-session-tokens", "2M"],
        ["export", "--to", "dataset"],
        ["report", "--output", "report.html"],
    ],
)
def test_every_command_that_reads_through_the_index_takes_no_cache_and_cache_dir(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--cache-dir DIR`` puts the index in DIR and ``--no-cache`` reads every file again without it, on
    every command that reads sessions through the index, as ``stats`` documents them."""
    monkeypatch.chdir(tmp_path)
    root = str(FIXTURES / "gemini")
    assert run([command[0], root, *command[1:], "--cache-dir", str(tmp_path / "index")]) == 0
    assert any(p.is_file() for p in (tmp_path / "index").rglob("*"))
    assert run([command[0], root, *command[1:], "--no-cache", "--cache-dir", str(tmp_path / "none")]) == 0
    assert not (tmp_path / "none").exists()
    capsys.readouterr()


_SESSION = str(FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl")


_WRITERS = [
    ["stats", "--output", "{out}.csv"],
    ["stats", "--output", "{out}.txt"],
    ["audit", "--no-config", "--max-session-tokens", "2M", "--output", "{out}.xml"],
    ["diff", _SESSION, "--output", "{out}.md"],
    ["report", "--output", "{out}.html"],
    ["export", "--to", "{out}"],
    ["compact", "--force", "--output", "{out}.jsonl"],
    ["compare", "--chart", "{out}.png"],
]


@pytest.mark.parametrize(
    ("command", "where"),
    [(c, "under a file") for c in _WRITERS]
    # a folder is what export --to and compact --output DIR write into
    + [(c, "a folder") for c in _WRITERS if c[0] not in ("export", "compact")],
)
def test_an_output_that_cannot_be_written_is_one_line_naming_it(
    command: list[str], where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output`` (or ``--to``) naming a folder where a file is written, or a path under a file: exit 1 and
    one line naming the path asked for and the fix, never "unexpected IsADirectoryError" nor the name of a
    temporary file beside it."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = str(tmp_path / "out" if where == "a folder" else blocker / "out")
    args = [a.replace("{out}", out) for a in command]
    target = next(a for a in args if a.startswith(out))
    if where == "a folder":
        Path(target).mkdir()
    code = run([args[0], _SESSION, *args[1:]])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning: ")]
    assert code == 1
    assert len(err) == 1, err
    assert err[0].startswith(f"Error: {target}: cannot be written (")
    fix = "Name a file, not a folder" if where == "a folder" else f"{blocker} is a file, not a folder"
    assert fix in err[0]


def test_settings_that_cannot_be_written_are_an_output_error(tmp_path: Path) -> None:
    """``hooks install`` where Gemini CLI's settings folder cannot be made: a CtxtoolError naming the file
    (one line at the CLI's boundary), not an OSError the boundary calls unexpected."""
    from ctxtool.common.errors import OutputError
    from ctxtool.hooks import settings

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match=f"{blocker} is a file, not a folder"):
        settings.install(blocker / ".gemini" / "settings.json", settings.hooks_for([], None, ["ctxtool"]))


_CHATS = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats"
# The commands whose --output FILE holds what standard output would have, with the same budgets and files
# each time (--no-cache: a second run would otherwise say it was served from the index).
_SAYS_WRITTEN = {
    "stats": ["stats", str(FIXTURES / "gemini"), "--by", "session", "--no-cache"],
    "stats-top": ["stats", str(FIXTURES / "gemini"), "--top", "2", "--no-cache"],
    "audit": ["audit", str(FIXTURES / "gemini"), "--no-config", "--max-session-tokens", "40k", "--no-cache"],
    "diff": [
        "diff",
        str(_CHATS / "session-2026-03-20T11-00-abcd1234.json"),
        str(_CHATS / "session-2026-03-20T11-00-abcd1234.jsonl"),
    ],
}


@pytest.mark.parametrize("fmt", ["json", "table"])
@pytest.mark.parametrize("command", list(_SAYS_WRITTEN))
def test_output_says_where_it_wrote_on_stderr_as_report_does(
    command: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output FILE`` writes to FILE what standard output would have held, byte for byte, leaves standard
    output empty and says one line more on standard error, in ``report``'s words, naming the file; without
    ``--output`` nothing of the kind is said (standard output holds the JSON alone)."""
    args = [*_SAYS_WRITTEN[command], "--format", fmt]
    code = run(args)
    stdout, stderr = capsys.readouterr()
    assert "written to" not in stderr
    if fmt == "json":
        json.loads(stdout)
    target = tmp_path / ("out.json" if fmt == "json" else "out.txt")
    assert run([*args, "--output", str(target)]) == code
    out, err = capsys.readouterr()
    assert out == ""
    assert err == stderr + f"report written to {target}\n"
    assert target.read_text(encoding="utf-8") == stdout


def test_audit_github_annotations_keep_stdout_when_the_report_goes_to_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``audit --github --output FILE``: standard output holds GitHub's workflow commands alone; where the
    report went is said on standard error."""
    target = tmp_path / "audit.json"
    args = _SAYS_WRITTEN["audit"]
    assert run([*args, "--github", "--output", str(target)]) == 3
    out, err = capsys.readouterr()
    assert out
    assert all(line.startswith("::") for line in out.splitlines()), out
    assert err.splitlines()[-1] == f"report written to {target}"
    assert json.loads(target.read_text(encoding="utf-8"))["command"] == "audit"


def test_an_empty_stats_table_writes_no_file_and_says_none_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A filter that leaves nothing: one line says so, no file is written, so none is said to be."""
    target = tmp_path / "out.txt"
    assert run([*_SAYS_WRITTEN["stats"], "--since", "2099-01-01", "--output", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "Nothing to report." in err
    assert "written to" not in err
    assert not target.exists()


def _without_times(fmt: str, text: str) -> object:
    """``compare``'s output less the time each strategy took (which differs from run to run)."""
    if fmt == "json":
        doc = json.loads(text)
        for row in doc["rows"]:
            row.pop("seconds")
        return doc
    if fmt == "csv":
        import csv

        rows = list(csv.DictReader(io.StringIO(text)))
        for row in rows:
            row.pop("seconds")
        return rows
    return re.sub(r"\b\d+\.\d\ds\b", "0.00s", text)


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_compare_output_says_where_it_wrote_on_stderr_as_report_does(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``compare --output FILE`` writes to FILE what standard output would have held (the table too, which it
    used to print to standard output instead), leaves standard output empty and says where on standard
    error, in ``report``'s words; without ``--output`` nothing of the kind is said."""
    args = ["compare", str(_CHATS / "session-2026-03-20T11-00-abcd1234.json"), "--format", fmt]
    code = run(args)
    stdout, stderr = capsys.readouterr()
    assert stdout
    assert "written to" not in stderr
    target = tmp_path / f"out.{'txt' if fmt == 'table' else fmt}"
    assert run([*args, "--output", str(target)]) == code
    out, err = capsys.readouterr()
    assert out == ""
    assert err == stderr + f"report written to {target}\n"
    assert _without_times(fmt, target.read_text(encoding="utf-8")) == _without_times(fmt, stdout)
