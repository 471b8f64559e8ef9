"""Options several commands share, declared once so their flags and help read the same everywhere."""

from __future__ import annotations

from enum import StrEnum

import typer


def progress_wanted() -> bool:
    """A progress bar goes to stderr only when it is a terminal and not under CI (``CI=true``, which CI
    services set even when they give the job a pseudo-terminal): pipes and logs get none."""
    import os
    import sys

    return sys.stderr.isatty() and os.environ.get("CI", "").lower() not in ("true", "1")


class Color(StrEnum):
    auto = "auto"
    always = "always"
    never = "never"


COLOR = typer.Option(
    Color.auto,
    "--color",
    help="auto: colour on a terminal unless NO_COLOR is set or TERM=dumb, and in a pipe when FORCE_COLOR is "
    "set; always; never.",
)
WIDTH = typer.Option(None, "--width", min=40, help="Table width in characters (default: terminal).")
STRICT = typer.Option(False, "--strict", help="Exit 1 when any file could not be read or had broken lines.")
SUMMARIZER = typer.Option("offline", "--summarizer", help="offline (deterministic) or gemini.")
BASE_URL = typer.Option(
    None, "--base-url", envvar="GOOGLE_GEMINI_BASE_URL", help="Gemini API base URL (gemini summarizer)."
)
SHOW_SECRETS = typer.Option(
    False,
    "--show-secrets",
    help="Show secrets found in session text (API keys, tokens, private keys) instead of [REDACTED:kind].",
)
WIDE = typer.Option(
    False, "--wide", help="Show every column, even wider than the terminal (default: drop the least needed)."
)
