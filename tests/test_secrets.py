"""Secrets in sessions never reach an output by default; hostile text never breaks a markup format
(issue 15)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ctxtool import audit as audit_lib
from ctxtool.cli import run
from ctxtool.common.secret_scan import find, redact
from tests.conftest import FIXTURES

# Planted keys of the kinds a session may leak (made up, in each service's format).
GOOGLE = "AIzaSyD-" + "k3yF0rT3st1ng0nly_aBcDeFgHiJkLmN"[:31]
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
SLACK = "xoxb-123456789012-1234567890123-" + "abcdefghijklmnopqrstuvwx"
PLANTED = {"google-api-key": GOOGLE, "aws-access-key": AWS, "github-token": GITHUB, "slack-token": SLACK}
FIXTURE = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"


def test_each_planted_kind_is_found_whole_and_redacted() -> None:
    for kind, value in PLANTED.items():
        text = f"use {value} please"
        [secret] = find(text)
        assert (secret.kind, text[secret.start : secret.end]) == (kind, value)
        assert redact(text) == f"use [REDACTED:{kind}] please"
    assert find("the sha256 is 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08") == []


@pytest.fixture
def leaky(tmp_path: Path) -> Path:
    """A copy of a fixture session whose prompt, tool call and tool output hold planted keys."""
    chats = tmp_path / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    lines = FIXTURE.read_text().splitlines()
    out = []
    for line in lines:
        record = json.loads(line)
        if record.get("type") == "user" and isinstance(record.get("content"), list):
            part = record["content"][0]
            if "text" in part and not part["text"].startswith("<"):
                part["text"] += f" My key is {GOOGLE} and AWS {AWS}."
        for call in record.get("toolCalls") or []:
            call.setdefault("args", {})["command"] = f"curl -H 'Authorization: {GITHUB}' https://x"
            call["result"] = [{"functionResponse": {"response": {"output": f"token {SLACK}"}}}]
        out.append(json.dumps(record))
    path = chats / FIXTURE.name
    path.write_text("\n".join(out) + "\n")
    return path


def assert_no_secret(data: str | bytes, where: str) -> None:
    text = data.decode() if isinstance(data, bytes) else data
    for kind, value in PLANTED.items():
        assert value not in text, (where, kind)
        assert value[:20] not in text, (where, kind)  # not even cut short


def test_no_output_shows_a_secret_by_default(
    leaky: Path, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    root = str(leaky.parents[2])
    for args in (
        ["stats", root, "--by", "turn", "--no-cache"],
        ["stats", root, "--by", "turn", "--no-cache", "-f", "json"],
        ["stats", root, "--by", "turn", "--no-cache", "-f", "csv"],
    ):
        assert run(args) == 0
        out = capsysbinary.readouterr()
        assert_no_secret(out.out + out.err, " ".join(args[3:]))
    assert run(["stats", root, "--by", "turn", "--no-cache", "-f", "json", "--show-secrets"]) == 0
    assert GOOGLE in capsysbinary.readouterr().out.decode()

    compacted = tmp_path / "compacted.jsonl"
    assert run(["compact", str(leaky), "--force", "--out", str(compacted), "-f", "json"]) == 0
    assert_no_secret(capsysbinary.readouterr().out, "compact report")
    for fmt in ("json", "markdown", "table"):
        assert run(["diff", str(leaky), str(compacted), "-f", fmt, "--width", "200"]) == 0
        out = capsysbinary.readouterr()
        assert_no_secret(out.out + out.err, f"diff {fmt}")
    for fmt in ("json", "junit", "markdown", "table"):
        report = tmp_path / f"audit.{fmt}"
        args = ["audit", root, "--max-session-tokens", "1", "--max-secrets", "0", "-f", fmt, "--github"]
        assert run([*args, "--output", str(report)]) == 3
        out = capsysbinary.readouterr()
        assert_no_secret(out.out + out.err + report.read_bytes(), f"audit {fmt}")


def test_audit_max_secrets_names_session_message_and_kind(
    leaky: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    root = str(leaky.parents[2])
    assert run(["audit", root, "--max-secrets", "0", "-f", "json"]) == 3
    doc = json.loads(capsysbinary.readouterr().out)
    [check] = [c for c in doc["checks"] if c["rule"] == "max-secrets"]
    assert check["status"] == "fail"
    assert check["subject"] == FIXTURE.stem
    assert check["value"] >= 4
    assert check["offender"].startswith("message ")
    assert "google-api-key" in check["offender"] or "aws-access-key" in check["offender"]
    assert run(["audit", root, "--max-secrets", "100", "-f", "json"]) == 0
    capsysbinary.readouterr()


def test_compact_redact_secrets_writes_none_of_them(
    leaky: Path, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    plain = tmp_path / "plain.jsonl"
    assert run(["compact", str(leaky), "--force", "--out", str(plain)]) == 0
    capsysbinary.readouterr()
    # Facts are kept verbatim: without the flag, what the kept messages and the summary quote stays.
    assert GOOGLE in plain.read_text() or AWS in plain.read_text()
    clean = tmp_path / "clean.jsonl"
    assert run(["compact", str(leaky), "--force", "--out", str(clean), "--redact-secrets", "-f", "json"]) == 0
    report = json.loads(capsysbinary.readouterr().out)["sessions"][0]
    assert any("--redact-secrets" in note for note in report["notes"])
    assert_no_secret(clean.read_text(), "compacted session")
    assert "[REDACTED:" in clean.read_text()


def test_junit_stays_valid_xml_and_markdown_and_annotations_stay_whole() -> None:
    hostile = "a]]></testcase><testcase name='x'>\x00\x1b[31m& | pipe\nnew line\r%25 done:,"
    check = audit_lib.Check(
        rule="max-session-tokens",
        subject=hostile,
        session_id=None,
        project=None,
        file=hostile,
        status="fail",
        value=10.0,
        limit=1.0,
        offender=hostile,
        message=f"max-session-tokens: {hostile}",
    )
    report = audit_lib.AuditReport([], [check], {}, {}, {}, {"errors": []})
    root = ET.fromstring(audit_lib.junit_xml(report))
    [case] = root.iter("testcase")
    assert case.get("classname", "").startswith("ctxtool.audit.a]]></testcase>")
    assert "\x00" not in ET.tostring(root, encoding="unicode")
    md = audit_lib.markdown(report)
    rows = [line for line in md.splitlines() if line.startswith("| FAIL")]
    assert len(rows) == 1
    assert rows[0].count(" | ") == 5  # the six cells of the table, no more
    assert "&lt;/testcase&gt;" in rows[0]
    [annotation] = audit_lib.github_annotations(report)
    assert "\n" not in annotation
    assert "\r" not in annotation
    assert annotation.startswith("::error title=ctxtool audit%3A max-session-tokens::")


def test_the_real_sessions_leaks_are_found(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    """The real sessions hold keys (a Telegram bot token and an OpenAI key in the Myflix session, with
    placeholders of the real format); an audit finds them, and only where they are."""
    real = FIXTURES.parents[1] / "shared" / "real-sessions"
    source = real / "Myflix__session-2026-02-24T16-56-cd7b13fa.json"
    if not source.exists():
        pytest.skip("../shared/real-sessions is not here")
    chats = tmp_path / "tmp" / "p" / "chats"
    chats.mkdir(parents=True)
    shutil.copy2(source, chats / "session-2026-02-24T16-56-cd7b13fa.json")
    shutil.copy2(FIXTURE, chats / FIXTURE.name)
    assert run(["audit", str(tmp_path / "tmp"), "--max-secrets", "0", "-f", "json"]) == 3
    doc = json.loads(capsysbinary.readouterr().out)
    failing = {c["subject"]: c["offender"] for c in doc["checks"] if c["status"] == "fail"}
    assert list(failing) == ["session-2026-02-24T16-56-cd7b13fa"]
    assert "telegram-bot-token" in failing["session-2026-02-24T16-56-cd7b13fa"]


def test_export_writes_no_secret_unless_asked(leaky: Path, tmp_path: Path) -> None:
    """By default no text leaves the machine; --with-text writes it redacted; --show-secrets as it is."""
    import polars as pl

    root = str(leaky.parents[2])

    def texts(ds: Path) -> str:
        found = []
        for part in ds.rglob("*.parquet"):
            frame = pl.read_parquet(part)
            for column in ("preview", "prompt", "summary", "target"):
                if column in frame.columns:
                    found += [v for v in frame.get_column(column).to_list() if v]
        return "\n".join(found)

    assert run(["export", root, "--to", str(tmp_path / "plain"), "--no-cache"]) == 0
    assert texts(tmp_path / "plain") == ""
    assert all(GOOGLE[:20].encode() not in p.read_bytes() for p in (tmp_path / "plain").rglob("*.parquet"))
    assert run(["export", root, "--to", str(tmp_path / "ds"), "--with-text", "--no-cache"]) == 0
    joined = texts(tmp_path / "ds")
    assert "[REDACTED:google-api-key]" in joined
    assert_no_secret(joined, "export")
    assert (
        run(["export", root, "--to", str(tmp_path / "raw"), "--with-text", "--show-secrets", "--no-cache"])
        == 0
    )
    assert GOOGLE[:20] in texts(tmp_path / "raw")
