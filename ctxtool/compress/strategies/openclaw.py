"""OpenClaw's safeguard compaction (openclaw/openclaw ``src/agents/compaction.ts`` and
``src/agents/pi-hooks/compaction-safeguard.ts`` @ 8f8492d), replayed on a Gemini CLI session. Spec:
other-strategies.md section 4.

Pi decides when and where to cut (``pi.prepare``) with OpenClaw's budgets (reserve at least 20,000); the
safeguard replaces Pi's summary:

* no real message to summarise: the structured fallback (five headings), no model call;
* history-share pruning when the kept part exceeds half the window: oldest halves summarised apart, that
  summary becoming the previous one;
* the last 3 user turns are left out of the summariser input and quoted in ``## Recent turns preserved
  verbatim``;
* chunked summarisation (``summarizeInStages``) above the adaptive chunk budget: halves by token share,
  each summarised with Pi's ``generateSummary`` plus the identifier-preservation instructions, then merged;
* suffix: split-turn context, preserved turns, ``## Tool Failures``, bounded file lists; the whole summary
  capped at 16,000 characters.

Not exact offline: the quality guard (off by default upstream), the AGENTS.md workspace rules, provider
plugins, per-chunk retries and the memory flush (it runs tools) are not replayed; the bounded file-list
format is ctxtool's (upstream's truncation marker was not read).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ctxtool.common.wording import plural
from ctxtool.compress.strategies import base as s
from ctxtool.compress.strategies import pi
from ctxtool.compress.summarize.facts import normalize_ws
from ctxtool.compress.summarize.offline import OfflineSummarizer

RESERVE_TOKENS_FLOOR = 20_000  # DEFAULT_PI_COMPACTION_RESERVE_TOKENS_FLOOR, pi-settings.ts
BASE_CHUNK_RATIO = 0.4  # compaction.ts
MIN_CHUNK_RATIO = 0.15
SAFETY_MARGIN = 1.2
SUMMARIZATION_OVERHEAD_TOKENS = 4096
MIN_MESSAGES_FOR_SPLIT = 4
MAX_HISTORY_SHARE = 0.5
RECENT_TURNS_PRESERVE = 3  # compaction-safeguard.ts
MAX_RECENT_TURN_TEXT_CHARS = 600
MAX_TOOL_FAILURES = 8
MAX_TOOL_FAILURE_CHARS = 240
MAX_COMPACTION_SUMMARY_CHARS = 16_000
MAX_FILE_OPS_SECTION_CHARS = 2_000
MAX_FILE_OPS_LIST_CHARS = 900
TRUNCATION_MARKER = "\n\n[Compaction summary truncated to fit budget]"
TURN_PREFIX_INSTRUCTIONS = (
    "This summary covers the prefix of a split turn. Focus on the original request, early progress, and "
    "any details needed to understand the retained suffix."
)
SAFEGUARD_HEADINGS = (
    "## Decisions",
    "## Open TODOs",
    "## Constraints/Rules",
    "## Pending user asks",
    "## Exact identifiers",
)
# ctxtool's wording; the five headings and the identifier rule are OpenClaw's.
IDENTIFIER_PRESERVATION_INSTRUCTIONS = (
    "Also include these sections: " + ", ".join(h[3:] for h in SAFEGUARD_HEADINGS) + ". Copy opaque "
    "identifiers (hashes, ids, URLs, file paths, host:port, long numbers) exactly as they appear; never "
    "shorten or paraphrase them."
)
MERGE_SUMMARIES_INSTRUCTIONS = (
    "The messages above are partial summaries of consecutive parts of one conversation. Merge them into one "
    "summary: keep every decision, open TODO, constraint and pending question, newest facts winning."
)


def _fallback(previous: str | None) -> str:
    """The structured fallback boundary (no model call): ``previous`` if it has the five headings in order."""
    lines = iter(ln.strip() for ln in (previous or "").splitlines())
    if previous and all(heading in lines for heading in SAFEGUARD_HEADINGS):  # each after the one before
        return previous
    return (
        f"## Decisions\n{previous or pi.NO_PRIOR_HISTORY}\n\n## Open TODOs\nNone.\n\n"
        "## Constraints/Rules\nNone.\n\n## Pending user asks\nNone.\n\n## Exact identifiers\nNone captured."
    )


def compute_adaptive_chunk_ratio(tokens: Sequence[int], context_window: int) -> float:
    """``computeAdaptiveChunkRatio`` (compaction.ts)."""
    if not tokens:
        return BASE_CHUNK_RATIO
    avg_ratio = (sum(tokens) / len(tokens)) * SAFETY_MARGIN / context_window
    if avg_ratio > 0.1:
        reduction = min(avg_ratio * 2, BASE_CHUNK_RATIO - MIN_CHUNK_RATIO)
        return max(MIN_CHUNK_RATIO, BASE_CHUNK_RATIO - reduction)
    return BASE_CHUNK_RATIO


def split_by_token_share(records: Sequence[int], tokens: dict[int, int], parts: int = 2) -> list[list[int]]:
    """``splitMessagesByTokenShare`` on record indices (a record never separates a call from its result)."""
    total = sum(tokens[i] for i in records)
    target = total / parts
    out: list[list[int]] = [[]]
    acc = 0
    for i in records:
        if len(out) < parts and out[-1] and acc + tokens[i] > target * len(out):
            out.append([])
        out[-1].append(i)
        acc += tokens[i]
    return [p for p in out if p]


def chunk_by_max_tokens(records: Sequence[int], tokens: dict[int, int], max_tokens: int) -> list[list[int]]:
    """``chunkMessagesByMaxTokens``: effective max = max / 1.2; an oversized message is its own chunk."""
    effective = max(1, math.floor(max_tokens / SAFETY_MARGIN))
    chunks: list[list[int]] = []
    current: list[int] = []
    acc = 0
    for i in records:
        if current and acc + tokens[i] > effective:
            chunks.append(current)
            current, acc = [], 0
        current.append(i)
        acc += tokens[i]
        if tokens[i] > effective:
            chunks.append(current)
            current, acc = [], 0
    if current:
        chunks.append(current)
    return chunks


def split_preserved_recent_turns(
    records: Sequence[s.Record], indices: Sequence[int], turns: int
) -> tuple[list[s.Unit], list[int]]:
    """(preserved units, remaining record indices): from the ``turns``-th last user message on, or all user
    messages plus the last ``2 * turns`` user/assistant messages when there are fewer."""
    units = [u for i in indices for u in s.record_units(i, records[i])]
    talk = [k for k, u in enumerate(units) if u.role in ("user", "assistant")]
    users = [k for k in talk if units[k].role == "user"]
    if turns <= 0 or not talk:
        return [], list(indices)
    if len(users) >= turns:
        keep = {k for k in talk if k >= users[-turns]}
    else:
        keep = set(users) | set(talk[-2 * turns :])
    ids = {c.id for k in keep for c in units[k].calls}
    first = min(keep)
    for k, u in enumerate(units):
        if u.role == "tool_result" and k >= first and u.call_id in ids:
            keep.add(k)
    kept_records = {units[k].index for k in keep if units[k].role != "tool_result"}
    return [units[k] for k in sorted(keep)], [i for i in indices if i not in kept_records]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def preserved_section(units: Sequence[s.Unit]) -> str:
    lines = []
    for u in (u for u in units if u.text.strip()):
        label = {"user": "User", "assistant": "Assistant"}.get(u.role, f"Tool result ({u.tool_name})")
        lines.append(f"- {label}: {_clip(u.text.strip(), MAX_RECENT_TURN_TEXT_CHARS)}")
    return "\n\n## Recent turns preserved verbatim\n" + "\n".join(lines) if lines else ""


def tool_failures_section(units: Sequence[s.Unit]) -> str:
    failures: dict[str, s.Unit] = {}  # by call id, the first result of each
    for u in units:
        if u.role == "tool_result" and u.is_error:
            failures.setdefault(u.call_id, u)
    if not failures:
        return ""
    lines = []
    for u in list(failures.values())[:MAX_TOOL_FAILURES]:
        text = normalize_ws(u.text)
        text = _clip(text, MAX_TOOL_FAILURE_CHARS) if text else "failed (no output)"
        lines.append(f"- {u.tool_name or 'tool'}: {text}")
    if len(failures) > MAX_TOOL_FAILURES:
        lines.append(f"- ...and {len(failures) - MAX_TOOL_FAILURES} more")
    return "\n\n## Tool Failures\n" + "\n".join(lines)


def _bounded_list(paths: Sequence[str]) -> list[str]:
    shown: list[str] = []
    used = 0
    for p in paths:
        if used + len(p) + 1 > MAX_FILE_OPS_LIST_CHARS:
            shown.append(f"...and {len(paths) - len(shown)} more")
            break
        shown.append(p)
        used += len(p) + 1
    return shown


def cap_preserving_suffix(body: str, suffix: str, cap: int = MAX_COMPACTION_SUMMARY_CHARS) -> str:
    if len(suffix) >= cap:
        return suffix[-cap:]
    if len(body) + len(suffix) <= cap:
        return body + suffix
    room = max(0, cap - len(suffix) - len(TRUNCATION_MARKER))
    return body[:room] + TRUNCATION_MARKER + suffix


@dataclass
class _Run(pi.Summarising):
    """One safeguard compaction: Pi's summary calls on the session's records, chunked by ``max_chunk``."""

    max_chunk: int = 1
    tokens: dict[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = {i: pi.estimate_records([r]) for i, r in enumerate(self.job.messages)}

    def generate(
        self,
        records: Sequence[s.Record],
        previous: str | None,
        custom: str | None,
        offline: Callable[[OfflineSummarizer], str] | None = None,
    ) -> str:
        """Pi's ``generateSummary`` with the identifier-preservation instructions."""
        focus = IDENTIFIER_PRESERVATION_INSTRUCTIONS + ("\n\nAdditional focus:\n" + custom if custom else "")
        offline = offline or (lambda summ: offline_safeguard(summ, records, previous))
        return pi.generate_summary(self, records, previous, focus, offline) or ""

    def chunks(self, indices: Sequence[int], previous: str | None, custom: str | None) -> str:
        summary = previous
        for chunk in chunk_by_max_tokens(indices, self.tokens, self.max_chunk):
            summary = self.generate([self.job.messages[i] for i in chunk], summary, custom)
        return summary or pi.NO_PRIOR_HISTORY

    def in_stages(self, indices: Sequence[int], previous: str | None, custom: str | None) -> str:
        if not indices:
            return previous or pi.NO_PRIOR_HISTORY
        total = sum(self.tokens[i] for i in indices)
        if len(indices) < MIN_MESSAGES_FOR_SPLIT or total <= self.max_chunk:
            return self.chunks(indices, previous, custom)
        partials = [self.chunks(p, None, custom) for p in split_by_token_share(indices, self.tokens)]
        merge = MERGE_SUMMARIES_INSTRUCTIONS + ("\n\n" + custom if custom else "")
        merged_records = [s.text_record("user", p, "", lambda: "partial") for p in partials]
        return self.generate(merged_records, previous, merge, lambda summ: offline_merge(partials, previous))


def offline_safeguard(summ: OfflineSummarizer, records: Sequence[s.Record], previous: str | None) -> str:
    """Pi's layout followed by the five safeguard headings, from the offline fact extraction."""
    body = pi.offline_pi_summary(summ, records, previous)
    sec = s.offline_sections(summ, records)
    identifiers = [ln for k in ("artifact_trail", "file_system_state") for ln in sec.get(k, [])]
    identifiers += [ln for ln in sec.get("recent_actions", []) if ln.startswith("$ ")]
    todos = [ln for ln in sec.get("task_state", []) if "[DONE]" not in ln]
    rules, asks = sec.get("active_constraints", []), sec.get("task_state", [])[-1:]
    lines = [[], todos, rules, asks, identifiers]
    return body + "\n\n" + s.render_sections(dict(zip(SAFEGUARD_HEADINGS, lines, strict=True)))


def offline_merge(partials: Sequence[str], previous: str | None) -> str:
    """Offline merge of partial summaries: their lines under each heading, in order, without repeats."""
    merged: dict[str, list[str]] = {}
    for text in ([previous] if previous else []) + list(partials):
        for heading, lines in s.parse_sections(pi.strip_file_lists(text)).items():
            bucket = merged.setdefault(heading, [])
            bucket.extend(ln for ln in lines if ln not in bucket)
    return s.render_sections(merged)


class OpenClawStrategy(pi.PiStrategy):
    name = "openclaw"
    description = (
        "OpenClaw safeguard (8f8492d): Pi's cut with reserve 20,000; summary keeps exact identifiers, the "
        "last 3 user turns, failed tool calls and file lists, capped at 16,000 characters; long histories "
        "are summarised in chunks and merged"
    )
    exactness = (
        "quality guard (off upstream), AGENTS.md rules, provider plugins, retries and the memory flush are "
        "not replayed; threshold trigger only; Pi's chars/4 estimate on Gemini records"
    )
    reserve_tokens = max(pi.DEFAULT_RESERVE_TOKENS, RESERVE_TOKENS_FLOOR)
    keep_recent_tokens = pi.DEFAULT_KEEP_RECENT_TOKENS

    def summary(self, job: s.Job, prep: pi.Preparation) -> str | None:
        messages, options, result = job.messages, job.options, job.result
        units = [u for i in (*prep.to_summarize, *prep.turn_prefix) for u in s.record_units(i, messages[i])]
        # Pi's blocks with each list bounded, the section cut to MAX_FILE_OPS_SECTION_CHARS after its "\n\n".
        file_lists = pi.format_file_lists(prep.read_files, prep.modified_files, _bounded_list)
        file_lists = file_lists[: MAX_FILE_OPS_SECTION_CHARS + 2]
        if not any(u.role in ("user", "assistant", "tool_result") and u.text.strip() for u in units):
            result.notes.append("no real message to summarise: structured fallback, no model call")
            return _fallback(prep.previous_summary) + file_lists
        ctx = s.window(options)
        run = _Run(job, self.reserve_tokens)
        custom = options.custom_instructions
        msgs = list(prep.to_summarize)
        previous = prep.previous_summary
        new_content = prep.tokens_before - sum(run.tokens[i] for i in (*msgs, *prep.turn_prefix))
        if new_content > math.floor(ctx * MAX_HISTORY_SHARE * SAFETY_MARGIN):
            dropped: list[int] = []
            while len(msgs) > 1 and sum(run.tokens[i] for i in msgs) > math.floor(ctx * MAX_HISTORY_SHARE):
                first, *_ = split_by_token_share(msgs, run.tokens)
                dropped.extend(first)
                msgs = [i for i in msgs if i not in first]
            if dropped:
                run.max_chunk = max(1, math.floor(ctx * BASE_CHUNK_RATIO) - SUMMARIZATION_OVERHEAD_TOKENS)
                previous = run.in_stages(dropped, prep.previous_summary, custom)
                oldest = plural(len(dropped), "oldest message")
                result.notes.append(f"history-share pruning: {oldest} summarised apart")
        preserved, msgs = split_preserved_recent_turns(messages, msgs, RECENT_TURNS_PRESERVE)
        ratio = compute_adaptive_chunk_ratio([run.tokens[i] for i in (*msgs, *prep.turn_prefix)], ctx)
        run.max_chunk = max(1, math.floor(ctx * ratio) - SUMMARIZATION_OVERHEAD_TOKENS)
        history = run.in_stages(msgs, previous, custom) if msgs else _fallback(previous)
        split = ""
        if prep.is_split_turn and prep.turn_prefix:
            prefix = run.in_stages(prep.turn_prefix, None, TURN_PREFIX_INSTRUCTIONS)
            split = f"\n\n{pi.SPLIT_TURN_HEADER}\n\n{prefix}"
        if len(result.calls) > 1:
            result.notes.append(f"{len(result.calls)} summarizer calls (chunked summarisation)")
        suffix = split + preserved_section(preserved) + tool_failures_section(units) + file_lists
        return cap_preserving_suffix(history, suffix)
