"""Budgets for Gemini CLI sessions: rules in, checks out. Knows nothing about exit codes or terminals.

Owns: the rule set (flags and the ``ctxtool.toml`` / ``[tool.ctxtool.audit]`` configuration, flags winning,
``--rule`` choosing among them), scoping rules to projects and models, measuring every metric per session
(subagents rolled up into their parent, as ``ctxtool stats --by session`` does) or per day, naming the
offending turn, request or tool call, the comparison with an earlier report (``--baseline``), the audit as the
command runs it (``audit_corpus``: the filters, what a check quotes redacted, the baseline), and the report
formats that are data (JSON, JUnit XML, markdown, GitHub workflow annotations). The CLI turns an
``AuditReport`` into an exit status.

Metric definitions (the README repeats them):

* ``max-session-tokens``: the session's billed ``total`` tokens (every request recorded, subagents included);
  the offender named is the turn with the most tokens.
* ``max-turn-tokens``: the largest turn's ``total`` tokens; ``max-request-tokens``: the largest single
  request's ``total``.
* ``max-context-share``: the largest request prompt (``input``) over the model's context window
  (``tokenLimit``), over every request recorded.
* ``max-session-cost`` / ``max-daily-cost`` (USD, from genai-prices; per UTC day over all audited sessions).
* ``min-cache-ratio``: cached over input tokens of the session.
* ``max-compressions``: compression events (an info marker or a ``<state_snapshot>`` message per event).
* ``max-tool-output-share``: the size of tool results (their stored JSON, as the frames record it) over that
  size plus the characters of all message text, over every message recorded. Size-based, so it needs no
  tokenizer and is the same whatever the model.
"""

from __future__ import annotations

import fnmatch
import math
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from xml.etree import ElementTree as ET

import polars as pl

from ctxtool.common.errors import CtxtoolError, UsageError, use_one_of
from ctxtool.common.identity import identity
from ctxtool.common.markup import escape_markdown, workflow_data, workflow_property, xml_document
from ctxtool.common.wording import plural
from ctxtool.frames.model import SCHEMA_VERSION, Corpus, Problem
from ctxtool.frames.query import (
    filter_corpus,
    read_summary,
    read_warnings,
    report,
)
from ctxtool.frames.reading import describe_problems, problem_counts
from ctxtool.measure.tokens import cache_ratio

Kind = Literal["tokens", "share", "cost", "count"]
CheckStatus = Literal["pass", "fail", "skip"]


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: Kind
    lower_is_better: bool  # False only for min-cache-ratio
    help: str


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("max-session-tokens", "tokens", True, "total tokens of a session (subagents included)"),
        Metric("max-turn-tokens", "tokens", True, "total tokens of one turn"),
        Metric("max-request-tokens", "tokens", True, "total tokens of one request"),
        Metric("max-context-share", "share", True, "one request's prompt over the model's context window"),
        Metric("max-session-cost", "cost", True, "cost of a session in USD"),
        Metric("max-daily-cost", "cost", True, "all audited sessions' cost per day (UTC or --timezone), USD"),
        Metric("min-cache-ratio", "share", False, "cached over input tokens of a session"),
        Metric("max-compressions", "count", True, "compression events in a session"),
        Metric("max-tool-output-share", "share", True, "tool-result characters over all content characters"),
        Metric("max-secrets", "count", True, "secrets (API keys, tokens, private keys) held in a session"),
    )
}
CONFIG_FILE = "ctxtool.toml"
_FIX_CONFIG = "See `ctxtool audit --help` and the README section on the configuration file"


@dataclass(frozen=True, slots=True)
class Rule:
    metric: str
    limit: float
    projects: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    source: str = "flag"  # "flag", or the config file it came from
    users: tuple[str, ...] = ()  # a team's dataset: whose sessions (and days) the rule is for, each apart

    @property
    def scoped(self) -> bool:
        return bool(self.projects or self.models or self.users)

    @property
    def scope(self) -> str:
        parts = []
        if self.projects:
            parts.append("projects " + ",".join(self.projects))
        if self.models:
            parts.append("models " + ",".join(self.models))
        if self.users:
            parts.append("users " + ",".join(self.users))
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.metric,
            "limit": json_number(self.metric, self.limit),
            "projects": list(self.projects),
            "models": list(self.models),
            "users": list(self.users),
            "source": self.source,
        }


def json_number(metric: str, value: Any) -> Any:
    """A token or count figure as the integer it is (``17528``, not ``17528.0``) in JSON; shares and costs
    stay floats at full precision."""
    m = METRICS.get(metric)
    if m is not None and m.kind in ("tokens", "count") and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# --------------------------------------------------------------------------------------------- limits


_TOKENS_RE = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*$")


def parse_limit(metric: str, value: Any, where: str = "") -> float:
    """A limit as written on the command line or in TOML: ``2_000_000``, ``2M``, ``500k`` (tokens),
    ``60%`` or ``0.6`` (shares), ``5``, ``$5`` or ``2.50`` (USD), ``3`` (counts)."""
    m = METRICS.get(metric)
    if m is None:
        raise UsageError(f"{where}unknown rule {metric!r}", use_one_of(metric, METRICS))
    label = f"{where}{metric} {value!r}"
    if isinstance(value, bool):
        raise UsageError(f"{label} is not a number", _example(m))
    if m.kind == "share":
        if isinstance(value, str) and value.strip().endswith("%"):
            number = _number(value.strip()[:-1], label, m) / 100
        else:
            number = _number(value, label, m)
            if number > 1:
                raise UsageError(f"{label} is a share above 1", f"Write it as a percentage, e.g. {number:g}%")
        if not 0 <= number <= 1:
            raise UsageError(f"{label} is outside 0-100%", _example(m))
        return number
    if m.kind == "cost":
        text = value.strip().removeprefix("$") if isinstance(value, str) else value
        number = _number(text, label, m)
    elif m.kind == "tokens" and isinstance(value, str):
        match = _TOKENS_RE.match(value)
        if not match:
            raise UsageError(f"{label} is not a token count", _example(m))
        scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2).lower()]
        number = float(match.group(1).replace("_", "").replace(",", "")) * scale
    else:
        number = _number(value, label, m)
    if number < 0:
        raise UsageError(f"{label} is negative", _example(m))
    return number


def _number(value: Any, label: str, m: Metric) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip().replace("_", ""))
        except ValueError:
            raise UsageError(f"{label} is not a number", _example(m)) from None
    else:
        raise UsageError(f"{label} is not a number", _example(m))
    if math.isnan(number) or math.isinf(number):
        raise UsageError(f"{label} is not a finite number", _example(m))
    return number


def _example(m: Metric) -> str:
    examples = {"tokens": "2000000 or 2M", "share": "60% or 0.6", "cost": "5 or 2.50 (USD)", "count": "3"}
    return f"Write {m.name} as e.g. {examples[m.kind]}"


def parse_tolerance(value: str) -> float:
    """``10%`` or ``0.1`` → 0.1."""
    text = value.strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise UsageError(
            f"--tolerance {value!r} is not a percentage", "Write it as e.g. 10% or 0.1"
        ) from None
    if number < 0 or math.isnan(number) or math.isinf(number):
        raise UsageError(f"--tolerance {value!r} must be 0 or more", "Write it as e.g. 10% or 0.1")
    return number


# --------------------------------------------------------------------------------------------- config


def find_config(start: Path) -> Path | None:
    """The nearest ``ctxtool.toml``, or ``pyproject.toml`` with ``[tool.ctxtool.audit]``, in ``start`` or a
    parent directory."""
    for folder in [start, *start.parents]:
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue
            if isinstance(data.get("tool"), dict) and "audit" in data["tool"].get("ctxtool", {}):
                return pyproject
    return None


def load_config(path: Path) -> list[Rule]:
    """Rules from a config file: ``[audit]`` in ``ctxtool.toml``, ``[tool.ctxtool.audit]`` in pyproject.toml.

    Each key is a rule name; its value is a limit, a table ``{limit, projects, models, users}``, or an array
    of such tables (one scoped rule each)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CtxtoolError(
            f"{path}: cannot be read ({exc.strerror or exc})", "Check the --config path"
        ) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(
            f"{path}: is not valid TOML ({exc})", "Fix the syntax; see the README example"
        ) from None
    if path.name == "pyproject.toml":
        section = data.get("tool", {}).get("ctxtool", {}).get("audit")
        where = "[tool.ctxtool.audit]"
    else:
        section = data.get("audit")
        where = "[audit]"
    if section is None:
        raise UsageError(f"{path}: has no {where} table", _FIX_CONFIG)
    if not isinstance(section, dict):
        raise UsageError(f"{path}: {where} is not a table", _FIX_CONFIG)
    rules: list[Rule] = []
    for key, value in section.items():
        metric = key.replace("_", "-")
        prefix = f"{path.name} {where}: "
        if metric not in METRICS:
            raise UsageError(f"{prefix}unknown rule {key!r}", use_one_of(key, METRICS))
        entries = value if isinstance(value, list) else [value]
        for entry in entries:
            rules.append(_rule_from_toml(metric, entry, prefix, str(path)))
    return rules


def _rule_from_toml(metric: str, entry: Any, prefix: str, source: str) -> Rule:
    if not isinstance(entry, dict):
        return Rule(metric, parse_limit(metric, entry, prefix), source=source)
    unknown = set(entry) - {"limit", "projects", "models", "users"}
    if unknown:
        raise UsageError(
            f"{prefix}{metric} has unknown {'key' if len(unknown) == 1 else 'keys'} "
            + ", ".join(sorted(unknown)),
            "Use limit, projects, models and users",
        )
    if "limit" not in entry:
        raise UsageError(f"{prefix}{metric} has no limit", "Add limit = …")
    scopes: dict[str, tuple[str, ...]] = {}
    for name in ("projects", "models", "users"):
        raw = entry.get(name, [])
        raw = [raw] if isinstance(raw, str) else raw
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise UsageError(f"{prefix}{metric}.{name} is not a list of strings", f'Write {name} = ["…"]')
        scopes[name] = tuple(raw)
    return Rule(
        metric,
        parse_limit(metric, entry["limit"], prefix),
        projects=scopes["projects"],
        models=scopes["models"],
        source=source,
        users=scopes["users"],
    )


def merge_rules(config: Sequence[Rule], flags: Mapping[str, float | None]) -> list[Rule]:
    """Flags win: a flag replaces every configured rule (scoped or not) of its metric."""
    flagged = {name for name, v in flags.items() if v is not None}
    out = [r for r in config if r.metric not in flagged]
    out.extend(Rule(name, float(v)) for name, v in flags.items() if v is not None)
    order = list(METRICS)
    return sorted(out, key=lambda r: (order.index(r.metric), r.scoped, r.projects, r.models, r.users))


def rules_to_check(
    flags: Mapping[str, float | None], config: Path | None, only: Sequence[str] | None = None
) -> list[Rule]:
    """The rules of the configuration file ``config`` (None: none) with the ``flags`` merged in
    (``merge_rules``), only those of the metrics ``only`` names (``--rule``) when given."""
    rules = merge_rules(load_config(config) if config is not None else [], flags)
    if not only:
        return rules
    unknown = [r for r in only if r not in METRICS]
    if unknown:
        raise UsageError(f"--rule {unknown[0]} is not a budget", use_one_of(unknown[0], list(METRICS)))
    return [r for r in rules if r.metric in only]


# --------------------------------------------------------------------------------------------- checks


@dataclass(frozen=True, slots=True)
class Check:
    """One rule applied to one subject (a session, or a UTC day for max-daily-cost)."""

    rule: str
    subject: str  # session name, or YYYY-MM-DD
    session_id: str | None
    project: str | None
    file: str | None
    status: CheckStatus
    value: float | None
    limit: float
    offender: str | None = None  # the turn, request or tool call that set the value
    message: str = ""
    scope: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "subject": self.subject,
            "session_id": self.session_id,
            "project": self.project,
            "file": self.file,
            "status": self.status,
            "value": json_number(self.rule, self.value),
            "limit": json_number(self.rule, self.limit),
            "offender": self.offender,
            "message": self.message,
            "scope": self.scope,
        }


@dataclass(frozen=True, slots=True)
class Regression:
    metric: str
    subject: str  # "summary" or a session id
    baseline: float
    current: float
    tolerance: float

    @property
    def change(self) -> float | None:
        return None if self.baseline == 0 else (self.current - self.baseline) / abs(self.baseline)

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "subject": self.subject,
            "baseline": json_number(self.metric, self.baseline),
            "current": json_number(self.metric, self.current),
            "change": self.change,
            "tolerance": self.tolerance,
        }


@dataclass(slots=True)
class AuditReport:
    rules: list[Rule]
    checks: list[Check]
    metrics: dict[str, dict[str, float | None]]  # session key → metric → value (all metrics, for baselines)
    sessions: dict[str, dict[str, Any]]  # session key → {session, session_id, project, file}
    summary: dict[str, float | None]  # worst value of each metric over all subjects
    read: dict[str, Any]
    errors: list[dict[str, str]] = field(default_factory=list)  # files that could not be read
    # PATHs that gave no session: a folder holding no session file, a path matching no file (not unreadable
    # files, but an error all the same: the audit did not see what it was pointed at)
    unmatched: list[dict[str, str]] = field(default_factory=list)
    regressions: list[Regression] = field(default_factory=list)
    baseline: str | None = None
    tolerance: float | None = None
    baseline_compared: int = 0

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def incomplete(self) -> bool:
        """A file could not be read, or a PATH gave no session."""
        return bool(self.errors or self.unmatched)

    @property
    def exceeded(self) -> bool:
        """A budget was exceeded or a metric regressed past the tolerance."""
        return bool(self.failures or self.regressions)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "audit",
            "ok": not self.exceeded and not self.incomplete,
            "exceeded": self.exceeded,
            "counts": {
                "checks": len(self.checks),
                "passed": sum(c.status == "pass" for c in self.checks),
                "failed": len(self.failures),
                "skipped": sum(c.status == "skip" for c in self.checks),
                "errors": len(self.errors),
                "unmatched_paths": len(self.unmatched),
                "regressions": len(self.regressions),
            },
            "rules": [r.as_dict() for r in self.rules],
            "checks": [c.as_dict() for c in self.checks],
            "summary": {k: json_number(k, v) for k, v in self.summary.items()},
            "sessions": [
                {
                    **self.sessions[key],
                    "metrics": {k: json_number(k, v) for k, v in self.metrics[key].items()},
                }
                for key in self.sessions
            ],
            "baseline": None
            if self.baseline is None
            else {
                "file": self.baseline,
                "tolerance": self.tolerance,
                "compared": self.baseline_compared,
                "regressions": [r.as_dict() for r in self.regressions],
            },
            "errors": list(self.errors),
            "unmatched_paths": list(self.unmatched),
            "read": self.read,
        }


def _matches(patterns: Sequence[str], values: Iterable[str | None]) -> bool:
    vals = [v for v in values if v]
    return any(fnmatch.fnmatchcase(v, p) for p in patterns for v in vals)


def _rules_for(
    rules: Sequence[Rule], metric: str, projects: Sequence[str | None], models: Sequence[str], user: str
) -> list[Rule]:
    """The rules of one metric that apply to a subject: the scoped ones that match, else the unscoped ones
    (a scoped rule replaces the unscoped rule for what it covers)."""
    mine = [r for r in rules if r.metric == metric]
    scoped = [
        r
        for r in mine
        if r.scoped
        and (not r.projects or _matches(r.projects, projects))
        and (not r.models or _matches(r.models, models))
        and (not r.users or _matches(r.users, (user,)))
    ]
    return scoped or [r for r in mine if not r.scoped]


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    kind = METRICS[metric].kind
    if kind == "share":
        return f"{value * 100:.1f}%"
    if kind == "cost":
        return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
    return f"{value:,.0f}"


def format_value(metric: str, value: float | None) -> str:
    """A metric's value as the reports show it (tokens with separators, shares as %, costs in USD)."""
    return _fmt(metric, value)


@dataclass(slots=True)
class _Measure:
    value: float | None
    offender: str | None = None
    note: str = ""  # why there is no value


class _Families:
    """Each frame split once by root session (a session with its subagents), instead of one filter of the
    whole corpus per session and rule."""

    def __init__(self, corpus: Corpus) -> None:
        roots = corpus.sessions.select("session_key", "root_session_key")

        def split(df: pl.DataFrame) -> tuple[dict[Any, pl.DataFrame], pl.DataFrame]:
            if "root_session_key" not in df.columns:
                df = df.join(roots, on="session_key", how="left")
            return df.partition_by("root_session_key", as_dict=True), df.clear()

        self.requests, self._no_requests = split(corpus.requests)
        self.turns, self._no_turns = split(corpus.turns)
        self.tools, self._no_tools = split(corpus.tool_calls)
        self.messages, self._no_messages = split(corpus.messages)

    def of(self, key: str) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        k = (key,)
        return (
            self.requests.get(k, self._no_requests),
            self.turns.get(k, self._no_turns),
            self.tools.get(k, self._no_tools),
            self.messages.get(k, self._no_messages),
        )


def _session_measures(
    corpus: Corpus,
    key: str,
    row: Mapping[str, Any],
    models: Sequence[str] | None,
    families: _Families | None = None,
) -> dict[str, _Measure]:
    """Every session metric of one root session (and its subagents), optionally restricted to models."""
    req, turns, tools, msgs = (families or _Families(corpus)).of(key)
    if models is not None:
        req = req.filter(pl.col("model").is_in(list(models)))
    out: dict[str, _Measure] = {}

    def where(r: Mapping[str, Any]) -> str:
        sub = f" of subagent {r['session']}" if r["session_key"] != key else ""
        return f"turn {r['turn']}{sub}"

    total = int(req.get_column("total").sum() or 0) if models is not None else int(row["total"] or 0)
    top_turn = None
    if req.height:
        per_turn = (
            req.group_by("session_key", "session", "turn")
            .agg(pl.col("total").sum())
            .sort("total", "session_key", "turn", descending=[True, False, False])
        )
        top_turn = per_turn.row(0, named=True)
    out["max-session-tokens"] = _Measure(
        float(total), f"{where(top_turn)} ({plural(top_turn['total'], 'token')})" if top_turn else None
    )
    if models is None and turns.height:
        t = turns.sort("total", "session_key", "turn", descending=[True, False, False]).row(0, named=True)
        out["max-turn-tokens"] = _Measure(float(t["total"]), where(t))
    elif top_turn:
        out["max-turn-tokens"] = _Measure(float(top_turn["total"]), where(top_turn))
    else:
        out["max-turn-tokens"] = _Measure(0.0)
    if req.height:
        r = req.sort("total", "position", descending=[True, False]).row(0, named=True)
        out["max-request-tokens"] = _Measure(float(r["total"]), f"{where(r)}, request {r['message_id']}")
        c = req.sort("context_share", "position", descending=[True, False], nulls_last=True).row(
            0, named=True
        )
        out["max-context-share"] = _Measure(
            c["context_share"],
            f"{where(c)}, request {c['message_id']} "
            f"({c['input']:,} of {plural(c['context_limit'], 'token')})",
        )
        costs = req.get_column("cost")
        cost = None if costs.null_count() else float(costs.sum())
        unknown = sorted({m or "(unknown)" for m in req.filter(pl.col("cost").is_null()).get_column("model")})
        out["max-session-cost"] = _Measure(
            cost, None, "" if cost is not None else "no price known for " + ", ".join(unknown)
        )
        inp = int(req.get_column("input").sum() or 0)
        cached = int(req.get_column("cached").sum() or 0)
        ratio = cache_ratio(cached, inp)
        out["min-cache-ratio"] = _Measure(ratio, None, "" if ratio is not None else "no input tokens")
    else:
        out["max-request-tokens"] = _Measure(0.0)
        out["max-context-share"] = _Measure(0.0)
        out["max-session-cost"] = _Measure(0.0)
        out["min-cache-ratio"] = _Measure(None, None, "no requests")
    out["max-compressions"] = _Measure(float(row.get("compressions") or 0))
    # Both sides measured the same way: bytes of the JSON as stored in the session file.
    result_bytes = int(tools.get_column("result_bytes").sum() or 0)
    content_bytes = int(msgs.get_column("content_bytes").sum() or 0)
    stored = result_bytes + content_bytes
    share = result_bytes / stored if stored else 0.0
    top_tool = None
    if tools.height and result_bytes:
        tt = tools.sort("result_bytes", "session_key", "turn", descending=[True, False, False]).row(
            0, named=True
        )
        top_tool = f"{tt['name']} in {where(tt)} ({plural(tt['result_bytes'], 'byte')})"
    out["max-tool-output-share"] = _Measure(share, top_tool)
    return out


@dataclass(frozen=True, slots=True)
class Baseline:
    """An earlier ``--format json`` report (``load_baseline``), read from ``source``, and how much worse a
    metric may get (``--tolerance``)."""

    doc: dict[str, Any]
    tolerance: float
    source: str


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """What to check: ``rules`` on the sessions ``filters`` (``frames.filter_corpus`` keywords) keep, days
    in ``timezone``, against ``baseline``; what a check quotes is redacted unless ``show_secrets``."""

    rules: Sequence[Rule]
    filters: Mapping[str, Any] = field(default_factory=dict)
    timezone: str | None = None
    baseline: Baseline | None = None
    show_secrets: bool = False


def audit_corpus(corpus: Corpus, query: AuditQuery, *, warn: Callable[[str], None]) -> AuditReport:
    """``ctxtool audit``'s report: the checks of ``query`` on ``corpus`` and, with a baseline, the metrics
    that regressed. ``warn`` hears what reading met; no session left to audit is an error."""
    corpus = filter_corpus(corpus, **query.filters)
    for warning in read_warnings(corpus):
        warn(warning)
    if corpus.sessions.height == 0:
        problems = describe_problems(problem_counts(corpus.problems))
        raise CtxtoolError(
            "no session to audit"
            + (f" ({problems})" if problems else "")
            + (
                " matches the --since/--until/--project/--session/--model filters"
                if any(query.filters.values())
                else ""
            ),
            "Check the PATHS (or GEMINI_CLI_HOME); Gemini CLI writes <home>/.gemini/tmp/<project>/chats",
        )
    result = run_audit(corpus, query.rules, timezone=query.timezone)
    if not query.show_secrets:  # what a check quotes (a command, a path) may hold a key: never in a CI log
        from ctxtool.common.secret_scan import redact

        result.checks = [
            replace(c, message=redact(c.message), offender=redact(c.offender) if c.offender else c.offender)
            for c in result.checks
        ]
    if query.baseline is not None:
        base = query.baseline
        result = compare_baseline(result, base.doc, base.tolerance, base.source)
    return result


def run_audit(corpus: Corpus, rules: Sequence[Rule], *, timezone: str | None = None) -> AuditReport:
    """Apply ``rules`` to every root session of ``corpus`` (and to each day for max-daily-cost: a UTC day,
    or one of ``timezone``, an IANA name)."""
    sessions = report(corpus, "session")
    key_of = dict(
        zip(corpus.sessions.get_column("file"), corpus.sessions.get_column("session_key"), strict=True)
    )
    dirs = dict(
        zip(corpus.sessions.get_column("session_key"), corpus.sessions.get_column("project_dir"), strict=True)
    )

    checks: list[Check] = []
    metrics: dict[str, dict[str, float | None]] = {}
    info: dict[str, dict[str, Any]] = {}
    families = _Families(corpus)
    me = identity().user  # local sessions are this user's; a dataset's rows say whose they are
    users = (
        dict(zip(corpus.sessions.get_column("session_key"), corpus.sessions.get_column("user"), strict=True))
        if "user" in corpus.sessions.columns
        else {}
    )
    for row in sessions.iter_rows(named=True):
        key = key_of[row["file"]]
        models = [m for m in (row["models"] or "").split(",") if m]
        projects = [row["project"], dirs.get(key)]
        info[key] = {
            "session": row["session"],
            "session_id": row["session_id"],
            "project": row["project"],
            "file": row["file"],
            "models": models,
        }
        measures = _session_measures(corpus, key, row, None, families)
        if any(r.metric == "max-secrets" for r in rules):  # reads the whole file: only when asked
            measures["max-secrets"] = _secrets_measure(row["file"])
        metrics[key] = {name: m.value for name, m in measures.items() if name != "max-daily-cost"}
        for metric in METRICS:
            if metric == "max-daily-cost":
                continue
            for rule in _rules_for(rules, metric, projects, models, users.get(key) or me):
                measure = (
                    _session_measures(corpus, key, row, _models_matching(rule.models, models), families)[
                        metric
                    ]
                    if rule.models
                    else measures[metric]
                )
                checks.append(
                    _check(rule, measure, row["session"], row["session_id"], row["project"], row["file"])
                )

    summary: dict[str, float | None] = {}
    for metric, m in METRICS.items():
        values = [x for v in metrics.values() if (x := v.get(metric)) is not None]
        summary[metric] = None if not values else (max(values) if m.lower_is_better else min(values))
    daily = _daily_costs(corpus, None, None, timezone)
    summary["max-daily-cost"] = max((c for _, c in daily if c is not None), default=None) if daily else None
    for rule in [r for r in rules if r.metric == "max-daily-cost"]:
        for user in _users_of(corpus, rule, me):  # a rule for users: each one's days apart
            scoped = (
                _daily_costs(corpus, rule.projects or None, rule.models or None, timezone, user)
                if rule.scoped
                else daily
            )
            for day, cost in scoped:
                subject = day if user is None else f"{day} {user}"
                measure = _Measure(cost, None, "" if cost is not None else "no price known")
                checks.append(_check(rule, measure, subject, None, None, None))

    summary_read = read_summary(corpus)
    errors = list(summary_read["errors"])
    unmatched = [*summary_read["missing_paths"], *summary_read["empty_folders"]]
    return AuditReport(
        list(rules), checks, metrics, info, summary, summary_read, errors=errors, unmatched=unmatched
    )


def _secrets_measure(file: str | None) -> _Measure:
    """How many secrets a session file holds (every record, billed view), and where: the message and the
    kinds, never a value."""
    from ctxtool.common.secret_scan import in_messages
    from ctxtool.session.read import read_session

    if file is None:
        return _Measure(None, note="no file")
    try:
        session = read_session(file)
    except (CtxtoolError, OSError) as exc:
        return _Measure(None, note=f"cannot be read: {exc}")
    found = in_messages(session.billed)
    if not found:
        return _Measure(0.0)
    kinds = sorted({f.kind for f in found})
    return _Measure(float(len(found)), f"message {found[0].message_id}: {', '.join(kinds)}")


def _models_matching(patterns: Sequence[str], models: Sequence[str]) -> list[str]:
    return [m for m in models if any(fnmatch.fnmatchcase(m, p) for p in patterns)]


def _check(
    rule: Rule, measure: _Measure, subject: str, session_id: str | None, project: str | None, file: str | None
) -> Check:
    value = measure.value
    metric = METRICS[rule.metric]
    if value is None:
        status: CheckStatus = "skip"
        message = f"{rule.metric}: not measured ({measure.note or 'no data'})"
    else:
        over = value < rule.limit if not metric.lower_is_better else value > rule.limit
        status = "fail" if over else "pass"
        relation = ("<" if over else "≥") if not metric.lower_is_better else (">" if over else "≤")
        message = f"{rule.metric}: {_fmt(rule.metric, value)} {relation} {_fmt(rule.metric, rule.limit)}"
        if measure.offender:
            message += f" (worst: {measure.offender})"
    return Check(
        rule=rule.metric,
        subject=subject,
        session_id=session_id,
        project=project,
        file=file,
        status=status,
        value=value,
        limit=rule.limit,
        offender=measure.offender,
        message=message,
        scope=rule.scope,
    )


def _users_of(corpus: Corpus, rule: Rule, me: str) -> list[str | None]:
    """The users a daily rule is checked for, each apart: those of ``rule.users`` the sessions have; [None]
    (every user together) for a rule that names none."""
    if not rule.users:
        return [None]
    have = (
        set(corpus.sessions.get_column("user").drop_nulls()) if "user" in corpus.sessions.columns else set()
    )
    return sorted(u for u in (have or {me}) if _matches(rule.users, (u,)))


def _daily_costs(
    corpus: Corpus,
    projects: Sequence[str] | None,
    models: Sequence[str] | None,
    timezone: str | None = None,
    user: str | None = None,
) -> list[tuple[str, float | None]]:
    req = corpus.requests
    if user is not None and "user" in corpus.sessions.columns:
        mine = corpus.sessions.filter(pl.col("user") == user).get_column("session_key")
        req = req.filter(pl.col("session_key").is_in(mine.implode()))
    if projects:
        keys = [
            k
            for k, name, folder in corpus.sessions.select("session_key", "project", "project_dir").iter_rows()
            if _matches(projects, (name, folder))
        ]
        req = req.filter(pl.col("session_key").is_in(keys))
    if models:
        names = [m for m in req.get_column("model").unique().to_list() if m and _matches(models, (m,))]
        req = req.filter(pl.col("model").is_in(names))
    if req.height == 0:
        return []
    days = (
        req.with_columns(
            day=(pl.col("ts").dt.convert_time_zone(timezone) if timezone else pl.col("ts")).dt.date()
        )
        .filter(pl.col("day").is_not_null())
        .group_by("day")
        .agg(pl.col("cost").sum(), pl.col("cost").is_null().any().alias("unknown"))
        .sort("day")
    )
    return [
        (r["day"].isoformat(), None if r["unknown"] else float(r["cost"])) for r in days.iter_rows(named=True)
    ]


# --------------------------------------------------------------------------------------------- baseline


def load_baseline(path: Path) -> dict[str, Any]:
    import orjson

    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise CtxtoolError(
            f"--baseline {path}: cannot be read ({exc.strerror or exc})",
            "Pass a report written by `ctxtool audit --format json --output FILE`",
        ) from None
    except orjson.JSONDecodeError:
        raise UsageError(
            f"--baseline {path}: is not JSON", "Pass a report written by `ctxtool audit --format json`"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict) or "schema_version" not in doc:
        raise UsageError(
            f"--baseline {path}: is not a ctxtool audit report",
            "Pass a report written by `ctxtool audit --format json`",
        )
    return doc


def compare_baseline(
    report_: AuditReport, baseline: Mapping[str, Any], tolerance: float, name: str
) -> AuditReport:
    """Regressions of the summary (worst value of each metric) and of each session present in both, by
    session id: a lower-is-better metric regresses when it grows by more than ``tolerance`` of the baseline
    value, min-cache-ratio when it falls by more than that. From a baseline of 0, any growth regresses."""
    regressions: list[Regression] = []
    compared = 0

    def check(metric: str, subject: str, old: Any, new: Any) -> None:
        nonlocal compared
        if metric not in METRICS or not isinstance(old, int | float) or not isinstance(new, int | float):
            return
        compared += 1
        m = METRICS[metric]
        worse = new > old * (1 + tolerance) if m.lower_is_better else new < old * (1 - tolerance)
        if m.lower_is_better and old == 0:
            worse = new > 0
        if worse:
            regressions.append(Regression(metric, subject, float(old), float(new), tolerance))

    for metric, old in (baseline.get("summary") or {}).items():
        check(metric, "summary", old, report_.summary.get(metric))
    old_sessions = {
        s.get("session_id"): s.get("metrics", {})
        for s in baseline.get("sessions") or []
        if isinstance(s, dict) and s.get("session_id")
    }
    for key, info in report_.sessions.items():
        old_metrics = old_sessions.get(info["session_id"])
        if not isinstance(old_metrics, dict):
            continue
        for metric, old in old_metrics.items():
            check(metric, info["session"], old, report_.metrics[key].get(metric))
    return replace(
        report_, regressions=regressions, baseline=name, tolerance=tolerance, baseline_compared=compared
    )


# --------------------------------------------------------------------------------------------- reports


def junit_xml(report_: AuditReport) -> bytes:
    """JUnit XML: one test case per session and rule (classname ``ctxtool.audit.<session>``), one per
    unreadable file (an error) and one per baseline regression (a failure)."""
    suite = ET.Element("testsuite", name="ctxtool audit")
    for c in report_.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"ctxtool.audit.{c.subject}",
            name=c.rule + (f" [{c.scope}]" if c.scope else ""),
            time="0",
        )
        if c.file:
            case.set("file", c.file)
        if c.status == "fail":
            failure = ET.SubElement(case, "failure", message=c.message, type="BudgetExceeded")
            failure.text = c.message
        elif c.status == "skip":
            ET.SubElement(case, "skipped", message=c.message)
        else:
            out = ET.SubElement(case, "system-out")
            out.text = c.message
    for e in report_.errors:
        case = ET.SubElement(suite, "testcase", classname="ctxtool.audit.read", name=e["file"], time="0")
        error = ET.SubElement(case, "error", message=e["message"], type="SessionFormatError")
        error.text = e["message"]
    for e in report_.unmatched:
        case = ET.SubElement(suite, "testcase", classname="ctxtool.audit.read", name=e["path"], time="0")
        error = ET.SubElement(case, "error", message=e["message"], type="NoSessionFound")
        error.text = e["message"]
    for r in report_.regressions:
        case = ET.SubElement(
            suite, "testcase", classname="ctxtool.audit.baseline", name=f"{r.metric} [{r.subject}]", time="0"
        )
        text = regression_text(r)
        failure = ET.SubElement(case, "failure", message=text, type="Regression")
        failure.text = text
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("time", "0")
    root = ET.Element("testsuites", name="ctxtool")
    for attr in ("tests", "failures", "errors", "skipped", "time"):
        root.set(attr, suite.get(attr, "0"))
    root.append(suite)
    return xml_document(root)  # session text may hold anything: markup.escape_xml writes it


def regression_text(r: Regression) -> str:
    change = "from 0" if r.change is None else f"{r.change * 100:+.1f}%"
    return (
        f"{r.metric} [{r.subject}] regressed: {_fmt(r.metric, r.baseline)} → {_fmt(r.metric, r.current)} "
        f"({change}, tolerance {r.tolerance * 100:g}%)"
    )


def verdict(report_: AuditReport) -> str:
    n_fail, n_reg, n_err = len(report_.failures), len(report_.regressions), len(report_.errors)
    n_unmatched = len(report_.unmatched)
    parts = []
    if n_fail:
        parts.append(f"{plural(n_fail, 'budget')} exceeded")
    if n_reg:
        parts.append(plural(n_reg, "regression"))
    if n_err:
        parts.append(f"{plural(n_err, 'file')} unreadable")
    if n_unmatched:
        parts.append(f"{plural(n_unmatched, 'PATH')} without sessions")
    if not parts:
        return f"within budget ({plural(len(report_.checks), 'check')} passed or skipped)"
    return ", ".join(parts)


def markdown(report_: AuditReport) -> str:
    """GitHub-flavoured markdown for ``$GITHUB_STEP_SUMMARY``. Text from the sessions, the paths and the
    baseline is escaped with ``markup.escape_markdown`` (a table row keeps its cells, HTML shows as text)."""
    md = escape_markdown
    failed = report_.exceeded or report_.incomplete
    lines = [f"## ctxtool audit: {'FAIL' if failed else 'PASS'}, {verdict(report_)}", ""]
    if report_.checks:
        lines += ["| status | session | rule | value | limit | worst |", "|---|---|---|---:|---:|---|"]
        for c in sorted(
            report_.checks, key=lambda c: ({"fail": 0, "skip": 1, "pass": 2}[c.status], c.subject)
        ):
            rule = c.rule + (f" ({c.scope})" if c.scope else "")
            lines.append(
                f"| {c.status.upper()} | {md(c.subject)} | {md(rule)} | "
                f"{_fmt(c.rule, c.value)} | {_fmt(c.rule, c.limit)} | {md(c.offender or '')} |"
            )
        lines.append("")
    if report_.baseline is not None:
        lines.append(
            f"Baseline {md(report_.baseline)} (tolerance {(report_.tolerance or 0) * 100:g}%): "
            f"{plural(report_.baseline_compared, 'metric')} compared, {len(report_.regressions)} regressed."
        )
        lines.append("")
        if report_.regressions:
            lines += ["| metric | subject | baseline | now | change |", "|---|---|---:|---:|---:|"]
            for r in report_.regressions:
                change = "from 0" if r.change is None else f"{r.change * 100:+.1f}%"
                lines.append(
                    f"| {md(r.metric)} | {md(r.subject)} | {_fmt(r.metric, r.baseline)} | "
                    f"{_fmt(r.metric, r.current)} | {change} |"
                )
            lines.append("")
    if report_.errors:
        lines.append("Files that could not be read:")
        lines.append("")
        lines += [f"- {md(str(Problem(e['file'], e['message'])))}" for e in report_.errors]
        lines.append("")
    if report_.unmatched:
        lines.append("PATHs that gave no session:")
        lines.append("")
        lines += [f"- {md(str(Problem(e['path'], e['message'])))}" for e in report_.unmatched]
        lines.append("")
    return "\n".join(lines)


def github_annotations(report_: AuditReport) -> list[str]:
    """GitHub Actions workflow commands (``::error …::…``) for failures and regressions, and warnings for
    unreadable files and PATHs that gave no session."""
    out = []
    for c in report_.failures:
        title = workflow_property(f"ctxtool audit: {c.rule}")
        out.append(f"::error title={title}::{workflow_data(f'{c.subject}: {c.message}')}")
    for r in report_.regressions:
        title = workflow_property(f"ctxtool audit: {r.metric} regressed")
        out.append(f"::error title={title}::{workflow_data(regression_text(r))}")
    for e in report_.errors:
        title = workflow_property("ctxtool audit: unreadable file")
        out.append(f"::warning title={title}::{workflow_data(e['message'])}")
    for e in report_.unmatched:
        title = workflow_property("ctxtool audit: no session")
        out.append(f"::warning title={title}::{workflow_data(str(Problem(e['path'], e['message'])))}")
    return out
