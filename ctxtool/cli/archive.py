"""``ctxtool archive``: the SessionEnd/PreCompress hook that keeps a session in an export dataset."""

from __future__ import annotations

import json
import sys

import typer

from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import CtxtoolError
from ctxtool.hooks import archive as hook

HELP = """A Gemini CLI SessionEnd (and PreCompress) hook: keep the session.

Gemini CLI runs it when a session ends (and before it compresses one) with the
event as JSON on standard input; it writes that session into the Parquet
dataset of `ctxtool export` at DIR or URL (s3://, gs://, az://): a grown session
is written again in place, never duplicated, and any number of machines and
windows may archive to one dataset at once. Gemini CLI deletes sessions after
30 days; the dataset keeps them. A session it could not write (an unreachable
store, a full disk, the hook stopped) stays noted in ctxtool's cache, and the
next archive to the same dataset writes it. Rows carry $CTXTOOL_USER and
$CTXTOOL_MACHINE (default: the login and host name).
Errors never break Gemini CLI: one line on standard error, exit status 0.

Examples:

\b
  ctxtool hooks install --archive ~/gemini-history
  ctxtool hooks install --archive s3://team-usage/gemini
  ctxtool stats ~/gemini-history --by month
  echo '{"transcript_path": "s.jsonl"}' | ctxtool archive --to history
"""


def archive(
    to: str = typer.Option(
        ...,
        "--to",
        metavar="DIR|URL",
        help="The dataset: a folder (created if missing) or s3://, gs://, az://….",
    ),
) -> int:
    try:
        event = json.loads(sys.stdin.read() or "null")
        if not isinstance(event, dict):
            raise ValueError("no hook event (a JSON object) on standard input")
        from ctxtool.cli.export import describe

        result = hook.archive(event, to)
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
