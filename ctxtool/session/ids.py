"""Message ids: what a session without them needs before ctxtool writes a copy Gemini CLI resumes.

Gemini CLI keys every message by its ``id`` and always writes one, but converters, older tools and hand
edits may not, and the two eras fare differently in Gemini CLI 0.61.0 (chatRecordingService.ts):

* a legacy ``.json`` document is loaded whole (``parseLegacyRecordFallback``), id-less messages included;
  the ``.jsonl`` a resume then writes carries them on without an id (``initialize``), and the next load
  drops them. ``with_unique_ids`` gives every message that lacks a unique id one derived from the session
  id and its position, so the same input gets the same ids.
* a ``.jsonl`` line is a message only when its ``id`` is a string (``loadConversationRecord``,
  ``isMessageRecord``); ``idless_lines`` finds the id-less ones that would stand in the resumed history.

Must not: print, or import ``ctxtool.compress``, frames or the CLI.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ctxtool.session.read import Event, Replayed, classify_record, loads_line, split_lines
from ctxtool.session.schema import MessageRecord
from ctxtool.session.utf8 import read_as_node

# The namespace of the ids ctxtool derives (uuid5): a fixed value, so an id depends only on its inputs.
_NAMESPACE = uuid.UUID("2811bad0-d3e2-4358-8ba9-b140a1401c19")


def derived_id(session_id: str | None, position: int, attempt: int = 0) -> str:
    """The id ctxtool gives the message at ``position`` (0-based) of session ``session_id``: a UUID, as
    Gemini CLI's own ids are, that depends on nothing else. ``attempt`` > 0 draws another one (when the
    first is already a message's id)."""
    name = f"{session_id or ''}/{position}" + (f"/{attempt}" if attempt else "")
    return str(uuid.uuid5(_NAMESPACE, name))


@dataclass(frozen=True)
class IdFix:
    """``messages`` with a unique string id each; ``missing`` and ``repeated`` are the positions that got a
    derived id because they had none (or not a string) or repeated an earlier message's id."""

    messages: list[MessageRecord]
    missing: list[int]
    repeated: list[int]

    @property
    def changed(self) -> bool:
        return bool(self.missing or self.repeated)

    def describe(self) -> str:
        """One sentence for a report: what was given an id, and why."""
        from ctxtool.common.wording import plural

        what = []
        if self.missing:
            what.append(f"{plural(len(self.missing), 'message')} had no id")
        if self.repeated:
            what.append(f"{len(self.repeated)} repeated an earlier message's id")
        first = min(self.missing + self.repeated) + 1
        return (
            f"{' and '.join(what)}: each got an id derived from the session id and its position (the first "
            f"is message {first} of the session), written into the output, as Gemini CLI keeps only messages "
            "with a unique id"
        )


def with_unique_ids(messages: Sequence[Mapping[str, Any]], session_id: str | None) -> IdFix:
    """``messages`` where each has a unique string id: a message whose id is missing, not a string, or the
    id of an earlier message gets ``derived_id(session_id, position)`` (another attempt if that one is
    taken). Messages that needed nothing are the same objects; the others are copies with ``id`` first."""
    taken = {m["id"] for m in messages if isinstance(m.get("id"), str)}
    seen: set[str] = set()
    out: list[MessageRecord] = []
    missing: list[int] = []
    repeated: list[int] = []
    for position, message in enumerate(messages):
        mid = message.get("id")
        if isinstance(mid, str) and mid not in seen:
            seen.add(mid)
            out.append(cast(MessageRecord, message))
            continue
        (repeated if isinstance(mid, str) else missing).append(position)
        attempt = 0
        new = derived_id(session_id, position)
        while new in taken:
            attempt += 1
            new = derived_id(session_id, position, attempt)
        taken.add(new)
        seen.add(new)
        out.append(cast(MessageRecord, {"id": new, **{k: v for k, v in message.items() if k != "id"}}))
    return IdFix(out, missing, repeated)


def _is_idless_message(record: Any) -> bool:
    """A message record (it has a string ``type``) that Gemini CLI skips for want of a string ``id``."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("type"), str)
        and not isinstance(record.get("id"), str)
    )


def idless_lines(data: bytes) -> list[int]:
    """The line numbers (1-based) of the message records of a ``.jsonl`` session that have no string ``id``
    and would stand in the history Gemini CLI resumes if they had one, replayed by ``read.Replayed`` (a
    record a later checkpoint or rewind removed does not count). A checkpoint's entry is reported by the
    checkpoint's line."""
    lines = split_lines(read_as_node(data))
    # The replay hands its classifier every line that is not blank, in order: their numbers, in that order.
    numbers = iter([n for n, line in enumerate(lines, 1) if line and not line.isspace()])

    def classify(line: bytes) -> Event:
        number = next(numbers)
        record = loads_line(line)
        kind, a, b = classify_record(record)
        if kind == "unknown" and _is_idless_message(record):
            return "message", _IdLess(), number  # a key of its own: never upserted, dropped like a message
        if isinstance(b, list):  # a checkpoint's (or metadata line's) history: its id-less entries too
            entries = record["$set"]["messages"] if kind == "set" else record["messages"]
            b = [
                (entry["id"], None) if isinstance(entry.get("id"), str) else (_IdLess(), number)
                for entry in entries
                if isinstance(entry, dict) and (isinstance(entry.get("id"), str) or _is_idless_message(entry))
            ]
        elif kind == "message":
            b = None
        return kind, a, b

    replayed: Replayed[int | None] = Replayed()
    replayed.feed(lines, classify, lambda _old, _new: None)
    return [n for n in replayed.live.values() if n is not None]


class _IdLess:
    """The key of one id-less message in the replay: equal only to itself."""
