"""Kode's compaction (shareAI-lab/Kode-cli @ 214c12fc), replayed on a Gemini CLI session. Spec:
other-strategies.md section 2.

``kode`` is the live auto-compact (``src/utils/session/autoCompactCore.ts``): when the last response's usage
(input + output) reaches 0.9 of the context window and the history has at least 3 messages, the *whole*
history is summarised in one call with the 8-section prompt and replaced by ``[user(notice), model(summary),
user(recovered file)×k]``. File recovery (``fileRecoveryCore.ts``) re-reads up to 5 recently read files
from disk; ctxtool rebuilds them from the transcript instead (the last read_file output or write_file
content, later edits applied), because the files on disk are not the ones the session saw; files the
transcript does not hold are skipped and noted.

``kode:<preset>`` are the retention heuristics of ``src/utils/session/messageContextManager.ts`` (and the
``createRetentionStrategy`` presets). Kode never calls them; they use no model. After them a pairing repair
(ctxtool's choice, spec 2.9) keeps a tool result only with its call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ctxtool.common.wording import plural
from ctxtool.compress.strategies import base as s

AUTO_COMPACT_THRESHOLD_RATIO = 0.9  # autoCompactThreshold.ts (0.92 in v1.0.0, 11a0e46)
DEFAULT_CONTEXT_LENGTH = 200_000
MIN_MESSAGES = 3
MAX_FILES_TO_RECOVER = 5  # fileRecoveryCore.ts
MAX_TOKENS_PER_FILE = 10_000
MAX_TOTAL_FILE_TOKENS = 50_000
TRUNCATED_FILE_CHARS = 40_000
_EXCLUDED_PARTS = ("node_modules", ".git", ".cache", "dist/", "build/")
SYNTHETIC_ASSISTANT_MESSAGES = frozenset(  # src/utils/messages/core.ts
    {"[Request interrupted by user]", "[Request interrupted by user for tool use]", "No response requested."}
)
NOTICE = "Context automatically compressed due to token limit."
COMPACT_POINTER_NOTICE = "Compression model pointer 'compact' is not configured."
CLI_SYSPROMPT_PREFIX = "You are Kode, ShareAI-lab's Agent AI CLI for terminal & coding."
# ctxtool's wording; the eight sections and their order are Kode's COMPRESSION_PROMPT. Each heading: what the
# prompt asks for, and the offline snapshot sections that fill it.
SUMMARIZER_SYSTEM = (
    "You summarise conversations so that development can continue without losing any essential context."
)
KODE_SECTIONS = {
    "## Technical Context": ("Languages, frameworks, tools, environment.", ("file_system_state",)),
    "## Project Overview": ("What the project is and what the user is building.", ("overall_goal",)),
    "## Code Changes": ("Files created or changed and what changed.", ("artifact_trail",)),
    "## Debugging & Issues": ("Errors met, their causes and fixes.", ("key_knowledge",)),
    "## Current Status": ("Where the work stands now.", ("recent_actions",)),
    "## Pending Tasks": ("What is left to do.", ("task_state",)),
    "## User Preferences": ("How the user wants things done.", ("active_constraints",)),
    "## Key Decisions": ("Choices made and why.", ()),
}
KODE_HEADINGS = tuple(KODE_SECTIONS)
_OFFLINE_LAYOUT = {heading: sections for heading, (_, sections) in KODE_SECTIONS.items()}
COMPRESSION_PROMPT = (
    "Summarise the whole conversation above for a fresh session that must pick up the work where it "
    "stands. Use these eight sections, in this order, each with concrete details (paths, commands, "
    "errors, names):\n\n" + "\n".join(f"{h}\n{asked}" for h, (asked, _) in KODE_SECTIONS.items())
)


def _is_synthetic(record: s.Record) -> bool:
    unit = s.record_units(0, record)[0]
    return unit.role == "assistant" and unit.text in SYNTHETIC_ASSISTANT_MESSAGES


def count_tokens(messages: Sequence[s.Record]) -> int:
    """``countTokens``: the newest non-synthetic model response's usage (input + output), else 0."""
    for msg in reversed(messages):
        tokens = msg.get("tokens")
        if msg.get("type") == "gemini" and isinstance(tokens, Mapping) and not _is_synthetic(msg):
            return s.input_plus_output(tokens)
    return 0


def add_line_numbers(content: str) -> str:
    """``addLineNumbers``: ``<n padded to 6>→<line>``, numbering from 1; empty content gives ''."""
    if not content:
        return ""
    return "\n".join(f"{str(n).rjust(6)}→{line}" for n, line in enumerate(content.split("\n"), 1))


def transcript_files(messages: Sequence[s.Record]) -> tuple[list[str], dict[str, str]]:
    """(paths by last read, newest first; last content seen per path) from the transcript."""
    last_read: dict[str, int] = {}
    content: dict[str, str] = {}
    order = 0
    for i, r in enumerate(messages):
        units = s.record_units(i, r)
        results = {u.call_id: u for u in units if u.role == "tool_result"}
        for c in (c for u in units for c in u.calls):
            order += 1
            if c.name == "read_many_files":
                last_read.update((p, order) for p in c.args.get("paths") or [] if isinstance(p, str))
            path = next((c.args[k] for k in ("absolute_path", "file_path", "path") if k in c.args), None)
            if not isinstance(path, str):
                continue
            failed = (res := results.get(c.id)) is not None and res.is_error
            if c.name == "read_file":
                last_read[path] = order
                if res is not None and not failed:
                    content[path] = res.text
            elif c.name == "write_file" and isinstance(text := c.args.get("content"), str) and not failed:
                content[path] = text
            elif c.name in ("replace", "edit", "smart_edit") and path in content and not failed:
                old, new = c.args.get("old_string"), c.args.get("new_string")
                if isinstance(old, str) and isinstance(new, str) and old:
                    count = c.args.get("expected_replacements")
                    n = int(count) if isinstance(count, int) and count > 0 else 1
                    content[path] = content[path].replace(old, new, n)
    return sorted(last_read, key=lambda p: -last_read[p]), content


def recover_files(messages: Sequence[s.Record], notes: list[str]) -> list[str]:
    """The messages of the files Kode would re-read, rebuilt from the transcript."""
    paths, content = transcript_files(messages)
    candidates = [p for p in paths if not p.startswith("/tmp") and not any(x in p for x in _EXCLUDED_PARTS)]
    out: list[str] = []
    total = 0
    missing = []
    for path in candidates[:MAX_FILES_TO_RECOVER]:
        if path not in content:
            missing.append(path)
            continue
        est = math.ceil(len(content[path]) * 0.25)
        tok = min(est, MAX_TOKENS_PER_FILE)
        if total + tok > MAX_TOTAL_FILE_TOKENS:
            break
        total += tok
        numbered = add_line_numbers(content[path][:TRUNCATED_FILE_CHARS] if est > tok else content[path])
        out.append(
            f"**Recovered File: {path}**\n\n```\n{numbered}\n```\n\n"
            f"*Automatically recovered ({tok} tokens){' [truncated]' if est > tok else ''}*"
        )
    if missing:
        notes.append(f"file recovery: no content in the transcript for {', '.join(missing)}; skipped")
    return out


class KodeAutoCompact(s.Strategy):
    name = "kode"
    own_measure = "kode countTokens (input + output)"
    description = (
        "Kode auto-compact: at 0.9 of the context window (default 200,000), the whole history is replaced "
        "by a notice, an 8-section summary and up to 5 recently read files (<= 50,000 tokens)"
    )
    exactness = (
        "recovered files are rebuilt from the transcript (Kode re-reads them from disk); the compact model "
        "pointer is taken as unconfigured ('main')"
    )

    def trigger(self, messages: Sequence[s.Record], options: s.StrategyOptions) -> s.Trigger:
        win = s.window(options, DEFAULT_CONTEXT_LENGTH)
        limit = math.ceil(win * AUTO_COMPACT_THRESHOLD_RATIO)
        return s.first_crossing(
            messages,
            s.input_plus_output,
            lambda v: v >= win * AUTO_COMPACT_THRESHOLD_RATIO,
            measure=f"input + output >= 0.9 x {win}",
            limit=limit,
            skip=_is_synthetic,
        )

    def compact(self, job: s.Job) -> None:
        messages, result = job.messages, job.result
        body = s.body_records(messages)
        result.own_tokens_before = count_tokens(body)
        result.kept_from = len(messages)
        if len([m for m in body if m.get("type") in ("user", "gemini")]) < MIN_MESSAGES:
            result.notes.append(f"fewer than {MIN_MESSAGES} messages: Kode does not compact")
            return
        if job.waits:
            return
        system = CLI_SYSPROMPT_PREFIX + "\n\n" + SUMMARIZER_SYSTEM
        offline = s.offline_layout(body, _OFFLINE_LAYOUT, "- (none recorded)")
        summary = job.ask(system, COMPRESSION_PROMPT, body, offline, purpose="kode-auto-compact")
        if not summary or not summary.strip():
            result.status = "COMPRESSION_FAILED_EMPTY_SUMMARY"
            result.notes.append("no text in the summary: Kode keeps the history unchanged")
            return
        files = recover_files(body, result.notes)
        notice = f"{NOTICE} {COMPACT_POINTER_NOTICE} Using 'main' for compression."
        lead = [job.record("user", notice), job.record("gemini", summary)]
        job.write([*lead, *(job.record("user", f) for f in files)], [], summary)
        result.messages_summarised = len(body)
        result.own_tokens_after = math.ceil(len(summary) / 4)
        result.notes.append(f"{plural(len(files), 'file')} recovered from the transcript")


# --------------------------------------------------------------------------------------------------
# The unused retention heuristics (messageContextManager.ts)

_IMPORTANT_WORDS = ("error", "failed", "warning", "critical", "issue")
_TOPICS = (
    (("error", "bug"), "debugging"),
    (("implement", "create"), "implementation"),
    (("explain", "understand"), "explanation"),
    (("fix", "solve"), "problem-solving"),
)
RETENTION_DESCRIPTIONS = {  # the kode:<preset> names, in the order they are listed
    "aggressive": "preserve_recent with preserveCount max(3, 0.7 x window / 200)",
    "balanced": "preserve_important: every user message and tool result, assistant messages naming an "
    "error/failure/warning/issue, and the last 5 messages",
    "conservative": "smart_compression: a counting summary of the older messages + the newest 30% (<= 10)",
    "preserve_recent": "the last max(3, 0.7 x window / 150) messages",
    "preserve_important": "as balanced",
    "smart_compression": "as conservative",
}


def retention_spec(variant: str, target_context_length: int) -> tuple[str, int, int | None]:
    """(type, maxTokens, preserveCount) as ``createRetentionStrategy`` (presets) or a raw type."""
    max_tokens = math.floor(target_context_length * 0.7)
    if variant == "aggressive":
        return "preserve_recent", max_tokens, max(3, max_tokens // 200)
    if variant == "balanced":
        return "preserve_important", max_tokens, max(5, max_tokens // 150)  # preserveCount unused upstream
    if variant == "conservative":
        return "smart_compression", max_tokens, None
    return variant, max_tokens, None


def is_important(unit: s.Unit) -> bool:
    words = unit.role == "assistant" and any(w in unit.text.lower() for w in _IMPORTANT_WORDS)
    return unit.role in ("user", "tool_result") or words


def messages_summary(older: Sequence[s.Unit]) -> str:
    """``createMessagesSummary``."""
    users = sum(1 for u in older if u.role in ("user", "tool_result"))
    assistants = [u for u in older if u.role == "assistant"]
    tools = sum(1 for u in assistants if u.calls)
    found = (t for u in older if u.role == "user" for words, t in _TOPICS if any(w in u.text for w in words))
    topics = dict.fromkeys(found)  # in order of first mention
    return (
        f"Previous conversation included {users} user messages and {len(assistants)} assistant responses, "
        f"with {tools} tool invocations. Key topics: {', '.join(topics) or 'general discussion'}."
    )


class KodeRetention(s.Strategy):
    own_measure = "kode message count"
    exactness = "exact on Kode's rules; a pairing repair (ctxtool's) drops tool results without calls"

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.name = f"kode:{variant}"
        what = RETENTION_DESCRIPTIONS[variant]
        self.description = f"Kode retention heuristic (unused by Kode itself, no model): {what}"

    def trigger(self, messages: Sequence[s.Record], options: s.StrategyOptions) -> s.Trigger:
        return s.Trigger(None, "never called by Kode (no trigger upstream)", None)

    def compact(self, job: s.Job) -> None:
        messages, result = job.messages, job.result
        env = s.env_index(messages)
        units = [
            u for i, r in enumerate(messages) if i != env for u in s.record_units(i, r) if u.role != "note"
        ]
        kind, max_tokens, count = retention_spec(self.variant, s.window(job.options, DEFAULT_CONTEXT_LENGTH))
        result.own_tokens_before = len(units)
        summary_unit: str | None = None
        if kind == "preserve_recent":
            kept_units = units[-(count or max(3, max_tokens // 150)) :]  # estimateMessageCount
        elif kind == "preserve_important":
            kept_units = [u for u in units[:-5] if is_important(u)] + units[-5:]
        else:
            recent_count = min(10, math.floor(len(units) * 0.3))
            # With 0, JS slice(-0) keeps everything (bug kept on purpose), as Python's [-0:] does.
            kept_units, older = units[-recent_count:], units[:-recent_count]
            summary_unit = (
                f"[CONVERSATION SUMMARY - {len(older)} messages compressed]\n\n{messages_summary(older)}\n\n"
                "[END SUMMARY - Recent context follows...]"
            )
        kept_idx = self._repair(messages, kept_units, result)
        records = len(messages) - (env is not None)
        if len(kept_idx) == records and summary_unit is None:
            result.notes.append("nothing removed")
            result.kept_from = 0
            return
        kept = [messages[i] for i in kept_idx]
        lead = [job.record("gemini", summary_unit)] if summary_unit is not None else []
        job.write(lead, kept, summary_unit)
        result.kept_from = kept_idx[0] if kept_idx else len(messages)
        result.messages_kept = len(kept)
        result.messages_summarised = records - len(kept)
        units_after = sum(len(s.record_units(i, messages[i])) for i in kept_idx)
        result.own_tokens_after = units_after + (summary_unit is not None)

    @staticmethod
    def _repair(messages: Sequence[s.Record], units: Sequence[s.Unit], result: s.StrategyResult) -> list[int]:
        """Record indices to keep: a record whose first message is kept; a tool result only with its call
        (a record holds both); a carrier of function responses only after a kept call record; info/error
        records after the first kept record."""
        env = s.env_index(messages)
        anchors = {u.index for u in units if u.role in ("user", "assistant")}
        orphan = {u.index for u in units if u.role == "tool_result"} - anchors
        kept: list[int] = []
        notes: list[int] = []
        last_gemini_kept = False
        for i, r in enumerate(messages):
            if i == env:
                continue
            first = s.record_units(i, r)[0]
            if first.role == "note":
                notes.append(i)
                continue
            if first.role == "tool_result":
                if i in orphan and last_gemini_kept:
                    kept.append(i)
                continue
            if i in anchors:
                kept.append(i)
            if r.get("type") == "gemini":
                last_gemini_kept = i in anchors
        # An info/error/warning record stays when the next model-visible record after it stays.
        for n in notes:
            nxt = next((k for k in kept if k > n), None)
            later = next((k for k in range(n + 1, len(messages)) if k not in notes and k != env), None)
            if (nxt is not None and nxt == later) or (later is None and kept):
                kept.append(n)
        kept.sort()
        if dropped := len(orphan - set(kept)):
            what = plural(dropped, "tool result message")
            result.notes.append(f"pairing repair: {what} dropped with their call")
        return kept
