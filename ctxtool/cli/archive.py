"""``ctxtool archive``: the SessionEnd/PreCompress hook that keeps a session in an export dataset."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import CtxtoolError
from ctxtool.hooks import archive as hook

HELP = """A Gemini CLI SessionEnd (and PreCompress) hook: keep the session.

Gemini CLI runs it when a session ends (and before it compresses one) with the
event as JSON on standard input; it adds that session to the Parquet dataset
of `ctxtool export` in DIR: new sessions are added, grown ones replaced, never
duplicated. Gemini CLI deletes sessions after 30 days; the dataset keeps them.
When other hooks or an export are writing DIR (several Gemini CLI windows
closing at once) it waits its turn, up to --wait seconds. A session it could
not add (no turn in time, a full disk, the hook stopped) stays listed in
DIR/.ctxtool-pending, and the next archive or export adds it.
Errors never break Gemini CLI: one line on standard error, exit status 0.

Examples:

\b
  ctxtool hooks install --archive ~/gemini-history
  ctxtool stats ~/gemini-history --by month
  echo '{"transcript_path": "s.jsonl"}' | ctxtool archive --to history
"""


def archive(
    to: Path = typer.Option(..., "--to", metavar="DIR", help="The dataset directory (created if missing)."),
    wait: float = typer.Option(
        hook.ARCHIVE_WAIT,
        "--wait",
        metavar="SECONDS",
        min=0,
        envvar="CTXTOOL_ARCHIVE_WAIT",
        help="How long to wait for another archive or export writing DIR (Gemini CLI stops a hook at 120 s).",
    ),
) -> int:
    try:
        event = json.loads(sys.stdin.read() or "null")
        if not isinstance(event, dict):
            raise ValueError("no hook event (a JSON object) on standard input")
        from ctxtool.cli.export import describe

        result = hook.archive(event, to, wait=wait)
        print(f"ctxtool archive: {describe(result)}", file=sys.stderr)
        print("{}")  # an answer on stdout: Gemini CLI shows stderr only when stdout is empty
    except hook.NotArchived as exc:
        yet = "yet " if exc.kept else ""  # it is in the pending list: the next archive or export adds it
        print(f"ctxtool archive: not archived {yet}({_one_line(str(exc))})", file=sys.stderr)
    except Exception as exc:  # never break Gemini CLI
        what = str(exc) if isinstance(exc, CtxtoolError) else f"{type(exc).__name__}: {exc}"
        print(f"ctxtool archive: not archived ({_one_line(what)})", file=sys.stderr)
    return ExitStatus.OK


def _one_line(text: str) -> str:
    return " ".join(text.split())[:1000]


def register(app: typer.Typer) -> None:
    app.command("archive", help=HELP)(archive)
