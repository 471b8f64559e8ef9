"""``ctxtool archive``: the SessionEnd/PreCompress hook that keeps a session in an export dataset."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from ctxtool.cli.status import ExitStatus

HELP = """A Gemini CLI SessionEnd (and PreCompress) hook: keep the session.

Gemini CLI runs it when a session ends (and before it compresses one) with the
event as JSON on standard input; it adds that session to the Parquet dataset
of `ctxtool export` in DIR: new sessions are added, grown ones replaced, never
duplicated. Gemini CLI deletes sessions after 30 days; the dataset keeps them.
Errors never break Gemini CLI: one line on standard error, exit status 0.

Examples:

\b
  ctxtool hooks install --archive ~/gemini-history
  ctxtool stats ~/gemini-history --by month
  echo '{"transcript_path": "s.jsonl"}' | ctxtool archive --to history
"""


def archive(
    to: Path = typer.Option(..., "--to", metavar="DIR", help="The dataset directory (created if missing)."),
) -> int:
    try:
        from ctxtool.hooks import archive as hook

        event = json.loads(sys.stdin.read() or "null")
        if not isinstance(event, dict):
            raise ValueError("no hook event (a JSON object) on standard input")
        from ctxtool.cli.export import describe

        result = hook.archive(event, to)
        print(f"ctxtool archive: {describe(result)}", file=sys.stderr)
        print("{}")  # an answer on stdout: Gemini CLI shows stderr only when stdout is empty
    except Exception as exc:  # never break Gemini CLI
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        print(f"ctxtool archive: not archived ({what})", file=sys.stderr)
    return ExitStatus.OK


def register(app: typer.Typer) -> None:
    app.command("archive", help=HELP)(archive)
