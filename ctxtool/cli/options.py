"""Options several commands share, declared once so their flags and help read the same everywhere."""

from __future__ import annotations

import typer

COLOR = typer.Option(None, "--color/--no-color", help="Force colour on or off (default: auto).")
WIDTH = typer.Option(None, "--width", min=40, help="Table width in characters (default: terminal).")
STRICT = typer.Option(False, "--strict", help="Exit 1 when any file could not be read or had broken lines.")
SUMMARIZER = typer.Option("offline", "--summarizer", help="offline (deterministic) or gemini.")
BASE_URL = typer.Option(
    None, "--base-url", envvar="GOOGLE_GEMINI_BASE_URL", help="Gemini API base URL (gemini summarizer)."
)
WIDE = typer.Option(
    False, "--wide", help="Show every column, even wider than the terminal (default: drop the least needed)."
)
