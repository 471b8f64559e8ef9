"""``ctxtool guard``: the BeforeModel hook holding a Gemini CLI session to budgets (``ctxtool.hooks.guard``).

Gemini CLI runs it before every model call, so ``ctxtool.__main__`` answers it without importing typer; this
command is what ``--help`` (and an in-process ``run``) sees. ``tests/test_guard.py`` keeps both option lists
equal. The budget options are declared here once; ``ctxtool hooks install`` takes the same ones.
"""

from __future__ import annotations

import sys

import typer

from ctxtool.cli import options
from ctxtool.cli.options import budget
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


# The budgets, shared by `ctxtool guard` and `ctxtool hooks install` (which writes them into the hook's
# command line): declared once, so both commands read them and explain them alike.
MAX_SESSION_COST = budget("--max-session-cost", "USD", "USD per session, e.g. 5.")
MAX_SESSION_TOKENS = budget("--max-session-tokens", "TOKENS", "Tokens per session, e.g. 2M.")
MAX_DAILY_COST = budget("--max-daily-cost", "USD", "USD per UTC day, all sessions.")
MAX_CONTEXT_SHARE = budget(
    "--max-context-share", "SHARE", "Largest live prompt over the model's window, e.g. 80%."
)
_WARN_HELP = "Share of a budget that warns (default 80%)."
WARN_AT = typer.Option("80%", "--warn-at", metavar="SHARE", show_default=False, help=_WARN_HELP)
FALLBACK_MODEL = budget("--fallback-model", "MODEL", "Past --warn-at, send requests to this model.")
FAIL_CLOSED = typer.Option(False, "--fail-closed", help="On an error in the guard, stop the session.")


_BUDGETS = (MAX_SESSION_COST, MAX_SESSION_TOKENS, MAX_DAILY_COST, MAX_CONTEXT_SHARE, WARN_AT, FALLBACK_MODEL)


def budgets(*values: str | None) -> list[tuple[str, str | None]]:
    """The values of the ``_BUDGETS`` options, in order, by flag (for ``ctxtool.hooks.guard.to_argv``)."""
    return [(option.param_decls[0], value) for option, value in zip(_BUDGETS, values, strict=True)]


def guard(
    max_session_cost: str = MAX_SESSION_COST,
    max_session_tokens: str = MAX_SESSION_TOKENS,
    max_daily_cost: str = MAX_DAILY_COST,
    max_context_share: str = MAX_CONTEXT_SHARE,
    warn_at: str = WARN_AT,
    fallback_model: str = FALLBACK_MODEL,
    fail_closed: bool = FAIL_CLOSED,
    cache_dir: str = options.CACHE_DIR,
    scope: str = typer.Option(
        None, "--scope", metavar="WHERE", help="Where the hook is installed (for its advice)."
    ),
) -> int:
    from ctxtool.hooks import guard as hook

    values = budgets(
        max_session_cost, max_session_tokens, max_daily_cost, max_context_share, warn_at, fallback_model
    )
    argv = hook.to_argv([*values, ("--cache-dir", cache_dir), ("--scope", scope)], fail_closed=fail_closed)
    hook.run(argv, sys.stdin, sys.stdout, sys.stderr)
    return ExitStatus.OK
