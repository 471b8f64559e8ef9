"""Budgets for Gemini CLI sessions: rules in, checks out. Knows nothing about exit codes or terminals.

Owns: the rule set (flags, winning over ``ctxtool.toml`` / ``[tool.ctxtool.audit]``; ``--rule`` choosing
among them) scoped to projects, models and users; every metric measured per session (subagents rolled up into
their parent, as ``ctxtool stats --by session``) or per day, naming the offending turn, request or tool call;
the ``--baseline`` comparison; the audit as the command runs it (``audit_corpus``); and the report formats
that are data (JSON, JUnit XML, markdown, GitHub annotations). The CLI turns an ``AuditReport`` into an exit
status.

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from xml.etree import ElementTree as ET

import polars as pl

from ctxtool.common.errors import CtxtoolError, UsageError, use_one_of
from ctxtool.common.identity import identity
from ctxtool.common.markup import escape_markdown, workflow_data, workflow_property, xml_document
from ctxtool.common.wording import plural
from ctxtool.frames.model import SCHEMA_VERSION, Corpus, Problem
from ctxtool.frames.query import filter_corpus, read_summary, read_warnings, report
from ctxtool.frames.reading import describe_problems, problem_counts
from ctxtool.frames.tally import merged, session_order
from ctxtool.measure.tokens import cache_ratio

Kind = Literal["tokens", "share", "cost", "count"]
CheckStatus = Literal["pass", "fail", "skip"]


@dataclass(frozen=True, slots=True)
class Metric:
    kind: Kind
    lower_is_better: bool = True  # False only for min-cache-ratio


METRICS: dict[str, Metric] = {
    "max-session-tokens": Metric("tokens"),
    "max-turn-tokens": Metric("tokens"),
    "max-request-tokens": Metric("tokens"),
    "max-context-share": Metric("share"),
    "max-session-cost": Metric("cost"),
    "max-daily-cost": Metric("cost"),  # all audited sessions' cost per day (UTC or --timezone)
    "min-cache-ratio": Metric("share", lower_is_better=False),
    "max-compressions": Metric("count"),
    "max-tool-output-share": Metric("share"),
    "max-secrets": Metric("count"),  # secrets (API keys, tokens, private keys) held in a session
}
STATUS_ORDER = {"fail": 0, "skip": 1, "pass": 2}  # how the reports list the checks
_FIX_CONFIG = "See `ctxtool audit --help` and the README section on the configuration file"


@dataclass(frozen=True, slots=True)
class Rule:
    metric: str
    limit: float
    projects: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    users: tuple[str, ...] = ()  # a team's dataset: whose sessions (and days) the rule is for, each apart
    source: str = "flag"  # "flag", or the config file it came from

    @property
    def scoped(self) -> bool:
        return bool(self.projects or self.models or self.users)

    @property
    def scope(self) -> str:
        named = (("projects", self.projects), ("models", self.models), ("users", self.users))
        return "; ".join(f"{name} {','.join(values)}" for name, values in named if values)

    def as_dict(self) -> dict[str, Any]:
        fields = asdict(self)
        return {"rule": fields.pop("metric"), **fields, "limit": json_number(self.metric, self.limit)}


def json_number(metric: str, value: Any) -> Any:
    """A token or count figure as the integer it is (``17528``, not ``17528.0``) in JSON; shares and costs
    stay floats at full precision."""
    m = METRICS.get(metric)
    if m is not None and m.kind in ("tokens", "count") and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_TOKENS_RE = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*$")


def parse_limit(metric: str, value: Any, where: str = "") -> float:
    """A limit as written on the command line or in TOML: ``2_000_000``, ``2M``, ``500k`` (tokens),
    ``60%`` or ``0.6`` (shares), ``5``, ``$5`` or ``2.50`` (USD), ``3`` (counts)."""
    m = METRICS.get(metric)
    if m is None:
        raise UsageError(f"{where}unknown rule {metric!r}", use_one_of(metric, METRICS))
    label = f"{where}{metric} {value!r}"
    if isinstance(value, bool):
        raise UsageError(f"{label} is not a number", _example(metric))
    if m.kind == "share":
        if isinstance(value, str) and value.strip().endswith("%"):
            number = _number(value.strip()[:-1], label, metric) / 100
        else:
            number = _number(value, label, metric)
            if number > 1:
                raise UsageError(f"{label} is a share above 1", f"Write it as a percentage, e.g. {number:g}%")
        if not 0 <= number <= 1:
            raise UsageError(f"{label} is outside 0-100%", _example(metric))
        return number
    if m.kind == "cost":
        text = value.strip().removeprefix("$") if isinstance(value, str) else value
        number = _number(text, label, metric)
    elif m.kind == "tokens" and isinstance(value, str):
        match = _TOKENS_RE.match(value)
        if not match:
            raise UsageError(f"{label} is not a token count", _example(metric))
        scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2).lower()]
        number = float(match.group(1).replace("_", "").replace(",", "")) * scale
    else:
        number = _number(value, label, metric)
    if number < 0:
        raise UsageError(f"{label} is negative", _example(metric))
    return number


def _number(value: Any, label: str, metric: str) -> float:
    try:  # (a bool is refused before: parse_limit)
        number = float(value.strip().replace("_", "") if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise UsageError(f"{label} is not a number", _example(metric)) from None
    if not math.isfinite(number):
        raise UsageError(f"{label} is not a finite number", _example(metric))
    return number


def _example(metric: str) -> str:
    examples = {"tokens": "2000000 or 2M", "share": "60% or 0.6", "cost": "5 or 2.50 (USD)", "count": "3"}
    return f"Write {metric} as e.g. {examples[METRICS[metric].kind]}"


def parse_tolerance(value: str) -> float:
    """``10%`` or ``0.1`` → 0.1."""
    text, fix = value.strip(), "Write it as e.g. 10% or 0.1"
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise UsageError(f"--tolerance {value!r} is not a percentage", fix) from None
    if number < 0 or math.isnan(number) or math.isinf(number):
        raise UsageError(f"--tolerance {value!r} must be 0 or more", fix)
    return number


def find_config(start: Path) -> Path | None:
    """The nearest ``ctxtool.toml``, or ``pyproject.toml`` with ``[tool.ctxtool.audit]``, in ``start`` or a
    parent directory."""
    for folder in [start, *start.parents]:
        candidate = folder / "ctxtool.toml"
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
    pyproject = path.name == "pyproject.toml"
    section = data.get("tool", {}).get("ctxtool", {}).get("audit") if pyproject else data.get("audit")
    where = "[tool.ctxtool.audit]" if pyproject else "[audit]"
    if section is None:
        raise UsageError(f"{path}: has no {where} table", _FIX_CONFIG)
    if not isinstance(section, dict):
        raise UsageError(f"{path}: {where} is not a table", _FIX_CONFIG)
    rules: list[Rule] = []
    prefix = f"{path.name} {where}: "
    for key, value in section.items():
        metric = key.replace("_", "-")
        if metric not in METRICS:
            raise UsageError(f"{prefix}unknown rule {key!r}", use_one_of(key, METRICS))
        entries = value if isinstance(value, list) else [value]
        rules += [_rule_from_toml(metric, entry, prefix, str(path)) for entry in entries]
    return rules


def _rule_from_toml(metric: str, entry: Any, prefix: str, source: str) -> Rule:
    if not isinstance(entry, dict):
        return Rule(metric, parse_limit(metric, entry, prefix), source=source)
    unknown = set(entry) - {"limit", "projects", "models", "users"}
    if unknown:
        names = ("key " if len(unknown) == 1 else "keys ") + ", ".join(sorted(unknown))
        raise UsageError(f"{prefix}{metric} has unknown {names}", "Use limit, projects, models and users")
    if "limit" not in entry:
        raise UsageError(f"{prefix}{metric} has no limit", "Add limit = …")
    scopes: dict[str, tuple[str, ...]] = {}
    for name in ("projects", "models", "users"):
        raw = entry.get(name, [])
        raw = [raw] if isinstance(raw, str) else raw
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise UsageError(f"{prefix}{metric}.{name} is not a list of strings", f'Write {name} = ["…"]')
        scopes[name] = tuple(raw)
    return Rule(metric, parse_limit(metric, entry["limit"], prefix), source=source, **scopes)


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
    """The rules of ``config`` (None: none), ``flags`` merged in; ``only`` (``--rule``) keeps its metrics."""
    rules = merge_rules(load_config(config) if config is not None else [], flags)
    if not only:
        return rules
    unknown = [r for r in only if r not in METRICS]
    if unknown:
        raise UsageError(f"--rule {unknown[0]} is not a budget", use_one_of(unknown[0], list(METRICS)))
    return [r for r in rules if r.metric in only]


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
        value, limit = json_number(self.rule, self.value), json_number(self.rule, self.limit)
        return {**asdict(self), "value": value, "limit": limit}


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
                {**info, "metrics": {k: json_number(k, v) for k, v in self.metrics[key].items()}}
                for key, info in self.sessions.items()
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

    def fits(r: Rule) -> bool:
        wanted = ((r.projects, projects), (r.models, models), (r.users, (user,)))
        return r.scoped and all(not patterns or _matches(patterns, values) for patterns, values in wanted)

    return [r for r in mine if fits(r)] or [r for r in mine if not r.scoped]


def _fmt(metric: str, value: float | None) -> str:
    """A metric's value as the reports show it (tokens with separators, shares as %, costs in USD)."""
    if value is None:
        return "n/a"
    kind = METRICS[metric].kind
    if kind == "share":
        return f"{value * 100:.1f}%"
    if kind == "cost":
        return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
    return f"{value:,.0f}"


format_value = _fmt  # the public name, for the CLI and the renderer


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
        self.parts: list[tuple[dict[Any, pl.DataFrame], pl.DataFrame]] = []  # by root key, and none
        for df in (corpus.requests, corpus.turns, corpus.tool_calls, corpus.messages):
            if "root_session_key" not in df.columns:
                df = df.join(roots, on="session_key", how="left")
            self.parts.append((df.partition_by("root_session_key", as_dict=True), df.clear()))

    def of(self, key: str) -> tuple[pl.DataFrame, ...]:
        """The requests, turns, tool calls and messages of the root session ``key``."""
        return tuple(parts.get((key,), empty) for parts, empty in self.parts)


def _session_measures(
    families: _Families, key: str, row: Mapping[str, Any], models: Sequence[str] | None
) -> dict[str, _Measure]:
    """Every session metric of one root session (and its subagents), optionally restricted to models."""
    req, turns, tools, msgs = families.of(key)
    if models is not None:
        req = req.filter(pl.col("model").is_in(list(models)))
    out: dict[str, _Measure] = {}

    def where(r: Mapping[str, Any]) -> str:
        sub = f" of subagent {r['session']}" if r["session_key"] != key else ""
        return f"turn {r['turn']}{sub}"

    def top(df: pl.DataFrame, *by: str, nulls_last: bool = False) -> dict[str, Any]:
        """The row of the largest ``by[0]``, ties to the first by the rest."""
        ranked = df.sort(*by, descending=[True] + [False] * (len(by) - 1), nulls_last=nulls_last)
        return ranked.row(0, named=True)

    total = int(req.get_column("total").sum() or 0) if models is not None else int(row["total"] or 0)
    per_turn = req.group_by("session_key", "session", "turn").agg(pl.col("total").sum())
    top_turn = top(per_turn, "total", "session_key", "turn") if req.height else None
    worst = f"{where(top_turn)} ({plural(top_turn['total'], 'token')})" if top_turn else None
    out["max-session-tokens"] = _Measure(float(total), worst)
    t = top(turns, "total", "session_key", "turn") if models is None and turns.height else top_turn
    out["max-turn-tokens"] = _Measure(float(t["total"]), where(t)) if t else _Measure(0.0)
    if req.height:
        r = top(req, "total", "position")
        out["max-request-tokens"] = _Measure(float(r["total"]), f"{where(r)}, request {r['message_id']}")
        c = top(req, "context_share", "position", nulls_last=True)
        of = f"({c['input']:,} of {plural(c['context_limit'], 'token')})"
        out["max-context-share"] = _Measure(c["context_share"], f"{where(c)}, request {c['message_id']} {of}")
        costs = req.get_column("cost")
        # (the cost ``stats --by session`` shows: every request priced, else not measured)
        cost = None if costs.null_count() else row["cost"] if models is None else math.fsum(costs)
        unknown = sorted({m or "(unknown)" for m in req.filter(pl.col("cost").is_null()).get_column("model")})
        note = "" if cost is not None else "no price known for " + ", ".join(unknown)
        out["max-session-cost"] = _Measure(cost, None, note)
        ratio = cache_ratio(*(int(req.get_column(c).sum() or 0) for c in ("cached", "input")))
        out["min-cache-ratio"] = _Measure(ratio, None, "" if ratio is not None else "no input tokens")
    else:
        out |= {m: _Measure(0.0) for m in ("max-request-tokens", "max-context-share", "max-session-cost")}
        out["min-cache-ratio"] = _Measure(None, None, "no requests")
    out["max-compressions"] = _Measure(float(row.get("compressions") or 0))
    # Both sides measured the same way: bytes of the JSON as stored in the session file.
    result_bytes = int(tools.get_column("result_bytes").sum() or 0)
    stored = result_bytes + int(msgs.get_column("content_bytes").sum() or 0)
    share = result_bytes / stored if stored else 0.0
    top_tool = None
    if tools.height and result_bytes:
        tt = top(tools, "result_bytes", "session_key", "turn")
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


def audit_corpus(
    corpora: Corpus | Iterable[Corpus], query: AuditQuery, *, warn: Callable[[str], None]
) -> AuditReport:
    """``ctxtool audit``'s report: the checks of ``query`` on ``corpora`` (a corpus, or the batches of whole
    families ``export.dataset_families`` reads) and, with a baseline, the metrics that regressed. ``warn``
    hears what reading met; no session left to audit is an error."""
    batches = [corpora] if isinstance(corpora, Corpus) else corpora
    result, seen = _audited((filter_corpus(c, **query.filters) for c in batches), query.rules, query.timezone)
    for warning in read_warnings(seen):
        warn(warning)
    if seen.sessions.height == 0:
        problems = describe_problems(problem_counts(seen.problems))
        filtered = any(query.filters.values())
        raise CtxtoolError(
            "no session to audit"
            + (f" ({problems})" if problems else "")
            + (" matches the --since/--until/--project/--session/--model filters" if filtered else ""),
            "Check the PATHS (or GEMINI_CLI_HOME); Gemini CLI writes <home>/.gemini/tmp/<project>/chats",
        )
    if not query.show_secrets:  # what a check quotes (a command, a path) may hold a key: never in a CI log
        from ctxtool.common.secret_scan import redact

        result.checks = [
            replace(c, message=redact(c.message), offender=redact(c.offender) if c.offender else c.offender)
            for c in result.checks
        ]
    base = query.baseline
    return result if base is None else compare_baseline(result, base.doc, base.tolerance, base.source)


def run_audit(
    corpora: Corpus | Iterable[Corpus], rules: Sequence[Rule], *, timezone: str | None = None
) -> AuditReport:
    """Apply ``rules`` to every root session of ``corpora`` (and to each day for max-daily-cost: a UTC day,
    or one of ``timezone``, an IANA name)."""
    return _audited([corpora] if isinstance(corpora, Corpus) else corpora, rules, timezone)[0]


# What the daily checks read of the sessions and requests audited, kept of each batch.
_DAILY = (("session_key", "user", "project", "project_dir"), ("session_key", "ts", "cost", "model"))


def _audited(
    batches: Iterable[Corpus], rules: Sequence[Rule], timezone: str | None
) -> tuple[AuditReport, Corpus]:
    """``run_audit``, and what it saw: the sessions and requests the daily checks read, with the tally of
    what was read (its sessions' rows alone)."""
    entries: list[tuple[Any, str, list[Check], dict[str, float | None], dict[str, Any]]] = []
    kept: list[tuple[pl.DataFrame, pl.DataFrame]] = []
    tallies = []
    me = identity().user  # local sessions are this user's; a dataset's rows say whose they are
    for corpus in batches:
        entries += _session_checks(corpus, rules, me)
        have = corpus.sessions.columns
        kept.append(
            (corpus.sessions.select(c for c in _DAILY[0] if c in have), corpus.requests.select(_DAILY[1]))
        )
        tallies.append(merged([corpus.tally]))  # (its rows alone: not every batch's columns at once)
    # (in the order of ``stats --by session``, whatever the batches)
    entries.sort(key=lambda e: e[0])
    checks = [c for e in entries for c in e[2]]
    metrics = {e[1]: e[3] for e in entries}
    info = {e[1]: e[4] for e in entries}
    sessions, requests = (pl.concat([k[i] for k in kept], how="diagonal_relaxed") for i in (0, 1))
    seen = Corpus(
        sessions, requests.clear(), requests, requests.clear(), requests.clear(), tally=merged(tallies)
    )
    seen.problems = seen.tally.problems

    summary: dict[str, float | None] = {}
    for metric, m in METRICS.items():
        values = [x for v in metrics.values() if (x := v.get(metric)) is not None]
        summary[metric] = None if not values else (max(values) if m.lower_is_better else min(values))
    daily = _daily_costs(seen, timezone)
    summary["max-daily-cost"] = max((c for _, c in daily if c is not None), default=None)
    for rule in [r for r in rules if r.metric == "max-daily-cost"]:
        for user in _users_of(seen, rule, me):  # a rule for users: each one's days apart
            for day, cost in _daily_costs(seen, timezone, rule, user) if rule.scoped else daily:
                subject = day if user is None else f"{day} {user}"
                measure = _Measure(cost, None, "" if cost is not None else "no price known")
                checks.append(_check(rule, measure, subject, None, None, None))

    read = read_summary(seen)
    unmatched = [*read["missing_paths"], *read["empty_folders"]]
    report_ = AuditReport(list(rules), checks, metrics, info, summary, read, list(read["errors"]), unmatched)
    return report_, seen


def _session_checks(
    corpus: Corpus, rules: Sequence[Rule], me: str
) -> list[tuple[Any, str, list[Check], dict[str, float | None], dict[str, Any]]]:
    """Each root session's checks, metrics and what names it, after the key ``stats --by session`` orders
    its rows by."""
    sessions = report(corpus, "session")
    column = corpus.sessions.get_column
    key_of = dict(zip(column("file"), column("session_key"), strict=True))
    dirs = dict(zip(column("session_key"), column("project_dir"), strict=True))
    families = _Families(corpus)
    has_user = "user" in corpus.sessions.columns
    users = dict(zip(column("session_key"), column("user"), strict=True)) if has_user else {}
    out = []
    for row in sessions.iter_rows(named=True):
        key = key_of[row["file"]]
        models = [m for m in (row["models"] or "").split(",") if m]
        projects = [row["project"], dirs.get(key)]
        info = {**{k: row[k] for k in ("session", "session_id", "project", "file")}, "models": models}
        measures = _session_measures(families, key, row, None)
        if any(r.metric == "max-secrets" for r in rules):  # reads the whole file: only when asked
            measures["max-secrets"] = _secrets_measure(row["file"])
        where = (row["session"], row["session_id"], row["project"], row["file"])
        checks = []
        for metric in [m for m in METRICS if m != "max-daily-cost"]:
            for rule in _rules_for(rules, metric, projects, models, users.get(key) or me):
                measure = measures[metric]
                if rule.models:
                    only = [m for m in models if _matches(rule.models, (m,))]
                    measure = _session_measures(families, key, row, only)[metric]
                checks.append(_check(rule, measure, *where))
        out.append(
            (
                session_order(row["start"], row["session"], key),
                key,
                checks,
                {name: m.value for name, m in measures.items()},
                info,
            )
        )
    return out


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
    where = (subject, session_id, project, file)
    return Check(rule.metric, *where, status, value, rule.limit, measure.offender, message, rule.scope)


def _users_of(corpus: Corpus, rule: Rule, me: str) -> list[str | None]:
    """The users a daily rule is checked for, each apart: those of ``rule.users`` the sessions have; [None]
    (every user together) for a rule that names none."""
    if not rule.users:
        return [None]
    sessions = corpus.sessions
    have = set(sessions.get_column("user").drop_nulls()) if "user" in sessions.columns else set()
    return sorted(u for u in (have or {me}) if _matches(rule.users, (u,)))


def _daily_costs(
    corpus: Corpus, timezone: str | None, rule: Rule | None = None, user: str | None = None
) -> list[tuple[str, float | None]]:
    """The cost of each day (of ``timezone``) of the requests ``rule``'s scope and ``user`` keep."""
    req = corpus.requests
    if user is not None and "user" in corpus.sessions.columns:
        mine = corpus.sessions.filter(pl.col("user") == user).get_column("session_key")
        req = req.filter(pl.col("session_key").is_in(mine.implode()))
    if rule is not None and rule.projects:
        rows = corpus.sessions.select("session_key", "project", "project_dir").iter_rows()
        keys = [k for k, name, folder in rows if _matches(rule.projects, (name, folder))]
        req = req.filter(pl.col("session_key").is_in(keys))
    if rule is not None and rule.models:
        names = [m for m in req.get_column("model").unique().to_list() if m and _matches(rule.models, (m,))]
        req = req.filter(pl.col("model").is_in(names))
    if req.height == 0:
        return []
    ts = pl.col("ts").dt.convert_time_zone(timezone) if timezone else pl.col("ts")
    days = (
        req.with_columns(day=ts.dt.date())
        .filter(pl.col("day").is_not_null())
        .group_by("day")
        .agg(pl.col("cost"), pl.col("cost").is_null().any().alias("unknown"))
        .sort("day")
    )  # (summed as ``stats --by day`` sums: math.fsum)
    return [
        (day.isoformat(), None if unknown else math.fsum(costs)) for day, costs, unknown in days.iter_rows()
    ]


def load_baseline(path: Path) -> dict[str, Any]:
    import orjson

    fix = "Pass a report written by `ctxtool audit --format json`"
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise CtxtoolError(
            f"--baseline {path}: cannot be read ({exc.strerror or exc})",
            "Pass a report written by `ctxtool audit --format json --output FILE`",
        ) from None
    except orjson.JSONDecodeError:
        raise UsageError(f"--baseline {path}: is not JSON", fix) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict) or "schema_version" not in doc:
        raise UsageError(f"--baseline {path}: is not a ctxtool audit report", fix)
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


def junit_xml(report_: AuditReport) -> bytes:
    """JUnit XML: one test case per session and rule (classname ``ctxtool.audit.<session>``), one per
    unreadable file (an error) and one per baseline regression (a failure)."""
    suite = ET.Element("testsuite", name="ctxtool audit")

    def case(classname: str, name: str) -> ET.Element:
        return ET.SubElement(suite, "testcase", classname=f"ctxtool.audit.{classname}", name=name, time="0")

    for c in report_.checks:
        check = case(c.subject, c.rule + (f" [{c.scope}]" if c.scope else ""))
        if c.file:
            check.set("file", c.file)
        if c.status == "fail":
            ET.SubElement(check, "failure", message=c.message, type="BudgetExceeded").text = c.message
        elif c.status == "skip":
            ET.SubElement(check, "skipped", message=c.message)
        else:
            ET.SubElement(check, "system-out").text = c.message
    for entries, key, kind in (
        (report_.errors, "file", "SessionFormatError"),
        (report_.unmatched, "path", "NoSessionFound"),
    ):
        for e in entries:
            ET.SubElement(case("read", e[key]), "error", message=e["message"], type=kind).text = e["message"]
    for r in report_.regressions:
        text = regression_text(r)
        failed = case("baseline", f"{r.metric} [{r.subject}]")
        ET.SubElement(failed, "failure", message=text, type="Regression").text = text
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attr, str(sum(1 for c in cases if c.find(tag) is not None)))
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
    counts = (
        (report_.failures, "budget", " exceeded"),
        (report_.regressions, "regression", ""),
        (report_.errors, "file", " unreadable"),
        (report_.unmatched, "PATH", " without sessions"),
    )
    parts = [plural(len(items), word) + tail for items, word, tail in counts if items]
    checks = plural(len(report_.checks), "check")
    return ", ".join(parts) if parts else f"within budget ({checks} passed or skipped)"


def markdown(report_: AuditReport) -> str:
    """GitHub-flavoured markdown for ``$GITHUB_STEP_SUMMARY``. Text from the sessions, the paths and the
    baseline is escaped with ``markup.escape_markdown`` (a table row keeps its cells, HTML shows as text)."""
    md = escape_markdown
    failed = report_.exceeded or report_.incomplete
    lines = [f"## ctxtool audit: {'FAIL' if failed else 'PASS'}, {verdict(report_)}", ""]
    if report_.checks:
        lines += ["| status | session | rule | value | limit | worst |", "|---|---|---|---:|---:|---|"]
        for c in sorted(report_.checks, key=lambda c: (STATUS_ORDER[c.status], c.subject)):
            rule = c.rule + (f" ({c.scope})" if c.scope else "")
            lines.append(
                f"| {c.status.upper()} | {md(c.subject)} | {md(rule)} | "
                f"{_fmt(c.rule, c.value)} | {_fmt(c.rule, c.limit)} | {md(c.offender or '')} |"
            )
        lines.append("")
    if report_.baseline is not None:
        lines += [
            f"Baseline {md(report_.baseline)} (tolerance {(report_.tolerance or 0) * 100:g}%): "
            f"{plural(report_.baseline_compared, 'metric')} compared, {len(report_.regressions)} regressed.",
            "",
        ]
        if report_.regressions:
            lines += ["| metric | subject | baseline | now | change |", "|---|---|---:|---:|---:|"]
            for r in report_.regressions:
                change = "from 0" if r.change is None else f"{r.change * 100:+.1f}%"
                lines.append(
                    f"| {md(r.metric)} | {md(r.subject)} | {_fmt(r.metric, r.baseline)} | "
                    f"{_fmt(r.metric, r.current)} | {change} |"
                )
            lines.append("")
    for heading, entries, key in (
        ("Files that could not be read:", report_.errors, "file"),
        ("PATHs that gave no session:", report_.unmatched, "path"),
    ):
        if entries:
            lines += [heading, "", *(f"- {md(str(Problem(e[key], e['message'])))}" for e in entries), ""]
    return "\n".join(lines)


def github_annotations(report_: AuditReport) -> list[str]:
    """GitHub Actions workflow commands (``::error …::…``) for failures and regressions, and warnings for
    unreadable files and PATHs that gave no session."""
    notes = [
        *(("error", c.rule, f"{c.subject}: {c.message}") for c in report_.failures),
        *(("error", f"{r.metric} regressed", regression_text(r)) for r in report_.regressions),
        *(("warning", "unreadable file", e["message"]) for e in report_.errors),
        *(("warning", "no session", str(Problem(e["path"], e["message"]))) for e in report_.unmatched),
    ]
    return [
        f"::{level} title={workflow_property('ctxtool audit: ' + title)}::{workflow_data(text)}"
        for level, title, text in notes
    ]
