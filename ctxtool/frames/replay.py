"""A warm ``ctxtool stats`` without the heavy imports: the output of the last warm run, replayed.

When every session file is unchanged since the last run that was served entirely from ctxtool's index, the
report it printed is the report this run would print. That run stored its exact output (standard output and
error, in order, and its exit status) keyed by everything that can change it: the arguments, the working
folder, the environment variables that steer discovery, colour and width, whether each stream is a terminal
and its size, the ctxtool code and the day (prices are dated). A new run with the same key checks the inputs
(the same discovery, every file's size and modification time, the skipped, missing and empty entries) and,
when nothing moved, writes the stored output and exits: no typer, rich or polars import, no frames loaded.

Only ``stats`` without ``--no-cache``, ``--output`` or ``--help`` is replayed; the first warm run after any
change computes the report again and stores it. ``CTXTOOL_NO_REPLAY=1`` turns the replay off.

Standard library only, plus ctxtool's discovery; never imports polars.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ctxtool.common.digest import blake2b

if TYPE_CHECKING:
    from ctxtool.session.discover import Discovery

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
OFF_ENV = "CTXTOOL_NO_REPLAY"


def eligible(argv: Sequence[str]) -> bool:
    """A ``stats`` run whose output may be replayed or stored."""
    if os.environ.get(OFF_ENV) or not argv or argv[0] != "stats":
        return False
    return not any(a in _NEVER or a.startswith(("--output=", "--cache-dir=")) for a in argv[1:])


def _code_key() -> str:
    """The ctxtool code that would run: its files' sizes and modification times, and the reader stamp."""
    from ctxtool.session.stamp import STAMP

    h = blake2b(STAMP.encode(), digest_size=16)
    root = Path(__file__).resolve().parents[1]  # the whole package, not only ctxtool.frames
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


def _inputs(targets: Sequence[str], subagents: bool) -> dict[str, Any]:
    """What the report was computed from, as ``ctxtool.frames.loading`` checks it: every file's size and mtime
    and the entries discovery skipped, found missing or empty."""
    from ctxtool.session.discover import discover, file_stamps

    found = discover(list(targets), subagents=subagents)
    return inputs_of(targets, subagents, found, file_stamps(found))


def inputs_of(
    targets: Sequence[str], subagents: bool, found: Discovery, stamps: Mapping[str, Any]
) -> dict[str, Any]:
    """``_inputs`` of a discovery made already (``stamps``: its files' sizes and mtimes)."""
    return {
        "targets": list(targets),
        "subagents": subagents,
        "files": stamps,
        "skipped": sorted([str(p), why] for p, why in found.skipped),
        "missing": sorted(str(m) for m in found.missing),
        "empty": sorted(str(d) for d in found.empty_dirs),
        "unreadable": sorted(str(p) for p, _, _ in found.unreadable),
    }


def try_replay(argv: Sequence[str]) -> int | None:
    """Write the stored output of an identical warm run and return its exit status; None to run normally."""
    if not eligible(argv):
        return None
    try:
        entry_path = _folder(argv) / f"{_key(argv)}.json"
        entry = json.loads(entry_path.read_text(encoding="utf-8"))
        if _inputs(entry["inputs"]["targets"], entry["inputs"]["subagents"]) != entry["inputs"]:
            return None
        chunks = entry["chunks"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        for stream_name, text in chunks:
            stream = sys.stdout if stream_name.startswith("out") else sys.stderr
            if stream_name.endswith("-bytes"):  # written as bytes (a JSON document): replayed as bytes
                stream.flush()
                stream.buffer.write(text.encode("utf-8", "surrogateescape"))
            else:
                stream.write(text)
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        return 0  # as the CLI: a reader that stopped early is not an error
    return int(entry["code"])


class _Tee(io.TextIOBase):
    """Forwards to a stream and records what was written, in order with the other stream's writes."""

    def __init__(self, target: TextIO, name: str, log: list[list[str]]) -> None:
        self._target = target
        self._name = name
        self._log = log
        self.buffer = _BinaryTee(target, name, log)

    def write(self, s: str) -> int:
        self._log.append([self._name, s])
        return self._target.write(s)

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return self._target.isatty()

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._target.encoding


class _BinaryTee:
    def __init__(self, target: TextIO, name: str, log: list[list[str]]) -> None:
        self._target = target
        self._name = name
        self._log = log

    def write(self, data: bytes) -> int:
        self._log.append([f"{self._name}-bytes", data.decode("utf-8", "surrogateescape")])
        self._target.flush()
        return self._target.buffer.write(data)

    def flush(self) -> None:
        self._target.buffer.flush()


class _Sink(_Tee):
    """Records what is written, as :class:`_Tee` does, without writing it: output foreseen, not shown."""

    def __init__(self, target: TextIO, name: str, log: list[list[str]]) -> None:
        super().__init__(target, name, log)
        self.buffer = _BinarySink(target, name, log)

    def write(self, s: str) -> int:
        self._log.append([self._name, s])
        return len(s)

    def flush(self) -> None:
        return


class _BinarySink(_BinaryTee):
    def write(self, data: bytes) -> int:
        self._log.append([f"{self._name}-bytes", data.decode("utf-8", "surrogateescape")])
        return len(data)

    def flush(self) -> None:
        return


_current: Recorder | None = None


def mark() -> int:
    """Where the output written from now on starts (for :func:`foresee`)."""
    return len(_current.log) if _current is not None else 0


def foresee(start: int, render: Callable[[], object], inputs: dict[str, Any]) -> None:
    """Keep what the next run over unchanged files will print, so that run is replayed at once.

    ``render`` writes, in place of what this run wrote since ``start``, the report as that run will print it
    (served from the index, which now holds every file). Nothing it writes is shown. ``inputs`` are the files
    as they were before this run read them (``inputs_of``): a file that changes since, even while it was
    read, makes the next run's inputs differ, and that run reads it again.
    """
    rec = _current
    if rec is None or not eligible(rec.argv) or rec.inputs is not None:
        return
    log: list[list[str]] = []
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Sink(rec._saved[0], "out", log), _Sink(rec._saved[1], "err", log)
    try:
        render()
    finally:
        sys.stdout, sys.stderr = out, err
    rec.foreseen = (start, len(rec.log), log, inputs)


def loaded(targets: Sequence[str], subagents: bool, *, warm: bool) -> None:
    """Called by ``stats`` once its sessions are loaded: what they came from, and whether the index served
    them all (only then is the output what every later warm run prints)."""
    if _current is not None:
        _current.inputs = _inputs(targets, subagents) if warm else None


class Recorder:
    """Records a run's output; :meth:`store` keeps it for replay when the run was served from the index."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.log: list[list[str]] = []
        self.inputs: dict[str, Any] | None = None
        # (start, end, chunks, inputs): the output of the next run, these chunks in place of log[start:end]
        self.foreseen: tuple[int, int, list[list[str]], dict[str, Any]] | None = None
        self._saved = (sys.stdout, sys.stderr)

    def __enter__(self) -> Recorder:
        global _current
        _current = self
        sys.stdout = _Tee(self._saved[0], "out", self.log)
        sys.stderr = _Tee(self._saved[1], "err", self.log)
        return self

    def __exit__(self, *exc: object) -> None:
        global _current
        _current = None
        sys.stdout, sys.stderr = self._saved

    def store(self, code: int) -> None:
        """Keep the output when the report came wholly from the index (what every later warm run prints)."""
        inputs, chunks = self.inputs, self.log
        if inputs is None and self.foreseen is not None:
            start, end, instead, inputs = self.foreseen
            chunks = [*self.log[:start], *instead, *self.log[end:]]
        if inputs is None or not eligible(self.argv):
            return
        try:
            folder = _folder(self.argv)
            folder.mkdir(parents=True, exist_ok=True)
            entry = {"inputs": inputs, "chunks": chunks, "code": code}
            target = folder / f"{_key(self.argv)}.json"
            tmp = folder / f".{target.name}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(entry), encoding="utf-8")
            os.replace(tmp, target)
        except OSError:
            return
