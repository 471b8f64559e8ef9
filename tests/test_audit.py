"""ctxtool.audit: limits, configuration, scoping, metrics, baselines and the report formats."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from ctxtool import audit, frames
from ctxtool.common.errors import CtxtoolError, UsageError
from tests.conftest import FIXTURES

CHATS = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats"
COMPRESSED = CHATS / "session-2026-05-25T09-30-c4e5f6a7.jsonl"  # 4 requests, 302,100 tokens, 1 compression


def _rules(**limits: float) -> list[audit.Rule]:
    return audit.merge_rules([], {k.replace("_", "-"): v for k, v in limits.items()})


@pytest.mark.parametrize(
    ("metric", "text", "expected"),
    [
        ("max-session-tokens", "2M", 2_000_000),
        ("max-session-tokens", "500k", 500_000),
        ("max-session-tokens", "2_000_000", 2_000_000),
        ("max-session-tokens", 1500, 1500),
        ("max-context-share", "60%", 0.6),
        ("max-context-share", "0.6", 0.6),
        ("min-cache-ratio", 0.25, 0.25),
        ("max-session-cost", "$2.50", 2.5),
        ("max-compressions", "0", 0),
    ],
)
def test_parse_limit(metric: str, text: object, expected: float) -> None:
    assert audit.parse_limit(metric, text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("metric", "text", "fix"),
    [
        ("max-context-share", "60", "60%"),
        ("max-context-share", "140%", "0-100%"),
        ("max-session-tokens", "lots", "2M"),
        ("max-session-cost", "-1", "negative"),
        ("max-nonsense", "1", "Use one of"),
        ("max-compressions", True, "not a number"),
    ],
)
def test_parse_limit_rejects_with_a_fix(metric: str, text: object, fix: str) -> None:
    with pytest.raises(UsageError, match=fix.replace("$", r"\$")):
        audit.parse_limit(metric, text)


def test_tolerance() -> None:
    assert audit.parse_tolerance("10%") == pytest.approx(0.1)
    assert audit.parse_tolerance("0.25") == pytest.approx(0.25)
    with pytest.raises(UsageError):
        audit.parse_tolerance("ten")
    with pytest.raises(UsageError):
        audit.parse_tolerance("-5%")


def test_config_files_and_precedence(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    assert audit.find_config(nested) is None
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert audit.find_config(nested) is None  # a pyproject without the section is not a config
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ctxtool.audit]\nmax-session-tokens = "1M"\nmin_cache_ratio = "20%"\n'
    )
    assert audit.find_config(nested) == tmp_path / "pyproject.toml"
    rules = audit.load_config(tmp_path / "pyproject.toml")
    assert [(r.metric, r.limit) for r in rules] == [("max-session-tokens", 1e6), ("min-cache-ratio", 0.2)]
    (tmp_path / "a" / "ctxtool.toml").write_text(
        "[audit]\nmax-session-tokens = 100\n"
        "[[audit.max-context-share]]\nlimit = 0.5\n"
        '[[audit.max-context-share]]\nlimit = "80%"\nprojects = ["big-*"]\nmodels = ["gemini-2.5-pro"]\n'
    )
    found = audit.find_config(nested)
    assert found == tmp_path / "a" / "ctxtool.toml"
    rules = audit.load_config(found)
    assert [(r.metric, r.limit, r.projects, r.models) for r in rules] == [
        ("max-session-tokens", 100, (), ()),
        ("max-context-share", 0.5, (), ()),
        ("max-context-share", 0.8, ("big-*",), ("gemini-2.5-pro",)),
    ]
    # A flag replaces every configured rule of its metric, scoped ones included.
    merged = audit.merge_rules(rules, {"max-context-share": 0.3, "max-session-tokens": None})
    assert [(r.metric, r.limit, r.source) for r in merged] == [
        ("max-session-tokens", 100, str(found)),
        ("max-context-share", 0.3, "flag"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[audit]\nmax-tokens = 5\n", "unknown rule 'max-tokens'"),
        ("[audit.max-session-tokens]\nprojects = ['x']\n", "has no limit"),
        ("[audit.max-session-tokens]\nlimit = 5\nteams = ['x']\n", "unknown key"),
        ("[audit]\nmax-session-tokens = [\n", "not valid TOML"),
        ("[other]\n", "no \\[audit\\] table"),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "ctxtool.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        audit.load_config(path)


def test_metrics_and_offenders_of_one_session() -> None:
    corpus = frames.load([COMPRESSED])
    report = audit.run_audit(
        corpus,
        _rules(
            max_session_tokens=300_000,
            max_turn_tokens=200_000,
            max_request_tokens=120_000,
            max_context_share=0.2,
            max_compressions=0,
            min_cache_ratio=0.5,
        ),
    )
    by_rule = {c.rule: c for c in report.checks}
    assert by_rule["max-session-tokens"].status == "fail"
    assert by_rule["max-session-tokens"].value == 302_100
    assert by_rule["max-session-tokens"].offender == "turn 1 (156,800 tokens)"
    assert by_rule["max-turn-tokens"].status == "pass"
    assert by_rule["max-request-tokens"].value == 120_500
    assert by_rule["max-request-tokens"].offender == "turn 2, request 91000000-0000-4000-8000-000000000006"
    assert by_rule["max-request-tokens"].status == "fail"
    assert by_rule["max-context-share"].value == pytest.approx(120_000 / 1_048_576)
    assert by_rule["max-compressions"].status == "fail"
    assert by_rule["min-cache-ratio"].status == "pass"
    assert report.exceeded
    assert report.summary["max-session-tokens"] == 302_100


def test_scoped_rules_replace_the_unscoped_rule() -> None:
    corpus = frames.load([FIXTURES / "gemini" / "tmp"])
    rules = [
        audit.Rule("max-session-tokens", 50_000),
        audit.Rule("max-session-tokens", 400_000, projects=("*ctxdemo",)),
        audit.Rule("max-request-tokens", 1, models=("gemini-2.5-flash",)),
    ]
    report = audit.run_audit(corpus, rules)
    tokens = [c for c in report.checks if c.rule == "max-session-tokens"]
    ctxdemo = [c for c in tokens if c.project == "/home/dev/ctxdemo"]
    assert ctxdemo
    assert all(c.limit == 400_000 and c.scope == "projects *ctxdemo" for c in ctxdemo)
    assert all(c.status == "pass" for c in ctxdemo)
    others = [c for c in tokens if c.project != "/home/dev/ctxdemo"]
    assert others
    assert all(c.limit == 50_000 for c in others)
    # A model-scoped rule applies only to sessions that used the model, measured on its requests only.
    flash = [c for c in report.checks if c.rule == "max-request-tokens"]
    assert [c.subject for c in flash] == ["session-2026-03-02T14-20-d00dfeed"]


def test_daily_cost() -> None:
    corpus = frames.load([COMPRESSED])
    report = audit.run_audit(corpus, _rules(max_daily_cost=0.01))
    (check,) = report.checks
    assert check.subject == "2026-05-25"
    assert check.status == "fail"
    assert check.value == pytest.approx(float(corpus.requests.get_column("cost").sum()))


def test_baseline_regression_and_tolerance() -> None:
    report = audit.run_audit(frames.load([COMPRESSED]), _rules(max_session_tokens=1e9))
    doc = report.as_dict()
    assert audit.compare_baseline(report, doc, 0.0, "self").regressions == []
    lower = {**doc, "summary": {**doc["summary"], "max-session-tokens": 280_000}}
    # 302,100 is 7.9% above 280,000: a regression at 5%, not at 10%.
    (reg,) = audit.compare_baseline(report, lower, 0.05, "b").regressions
    assert (reg.metric, reg.subject, reg.baseline, reg.current) == (
        "max-session-tokens",
        "summary",
        280_000,
        302_100,
    )
    assert audit.compare_baseline(report, lower, 0.10, "b").regressions == []
    # min-cache-ratio regresses when it falls.
    higher_cache = {**doc, "summary": {**doc["summary"], "min-cache-ratio": 0.9}}
    (reg,) = audit.compare_baseline(report, higher_cache, 0.1, "b").regressions
    assert reg.metric == "min-cache-ratio"
    # Sessions present in both are compared by session id.
    sessions = [{**s, "metrics": {**s["metrics"], "max-compressions": 0}} for s in doc["sessions"]]
    (reg,) = audit.compare_baseline(report, {**doc, "sessions": sessions}, 0.5, "b").regressions
    assert (reg.metric, reg.subject, reg.change) == (
        "max-compressions",
        "session-2026-05-25T09-30-c4e5f6a7",
        None,
    )
    result = audit.compare_baseline(report, lower, 0.05, "b")
    assert result.exceeded
    assert not result.failures


def test_junit_markdown_and_annotations() -> None:
    report = audit.run_audit(
        frames.load([COMPRESSED]), _rules(max_session_tokens=100_000, max_compressions=5, min_cache_ratio=0.1)
    )
    report.errors.append({"file": "/x/broken.jsonl", "message": "/x/broken.jsonl: is not JSON. Pass only…"})
    root = ET.fromstring(audit.junit_xml(report))
    assert root.tag == "testsuites"
    (suite,) = root
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("ctxtool.audit.session-2026-05-25T09-30-c4e5f6a7", "max-session-tokens"),
        ("ctxtool.audit.session-2026-05-25T09-30-c4e5f6a7", "min-cache-ratio"),
        ("ctxtool.audit.session-2026-05-25T09-30-c4e5f6a7", "max-compressions"),
        ("ctxtool.audit.read", "/x/broken.jsonl"),
    ]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "4",
        "1",
        "1",
        "0",
    )
    failure = cases[0].find("failure")
    assert failure is not None
    assert "302,100 > 100,000" in (failure.get("message") or "")
    md = audit.markdown(report)
    assert md.splitlines()[0] == "## ctxtool audit: FAIL, 1 budget exceeded, 1 file unreadable"
    assert "| FAIL | session-2026-05-25T09-30-c4e5f6a7 | max-session-tokens | 302,100 | 100,000 |" in md
    assert "Files that could not be read:\n\n- /x/broken.jsonl: is not JSON. Pass only…\n" in md
    notes = audit.github_annotations(report)
    assert notes[0].startswith("::error title=ctxtool audit%3A max-session-tokens::session-2026-05-25")
    assert notes[1].startswith("::warning title=ctxtool audit%3A unreadable file::")
    assert all("\n" not in n for n in notes)


def test_rules_to_check_merges_the_flags_into_the_config_and_keeps_the_rules_named(tmp_path: Path) -> None:
    config = tmp_path / "ctxtool.toml"
    config.write_text('[audit]\nmax-session-tokens = "1M"\nmax-compressions = 2\n')
    rules = audit.rules_to_check({"max-compressions": 0, "max-secrets": None}, config)
    assert [(r.metric, r.limit, r.source) for r in rules] == [
        ("max-session-tokens", 1e6, str(config)),
        ("max-compressions", 0, "flag"),
    ]
    assert [r.metric for r in audit.rules_to_check({}, config, ["max-compressions"])] == ["max-compressions"]
    assert audit.rules_to_check({"max-secrets": 0}, None) == [audit.Rule("max-secrets", 0)]
    assert audit.rules_to_check({"max-secrets": 0}, None, ["min-cache-ratio"]) == []
    with pytest.raises(UsageError, match="--rule max-tokens is not a budget"):
        audit.rules_to_check({}, config, ["max-tokens"])


def test_audit_corpus_filters_warns_and_compares_with_the_baseline() -> None:
    corpus = frames.load([FIXTURES / "gemini" / "tmp"])
    rules = _rules(max_session_tokens=1e9)
    heard: list[str] = []
    everything = audit.audit_corpus(corpus, audit.AuditQuery(rules), warn=heard.append)
    assert len(everything.checks) == 14
    assert len(heard) == 1
    assert "skipped 1 broken line" in heard[0]
    one = audit.AuditQuery(rules, filters={"sessions": ("c4e5f6a7",)})
    report = audit.audit_corpus(corpus, one, warn=heard.append)
    assert [c.subject for c in report.checks] == [COMPRESSED.stem]
    doc = report.as_dict()
    lower = {**doc, "summary": {**doc["summary"], "max-session-tokens": 280_000}}
    baseline = audit.Baseline(lower, 0.05, "main.json")
    query = audit.AuditQuery(rules, filters={"sessions": ("c4e5f6a7",)}, baseline=baseline)
    compared = audit.audit_corpus(corpus, query, warn=heard.append)
    assert [(r.metric, r.subject) for r in compared.regressions] == [("max-session-tokens", "summary")]
    assert compared.baseline == "main.json"
    nothing = audit.AuditQuery(rules, filters={"since": date(2030, 1, 1)})
    with pytest.raises(CtxtoolError, match="no session to audit matches the --since/--until"):
        audit.audit_corpus(corpus, nothing, warn=heard.append)
    assert len(heard) == 1  # what the filters leave out is not warned about


@pytest.mark.parametrize("timezone", [None, "America/New_York"])
def test_costs_are_those_stats_reports_to_the_last_bit(timezone: str | None) -> None:
    from ctxtool.frames.query import report
    from tests.conftest import REAL_SESSIONS

    corpus = frames.load([FIXTURES / "gemini" / "tmp", *([REAL_SESSIONS] if REAL_SESSIONS.is_dir() else [])])
    result = audit.run_audit(corpus, _rules(max_session_cost=1e9, max_daily_cost=1e9), timezone=timezone)
    by_session = {row["file"]: row["cost"] for row in report(corpus, "session").iter_rows(named=True)}
    days_ = report(corpus, "day", timezone=timezone).iter_rows(named=True)
    by_day = {row["day"].isoformat(): row["cost"] for row in days_}
    sessions = [c for c in result.checks if c.rule == "max-session-cost" and c.value is not None]
    days = [c for c in result.checks if c.rule == "max-daily-cost" and c.value is not None]
    assert len(sessions) > 10
    assert len(days) > 5
    assert [c.value for c in sessions] == [by_session[c.file] for c in sessions]
    assert [c.value for c in days] == [by_day[c.subject] for c in days]
