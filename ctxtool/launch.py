"""The launcher: what a ``ctxtool stats`` run starts from its command line before its command is imported.

The only module besides ``ctxtool.cli`` that reads the command line, and only ``stats``' (called by
``ctxtool.__main__`` before typer, rich or polars are imported, which take most of a second):

- **the replay** (``try_replay``). A warm run kept its exact output (``ctxtool.frames.replays``) under a key
  of everything that can change it: the arguments, the working folder, the environment variables that steer
  discovery, colour and width, whether each stream is a terminal and its size, the ctxtool code and the day
  (prices are dated). A run with the same key writes that output when its inputs are as they were. Only
  ``stats`` without ``--no-cache``, ``--output`` or ``--help`` is replayed (``eligible``);
  ``CTXTOOL_NO_REPLAY=1`` turns the replay off.
- **the head start** (``begin``). On two cores, a first run spends its first 0.1-0.2 s importing typer and
  the command while the other core idles. ``begin`` guesses from the arguments which files the run will read
  and forks a process that reads them already (``ctxtool.session.headstart``), which the scan adopts as its
  worker (``ctxtool.frames.adoption``) when it found exactly the run's files. A wrong guess costs a process
  that is stopped, never a result. Not started: with ``CTXTOOL_NO_HEADSTART=1``; off Linux; on one core; with
  an argument it does not know, ``--top``, or a ``--by`` or ``--format`` value that names no report or
  format; and when the index already exists.

Standard library only at module level, with the replay store and ``common``: it runs before any heavy import.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from ctxtool.common.choices import BY_CHOICES, FORMATS
from ctxtool.common.digest import blake2b
from ctxtool.frames import replays

# ------------------------------------------------------------------------------------------------ the replay

REPLAY_OFF_ENV = "CTXTOOL_NO_REPLAY"
_ENV = (
    "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "CI", "TZ", "HOME", "GEMINI_CLI_HOME",
    "CTXTOOL_CACHE_DIR", "CTXTOOL_NO_PRICE_CACHE", "LANG", "LC_ALL", "PYTHONIOENCODING",
)  # fmt: skip
_NEVER = (
    "--no-cache",
    "--output",
    "-o",
    "--help",
    "--install-completion",
    "--show-completion",
    "--traceback",
)


def eligible(argv: Sequence[str]) -> bool:
    """A ``stats`` run whose output may be replayed or stored."""
    if os.environ.get(REPLAY_OFF_ENV) or not argv or argv[0] != "stats":
        return False
    return not any(a in _NEVER or a.startswith(("--output=", "--cache-dir=")) for a in argv[1:])


def try_replay(argv: Sequence[str]) -> int | None:
    """Write the stored output of an identical warm run and return its exit status; None to run normally
    (then a run that may be replayed later keeps its output for the next one: ``replays.arm``)."""
    if not eligible(argv):
        return None
    try:
        entry = _folder(argv) / f"{_key(argv)}.json"
    except (OSError, ValueError, KeyError, TypeError):
        return None
    replays.arm(entry)
    return replays.play(entry)


def _code_key() -> str:
    """The ctxtool code that would run: its files' sizes and modification times, and the reader stamp."""
    from ctxtool.session.stamp import STAMP

    h = blake2b(STAMP.encode(), digest_size=16)
    root = Path(__file__).resolve().parent  # the whole package
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                st = os.stat(os.path.join(dirpath, name))
                h.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def _key(argv: Sequence[str]) -> str:
    streams = []
    for stream in (sys.stdout, sys.stderr):
        tty = bool(getattr(stream, "isatty", lambda: False)())
        size = None
        if tty:
            try:
                size = tuple(os.get_terminal_size(stream.fileno()))
            except (OSError, ValueError):
                size = None
        streams.append((tty, size))
    parts = {
        "argv": list(argv),
        "cwd": os.getcwd(),
        "env": {k: os.environ.get(k) for k in _ENV},
        "streams": streams,
        "code": _code_key(),
        "day": datetime.now(tz=UTC).date().isoformat(),
        "python": sys.version,
    }
    return blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=16).hexdigest()


def _folder(argv: Sequence[str]) -> Path:
    from ctxtool.session.stamp import cache_root

    cache_dir = None
    for i, a in enumerate(argv):
        if a == "--cache-dir" and i + 1 < len(argv):
            cache_dir = argv[i + 1]
    return cache_root(cache_dir) / "replay"


# -------------------------------------------------------------------------------------------- the head start

HEADSTART_OFF_ENV = "CTXTOOL_NO_HEADSTART"

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
# Every ``--by`` and every format is counted where it is read; another value is a usage error, not worth a
# head start.
_TALLY_BY, _TALLY_FORMATS = frozenset(BY_CHOICES), frozenset(FORMATS)


def begin(argv: Sequence[str]) -> None:
    """Start reading for the ``stats`` run of ``argv`` (without the program name) when it will read files
    and the guess is safe; otherwise do nothing."""
    from ctxtool.frames import adoption

    if adoption.waiting() or os.environ.get(HEADSTART_OFF_ENV):
        return
    guess = _guess(argv)
    if guess is None:
        return
    from ctxtool.session import headstart

    if not headstart.available() or (os.cpu_count() or 1) < 2:
        return
    targets, subagents = guess
    adoption.hand(headstart.start(targets, subagents, adoption.reader))


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
            if name == "--top":  # (builds frames instead of counting where it reads)
                return None
            if (name in ("--by", "-b") and value not in _TALLY_BY) or (
                name in ("--format", "-f") and value not in _TALLY_FORMATS
            ):
                return None
            if name == "--cache-dir":
                cache_dir = value
        elif eq or (arg.startswith("-") and arg != "-"):
            if arg not in FLAGS:
                return None
            if arg in ("--subagents", "--no-subagents"):
                subagents = arg == "--subagents"
            elif arg == "--no-cache":
                cache = False
        else:
            paths.append(arg)
        i += 1
    from ctxtool.session.stamp import STAMP, cache_path

    if cache and os.path.exists(os.path.join(cache_path(cache_dir), "index", f"{STAMP}.sqlite")):
        return None  # not a first run: the index serves most files
    return paths, subagents
