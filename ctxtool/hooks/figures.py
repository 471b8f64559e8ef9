"""The guard's figures: what a file, a session and a day billed, and a file's running tally, which the records
Gemini CLI appends later extend without reading the file again.

Owns: ``Tally`` and ``Spend`` (what the guard compares with its budgets), ``tally_rows``, ``Running`` and
``extend`` (a ``.jsonl`` file's running tally and the records appended since; see each) and the small JSON
files that keep them between calls.

The figures are those of ``ctxtool stats``, by the rules it counts them by (``ctxtool.measure.usage``): a
request is a ``gemini`` message with token counts (every one recorded: the billed view); one recorded without
a model takes the model of the request before it in the session, else after (``usage.filled``); a session's
cost sums its requests of known price (None when it has requests and none is priced: ``usage.known_cost``);
its context share is its largest live prompt over its models' window (``usage.request_figures``,
``usage.context_share``); a day is a UTC day. What this module adds is the running part: figures of a file's
older rows kept, and those of files and sessions added (``Tally.add``, ``spend_of``). ``tests/test_guard.py``
holds them to ``ctxtool stats``.

Runs before every model call, so it imports only ``json``, ``os``, ``ctxtool.measure.tokens`` and
``ctxtool.measure.usage`` (``datetime`` when a request's day is needed): no dataclasses, pathlib, typing,
msgspec, orjson or SQLite, each of which costs more to import than the rest of a warm call. Prices come in as
plain tiers (``rates_of``), priced by ``usage.cost`` as ``ctxtool.measure.pricing.cost_of`` prices them
(``tests/test_guard.py``).
"""

from __future__ import annotations

import json
import os

from ctxtool.common.digest import blake2b
from ctxtool.measure import usage
from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT, request_total, token_count
from ctxtool.session.stamp import MAX_RECORD_BYTES

TYPE_CHECKING = False  # (mypy reads any name TYPE_CHECKING as typing's)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    Tiers = list[list[float]] | None  # ``usage.Tiers`` as JSON keeps them
    Transcript = str | os.PathLike[str] | None  # a hook event's ``transcript_path``
    Rates = Mapping[str, Tiers]

# Bump when what the guard's state (``ctxtool.hooks.ledger``) or a running tally holds changes meaning.
STATE_VERSION = 2
# A message row, as the tally reads it: (id, type, timestamp, model, input, cached, output, thoughts, tool,
# total, live). The token counts are None but for a ``gemini`` message with ``tokens`` (a request).
ID, TYPE, TIME, MODEL, INPUT, CACHED, OUTPUT, THOUGHTS, TOOL, TOTAL, LIVE = range(11)
# A request row's token counts in the order ``usage.request_figures`` takes them (``tokens.TOKEN_KEYS``).
_TOKEN_FIELDS = (INPUT, OUTPUT, CACHED, THOUGHTS, TOOL, TOTAL)
# A running tally keeps this many of a file's last rows whole (a record appended later may update one of them:
# Gemini CLI records a reply, then again with its tokens and tool calls); past twice as many, the older ones
# are frozen into figures. An update of a frozen row is left to a full read.
KEEP_ROWS = 64
# A file's first and last bytes before the point a running tally reached, fingerprinted as
# ``ctxtool.session.columns`` does (``_resume``), to tell a file that grew from one that was rewritten.
FINGERPRINT_BYTES = 4096


class Tally:
    """Billed figures of a file, a session or a set of sessions."""

    __slots__ = ("cost", "days", "limit", "peak_live", "priced", "requests", "total", "unknown_models",
                 "unpriced")  # fmt: skip

    def __init__(
        self,
        requests: int = 0,
        total: int = 0,
        cost: float = 0.0,  # of the requests of known price
        priced: int = 0,
        unpriced: int = 0,  # requests whose model has no known price
        peak_live: int | None = None,  # the largest prompt of a live request
        limit: int = 0,  # the largest context window of the models used
        days: dict[str, list[float]] | None = None,  # UTC day -> [cost, priced, unpriced]
        unknown_models: list[str] | None = None,
    ) -> None:
        self.requests, self.total, self.cost = requests, total, cost
        self.priced, self.unpriced, self.peak_live, self.limit = priced, unpriced, peak_live, limit
        self.days: dict[str, list[float]] = {} if days is None else days
        self.unknown_models: list[str] = [] if unknown_models is None else unknown_models

    @property
    def known_cost(self) -> float | None:
        """The cost as ``stats`` shows it: None only when there are requests and none has a price."""
        return usage.known_sum(self.cost, self.priced, self.unpriced)

    @property
    def context_share(self) -> float | None:
        return usage.context_share(self.peak_live, self.limit or DEFAULT_TOKEN_LIMIT)

    def day_cost(self, day: str) -> float | None:
        cost, priced, unpriced = self.days.get(day, (0.0, 0, 0))
        return usage.known_sum(cost, int(priced), int(unpriced))

    def add(self, other: Tally, *, context: bool = False) -> None:
        """Add ``other``'s billed figures; its context only with ``context`` (a subagent's does not count)."""
        for name in ("requests", "total", "cost", "priced", "unpriced"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for day, slot in other.days.items():
            self.days[day] = [a + b for a, b in zip(self.days.get(day, (0.0, 0, 0)), slot, strict=True)]
        if other.unknown_models:
            self.unknown_models = sorted({*self.unknown_models, *other.unknown_models})
        if context:
            if other.peak_live is not None:
                self.peak_live = max(self.peak_live or 0, other.peak_live)
            self.limit = max(self.limit, other.limit)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Tally:
        days = {day: list(slot) for day, slot in doc["days"].items()}
        return cls(**{**doc, "days": days, "unknown_models": list(doc["unknown_models"])})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tally) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return "Tally(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"


class Spend:
    """What the guard compares with its budgets."""

    __slots__ = ("day", "files_read", "files_resumed", "from_frames", "session", "session_file", "today")

    def __init__(
        self,
        session: Tally,  # the session of the transcript, its subagents included
        today: Tally,  # every session's requests of ``day``
        day: str,
        session_file: str | None,  # the file the transcript belongs to (None: not found under the data root)
        files_read: int = 0,  # files read (or resumed) by this call; the rest came from the state
        files_resumed: int = 0,  # of those, grown JSONL files read from where they ended (only the new bytes)
        from_frames: int = 0,  # sessions summed by the frames (several files with requests)
    ) -> None:
        self.session, self.today, self.day, self.session_file = session, today, day, session_file
        self.files_read, self.files_resumed, self.from_frames = files_read, files_resumed, from_frames

    @property
    def day_cost(self) -> float | None:
        return self.today.day_cost(self.day)


def rates_of(table: Any) -> dict[str, Tiers]:
    """A ``pricing.PriceTable``'s rates as plain tiers, unknown models as None (what the state keeps)."""
    out: dict[str, Tiers] = dict.fromkeys(table.unknown)
    for model, rates in table.rates.items():
        out[model] = [[t.above, t.per_request, t.input, t.cached, t.output] for t in rates.tiers]
    return out


def models_of(rows: Iterable[Sequence[Any]]) -> set[str]:
    """The models a tally of ``rows`` needs a price for."""
    return {r[MODEL] for r in rows if r[MODEL] and r[TYPE] == "gemini" and r[INPUT] is not None}


def tally_rows(rows: Sequence[Sequence[Any]], rates: Rates, before: str | None = None) -> Tally:
    """The billed figures of one session's message rows (in the order the file recorded them), as the stats
    engine counts them (``ctxtool.measure.usage``). ``before``: the model of the last request before these
    rows (their file's frozen part), if any."""
    requests = [r for r in rows if r[TYPE] == "gemini" and r[INPUT] is not None]
    out = Tally()
    if not requests:
        return out  # (no context window either: a file's frozen part without requests adds none)
    # ``before`` stands first, as the request before these: a request recorded without a model takes it.
    models = usage.filled([before, *(r[MODEL] for r in requests)])[1:]
    tokens = [[r[i] for r in requests] for i in _TOKEN_FIELDS]
    row = usage.request_figures(models, tokens, [r[LIVE] for r in requests])
    out.requests, out.total = row["requests"], row["total"]
    out.peak_live, out.limit = row["peak_context"], row["context_limit"]
    costs = [
        usage.cost(rates[model] if model else None, r[INPUT], r[CACHED], r[OUTPUT], r[THOUGHTS], r[TOOL])
        for r, model in zip(requests, models, strict=True)
    ]
    known, out.unpriced = usage.known_cost(costs)
    out.cost, out.priced = known or 0.0, len(costs) - out.unpriced
    by_day: dict[str, list[float | None]] = {}
    for r, paid in zip(requests, costs, strict=True):
        day = _day(r[TIME])
        if day is not None:
            by_day.setdefault(day, []).append(paid)
    for day, paid_that_day in by_day.items():
        known, unpriced = usage.known_cost(paid_that_day)
        out.days[day] = [known or 0.0, len(paid_that_day) - unpriced, unpriced]
    out.unknown_models = sorted(
        {model or "(no model)" for model, paid in zip(models, costs, strict=True) if paid is None}
    )
    return out


def _day(timestamp: str | None) -> str | None:
    """The UTC day of a recorded time (``frames.model.parse_times``: ISO 8601, naive meaning UTC)."""
    if not timestamp:
        return None
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    return (when if when.tzinfo is None else when.astimezone(UTC)).date().isoformat()


def today(now: Any = None) -> str:
    """The UTC day of ``now`` (a datetime; default: now)."""
    if now is None:
        import time

        return time.strftime("%Y-%m-%d", time.gmtime())
    from datetime import UTC

    return str(now.astimezone(UTC).date().isoformat())


def spend_of(state: Mapping[str, Any], transcript: Transcript, read: int, resumed: int, summed: int) -> Spend:
    """The spend a state holds: the session of ``transcript`` with its subagents, and every session's requests
    of the state's day (a session's figures are its file's, or its files' summed by the frames). ``read``,
    ``resumed``, ``summed``: ``Spend``'s counts of this call."""
    files, sessions, day = state["files"], state["sessions"], state["day"]
    target = os.path.abspath(transcript) if transcript else None
    key = files[target]["session"] if target is not None and target in files else None
    tallies = {
        k: files[s["file"]]["tally"] if s["file"] is not None else s["tally"] for k, s in sessions.items()
    }
    roots = {k: s["root"] for k, s in sessions.items()}
    session = Tally()
    if key is not None:
        root = roots.get(key, key)
        for k, doc in tallies.items():
            if roots[k] == root:
                session.add(Tally.from_dict(doc), context=k == root)
    today = Tally()
    for doc in tallies.values():
        slot = doc["days"].get(day)
        if slot is not None:
            today.add(Tally(days={day: list(slot)}))
    return Spend(session, today, day, target if key is not None else None, read, resumed, summed)


class Running:
    """A ``.jsonl`` file's tally as of ``offset`` (the end of its last complete line when read): the figures
    of its older rows (``frozen``, ``before`` the model of their last request, ``ids`` their message ids) and
    its last rows whole (``rows``), which a record appended later may update. ``key``: the code and the day
    its figures are of (prices are dated); ``stamp``: the file's size and modification time when read."""

    __slots__ = ("before", "frozen", "head", "ids", "key", "offset", "path", "rows", "stamp", "tail")

    def __init__(self, path: str, key: str, stamp: list[int], offset: int, head: str, tail: str) -> None:
        self.path, self.key, self.stamp = path, key, stamp
        self.offset, self.head, self.tail = offset, head, tail
        self.frozen = Tally()
        self.before: str | None = None
        self.ids: list[str] = []
        self.rows: list[list[Any]] = []

    @property
    def messages(self) -> int:
        return len(self.ids) + len(self.rows)

    def tally(self, rates: Rates) -> Tally:
        out = Tally.from_dict(self.frozen.as_dict())
        out.add(tally_rows(self.rows, rates, self.before), context=True)
        return out

    def freeze(self, rates: Rates) -> None:
        """Fold all but the last ``KEEP_ROWS`` rows into ``frozen`` once there are twice as many. Rows whose
        requests would take their model from a later row (none of them names one) stay whole."""
        if len(self.rows) <= 2 * KEEP_ROWS:
            return
        cut = len(self.rows) - KEEP_ROWS
        older = self.rows[:cut]
        asked = [r for r in older if r[TYPE] == "gemini" and r[INPUT] is not None]
        named = [r[MODEL] for r in asked if r[MODEL] is not None]
        if asked and self.before is None and not named:
            return
        self.frozen.add(tally_rows(older, rates, self.before), context=True)
        self.before = named[-1] if named else self.before
        self.ids.extend(r[ID] for r in older)
        self.rows = self.rows[cut:]

    def to_doc(self) -> dict[str, Any]:
        doc = {name: getattr(self, name) for name in self.__slots__}
        doc["frozen"] = self.frozen.as_dict()
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Running:
        running = cls(doc["path"], doc["key"], doc["stamp"], doc["offset"], doc["head"], doc["tail"])
        running.frozen = Tally.from_dict(doc["frozen"])
        running.before, running.ids, running.rows = doc["before"], doc["ids"], doc["rows"]
        return running


def extend(running: Running, data: bytes, rates: Rates) -> bool:
    """Apply the records of ``data`` (the lines appended after ``running.offset``, ending with a newline)
    as ``Replayed.feed`` applies them to the billed view: a new message is added, live; a repeated id updates
    its message as ``columns._carry_tokens`` does. False (``running`` is then spoiled) when only a full read
    of the file can say: a ``$rewindTo``, a ``$set`` of messages, session id or kind, a metadata line, an
    update of a frozen message, a line stdlib json might read otherwise than ctxtool's reader (``_records``),
    or a request of a model ``rates`` has no word on."""
    records = _records(data)
    if records is None:
        return False
    frozen = set(running.ids)
    where = {row[ID]: i for i, row in enumerate(running.rows)}
    for rec in records:
        if "$rewindTo" in rec:
            return False
        if "$set" in rec:
            patch = rec["$set"]
            if not isinstance(patch, dict) or not patch.keys().isdisjoint(("messages", "sessionId", "kind")):
                return False
            continue
        mid = rec.get("id")
        if not isinstance(mid, str):
            if "sessionId" in rec:
                return False  # a metadata line (it may hold messages)
            continue  # an unknown record: no message
        if mid in frozen:
            return False
        row = _row(mid, rec)
        if row[MODEL] and row[TYPE] == "gemini" and row[INPUT] is not None and row[MODEL] not in rates:
            return False
        i = where.get(mid)
        if i is None:
            where[mid] = len(running.rows)
            running.rows.append(row)
        else:
            running.rows[i] = _carried(running.rows[i], row)
    running.offset += len(data)
    return True


def _row(mid: str, rec: Mapping[str, Any]) -> list[Any]:
    """The tally's row of a message record, as ``columns._row`` makes it from what its typed decoder accepts
    and ``columns._lenient`` coerces: a field of another type reads as missing, a token count that is not an
    int as ``token_count`` reads it."""
    kind, when, model = rec.get("type"), rec.get("timestamp"), rec.get("model")
    kind = kind if isinstance(kind, str) and kind else "unknown"
    when = when if isinstance(when, str) else None
    model = model if isinstance(model, str) else None
    tokens = rec.get("tokens")
    if kind != "gemini" or not isinstance(tokens, dict):
        return [mid, kind, when, model, None, None, None, None, None, None, True]
    raw = [tokens.get(k) for k in ("input", "cached", "output", "thoughts", "tool", "total")]
    counts = [v if v is None or type(v) is int else token_count(v) for v in raw]
    prompt, cached, output, thoughts, tool, total = (c or 0 for c in counts)
    total = request_total(counts[5], prompt, output, thoughts, tool)
    return [mid, kind, when, model, prompt, cached, output, thoughts, tool, total, True]


def _carried(old: list[Any], new: list[Any]) -> list[Any]:
    """``columns._carry_tokens`` on the tally's fields: the message keeps the time of its first record, and
    the tokens (and, unless the new record names one, the model) of an earlier record when the new one has
    none. Recorded again, it is live again (``Replayed.feed``)."""
    when = old[TIME] if old[TIME] is not None else new[TIME]
    if new[INPUT] is not None or old[INPUT] is None:
        return [new[ID], new[TYPE], when, *new[MODEL:LIVE], True]
    model = new[MODEL] if new[MODEL] is not None else old[MODEL]
    return [new[ID], new[TYPE], when, model, *old[INPUT:LIVE], True]


def _records(data: bytes) -> list[dict[str, Any]] | None:
    """The JSON objects of ``data``'s lines (blank lines and lines of other JSON values skipped), or None when
    a line might read otherwise in ``columns`` (msgspec, then Node-like orjson): not UTF-8, not JSON to
    stdlib json, an escaped surrogate, NaN or Infinity, a number out of float or 64-bit range, a repeated
    key."""
    if not data.endswith(b"\n") or b"\\ud" in data or b"\\uD" in data:
        return None
    out = []
    for line in data.split(b"\n"):
        if len(line) > MAX_RECORD_BYTES:
            return None  # a broken line to ctxtool's reader, which the full tally reads in bounded memory
        if not line.strip(b" \t\r\x0b\x0c"):
            continue  # blank (``Replayed.feed``: whitespace bytes only)
        try:
            rec = _DECODER.decode(line.decode("utf-8"))
        except (ValueError, RecursionError):
            return None
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _refuse(text: str) -> Any:
    raise ValueError(text)


def _int(text: str) -> int:
    if len(text) > 18:  # beyond what msgspec and orjson read as a 64-bit integer (or near it): not sure
        raise ValueError(text)
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a repeated key")
    return out


_DECODER = json.JSONDecoder(
    parse_constant=_refuse, parse_int=_int, parse_float=_float, object_pairs_hook=_object
)


def digest(data: bytes) -> str:
    """A fingerprint of a file's bytes, as ``columns._digest`` makes it (the index's are compared with it)."""
    return blake2b(data, digest_size=16).hexdigest()


def transcript_root(transcript: Transcript) -> str | None:
    """The data root holding ``transcript`` (``<root>/<project>/chats/…``), or None."""
    if not transcript:
        return None
    up = os.path.dirname(os.path.abspath(transcript))
    while up != os.path.dirname(up):
        if os.path.basename(up) == "chats":
            return os.path.dirname(os.path.dirname(up))
        up = os.path.dirname(up)
    return None


def state_key(transcript: Transcript, roots: Sequence[str | os.PathLike[str]] | None) -> str:
    """What names a state: the roots given, else what the data roots are found from (the transcript's root,
    ``GEMINI_CLI_HOME`` and the home folder)."""
    if roots is not None:
        return "\n".join(["roots", *sorted(os.path.abspath(r) for r in roots)])
    home = os.environ.get("GEMINI_CLI_HOME", "")
    return "\n".join(["found", transcript_root(transcript) or "", home, os.path.expanduser("~")])


def figures_key(day: str) -> str:
    """What the figures of a state or a running tally depend on besides the files: the code and the day."""
    from ctxtool.session.stamp import STAMP

    return f"{STATE_VERSION}/{STAMP}/{day}"


def state_file(cache: str, key: str) -> str:
    return os.path.join(cache, "guard", blake2b(key.encode(), digest_size=12).hexdigest() + ".json")


def running_file(cache: str, path: str) -> str:
    """Where a file's running tally is kept (one per session file, whatever state refers to it)."""
    return os.path.join(cache, "guard", "files", blake2b(path.encode(), digest_size=12).hexdigest() + ".json")


def read_json(path: str) -> Any:
    """A JSON file's document, or None when it is missing or unreadable."""
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read())
    except (OSError, ValueError, RecursionError):
        return None


def write_json(path: str, doc: Any) -> None:
    """Replace ``path`` atomically, unsynced: a cache (a lost one is rebuilt), and an fsync before every model
    call would cost more than the rest of a warm call (as ``loading._save``)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
        os.replace(tmp, path)
    except OSError:
        return  # a read-only cache costs speed, never an answer
