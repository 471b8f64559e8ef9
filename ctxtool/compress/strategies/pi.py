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
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from ctxtool.common.wording import plural
from ctxtool.compress.strategies import base as s
from ctxtool.compress.summarize.offline import OfflineSummarizer
from ctxtool.compress.summarizer import ModelCall, Summarizer

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
    "## Critical Context\n- [data, references, exact paths and names needed to continue]"
)
SUMMARIZATION_PROMPT = (
    "The text above is a conversation to summarise. Write a structured context checkpoint that another "
    "model will use to carry on the work, in exactly this format:\n\n"
    + _FORMAT
    + "\n\nBe brief. Keep file paths, function names and error messages exactly as written."
)
UPDATE_SUMMARIZATION_PROMPT = (
    "The text above holds new conversation messages to fold into the summary in <previous-summary>. "
    "Keep everything from the previous summary that still matters, add the new progress, decisions and "
    "context, move finished items to Done, and update the next steps. Use exactly this format:\n\n"
    + _FORMAT
    + "\n\nBe brief. Keep file paths, function names and error messages exactly as written."
)
TURN_PREFIX_SUMMARIZATION_PROMPT = (
    "The text above is the first part of a turn that was too long to keep whole; its end is kept "
    "verbatim. Summarise this first part so the kept end makes sense, in exactly this format:\n\n"
    "## Original Request\n[what the user asked in this turn]\n\n"
    "## Early Progress\n- [decisions and work done in this first part]\n\n"
    "## Context for Suffix\n- [what is needed to understand the kept part]\n\nBe brief."
)

PI_HEADINGS = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress\n### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
)

_READ_TOOLS = {"read_file": ("absolute_path", "file_path", "path")}
_MULTI_READ_TOOLS = {"read_many_files": "paths"}
_WRITE_TOOLS = {"write_file": "file_path"}
_EDIT_TOOLS = {"replace": "file_path", "edit": "file_path", "smart_edit": "file_path"}
_FILE_LIST_RE = re.compile(r"<(read-files|modified-files)>\n(.*?)\n</\1>", re.DOTALL)


# --------------------------------------------------------------------------------------------------
# Estimates and serialisation (utils.ts)


def estimate_unit(unit: s.Unit) -> int:
    """Pi's ``estimateTokens``: ceil(chars / 4) of text, thinking, tool-call name + JSON args, results."""
    chars = len(unit.text) + len(unit.thinking)
    for call in unit.calls:
        chars += len(call.name) + len(_json(call.args))
    return math.ceil(chars / 4)


def estimate_records(records: Sequence[s.Record], first_index: int = 0) -> int:
    return sum(estimate_unit(u) for i, r in enumerate(records) for u in s.record_units(first_index + i, r))


def _json(value: object) -> str:
    return orjson.dumps(value, default=str).decode()


def serialize_conversation(units: Sequence[s.Unit]) -> str:
    """``serializeConversation``: the history flattened to ``[Role]: text`` blocks."""
    out: list[str] = []
    for u in units:
        if u.role == "user":
            if u.text:
                out.append(f"[User]: {u.text}")
        elif u.role == "assistant":
            if u.thinking:
                out.append(f"[Assistant thinking]: {u.thinking}")
            if u.text:
                out.append(f"[Assistant]: {u.text}")
            if u.calls:
                calls = "; ".join(
                    f"{c.name}({', '.join(f'{k}={_json(v)}' for k, v in c.args.items())})" for c in u.calls
                )
                out.append(f"[Assistant tool calls]: {calls}")
        elif u.role == "tool_result" and u.text:
            text = u.text
            if len(text) > TOOL_RESULT_MAX_CHARS:
                more = len(text) - TOOL_RESULT_MAX_CHARS
                text = text[:TOOL_RESULT_MAX_CHARS] + f"\n\n[... {more} more characters truncated]"
            out.append(f"[Tool result]: {text}")
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
    read_files: list[str] = field(default_factory=list)
    modified_files: list[str] = field(default_factory=list)


def is_summary_record(record: s.Record) -> bool:
    units = s.record_units(0, record)
    return bool(units) and units[0].role == "user" and units[0].text.startswith(COMPACTION_SUMMARY_PREFIX)


def summary_body(text: str) -> str:
    body = text[len(COMPACTION_SUMMARY_PREFIX) :]
    return body[: -len(COMPACTION_SUMMARY_SUFFIX)] if body.endswith(COMPACTION_SUMMARY_SUFFIX) else body


def _valid_cut(units: Sequence[s.Unit]) -> bool:
    return bool(units) and units[0].role in ("user", "assistant")


def prepare(records: Sequence[s.Record], keep_recent_tokens: int) -> Preparation | None:
    """Pi's preparation on session records; None when there is nothing to compact (empty, or the newest
    message already is a summary)."""
    env = s.env_index(records)
    units = [s.record_units(i, r) for i, r in enumerate(records)]
    prev: int | None = None
    for i, r in enumerate(records):
        if i != env and r.get("type") == "user" and is_summary_record(r):
            prev = i
    start = 0 if prev is None else prev + 1
    if prev is not None and start < len(records) and _is_ack(records[start]):
        start += 1
    entries = [i for i in range(start, len(records)) if i != env]
    if not entries:
        return None
    previous_summary = None
    if prev is not None:
        previous_summary = summary_body(units[prev][0].text)
    tokens_before = sum(
        estimate_unit(u) for i in range(prev or 0, len(records)) if i != env for u in units[i]
    )

    cut_points = [i for i in entries if _valid_cut(units[i])]
    if not cut_points:
        cut = entries[0]
    else:
        cut = cut_points[0]
        acc = 0
        for i in reversed(entries):
            if units[i][0].role == "note":
                continue
            acc += sum(estimate_unit(u) for u in units[i])
            if acc >= keep_recent_tokens:
                cut = next((c for c in cut_points if c >= i), cut_points[-1])
                break
    while cut > entries[0] and units[cut - 1][0].role == "note" and cut - 1 != env:
        cut -= 1
    is_user = units[cut][0].role == "user"
    turn_start: int | None = None
    if not is_user:
        for i in range(cut, entries[0] - 1, -1):
            if i != env and units[i][0].role == "user":
                turn_start = i
                break
    is_split = not is_user and turn_start is not None
    history_end = turn_start if is_split and turn_start is not None else cut
    to_summarize = [i for i in entries if i < history_end]
    prefix = [i for i in entries if turn_start is not None and is_split and turn_start <= i < cut]
    prep = Preparation(
        boundary_start=entries[0],
        cut=cut,
        turn_start=turn_start if is_split else None,
        is_split_turn=is_split,
        to_summarize=to_summarize,
        turn_prefix=prefix,
        previous_summary=previous_summary,
        tokens_before=tokens_before,
    )
    read, modified = file_ops([u for i in (*to_summarize, *prefix) for u in units[i]], previous_summary)
    prep.read_files, prep.modified_files = read, modified
    return prep


def _is_ack(record: s.Record) -> bool:
    units = s.record_units(0, record)
    from ctxtool.compress.gemini_cli.chat_compression import SUMMARY_ACK_TEXT

    return bool(units) and units[0].role == "assistant" and units[0].text == SUMMARY_ACK_TEXT


def file_ops(units: Sequence[s.Unit], previous_summary: str | None) -> tuple[list[str], list[str]]:
    """(read-only files, modified files), sorted, as Pi's ``computeFileLists`` (Gemini tool names mapped:
    read_file/read_many_files read, write_file written, replace edited)."""
    read: set[str] = set()
    modified: set[str] = set()
    for u in units:
        for c in u.calls:
            if c.name in _READ_TOOLS:
                for key in _READ_TOOLS[c.name]:
                    if isinstance(c.args.get(key), str):
                        read.add(str(c.args[key]))
                        break
            elif c.name in _MULTI_READ_TOOLS:
                paths = c.args.get(_MULTI_READ_TOOLS[c.name])
                if isinstance(paths, list):
                    read.update(p for p in paths if isinstance(p, str))
            elif c.name in _WRITE_TOOLS or c.name in _EDIT_TOOLS:
                key = (_WRITE_TOOLS | _EDIT_TOOLS)[c.name]
                if isinstance(c.args.get(key), str):
                    modified.add(str(c.args[key]))
    if previous_summary:
        for kind, body in _FILE_LIST_RE.findall(previous_summary):
            (read if kind == "read-files" else modified).update(x for x in body.split("\n") if x)
    return sorted(read - modified), sorted(modified)


def format_file_lists(read: Sequence[str], modified: Sequence[str]) -> str:
    blocks = []
    if read:
        blocks.append("<read-files>\n" + "\n".join(read) + "\n</read-files>")
    if modified:
        blocks.append("<modified-files>\n" + "\n".join(modified) + "\n</modified-files>")
    return "\n\n" + "\n\n".join(blocks) if blocks else ""


def strip_file_lists(summary: str) -> str:
    return _FILE_LIST_RE.sub("", summary).rstrip()


# --------------------------------------------------------------------------------------------------
# Summaries (generateSummary / generateTurnPrefixSummary)


def offline_pi_summary(summ: OfflineSummarizer, records: Sequence[s.Record], previous: str | None) -> str:
    """Pi's section layout filled from the offline fact extraction; a previous summary's lines are carried
    in front of the new ones under the same heading (the update prompt's rule)."""
    sec = s.offline_sections(summ, s.wire_history(records))
    new = {
        "## Goal": sec.get("overall_goal", []),
        "## Constraints & Preferences": sec.get("active_constraints", []),
        "## Progress\n### Done": sec.get("artifact_trail", []) + sec.get("recent_actions", []),
        "### In Progress": sec.get("task_state", []),
        "### Blocked": sec.get("key_knowledge", []),
        "## Key Decisions": [],
        "## Next Steps": [],
        "## Critical Context": sec.get("file_system_state", []),
    }
    if previous:
        old = s.parse_sections(strip_file_lists(previous))
        for heading in PI_HEADINGS:
            carried = old.get(heading.rsplit("\n", 1)[-1], [])
            if heading == "## Goal" and carried:
                new[heading] = carried
            else:
                new[heading] = carried + [ln for ln in new[heading] if ln not in carried]
    header = f"<!-- generated offline by ctxtool, no model: {len(records)} messages -->\n"
    return header + s.render_sections([(h, new[h]) for h in PI_HEADINGS], empty="- (none)")


def offline_turn_prefix(summ: OfflineSummarizer, records: Sequence[s.Record]) -> str:
    sec = s.offline_sections(summ, s.wire_history(records))
    return s.render_sections(
        [
            ("## Original Request", sec.get("overall_goal", [])),
            ("## Early Progress", sec.get("artifact_trail", []) + sec.get("recent_actions", [])),
            ("## Context for Suffix", sec.get("file_system_state", []) + sec.get("key_knowledge", [])),
        ],
        empty="- (none)",
    )


def _conversation(records: Sequence[s.Record], first_index: int) -> str:
    units = [u for i, r in enumerate(records) for u in s.record_units(first_index + i, r)]
    return "<conversation>\n" + serialize_conversation(units) + "\n</conversation>\n\n"


def generate_summary(
    summarizer: Summarizer,
    records: Sequence[s.Record],
    first_index: int,
    *,
    model: str,
    reserve_tokens: int,
    previous_summary: str | None,
    custom_instructions: str | None,
    calls: list[ModelCall],
    offline: Callable[[OfflineSummarizer], str] | None = None,
) -> str | None:
    """``generateSummary``: one call on the serialised conversation (update prompt with a previous
    summary)."""
    prompt = _conversation(records, first_index)
    if previous_summary:
        prompt += "<previous-summary>\n" + previous_summary + "\n</previous-summary>\n\n"
    prompt += UPDATE_SUMMARIZATION_PROMPT if previous_summary else SUMMARIZATION_PROMPT
    if custom_instructions:
        prompt += "\n\nAdditional focus: " + custom_instructions
    call = s.model_call(
        model,
        SYSTEM_PROMPT,
        [s.user_content(prompt)],
        s.wire_history(records),
        purpose="pi-summary",
        max_output_tokens=math.floor(SUMMARY_OUTPUT_SHARE * reserve_tokens),
        previous_summary=previous_summary,
    )
    calls.append(call)
    layout = offline or (lambda summ: offline_pi_summary(summ, records, previous_summary))
    return s.summarize(summarizer, call, layout)


def generate_turn_prefix_summary(
    summarizer: Summarizer,
    records: Sequence[s.Record],
    first_index: int,
    *,
    model: str,
    reserve_tokens: int,
    calls: list[ModelCall],
) -> str | None:
    prompt = _conversation(records, first_index) + TURN_PREFIX_SUMMARIZATION_PROMPT
    call = s.model_call(
        model,
        SYSTEM_PROMPT,
        [s.user_content(prompt)],
        s.wire_history(records),
        purpose="pi-turn-prefix",
        max_output_tokens=math.floor(TURN_PREFIX_OUTPUT_SHARE * reserve_tokens),
    )
    calls.append(call)
    return s.summarize(summarizer, call, lambda summ: offline_turn_prefix(summ, records))


def pick(records: Sequence[s.Record], indices: Sequence[int]) -> list[s.Record]:
    return [records[i] for i in indices]


def build_output(
    records: Sequence[s.Record],
    prep: Preparation,
    summary: str,
    *,
    now: datetime,
    new_id: Callable[[], str],
) -> tuple[list[s.Record], int]:
    """``[<session_context>?, user(prefix + summary + suffix), ack?, kept...]`` and the kept count."""
    from ctxtool.common.jsvalue import js_iso

    ts = js_iso(now)
    env = s.env_index(records)
    kept = [r for i, r in enumerate(records) if i >= prep.cut and i != env]
    lead = [
        s.text_record("user", COMPACTION_SUMMARY_PREFIX + summary + COMPACTION_SUMMARY_SUFFIX, ts, new_id)
    ]
    return [*s.head_records(records), *s.with_ack(lead, kept, ts, new_id)], len(kept)


# --------------------------------------------------------------------------------------------------
# The strategy


class PiStrategy:
    name = "pi"
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
        limit = win - self.reserve_tokens
        return s.first_crossing(
            messages,
            s.total_tokens,
            lambda v: v > limit,
            measure=f"total > {win} - {self.reserve_tokens}",
            limit=limit,
            only_turn_ends=True,
        )

    def plan(
        self,
        messages: Sequence[s.Record],
        summarizer: Summarizer,
        options: s.StrategyOptions,
        *,
        now: datetime,
        new_id: Callable[[], str],
    ) -> s.StrategyResult:
        trig = self.trigger(messages, options)
        result = s.StrategyResult(self.name, "NOOP", trig, own_measure="pi estimateTokens (chars/4)")
        prep = prepare(messages, self.keep_recent_tokens)
        if prep is None:
            result.notes.append("nothing to compact (empty, or the newest message already is a summary)")
            return result
        result.own_tokens_before = prep.tokens_before
        result.kept_from = prep.cut
        if not trig.would_trigger and not options.force:
            return result
        summary = self.summary(messages, prep, summarizer, options, result)
        if not summary or not summary.strip():
            result.status = "COMPRESSION_FAILED_EMPTY_SUMMARY"
            result.notes.append("the summarizer returned an empty summary; nothing was written")
            return result
        return self.finish(messages, prep, summary, result, now=now, new_id=new_id)

    def summary(
        self,
        messages: Sequence[s.Record],
        prep: Preparation,
        summarizer: Summarizer,
        options: s.StrategyOptions,
        result: s.StrategyResult,
    ) -> str | None:
        model = options.chat_model
        hist_records = pick(messages, prep.to_summarize)
        first = prep.to_summarize[0] if prep.to_summarize else 0
        if prep.is_split_turn and not hist_records:
            history: str | None = NO_PRIOR_HISTORY
        else:
            history = generate_summary(
                summarizer,
                hist_records,
                first,
                model=model,
                reserve_tokens=self.reserve_tokens,
                previous_summary=prep.previous_summary,
                custom_instructions=options.custom_instructions,
                calls=result.calls,
            )
        if history is None:
            return None
        if prep.is_split_turn:
            prefix = generate_turn_prefix_summary(
                summarizer,
                pick(messages, prep.turn_prefix),
                prep.turn_prefix[0],
                model=model,
                reserve_tokens=self.reserve_tokens,
                calls=result.calls,
            )
            history = f"{history}\n\n---\n\n{SPLIT_TURN_HEADER}\n\n{prefix or ''}"
            result.notes.append(
                f"split turn: its first {plural(len(prep.turn_prefix), 'message')} summarised apart"
            )
        return history + format_file_lists(prep.read_files, prep.modified_files)

    def finish(
        self,
        messages: Sequence[s.Record],
        prep: Preparation,
        summary: str,
        result: s.StrategyResult,
        *,
        now: datetime,
        new_id: Callable[[], str],
    ) -> s.StrategyResult:
        out, kept = build_output(messages, prep, summary, now=now, new_id=new_id)
        result.status = "COMPRESSED"
        result.messages = out
        result.summary = summary
        result.messages_kept = kept
        result.messages_summarised = len(prep.to_summarize) + len(prep.turn_prefix)
        result.own_tokens_after = estimate_records(out)
        if len(out) > len(s.head_records(messages)) + 1 + kept:
            result.notes.append("an ack model message follows the summary (Gemini alternation; not Pi's)")
        return result
