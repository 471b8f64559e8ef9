"""A first ``ctxtool stats`` that starts reading before its command line is parsed.

On two cores, a first run (or one with ``--no-cache``) spends its first 0.1-0.2 s in one process importing
typer and the command while the other core idles, and only then starts its worker. ``begin`` (called by
``ctxtool.__main__`` before those imports) guesses from the arguments which files the run will read and
forks a process that reads them already (``ctxtool.session.headstart``); the scan adopts it as its worker
(``take``, in ``ctxtool.frames.loading.read_plain``) when it found exactly the run's files and measures them
as the run does (``tally.count_and_price``). A wrong guess costs a process that is stopped, never a result.

Not started: with ``CTXTOOL_NO_HEADSTART=1``; off Linux; on one core; with ``--help``; with an argument it
does not know; with options that make ``stats`` build frames (``--top``, filters, ``--live``, ``--sort``,
``--timezone``, other ``--by`` or ``--format`` values); and when the index already exists (a second run
reads little). Not adopted (stopped, and the pool started as before) where the pool would run more than two
processes: a large home on more than two cores.

Standard library only at module level: it runs before any heavy import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.headstart import Reader, Started

OFF_ENV = "CTXTOOL_NO_HEADSTART"

# ``stats`` options that take a value, and the flags (tests/test_headstart.py holds these to the command's).
VALUED = frozenset(
    {
        "--by", "-b", "--format", "-f", "--output", "-o", "--timezone", "--tz", "--since", "--until",
        "--project", "-p", "--session", "-s", "--model", "-m", "--sort", "--limit", "-n", "--top",
        "--cache-dir", "--color", "--width",
    }
)  # fmt: skip
FLAGS = frozenset(
    {
        "--desc",
        "--live",
        "--subagents",
        "--no-subagents",
        "--strict",
        "--no-cache",
        "--show-secrets",
        "--wide",
    }
)
# What makes ``stats`` build frames instead of counting where it reads (``ctxtool.stats.fast_eligible``).
_FRAMES = frozenset(
    {"--top", "--project", "-p", "--session", "-s", "--model", "-m", "--sort", "--live", "--timezone", "--tz"}
)
_TALLY_BY = frozenset({"session", "model", "project", "day", "week", "month"})
_TALLY_FORMATS = frozenset({"table", "json", "jsonl"})

_running: Started | None = None


def begin(argv: Sequence[str]) -> None:
    """Start reading for the ``stats`` run of ``argv`` (without the program name) when it will read files
    and the guess is safe; otherwise do nothing."""
    global _running
    if _running is not None or os.environ.get(OFF_ENV) or os.environ.get("CTXTOOL_NO_TALLY"):
        return
    guess = _guess(argv)
    if guess is None:
        return
    from ctxtool.session import headstart

    if not headstart.available() or (os.cpu_count() or 1) < 2:
        return
    targets, subagents = guess
    _running = headstart.start(targets, subagents, _count_and_price)


def _count_and_price() -> Reader:
    """In the head start: what it reads with (``tally.count_and_price``, as the scan's ``then``), and how it
    hands each measure back."""
    from ctxtool.frames.tally import count_and_price, pack_measure

    return count_and_price, pack_measure  # type: ignore[return-value]


def take(then: Callable[[FileColumns], object] | None) -> Started | None:
    """The running head start, to be adopted by a scan whose ``then`` is the one it reads with; None (and it
    is stopped) for any other scan. Once."""
    global _running
    started, _running = _running, None
    if started is None:
        return None
    from ctxtool.frames.tally import count_and_price, unpack_measure

    if then is not count_and_price:
        started.stop()
        return None
    started.unpack = unpack_measure
    return started


def discard() -> None:
    """Stop the head start if no scan adopted it (a run that ended early, or read otherwise)."""
    global _running
    started, _running = _running, None
    if started is not None:
        started.stop()


def _guess(argv: Sequence[str]) -> tuple[list[str], bool] | None:
    """(targets, subagents) of a ``stats`` command line that will count the files it reads, as discovery
    will be asked for them; None when it will not, or when unsure."""
    if list(argv[:1]) != ["stats"]:
        return None
    paths: list[str] = []
    subagents, cache, cache_dir = True, True, None
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if arg == "--":
            paths.extend(args[i + 1 :])
            break
        if name in VALUED:
            if not eq:
                if i + 1 >= len(args):
                    return None
                i += 1
                value = args[i]
            if name in _FRAMES:
                return None
            if (name in ("--by", "-b") and value not in _TALLY_BY) or (
                name in ("--format", "-f") and value not in _TALLY_FORMATS
            ):
                return None
            if name == "--cache-dir":
                cache_dir = value
        elif eq or (arg.startswith("-") and arg != "-"):
            if arg not in FLAGS or arg in _FRAMES:
                return None
            if arg in ("--subagents", "--no-subagents"):
                subagents = arg == "--subagents"
            elif arg == "--no-cache":
                cache = False
        else:
            paths.append(arg)
        i += 1
    return _targets(paths, subagents, cache, cache_dir)


def _targets(
    paths: list[str], subagents: bool, cache: bool, cache_dir: str | None
) -> tuple[list[str], bool] | None:
    from ctxtool.session.stamp import STAMP, cache_path

    if cache and os.path.exists(os.path.join(cache_path(cache_dir), "index", f"{STAMP}.sqlite")):
        return None  # not a first run: the index serves most files
    return paths, subagents
