"""Kode's compaction (shareAI-lab/Kode-cli @ 214c12fc), replayed on a Gemini CLI session. Spec:
other-strategies.md section 2.

``kode`` is the live auto-compact (``src/utils/session/autoCompactCore.ts``): before every model call, when
the last response's usage (input + output on a Gemini record) reaches 0.9 of the context window (default
200,000) and the history has at least 3 messages, the *whole* history is summarised in one call with the
8-section prompt and replaced by ``[user(notice), model(summary), user(recovered file)×k]``. File recovery
(``fileRecoveryCore.ts``) re-reads up to 5 recently read files from disk; ctxtool rebuilds their content
from the transcript instead (the last read_file output or write_file content, with later ``replace`` edits
applied), because the files on disk are not the ones the session saw. Files whose content the transcript
does not hold are skipped and listed in the notes.

``kode:<preset>`` are the retention heuristics of ``src/utils/session/messageContextManager.ts``
(``preserve_recent``, ``preserve_important``, ``smart_compression``; ``createRetentionStrategy`` presets
aggressive / balanced / conservative). Kode never calls them at runtime; they use no model. After them a
pairing repair (ctxtool's choice, spec 2.9) keeps a tool result only with its call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ctxtool.common.wording import plural
from ctxtool.compress.strategies import base as s
from ctxtool.compress.summarize.offline import OfflineSummarizer
from ctxtool.compress.summarizer import Summarizer

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
# ctxtool's wording; the eight sections and their order are Kode's COMPRESSION_PROMPT.
SUMMARIZER_SYSTEM = (
    "You summarise conversations so that development can continue without losing any essential context."
)
KODE_HEADINGS = (
    "## Technical Context",
    "## Project Overview",
    "## Code Changes",
    "## Debugging & Issues",
    "## Current Status",
    "## Pending Tasks",
    "## User Preferences",
    "## Key Decisions",
)
COMPRESSION_PROMPT = (
    "Summarise the whole conversation above for a fresh session that must pick up the work where it "
    "stands. Use these eight sections, in this order, each with concrete details (paths, commands, "
    "errors, names):\n\n"
    + "\n".join(
        f"{h}\n{d}"
        for h, d in zip(
            KODE_HEADINGS,
            (
                "Languages, frameworks, tools, environment.",
                "What the project is and what the user is building.",
                "Files created or changed and what changed.",
                "Errors met, their causes and fixes.",
                "Where the work stands now.",
                "What is left to do.",
                "How the user wants things done.",
                "Choices made and why.",
            ),
            strict=True,
        )
    )
)


# --------------------------------------------------------------------------------------------------
# Live auto-compact


def _is_synthetic(record: s.Record) -> bool:
    units = s.record_units(0, record)
    return bool(units) and units[0].role == "assistant" and units[0].text in SYNTHETIC_ASSISTANT_MESSAGES


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


@dataclass(frozen=True)
class RecoveredFile:
    path: str
    content: str
    tokens: int
    truncated: bool

    @property
    def message(self) -> str:
        flag = " [truncated]" if self.truncated else ""
        return (
            f"**Recovered File: {self.path}**\n\n```\n{add_line_numbers(self.content)}\n```\n\n"
            f"*Automatically recovered ({self.tokens} tokens){flag}*"
        )


def _excluded(path: str) -> bool:
    return any(part in path for part in _EXCLUDED_PARTS) or path.startswith("/tmp")


def transcript_files(messages: Sequence[s.Record]) -> tuple[list[str], dict[str, str]]:
    """(paths by last read, newest first; last content seen per path) from the transcript."""
    last_read: dict[str, int] = {}
    content: dict[str, str] = {}
    order = 0
    for i, r in enumerate(messages):
        units = s.record_units(i, r)
        results = {u.call_id: u for u in units if u.role == "tool_result"}
        for u in units:
            for c in u.calls:
                order += 1
                path = next((c.args[k] for k in ("absolute_path", "file_path", "path") if k in c.args), None)
                if c.name == "read_many_files":
                    for p in c.args.get("paths") or []:
                        if isinstance(p, str):
                            last_read[p] = order
                if not isinstance(path, str):
                    continue
                res = results.get(c.id)
                ok = res is None or not res.is_error
                if c.name == "read_file":
                    last_read[path] = order
                    if res is not None and not res.is_error:
                        content[path] = res.text
                elif c.name == "write_file" and isinstance(c.args.get("content"), str):
                    if ok:
                        content[path] = str(c.args["content"])
                elif c.name in ("replace", "edit", "smart_edit") and path in content:
                    old, new = c.args.get("old_string"), c.args.get("new_string")
                    if isinstance(old, str) and isinstance(new, str) and old and ok:
                        count = c.args.get("expected_replacements")
                        n = int(count) if isinstance(count, int) and count > 0 else 1
                        content[path] = content[path].replace(old, new, n)
    paths = sorted(last_read, key=lambda p: -last_read[p])
    return paths, content


def recover_files(messages: Sequence[s.Record], notes: list[str]) -> list[RecoveredFile]:
    paths, content = transcript_files(messages)
    candidates = [p for p in paths if not _excluded(p)][:MAX_FILES_TO_RECOVER]
    out: list[RecoveredFile] = []
    total = 0
    missing = []
    for path in candidates:
        if path not in content:
            missing.append(path)
            continue
        text = content[path]
        est = math.ceil(len(text) * 0.25)
        truncated = est > MAX_TOKENS_PER_FILE
        if truncated:
            text = text[:TRUNCATED_FILE_CHARS]
        tok = min(est, MAX_TOKENS_PER_FILE)
        if total + tok > MAX_TOTAL_FILE_TOKENS:
            break
        total += tok
        out.append(RecoveredFile(path, text, tok, truncated))
    if missing:
        notes.append(f"file recovery: no content in the transcript for {', '.join(missing)}; skipped")
    return out


def offline_kode_summary(summ: OfflineSummarizer, messages: Sequence[s.Record]) -> str:
    sec = s.offline_sections(summ, s.wire_history(messages))
    return s.render_sections(
        [
            ("## Technical Context", sec.get("file_system_state", [])),
            ("## Project Overview", sec.get("overall_goal", [])),
            ("## Code Changes", sec.get("artifact_trail", [])),
            ("## Debugging & Issues", sec.get("key_knowledge", [])),
            ("## Current Status", sec.get("recent_actions", [])),
            ("## Pending Tasks", sec.get("task_state", [])),
            ("## User Preferences", sec.get("active_constraints", [])),
            ("## Key Decisions", []),
        ],
        empty="- (none recorded)",
    )


class KodeAutoCompact:
    name = "kode"
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

    def plan(
        self,
        messages: Sequence[s.Record],
        summarizer: Summarizer,
        options: s.StrategyOptions,
        *,
        now: datetime,
        new_id: Callable[[], str],
    ) -> s.StrategyResult:
        from ctxtool.common.jsvalue import js_iso

        trig = self.trigger(messages, options)
        result = s.StrategyResult(self.name, "NOOP", trig, own_measure="kode countTokens (input + output)")
        env = s.env_index(messages)
        body = [m for i, m in enumerate(messages) if i != env]
        result.own_tokens_before = count_tokens(body)
        result.kept_from = len(messages)
        if len([m for m in body if m.get("type") in ("user", "gemini")]) < MIN_MESSAGES:
            result.notes.append(f"fewer than {MIN_MESSAGES} messages: Kode does not compact")
            return result
        if not trig.would_trigger and not options.force:
            return result
        history = s.wire_history(body)
        call = s.model_call(
            options.chat_model,
            CLI_SYSPROMPT_PREFIX + "\n\n" + SUMMARIZER_SYSTEM,
            [*history, s.user_content(COMPRESSION_PROMPT)],
            history,
            purpose="kode-auto-compact",
        )
        result.calls.append(call)
        summary = s.summarize(summarizer, call, lambda summ: offline_kode_summary(summ, body))
        if not summary or not summary.strip():
            result.status = "COMPRESSION_FAILED_EMPTY_SUMMARY"
            result.notes.append("no text in the summary: Kode keeps the history unchanged")
            return result
        ts = js_iso(now)
        files = recover_files(body, result.notes)
        notice = f"{NOTICE} {COMPACT_POINTER_NOTICE} Using 'main' for compression."
        lead = [s.text_record("user", notice, ts, new_id), s.text_record("gemini", summary, ts, new_id)]
        lead += [s.text_record("user", f.message, ts, new_id) for f in files]
        result.messages = [*s.head_records(messages), *s.with_ack(lead, [], ts, new_id)]
        result.status = "COMPRESSED"
        result.summary = summary
        result.messages_summarised = len(body)
        result.messages_kept = 0
        result.own_tokens_after = s.chars4(summary)
        result.notes.append(f"{plural(len(files), 'file')} recovered from the transcript")
        return result


# --------------------------------------------------------------------------------------------------
# The unused retention heuristics (messageContextManager.ts)

_IMPORTANT_WORDS = ("error", "failed", "warning", "critical", "issue")


def estimate_message_count(max_tokens: int) -> int:
    return max(3, max_tokens // 150)


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
    if unit.role in ("user", "tool_result"):
        return True
    return unit.role == "assistant" and any(w in unit.text.lower() for w in _IMPORTANT_WORDS)


def messages_summary(older: Sequence[s.Unit]) -> str:
    """``createMessagesSummary``."""
    users = sum(1 for u in older if u.role in ("user", "tool_result"))
    assistants = [u for u in older if u.role == "assistant"]
    tools = sum(1 for u in assistants if u.calls)
    topics: list[str] = []
    for u in older:
        if u.role != "user":
            continue
        text = u.text
        for words, topic in (
            (("error", "bug"), "debugging"),
            (("implement", "create"), "implementation"),
            (("explain", "understand"), "explanation"),
            (("fix", "solve"), "problem-solving"),
        ):
            if any(w in text for w in words) and topic not in topics:
                topics.append(topic)
    return (
        f"Previous conversation included {users} user messages and {len(assistants)} assistant responses, "
        f"with {tools} tool invocations. Key topics: {', '.join(topics) or 'general discussion'}."
    )


_RETENTION_DESCRIPTIONS = {
    "aggressive": "preserve_recent with preserveCount max(3, 0.7 x window / 200)",
    "balanced": "preserve_important: every user message and tool result, assistant messages naming an "
    "error/failure/warning/issue, and the last 5 messages",
    "conservative": "smart_compression: a counting summary of the older messages + the newest 30% (<= 10)",
    "preserve_recent": "the last max(3, 0.7 x window / 150) messages",
    "preserve_important": "as balanced",
    "smart_compression": "as conservative",
}


class KodeRetention:
    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.name = f"kode:{variant}"
        self.description = (
            f"Kode retention heuristic (unused by Kode itself, no model): {_RETENTION_DESCRIPTIONS[variant]}"
        )
        self.exactness = (
            "exact on Kode's rules; a pairing repair (ctxtool's) drops tool results without calls"
        )

    def trigger(self, messages: Sequence[s.Record], options: s.StrategyOptions) -> s.Trigger:
        return s.Trigger(None, "never called by Kode (no trigger upstream)", None)

    def plan(
        self,
        messages: Sequence[s.Record],
        summarizer: Summarizer,
        options: s.StrategyOptions,
        *,
        now: datetime,
        new_id: Callable[[], str],
    ) -> s.StrategyResult:
        from ctxtool.common.jsvalue import js_iso

        result = s.StrategyResult(
            self.name, "NOOP", self.trigger(messages, options), own_measure="kode message count"
        )
        env = s.env_index(messages)
        units = [
            u for i, r in enumerate(messages) if i != env for u in s.record_units(i, r) if u.role != "note"
        ]
        kind, max_tokens, count = retention_spec(self.variant, s.window(options, DEFAULT_CONTEXT_LENGTH))
        result.own_tokens_before = len(units)
        summary_unit: str | None = None
        if kind == "preserve_recent":
            n = count or estimate_message_count(max_tokens)
            kept_units = units[-n:]
        elif kind == "preserve_important":
            recent = units[-min(5, len(units)) :] if units else []
            older = units[: len(units) - len(recent)]
            kept_units = [u for u in older if is_important(u)] + recent
        else:
            recent_count = min(10, math.floor(len(units) * 0.3))
            if recent_count == 0:  # JS slice(-0) keeps everything (bug kept on purpose)
                kept_units, older = list(units), []
            else:
                kept_units, older = units[-recent_count:], units[:-recent_count]
            summary_unit = (
                f"[CONVERSATION SUMMARY - {len(older)} messages compressed]\n\n{messages_summary(older)}\n\n"
                "[END SUMMARY - Recent context follows...]"
            )
        kept_idx = self._repair(messages, kept_units, result)
        if len(kept_idx) == sum(1 for i in range(len(messages)) if i != env) and summary_unit is None:
            result.notes.append("nothing removed")
            result.kept_from = 0
            return result
        ts = js_iso(now)
        kept = [messages[i] for i in kept_idx]
        lead = [s.text_record("gemini", summary_unit, ts, new_id)] if summary_unit is not None else []
        result.messages = [*s.head_records(messages), *lead, *kept]
        result.status = "COMPRESSED"
        result.summary = summary_unit
        result.kept_from = kept_idx[0] if kept_idx else len(messages)
        result.messages_kept = len(kept)
        result.messages_summarised = sum(1 for i in range(len(messages)) if i != env) - len(kept)
        result.own_tokens_after = len([u for i in kept_idx for u in s.record_units(i, messages[i])]) + (
            1 if summary_unit else 0
        )
        return result

    @staticmethod
    def _repair(
        messages: Sequence[s.Record], kept_units: Sequence[s.Unit], result: s.StrategyResult
    ) -> list[int]:
        """Record indices to keep: a record whose first message is kept; a tool result only with its call
        (a record holds both); a carrier of function responses only after a kept call record; info/error
        records after the first kept record."""
        env = s.env_index(messages)
        anchors = {u.index for u in kept_units if u.role in ("user", "assistant")}
        orphan = {u.index for u in kept_units if u.role == "tool_result"} - anchors
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
        dropped = len(orphan - set(kept))
        if dropped:
            result.notes.append(
                f"pairing repair: {plural(dropped, 'tool result message')} dropped with their call"
            )
        return kept
