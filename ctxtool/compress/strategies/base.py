"""What every compaction strategy shares: the types and helpers the agents' modules import.

Owns: the ``Strategy`` protocol (name, description, exactness notes, ``trigger`` and ``plan``), the neutral
view of session records the strategies cut on (spec other-strategies.md section 1), and the helpers every
strategy uses to build its output in Gemini CLI's session format. The registry (``registry``: ``gemini-cli``,
``kode`` and its retention heuristics ``kode:<preset>``, ``pi``, ``openclaw``, ``codex``) sits above the
agents; this module imports none of them. Must not: do I/O, print, or import rich/typer. ``ctxtool.compact``
reads and writes the files; ``ctxtool.compare`` measures results.

Adapter choices every strategy shares (they are not upstream facts; spec section 8 item 6):

* A stored ``<session_context>`` message stays first, as Gemini CLI's own compaction keeps it: every one of
  these agents keeps its system prompt and environment outside the history it compacts.
* The strategies cut on session *records*. A ``gemini`` record holds its tool calls and their results, so a
  cut can never separate a call from its result; a ``user`` record that only carries function responses is
  a tool result and never a cut point.
* When an agent's layout ends its leading block with a user message and the next kept message is not a
  model message (or nothing follows), Gemini CLI's own acknowledgement (``SUMMARY_ACK_TEXT``) is inserted as
  a model message so the resumed history alternates. Reports say so in their notes.
* With the offline summarizer, each strategy writes its own section layout from the same fact extraction
  (``OfflineSummarizer`` snapshot sections, re-headed); with the gemini summarizer it sends its own prompt
  structure (ctxtool's wording, upstream's headings).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import orjson

from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.compress.summarize.offline import OfflineSummarizer, previous_snapshot
from ctxtool.compress.summarizer import Content, ModelCall, Summarizer
from ctxtool.measure.tokens import token_limit

Role = Literal["user", "assistant", "tool_result", "note"]
Record = dict[str, Any]


# --------------------------------------------------------------------------------------------------
# Options and results


@dataclass(frozen=True)
class StrategyOptions:
    """What a replay needs besides the session. ``context_window`` None: the strategy's own default (Kode
    200,000; the others the Gemini model's ``tokenLimit``)."""

    chat_model: str
    context_window: int | None = None
    force: bool = False
    custom_instructions: str | None = None
    threshold: float | None = None  # gemini-cli only: share of the token limit


@dataclass(frozen=True)
class Trigger:
    """Whether (and where first) the strategy's own trigger fires while the session was recorded.

    ``would_trigger`` None means the strategy has no trigger upstream (Kode's unused heuristics). ``turn``
    is the 1-based user turn in which the usage that crosses the limit was recorded, ``message_id`` the
    record that carried it; ``tokens`` is that usage (or the largest one seen when it never fires)."""

    would_trigger: bool | None
    measure: str
    limit: int | None
    turn: int | None = None
    message_id: str | None = None
    tokens: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class StrategyResult:
    """A strategy's plan. ``messages`` is the new session message list (None when nothing is written)."""

    strategy: str
    status: str  # COMPRESSED, NOOP or COMPRESSION_FAILED_EMPTY_SUMMARY
    trigger: Trigger
    messages: list[Record] | None = None
    summary: str | None = None
    kept_from: int | None = None  # index of the first record kept verbatim (len(records): none)
    messages_summarised: int = 0
    messages_kept: int = 0
    own_measure: str = ""
    own_tokens_before: int | None = None
    own_tokens_after: int | None = None
    calls: list[ModelCall] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Strategy(Protocol):
    name: str
    description: str
    exactness: str

    def trigger(self, messages: Sequence[Record], options: StrategyOptions) -> Trigger: ...

    def plan(
        self,
        messages: Sequence[Record],
        summarizer: Summarizer,
        options: StrategyOptions,
        *,
        now: datetime,
        new_id: Callable[[], str],
    ) -> StrategyResult: ...


# --------------------------------------------------------------------------------------------------
# The neutral view (spec section 1)


@dataclass(frozen=True)
class ToolCallView:
    id: str
    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Unit:
    """One message as the other agents see it; ``index`` is the session record it comes from."""

    index: int
    role: Role
    text: str = ""
    thinking: str = ""
    calls: tuple[ToolCallView, ...] = ()
    call_id: str = ""
    tool_name: str = ""
    is_error: bool = False


def record_wire(record: Record) -> list[Content]:
    """The wire contents Gemini CLI builds from one record on resume (``convertSessionToClientHistory``)."""
    return [t["content"] for t in g.convert_session_to_client_history([record])]


def _text_parts(content: Content, *, thought: bool) -> list[str]:
    return [
        part["text"]
        for part in content.get("parts") or []
        if isinstance(part, dict)
        and isinstance(part.get("text"), str)
        and bool(part.get("thought")) == thought
    ]


def response_text(response: Any) -> str:
    """The text of a functionResponse's ``response``: ``output`` or ``error`` when a string, else JSON."""
    if isinstance(response, Mapping):
        for key in ("output", "error"):
            value = response.get(key)
            if isinstance(value, str):
                return value
    return orjson.dumps(response, default=str).decode() if response is not None else ""


def _status_of(record: Record, call_id: str) -> str:
    for tc in record.get("toolCalls") or []:
        if isinstance(tc, dict) and tc.get("id") == call_id:
            return str(tc.get("status") or "")
    return ""


def record_units(index: int, record: Record) -> list[Unit]:
    kind = record.get("type")
    if kind not in ("user", "gemini"):
        return [Unit(index, "note")]
    wire = record_wire(record)
    if not wire:
        return [Unit(index, "note")]  # a slash command or other content Gemini CLI does not send
    units: list[Unit] = []
    for content in wire:
        responses = [p["functionResponse"] for p in content.get("parts") or [] if _is_response(p)]
        if content.get("role") == "model":
            calls = tuple(
                ToolCallView(str(fc.get("id") or ""), str(fc.get("name") or ""), fc.get("args") or {})
                for p in content.get("parts") or []
                if isinstance(p, dict) and isinstance(fc := p.get("functionCall"), dict)
            )
            units.append(
                Unit(
                    index,
                    "assistant",
                    text="\n".join(_text_parts(content, thought=False)),
                    thinking="\n".join(_text_parts(content, thought=True)),
                    calls=calls,
                )
            )
        elif responses:
            for fr in responses:
                resp = fr.get("response")
                cid = str(fr.get("id") or "")
                error = (isinstance(resp, Mapping) and "error" in resp) or _status_of(record, cid) == "error"
                units.append(
                    Unit(
                        index,
                        "tool_result",
                        text=response_text(resp),
                        call_id=cid,
                        tool_name=str(fr.get("name") or ""),
                        is_error=bool(error),
                    )
                )
        else:
            units.append(Unit(index, "user", text="".join(_text_parts(content, thought=False))))
    return units


def _is_response(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)


def is_user_turn(record: Record) -> bool:
    """A real user prompt: a user record Gemini CLI sends, with text and no function responses."""
    if record.get("type") != "user":
        return False
    wire = record_wire(record)
    return (
        bool(wire)
        and all(not any(_is_response(p) for p in c.get("parts") or []) for c in wire)
        and any(_text_parts(c, thought=False) for c in wire)
    )


# Index of the stored ``<session_context>`` message, found as Gemini CLI's port finds it.
env_index = g.stored_env_index


def wire_history(messages: Sequence[Record]) -> list[Content]:
    return [c for m in messages for c in record_wire(m)]


def gemini_estimate(messages: Sequence[Record], model: str) -> int:
    """Gemini CLI's local estimate (``estimateTokenCountSync``) of the history a resume of ``messages``
    sends, env turn included: the one measure every strategy is compared with.

    A session that stored no ``<session_context>`` is measured with an undated stand-in, so the measure of a
    file does not depend on the day it is taken, nor on the timestamps a compaction gave its new messages
    (a weekday's name is 6 to 9 characters)."""
    stand_in = None if g.stored_env_index(messages) is not None else g.synthesize_env_text(None)
    curated = g.session_to_curated_history(list(messages), model, stand_in)
    parts = [p for c in curated.contents for p in c.get("parts") or []]
    return g.estimate_token_count(parts)


def chars4(text: str) -> int:
    return math.ceil(len(text) / 4)


# --------------------------------------------------------------------------------------------------
# Building output records


def text_record(kind: str, text: str, ts: str, new_id: Callable[[], str]) -> Record:
    return {"id": new_id(), "timestamp": ts, "type": kind, "content": [{"text": text}]}


def with_ack(lead: list[Record], kept: Sequence[Record], ts: str, new_id: Callable[[], str]) -> list[Record]:
    """``lead`` (ending with a user message) then ``kept``, with Gemini CLI's ack between them when the
    first kept message sent to the model is not a model message (see the module docstring)."""
    nxt = next((m for m in kept if m.get("type") in ("user", "gemini")), None)
    if lead and lead[-1].get("type") == "user" and (nxt is None or nxt.get("type") != "gemini"):
        return [*lead, text_record("gemini", g.SUMMARY_ACK_TEXT, ts, new_id), *kept]
    return [*lead, *kept]


def head_records(messages: Sequence[Record]) -> list[Record]:
    i = env_index(messages)
    return [messages[i]] if i is not None else []


# --------------------------------------------------------------------------------------------------
# Summaries: the gemini call or the offline layout


OfflineLayout = Callable[[OfflineSummarizer], str]


def summarize(summarizer: Summarizer, call: ModelCall, offline: OfflineLayout) -> str | None:
    """Answer ``call``: an offline summarizer writes the strategy's own layout, any other back end gets
    the call itself."""
    if isinstance(summarizer, OfflineSummarizer):
        return offline(summarizer)
    return summarizer.generate(call)


def offline_sections(summarizer: OfflineSummarizer, history: Sequence[Content]) -> dict[str, list[str]]:
    """The facts the offline summarizer selects for ``history``, by ``<state_snapshot>`` section, as lines
    (group titles end with ``:``)."""
    snapshot = summarizer.summarize(history)
    return previous_snapshot([{"role": "user", "parts": [{"text": snapshot}]}]) or {}


def render_sections(headings: Sequence[tuple[str, Sequence[str]]], empty: str = "None.") -> str:
    """``## Heading`` blocks with ``- line`` bullets (group titles as plain lines)."""
    blocks = []
    for heading, lines in headings:
        body = [ln if ln.endswith(":") else f"- {ln}" for ln in lines if ln]
        blocks.append(heading + "\n" + ("\n".join(body) if body else empty))
    return "\n\n".join(blocks)


def parse_sections(text: str) -> dict[str, list[str]]:
    """``## Heading`` / ``### Heading`` sections of a markdown summary, as their non-empty lines without
    bullets (used to carry a previous summary's lines in an offline update)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            current = out.setdefault(line, [])
            continue
        if current is not None and line and line not in ("None.", "None captured."):
            current.append(line[2:] if line.startswith("- ") else line)
    return out


def model_call(
    model: str,
    system: str,
    contents: list[Content],
    history: list[Content],
    *,
    purpose: str,
    max_output_tokens: int | None = None,
    previous_summary: str | None = None,
) -> ModelCall:
    return ModelCall(
        kind="summary",
        model=model,
        system_instruction=system,
        contents=contents,
        history=history,
        previous_summary=previous_summary,
        prompt_id=f"ctxtool-{purpose}",
        max_output_tokens=max_output_tokens,
        extra={"purpose": purpose},
    )


def user_content(text: str) -> Content:
    return {"role": "user", "parts": [{"text": text}]}


# --------------------------------------------------------------------------------------------------
# Triggers


def usage_points(messages: Sequence[Record]) -> list[tuple[int, int, Mapping[str, Any]]]:
    """(record index, 1-based user turn, recorded tokens) of every gemini record that has tokens."""
    out: list[tuple[int, int, Mapping[str, Any]]] = []
    turn = 0
    for i, msg in enumerate(messages):
        if is_user_turn(msg):
            turn += 1
        tokens = msg.get("tokens")
        if msg.get("type") == "gemini" and isinstance(tokens, Mapping):
            out.append((i, max(turn, 1), tokens))
    return out


def token_count(tokens: Mapping[str, Any], key: str) -> int:
    value = tokens.get(key)
    return int(value) if isinstance(value, int | float) else 0


def first_crossing(
    messages: Sequence[Record],
    value: Callable[[Mapping[str, Any]], int],
    fires: Callable[[int], bool],
    *,
    measure: str,
    limit: int,
    only_turn_ends: bool = False,
    skip: Callable[[Record], bool] | None = None,
) -> Trigger:
    points = usage_points(messages)
    if only_turn_ends:
        points = [p for k, p in enumerate(points) if k + 1 == len(points) or points[k + 1][1] != p[1]]
    best: int | None = None
    for index, turn, tokens in points:
        if skip is not None and skip(messages[index]):
            continue
        v = value(tokens)
        best = v if best is None else max(best, v)
        if fires(v):
            mid = messages[index].get("id")
            return Trigger(True, measure, limit, turn, mid if isinstance(mid, str) else None, v)
    return Trigger(False, measure, limit, tokens=best)


def total_tokens(tokens: Mapping[str, Any]) -> int:
    """Pi's and Codex's context measure on a Gemini record: ``total`` (spec section 1 mapping)."""
    total = token_count(tokens, "total")
    return total or token_count(tokens, "input") + token_count(tokens, "output")


def input_plus_output(tokens: Mapping[str, Any]) -> int:
    """Kode's ``countTokens`` on a Gemini record: input + output (cached is already inside input)."""
    return token_count(tokens, "input") + token_count(tokens, "output")


def window(options: StrategyOptions, default: int | None = None) -> int:
    if options.context_window is not None:
        return options.context_window
    return default if default is not None else token_limit(options.chat_model)
