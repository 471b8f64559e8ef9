"""A deterministic summarizer that needs no model: it writes a ``<state_snapshot>`` from extracted facts.

The snapshot has the sections today's Gemini CLI compression prompt asks the model for (see
``gemini-cli-compression.md`` §9.1.1, ``getCompressionPrompt`` in ``packages/core/src/prompts/snippets.ts``):
goal, constraints, key knowledge, artifact trail, file system state, recent actions, task state. A model
writes prose; this summarizer writes facts, quoted exactly so that a later turn (and ``facts.retention``)
finds them.

Budget: at most ``token_budget * chars_per_token`` characters; when everything does not fit, facts are
chosen tier by tier (``_select``) and the header says what was left out. Anchored histories: an earlier
``<state_snapshot>``'s lines are carried below the new facts of their section, its goal stays the goal. A
probe call returns ``call.previous_summary`` unchanged (offline there is nothing to improve with).

Same input, same bytes: nothing here depends on time, randomness or hash order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxtool.common.errors import UsageError
from ctxtool.common.wording import plural
from ctxtool.compress.summarize.facts import (
    Facts,
    content_parts,
    extract_facts,
    normalize_ws,
    real_user_prompts,
    unescape_xml,
    word_clip,
)
from ctxtool.compress.summarizer import ModelCall, Summarizer
from ctxtool.session.columns import TurnCounts

# The session's own counts of the messages a history came from (``ctxtool.compact`` knows them).
SpanCounter = Callable[[Sequence[Mapping[str, Any]]], TurnCounts]

SECTIONS = (
    "user_requests",
    "overall_goal",
    "active_constraints",
    "key_knowledge",
    "artifact_trail",
    "file_system_state",
    "recent_actions",
    "task_state",
)
MIN_TOKEN_BUDGET = 250
_GOAL_HEAD = 240
_GOAL_MAX = 1200
_TODO_MAX = 160
_PROSE_LINE_MAX = 200

# The snapshot is text for a model, not XML that anything parses: facts go in as they were written. Only
# the closing tag is guarded (a literal one inside a fact would end the snapshot early for a reader looking
# for it), in a form a person still reads as the tag.
_CLOSING_TAG = "</state_snapshot>"
_CLOSING_TAG_GUARDED = "<\\/state_snapshot>"
# The header of a snapshot written this way; an earlier ctxtool snapshot without it escaped its facts as XML.
VERBATIM_MARK = "facts verbatim"
_SNAPSHOT_RE = re.compile(r"<state_snapshot>(.*?)(?:</state_snapshot>|\Z)", re.DOTALL)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.DOTALL)
_FACTS_BLOCK_RE = re.compile(r"\n?<verbatim_facts>.*?</verbatim_facts>\n?", re.DOTALL)
_TODO_MARK = {"completed": "DONE", "in_progress": "IN PROGRESS", "cancelled": "CANCELLED", "pending": "TODO"}
_GROUP_TITLES = {
    ("artifact_trail", "written"): "written:",
    ("artifact_trail", "edited"): "edited:",
    ("artifact_trail", "carried"): "from before:",
    ("file_system_state", "roots"): "roots ($A/x is x under $A):",
    ("file_system_state", "cwd"): "shell cwd:",
    ("file_system_state", "read"): "read:",
    ("file_system_state", "listed"): "listed/searched:",
    ("file_system_state", "mentioned"): "named by the user:",
    ("file_system_state", "referenced"): "@-attached:",
    ("file_system_state", "carried"): "from before:",
    ("recent_actions", "commands"): "shell commands in order of first run, [latest outcome] unless exit 0:",
    ("recent_actions", "carried"): "earlier:",
    ("recent_actions", "latest"): "latest tool calls:",
    ("key_knowledge", "errors"): "errors (tool: message):",
    ("key_knowledge", "carried"): "from before:",
    ("task_state", "todos"): "todo list:",
    ("task_state", "carried"): "from before:",
    ("task_state", "current"): "current request:",
}
# The summary budget scales with what it replaces: at most this share of the span's tokens (Gemini CLI's own
# estimate of the summarised history), and never less than SMALL_SPAN_BUDGET (a short span's snapshot may be
# a larger share of it: the gemini-cli replay then reports the compression as inflated and writes nothing).
SPAN_SHARE = 0.10
SMALL_SPAN_BUDGET = 1000
# Kinds of items, in the order they are given room (see ``_select``), and their names in the header's
# "left out" note. What the user asked comes first and goes last.
_VERBATIM_KINDS = frozenset(
    {"requests", "paths", "paths_read", "commands", "commands_ok", "errors", "directives", "carried"}
)
_TIERS: tuple[tuple[str, ...], ...] = (
    ("core", "requests"),
    ("errors", "commands", "paths", "directives"),
    ("commands_ok",),
    ("paths_read",),
    ("carried",),
    ("prose",),
)
_LEFT_OUT_NAMES = {
    "requests": "user requests",
    "errors": "errors",
    "commands": "failed commands",
    "commands_ok": "commands that succeeded",
    "paths": "paths changed",
    "paths_read": "paths only read",
    "directives": "directives",
}
_LEFT_OUT_WIDEST = dict.fromkeys(_LEFT_OUT_NAMES.values(), 99999)
# What goes first when rendering overshoots: the reverse of the tiers, a user request last of all.
_RANK = {kind: -n for n, tier in enumerate(_TIERS) for kind in tier} | {"requests": 1}


def snapshot_text(text: str) -> str:
    """Text as it goes into a snapshot: unchanged, but for a literal ``</state_snapshot>`` (guarded)."""
    return text.replace(_CLOSING_TAG, _CLOSING_TAG_GUARDED)


def _clip(text: str, limit: int) -> str:
    return word_clip(normalize_ws(text), limit)


def previous_snapshot(history: Sequence[Mapping[str, Any]]) -> dict[str, list[str]] | None:
    """The sections of the last ``<state_snapshot>`` found in a text part of the history, as unescaped lines
    (bullets and blank lines removed). None when the history has no snapshot."""
    parts = [p for c in history for p in content_parts(c)]
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
    found = next(
        (m[-1] for t in reversed(texts) if "<state_snapshot>" in t and (m := _SNAPSHOT_RE.findall(t))), None
    )
    if found is None:
        return None
    verbatim = VERBATIM_MARK in found[:400]
    body = _COMMENT_RE.sub("", found)
    sections: dict[str, list[str]] = {}
    roots = dict(re.findall(r"^\s*-\s*(\$[A-Z]) = (.+?)\s*$", body, re.MULTILINE))
    for tag in (*SECTIONS, "current_plan"):
        if not (match := re.search(rf"<{tag}>(.*?)</{tag}>", body, re.DOTALL)):
            continue
        lines = []
        for raw in match.group(1).splitlines():
            line = (raw if verbatim else unescape_xml(raw)).strip()
            line = re.sub(r"^(?:[-*•]\s+)", "", line).strip()
            if re.match(r"^\$[A-Z] = ", line):
                continue  # a root legend of an earlier ctxtool snapshot: its paths are expanded below
            if line[:3] in {f"{name}/" for name in roots}:
                line = roots[line[:2]] + line[3:]
            if line:
                lines.append(line)
        sections["task_state" if tag == "current_plan" else tag] = lines
    return sections


@dataclass(frozen=True)
class _Item:
    """One line the snapshot may hold. ``order`` keeps the emitted order stable and chronological."""

    section: str
    group: str
    text: str  # unescaped line text, without the leading "- "
    order: int
    kind: str  # a fact kind, "carried", "core" or "prose"

    @property
    def line(self) -> str:
        if self.text.startswith("$ ") and self.kind in ("commands", "commands_ok", "carried"):
            return snapshot_text(self.text)  # "$ command" needs no bullet
        return f"- {snapshot_text(self.text)}"

    @property
    def cost(self) -> int:
        return len(self.line) + 1


class _Roots:
    """Shortens absolute paths by naming their common directories ``$A``, ``$B``, ``$C``.

    The parent directory of a file always stays in the shortened form (``$A/infra/pi_bot.py``), so the
    ``parent/basename`` of every path remains findable."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.roots: list[tuple[str, str]] = []  # (name, root directory with trailing separator)
        remaining = [p for p in paths if p.startswith(("/", "~/")) or re.match(r"^[A-Za-z]:[\\/]", p)]
        for name in ("$A", "$B", "$C"):
            if (best := self._best_root(remaining)) is None:
                break
            self.roots.append((name, best))
            remaining = [p for p in remaining if not self._under(p, best)]

    @staticmethod
    def _under(path: str, root: str) -> bool:
        rest = path[len(root) :]
        return path.startswith(root) and len(re.split(r"[\\/]", rest)) >= 2

    def _best_root(self, paths: Sequence[str]) -> str | None:
        savings: dict[str, int] = {}
        for path in paths:
            for match in re.finditer(r"[\\/]", path):
                root = path[: match.end()]
                if self._under(path, root):
                    savings[root] = savings.get(root, 0) + len(root) - 3
        best: str | None = None
        best_saving = 0
        for root, saving in sorted(savings.items()):
            net = saving - len(root) - 8
            if net > best_saving or (net == best_saving and best is not None and len(root) > len(best)):
                best, best_saving = root, net
        return best if best_saving >= 40 else None

    def shorten(self, path: str) -> str:
        for name, root in self.roots:
            if self._under(path, root):
                return f"{name}/{path[len(root) :]}"
        return path


class OfflineSummarizer:
    """Writes a ``<state_snapshot>`` from the facts of ``call.history``; deterministic and offline."""

    name = "offline"
    deterministic = True

    def __init__(
        self, token_budget: int | None = None, chars_per_token: int = 4, counts: SpanCounter | None = None
    ) -> None:
        if token_budget is not None and token_budget < MIN_TOKEN_BUDGET:
            raise UsageError(
                f"offline summarizer budget {token_budget} tokens is too small",
                f"Give at least {MIN_TOKEN_BUDGET} tokens.",
            )
        if chars_per_token < 1:
            raise UsageError(f"chars_per_token must be at least 1, not {chars_per_token}", "Use 4.")
        self.token_budget = token_budget
        self.chars_per_token = chars_per_token
        self.counts = counts

    def counting(self, counts: SpanCounter) -> OfflineSummarizer:
        """This summarizer, its header counting the session messages ``counts`` says a history came from."""
        return OfflineSummarizer(self.token_budget, self.chars_per_token, counts)

    def header_counts(self, history: Sequence[Mapping[str, Any]], facts: Facts) -> str:
        """What the snapshot's header says it summarises: ``stats``' turns, requests, prompts and tool calls
        of the messages behind ``history`` when ``counts`` knows them (``compact`` does), else only the
        prompts and tool calls ``history`` itself shows."""
        if self.counts is None:
            return f"{plural(facts.user_prompts, 'prompt')}, {plural(facts.tool_calls, 'tool call')}"
        c = self.counts(history)
        return (
            f"{plural(c.turns, 'turn')}, {plural(c.requests, 'request')}, {plural(c.prompts, 'prompt')}, "
            f"{plural(c.tool_calls, 'tool call')}"
        )

    def budget_tokens(self, history: Sequence[Mapping[str, Any]]) -> int:
        """The fixed budget when one was given, else SPAN_SHARE of the span (SMALL_SPAN_BUDGET at least)."""
        if self.token_budget is not None:
            return self.token_budget
        from ctxtool.compress.gemini_cli.chat_compression import estimate_token_count

        span = estimate_token_count([p for c in history for p in (c.get("parts") or [])])
        return max(SMALL_SPAN_BUDGET, int(span * SPAN_SHARE))

    def generate(self, call: ModelCall) -> str | None:
        """Answer a summary call with a snapshot; answer a probe with the summary it checks, unchanged."""
        return call.previous_summary if call.kind == "probe" else self.summarize(call.history)

    def summarize(self, history: Sequence[Mapping[str, Any]]) -> str:
        facts = extract_facts(history)
        previous = previous_snapshot(history)
        items = _candidate_items(facts, previous, history)
        merged = "; merges the previous snapshot" if previous is not None else ""
        max_chars = self.budget_tokens(history) * self.chars_per_token
        counted = self.header_counts(history, facts)

        def header(left_out: Mapping[str, int]) -> str:
            out = ", ".join(f"{n} {what}" for what, n in left_out.items() if n)
            tail = merged + (f"; left out for the size budget: {out}" if out else "")
            return f"<!-- generated offline by ctxtool, no model, {VERBATIM_MARK}: {counted}{tail} -->"

        room = max_chars - len(_render(header(_LEFT_OUT_WIDEST), []))
        chosen = _select(items, room)
        text = _render(header(_left_out(items, chosen)), chosen)
        while len(text) > max_chars and chosen:  # the estimate overshot: drop the least important item
            victim = min(chosen, key=lambda i: (_RANK[i.kind], -i.cost, -i.order))
            chosen = [i for i in chosen if i is not victim]
            text = _render(header(_left_out(items, chosen)), chosen)
        return text


def _add(out: list[_Item], section: str, group: str, text: str, kind: str) -> None:
    """Gather a line the snapshot may hold, in emitted order (an item's ``order`` is its position)."""
    # Facts stay as written (a command's line breaks and spacing are part of it); prose is tidied.
    text = text.strip() if kind in _VERBATIM_KINDS else normalize_ws(text)
    if text:
        out.append(_Item(section, group, text, len(out), kind))


def _candidate_items(
    facts: Facts, previous: dict[str, list[str]] | None, history: Sequence[Mapping[str, Any]]
) -> list[_Item]:
    """Every line the snapshot may hold, section by section: the new facts, and what the previous snapshot
    carries that they do not repeat."""
    out: list[_Item] = []
    prev = previous or {}
    _request_items(out, facts, prev)
    _knowledge_items(out, facts, prev)
    _path_items(out, facts, prev)
    _action_items(out, facts, prev)
    _task_items(out, facts, prev, history)
    return out


def _request_items(out: list[_Item], facts: Facts, prev: Mapping[str, list[str]]) -> None:
    """What the user asked: the requests, the overall goal (the previous one stays) and the constraints."""
    for request in facts.requests:
        _add(out, "user_requests", "", request, "requests")
    if goal := " ".join(prev.get("overall_goal", [])) or facts.goal:
        head = _clip(goal, _GOAL_HEAD)
        _add(out, "overall_goal", "", head, "core")
        if len(normalize_ws(goal)) > _GOAL_HEAD:  # the rest, from the word the head left out
            rest = normalize_ws(goal)[len(head) - 1 :]
            _add(out, "overall_goal", "", "(continued) " + _clip(rest, _GOAL_MAX - _GOAL_HEAD), "prose")

    carried = prev.get("active_constraints", [])
    for line in carried:
        _add(out, "active_constraints", "", line, "carried")
    seen = {line.casefold() for line in carried}
    for directive in facts.directives:
        if directive.casefold() not in seen:
            _add(out, "active_constraints", "", directive, "directives")


def _knowledge_items(out: list[_Item], facts: Facts, prev: Mapping[str, list[str]]) -> None:
    """The errors met, then the previous snapshot's key knowledge."""
    for error in facts.errors:
        about = ""
        if error.subject and error.subject not in error.message:
            about = f" ({word_clip(error.subject, 120)})"
        _add(out, "key_knowledge", "errors", f"{error.tool}{about}: {error.message}", "errors")
    for line in prev.get("key_knowledge", []):
        if not line.endswith(":"):
            _add(out, "key_knowledge", "carried", line, "carried")


def _path_items(out: list[_Item], facts: Facts, prev: Mapping[str, list[str]]) -> None:
    """The roots legend, the paths touched, and the previous snapshot's paths not touched again."""
    roots = _Roots(facts.paths)
    for name, root in roots.roots:
        _add(out, "file_system_state", "roots", f"{name} = {root}", "core")
    for fact in facts.path_facts:
        section = "artifact_trail" if fact.modified else "file_system_state"
        kind = "paths" if fact.modified or fact.how not in ("read", "listed") else "paths_read"
        _add(out, section, fact.how, roots.shorten(fact.path), kind)
    new_paths = {roots.shorten(p).casefold() for p in facts.paths} | {p.casefold() for p in facts.paths}
    for section in ("artifact_trail", "file_system_state"):
        for line in prev.get(section, []):
            if line.endswith(":") or line.casefold() in new_paths:
                continue
            _add(out, section, "carried", roots.shorten(line), "carried")


def _action_items(out: list[_Item], facts: Facts, prev: Mapping[str, list[str]]) -> None:
    """Shell commands with their outcome, earlier commands and actions carried over, the latest tool calls."""
    for command in facts.commands:
        ok = command.outcome == "exit 0"
        line = f"$ {command.command}" + ("" if ok else f" [{command.outcome or 'no result'}]")
        _add(out, "recent_actions", "commands", line, "commands_ok" if ok else "commands")
    new_commands = {f"$ {c.command}" for c in facts.commands}
    for line in prev.get("recent_actions", []):
        if line.startswith("$ ") and line.split(" [")[0] not in new_commands:
            _add(out, "recent_actions", "carried", line, "carried")  # an earlier command, as it was quoted
    for line in prev.get("recent_actions", [])[-12:]:
        if not line.endswith(":") and not line.startswith("$ "):
            _add(out, "recent_actions", "carried", line, "prose")
    for action in facts.latest_actions:
        _add(out, "recent_actions", "latest", _clip(action, _PROSE_LINE_MAX), "prose")


def _task_items(
    out: list[_Item], facts: Facts, prev: Mapping[str, list[str]], history: Sequence[Mapping[str, Any]]
) -> None:
    """The todo list (else the previous snapshot's task state) and the current request."""
    for todo in facts.todos:
        mark = _TODO_MARK.get(todo.status, todo.status.upper())
        _add(out, "task_state", "todos", f"[{mark}] {_clip(todo.description, _TODO_MAX)}", "core")
    if not facts.todos:
        for line in prev.get("task_state", []):
            if not line.endswith(":"):
                _add(out, "task_state", "carried", line, "carried")
    if prompts := list(real_user_prompts(history)):
        _add(out, "task_state", "current", _clip(prompts[-1][1], _PROSE_LINE_MAX), "prose")


def _select(items: Sequence[_Item], budget: int) -> list[_Item]:
    """Choose the items to emit within ``budget`` characters.

    Tier by tier (``_TIERS``): user requests and the core lines first, then errors (newest first), failed
    commands, changed paths and directives, then the commands that succeeded, then the paths only read,
    then lines carried from an earlier snapshot, then prose. So when the facts do not fit, what goes is, in
    order: paths only read, commands that succeeded, older errors; user requests go last of all."""
    chosen: list[_Item] = []
    used = 0
    headers: set[tuple[str, str]] = set()  # the groups whose title is already counted
    for tier in _TIERS:
        pool = [i for i in items if i.kind in tier]
        # Errors: the newest first, so the older ones are what a tight budget leaves out.
        pool.sort(key=lambda i: -i.order if i.kind == "errors" else i.order)
        for item in pool:
            key = (item.section, item.group)
            title = _GROUP_TITLES.get(key, "")
            cost = item.cost + (len(title) + 1 if title and key not in headers else 0)
            if used + cost > budget:
                continue
            used += cost
            headers.add(key)
            chosen.append(item)
    return sorted(chosen, key=lambda i: i.order)


def _left_out(items: Sequence[_Item], chosen: Sequence[_Item]) -> dict[str, int]:
    """How many facts of each kind the budget left out (for the snapshot's own header)."""
    kept = {id(i) for i in chosen}
    return Counter(n for i in items if (n := _LEFT_OUT_NAMES.get(i.kind)) is not None and id(i) not in kept)


def _render(header: str, chosen: Sequence[_Item]) -> str:
    lines = ["<state_snapshot>", header]
    for section in SECTIONS:
        items = [i for i in chosen if i.section == section]
        lines.append(f"<{section}>")
        if section == "overall_goal":
            lines.extend(snapshot_text(i.text) for i in items)
        else:  # the groups with a title in their order there, then any other
            present = list(dict.fromkeys(i.group for i in items))
            titled = [g for (sec, g) in _GROUP_TITLES if sec == section and g in present]
            for group in titled + [g for g in present if g not in titled]:
                if title := _GROUP_TITLES.get((section, group), ""):
                    lines.append(title)
                lines.extend(i.line for i in items if i.group == group)
        lines.append(f"</{section}>")
    lines.append("</state_snapshot>")
    return "\n".join(lines)


def with_facts(summary: str, history: Sequence[Mapping[str, Any]], offline: OfflineSummarizer) -> str:
    """``summary`` (a model's), then the deterministic facts of ``history`` in a ``<verbatim_facts>`` block
    inside its ``<state_snapshot>``: what a paraphrasing model might lose (requests, commands, errors,
    paths) stays verbatim. A block the model echoed back (the probe sees the first answer) is replaced."""
    facts = offline.summarize(history)
    body = facts.removeprefix("<state_snapshot>\n").removesuffix("\n</state_snapshot>")
    block = f"<verbatim_facts>\n{body}\n</verbatim_facts>"
    text = _FACTS_BLOCK_RE.sub("\n", summary).rstrip()
    if text.endswith(_CLOSING_TAG):
        return f"{text[: -len(_CLOSING_TAG)].rstrip()}\n{block}\n{_CLOSING_TAG}"
    return f"{text}\n{block}"


class KeepFacts:
    """``--summarizer gemini --keep-facts``: each answer of the model, with the deterministic facts list of
    the summarised span appended (``with_facts``), so a summary that paraphrases cannot lose them."""

    deterministic = False

    def __init__(self, inner: Summarizer, offline: OfflineSummarizer | None = None) -> None:
        self.inner = inner
        self.offline = offline or OfflineSummarizer()
        self.name = f"{inner.name}+facts"

    def counting(self, counts: SpanCounter) -> KeepFacts:
        """See ``OfflineSummarizer.counting``: the facts block's header."""
        return KeepFacts(self.inner, self.offline.counting(counts))

    def generate(self, call: ModelCall) -> str | None:
        answer = self.inner.generate(call)
        if answer is None or not answer.strip():
            return answer  # an empty summary stays empty: the replay reports it as Gemini CLI would
        return with_facts(answer, call.history, self.offline)

    def close(self) -> None:
        if callable(close := getattr(self.inner, "close", None)):
            close()
