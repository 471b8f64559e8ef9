"""Exit statuses, the one place they are defined (documented in the README and in --help)."""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1  # a file or a run failed (with --strict: any file could not be read)
    USAGE = 2  # the command line is wrong
    BUDGET_EXCEEDED = 3  # ctxtool audit: a budget was exceeded
    INTERRUPTED = 130
