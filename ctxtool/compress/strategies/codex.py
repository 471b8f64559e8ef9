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
from collections.abc import Sequence

from ctxtool.common.wording import plural
from ctxtool.compress.strategies import base as s

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
# The offline checkpoint's headings and the snapshot sections that fill them.
CHECKPOINT_LAYOUT = {
    "## Goal": ("overall_goal",),
    "## Progress and decisions": ("artifact_trail", "recent_actions"),
    "## Constraints and preferences": ("active_constraints",),
    "## Remaining work": ("task_state",),
    "## Critical data": ("key_knowledge", "file_system_state"),
}


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
    env = s.env_index(messages)
    turns = [i for i, r in enumerate(messages) if i != env and s.is_user_turn(r)]
    texts = [(i, "".join(u.text for u in s.record_units(i, messages[i]) if u.role == "user")) for i in turns]
    return [(i, text) for i, text in texts if not text.startswith(SUMMARY_PREFIX + "\n")]


def select_user_messages(texts: Sequence[str]) -> list[str]:
    selected: list[str] = []
    remaining = COMPACT_USER_MESSAGE_MAX_TOKENS
    for text in reversed(texts):
        if remaining == 0:
            break
        if (t := approx_token_count(text)) <= remaining:
            selected.append(text)
            remaining -= t
        else:
            selected.append(truncate_middle(text, remaining))
            break
    return selected[::-1]


class CodexStrategy(s.Strategy):
    name = "codex"
    own_measure = "codex approx_token_count (bytes/4)"
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

    def compact(self, job: s.Job) -> None:
        messages, options, result = job.messages, job.options, job.result
        body = s.body_records(messages)
        units = [u for i, m in enumerate(body) for u in s.record_units(i, m)]
        result.own_tokens_before = sum(approx_token_count(u.text + u.thinking) for u in units)
        result.kept_from = len(messages)
        if not body:
            result.notes.append("nothing to compact")
            return
        if job.waits:
            return
        custom = options.custom_instructions
        prompt = COMPACT_PROMPT + ("\n\n" + custom if custom else "")
        offline = s.offline_layout(body, CHECKPOINT_LAYOUT, "- (none)")
        summary = job.ask(SYSTEM_PROMPT, prompt, body, offline, purpose="codex") or ""
        summary = SUMMARY_PREFIX + "\n" + (summary if summary.strip() else NO_SUMMARY)
        selected = select_user_messages([t for _, t in user_messages(messages)])
        job.write([job.record("user", t) for t in [*selected, summary]], [], summary)
        result.messages_kept = len(selected)
        result.messages_summarised = len(body)
        result.own_tokens_after = sum(approx_token_count(t) for t in [*selected, summary])
        kept = plural(len(selected), "user message")
        result.notes.append(f"kept {kept} rewritten as new records; no model or tool message kept")
