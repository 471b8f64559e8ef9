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
        discovery_problems,
        load,
        no_sessions_message,
        splice,
        warm_up,
        without_sessions,
    )
    from ctxtool.frames.grouping import link_parents, session_key
    from ctxtool.frames.messages import Rows
    from ctxtool.frames.model import (
        COMPOSITION_COLUMNS,
        PROBLEM_KINDS,
        SCHEMA_VERSION,
        TOKEN_COLUMNS,
        Corpus,
        Problem,
        ProblemKind,
        Progress,
        context_limit_expr,
        parse_times,
    )
    from ctxtool.frames.query import (
        REPORT_COLUMNS,
        broken_files,
        describe_problems,
        describe_read,
        filter_corpus,
        hidden_calls,
        live_only,
        problem_counts,
        read_summary,
        read_warnings,
        report,
        total_mismatches,
        totals,
        with_uncached_input,
    )
    from ctxtool.frames.sessions import HIDDEN_CALLS_PER_COMPRESSION

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
    "PROBLEM_KINDS": "ctxtool.frames.model",
    "Problem": "ctxtool.frames.model",
    "ProblemKind": "ctxtool.frames.model",
    "Progress": "ctxtool.frames.model",
    "REPORT_COLUMNS": "ctxtool.frames.query",
    "Rows": "ctxtool.frames.messages",
    "SCHEMA_VERSION": "ctxtool.frames.model",
    "TOKEN_COLUMNS": "ctxtool.frames.model",
    "assemble": "ctxtool.frames.build",
    "broken_files": "ctxtool.frames.query",
    "build_corpus": "ctxtool.frames.build",
    "context_limit_expr": "ctxtool.frames.model",
    "describe_problems": "ctxtool.frames.query",
    "describe_read": "ctxtool.frames.query",
    "discovery_problems": "ctxtool.frames.build",
    "filter_corpus": "ctxtool.frames.query",
    "hidden_calls": "ctxtool.frames.query",
    "link_parents": "ctxtool.frames.grouping",
    "live_only": "ctxtool.frames.query",
    "load": "ctxtool.frames.build",
    "no_sessions_message": "ctxtool.frames.build",
    "parse_times": "ctxtool.frames.model",
    "problem_counts": "ctxtool.frames.query",
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
