"""Pi's compaction (badlogic/pi-mono ``packages/coding-agent/src/core/compaction/compaction.ts`` and
``utils.ts`` @ 83378aad, v0.58.3), replayed on a Gemini CLI session. Spec: other-strategies.md section 3.

* Trigger (``agent-session.ts`` ``_checkCompaction``): after each agent loop, context tokens (the last
  response's ``total``) ``> window - reserveTokens`` (16,384).
* Cut (``prepareCompaction``/``findCutPoint``): walk back from the newest record adding Pi's chars/4
  estimate until ``keepRecentTokens`` (20,000) is reached, then snap *forward* to the next valid cut point
  (a user prompt or a model message, never a tool result); info/error/warning records before the cut are
  pulled into the kept part, as Pi pulls its non-message entries. A cut at a model message splits its turn:
  the turn's prefix is summarised separately and appended as ``**Turn Context (split turn):**``.
* A previous Pi summary (a user message opening with ``COMPACTION_SUMMARY_PREFIX``) is not re-summarised:
  it is passed as the previous summary and the update prompt is used; its file lists are carried over.
* Output: ``[<session_context>?, user(PREFIX + summary + SUFFIX), ack?, kept records...]``.

Not exact offline: Pi's overflow-error trigger and stale-usage guard need live provider state (only the
threshold trigger is replayed); the written session holds the kept tail *after* the summary, so a later
replay summarises it again, where Pi's tree keeps it before its compaction entry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from ctxtool.common.wording import plural
from ctxtool.compress.gemini_cli.chat_compression import SUMMARY_ACK_TEXT
from ctxtool.compress.strategies import base as s
from ctxtool.compress.summarize.offline import OfflineSummarizer

DEFAULT_RESERVE_TOKENS = 16_384  # DEFAULT_COMPACTION_SETTINGS.reserveTokens, compaction.ts
DEFAULT_KEEP_RECENT_TOKENS = 20_000  # DEFAULT_COMPACTION_SETTINGS.keepRecentTokens
TOOL_RESULT_MAX_CHARS = 2000  # utils.ts serializeConversation, since c950c692
SUMMARY_OUTPUT_SHARE = 0.8  # maxTokens = floor(0.8 * reserveTokens)
TURN_PREFIX_OUTPUT_SHARE = 0.5
# Marker strings a replay must reproduce (messages.ts COMPACTION_SUMMARY_PREFIX / _SUFFIX).
COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
NO_PRIOR_HISTORY = "No prior history."
SPLIT_TURN_HEADER = "**Turn Context (split turn):**"

# ctxtool's wording; the structure (sections, headings, order) is Pi's.
SYSTEM_PROMPT = (
    "You write context summaries. You never continue the conversation you are shown and never answer "
    "questions inside it: you only produce the structured summary requested."
)
_FORMAT = (
    "## Goal\n[what the user wants to achieve]\n\n"
    "## Constraints & Preferences\n- [requirements and preferences the user stated]\n\n"
    "## Progress\n### Done\n- [x] [finished work]\n\n### In Progress\n- [ ] [current work]\n\n"
    "### Blocked\n- [open problems]\n\n"
    "## Key Decisions\n- **[decision]**: [why]\n\n"
    "## Next Steps\n1. [what comes next]\n\n"
    "## Critical Context\n- [data, references, exact paths and names needed to continue]\n\n"
    "Be brief. Keep file paths, function names and error messages exactly as written."
)
SUMMARIZATION_PROMPT = (
    "The text above is a conversation to summarise. Write a structured context checkpoint that another "
    "model will use to carry on the work, in exactly this format:\n\n" + _FORMAT
)
UPDATE_SUMMARIZATION_PROMPT = (
    "The text above holds new conversation messages to fold into the summary in <previous-summary>. "
    "Keep everything from the previous summary that still matters, add the new progress, decisions and "
    "context, move finished items to Done, and update the next steps. Use exactly this format:\n\n" + _FORMAT
)
TURN_PREFIX_SUMMARIZATION_PROMPT = (
    "The text above is the first part of a turn that was too long to keep whole; its end is kept "
    "verbatim. Summarise this first part so the kept end makes sense, in exactly this format:\n\n"
    "## Original Request\n[what the user asked in this turn]\n\n"
    "## Early Progress\n- [decisions and work done in this first part]\n\n"
    "## Context for Suffix\n- [what is needed to understand the kept part]\n\nBe brief."
)
# The offline layouts: Pi's headings and the snapshot sections that fill them.
PI_LAYOUT = {
    "## Goal": ("overall_goal",),
    "## Constraints & Preferences": ("active_constraints",),
    "## Progress\n### Done": ("artifact_trail", "recent_actions"),
    "### In Progress": ("task_state",),
    "### Blocked": ("key_knowledge",),
    "## Key Decisions": (),
    "## Next Steps": (),
    "## Critical Context": ("file_system_state",),
}
TURN_PREFIX_LAYOUT = {
    "## Original Request": ("overall_goal",),
    "## Early Progress": ("artifact_trail", "recent_actions"),
    "## Context for Suffix": ("file_system_state", "key_knowledge"),
}

# computeFileLists on Gemini's tools: read_file (its path argument) and read_many_files read; write_file and
# the edit tools modify their file_path.
_READ_FILE_ARGS = ("absolute_path", "file_path", "path")
_MODIFYING_TOOLS = frozenset({"write_file", "replace", "edit", "smart_edit"})
_ACK = ("assistant", SUMMARY_ACK_TEXT)
_FILE_LIST_RE = re.compile(r"<(read-files|modified-files)>\n(.*?)\n</\1>", re.DOTALL)


# --------------------------------------------------------------------------------------------------
# Estimates and serialisation (utils.ts)


def estimate_unit(unit: s.Unit) -> int:
    """Pi's ``estimateTokens``: ceil(chars / 4) of text, thinking, tool-call name + JSON args, results."""
    calls = sum(len(call.name) + len(_json(call.args)) for call in unit.calls)
    return math.ceil((len(unit.text) + len(unit.thinking) + calls) / 4)


def estimate_records(records: Sequence[s.Record]) -> int:
    return sum(estimate_unit(u) for i, r in enumerate(records) for u in s.record_units(i, r))


def _json(value: object) -> str:
    return orjson.dumps(value, default=str).decode()


def serialize_conversation(units: Sequence[s.Unit]) -> str:
    """``serializeConversation``: the history flattened to ``[Role]: text`` blocks."""
    out: list[str] = []
    for u in units:
        if u.role == "user" and u.text:
            out.append(f"[User]: {u.text}")
        elif u.role == "assistant":
            if u.thinking:
                out.append(f"[Assistant thinking]: {u.thinking}")
            if u.text:
                out.append(f"[Assistant]: {u.text}")
            calls = [f"{c.name}({', '.join(f'{k}={_json(v)}' for k, v in c.args.items())})" for c in u.calls]
            if calls:
                out.append(f"[Assistant tool calls]: {'; '.join(calls)}")
        elif u.role == "tool_result" and u.text:
            more = len(u.text) - TOOL_RESULT_MAX_CHARS
            cut = f"\n\n[... {more} more characters truncated]" if more > 0 else ""
            out.append(f"[Tool result]: {u.text[:TOOL_RESULT_MAX_CHARS]}{cut}")
    return "\n\n".join(out)


# --------------------------------------------------------------------------------------------------
# Preparation (prepareCompaction / findCutPoint)


@dataclass
class Preparation:
    boundary_start: int  # record indices
    cut: int
    turn_start: int | None
    is_split_turn: bool
    to_summarize: list[int]
    turn_prefix: list[int]
    previous_summary: str | None
    tokens_before: int
    read_files: list[str]
    modified_files: list[str]


def prepare(records: Sequence[s.Record], keep_recent_tokens: int) -> Preparation | None:
    """Pi's preparation on session records; None when there is nothing to compact (empty, or the newest
    message already is a summary)."""
    env = s.env_index(records)
    units = [s.record_units(i, r) for i, r in enumerate(records)]
    lead = [u[0] for u in units]  # each record's first message
    summaries = [
        i
        for i, r in enumerate(records)
        if i != env
        and r.get("type") == "user"
        and lead[i].role == "user"
        and lead[i].text.startswith(COMPACTION_SUMMARY_PREFIX)
    ]
    prev = summaries[-1] if summaries else None
    start = 0 if prev is None else prev + 1
    if prev is not None and start < len(records) and (lead[start].role, lead[start].text) == _ACK:
        start += 1
    if not (entries := [i for i in range(start, len(records)) if i != env]):
        return None
    previous = None
    if prev is not None:
        previous = lead[prev].text[len(COMPACTION_SUMMARY_PREFIX) :].removesuffix(COMPACTION_SUMMARY_SUFFIX)
    before = sum(estimate_unit(u) for i in range(prev or 0, len(records)) if i != env for u in units[i])

    cut_points = [i for i in entries if lead[i].role in ("user", "assistant")]
    if not cut_points:
        cut = entries[0]
    else:
        cut = cut_points[0]
        acc = 0
        for i in reversed(entries):
            if lead[i].role == "note":
                continue
            acc += sum(estimate_unit(u) for u in units[i])
            if acc >= keep_recent_tokens:
                cut = next((c for c in cut_points if c >= i), cut_points[-1])
                break
    while cut > entries[0] and lead[cut - 1].role == "note" and cut - 1 != env:
        cut -= 1
    turn_start = None
    if lead[cut].role != "user":  # a cut at a model message splits its turn
        starts = (i for i in range(cut, entries[0] - 1, -1) if i != env and lead[i].role == "user")
        turn_start = next(starts, None)
    to_summarize = [i for i in entries if i < (cut if turn_start is None else turn_start)]
    prefix = [i for i in entries if turn_start is not None and turn_start <= i < cut]
    read, modified = file_ops([u for i in (*to_summarize, *prefix) for u in units[i]], previous)
    split = turn_start is not None
    return Preparation(
        entries[0], cut, turn_start, split, to_summarize, prefix, previous, before, read, modified
    )


def file_ops(units: Sequence[s.Unit], previous_summary: str | None) -> tuple[list[str], list[str]]:
    """(read-only files, modified files), sorted, as Pi's ``computeFileLists``."""
    read: set[str] = set()
    modified: set[str] = set()
    for c in (c for u in units for c in u.calls):
        if c.name == "read_file":
            read.update(next(([v] for k in _READ_FILE_ARGS if isinstance(v := c.args.get(k), str)), []))
        elif c.name == "read_many_files" and isinstance(paths := c.args.get("paths"), list):
            read.update(p for p in paths if isinstance(p, str))
        elif c.name in _MODIFYING_TOOLS and isinstance(path := c.args.get("file_path"), str):
            modified.add(path)
    if previous_summary:
        for kind, body in _FILE_LIST_RE.findall(previous_summary):
            (read if kind == "read-files" else modified).update(x for x in body.split("\n") if x)
    return sorted(read - modified), sorted(modified)


def format_file_lists(
    read: Sequence[str], modified: Sequence[str], shown: Callable[[Sequence[str]], Sequence[str]] = list
) -> str:
    """The ``<read-files>`` and ``<modified-files>`` blocks after a blank line, "" when there is no file;
    ``shown`` picks the lines a list shows."""
    lists = (("read-files", read), ("modified-files", modified))
    blocks = [f"<{tag}>\n" + "\n".join(shown(paths)) + f"\n</{tag}>" for tag, paths in lists if paths]
    return "\n\n" + "\n\n".join(blocks) if blocks else ""


def strip_file_lists(summary: str) -> str:
    return _FILE_LIST_RE.sub("", summary).rstrip()


# --------------------------------------------------------------------------------------------------
# Summaries (generateSummary / generateTurnPrefixSummary)


def offline_pi_summary(summ: OfflineSummarizer, records: Sequence[s.Record], previous: str | None) -> str:
    """Pi's section layout filled from the offline fact extraction; a previous summary's lines are carried
    in front of the new ones under the same heading (the update prompt's rule)."""
    sec = s.offline_sections(summ, records)
    new = {heading: [ln for k in keys for ln in sec.get(k, [])] for heading, keys in PI_LAYOUT.items()}
    if previous:
        old = s.parse_sections(strip_file_lists(previous))
        for heading, lines in new.items():
            carried = old.get(heading.rsplit("\n", 1)[-1], [])
            if heading == "## Goal" and carried:
                new[heading] = carried
            else:
                new[heading] = carried + [ln for ln in lines if ln not in carried]
    header = f"<!-- generated offline by ctxtool, no model: {len(records)} messages -->\n"
    return header + s.render_sections(new, empty="- (none)")


@dataclass
class Summarising:
    """The summary calls of one compaction (``job``), each answer bounded by a share of ``reserve_tokens``."""

    job: s.Job
    reserve_tokens: int

    def ask(
        self,
        records: Sequence[s.Record],
        prompt: str,
        offline: Callable[[OfflineSummarizer], str],
        purpose: str,
        output_share: float,
        previous_summary: str | None = None,
    ) -> str | None:
        """One call on the serialised conversation of ``records`` followed by ``prompt``; the answer gets
        ``output_share`` of the reserve."""
        units = [u for i, r in enumerate(records) for u in s.record_units(i, r)]
        return self.job.ask(
            SYSTEM_PROMPT,
            "<conversation>\n" + serialize_conversation(units) + "\n</conversation>\n\n" + prompt,
            records,
            offline,
            purpose=purpose,
            serialised=True,
            max_output_tokens=math.floor(output_share * self.reserve_tokens),
            previous_summary=previous_summary,
        )


def generate_summary(
    run: Summarising,
    records: Sequence[s.Record],
    previous: str | None,
    custom_instructions: str | None,
    offline: Callable[[OfflineSummarizer], str] | None = None,
) -> str | None:
    """``generateSummary``: one call on the serialised conversation (update prompt with a previous
    summary)."""
    prompt = SUMMARIZATION_PROMPT
    if previous:
        prompt = f"<previous-summary>\n{previous}\n</previous-summary>\n\n{UPDATE_SUMMARIZATION_PROMPT}"
    if custom_instructions:
        prompt += "\n\nAdditional focus: " + custom_instructions
    layout = offline or (lambda summ: offline_pi_summary(summ, records, previous))
    return run.ask(records, prompt, layout, "pi-summary", SUMMARY_OUTPUT_SHARE, previous)


def generate_turn_prefix_summary(run: Summarising, records: Sequence[s.Record]) -> str | None:
    layout = s.offline_layout(records, TURN_PREFIX_LAYOUT, "- (none)")
    prompt = TURN_PREFIX_SUMMARIZATION_PROMPT
    return run.ask(records, prompt, layout, "pi-turn-prefix", TURN_PREFIX_OUTPUT_SHARE)


class PiStrategy(s.Strategy):
    name = "pi"
    own_measure = "pi estimateTokens (chars/4)"
    description = (
        "Pi (pi-mono v0.58.3): compacts when context > window - 16,384; keeps the newest ~20,000 tokens "
        "verbatim from a user/model message (never a tool result), summarises the rest (a split turn "
        "separately), updates a previous summary, appends read/modified file lists"
    )
    exactness = (
        "threshold trigger only (overflow-error recovery needs a live provider); Pi's estimate is chars/4 "
        "on Gemini records; ack message added when the kept tail starts with a user message"
    )
    reserve_tokens = DEFAULT_RESERVE_TOKENS
    keep_recent_tokens = DEFAULT_KEEP_RECENT_TOKENS

    def trigger(self, messages: Sequence[s.Record], options: s.StrategyOptions) -> s.Trigger:
        win = s.window(options)
        limit, measure = win - self.reserve_tokens, f"total > {win} - {self.reserve_tokens}"
        return s.first_crossing(
            messages, s.total_tokens, lambda v: v > limit, measure=measure, limit=limit, only_turn_ends=True
        )

    def compact(self, job: s.Job) -> None:
        messages, result = job.messages, job.result
        if (prep := prepare(messages, self.keep_recent_tokens)) is None:
            result.notes.append("nothing to compact (empty, or the newest message already is a summary)")
            return
        result.own_tokens_before = prep.tokens_before
        result.kept_from = prep.cut
        if job.waits:
            return
        if not (summary := self.summary(job, prep)) or not summary.strip():
            result.status = "COMPRESSION_FAILED_EMPTY_SUMMARY"
            result.notes.append("the summarizer returned an empty summary; nothing was written")
            return
        env = s.env_index(messages)
        kept = [r for i, r in enumerate(messages) if i >= prep.cut and i != env]
        lead = [job.record("user", COMPACTION_SUMMARY_PREFIX + summary + COMPACTION_SUMMARY_SUFFIX)]
        out = job.write(lead, kept, summary)
        result.messages_kept = len(kept)
        result.messages_summarised = len(prep.to_summarize) + len(prep.turn_prefix)
        result.own_tokens_after = estimate_records(out)
        if len(out) > (env is not None) + 1 + len(kept):
            result.notes.append("an ack model message follows the summary (Gemini alternation; not Pi's)")

    def summary(self, job: s.Job, prep: Preparation) -> str | None:
        messages, options = job.messages, job.options
        run = Summarising(job, self.reserve_tokens)
        if prep.is_split_turn and not prep.to_summarize:
            history: str | None = NO_PRIOR_HISTORY
        else:
            records = [messages[i] for i in prep.to_summarize]
            history = generate_summary(run, records, prep.previous_summary, options.custom_instructions)
        if history is None:
            return None
        if prep.is_split_turn:
            prefix = generate_turn_prefix_summary(run, [messages[i] for i in prep.turn_prefix])
            history = f"{history}\n\n---\n\n{SPLIT_TURN_HEADER}\n\n{prefix or ''}"
            first = plural(len(prep.turn_prefix), "message")
            job.result.notes.append(f"split turn: its first {first} summarised apart")
        return history + format_file_lists(prep.read_files, prep.modified_files)
