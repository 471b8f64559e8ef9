"""``ctxtool audit``: check sessions against token, context, cost and cache budgets (for CI)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import CtxtoolError, UsageError, use_one_of
from ctxtool.common.wording import plural

if TYPE_CHECKING:
    from ctxtool.audit import AuditReport

FORMATS = ("table", "json", "junit", "markdown")

HELP = """Check Gemini CLI sessions against budgets: tokens per session, turn and request, context-window
share, cost per session and per day, cache ratio, compressions and the share of tool output.

PATHS are session files, directories or globs, as for `ctxtool stats` (default: the Gemini CLI data root).
Budgets come from the flags or from a configuration file: --config FILE, else the nearest ctxtool.toml
([audit] table) or pyproject.toml ([tool.ctxtool.audit] table) in the current directory or a parent; a flag
replaces the configured rules of its metric. In the file each rule can be scoped to projects or models.
Limits: tokens as 2000000 or 2M, shares as 60% or 0.6, costs in USD.

Examples:

\b
  ctxtool audit --max-session-tokens 2M --max-context-share 50%
  ctxtool audit .gemini/tmp --output audit.xml --github     # JUnit for CI, annotations on stdout
  ctxtool audit --baseline main-audit.json --tolerance 10% --all

Exit status: 0 within budget; 3 a budget was exceeded or a metric regressed past --tolerance (this wins
over 1); 1 an error (a session file could not be read, or no session was found); 2 usage error.
"""


def _limit(metric: str, value: str | None) -> float | None:
    from ctxtool.audit import parse_limit

    return None if value is None else parse_limit(metric, value, "--")


def audit(
    paths: list[str] = typer.Argument(
        None,
        help="Session files, directories, globs or session ids (a unique prefix of 4+ characters; "
        "default: the data root).",
    ),
    max_session_tokens: str = typer.Option(
        None, "--max-session-tokens", help="Total tokens of a session, subagents included (e.g. 2M)."
    ),
    max_turn_tokens: str = typer.Option(None, "--max-turn-tokens", help="Total tokens of one turn."),
    max_request_tokens: str = typer.Option(None, "--max-request-tokens", help="Total tokens of one request."),
    max_context_share: str = typer.Option(
        None, "--max-context-share", help="One request's prompt over the model's context window (e.g. 50%)."
    ),
    max_session_cost: str = typer.Option(None, "--max-session-cost", help="Cost of a session in USD."),
    max_daily_cost: str = typer.Option(
        None, "--max-daily-cost", help="Cost of all audited sessions per UTC day in USD."
    ),
    min_cache_ratio: str = typer.Option(
        None, "--min-cache-ratio", help="Cached over input tokens of a session, at least (e.g. 30%)."
    ),
    max_compressions: str = typer.Option(
        None, "--max-compressions", help="Compression events in a session, at most."
    ),
    max_tool_output_share: str = typer.Option(
        None,
        "--max-tool-output-share",
        help="Size of tool results (stored JSON) over that plus all message text of a session (e.g. 70%).",
    ),
    max_secrets: str = typer.Option(
        None,
        "--max-secrets",
        help="Secrets (API keys, tokens, private keys) a session may hold, at most (0: none); a failure "
        "names the session, the message and the kind, never the value.",
    ),
    config: Path = typer.Option(
        None, "--config", "-c", help="Read budgets from this TOML file (ctxtool.toml or pyproject.toml)."
    ),
    no_config: bool = typer.Option(False, "--no-config", help="Ignore any configuration file."),
    fmt: str = typer.Option(
        None,
        "--format",
        "-f",
        help="table, json, junit or markdown (default: --output's suffix, .xml for junit, else table).",
    ),
    output: Path = typer.Option(None, "--output", "-o", help="Write the report to FILE instead of stdout."),
    github: bool = typer.Option(
        False, "--github", help="Also print GitHub Actions annotations (::error ...) for every failure."
    ),
    baseline: Path = typer.Option(
        None, "--baseline", help="An earlier `ctxtool audit --format json` report to compare with."
    ),
    tolerance: str = typer.Option(
        "10%", "--tolerance", help="With --baseline: how much worse a metric may get (e.g. 10% or 0.1)."
    ),
    subagents: bool = typer.Option(
        True, "--subagents/--no-subagents", help="Include subagent sessions (rolled up into their parent)."
    ),
    show_secrets: bool = options.SHOW_SECRETS,
    show_all: bool = typer.Option(
        False,
        "--all",
        help="Table: list the checks that passed too (default: failures, skips and a summary).",
    ),
    color: options.Color = options.COLOR,
    width: int = options.WIDTH,
    since: str = options.SINCE,
    until: str = options.UNTIL,
    project: list[str] = options.PROJECT,
    session: list[str] = options.SESSION,
    model: list[str] = options.MODEL,
    timezone: str = options.TIMEZONE,
    rule: list[str] = typer.Option(
        None, "--rule", help="Check only this budget (e.g. max-session-cost) of those set; repeatable."
    ),
) -> int:
    from ctxtool import audit as lib
    from ctxtool import frames
    from ctxtool.common.choices import output_format
    from ctxtool.session.discover import default_roots, resolve_session_args

    fmt = output_format(fmt, output, FORMATS, "audit")
    filters = options.filter_args(since, until, project, session, model)
    options.check_timezone(timezone)
    if github and fmt in ("json", "junit") and output is None:
        raise UsageError(
            "--github annotations and a JSON or JUnit report cannot share standard output",
            "Pass --output FILE for the report",
        )
    if config is not None and no_config:
        raise UsageError("--config and --no-config contradict each other", "Pass only one of them")
    flags = {
        "max-session-tokens": _limit("max-session-tokens", max_session_tokens),
        "max-turn-tokens": _limit("max-turn-tokens", max_turn_tokens),
        "max-request-tokens": _limit("max-request-tokens", max_request_tokens),
        "max-context-share": _limit("max-context-share", max_context_share),
        "max-session-cost": _limit("max-session-cost", max_session_cost),
        "max-daily-cost": _limit("max-daily-cost", max_daily_cost),
        "min-cache-ratio": _limit("min-cache-ratio", min_cache_ratio),
        "max-compressions": _limit("max-compressions", max_compressions),
        "max-tool-output-share": _limit("max-tool-output-share", max_tool_output_share),
        "max-secrets": _limit("max-secrets", max_secrets),
    }
    tol = lib.parse_tolerance(tolerance)
    config_path = None if no_config else (config if config is not None else lib.find_config(Path.cwd()))
    configured = lib.load_config(config_path) if config_path is not None else []
    rules = lib.merge_rules(configured, flags)
    if rule:
        unknown = [r for r in rule if r not in lib.METRICS]
        if unknown:
            raise UsageError(
                f"--rule {unknown[0]} is not a budget", use_one_of(unknown[0], list(lib.METRICS))
            )
        rules = [r for r in rules if r.metric in rule]
    if not rules and baseline is None:
        raise UsageError(
            "no budget to check",
            "Pass a budget flag such as --max-session-tokens 2M, --baseline REPORT.json, or write a "
            "ctxtool.toml with an [audit] table",
        )
    base_doc = lib.load_baseline(baseline) if baseline is not None else None

    from ctxtool.frames.loading import load_corpus

    corpus, use = load_corpus(
        resolve_session_args(paths) if paths else [str(root) for root in default_roots()],
        subagents=subagents,
        cache=True,
    )
    if use.notice:
        print(f"notice: {use.notice}", file=sys.stderr)
    corpus = frames.filter_corpus(corpus, **filters)
    for warning in frames.read_warnings(corpus):
        _warn(warning)
    if corpus.sessions.height == 0:
        problems = frames.describe_problems(frames.problem_counts(corpus.problems))
        raise CtxtoolError(
            "no session to audit"
            + (f" ({problems})" if problems else "")
            + (
                " matches the --since/--until/--project/--session/--model filters"
                if any(filters.values())
                else ""
            ),
            "Check the PATHS (or GEMINI_CLI_HOME); Gemini CLI writes <home>/.gemini/tmp/<project>/chats",
        )

    result = lib.run_audit(corpus, rules, timezone=timezone)
    if not show_secrets:  # what a check quotes (a command, a path) may hold a key: never in a CI log
        from dataclasses import replace

        from ctxtool.common.secret_scan import redact

        result.checks = [
            replace(c, message=redact(c.message), offender=redact(c.offender) if c.offender else c.offender)
            for c in result.checks
        ]
    if base_doc is not None:
        result = lib.compare_baseline(result, base_doc, tol, str(baseline))

    if github:
        for line in lib.github_annotations(result):
            print(line, flush=True)
    _write_report(result, fmt, output, width=width, color=color, show_all=show_all)
    if result.exceeded:
        return ExitStatus.BUDGET_EXCEEDED
    return ExitStatus.ERROR if result.incomplete else ExitStatus.OK


def _write_report(
    result: AuditReport,
    fmt: str,
    output: Path | None,
    *,
    width: int | None,
    color: str | None,
    show_all: bool = False,
) -> None:
    from ctxtool import audit as lib
    from ctxtool.render import formats as out

    if fmt == "table":
        _print_table(result, output, width=width, color=color, show_all=show_all)
        return
    if fmt == "json":
        data = out.dumps(result.as_dict()) + b"\n"
    elif fmt == "junit":
        data = lib.junit_xml(result)
    else:
        data = lib.markdown(result).encode()
    if output:
        out.atomic_write(output, data)
    else:
        out.write_stdout(data, sys.stdout.buffer)


def _print_table(
    result: AuditReport, output: Path | None, *, width: int | None, color: str | None, show_all: bool = False
) -> None:
    from ctxtool import audit as lib
    from ctxtool.render import tables as render

    order = {"fail": 0, "skip": 1, "pass": 2}
    rows = [
        {
            "status": c.status,
            "subject": c.subject,
            "rule": c.rule + (f" [{c.scope}]" if c.scope else ""),
            "value": lib.format_value(c.rule, c.value),
            "limit": lib.format_value(c.rule, c.limit),
            "offender": c.offender,
        }
        for c in sorted(result.checks, key=lambda c: order[c.status])
        if show_all or c.status != "pass"
    ]
    passed = sum(1 for c in result.checks if c.status == "pass")
    hidden = 0 if show_all else passed
    stream = open(output, "w", encoding="utf-8") if output else None  # noqa: SIM115
    try:
        console = render.make_console(stream, width=width, color=color)
        verdict = ("FAIL: " if result.exceeded or result.incomplete else "PASS: ") + lib.verdict(result)
        if hidden and rows:
            verdict += f"; {passed:,} of {plural(len(result.checks), 'check')} passed (--all lists them)."
        elif hidden:
            verdict += "; --all lists the checks."
        if rows:
            table = render.audit_table(
                rows,
                title="ctxtool audit",
                caption=verdict,
                width=console.width,
                subjects=[c.subject for c in result.checks],
            )
            render.print_table(console, table)
        else:
            console.print(verdict)
        for r in result.regressions:
            console.print(lib.regression_text(r), markup=False, highlight=False)
    finally:
        if stream is not None:
            stream.close()


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("audit", help=HELP)(audit)
