"""``ctxtool audit``: check sessions against token, context, cost and cache budgets (for CI)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ctxtool.cli import options
from ctxtool.cli.options import budget
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import UsageError
from ctxtool.common.wording import plural

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ctxtool.audit import AuditReport
    from ctxtool.frames.model import Corpus

FORMATS = ("table", "json", "junit", "markdown")

HELP = """Check Gemini CLI sessions against budgets: tokens, context share, cost, cache ratio,
compressions, tool output and secrets.

Each PATH is as for `ctxtool stats`. Budgets come from the flags, else from --config FILE or the nearest
ctxtool.toml ([audit]) or pyproject.toml ([tool.ctxtool.audit]); a flag replaces the file's rules of its
metric. Tokens as 2000000 or 2M, shares as 60% or 0.6, costs in USD.

Examples:

\b
  ctxtool audit --max-session-tokens 2M --max-context-share 50%
  ctxtool audit .gemini/tmp --output audit.xml --github    # JUnit for CI
  ctxtool audit --baseline main-audit.json --tolerance 10% --all

Exit status: 0 within budget; 3 a budget was exceeded or a metric regressed past --tolerance (this wins
over 1); 1 an error (a session file could not be read, or no session was found); 2 usage error.
"""


MAX_SESSION_TOKENS = budget("--max-session-tokens", "TOKENS", "Tokens of a session, subagents included.")
MAX_CONTEXT_SHARE = budget("--max-context-share", "SHARE", "A prompt over the model's context window.")
TOLERANCE = typer.Option(
    "10%", "--tolerance", metavar="SHARE", show_default=False, help="Allowed worsening over --baseline (10%)."
)


def audit(
    paths: list[str] = typer.Argument(
        None, metavar="PATH...", help="Session files, folders, globs or ids (default: the data root)."
    ),
    max_session_tokens: str = MAX_SESSION_TOKENS,
    max_turn_tokens: str = budget("--max-turn-tokens", "TOKENS", "Tokens of one turn."),
    max_request_tokens: str = budget("--max-request-tokens", "TOKENS", "Tokens of one request."),
    max_context_share: str = MAX_CONTEXT_SHARE,
    max_session_cost: str = budget("--max-session-cost", "USD", "Cost of a session."),
    max_daily_cost: str = budget("--max-daily-cost", "USD", "Cost of all sessions per day (--timezone)."),
    min_cache_ratio: str = budget("--min-cache-ratio", "SHARE", "Cached over input tokens, at least."),
    max_compressions: str = budget("--max-compressions", "N", "Compression events in a session."),
    max_tool_output_share: str = budget(
        "--max-tool-output-share", "SHARE", "Tool results over all text of a session."
    ),
    max_secrets: str = budget("--max-secrets", "N", "Secrets a session may hold (0: none)."),
    config: Path = typer.Option(None, "--config", "-c", metavar="FILE", help="Budgets from this TOML file."),
    no_config: bool = typer.Option(False, "--no-config", help="Ignore any configuration file."),
    fmt: str = typer.Option(None, "--format", "-f", metavar="FORMAT", help="table, json, junit or markdown."),
    output: Path = typer.Option(None, "--output", "-o", metavar="FILE", help="Write the report to FILE."),
    github: bool = typer.Option(False, "--github", help="GitHub annotations on stdout; table to stderr."),
    baseline: Path = typer.Option(
        None, "--baseline", metavar="FILE", help="An earlier audit --format json, to compare."
    ),
    tolerance: str = TOLERANCE,
    subagents: bool = options.SUBAGENTS,
    show_secrets: bool = options.SHOW_SECRETS,
    show_all: bool = typer.Option(False, "--all", help="Table: list the passed checks too."),
    color: options.Color = options.COLOR,
    width: int = options.WIDTH,
    since: str = options.SINCE,
    until: str = options.UNTIL,
    project: list[str] = options.PROJECT,
    session: list[str] = options.SESSION,
    model: list[str] = options.MODEL,
    timezone: str = options.TIMEZONE,
    rule: list[str] = typer.Option(
        None, "--rule", metavar="NAME", help="Check only this budget (max-session-cost...)."
    ),
    no_cache: bool = options.NO_CACHE,
    cache_dir: Path = options.CACHE_DIR,
) -> int:
    from ctxtool import audit as lib
    from ctxtool.common.choices import output_format

    # Checked in the order the first error is reported: --format, the filters, --timezone, the options that
    # contradict each other, the budgets, --tolerance, the configuration file, --rule, the baseline, PATHS.
    fmt = output_format(fmt, output, FORMATS, "audit")
    filters = options.filter_args(since, until, project, session, model)
    options.check_timezone(timezone)
    if github and fmt != "table" and output is None:
        # GitHub reads workflow commands from standard output: with --github it holds them alone.
        raise UsageError(
            f"--github writes GitHub's annotations alone to standard output, so the {fmt} report needs a "
            "file",
            f"Pass --output FILE for it (without --format {fmt}, the table goes to standard error)",
        )
    if config is not None and no_config:
        raise UsageError("--config and --no-config contradict each other", "Pass only one of them")
    values = [max_session_tokens, max_turn_tokens, max_request_tokens, max_context_share, max_session_cost]
    values += [max_daily_cost, min_cache_ratio, max_compressions, max_tool_output_share, max_secrets]
    budgets = zip(lib.METRICS, values, strict=True)
    flags = {m: None if v is None else lib.parse_limit(m, v, "--") for m, v in budgets}
    tol = lib.parse_tolerance(tolerance)
    config_path = None if no_config else (config if config is not None else lib.find_config(Path.cwd()))
    rules = lib.rules_to_check(flags, config_path, rule)
    if not rules and baseline is None:
        raise UsageError(
            "no budget to check",
            "Pass a budget flag such as --max-session-tokens 2M, --baseline REPORT.json, or write a "
            "ctxtool.toml with an [audit] table",
        )
    base = None if baseline is None else lib.Baseline(lib.load_baseline(baseline), tol, str(baseline))
    query = lib.AuditQuery(rules, filters, timezone, base, show_secrets)
    result = lib.audit_corpus(_load(paths, subagents, no_cache, cache_dir, filters), query, warn=options.warn)
    _write_report(result, fmt, output, github=github, width=width, color=color, show_all=show_all)
    if result.exceeded:
        return ExitStatus.BUDGET_EXCEEDED
    return ExitStatus.ERROR if result.incomplete else ExitStatus.OK


def _load(
    paths: list[str] | None, subagents: bool, no_cache: bool, cache_dir: Path | None, filters: dict[str, Any]
) -> Corpus | Iterator[Corpus]:
    """The sessions PATHS name (default: the data roots), read as ``stats`` reads them (through ctxtool's
    index unless --no-cache); a dataset, a few thousand sessions at a time (``export.dataset_families``)."""
    from ctxtool.export import dataset_families
    from ctxtool.frames.loading import load_corpus
    from ctxtool.session.discover import dataset_in, default_roots, resolve_session_args

    sources = resolve_session_args(paths) if paths else [str(root) for root in default_roots()]
    if (dataset := dataset_in(sources)) is not None:
        return dataset_families(dataset, subagents=subagents, filters=filters)
    corpus, use = load_corpus(sources, subagents=subagents, cache=not no_cache, cache_dir=cache_dir)
    if use.notice:
        print(f"notice: {use.notice}", file=sys.stderr)
    return corpus


def _write_report(
    result: AuditReport, fmt: str, output: Path | None, github: bool, width: int, color: str, show_all: bool
) -> None:
    """The report in ``fmt``, said on standard error once written to ``output``; with --github, the
    annotations before it on standard output, which holds them alone when there is no --output (the table goes
    to standard error)."""
    from ctxtool import audit as lib
    from ctxtool.render import formats as out

    if github:
        for line in lib.github_annotations(result):
            print(line, flush=True)
    if fmt == "json":
        out.write_output(out.dumps(result.as_dict()) + b"\n", output)
    elif fmt != "table":
        out.write_output(lib.junit_xml(result) if fmt == "junit" else lib.markdown(result).encode(), output)
    else:
        from ctxtool.render import tables as render

        rows = [
            {
                "status": c.status,
                "subject": c.subject,
                "rule": c.rule + (f" [{c.scope}]" if c.scope else ""),
                "value": lib.format_value(c.rule, c.value),
                "limit": lib.format_value(c.rule, c.limit),
                "offender": c.offender,
            }
            for c in sorted(result.checks, key=lambda c: lib.STATUS_ORDER[c.status])
            if show_all or c.status != "pass"
        ]
        passed = sum(1 for c in result.checks if c.status == "pass")
        hidden = 0 if show_all else passed
        console_of = (
            contextlib.nullcontext(render.make_console(sys.stderr, width=width, color=color))
            if github and output is None
            else render.output_console(output, width=width, color=color)
        )
        with console_of as console:
            verdict = ("FAIL: " if result.exceeded or result.incomplete else "PASS: ") + lib.verdict(result)
            if hidden and rows:
                verdict += f"; {passed:,} of {plural(len(result.checks), 'check')} passed (--all lists them)."
            elif hidden:
                verdict += "; --all lists the checks."
            if rows:
                subjects = [c.subject for c in result.checks]
                table = render.audit_table(
                    rows, title="ctxtool audit", caption=verdict, width=console.width, subjects=subjects
                )
                render.print_table(console, table)
            else:
                console.print(verdict)
            for r in result.regressions:
                console.print(lib.regression_text(r), markup=False, highlight=False)
    if output is not None:
        options.say_written(output)
