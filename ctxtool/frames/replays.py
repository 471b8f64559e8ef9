"""The replay store: a warm ``ctxtool stats``'s output, kept and written again without the heavy imports.

When every session file is unchanged since the last run that was served entirely from ctxtool's index, the
report it printed is the report this run would print. That run stored its exact output (standard output and
error, in order, and its exit status) with what it was computed from; ``play`` checks those inputs and, when
nothing moved, writes the stored output: no typer, rich or polars import.

Which runs are replayed or kept, and the entry each is kept in, is ``ctxtool.launch``'s to say: this module
never reads the command line. Standard library only, plus ctxtool's discovery; never imports polars.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ctxtool.session.discover import Discovery


def inputs_of(
    targets: Sequence[str], subagents: bool, found: Discovery | None = None, stamps: Mapping[str, Any] = {}
) -> dict[str, Any]:
    """What the report was computed from: every file's size and mtime (``stamps``), and what discovery met
    (``found``; without it, discovery is made again)."""
    if found is None:
        from ctxtool.session.discover import discover, file_stamps

        found = discover(list(targets), subagents=subagents)
        stamps = file_stamps(found)
    return {
        "targets": list(targets),
        "subagents": subagents,
        "files": stamps,
        "skipped": sorted([str(p), why] for p, why in found.skipped),
        "missing": sorted(str(m) for m in found.missing),
        "empty": sorted(str(d) for d in found.empty_dirs),
        "unreadable": sorted(str(p) for p, _, _ in found.unreadable),
    }


def play(entry: Path) -> int | None:
    """Write the output kept in ``entry`` when its inputs are as they were and return its exit status; None
    to run normally."""
    try:
        kept = json.loads(entry.read_text(encoding="utf-8"))
        if inputs_of(kept["inputs"]["targets"], kept["inputs"]["subagents"]) != kept["inputs"]:
            return None
        chunks = kept["chunks"]
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
    return int(kept["code"])


_armed: Path | None = None


def arm(entry: Path) -> None:
    """Keep this run's output in ``entry`` if the index serves it (``ctxtool.launch`` says which runs may)."""
    global _armed
    _armed = entry


def armed() -> Path | None:
    """The entry this run's output is kept in (``arm``); None: it is not kept."""
    return _armed


class _Tee(io.TextIOBase):
    """Records what is written, in order with the other stream's writes, and forwards it to ``target``
    unless ``shown`` is False (output foreseen, not shown)."""

    def __init__(self, target: TextIO, name: str, log: list[list[str]], shown: bool = True) -> None:
        self._target, self._name, self._log, self._shown = target, name, log, shown
        self.buffer = _BinaryTee(target, name, log, shown)

    def write(self, s: str) -> int:
        self._log.append([self._name, s])
        return self._target.write(s) if self._shown else len(s)

    def flush(self) -> None:
        if self._shown:
            self._target.flush()

    def isatty(self) -> bool:
        return self._target.isatty()

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._target.encoding


class _BinaryTee:
    def __init__(self, target: TextIO, name: str, log: list[list[str]], shown: bool) -> None:
        self._target, self._name, self._log, self._shown = target, name, log, shown

    def write(self, data: bytes) -> int:
        self._log.append([f"{self._name}-bytes", data.decode("utf-8", "surrogateescape")])
        if not self._shown:
            return len(data)
        self._target.flush()
        return self._target.buffer.write(data)

    def flush(self) -> None:
        if self._shown:
            self._target.buffer.flush()


_current: Recorder | None = None


def mark() -> int:
    """Where the output written from now on starts (for :func:`foresee`)."""
    return len(_current.log) if _current is not None else 0


def foresee(start: int, render: Callable[[], object], inputs: dict[str, Any]) -> None:
    """Keep what the next run over unchanged files will print, so that run is replayed at once.

    ``render`` writes, in place of what this run wrote since ``start``, the report as that run will print it
    (served from the index). Nothing it writes is shown. ``inputs`` are the files as they were before this
    run read them: a file that changes since makes the next run's inputs differ, and that run reads it again.
    """
    rec = _current
    if rec is None or rec.inputs is not None:
        return
    log: list[list[str]] = []
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(rec._saved[0], "out", log, False), _Tee(rec._saved[1], "err", log, False)
    try:
        render()
    finally:
        sys.stdout, sys.stderr = out, err
    rec.foreseen = (start, len(rec.log), log, inputs)


def loaded(targets: Sequence[str], subagents: bool, *, warm: bool) -> None:
    """Called by ``stats`` once its sessions are loaded: what they came from, and whether the index served
    them all."""
    if _current is not None:
        _current.inputs = inputs_of(targets, subagents) if warm else None


class Recorder:
    """Records a run's output; :meth:`store` keeps it in ``entry`` when the index served the run."""

    def __init__(self, entry: Path) -> None:
        self.entry = entry
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
        if inputs is None:
            return
        try:
            self.entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.entry.with_name(f".{self.entry.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"inputs": inputs, "chunks": chunks, "code": code}), encoding="utf-8")
            os.replace(tmp, self.entry)
        except OSError:
            return
