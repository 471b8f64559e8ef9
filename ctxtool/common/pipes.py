"""A reader that stops early (``ctxtool stats | head -1``): the run goes on quietly and ends with its status.

Owns: the standard streams of a command-line run. Python ignores SIGPIPE, so a write to a pipe whose reader
has gone raises BrokenPipeError from wherever it happens, and typer turns it into a silent exit 1.
``install()`` puts standard output and error on files that take such a write as written and drop everything
after it: the command finishes with its own exit status (``audit`` still says 3). Standard library only.
"""

from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class _ReaderGone(io.FileIO):
    """A file descriptor that, once a write finds its reader gone, takes every write as written."""

    gone = False

    def write(self, data: ReadableBuffer, /) -> int:
        size = memoryview(data).nbytes
        if self.gone:
            return size
        try:
            return super().write(data)
        except BrokenPipeError:
            self.gone = True
            return size


def _tolerant(stream: TextIO) -> TextIO:
    """``stream`` again, with its encoding, error handling and buffering, on a :class:`_ReaderGone` file."""
    stream.flush()
    raw = _ReaderGone(stream.fileno(), "w", closefd=False)
    return io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=stream.encoding,
        errors=stream.errors,
        newline="\n",  # as Python's own standard streams on POSIX: no translation
        line_buffering=bool(stream.line_buffering),
        write_through=getattr(stream, "write_through", False),
    )


def install() -> None:
    """Standard output and error from now on: quiet when their reader has gone. Only the process's own
    streams are replaced (not a test's capture), once."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not getattr(sys, f"__{name}__") or not isinstance(stream, io.TextIOWrapper):
            continue
        try:
            replacement = _tolerant(stream)
        except (OSError, ValueError):  # no file descriptor behind it (closed, or not a file)
            continue
        setattr(sys, name, replacement)


__all__ = ["install"]
