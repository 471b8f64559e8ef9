"""ctxtool: token usage per turn, compaction replay, diffs and CI budgets for Gemini CLI sessions.

The library is the product; the CLI is a client of it. Heavy modules (polars frames, the compression port)
are imported on first use so that ``import ctxtool`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ctxtool.frames import Corpus, load, report
    from ctxtool.session.read import SessionFile, read_session

__all__ = ["Corpus", "SessionFile", "__version__", "load", "read_session", "report"]

_LAZY = {
    "Corpus": "ctxtool.frames",
    "load": "ctxtool.frames",
    "report": "ctxtool.frames",
    "SessionFile": "ctxtool.session.read",
    "read_session": "ctxtool.session.read",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxtool' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
