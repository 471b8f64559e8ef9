"""``ctxtool hooks install|uninstall|status``: ctxtool's hooks in Gemini CLI's settings.json."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ctxtool.cli import guard as budget
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import UsageError

_HELP = "Install ctxtool's hooks in Gemini CLI's settings.json: `guard` before every model call (budgets) "
_HELP += "and `archive` when a session ends (history)."
hooks_app = typer.Typer(help=_HELP, no_args_is_help=True)

_SCOPE_HELP = "user: ~/.gemini/settings.json ($GEMINI_CLI_HOME); project: ./.gemini/settings.json."
_SCOPE = typer.Option("user", "--scope", metavar="WHERE", help=_SCOPE_HELP)

INSTALL_HELP = """Add ctxtool's hooks to Gemini CLI's settings.json.

Adds `ctxtool guard` as a BeforeModel hook with the budgets given, and (unless
--no-archive) `ctxtool archive` as a SessionEnd and PreCompress hook. Every
other setting, hook and comment stays as it was (line endings, a BOM, a
symlink too); the file as it was before ctxtool's hooks is kept as
settings.json.ctxtool-backup. Installing again replaces ctxtool's hooks (the
same options change nothing). Project hooks run only in trusted folders.

Examples:

\b
  ctxtool hooks install --max-session-cost 5
  ctxtool hooks install --max-daily-cost 20 --fallback-model gemini-2.5-flash
  ctxtool hooks install --scope project --max-session-tokens 2M --no-archive
"""


_ARCHIVE_HELP = "The dataset `ctxtool archive` writes: a folder or s3://, gs://, az://… (default: ctxtool's "
_ARCHIVE_HELP += "data dir/history)."


@hooks_app.command("install", help=INSTALL_HELP)
def install(
    scope: str = _SCOPE,
    max_session_cost: str = budget.MAX_SESSION_COST,
    max_session_tokens: str = budget.MAX_SESSION_TOKENS,
    max_daily_cost: str = budget.MAX_DAILY_COST,
    max_context_share: str = budget.MAX_CONTEXT_SHARE,
    warn_at: str = budget.WARN_AT,
    fallback_model: str = budget.FALLBACK_MODEL,
    fail_closed: bool = budget.FAIL_CLOSED,
    archive: str = typer.Option(None, "--archive", metavar="DIR|URL", help=_ARCHIVE_HELP),
    no_archive: bool = typer.Option(False, "--no-archive", help="Install the guard only."),
) -> int:
    from ctxtool.hooks import guard, settings

    values = budget.budgets(
        max_session_cost, max_session_tokens, max_daily_cost, max_context_share, warn_at, fallback_model
    )
    argv = guard.to_argv(values, fail_closed=fail_closed)
    opts = guard.parse_args(argv)  # refuses a bad budget here, not before every model call
    if not opts.limits:
        known = ", ".join(flag for flag, _, _ in guard.BUDGETS)
        raise UsageError("ctxtool hooks install: no budget given", f"Give at least one of {known}")
    opts.scope = scope if scope != "user" else None
    from platformdirs import user_data_dir

    from ctxtool.store import is_store_url

    archive_to = None
    if not no_archive:
        where = archive or str(Path(user_data_dir("ctxtool", appauthor=False)) / "history")
        archive_to = where if is_store_url(where) else str(Path(where).expanduser().resolve())
    path = settings.settings_path(scope)
    change = settings.install(path, settings.hooks_for(opts.argv(), archive_to))
    verb = "installed in" if change.changed else "already installed, unchanged:"
    print(f"ctxtool hooks {verb} {change.path}", file=sys.stderr)
    for hook in change.hooks:
        print(f"  {hook['event']}: {hook['command']}", file=sys.stderr)
    if change.backup is not None:
        print(f"  backup of the previous file: {change.backup}", file=sys.stderr)
    if scope == "project":
        print(
            "note: Gemini CLI runs project hooks only in a trusted folder (/permissions, or "
            "GEMINI_CLI_TRUST_WORKSPACE=true when non-interactive).",
            file=sys.stderr,
        )
    return ExitStatus.OK


@hooks_app.command(
    "uninstall",
    help="Remove ctxtool's hooks from settings.json: the file comes back byte for byte as install found "
    "it (a file install created is removed); settings changed since stay.\n\n"
    "Examples:\n\n\b\n  ctxtool hooks uninstall\n  ctxtool hooks uninstall --scope project",
)
def uninstall(scope: str = _SCOPE) -> int:
    from ctxtool.hooks import settings

    change = settings.uninstall(settings.settings_path(scope))
    if change.changed and not change.exists:
        said = f"removed {change.path}: ctxtool's install had created it (backup: {change.backup})"
    elif change.changed:
        said = f"removed ctxtool's hooks from {change.path} (backup: {change.backup})"
    else:
        said = f"no ctxtool hooks in {change.path}: nothing changed"
    print(said, file=sys.stderr)
    return ExitStatus.OK


@hooks_app.command(
    "status",
    help="Show ctxtool's hooks in settings.json.\n\n"
    "Examples:\n\n\b\n  ctxtool hooks status\n  ctxtool hooks status --scope project",
)
def status(scope: str = _SCOPE) -> int:
    from ctxtool.hooks import settings

    path = settings.settings_path(scope)
    found = settings.status(path)
    hint = "" if found else " no ctxtool hooks (install: ctxtool hooks install --max-session-cost 5)"
    print(f"{path}:{hint}")
    for hook in found:
        print(f"  {hook['event']}: {hook.get('command')}")
    return ExitStatus.OK
