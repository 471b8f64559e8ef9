"""Typed errors. Core code raises these; only ``ctxtool.cli`` catches them and picks an exit status.

Every message names what went wrong and ends with how to fix it. Messages never quote a whole session
line or an API key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path


class CtxtoolError(Exception):
    """Base of every error ctxtool reports to a user."""

    def __init__(self, message: str, fix: str = "") -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return f"{self.message}. {self.fix}" if self.fix else self.message


def use_one_of(value: object, choices: Iterable[str]) -> str:
    """The fix for a value not among ``choices``: the closest choice when one is near, then all of them."""
    import difflib

    options = list(choices)
    near = difflib.get_close_matches(str(value), options, n=1, cutoff=0.6)
    hint = f"Did you mean {near[0]}? " if near else ""
    return f"{hint}Use one of: {', '.join(options)}"


class UsageError(CtxtoolError):
    """The command line asked for something impossible (exit status 2)."""


# ``scheme://``: a URL, never a local path (a Windows drive is one letter and one slash: C:/ or C:\\).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")


def refuse_url(value: str | Path, what: str = "") -> None:
    """A URL where ctxtool takes a local file or folder is a usage error, named in one line: without this, a
    path such as ``s3://team/usage`` is taken for the local folder ``s3:/team/usage``."""
    text = str(value)
    if _URL.match(text):
        scheme = text.split("://", 1)[0]
        named = f"{what} {text}" if what else text
        raise UsageError(
            f"{named} is a URL ({scheme}://); ctxtool reads and writes local files and folders here (only a "
            "dataset, of export, archive, stats, audit and report, may be at s3://, gs:// or az://)",
            "Pass a local path (copy the data there first)",
        )


class SessionFormatError(CtxtoolError):
    """A file could not be read as a Gemini CLI session."""

    def __init__(self, path: Path | str, reason: str, fix: str = "", line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {reason}", fix)


class OutputError(CtxtoolError):
    """A file (or folder) ctxtool was asked to write could not be written: ``--output``, ``--to``, a compacted
    session. Names the path asked for, never a temporary file beside it."""

    def __init__(self, path: Path | str, exc: OSError) -> None:
        import errno

        self.path = Path(path)
        under = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
        # The system's reason (in the message) with its fix: a full disk, no permission, a read-only disk.
        by_errno = {
            errno.ENOSPC: "Its disk is full: free some space on it, or name a path on another disk, and run "
            "again",
            errno.EDQUOT: "Your disk quota is used up: free some space, or name a path on another disk, and "
            "run again",
            errno.EROFS: "Name a path on a writable disk",
            errno.EACCES: "Name a path you may write to, or get write permission on its folder",
            errno.EPERM: "Name a path you may write to, or get write permission on its folder",
            errno.EEXIST: "It exists already: move it away or name another",
        }
        if under is not None:  # a file where a folder of the path should be
            fix = f"{under} is a file, not a folder: name a path under a folder"
        elif exc.errno in by_errno:
            fix = by_errno[exc.errno]
        elif exc.errno == errno.EISDIR or self.path.is_dir():
            fix = "Name a file, not a folder"
        else:
            fix = "Check that its folder can be created and that you may write there"
        super().__init__(f"{self.path}: cannot be written ({exc.strerror or exc})", fix)


class SummarizerError(CtxtoolError):
    """A summarizer back end failed (missing key, quota, network)."""
