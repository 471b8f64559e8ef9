"""Codex CLI's local ("inline") compaction (openai/codex ``codex-rs/core/src/compact.rs`` @ e06dd0e5),
replayed on a Gemini CLI session. Spec: other-strategies.md section 5.

* Trigger: the last response's total tokens ``>= floor(window * 9 / 10)`` (``auto_compact_token_limit``),
  checked before each turn and mid-turn, i.e. at every model response.
* One summary call on the whole history with the checkpoint prompt appended as a user message.
* New history: the real user messages only (no model messages, tool calls or outputs), newest first within
  20,000 tokens (``COMPACT_USER_MESSAGE_MAX_TOKENS``; the one that does not fit is middle-truncated), put back
  in order, then the summary *as a user message*: ``SUMMARY_PREFIX + "\\n" + summary``.

Not exact offline: remote compaction (OpenAI providers) cannot be replayed; the overflow loop that drops
the oldest item while the summary call does not fit needs a live model; the mid-turn initial-context
injection (AGENTS.md, environment) is not rebuilt. ``approx_token_count`` is ``ceil(bytes / 4)`` (reported by
third parties). Gemini CLI's ack follows the summary so the resumed history alternates (adapter choice).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime

from ctxtool.common.wording import plural
from ctxtool.compress.strategies import base as s
from ctxtool.compress.summarize.offline import OfflineSummarizer
from ctxtool.compress.summarizer import Summarizer

COMPACT_USER_MESSAGE_MAX_TOKENS = 20_000  # compact.rs
AUTO_COMPACT_NUMERATOR, AUTO_COMPACT_DENOMINATOR = 9, 10  # openai_models.rs @ 8db07003
NO_SUMMARY = "(no summary available)"
# ctxtool's wording, same role as templates/compact/summary_prefix.md and prompt.md.
SUMMARY_PREFIX = (
    "Another language model worked on this task before you and left the handoff summary below. Build on "
    "it and continue the work; do not redo what it says is done."
)
COMPACT_PROMPT = (
    "You are about to hand this task over. Write a context checkpoint for the model that continues it: "
    "the user's goal, the progress so far and the decisions taken, constraints and preferences the user "
    "stated, what remains to do with clear next steps, and the exact data, paths and references needed "
    "to carry on. Be concise and structured."
)
SYSTEM_PROMPT = "You are a coding agent. Answer the last user message."


def approx_token_count(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)


def truncate_middle(text: str, max_tokens: int) -> str:
    """``truncate_text`` by tokens: head and tail kept around ``…N tokens truncated…``."""
    data = text.encode("utf-8", "surrogatepass")
    budget = max_tokens * 4
    if len(data) <= budget:
        return text
    removed = approx_token_count(text) - max_tokens
    head = data[: budget // 2].decode("utf-8", "ignore")
    tail = data[len(data) - budget // 2 :].decode("utf-8", "ignore")
    return f"{head}…{removed} tokens truncated…{tail}"


def user_messages(messages: Sequence[s.Record]) -> list[tuple[int, str]]:
    """(record index, text) of every real user message, previous summaries excluded."""
    out = []
    for i, r in enumerate(messages):
        if i == s.env_index(messages) or not s.is_user_turn(r):
            continue
        text = "".join(u.text for u in s.record_units(i, r) if u.role == "user")
        if text.startswith(SUMMARY_PREFIX + "\n"):
            continue
        out.append((i, text))
    return out


def select_user_messages(texts: Sequence[str], budget: int = COMPACT_USER_MESSAGE_MAX_TOKENS) -> list[str]:
    selected: list[str] = []
    remaining = budget
    for text in reversed(texts):
        if remaining == 0:
            break
        t = approx_token_count(text)
        if t <= remaining:
            selected.append(text)
            remaining -= t
        else:
            selected.append(truncate_middle(text, remaining))
            break
    selected.reverse()
    return selected


def offline_checkpoint(summ: OfflineSummarizer, messages: Sequence[s.Record]) -> str:
    sec = s.offline_sections(summ, s.wire_history(messages))
    return s.render_sections(
        [
            ("## Goal", sec.get("overall_goal", [])),
            ("## Progress and decisions", sec.get("artifact_trail", []) + sec.get("recent_actions", [])),
            ("## Constraints and preferences", sec.get("active_constraints", [])),
            ("## Remaining work", sec.get("task_state", [])),
            ("## Critical data", sec.get("key_knowledge", []) + sec.get("file_system_state", [])),
        ],
        empty="- (none)",
    )


class CodexStrategy:
    name = "codex"
    description = (
        "Codex CLI local compaction: at 90% of the window, the history is replaced by the user messages "
        "only (newest first, up to 20,000 tokens) and the summary stored as a user message"
    )
    exactness = (
        "remote compaction, the overflow retry loop and the mid-turn initial-context injection are not "
        "replayed; ack message added after the summary for Gemini alternation"
    )

    def trigger(self, messages: Sequence[s.Record], options: s.StrategyOptions) -> s.Trigger:
        win = s.window(options)
        limit = win * AUTO_COMPACT_NUMERATOR // AUTO_COMPACT_DENOMINATOR
        return s.first_crossing(
            messages, s.total_tokens, lambda v: v >= limit, measure=f"total >= 90% of {win}", limit=limit
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
        result = s.StrategyResult(self.name, "NOOP", trig, own_measure="codex approx_token_count (bytes/4)")
        env = s.env_index(messages)
        body = [m for i, m in enumerate(messages) if i != env]
        result.own_tokens_before = sum(
            approx_token_count(u.text + u.thinking) for i, m in enumerate(body) for u in s.record_units(i, m)
        )
        result.kept_from = len(messages)
        if not body:
            result.notes.append("nothing to compact")
            return result
        if not trig.would_trigger and not options.force:
            return result
        history = s.wire_history(body)
        prompt = COMPACT_PROMPT + (
            "\n\n" + options.custom_instructions if options.custom_instructions else ""
        )
        call = s.model_call(
            options.chat_model, SYSTEM_PROMPT, [*history, s.user_content(prompt)], history, purpose="codex"
        )
        result.calls.append(call)
        summary = s.summarize(summarizer, call, lambda summ: offline_checkpoint(summ, body)) or ""
        summary_text = SUMMARY_PREFIX + "\n" + (summary if summary.strip() else NO_SUMMARY)
        ts = js_iso(now)
        selected = select_user_messages([t for _, t in user_messages(messages)])
        lead = [s.text_record("user", t, ts, new_id) for t in selected]
        lead.append(s.text_record("user", summary_text, ts, new_id))
        result.messages = [*s.head_records(messages), *s.with_ack(lead, [], ts, new_id)]
        result.status = "COMPRESSED"
        result.summary = summary_text
        result.messages_kept = len(selected)
        result.messages_summarised = len(body)
        result.own_tokens_after = sum(approx_token_count(t) for t in [*selected, summary_text])
        result.notes.append(
            f"kept {plural(len(selected), 'user message')} rewritten as new records; "
            "no model or tool message kept"
        )
        return result
