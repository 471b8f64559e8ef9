"""Run several compaction strategies on the same sessions and measure them the same way.

Owns: ``compare_sessions`` (one row per session and strategy), the flat row schema shared by the table,
json and csv outputs, and the chart file (matplotlib, imported lazily, Agg backend). Must not print or
import rich/typer.

Every strategy is run through ``ctxtool.compact.compact_session`` with ``force`` (so that each one shows
what it would produce even when its trigger would not fire; whether and where the trigger fires is reported
separately), its output is written to a directory (a temporary one unless ``keep_dir`` is given) and read
back with ``read_session``, so every measured result is a session file Gemini CLI can load. Tokens before
and after are Gemini CLI's local estimate over the resumed history for every strategy; each strategy's own
measure is reported beside it. Fact retention compares the facts of the whole original history with the
text of the whole new history.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ctxtool.common.errors import CtxtoolError, UsageError
from ctxtool.compress.strategies import registry
from ctxtool.compress.strategies.base import StrategyOptions, wire_history
from ctxtool.compress.summarize.facts import FACT_KINDS, extract_facts, history_text, retention
from ctxtool.compress.summarizer import Summarizer
from ctxtool.session.discover import SessionPath
from ctxtool.session.read import read_session

DEFAULT_STRATEGIES = registry.STRATEGY_NAMES  # every strategy, each with its default settings
COLUMNS = (
    "session",
    "strategy",
    "status",
    "would_trigger",
    "trigger_turn",
    "trigger_message_id",
    "trigger_measure",
    "trigger_limit",
    "trigger_tokens",
    "tokens_before",
    "tokens_after",
    "reduction",
    "messages_before",
    "messages_after",
    "messages_kept",
    "messages_summarised",
    *(f"{k}_kept" for k in FACT_KINDS),
    *(f"{k}_total" for k in FACT_KINDS),
    *(f"{k}_retention" for k in FACT_KINDS),
    "retention",
    "own_measure",
    "own_tokens_before",
    "own_tokens_after",
    "seconds",
    "output_path",
    "notes",
    "error",
)


def parse_strategies(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("no strategy given", f"Pass e.g. --strategies {','.join(DEFAULT_STRATEGIES)}")
    for name in names:
        registry.get_strategy(name)
    return list(dict.fromkeys(names))


def _empty_row(session: str, strategy: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(session=session, strategy=strategy, notes="")
    return row


def _each(
    sources: Sequence[SessionPath | Path], advance: Callable[[str], None] | None
) -> Iterator[SessionPath | Path]:
    """The sources, calling ``advance`` after the loop body has handled each (however it ended)."""
    for source in sources:
        yield source
        if advance is not None:
            advance((source.path if isinstance(source, SessionPath) else Path(source)).name)


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
    from ctxtool.compact import CompactOptions, Destination, chat_model, compact_session, measure_history

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ctxtool-compare-") as tmp:
        base = keep_dir if keep_dir is not None else Path(tmp)
        for source in _each(sources, advance):
            path = source.path if isinstance(source, SessionPath) else Path(source)
            try:
                original = read_session(path)
            except (CtxtoolError, OSError) as exc:
                for name in names:
                    row = _empty_row(str(path), name)
                    row.update(status="FAILED", error=str(exc))
                    rows.append(row)
                continue
            messages = [dict(m) for m in original.messages]
            model = chat_model(messages)
            before = measure_history(messages, model)
            facts = extract_facts(wire_history(messages))
            for name in names:
                row = _empty_row(str(path), name)
                row.update(tokens_before=before, messages_before=len(messages))
                trig = registry.get_strategy(name).trigger(
                    messages, StrategyOptions(chat_model=model, context_window=context_window)
                )
                row.update(
                    would_trigger=trig.would_trigger,
                    trigger_turn=trig.turn,
                    trigger_message_id=trig.message_id,
                    trigger_measure=trig.measure,
                    trigger_limit=trig.limit,
                    trigger_tokens=trig.tokens,
                )
                options = CompactOptions(strategy=name, force=True, context_window=context_window)
                destination = Destination("out", base / name.replace(":", "_"))
                start = time.perf_counter()
                try:
                    report = compact_session(source, summarizer, options, destination)
                except (CtxtoolError, OSError) as exc:
                    row.update(status="FAILED", error=str(exc), seconds=time.perf_counter() - start)
                    rows.append(row)
                    continue
                row["seconds"] = round(time.perf_counter() - start, 4)
                row["status"] = report.status
                row["notes"] = "; ".join(report.notes)
                if report.strategy_tokens:
                    row.update(
                        own_measure=report.strategy_tokens["measure"],
                        own_tokens_before=report.strategy_tokens["before"],
                        own_tokens_after=report.strategy_tokens["after"],
                    )
                elif name.partition(":")[0] == "gemini-cli":
                    row.update(
                        own_measure=f"gemini-cli threshold check ({report.threshold_tokens_source})",
                        own_tokens_before=report.threshold_tokens,
                        own_tokens_after=report.tokens_after,
                    )
                after_messages = messages
                if report.written and report.output_path:
                    after_messages = [dict(m) for m in read_session(report.output_path).messages]
                    row["messages_kept"] = report.messages_kept
                    row["messages_summarised"] = report.messages_summarised
                    if keep_dir is not None:
                        row["output_path"] = report.output_path
                else:
                    row["messages_kept"] = len(messages)
                    row["messages_summarised"] = 0
                after = measure_history(after_messages, model)
                row["tokens_after"] = after
                row["messages_after"] = len(after_messages)
                row["reduction"] = round(1 - after / before, 4) if before else None
                kept = retention(facts, history_text(wire_history(after_messages)))
                found = total = 0
                for kind in FACT_KINDS:
                    k = kept.kind(kind)
                    row[f"{kind}_kept"] = len(k.kept)
                    row[f"{kind}_total"] = k.total
                    row[f"{kind}_retention"] = None if k.percent is None else round(k.percent, 1)
                    found += len(k.kept)
                    total += k.total
                row["retention"] = round(100 * found / total, 1) if total else None
                rows.append(row)
    return rows


def strategy_means(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per strategy (first-seen order): mean tokens before/after and mean retention over its rows."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.get("tokens_after") is None:
            continue
        acc = out.setdefault(row["strategy"], {"strategy": row["strategy"], "n": 0, "b": 0, "a": 0, "r": []})
        acc["n"] += 1
        acc["b"] += row["tokens_before"]
        acc["a"] += row["tokens_after"]
        if row.get("retention") is not None:
            acc["r"].append(row["retention"])
    return [
        {
            "strategy": a["strategy"],
            "sessions": a["n"],
            "tokens_before": a["b"] / a["n"],
            "tokens_after": a["a"] / a["n"],
            "retention": sum(a["r"]) / len(a["r"]) if a["r"] else None,
        }
        for a in out.values()
    ]


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
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=suffix[1:], metadata={"Date": None} if suffix == ".svg" else None)
    finally:
        plt.close(fig)
    return path
