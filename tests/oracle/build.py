"""Assembling a ``Corpus``: read the files (in worker processes beside this one), group them into sessions,
derive the requests, turns, sessions and composition frames, and splice a session Gemini CLI appended to into
stored frames. Never prints; the token semantics are the package's (``ctxtool.frames``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from ctxtool.frames.grouping import _Session
    from ctxtool.measure.pricing import PriceTable
    from ctxtool.session.columns import FileColumns

from ctxtool.frames.grouping import group_sessions, link_parents, parent_ref_of
from ctxtool.frames.model import (
    COMPOSITION_COLUMNS,
    MESSAGE_SCHEMA,
    SESSION_META_SCHEMA,
    TOKEN_COLUMNS,
    TOOL_SCHEMA,
    TS_TYPE,
    Corpus,
    Problem,
    Progress,
)
from ctxtool.frames.reading import discovery_problems
from ctxtool.session.discover import Discovery, discover
from ctxtool.session.stamp import MESSAGE_COLUMNS, TOOL_COLUMNS
from tests.oracle.exprs import cache_ratio_expr, context_limit_expr
from tests.oracle.messages import Rows, in_order, merge_pairs, with_composition, with_events
from tests.oracle.sessions import sessions_frame
from tests.oracle.turns import turns_frame


def load(
    paths: Sequence[str | Path],
    *,
    subagents: bool = True,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Corpus:
    """Find, read and flatten every session under ``paths`` into frames."""
    from ctxtool.session.scan import read_files

    found = discover(paths, subagents=subagents)
    results = read_files(found.files, progress=progress, workers=workers)
    return build_corpus(results, found, subagents=subagents)


def warm_up(*, price_memo: bool = True) -> None:
    """Load what building frames needs (price data), so it can overlap with parsing."""
    from ctxtool.measure.pricing import warm_up as warm_prices

    warm_prices(memo=price_memo)


assert tuple(MESSAGE_SCHEMA) == MESSAGE_COLUMNS
assert tuple(TOOL_SCHEMA) == TOOL_COLUMNS


def splice(cached: Corpus, fresh: Corpus, groups: set[str]) -> tuple[Corpus, frozenset[str] | None]:
    """``cached`` with the sessions of file ``groups`` replaced by ``fresh`` (which holds just those groups).

    Parent links, root keys and subagent counts are recomputed over the whole result, so a session that
    appeared, vanished or changed is attributed exactly as a full build would attribute it. Also returns the
    keys of the sessions whose rows were removed or added, or None when rows of other sessions changed too
    (their root keys moved because a parent appeared or vanished).
    """
    gone = cached.sessions.filter(pl.col("group_key").is_in(list(groups))).get_column("session_key")
    keep = pl.col("session_key").is_in(gone.implode()).not_()
    sessions = pl.concat([cached.sessions.filter(keep), fresh.sessions], how="diagonal_relaxed")
    parents = link_parents(
        sessions.select("session_key", "project_dir", "session_id", "parent_ref").iter_rows()
    )
    keys = sessions.get_column("session_key").to_list()
    parent_col = [parents.get(k) for k in keys]
    root = pl.DataFrame(
        {"session_key": keys, "root_session_key": [p or k for p, k in zip(parent_col, keys, strict=True)]},
        schema={"session_key": pl.String, "root_session_key": pl.String},
    )
    sessions = sessions.with_columns(
        parent_session_key=pl.Series(parent_col, dtype=pl.String),
        root_session_key=root.get_column("root_session_key"),
    ).drop("subagents")
    children = (
        sessions.filter(pl.col("parent_session_key").is_not_null())
        .group_by("parent_session_key")
        .agg(pl.len().alias("subagents"))
    )
    sessions = sessions.join(
        children, left_on="session_key", right_on="parent_session_key", how="left", maintain_order="left"
    )
    sessions = sessions.with_columns(pl.col("subagents").fill_null(0))

    # Rows already stored keep their root key unless a parent link changed (a parent session appeared or
    # vanished): only then is the key joined in again (the common case, a session grew, skips it).
    before = dict(cached.sessions.select("session_key", "root_session_key").iter_rows())
    relinked = any(before.get(k, r) != r for k, r in root.iter_rows())

    def with_root(df: pl.DataFrame) -> pl.DataFrame:
        return (
            df.drop("root_session_key")
            .join(root, on="session_key", how="left", maintain_order="left")
            .select(df.columns)
        )

    gone_keys = gone.to_list()

    def rejoin(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
        old = without_sessions(old, gone_keys)
        if "root_session_key" in old.columns:
            # The re-read sessions were built alone: their root keys always come from the whole.
            new = with_root(new)
            old = with_root(old) if relinked else old
        return pl.concat([old, new], how="diagonal_relaxed")

    warnings = list(dict.fromkeys([*cached.warnings, *fresh.warnings]))
    assert cached.calls is not None  # built or stored
    assert fresh.calls is not None
    spliced = assemble(
        sessions.select(cached.sessions.columns),
        rejoin(cached.messages, fresh.messages),
        rejoin(cached.requests, fresh.requests),
        rejoin(cached.calls, fresh.calls),
        warnings=warnings,
    )
    changed = None if relinked else frozenset([*gone_keys, *fresh.sessions.get_column("session_key")])
    return spliced, changed


# Past this many runs of kept rows, removing sessions copies the rows instead of slicing around them.
_MAX_SLICES = 64


def without_sessions(df: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """``df`` without the rows of the sessions ``keys``.

    A session's rows are contiguous (frames are built and spliced a session at a time), so the rows kept are
    a few runs of ``df``: those are sliced out, which copies nothing, where a filter would copy every row.
    """
    if not keys or df.height == 0:
        return df
    dropped = df.get_column("session_key").is_in(list(keys)).arg_true().to_list()
    if not dropped:
        return df
    runs: list[tuple[int, int]] = []
    start = 0
    for i in dropped:
        if i > start:
            runs.append((start, i))
            if len(runs) > _MAX_SLICES:
                return df.filter(pl.col("session_key").is_in(list(keys)).not_())
        start = i + 1
    if start < df.height:
        runs.append((start, df.height))
    if not runs:
        return df.clear()
    return pl.concat([df.slice(a, b - a) for a, b in runs], rechunk=False)


def build_corpus(
    results: list[FileColumns],
    found: Discovery | None = None,
    *,
    price_memo: bool = True,
    rows: Rows | None = None,
    prices: PriceTable | None = None,
    subagents: bool = True,
) -> Corpus:
    """Frames from flattened files. Consumes the rows of ``results`` (their encoded columns are emptied).

    ``rows`` may hold some files' rows decoded already (as worker results arrived); the rest are decoded here.
    ``subagents=False`` leaves out every subagent session: discovery skips the nested files, and the flat
    ones (``kind: "subagent"`` in a file of ``chats/`` itself) are known only once read, so they go here.
    """
    problems = [Problem(r.path, r.error) for r in results if r.error]
    good = [r for r in results if not r.error]
    rows = rows if rows is not None else Rows()
    rows.add(good)
    sessions = group_sessions(good)
    refs = {s.key: parent_ref_of(s.primary) for s in sessions}
    if not subagents:
        sessions = [s for s in sessions if refs[s.key] is None and s.primary.kind != "subagent"]

    layout = _layout_of(sessions, refs, rows)
    files_meta = pl.DataFrame(layout.meta, schema=SESSION_META_SCHEMA)
    messages, tools = _message_frames(rows, layout)
    corpus = _derive(files_meta, messages, tools, price_memo=price_memo, prices=prices)
    corpus.warnings = [*rows.warnings, *corpus.warnings]
    rows.warnings.clear()
    corpus.problems = problems
    corpus.files_read = len(good)
    corpus.files_found = len(results)
    corpus.bytes_read = sum(r.size for r in good)
    corpus.broken_lines = sum(r.broken_lines for r in good)
    if found is not None:
        corpus.skipped = [(str(p), why) for p, why in found.skipped]
        corpus.problems.extend(discovery_problems(found))
    return corpus


@dataclass(slots=True)
class _Layout:
    """What one pass over the sessions gathers: their metadata columns (``SESSION_META_SCHEMA``), where their
    rows are (runs of message and tool-call rows in frame order) and the rank of each one's primary file."""

    meta: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in SESSION_META_SCHEMA})
    msg_runs: list[tuple[str, int, int, int]] = field(default_factory=list)  # (key, file rank, start, rows)
    tool_runs: list[tuple[str, int, int, int]] = field(default_factory=list)
    primary_rank: dict[str, int] = field(default_factory=dict)


def _layout_of(sessions: list[_Session], refs: dict[str, str | None], rows: Rows) -> _Layout:
    """The sessions' metadata, their parents linked, and where each session's rows are in ``rows``."""
    parents = link_parents(
        (s.key, s.primary.project_dir, s.primary.session_id, refs[s.key]) for s in sessions
    )
    layout = _Layout()
    srow = layout.meta
    for s in sessions:
        p = s.primary
        parent_key = parents.get(s.key)
        parent_ref = refs[s.key]
        kind = "subagent" if parent_ref is not None or p.kind == "subagent" else p.kind
        srow["session_key"].append(s.key)
        srow["group_key"].append(p.group_key)
        srow["parent_ref"].append(parent_ref)
        srow["session"].append(os.path.basename(p.path).rsplit(".", 1)[0])
        srow["session_id"].append(p.session_id)
        srow["project"].append(p.project)
        srow["project_dir"].append(p.project_dir)
        srow["project_hash"].append(p.project_hash)
        srow["kind"].append(kind)
        srow["parent_session_key"].append(parent_key)
        srow["root_session_key"].append(parent_key or s.key)
        srow["file"].append(p.path)
        srow["files"].append(len(s.files))
        srow["era"].append("+".join(f.era for f in s.files))
        srow["summary"].append(p.summary)
        srow["derived_from"].append(p.derived_from)
        srow["compacted_at"].append(max((f.compacted_at for f in s.files if f.compacted_at), default=None))
        srow["start_time"].append(min((f.start_time for f in s.files if f.start_time), default=None))
        srow["last_updated"].append(max((f.last_updated for f in s.files if f.last_updated), default=None))
        srow["broken_lines"].append(sum(f.broken_lines for f in s.files))
        srow["invalid_utf8_lines"].append(sum(f.invalid_utf8_lines for f in s.files))
        srow["first_invalid_utf8_line"].append(
            next((f.first_invalid_utf8_line for f in s.files if f.first_invalid_utf8_line), None)
        )
        srow["first_broken_line"].append(
            next((f.first_broken_line for f in s.files if f.first_broken_line), None)
        )
        srow["first_overlong_line"].append(
            next((f.first_overlong_line for f in s.files if f.first_overlong_line), None)
        )
        srow["rewinds"].append(sum(f.rewinds for f in s.files))
        srow["checkpoints"].append(sum(f.checkpoints for f in s.files))
        srow["live_messages"].append(p.live_messages)
        layout.primary_rank[s.key] = len(s.files) - 1
        for rank, f in enumerate(s.files):  # older files first: their rows come first
            msg_start, tool_start = rows.where[f.path]
            if f.n_messages:
                layout.msg_runs.append((s.key, rank, msg_start, f.n_messages))
            if f.n_tools:
                layout.tool_runs.append((s.key, rank, tool_start, f.n_tools))
    return layout


def _message_frames(rows: Rows, layout: _Layout) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The message and tool-call frames, a session's rows together (the copies its files share merged)."""
    messages = in_order(rows.messages, layout.msg_runs, {**MESSAGE_SCHEMA, "ts": TS_TYPE})
    tools = in_order(rows.tools, layout.tool_runs, TOOL_SCHEMA)
    if any(rank for rank in layout.primary_rank.values()):
        messages, tools = merge_pairs(messages, tools, layout.primary_rank)
    messages = messages.drop("_rank").with_columns(position=pl.int_range(pl.len()).over("session_key"))
    messages = messages.select("session_key", "position", *MESSAGE_COLUMNS, "ts")
    return messages, tools.drop("_rank")


def _derive(
    meta: pl.DataFrame,
    messages: pl.DataFrame,
    tools: pl.DataFrame,
    *,
    price_memo: bool = True,
    prices: PriceTable | None = None,
) -> Corpus:
    from tests.oracle.pricing import add_costs

    ids = meta.select("session_key", "session", "session_id", "project", "kind", "root_session_key")
    ts = messages.get_column("ts")  # parsed as the rows were decoded; it goes after `turn`, as it always has
    messages = messages.drop("ts").with_columns(
        turn=pl.col("is_prompt").cast(pl.Int64).cum_sum().over("session_key"),
        ts=ts,
        compression=(pl.col("compression_info") | pl.col("is_snapshot")),
    )
    messages = messages.with_columns(
        _compressions_seen=pl.col("compression").cast(pl.Int64).cum_sum().over("session_key")
    )

    # Identity columns are joined onto the smaller frames only; messages keep just the session key.
    requests = messages.filter((pl.col("type") == "gemini") & pl.col("input").is_not_null()).join(
        ids, on="session_key", how="left"
    )
    # A request recorded without a model name (Gemini CLI 0.61.0 writes an empty answer as a `gemini` message
    # with tokens and no `model`: chatRecordingService.ts `recordMessageTokens` creates it before any model
    # is named) was answered by the session's model: take the request before it, else the one after.
    requests = requests.with_columns(
        model=pl.col("model").forward_fill().backward_fill().over("session_key"),
        model_inferred=pl.col("model").is_null()
        & pl.col("model").forward_fill().backward_fill().over("session_key").is_not_null(),
    )
    requests = requests.with_columns(context_limit=context_limit_expr(pl.col("model")))
    requests = requests.with_columns(
        context=pl.col("input"),
        context_share=pl.col("input") / pl.col("context_limit"),
        cache_ratio=cache_ratio_expr(),
    )
    requests, warnings = add_costs(requests, prices, memo=price_memo)
    requests = with_composition(with_events(requests))
    requests = requests.select(
        "session_key",
        "session",
        "session_id",
        "project",
        "kind",
        "root_session_key",
        "message_id",
        "position",
        "turn",
        "timestamp",
        "ts",
        "live",
        "model",
        "model_inferred",
        *TOKEN_COLUMNS,
        "context",
        "context_limit",
        "context_share",
        "cache_ratio",
        "cost",
        "tool_calls",
        "tool_errors",
        *COMPOSITION_COLUMNS,
        "event",
    )

    sessions = sessions_frame(meta, messages, requests, prices)
    return assemble(sessions, messages, requests, tools, warnings=warnings)


def assemble(
    sessions: pl.DataFrame,
    messages: pl.DataFrame,
    requests: pl.DataFrame,
    calls: pl.DataFrame,
    *,
    warnings: list[str] | None = None,
) -> Corpus:
    """A corpus of these frames, its tool calls (``calls`` with their turn and session) and turns built when
    first read (see ``_Later``). A build, a splice and a stored corpus all take this one way, so the derived
    frames are the same whichever made them."""
    ids = sessions.select("session_key", "session", "session_id", "project", "kind", "root_session_key")

    def tool_calls() -> pl.DataFrame:
        return calls.join(
            messages.select("session_key", "message_id", "turn", "live"),
            on=["session_key", "message_id"],
            how="left",
            maintain_order="left",
        ).join(ids, on="session_key", how="left", maintain_order="left")

    return Corpus(
        sessions,
        messages,
        requests,
        tool_calls,
        lambda: turns_frame(messages, requests, sessions),
        calls=calls,
        warnings=warnings if warnings is not None else [],
    )
