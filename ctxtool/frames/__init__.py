"""Sessions, messages, requests, tool calls and turns as polars frames, and the reports built from them.

Owns the engine (``tally``: what each session measures, in plain Python over the files' columns; ``views``:
what a filter or the live view keeps, the turn and request grains) and the frames built of its columns
(``corpus``), assembled (``build``) and asked (``query``); ``loading`` reads them through the index,
``replays`` keeps a warm run's output. Session identity (``grouping``: a legacy ``.json`` and the ``.jsonl``
written when it was resumed are one session; files sharing a constant ``sessionId`` such as ``a2a-server``
are not), subagent attribution, turns and token semantics are the engine's. Never prints.

Token semantics (chatRecordingTypes.ts): ``input`` is the request's whole prompt and already includes
``cached``; ``total = input + output + thoughts + tool``, or the recorded total when it is above 0
(``ctxtool.measure.tokens.request_total``). Token sums use the **billed** view (every request
recorded, rewound or checkpointed away included); context figures use the **live** view.

This module hands the public names on lazily, so that ``replays`` and the engine run without polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxtool.frames.build import build_corpus, load, warm_up
    from ctxtool.frames.grouping import link_parents, session_key
    from ctxtool.frames.model import (
        COMPOSITION_COLUMNS,
        SCHEMA_VERSION,
        TOKEN_COLUMNS,
        Corpus,
        Progress,
    )
    from ctxtool.frames.query import (
        broken_files,
        filter_corpus,
        hidden_calls,
        live_only,
        read_summary,
        read_warnings,
        report,
        total_mismatches,
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
    "broken_files",
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
    "total_mismatches",
    "totals",
    "warm_up",
]

_LAZY = {
    "COMPOSITION_COLUMNS": "ctxtool.frames.model",
    "Corpus": "ctxtool.frames.model",
    "PROBLEM_KINDS": "ctxtool.frames.reading",
    "Problem": "ctxtool.frames.reading",
    "ProblemKind": "ctxtool.frames.reading",
    "Progress": "ctxtool.frames.model",
    "REPORT_COLUMNS": "ctxtool.frames.shape",
    "SCHEMA_VERSION": "ctxtool.frames.shape",
    "TOKEN_COLUMNS": "ctxtool.frames.model",
    "broken_files": "ctxtool.frames.query",
    "build_corpus": "ctxtool.frames.build",
    "describe_problems": "ctxtool.frames.reading",
    "describe_read": "ctxtool.frames.reading",
    "discovery_problems": "ctxtool.frames.reading",
    "filter_corpus": "ctxtool.frames.query",
    "hidden_calls": "ctxtool.frames.query",
    "link_parents": "ctxtool.frames.grouping",
    "live_only": "ctxtool.frames.query",
    "load": "ctxtool.frames.build",
    "no_sessions_message": "ctxtool.frames.reading",
    "problem_counts": "ctxtool.frames.reading",
    "read_summary": "ctxtool.frames.query",
    "read_warnings": "ctxtool.frames.query",
    "report": "ctxtool.frames.query",
    "session_key": "ctxtool.frames.grouping",
    "total_mismatches": "ctxtool.frames.query",
    "totals": "ctxtool.frames.query",
    "warm_up": "ctxtool.frames.build",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxtool.frames' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
