"""The typer application and its single error boundary.

Commands are thin: resolve arguments, call one library function, hand the result to the renderer, return
an ``ExitStatus``. Only this boundary catches errors; a traceback is printed only with ``--traceback``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import typer

from ctxtool import __version__
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import CtxtoolError, UsageError, refuse_url
from ctxtool.common.wording import plural

EXIT_STATUS_HELP = (
    "Exit status: 0 ok; 1 an error (a file could not be read, an explicit PATH matched no session; for stats "
    "a partly unreadable file only with --strict); 2 a usage error; 3 a budget exceeded (audit); "
    "130 interrupted."
)

app = typer.Typer(
    name="ctxtool",
    help=(
        "Token usage per turn, offline compaction replay, diffs and CI budgets for Gemini CLI sessions.\n\n"
        + EXIT_STATUS_HELP
    ),
    no_args_is_help=False,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


_MAIN_COMMANDS = (
    ("ctxtool stats", "token usage, context share and cost per session"),
    ("ctxtool compact SESSION", "replay Gemini CLI's compression offline"),
    ("ctxtool compare SESSION", "other agents' compaction side by side"),
    ("ctxtool diff BEFORE AFTER", "what a compaction removed and kept"),
    ("ctxtool audit", "a CI gate over budgets (--max-session-tokens 2M)"),
    ("ctxtool report -o r.html", "an HTML page: spend, and what fills the context"),
)


def overview(width: int | None = None) -> str:
    """What bare ``ctxtool`` prints: where it looks, what it found there, and the main commands; wrapped to
    ``width`` (default: the terminal's, at most 80 columns)."""
    import functools
    import shutil
    import textwrap

    from ctxtool.session.discover import default_roots, discover

    width = max(40, min(80, width or shutil.get_terminal_size((80, 24)).columns))
    wrap = functools.partial(textwrap.wrap, width=width, break_on_hyphens=False, break_long_words=False)
    lines = [*wrap("ctxtool: token usage, compaction, diffs and CI budgets of Gemini CLI sessions."), ""]
    found_any = False
    for root in default_roots():
        lines.append(f"Looks in {root}:")
        if root.is_dir():
            found = discover([str(root)])
            folders = len({sp.project_dir for sp in found.files})
            found_any = found_any or bool(found.files)
            lines.append(
                f"  {plural(len(found.files), 'session file')} in {plural(folders, 'project folder')}."
            )
        else:
            lines.append("  not there yet (run Gemini CLI, or set GEMINI_CLI_HOME).")
    if found_any:
        lines += ["", *wrap(_requests_found())]
    lines += ["", "Main commands:"]
    left = max(len(c) for c, _ in _MAIN_COMMANDS) + 4
    for command, what in _MAIN_COMMANDS:
        if width - left >= 24:
            lines += wrap(what, initial_indent=f"  {command:<{left - 4}}  ", subsequent_indent=" " * left)
        else:  # too narrow for two columns: each description under its command
            lines += [f"  {command}", *wrap(what, initial_indent=" " * 6, subsequent_indent=" " * 6)]
    lines += ["", *wrap("ctxtool COMMAND --help: its options and examples. ctxtool --help: every command.")]
    return "\n".join([*lines, *wrap(EXIT_STATUS_HELP)])


def _requests_found() -> str:
    """The requests those sessions made and the projects they were made in, counted as ``ctxtool stats``
    counts them (read the way it reads, through its index, so the ``stats`` that follows starts warm): the
    projects are the rows of ``stats --by project``. A project folder whose sessions made no request (the a2a
    server's header-only files) is no such row."""
    from ctxtool.frames.loading import load_corpus

    corpus, _ = load_corpus([], cache=True)
    requests = corpus.requests
    projects = requests.get_column("project").n_unique() if requests.height else 0
    return (
        f"Their sessions made {plural(requests.height, 'request')} in {plural(projects, 'project')}"
        " (ctxtool stats --by project)."
    )


def _version(value: bool) -> None:
    if value:
        from ctxtool.common import kernels

        print(f"ctxtool {__version__} ({kernels.describe()})")
        raise typer.Exit(0)


@app.callback()
def _root(
    traceback: bool = typer.Option(
        False, "--traceback", help="Print the full Python traceback when something fails (for bug reports)."
    ),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print ctxtool's version and whether it runs compiled kernels or pure Python, then exit.",
    ),
) -> None:
    """Token usage, compaction replay, diffs and CI budgets for Gemini CLI sessions."""


# Each command lives in its own module, ctxtool.cli.<command>; only the one being run is imported (start-up
# stays lean: the compaction strategies alone take tens of milliseconds to import). ``--help`` and unknown
# words load all, in this, their documented order.
_COMMANDS = (
    "stats",
    "compact",
    "compare",
    "diff",
    "audit",
    "export",
    "report",
    "cache",
    "guard",
    "archive",
    "hooks",
)
_registered: set[str] = set()


def register(names: Sequence[str] | None = None) -> None:
    """Add the named commands (default: all, in their documented order) to ``app``, once each."""
    import importlib

    for name in names if names is not None else _COMMANDS:
        if name not in _registered:
            module = importlib.import_module(f"ctxtool.cli.{name}")
            if (group := getattr(module, f"{name}_app", None)) is not None:  # (cache, hooks: subcommands)
                app.add_typer(group, name=name)
            else:
                app.command(name, help=module.HELP)(getattr(module, name))
            _registered.add(name)
    from ctxtool.cli.usage import readable_usage

    readable_usage(app)


def _command_in(args: Sequence[str]) -> str | None:
    return next((arg for arg in args if not arg.startswith("-")), None)


# The options whose value is a URL (metavar URL); every other argument that looks like one is a path that
# ctxtool cannot read or write there (``ctxtool.common.errors.refuse_url``), but for a dataset in an object
# store (``ctxtool.store``): the PATHS of the commands that read one, and the options naming where one goes.
_URL_OPTIONS = ("--base-url",)
_DATASET_READERS = ("stats", "audit", "report")
_DATASET_OPTIONS = {"export": ("--to", "-t", "--output", "-o"), "archive": ("--to",), "hooks": ("--archive",)}
_VALUED = ("--output", "-o", "--config", "--baseline", "--cache-dir", "--budgets")


def _refuse_urls(args: Sequence[str]) -> None:
    from ctxtool.store import is_store_url

    command = _command_in(args)
    allowed = _DATASET_OPTIONS.get(command or "", ())
    after: str | None = None  # the option whose value this argument is
    for arg in args:
        name, eq, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
        if after is not None or eq:
            option = after if after is not None else name
            after = None
            if option in _URL_OPTIONS or (option in allowed and is_store_url(value)):
                continue
            refuse_url(value, option)
            continue
        if arg.startswith("-"):
            after = arg if arg in (*_URL_OPTIONS, *allowed, *_VALUED) else None
            continue
        if command in _DATASET_READERS and is_store_url(arg):
            continue
        refuse_url(arg)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return the exit status instead of exiting (used by tests and ``main``)."""
    # polars allocates through jemalloc, which by default keeps freed pages for ten seconds. Giving them back
    # at once (decay 0) cut the peak of a 500 MB scan by about 30 MB but cost about 0.1 s, every page being
    # faulted in again. Measured on a first `stats` of the bench corpus (peak RSS of the process tree, 4 runs
    # each, same wall time): 1000 ms 226-247 MB, 100 ms 220-225 MB, 10 ms 213-230 MB; a 1 GB session read in
    # 3.9 s and 336 MB with either 1000 or 10 ms. Read by jemalloc when polars loads, so only effective before
    # that; a value the user set wins.
    os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:10,muzzy_decay_ms:0")
    args = list(sys.argv[1:] if argv is None else argv)
    completing = "_CTXTOOL_COMPLETE" in os.environ  # a shell asking for completions (--install-completion)
    want_traceback = "--traceback" in args
    try:
        _refuse_urls(args)
        if not args and not completing:  # bare ``ctxtool``: the overview
            print(overview())
            return ExitStatus.OK
        command = _command_in(args)
        register([command] if command in _COMMANDS else None)  # the command alone, when known
        result = app(args=args, prog_name="ctxtool", standalone_mode=False)
    except typer.Exit as exc:
        if exc.exit_code == ExitStatus.INTERRUPTED:  # typer turns Ctrl-C into Exit(130)
            print("Interrupted.", file=sys.stderr)
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("Interrupted.", file=sys.stderr)
        return ExitStatus.INTERRUPTED
    except typer.TyperException as exc:
        # typer's own parsing errors (unknown option, bad value): usage errors, shown with the usage line.
        show = getattr(exc, "show", None)
        if callable(show):
            show(file=sys.stderr)
        else:
            print(f"Error: {exc.format_message()}", file=sys.stderr)
        return ExitStatus.USAGE if exc.exit_code == 2 else int(exc.exit_code)
    except CtxtoolError as exc:
        if want_traceback:
            raise
        print(f"Error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE if isinstance(exc, UsageError) else ExitStatus.ERROR
    except BrokenPipeError:
        return ExitStatus.OK
    except Exception as exc:
        if want_traceback:
            raise
        print(
            f"Error: unexpected {type(exc).__name__}: {exc}. Re-run with --traceback and report it",
            file=sys.stderr,
        )
        return ExitStatus.ERROR
    code = int(result) if isinstance(result, int) else ExitStatus.OK
    if code == ExitStatus.INTERRUPTED:  # typer returns 130 for Ctrl-C when not in standalone mode
        print("Interrupted.", file=sys.stderr)
    return code


def main() -> None:
    from ctxtool.common import pipes
    from ctxtool.frames import replays

    pipes.install()  # a reader that stops early (`| head`): the run goes on quietly, ending with its status

    entry = replays.armed()  # where ctxtool.launch keeps this run's output for a replay, if it may
    if entry is not None:
        with replays.Recorder(entry) as recorder:
            code = run()
        recorder.store(code)
    else:
        code = run()
    adoption = sys.modules.get("ctxtool.frames.adoption")
    if adoption is not None:
        adoption.discard()  # a head start no scan took (the run ended early, or read a dataset)
    if code == ExitStatus.INTERRUPTED:
        sys.exit(code)  # a normal exit lets interrupted worker processes wind down
    # Every file ctxtool writes is closed (atomic writes) by now and the worker pool has shut down; skip
    # the interpreter's teardown of polars frames and modules, which takes a noticeable part of a second.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        code = code or ExitStatus.OK
    os._exit(code)
