"""``ctxtool diff BEFORE AFTER``: what changed between two session files, message by message."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus

if TYPE_CHECKING:
    from ctxtool.diff import SessionDiff

FORMATS = ("table", "json", "markdown")

HELP = """Compare two Gemini CLI session files: an original and its compaction, or two snapshots of a session.

Messages of the live histories are aligned by id, falling back to a hash of their content, and each is
shown as removed, kept, changed (e.g. a truncated tool output, with how much) or added (the state snapshot and
its ack); a message written again without the record of its request (tokens, model) is kept: it was billed
once. Token deltas are given as recorded in the files (billed requests, counted as stats counts them) and
as Gemini CLI's local estimate of the live history, in total and per message type, wire role and tool, with
the context share before and after against the model's limit. The facts (paths, commands, errors,
directives) of the removed and changed messages are checked against the after history: lost ones are listed.

Examples:

\b
  ctxtool diff SESSION.jsonl ctxtool-compacted/myproj/chats/SESSION.jsonl
  ctxtool diff BEFORE.jsonl AFTER.jsonl --output diff.md
  ctxtool diff BEFORE.jsonl AFTER.jsonl --format json --exit-code

Exit status: 0 ok (with --exit-code: the sessions are the same), 1 with --exit-code when they differ, or an
error (a file cannot be read), 2 usage error.
"""


def diff(
    before: str = typer.Argument(
        ...,
        metavar="BEFORE",
        help="The earlier session: a file, or a session id or unique prefix (e.g. the original).",
    ),
    after: str = typer.Argument(
        ...,
        metavar="AFTER",
        help="The later session: a file, or a session id or unique prefix (e.g. the compacted copy).",
    ),
    fmt: str = typer.Option(
        None,
        "--format",
        "-f",
        metavar="FORMAT",
        help="table, json or markdown (default: --output's suffix, else table).",
    ),
    output: Path = typer.Option(
        None, "--output", "-o", metavar="FILE", help="Write to FILE instead of standard output."
    ),
    exit_code: bool = typer.Option(
        False, "--exit-code", help="Exit 1 when the sessions differ, 0 when they do not (like git diff)."
    ),
    show_secrets: bool = options.SHOW_SECRETS,
    color: options.Color = options.COLOR,
    width: int = options.WIDTH,
) -> int:
    from ctxtool import diff as diff_lib
    from ctxtool.common.choices import output_format
    from ctxtool.common.secret_scan import redact_value
    from ctxtool.render import formats as out
    from ctxtool.session.discover import resolve_session_args
    from ctxtool.session.read import read_session

    fmt = output_format(fmt, output, FORMATS, "diff")
    before_path, after_path = (Path(p) for p in resolve_session_args([before, after]))
    result = diff_lib.diff_sessions(read_session(before_path), read_session(after_path))
    for warning in result.warnings():
        print(f"warning: {warning}", file=sys.stderr)

    # What every text shown passes through: secrets redacted unless --show-secrets.
    hide: Callable[[Any], Any] = (lambda value: value) if show_secrets else redact_value
    if fmt == "json":
        out.write_output(out.dumps(hide(result.as_dict())) + b"\n", output)
    elif fmt == "markdown":
        out.write_output(diff_lib.markdown(result, hide=hide).encode(), output)  # redacted, then escaped
    else:
        _print_table(result, output, width=width, color=color, hide=hide)
    if output is not None:
        options.say_written(output)
    return ExitStatus.ERROR if exit_code and result.differs else ExitStatus.OK


def _print_table(
    result: SessionDiff,
    output: Path | None,
    *,
    width: int | None,
    color: str | None,
    hide: Callable[[Any], Any],
) -> None:
    from rich.text import Text

    from ctxtool import diff as diff_lib
    from ctxtool.render import tables as render

    with render.output_console(output, width=width, color=color) as console:
        title = render.two_paths(
            "ctxtool diff", str(result.before.path), str(result.after.path), console.width
        )
        console.print(title, soft_wrap=True, markup=False, highlight=False)
        verdict = "the sessions differ." if result.differs else "no differences."
        console.print(render.wrap_text(Text(f"{diff_lib.counts_line(result)}; {verdict}"), console.width))
        render.print_table(
            console,
            render.diff_summary_table(
                diff_lib.summary_rows(result),
                title="Tokens",
                headers=("", "before", "after", "delta"),
                width=console.width,
                drop=[(3,)],  # the delta is after less before
            ),
        )
        render.print_table(
            console,
            render.diff_summary_table(
                diff_lib.group_rows(result),
                title="Tokens by message type, wire role and tool",
                headers=(
                    "group",
                    *(f"rec.\n{side}" for side in ("before", "after")),
                    *(f"est.\n{side}" for side in ("before", "after", "delta")),
                ),
                width=console.width,
                # What the compaction changed is in the estimates (a compacted copy records no tokens): the
                # recorded pair goes first, then the estimated delta (after less before).
                drop=[(1, 2), (5,)],
            ),
        )
        for i, snapshot in enumerate(result.snapshots, 1):
            console.print(f"\nState snapshot{f' {i}' if len(result.snapshots) > 1 else ''}:", style="bold")
            console.print(hide(snapshot), markup=False, highlight=False)
        console.print()
        for line in diff_lib.retention_lines(result):
            console.print(hide(line), markup=False, highlight=False)
        console.print()
        render.print_table(
            console,
            render.diff_message_table(
                hide(diff_lib.message_rows(result)), title="Messages", width=console.width
            ),
        )
