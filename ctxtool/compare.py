"""Run several compaction strategies on the same sessions and measure them the same way.

Owns: ``compare_sessions`` (one row per session and strategy), the flat row schema shared by the table,
json and csv outputs, and the chart file (matplotlib, imported lazily, Agg backend). Must not print or
import rich/typer.

Every strategy runs through ``ctxtool.compact.compact_session`` with ``force`` (whether and where its own
trigger fires is reported separately), into a directory (a temporary one unless ``keep_dir`` is given) read
back with ``read_session``, so every measured result is a session file Gemini CLI can load. Tokens are Gemini
CLI's local estimate of the resumed history, each strategy's own measure beside it; fact retention compares
the facts of the whole original history with the text of the whole new one.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxtool.common.errors import CtxtoolError, OutputError, UsageError
from ctxtool.compact import (
    CompactionReport,
    CompactOptions,
    Destination,
    chat_model,
    compact_session,
    measure_history,
)
from ctxtool.compress.strategies import registry
from ctxtool.compress.strategies.base import StrategyOptions, wire_history
from ctxtool.compress.summarize.facts import FACT_KINDS, Facts, extract_facts, history_text, retention
from ctxtool.compress.summarizer import Summarizer
from ctxtool.session.discover import SessionPath
from ctxtool.session.read import read_session

DEFAULT_STRATEGIES = registry.STRATEGY_NAMES  # every strategy, each with its default settings
COLUMNS = (
    *("session", "strategy", "status", "would_trigger", "trigger_turn", "trigger_message_id"),
    *("trigger_measure", "trigger_limit", "trigger_tokens", "tokens_before", "tokens_after", "reduction"),
    *("messages_before", "messages_after", "messages_kept", "messages_summarised"),
    *(f"{k}_{what}" for what in ("kept", "total", "retention") for k in FACT_KINDS),
    *("retention", "own_measure", "own_tokens_before", "own_tokens_after", "seconds", "output_path"),
    *("notes", "error"),
)


def parse_strategies(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("no strategy given", f"Pass e.g. --strategies {','.join(DEFAULT_STRATEGIES)}")
    for name in names:
        registry.get_strategy(name)
    return list(dict.fromkeys(names))


def _empty_row(session: str, strategy: str) -> dict[str, Any]:
    return {**dict.fromkeys(COLUMNS), "session": session, "strategy": strategy, "notes": ""}


@dataclass(frozen=True)
class _Run:
    """What every strategy row of one ``compare_sessions`` call shares."""

    summarizer: Summarizer
    context_window: int | None
    base: Path  # the strategies' output folders go here
    keep_dir: Path | None  # the outputs are kept (and their paths reported) when given


@dataclass(frozen=True)
class _Original:
    """One session as read, measured once for all of its strategy rows."""

    source: SessionPath | Path
    path: Path
    messages: list[dict[str, Any]]
    model: str
    tokens: int  # measure_history
    facts: Facts


def compare_sessions(
    sources: Sequence[SessionPath | Path],
    names: Sequence[str],
    summarizer: Summarizer,
    *,
    context_window: int | None = None,
    keep_dir: Path | None = None,
    advance: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row (see ``COLUMNS``) per session and strategy, sessions in the given order. ``advance`` is
    called with each session's file name once its strategies have run (a progress bar)."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ctxtool-compare-") as tmp:
        run = _Run(summarizer, context_window, keep_dir if keep_dir is not None else Path(tmp), keep_dir)
        for source in sources:
            path = source.path if isinstance(source, SessionPath) else Path(source)
            try:
                session = read_session(path)
            except (CtxtoolError, OSError) as exc:
                rows += [
                    {**_empty_row(str(path), name), "status": "FAILED", "error": str(exc)} for name in names
                ]
            else:
                messages = [dict(m) for m in session.messages]
                model, facts = chat_model(messages), extract_facts(wire_history(messages))
                original = _Original(source, path, messages, model, measure_history(messages, model), facts)
                rows += [_strategy_row(original, name, run) for name in names]
            if advance is not None:
                advance(path.name)
    return rows


def _strategy_row(original: _Original, name: str, run: _Run) -> dict[str, Any]:
    """The row of one strategy on one session: its trigger, then its compaction measured."""
    row = _empty_row(str(original.path), name)
    row.update(tokens_before=original.tokens, messages_before=len(original.messages))
    trig = registry.get_strategy(name).trigger(
        original.messages, StrategyOptions(chat_model=original.model, context_window=run.context_window)
    )
    row.update({k if k == "would_trigger" else f"trigger_{k}": v for k, v in trig.as_dict().items()})
    options = CompactOptions(strategy=name, force=True, context_window=run.context_window)
    destination = Destination("out", run.base / name.replace(":", "_"))
    start = time.perf_counter()
    try:
        report = compact_session(original.source, run.summarizer, options, destination)
    except (CtxtoolError, OSError) as exc:
        row.update(status="FAILED", error=str(exc), seconds=round(time.perf_counter() - start, 4))
        return row
    row["seconds"] = round(time.perf_counter() - start, 4)
    row.update(status=report.status, notes="; ".join(report.notes), **_own_measure(name, report))
    _measure_result(original, report, run.keep_dir, row)
    return row


def _own_measure(name: str, report: CompactionReport) -> dict[str, Any]:
    """The strategy's own measure of the tokens before and after (the gemini-cli threshold check's for it)."""
    if own := report.strategy_tokens:
        measure, before, after = own["measure"], own["before"], own["after"]
    elif name.partition(":")[0] == "gemini-cli":
        measure = f"gemini-cli threshold check ({report.threshold_tokens_source})"
        before, after = report.threshold_tokens, report.tokens_after
    else:
        return {}
    return {"own_measure": measure, "own_tokens_before": before, "own_tokens_after": after}


def _measure_result(
    original: _Original, report: CompactionReport, keep_dir: Path | None, row: dict[str, Any]
) -> None:
    """The row's columns of what the compaction wrote, read back as Gemini CLI loads it (the original when
    nothing was written): messages, tokens and fact retention."""
    after_messages = original.messages
    if report.written and report.output_path:
        after_messages = [dict(m) for m in read_session(report.output_path).messages]
        row.update(messages_kept=report.messages_kept, messages_summarised=report.messages_summarised)
        if keep_dir is not None:
            row["output_path"] = report.output_path
    else:
        row.update(messages_kept=len(original.messages), messages_summarised=0)
    after, before = measure_history(after_messages, original.model), original.tokens
    row.update(tokens_after=after, messages_after=len(after_messages))
    row["reduction"] = round(1 - after / before, 4) if before else None
    kept = retention(original.facts, history_text(wire_history(after_messages)))
    for kind in FACT_KINDS:
        k = kept.kind(kind)
        row[f"{kind}_kept"], row[f"{kind}_total"] = len(k.kept), k.total
        row[f"{kind}_retention"] = None if k.percent is None else round(k.percent, 1)
    found, total = (sum(row[f"{k}_{what}"] for k in FACT_KINDS) for what in ("kept", "total"))
    row["retention"] = round(100 * found / total, 1) if total else None


def strategy_means(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per strategy (first-seen order): mean tokens before/after and mean retention over its rows."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("tokens_after") is not None:
            groups.setdefault(row["strategy"], []).append(row)
    means = []
    for strategy, group in groups.items():
        kept = [r["retention"] for r in group if r.get("retention") is not None]
        mean = {k: sum(r[k] for r in group) / len(group) for k in ("tokens_before", "tokens_after")}
        retained = sum(kept) / len(kept) if kept else None
        means.append({"strategy": strategy, "sessions": len(group), **mean, "retention": retained})
    return means


def write_chart(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """A PNG or SVG (by suffix) with mean tokens before/after and mean fact retention per strategy."""
    suffix = path.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise UsageError(f"chart file {path} is neither .png nor .svg", "Name the chart file *.png or *.svg")
    try:
        import matplotlib
    except ImportError:
        raise UsageError(
            "writing a chart needs matplotlib",
            "Install it (pip install 'ctxtool[chart]', or pip install matplotlib) or drop --chart",
        ) from None
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    means = strategy_means(rows)
    names = [m["strategy"] for m in means]
    xs = list(range(len(names)))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(names) * 2), 4.5))
    try:
        width = 0.4
        ax1.bar([x - width / 2 for x in xs], [m["tokens_before"] for m in means], width, label="before")
        ax1.bar([x + width / 2 for x in xs], [m["tokens_after"] for m in means], width, label="after")
        ax1.set_title("tokens (Gemini CLI estimate, mean per session)")
        ax1.set_xticks(xs, names, rotation=30, ha="right")
        ax1.legend()
        ax2.bar(xs, [m["retention"] or 0 for m in means], 0.6, color="tab:green")
        ax2.set_ylim(0, 100)
        ax2.set_title("fact retention % (paths, commands, errors, directives)")
        ax2.set_xticks(xs, names, rotation=30, ha="right")
        fig.tight_layout()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format=suffix[1:], metadata={"Date": None} if suffix == ".svg" else None)
        except OSError as exc:
            raise OutputError(path, exc) from exc
    finally:
        plt.close(fig)
    return path
