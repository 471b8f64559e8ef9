"""`ctxtool audit` as a CI job runs it: exit statuses, report formats, config files and baselines."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import orjson
import pytest

from ctxtool.cli import run
from ctxtool.common.markup import escape_markdown
from tests.conftest import FIXTURES, write_jsonl

CHATS = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats"
ONE = CHATS / "session-2026-05-25T09-30-c4e5f6a7.jsonl"  # 302,100 tokens, peak request prompt 120,000


def audit(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, str, str]:
    code = run(["audit", *args])
    captured = capsysbinary.readouterr()
    return code, captured.out.decode(), captured.err.decode()


def test_within_budget_exits_0(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = audit(capsysbinary, str(ONE), "--max-session-tokens", "1M", "--width", "100")
    assert code == 0
    assert "PASS: within budget (1 check passed or skipped)" in out


def test_budget_exceeded_exits_3(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = audit(capsysbinary, str(ONE), "--max-context-share", "10%", "-f", "json")
    assert code == 3
    doc = orjson.loads(out)
    assert doc["schema_version"] == 3
    assert doc["exceeded"] is True
    (check,) = doc["checks"]
    assert check["status"] == "fail"
    assert check["offender"].startswith("turn 2, request 91000000-0000-4000-8000-000000000006")


@pytest.mark.parametrize(
    "args",
    [
        ["--max-session-tokens", "lots"],
        ["--max-context-share", "60"],
        ["--format", "xml", "--max-compressions", "1"],
        [],  # no budget at all
        ["--max-compressions", "1", "--tolerance", "x"],
        ["--max-compressions", "1", "--github", "--format", "junit"],
        ["--max-compressions", "1", "--bogus"],
    ],
)
def test_usage_errors_exit_2(capsysbinary: pytest.CaptureFixture[bytes], args: list[str]) -> None:
    code, out, err = audit(capsysbinary, str(ONE), *args)
    assert code == 2, err
    assert out == ""
    assert "Error" in err or "Usage" in err


def test_unreadable_file_exits_1_unless_a_budget_is_exceeded(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    bad = tmp_path / "session-2026-01-01T00-00-deadbeef.jsonl"
    bad.write_text("not json at all\n")
    code, _, err = audit(capsysbinary, str(ONE), str(bad), "--max-session-tokens", "1M")
    assert code == 1
    assert err.count("warning:") == 1
    assert "is not JSON" in err
    # A budget exceeded wins over the unreadable file: 3 is the more specific verdict.
    code, out, _ = audit(capsysbinary, str(ONE), str(bad), "--max-session-tokens", "1k", "-f", "json")
    assert code == 3
    assert orjson.loads(out)["errors"][0]["file"] == str(bad)


def test_nothing_to_audit_exits_1(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    code, _, err = audit(capsysbinary, str(tmp_path / "missing.jsonl"), "--max-compressions", "1")
    assert code == 1
    assert "no session to audit" in err


def test_junit_file_parses_with_one_case_per_session_and_rule(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    target = tmp_path / "reports" / "audit.xml"
    code, out, _ = audit(
        capsysbinary,
        str(FIXTURES / "gemini" / "tmp"),
        "--max-session-tokens",
        "200k",
        "--max-compressions",
        "0",
        "-f",
        "junit",
        "-o",
        str(target),
    )
    assert code == 3
    assert out == ""
    root = ET.parse(target).getroot()
    cases = root.findall("./testsuite/testcase")
    sessions = {c.get("classname") for c in cases}
    assert len(cases) == 2 * len(sessions)
    assert {c.get("name") for c in cases} == {"max-session-tokens", "max-compressions"}
    failed = [(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None]
    assert failed == [
        ("ctxtool.audit.session-2026-05-25T09-30-c4e5f6a7", "max-session-tokens"),
        ("ctxtool.audit.session-2026-05-25T09-30-c4e5f6a7", "max-compressions"),
    ]
    assert root.get("failures") == "2"


def test_markdown_and_table_at_fixed_width(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = audit(capsysbinary, str(ONE), "--max-session-tokens", "200k", "-f", "markdown")
    assert code == 3
    assert out.splitlines()[:4] == [
        "## ctxtool audit: FAIL, 1 budget exceeded",
        "",
        "| status | session | rule | value | limit | worst |",
        "|---|---|---|---:|---:|---|",
    ]
    assert out.splitlines()[4] == (
        "| FAIL | session-2026-05-25T09-30-c4e5f6a7 | max-session-tokens | 302,100 | 200,000 | "
        "turn 1 (156,800 tokens) |"
    )
    code, out, _ = audit(
        capsysbinary, str(ONE), "--max-session-tokens", "200k", "--width", "80", "--color", "never"
    )
    assert code == 3
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "\x1b[" not in out
    assert any(line.startswith("│ FAIL") and "302,100" in line and "200,000" in line for line in lines)
    assert lines[-1].strip() == "FAIL: 1 budget exceeded"


def test_github_annotations(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    code, out, _ = audit(
        capsysbinary,
        str(ONE),
        "--max-session-tokens",
        "200k",
        "--github",
        "-f",
        "json",
        "-o",
        str(tmp_path / "r"),
    )
    assert code == 3
    assert out.splitlines() == [
        "::error title=ctxtool audit%3A max-session-tokens::session-2026-05-25T09-30-c4e5f6a7: "
        "max-session-tokens: 302,100 > 200,000 (worst: turn 1 (156,800 tokens))"
    ]


def test_force_color_colours_the_table_github_sends_to_stderr(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``FORCE_COLOR`` colours a table in a pipe (a CI log): standard error too, where ``--github`` puts the
    table; the annotations on standard output stay plain."""
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("FORCE_COLOR", "1")
    code, out, err = audit(capsysbinary, str(ONE), "--max-session-tokens", "200k", "--github", "--no-config")
    assert code == 3
    assert "\x1b[" in err
    assert "\x1b[" not in out


def test_github_without_output_keeps_stdout_for_the_annotations(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    """GitHub reads workflow commands from standard output: with ``--github`` and no ``--output`` it holds
    the annotations alone, and the table, for the people reading the log, goes to standard error. Another
    format needs a file, and the usage error says so."""
    args = (str(ONE), "--max-session-tokens", "200k", "--github", "--no-config", "--width", "100")
    code, out, err = audit(capsysbinary, *args)
    assert code == 3
    assert out.splitlines() == [
        "::error title=ctxtool audit%3A max-session-tokens::session-2026-05-25T09-30-c4e5f6a7: "
        "max-session-tokens: 302,100 > 200,000 (worst: turn 1 (156,800 tokens))"
    ]
    assert "│ FAIL" in err
    assert "FAIL: 1 budget exceeded" in err
    code, out, err = audit(capsysbinary, str(ONE), "--max-session-tokens", "1M", "--github", "--no-config")
    assert (code, out) == (0, "")
    assert "PASS: within budget" in err
    for fmt in ("markdown", "json", "junit"):
        code, out, err = audit(capsysbinary, *args, "--format", fmt)
        assert (code, out) == (2, "")
        assert f"Error: --github writes GitHub's annotations alone to standard output, so the {fmt}" in err
        assert "Pass --output FILE for it" in err


def test_config_file_and_flags_win(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ctxtool.toml").write_text('[audit]\nmax-session-tokens = "100k"\n')
    monkeypatch.chdir(tmp_path)
    code, _, _ = audit(capsysbinary, str(ONE))
    assert code == 3
    code, _, _ = audit(capsysbinary, str(ONE), "--max-session-tokens", "1M")
    assert code == 0
    code, _, err = audit(capsysbinary, str(ONE), "--no-config")
    assert code == 2
    assert "no budget" in err
    other = tmp_path / "other.toml"
    other.write_text("[audit.max-session-tokens]\nlimit = 1\nprojects = ['nothing-matches']\n")
    code, out, _ = audit(capsysbinary, str(ONE), "--config", str(other), "-f", "json")
    assert code == 0  # the only rule is scoped to another project
    assert orjson.loads(out)["checks"] == []
    (tmp_path / "ctxtool.toml").write_text("[audit]\nmax-tokens = 1\n")
    code, _, err = audit(capsysbinary, str(ONE))
    assert code == 2
    assert "unknown rule 'max-tokens'" in err


def test_baseline_regression_and_tolerance(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    base = tmp_path / "base.json"
    code, _, _ = audit(capsysbinary, str(ONE), "--max-session-tokens", "1M", "-f", "json", "-o", str(base))
    assert code == 0
    code, out, _ = audit(capsysbinary, str(ONE), "--baseline", str(base), "--tolerance", "0%", "-f", "json")
    assert code == 0
    assert orjson.loads(out)["baseline"]["regressions"] == []
    doc = orjson.loads(base.read_bytes())
    doc["summary"]["max-session-tokens"] = 280_000  # the new run is 7.9% worse
    base.write_bytes(orjson.dumps(doc))
    code, out, _ = audit(
        capsysbinary, str(ONE), "--baseline", str(base), "--tolerance", "5%", "-f", "markdown"
    )
    assert code == 3
    assert "| max-session-tokens | summary | 280,000 | 302,100 | +7.9% |" in out
    code, _, _ = audit(capsysbinary, str(ONE), "--baseline", str(base), "--tolerance", "10%")
    assert code == 0
    base.write_text("{}")
    code, _, err = audit(capsysbinary, str(ONE), "--baseline", str(base))
    assert code == 2
    assert "not a ctxtool audit report" in err
    code, _, err = audit(capsysbinary, str(ONE), "--baseline", str(tmp_path / "missing.json"))
    assert code == 1
    assert "cannot be read" in err


def test_bad_session_lines_only_warn(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "session-2026-01-01T00-00-0000aaaa.jsonl",
        [
            {"sessionId": "0000aaaa-0000-4000-8000-000000000000", "projectHash": "x"},
            {"id": "u1", "type": "user", "content": "Hello there", "timestamp": "2026-01-01T00:00:00Z"},
        ],
    )
    with path.open("a") as fh:
        fh.write('{"id": "broken\n')
    code, _, err = audit(capsysbinary, str(path), "--max-compressions", "0")
    assert code == 0
    assert "broken line" in err


def test_rule_keeps_only_the_named_budgets(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = audit(
        capsysbinary, str(ONE), "--max-context-share", "10%", "--max-compressions", "99",
        "--rule", "max-compressions", "-f", "json",
    )  # fmt: skip
    assert code == 0
    doc = orjson.loads(out)
    assert {c["rule"] for c in doc["checks"]} == {"max-compressions"}
    code, _, err = audit(capsysbinary, str(ONE), "--max-compressions", "1", "--rule", "max-compresions")
    assert code == 2
    assert "Did you mean max-compressions" in err


def test_daily_cost_days_follow_the_timezone(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    """A request at 23:30 UTC is on the next day in Tokyo: --timezone moves it there."""
    meta = {"sessionId": "tz-1", "projectHash": "p", "startTime": "2026-05-01T23:00:00.000Z"}
    late = {
        "id": "g1", "timestamp": "2026-05-01T23:30:00.000Z", "type": "gemini", "content": [{"text": "x"}],
        "model": "gemini-2.5-pro",
        "tokens": {"input": 100000, "output": 1000, "cached": 0, "thoughts": 0, "tool": 0, "total": 101000},
    }  # fmt: skip
    path = tmp_path / "tmp" / "p" / "chats" / "session-2026-05-01T23-00-tz1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(orjson.dumps(r).decode() for r in (meta, late)) + "\n", encoding="utf-8")
    for zone, day in ((None, "2026-05-01"), ("Asia/Tokyo", "2026-05-02")):
        args = [str(path), "--max-daily-cost", "0.001", "--no-config", "-f", "json"]
        code, out, _ = audit(capsysbinary, *args, *(["--timezone", zone] if zone else []))
        assert code == 3
        [check] = [c for c in orjson.loads(out)["checks"] if c["rule"] == "max-daily-cost"]
        assert check["subject"] == day


def test_a_folder_without_session_files_is_not_an_unreadable_file(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = audit(capsysbinary, str(empty), "--max-session-tokens", "2M")
    assert code == 1
    assert "Error: no session to audit (1 folder without session files)." in err
    assert "could not be read" not in err
    # Beside sessions within budget: still exit 1 (a PATH matched no session), counted apart from errors.
    code, out, _ = audit(capsysbinary, str(ONE), str(empty), "--max-session-tokens", "2M", "-f", "json")
    assert code == 1
    doc = orjson.loads(out)
    assert doc["ok"] is False
    assert doc["errors"] == []
    assert doc["counts"]["errors"] == 0
    assert doc["counts"]["unmatched_paths"] == 1
    assert [u["path"] for u in doc["unmatched_paths"]] == [str(empty)]
    assert doc["read"]["empty_folders"] == doc["unmatched_paths"]
    code, out, _ = audit(capsysbinary, str(ONE), str(empty), "--max-session-tokens", "2M", "-f", "junit")
    assert code == 1
    [error] = ET.fromstring(out).iter("error")
    assert error.get("type") == "NoSessionFound"
    code, out, _ = audit(capsysbinary, str(ONE), str(empty), "--max-session-tokens", "2M", "-f", "markdown")
    assert out.startswith("## ctxtool audit: FAIL, 1 PATH without sessions\n")
    assert f"- {escape_markdown(str(empty))}: holds no Gemini CLI session files" in out
    code, out, _ = audit(capsysbinary, str(ONE), str(empty), "--max-session-tokens", "2M")
    assert out.strip() == "FAIL: 1 PATH without sessions; --all lists the checks."
