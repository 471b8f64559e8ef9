"""Sessions, messages, requests, tool calls and turns as polars frames, and the reports built from them.

Owns: parsing many files in worker processes, session identity (a legacy ``.json`` and the ``.jsonl`` written
when it was resumed are one session; files sharing a constant ``sessionId`` such as ``a2a-server`` are not),
subagent attribution, turns, token semantics and the ``--by`` aggregations. Never prints.

Token semantics (chatRecordingTypes.ts): ``input`` is the request's whole prompt and already includes
``cached``; ``total = input + output + thoughts + tool``, or the recorded total when it is above 0
(``ctxtool.measure.tokens.request_total``). Token sums use the **billed** view (every request
recorded, rewound or checkpointed away included); context figures use the **live** view.

The package: ``model`` (the types) < ``messages`` < ``turns`` < ``sessions`` (the grains) < ``build``
(assembling them) < ``query`` (questions asked of a corpus); ``loading``, ``store`` and ``replay`` keep them
between runs. This module hands the public names on lazily, so that ``replay`` runs without polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxtool.frames.build import (
        assemble,
        build_corpus,
        load,
        splice,
        warm_up,
        without_sessions,
    )
    from ctxtool.frames.grouping import link_parents, session_key
    from ctxtool.frames.messages import Rows
    from ctxtool.frames.model import (
        COMPOSITION_COLUMNS,
        SCHEMA_VERSION,
        TOKEN_COLUMNS,
        Corpus,
        Progress,
        context_limit_expr,
        parse_times,
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
        with_uncached_input,
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
    from ctxtool.frames.sessions import HIDDEN_CALLS_PER_COMPRESSION
    from ctxtool.frames.shape import REPORT_COLUMNS

__all__ = [
    "COMPOSITION_COLUMNS",
    "HIDDEN_CALLS_PER_COMPRESSION",
    "PROBLEM_KINDS",
    "REPORT_COLUMNS",
    "SCHEMA_VERSION",
    "TOKEN_COLUMNS",
    "Corpus",
    "Problem",
    "ProblemKind",
    "Progress",
    "Rows",
    "assemble",
    "broken_files",
    "build_corpus",
    "context_limit_expr",
    "describe_problems",
    "describe_read",
    "discovery_problems",
    "filter_corpus",
    "hidden_calls",
    "link_parents",
    "live_only",
    "load",
    "no_sessions_message",
    "parse_times",
    "problem_counts",
    "read_summary",
    "read_warnings",
    "report",
    "session_key",
    "splice",
    "total_mismatches",
    "totals",
    "warm_up",
    "with_uncached_input",
    "without_sessions",
]

_LAZY = {
    "COMPOSITION_COLUMNS": "ctxtool.frames.model",
    "Corpus": "ctxtool.frames.model",
    "HIDDEN_CALLS_PER_COMPRESSION": "ctxtool.frames.sessions",
    "PROBLEM_KINDS": "ctxtool.frames.reading",
    "Problem": "ctxtool.frames.reading",
    "ProblemKind": "ctxtool.frames.reading",
    "Progress": "ctxtool.frames.model",
    "REPORT_COLUMNS": "ctxtool.frames.shape",
    "Rows": "ctxtool.frames.messages",
    "SCHEMA_VERSION": "ctxtool.frames.shape",
    "TOKEN_COLUMNS": "ctxtool.frames.model",
    "assemble": "ctxtool.frames.build",
    "broken_files": "ctxtool.frames.query",
    "build_corpus": "ctxtool.frames.build",
    "context_limit_expr": "ctxtool.frames.model",
    "describe_problems": "ctxtool.frames.reading",
    "describe_read": "ctxtool.frames.reading",
    "discovery_problems": "ctxtool.frames.reading",
    "filter_corpus": "ctxtool.frames.query",
    "hidden_calls": "ctxtool.frames.query",
    "link_parents": "ctxtool.frames.grouping",
    "live_only": "ctxtool.frames.query",
    "load": "ctxtool.frames.build",
    "no_sessions_message": "ctxtool.frames.reading",
    "parse_times": "ctxtool.frames.model",
    "problem_counts": "ctxtool.frames.reading",
    "read_summary": "ctxtool.frames.query",
    "read_warnings": "ctxtool.frames.query",
    "report": "ctxtool.frames.query",
    "session_key": "ctxtool.frames.grouping",
    "splice": "ctxtool.frames.build",
    "total_mismatches": "ctxtool.frames.query",
    "totals": "ctxtool.frames.query",
    "warm_up": "ctxtool.frames.build",
    "with_uncached_input": "ctxtool.frames.query",
    "without_sessions": "ctxtool.frames.build",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxtool.frames' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
