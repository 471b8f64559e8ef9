"""What every compaction strategy shares: the types and helpers the agents' modules import.

Owns: the ``Strategy`` base class, the neutral view of session records the strategies cut on (spec
other-strategies.md section 1), and the helpers that build a strategy's output in Gemini CLI's session
format. The registry sits above the agents; this module imports none of them. Must not: do I/O, print, or
import rich/typer (``ctxtool.compact`` reads and writes the files; ``ctxtool.compare`` measures results).

Adapter choices every strategy shares (not upstream facts; spec section 8 item 6):

* A stored ``<session_context>`` message stays first, as Gemini CLI's own compaction keeps it: every one of
  these agents keeps its system prompt and environment outside the history it compacts.
* The cuts are on session *records*: a ``gemini`` record holds its tool calls and their results, so a cut
  never separates them; a ``user`` record that only carries function responses is never a cut point.
* When a layout's leading block ends with a user message and the next kept message is not a model message
  (or nothing follows), Gemini CLI's acknowledgement (``SUMMARY_ACK_TEXT``) follows it as a model message,
  so the resumed history alternates; the notes say so.
* The offline summarizer fills each strategy's own section layout from the same fact extraction; the
  gemini summarizer gets the strategy's own prompt (ctxtool's wording, upstream's headings).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import orjson

from ctxtool.common.jsvalue import js_iso
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.compress.summarize.offline import OfflineSummarizer, previous_snapshot
from ctxtool.compress.summarizer import Content, ModelCall, Summarizer
from ctxtool.measure.tokens import token_limit

Role = Literal["user", "assistant", "tool_result", "note"]
Record = dict[str, Any]
# Index of the stored ``<session_context>`` message, found as Gemini CLI's port finds it.
env_index = g.stored_env_index


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
    """Whether (and where first) the strategy's own trigger fires while the session was recorded: None when
    it has none upstream (Kode's unused heuristics). ``turn`` (1-based) and ``message_id``: where the usage
    that crosses ``limit`` was recorded; ``tokens``: that usage (or the largest seen when it never fires)."""

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


@dataclass
class Job:
    """One ``plan`` in progress: its arguments, the result it builds, the stamp of the records it writes."""

    messages: Sequence[Record]
    summarizer: Summarizer
    options: StrategyOptions
    result: StrategyResult
    ts: str
    new_id: Callable[[], str]

    @property
    def waits(self) -> bool:
        """The trigger did not fire and the replay is not forced: nothing is written."""
        return self.result.trigger.would_trigger is False and not self.options.force

    def record(self, kind: str, text: str) -> Record:
        return text_record(kind, text, self.ts, self.new_id)

    def ask(
        self,
        system: str,
        prompt: str,
        records: Sequence[Record],
        offline: Callable[[OfflineSummarizer], str],
        *,
        purpose: str,
        serialised: bool = False,
        max_output_tokens: int | None = None,
        previous_summary: str | None = None,
    ) -> str | None:
        """A summary call on ``records`` (their wire history sent before ``prompt``, or only in it when
        ``serialised``), kept in the result and answered: an offline summarizer writes the strategy's own
        layout (``offline``), any other back end gets the call itself."""
        history = wire_history(records)
        call = ModelCall(
            kind="summary",
            model=self.options.chat_model,
            system_instruction=system,
            contents=[*([] if serialised else history), user_content(prompt)],
            history=history,
            previous_summary=previous_summary,
            prompt_id=f"ctxtool-{purpose}",
            max_output_tokens=max_output_tokens,
            extra={"purpose": purpose},
        )
        self.result.calls.append(call)
        if isinstance(self.summarizer, OfflineSummarizer):
            return offline(self.summarizer)
        return self.summarizer.generate(call)

    def write(self, lead: list[Record], kept: Sequence[Record], summary: str | None) -> list[Record]:
        """The new session: the stored ``<session_context>``, ``lead``, Gemini CLI's ack when the module
        docstring says so, then ``kept``."""
        head = [self.messages[i]] if (i := env_index(self.messages)) is not None else []
        nxt = next((m for m in kept if m.get("type") in ("user", "gemini")), None)
        if lead and lead[-1].get("type") == "user" and (nxt is None or nxt.get("type") != "gemini"):
            lead = [*lead, self.record("gemini", g.SUMMARY_ACK_TEXT)]
        self.result.status = "COMPRESSED"
        self.result.summary = summary
        self.result.messages = [*head, *lead, *kept]
        return self.result.messages


class Strategy(ABC):
    """A compaction strategy: its name and notes, its own trigger, and ``plan``, which builds the result
    with that trigger and lets ``compact`` fill it in."""

    name: str
    description: str
    exactness: str
    own_measure = ""

    @abstractmethod
    def trigger(self, messages: Sequence[Record], options: StrategyOptions) -> Trigger: ...

    @abstractmethod
    def compact(self, job: Job) -> None: ...

    def plan(
        self,
        messages: Sequence[Record],
        summarizer: Summarizer,
        options: StrategyOptions,
        *,
        now: datetime,
        new_id: Callable[[], str],
    ) -> StrategyResult:
        trigger = self.trigger(messages, options)
        result = StrategyResult(self.name, "NOOP", trigger, own_measure=self.own_measure)
        self.compact(Job(messages, summarizer, options, result, js_iso(now), new_id))
        return result


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
    texts = [p for p in content.get("parts") or [] if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return [p["text"] for p in texts if bool(p.get("thought")) == thought]


def response_text(response: Any) -> str:
    """The text of a functionResponse's ``response``: ``output`` or ``error`` when a string, else JSON."""
    if isinstance(response, Mapping):
        for key in ("output", "error"):
            value = response.get(key)
            if isinstance(value, str):
                return value
    return orjson.dumps(response, default=str).decode() if response is not None else ""


def record_units(index: int, record: Record) -> list[Unit]:
    """The messages of one record; never empty (a record Gemini CLI does not send is one ``note``)."""
    if not (wire := record_wire(record) if record.get("type") in ("user", "gemini") else []):
        return [Unit(index, "note")]  # info/error records, slash commands, other content never sent
    units: list[Unit] = []
    tool_calls = [tc for tc in record.get("toolCalls") or [] if isinstance(tc, dict)]
    for content in wire:
        parts = content.get("parts") or []
        if content.get("role") == "model":
            calls = tuple(
                ToolCallView(str(fc.get("id") or ""), str(fc.get("name") or ""), fc.get("args") or {})
                for p in parts
                if isinstance(p, dict) and isinstance(fc := p.get("functionCall"), dict)
            )
            text = "\n".join(_text_parts(content, thought=False))
            units.append(Unit(index, "assistant", text, "\n".join(_text_parts(content, thought=True)), calls))
            continue
        if not (responses := [p["functionResponse"] for p in parts if _is_response(p)]):
            units.append(Unit(index, "user", text="".join(_text_parts(content, thought=False))))
        for fr in responses:
            resp, cid = fr.get("response"), str(fr.get("id") or "")
            status = next((tc.get("status") for tc in tool_calls if tc.get("id") == cid), None)
            error = (isinstance(resp, Mapping) and "error" in resp) or status == "error"
            text, tool = response_text(resp), str(fr.get("name") or "")
            units.append(Unit(index, "tool_result", text, call_id=cid, tool_name=tool, is_error=error))
    return units


def _is_response(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)


def is_user_turn(record: Record) -> bool:
    """A real user prompt: a user record Gemini CLI sends, with text and no function responses."""
    wire = record_wire(record) if record.get("type") == "user" else []
    responses = any(_is_response(p) for c in wire for p in c.get("parts") or [])
    return bool(wire) and not responses and any(_text_parts(c, thought=False) for c in wire)


def body_records(messages: Sequence[Record]) -> list[Record]:
    """Every record but the stored ``<session_context>``."""
    env = env_index(messages)
    return [m for i, m in enumerate(messages) if i != env]


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


def text_record(kind: str, text: str, ts: str, new_id: Callable[[], str]) -> Record:
    return {"id": new_id(), "timestamp": ts, "type": kind, "content": [{"text": text}]}


def offline_sections(summarizer: OfflineSummarizer, records: Sequence[Record]) -> dict[str, list[str]]:
    """The facts the offline summarizer selects for ``records``, by ``<state_snapshot>`` section, as lines
    (group titles end with ``:``)."""
    return previous_snapshot([user_content(summarizer.summarize(wire_history(records)))]) or {}


def offline_layout(
    records: Sequence[Record], layout: Mapping[str, Sequence[str]], empty: str
) -> Callable[[OfflineSummarizer], str]:
    """The offline answer in a strategy's layout: its headings (``layout``'s keys), each with the lines of
    its snapshot sections in order."""

    def write(summarizer: OfflineSummarizer) -> str:
        sec = offline_sections(summarizer, records)
        lines = {h: [ln for k in keys for ln in sec.get(k, [])] for h, keys in layout.items()}
        return render_sections(lines, empty)

    return write


def render_sections(sections: Mapping[str, Sequence[str]], empty: str = "None.") -> str:
    """``## Heading`` blocks with ``- line`` bullets (group titles as plain lines)."""
    blocks = []
    for heading, lines in sections.items():
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
        elif current is not None and line and line not in ("None.", "None captured."):
            current.append(line.removeprefix("- "))
    return out


def user_content(text: str) -> Content:
    return {"role": "user", "parts": [{"text": text}]}


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
    """The first usage a gemini record carries for which ``fires(value(tokens))``, with its user turn."""
    points: list[tuple[int, int, Mapping[str, Any]]] = []  # (record index, 1-based user turn, tokens)
    turn = 0
    for i, msg in enumerate(messages):
        turn += is_user_turn(msg)
        if msg.get("type") == "gemini" and isinstance(tokens := msg.get("tokens"), Mapping):
            points.append((i, max(turn, 1), tokens))
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
    return token_count(tokens, "total") or input_plus_output(tokens)


def input_plus_output(tokens: Mapping[str, Any]) -> int:
    """Kode's ``countTokens`` on a Gemini record: input + output (cached is already inside input)."""
    return token_count(tokens, "input") + token_count(tokens, "output")


def window(options: StrategyOptions, default: int | None = None) -> int:
    if options.context_window is not None:
        return options.context_window
    return default if default is not None else token_limit(options.chat_model)
