"""Options several commands share, declared once so their flags and help read the same everywhere."""

from __future__ import annotations

import os
import sys
from datetime import date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from ctxtool.common.errors import UsageError


def progress_wanted() -> bool:
    """A progress bar goes to stderr only when it is a terminal and not under CI (``CI=true``, which CI
    services set even when they give the job a pseudo-terminal): pipes and logs get none."""
    return sys.stderr.isatty() and os.environ.get("CI", "").lower() not in ("true", "1")


class Color(StrEnum):
    auto = "auto"
    always = "always"
    never = "never"


PATHS = typer.Argument(
    None, metavar="PATH...", help="Session files, folders or globs (default: the data root)."
)
COLOR = typer.Option(
    Color.auto,
    "--color",
    metavar="WHEN",
    show_default=False,
    help="auto (default; see NO_COLOR), always, never.",
)
WIDTH = typer.Option(None, "--width", min=40, metavar="N", help="Table width (default: terminal).")
STRICT = typer.Option(False, "--strict", help="Exit 1 when a file was unreadable or broken.")
SUMMARIZER = typer.Option(
    "offline",
    "--summarizer",
    metavar="NAME",
    show_default=False,
    help="offline (default; no model) or gemini.",
)
BASE_URL = typer.Option(
    None,
    "--base-url",
    envvar="GOOGLE_GEMINI_BASE_URL",
    show_envvar=False,
    metavar="URL",
    help="Gemini API URL (env GOOGLE_GEMINI_BASE_URL).",
)
SHOW_SECRETS = typer.Option(False, "--show-secrets", help="Show secrets, not [REDACTED:kind].")
USER = typer.Option(
    None, "--user", metavar="NAME", help="Who the rows are of (default: $CTXTOOL_USER, else the login name)."
)
MACHINE = typer.Option(
    None,
    "--machine",
    metavar="NAME",
    help="The machine the rows come from (default: $CTXTOOL_MACHINE, else the host name).",
)
WIDE = typer.Option(False, "--wide", help="Every column, even past the width.")
SUBAGENTS = typer.Option(
    True, "--subagents/--no-subagents", show_default=False, help="Count subagents in their parent (default)."
)


def budget(flag: str, metavar: str, help: str) -> Any:
    """A budget option (audit's and the guard's): unset by default, a text value parsed by the command."""
    return typer.Option(None, flag, metavar=metavar, help=help)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def say_written(output: Path) -> None:
    """The line a command says on standard error once ``--output`` FILE is written, the same for every
    command (``report``, ``stats``, ``audit``, ``diff``), so standard output holds only the data."""
    print(f"report written to {output}", file=sys.stderr)


SESSION_PATHS = typer.Argument(..., metavar="SESSION...", help="Session files, folders, globs or ids.")

# The session filters: one spelling and one help on every command that reads sessions.
SINCE = typer.Option(None, "--since", metavar="DATE", help="Only requests on or after DATE (UTC).")
UNTIL = typer.Option(None, "--until", metavar="DATE", help="Only requests on or before DATE (UTC).")
PROJECT = typer.Option(
    None, "--project", "-p", metavar="NAME", help="Only this project (name or path); repeatable."
)
SESSION = typer.Option(
    None, "--session", "-s", metavar="ID", help="Only this session (id or file); repeatable."
)
MODEL = typer.Option(None, "--model", "-m", metavar="MODEL", help="Only this model (or prefix); repeatable.")


def filter_args(
    since: str | None,
    until: str | None,
    projects: list[str] | None,
    sessions: list[str] | None,
    models: list[str] | None,
) -> dict[str, Any]:
    """The session filters as ``frames.filter_corpus`` keywords; a bad date is a usage error."""
    since_d, until_d = parse_date(since, "--since"), parse_date(until, "--until")
    if since_d and until_d and since_d > until_d:
        raise UsageError(f"--since {since} is after --until {until}", "Swap the two dates")
    return {
        "since": since_d,
        "until": until_d,
        "projects": projects or (),
        "sessions": sessions or (),
        "models": models or (),
    }


def parse_date(value: str | None, option: str) -> date | None:
    if value is None:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%d").date()
    except ValueError:
        raise UsageError(
            f"{option} {value!r} is not a date", "Write it as YYYY-MM-DD, e.g. 2026-11-01"
        ) from None


def filter_sources(sources: list[Any], filters: dict[str, Any]) -> list[Any]:
    """The discovered session files (``SessionPath``) that hold a session the filters keep, as ``stats``
    would count it (read through ctxtool's index, so a second look costs little)."""
    if not any(filters.values()):
        return sources
    from ctxtool import frames
    from ctxtool.frames.loading import load_corpus

    corpus, _ = load_corpus([str(sp.path) for sp in sources], subagents=True, cache=True)
    kept = frames.filter_corpus(corpus, **filters).sessions
    files = set(kept.get_column("file").to_list()) if "file" in kept.columns else set()
    groups = {str(f).rsplit(".", 1)[0] for f in files if f}
    return [sp for sp in sources if str(sp.path) in files or str(sp.path).rsplit(".", 1)[0] in groups]


TIMEZONE = typer.Option(
    None, "--timezone", "--tz", metavar="ZONE", help="IANA zone of days, e.g. Europe/Paris."
)


def check_timezone(timezone: str | None) -> None:
    """A usage error unless ``timezone`` is None or an IANA name this machine knows."""
    if timezone is None:
        return
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise UsageError(
            f"--timezone {timezone!r} is not a time zone", "Use an IANA name such as Europe/Paris or UTC"
        ) from None


NO_CACHE = typer.Option(False, "--no-cache", help="Read every file again; skip ctxtool's index.")
CACHE_DIR = typer.Option(
    None,
    "--cache-dir",
    envvar="CTXTOOL_CACHE_DIR",
    show_envvar=False,
    metavar="DIR",
    help="Index folder (env CTXTOOL_CACHE_DIR).",
)
