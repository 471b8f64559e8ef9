"""Sessions, messages, requests, tool calls and turns as polars frames, and the reports built from them.

Owns the engine (``tally``, ``views``) and the frames built of its columns (``corpus``), assembled
(``build``) and asked (``query``); ``loading`` reads them through the index, ``replays`` keeps a warm run's
output. Never prints. Token sums use the **billed** view (every request recorded, rewound or checkpointed
away included); context figures use the **live** view.

This module hands the public names on lazily, so that ``replays`` and the engine run without polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxtool.frames.build import build_corpus, load, warm_up
    from ctxtool.frames.grouping import link_parents, session_key
    from ctxtool.frames.model import COMPOSITION_COLUMNS, SCHEMA_VERSION, TOKEN_COLUMNS, Corpus, Progress
    from ctxtool.frames.query import (
        filter_corpus,
        hidden_calls,
        live_only,
        read_summary,
        read_warnings,
        report,
        totals,
    )
    from ctxtool.frames.reading import (
        PROBLEM_KINDS,
        Problem,
        ProblemKind,
        describe_problems,
        describe_read,
        discovery_problems,
        no_sessions_message,
        problem_counts,
    )
    from ctxtool.frames.shape import REPORT_COLUMNS

__all__ = [
    "COMPOSITION_COLUMNS",
    "PROBLEM_KINDS",
    "REPORT_COLUMNS",
    "SCHEMA_VERSION",
    "TOKEN_COLUMNS",
    "Corpus",
    "Problem",
    "ProblemKind",
    "Progress",
    "build_corpus",
    "describe_problems",
    "describe_read",
    "discovery_problems",
    "filter_corpus",
    "hidden_calls",
    "link_parents",
    "live_only",
    "load",
    "no_sessions_message",
    "problem_counts",
    "read_summary",
    "read_warnings",
    "report",
    "session_key",
    "totals",
    "warm_up",
]

_MODULES = {
    "ctxtool.frames.build": ("build_corpus", "load", "warm_up"),
    "ctxtool.frames.grouping": ("link_parents", "session_key"),
    "ctxtool.frames.model": ("COMPOSITION_COLUMNS", "Corpus", "Progress", "TOKEN_COLUMNS"),
    "ctxtool.frames.query": (
        "filter_corpus",
        "hidden_calls",
        "live_only",
        "read_summary",
        "read_warnings",
        "report",
        "totals",
    ),
    "ctxtool.frames.reading": (
        "PROBLEM_KINDS",
        "Problem",
        "ProblemKind",
        "describe_problems",
        "describe_read",
        "discovery_problems",
        "no_sessions_message",
        "problem_counts",
    ),
    "ctxtool.frames.shape": ("REPORT_COLUMNS", "SCHEMA_VERSION"),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxtool.frames' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
