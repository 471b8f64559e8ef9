"""``ctxtool guard``: the BeforeModel hook holding a Gemini CLI session to budgets (``ctxtool.hooks.guard``).

Gemini CLI runs it before every model call, so ``ctxtool.__main__`` answers it without importing typer; this
command is what ``--help`` (and an in-process ``run``) sees. ``tests/test_guard.py`` keeps both option lists
equal.
"""

from __future__ import annotations

import sys

import typer

from ctxtool.cli.status import ExitStatus

HELP = """A Gemini CLI BeforeModel hook: stop a session that reached its budget.

Gemini CLI runs it before each model call with the event as JSON on standard
input (`ctxtool hooks install` sets that up). It adds up what the session
(with its subagents) has billed so far, and what every session billed today
(UTC), as `ctxtool stats` counts them, and answers:

\b
  below --warn-at of every budget   nothing: the call goes on;
  past --warn-at                    a one-line notice (and the call goes to
                                    --fallback-model, if given);
  at or past a budget               Gemini CLI stops the agent, with the
                                    budget, the spend and how to raise it.

Errors never break Gemini CLI: the call goes on and one line says why
(--fail-closed stops the session instead). Exit status is always 0.

Examples:

\b
  ctxtool hooks install --max-session-cost 5 --max-daily-cost 20
  ctxtool guard --max-session-tokens 2M --fallback-model gemini-2.5-flash
  echo '{"transcript_path": "s.jsonl"}' | ctxtool guard --max-session-cost 1
"""


def guard(
    max_session_cost: str = typer.Option(None, "--max-session-cost", help="USD per session, e.g. 5."),
    max_session_tokens: str = typer.Option(None, "--max-session-tokens", help="Tokens per session, e.g. 2M."),
    max_daily_cost: str = typer.Option(None, "--max-daily-cost", help="USD per UTC day, all sessions."),
    max_context_share: str = typer.Option(
        None, "--max-context-share", help="Largest live prompt over the model's window, e.g. 80%."
    ),
    warn_at: str = typer.Option("80%", "--warn-at", help="Share of a budget that warns (default 80%)."),
    fallback_model: str = typer.Option(
        None, "--fallback-model", help="Past --warn-at, send the requests to this model."
    ),
    fail_closed: bool = typer.Option(False, "--fail-closed", help="On an error, stop the session."),
    cache_dir: str = typer.Option(
        None, "--cache-dir", envvar="CTXTOOL_CACHE_DIR", help="ctxtool's cache directory."
    ),
    scope: str = typer.Option(None, "--scope", help="Where the hook is installed (for its advice)."),
) -> int:
    from ctxtool.hooks import guard as hook

    argv = hook.to_argv(
        [
            ("--max-session-cost", max_session_cost),
            ("--max-session-tokens", max_session_tokens),
            ("--max-daily-cost", max_daily_cost),
            ("--max-context-share", max_context_share),
            ("--warn-at", warn_at),
            ("--fallback-model", fallback_model),
            ("--cache-dir", cache_dir),
            ("--scope", scope),
        ],
        fail_closed=fail_closed,
    )
    hook.run(argv, sys.stdin, sys.stdout, sys.stderr)
    return ExitStatus.OK


def register(app: typer.Typer) -> None:
    app.command("guard", help=HELP)(guard)
