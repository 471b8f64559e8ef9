"""The usage engine: what each session's files measure, in plain Python over their columns.

Every figure ctxtool reports comes from here and from ``ctxtool.frames.views``. Each file is measured in
the process that read it (``count_and_price``) and the measure is kept in the index beside it
(``keep_measures``), so a later run measures only what changed. Costs are summed exactly (``math.fsum``).
The polars derivation it replaced is the oracle of the tests (``tests/oracle``).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from ctxtool.common.digest import blake2b
from ctxtool.frames.grouping import group_sessions, link_parents, parent_ref_of
from ctxtool.frames.reading import Problem, discovery_problems
from ctxtool.frames.shape import COMPOSITION_COLUMNS, REPORT_COLUMNS
from ctxtool.measure.tokens import cache_ratio, describe_total_mismatches
from ctxtool.measure.usage import filled as _filled
from ctxtool.measure.usage import known_cost, known_sum, request_figures
from ctxtool.session.schema import TOKEN_KEYS as TOKEN_COLUMNS
from ctxtool.session.stamp import MESSAGE_COLUMNS

if TYPE_CHECKING:
    from ctxtool.measure.pricing import PriceTable
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.discover import Discovery
    from ctxtool.session.index import FileIndex

    _Rows = Callable[[list[FileColumns]], object] | None  # (``tally``'s ``rows``)

# The reports this module makes; the others (turn, request, --top, filters, --live) need the frames.
BY = ("session", "model", "project", "day", "week", "month", "user", "machine")
HIDDEN_CALLS_PER_COMPRESSION = 2  # = frames.sessions.HIDDEN_CALLS_PER_COMPRESSION (a test holds them equal)


_I = {name: i for i, name in enumerate(MESSAGE_COLUMNS)}
_STRINGS = tuple(_I[c] for c in ("message_id", "type", "timestamp", "model", "preview"))
_BOOLS = tuple(_I[c] for c in ("live", "is_prompt", "is_command", "is_snapshot", "compression_info"))
_ID, _TYPE, _TIME, _LIVE, _CHARS = _I["message_id"], _I["type"], _I["timestamp"], _I["live"], _I["text_chars"]
_PROMPT, _SNAP, _INFO, _MODEL = _I["is_prompt"], _I["is_snapshot"], _I["compression_info"], _I["model"]
_CALLS, _ERRORS, _INPUT = _I["tool_calls"], _I["tool_errors"], _I["input"]
_TOKENS = tuple(_I[c] for c in TOKEN_COLUMNS)
_HIST = tuple(_I[c] for c in ("hist_prompts", "hist_model", "hist_tool_io"))
_LOW, _HIGH = -(2**63), 2**63 - 1

# How Gemini CLI writes every time (JavaScript's Date.toISOString()): times of this shape sort as text, so
# only a session's first and last are parsed. A session with a time in any other shape has all its times
# written again in one shape that also sorts (``canonical_times``).
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z")
_CANONICAL = r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{6})Z"
_OTHER = (
    r"\s*(\d{4})-(\d\d)-(\d\d)(?:T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?"
    r"| (\d\d):(\d\d):(\d\d)(?:\.(\d+))?)"
)  # (compiled when first needed, ``re``'s cache: nearly every run meets Gemini CLI's shape alone)


def parse_time(text: str | None) -> datetime | None:
    """A time in UTC (no zone: UTC); None for None and for a text that is no time."""
    if text is None:
        return None
    m = _ISO.fullmatch(text) or re.fullmatch(_CANONICAL, text)
    try:
        if m is not None:
            y, mo, d, h, mi, s, frac = (int(g) for g in m.groups())
            return datetime(y, mo, d, h, mi, s, frac * 1000 if len(m.group(7)) == 3 else frac, tzinfo=UTC)
        if (other := re.fullmatch(_OTHER, text)) is None:
            return None
        g = other.groups()
        hour, minute, second, fraction = g[3:7] if g[3] is not None else g[8:12]
        zone = g[7]  # (None with a space: the second form has no zone)
        tz: Any = UTC
        if zone not in (None, "Z"):
            sign = -1 if zone[0] == "-" else 1
            tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[-2:])))
        micro = int((fraction or "0")[:6].ljust(6, "0"))
        at = datetime(int(g[0]), int(g[1]), int(g[2]), int(hour), int(minute), int(second), micro, tzinfo=tz)
        return at.astimezone(UTC)
    except ValueError:
        return None


def canonical_times(texts: list[str | None]) -> list[str | None]:
    """``texts`` when every time is as Gemini CLI writes it, else each in UTC with microseconds (or None)."""
    present: list[str] = [t for t in texts if t is not None] if None in texts else texts  # type: ignore[assignment]
    if all(map(_ISO.fullmatch, present)):
        return texts
    return [None if (at := parse_time(t)) is None else at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for t in texts]


# The columns as the frames hold them, checked while decoded (in C); a value that does not fit is read by
# ``_loose_columns``.
_Int64 = Annotated[int, msgspec.Meta(ge=_LOW, le=_HIGH)]
_WRITTEN = len(MESSAGE_COLUMNS)  # after the message columns: each time as written (``canonical_times``)
_TYPE_NAMES = tuple(
    "String" if i in _STRINGS else "Boolean" if i in _BOOLS else "Int64" for i in range(_WRITTEN)
)
_KINDS = {"String": list[str | None], "Boolean": list[bool], "Int64": list[_Int64 | None]}
_COLUMN_TYPES = tuple(_KINDS[kind] for kind in _TYPE_NAMES)
_decode_typed = msgspec.json.Decoder(tuple[_COLUMN_TYPES]).decode  # type: ignore[valid-type]


class Columns(list[list[Any]]):
    """Message columns, ``MESSAGE_COLUMNS`` then the times as written, and how many values of each did not
    fit its type and were left empty (``lost``); of a session of several files, the id of each row taken
    from an older file, with that file's rank (``older``)."""

    lost: dict[str, int]
    older: dict[str, int]


def _columns(fc: FileColumns) -> Columns:
    """A file's ``Columns`` as the frames hold them (no empty string), its times in one shape."""
    cols = _new_columns()
    try:
        for chunk in fc.messages_cols:
            for col, values in zip(cols, _decode_typed(chunk), strict=True):
                col.extend(values)
    except (msgspec.ValidationError, msgspec.DecodeError):
        cols = _loose_columns(fc)
    for i in _STRINGS:
        if "" in cols[i]:
            cols[i] = [None if v == "" else v for v in cols[i]]
    cols.append(cols[_TIME])
    cols[_TIME] = canonical_times(cols[_TIME])
    return cols


def _loose_columns(fc: FileColumns) -> Columns:
    """``_columns`` of a file with a value the typed decoder refuses (a count beyond 64 bits)."""
    from ctxtool.session.columns import decode_columns

    cols = _new_columns()
    for chunk in fc.messages_cols:
        for i, (col, values) in enumerate(zip(cols, decode_columns(chunk), strict=True)):
            kind = _TYPE_NAMES[i]
            for v in values:
                fits = (
                    v is None
                    or (kind == "String" and isinstance(v, str))
                    or (kind == "Boolean" and isinstance(v, bool))
                    or (kind == "Int64" and type(v) is int and _LOW <= v <= _HIGH)
                )
                col.append(v if fits else None)
                if not fits:
                    cols.lost[MESSAGE_COLUMNS[i]] = cols.lost.get(MESSAGE_COLUMNS[i], 0) + 1
    return cols


def _new_columns(n: int = _WRITTEN) -> Columns:
    cols = Columns([] for _ in range(n))
    cols.lost, cols.older = {}, {}
    return cols


def lost_warnings(lost: Mapping[str, int]) -> list[str]:
    """What the frames say of the values left empty, a line a column."""
    from ctxtool.common.wording import plural

    return [
        f"{plural(n, 'value')} of column {name!r} {'does' if n == 1 else 'do'} not fit its type "
        f"({kind}): {'it is' if n == 1 else 'they are'} left empty, so what "
        f"{'it counts' if n == 1 else 'they count'} is missing from the totals (check the session "
        "files for damaged numbers)"
        for name, kind in zip(MESSAGE_COLUMNS, _TYPE_NAMES, strict=False)
        if (n := lost.get(name, 0))
    ]


class Session(msgspec.Struct):
    """One session's row of ``stats --by session`` before subagents are rolled up, and its requests."""

    key: str
    parent_key: str | None
    row: dict[str, Any]
    requests: Requests | None
    mismatches: int = 0  # requests whose recorded total is not the sum of its parts
    project_dir: str = ""
    # The message columns of its files merged (``tally(detail=True)``: what ``ctxtool.frames.views`` reads),
    # what it derives of them, and in a view the requests it keeps of them and its turn rows there.
    columns: list[list[Any]] | None = None
    detail: Any = None
    kept: list[int] | None = None
    turns: list[dict[str, Any]] | None = None
    kept_messages: list[int] | None = None
    files: Any = None  # its files (``FileColumns``), oldest first, the last naming it
    parent_ref: str | None = None
    meta: Any = None  # a session read from an export's dataset: its row of the sessions frame (no files)

    def _requests(self) -> Requests:
        if self.requests is None:
            raise ValueError("a tally made with requests=False holds no requests: make it with requests=True")
        return self.requests


class Tally(msgspec.Struct):
    """What ``stats`` reads of a set of sessions: their rows, the problems and warnings met, the files."""

    sessions: list[Session]
    problems: list[Problem]
    warnings: list[str]
    files_read: int
    bytes_read: int
    broken_lines: int
    skipped: list[tuple[str, str]]
    broken: list[tuple[str, int, int, int | None]]  # (file, broken lines, first, first overlong) per session
    invalid_utf8: list[tuple[str, int, int | None]]  # (file, lines, first) per session
    # A dataset's sessions hold no requests: ``sums(by, timezone)`` gives the groups of ``request_rows`` as
    # ``_add_requests`` makes them, summed where the requests are (``export.load_dataset(sums=True)``).
    sums: Any = None
    # A tally the filters narrowed where it was read (``export.load_dataset(filters=...)``): the sessions
    # read before them (None: not narrowed; ``frames.views.view`` narrows it).
    read_sessions: int | None = None

    @property
    def requests(self) -> int:
        return sum(s.row["requests"] for s in self.sessions)


def count_file(fc: FileColumns) -> Measured | None:
    """One file measured as a session of its own, in the process that read it; None when unreadable."""
    return None if fc.error else _measure([fc], _columns(fc))


# The tables ``count_and_price`` priced at in this process, by the models of a session's requests (and the
# day, and whether the memos may answer): a worker resolves each distinct set of models once. None: neither
# the snapshot nor the memo holds them.
_TABLES: dict[tuple[Any, ...], tuple[PriceTable, str] | None] = {}


def count_and_price(fc: FileColumns) -> Measured | None:
    """``count_file``, priced where it was made when the rates come without genai-prices (the shipped
    snapshot or the day's memo), else left unpriced for the parent: a worker never loads the library's
    data."""
    m = count_file(fc)
    if m is None:
        return None
    at = (datetime.now(tz=UTC).date(), bool(os.environ.get("CTXTOOL_NO_PRICE_CACHE")), *m.used)
    if at not in _TABLES:
        from ctxtool.measure.pricing import memoised_table

        table = memoised_table(m.used)
        _TABLES[at] = None if table is None else (table, _rates_key(table, m.used))
    if (priced := _TABLES[at]) is not None:
        _price(m, *priced)
    return m


def tally(
    results: list[FileColumns],
    found: Discovery | None,
    prices: Callable[[Iterable[str]], PriceTable],
    *,
    subagents: bool = True,
    measured: dict[str, Measured | None] | None = None,
    rows: Callable[[list[FileColumns]], object] | None = None,
    requests: bool = True,
    detail: bool = False,
) -> Tally:
    """The sessions of ``results`` as report rows (``prices(models)`` resolves the rates). ``measured``: what
    ``count_file`` made of files (or the index kept of them), by path; the one-file sessions measured here are
    added to it. ``rows`` is called with the files whose rows the tally reads, first (``loading.fill_rows``).
    Without ``requests`` a kept measure priced at today's rates is not decoded further than its row; with
    ``detail`` each session keeps its message columns (``Session.columns``, read by ``frames.views``)."""
    good = [r for r in results if not r.error]
    groups = group_sessions(good)
    refs = {s.key: parent_ref_of(s.primary) for s in groups}
    if not subagents:
        groups = [s for s in groups if refs[s.key] is None and s.primary.kind != "subagent"]
    parents = link_parents((s.key, s.primary.project_dir, s.primary.session_id, refs[s.key]) for s in groups)
    done = measured if measured is not None else {}
    if rows is not None:
        rows([f for s in groups for f in s.files if detail or len(s.files) > 1 or done.get(f.path) is None])
    requests = requests or detail
    measures = [_measure_of(s.files, done) for s in groups]
    keys = _Keys(prices(sorted({model for m in measures for model in m.seen})), prices)
    for i, (s, m) in enumerate(zip(groups, measures, strict=True)):
        if requests or m.priced_at != keys.of(m.used):  # (priced where it was read: count_and_price)
            measures[i] = _with_requests(s.files, m, done, keys, rows)
    table = keys.table
    sessions = []
    for s, m in zip(groups, measures, strict=True):
        kind = "subagent" if refs[s.key] is not None or s.primary.kind == "subagent" else s.primary.kind
        row = {**m.row, "session_key": s.key, "kind": kind, "unpriced": m.unpriced, "cost": m.cost}
        row.update(_hidden_sums(m.hidden, table))
        made = Session(s.key, parents.get(s.key), row, m.requests, m.mismatches)
        made.project_dir, made.parent_ref = s.primary.project_dir, refs[s.key]
        if detail:  # (the files only then: a report of measures frees their rows before it is written)
            made.files, made.columns = s.files, _merged([_columns(f) for f in s.files])
        sessions.append(made)
    subagent_counts = Counter(s.parent_key for s in sessions if s.parent_key is not None)
    for made in sessions:
        made.row["subagents"] = subagent_counts[made.key]
    problems = [Problem(r.path, r.error) for r in results if r.error]
    problems += discovery_problems(found) if found is not None else []
    lost = sum((Counter(m.lost) for m in measures), Counter())
    warnings = [*lost_warnings(lost), *_pricing_warnings(measures, table)]
    read = len(good), sum(r.size for r in good), sum(r.broken_lines for r in good)
    skipped = [(str(p), why) for p, why in found.skipped] if found is not None else []
    broken = [b for s in groups if (b := _broken(s.files))[1]]
    invalid_utf8 = [u for s in groups if (u := _invalid_utf8(s.files))[1]]
    return Tally(sessions, problems, warnings, *read, skipped, broken, invalid_utf8)


def _measure_of(files: list[FileColumns], done: dict[str, Measured | None]) -> Measured:
    """The measure of the session of ``files``: ``done``'s, else measured (and kept there when one file)."""
    if len(files) > 1:
        return _measure(files, _merged([_columns(f) for f in files]))
    if (m := done.get(files[0].path)) is None:
        m = done[files[0].path] = _measure(files, _columns(files[0]))
    return m


def _with_requests(
    files: list[FileColumns], m: Measured, done: dict[str, Measured | None], keys: _Keys, rows: _Rows
) -> Measured:
    """``m`` with its requests (measured again when they do not decode), priced at ``keys``' table."""
    table = keys.table
    if requests_of(m) is None:
        if rows is not None:
            rows(files)
        m = done[files[0].path] = _measure(files, _columns(files[0]))  # a kept measure is of one file
        table = keys.cover(m.seen)  # (a model the damaged kept measure did not name)
    rates = keys.of(m.used)
    if m.priced_at != rates or m.requests is None or m.requests.costs is None:
        _price(m, table, rates)
    return m


def _broken(files: list[FileColumns]) -> tuple[str, int, int, int | None]:
    """(file, broken lines, first, first over the record limit) of a session."""
    first = next((f.first_broken_line for f in files if f.first_broken_line), None)
    overlong = next((f.first_overlong_line for f in files if f.first_overlong_line), None)
    return files[-1].path, sum(f.broken_lines for f in files), first or 0, overlong


def _invalid_utf8(files: list[FileColumns]) -> tuple[str, int, int | None]:
    first = next((f.first_invalid_utf8_line for f in files if f.first_invalid_utf8_line), None)
    return files[-1].path, sum(f.invalid_utf8_lines for f in files), first


def _merged(files: list[Columns]) -> Columns:
    """The columns of a session kept in several files (a legacy .json and the .jsonl written when it was
    resumed), oldest first: the last file's rows, preceded by the older rows only an older file has, each
    once and not live; its times in one shape again."""
    if len(files) == 1:
        return files[0]
    primary = files[-1]
    ids = {mid for mid in primary[_ID] if mid is not None}
    out = _new_columns(len(primary))
    for rank, cols in enumerate(files[:-1]):
        keep = []
        for i, mid in enumerate(cols[_ID]):
            if mid is not None:
                if mid in ids or mid in out.older:
                    continue
                out.older[mid] = rank
            keep.append(i)
        for merged, col in zip(out, cols, strict=True):
            merged.extend(col[i] for i in keep)
    out[_LIVE] = [False] * len(out[_LIVE])
    for merged, col in zip(out, primary, strict=True):
        merged.extend(col)
    out.lost = sum((Counter(cols.lost) for cols in files), Counter())
    out[_TIME] = canonical_times(out[_WRITTEN])
    return out


def _pricing_warnings(measures: list[Measured], table: PriceTable) -> list[str]:
    """What pricing warns about: unknown models, requests without a model name, impossible counts."""
    from ctxtool.measure.pricing import impossible_warning, nameless_warning

    models = sorted({model for m in measures for model in m.used})
    out = [table.unknown_model_warning(model) for model in models if model in table.unknown]
    if nameless := sum(m.nameless for m in measures):
        out.append(nameless_warning(nameless))
    impossible = sum((Counter(m.impossible) for m in measures), Counter())
    out.extend(impossible_warning(name, n) for name, n in sorted(impossible.items()))
    return out


def composition_parts(inputs: list[int], hist: list[list[Any]]) -> list[tuple[int, int, int, int]]:
    """Each request's (overhead, prompts, model, tool I/O) of its prompt: the overhead is the smallest part
    of any request's prompt its history estimate does not explain; the rest is shared among the history's
    parts in proportion to their estimates, rounded down."""
    prompts, model, tool_io = ([v or 0 for v in part] for part in hist)  # (always set by the reader)
    histories = [a + b + c for a, b, c in zip(prompts, model, tool_io, strict=True)]
    floor = max(
        min((i - h for i, h in zip(inputs, histories, strict=True) if i > 0 and i >= h), default=0), 0
    )
    floor_of = math.floor
    out = []
    for i, h, a, b, c in zip(inputs, histories, prompts, model, tool_io, strict=True):
        if h > 0:
            scale = (i - (floor if floor < i else i)) / h
            pa, pb, pc = floor_of(a * scale), floor_of(b * scale), floor_of(c * scale)
        else:  # a scale of 0: nothing of the prompt is history
            pa = pb = pc = 0
        out.append((i - (pa + pb + pc), pa, pb, pc))
    return out


def is_turn(n: int, requests: bool, compressed: bool) -> bool:
    """Whether the messages of turn ``n`` make a turn: each prompt starts one; turn 0, the messages before
    the first prompt (a ``<session_context>`` block, a resumed history), counts when it holds a request or a
    compression. The one rule of a turn, for ``_turns`` and ``--by turn`` (``views``)."""
    return n > 0 or requests or compressed


def _turns(c: list[list[Any]]) -> int:
    """How many turns a session's messages make (``is_turn``): the prompts, and turn 0 when one of the
    messages before the first prompt is a request or a compression."""
    prompts: list[bool] = c[_PROMPT]
    n = sum(prompts)
    before = prompts.index(True) if n else len(prompts)
    requests = any(kind == "gemini" and c[_INPUT][i] is not None for i, kind in enumerate(c[_TYPE][:before]))
    compressed = any(info or snap for info, snap in zip(c[_INFO][:before], c[_SNAP][:before], strict=True))
    return n + int(is_turn(0, requests, compressed))


def _hidden(
    c: list[list[Any]], derived: bool, compacted_at: str | None
) -> list[tuple[int | None, int | None, str | None]]:
    """(input, output, model) of the compression calls each snapshot shows Gemini CLI made (none before a
    compacted copy's first request, nor for the one ``compact --in-place`` wrote at ``compacted_at``)."""
    calls: list[tuple[int | None, int | None, str | None]] = []
    last_input: int | None = None
    last_model: str | None = None
    marks = zip(c[_SNAP], c[_INPUT], c[_MODEL], c[_CHARS], c[_WRITTEN], strict=True)
    for snap, input, model, chars, ts in marks:
        if input is not None:
            last_input = input
            if model is not None:
                last_model = model
        if snap and not (derived and last_input is None) and (ts is None or ts != compacted_at):
            summary = None if chars is None else chars // 4
            prompt = None if summary is None else HIDDEN_CALLS_PER_COMPRESSION * (last_input or 0) + summary
            calls.append((prompt, None if summary is None else 2 * summary, last_model))
    return calls


class Requests(msgspec.Struct, array_like=True):
    """A session's requests as columns: model (``filled``), timestamp, ``TOKEN_COLUMNS``, cost."""

    models: list[str | None]
    times: list[str | None]
    tokens: list[list[_Int64 | None]]
    costs: list[float | None] | None = None


class Measured(msgspec.Struct):
    """What a session's files measure, whatever the prices: its row of ``stats --by session`` but the costs,
    its requests, the compression calls its snapshots show, and the models of its messages (``seen``) and of
    its requests (``used``). Kept in the index beside the file it was measured from (``MEASURED``)."""

    row: dict[str, Any]
    requests: Requests | None  # None: not decoded yet from ``kept``
    mismatches: int
    hidden: list[tuple[int | None, int | None, str | None]]
    seen: list[str]
    used: list[str]
    # The cost at the rates ``priced_at`` names (``_rates_key``), and what pricing warned of: kept, so that a
    # later run at the same rates does not price them again.
    priced_at: str | None = None
    cost: float | None = None
    unpriced: int = 0
    nameless: int = 0
    impossible: dict[str, int] = {}
    kept: msgspec.Raw | None = None  # the requests as the index kept them
    lost: dict[str, int] = {}  # values left empty, by column (``Columns.lost``)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as MessagePack (pickling the bench corpus' 860 measures cost 0.04 s, this a few ms), the
        requests as the index keeps them, so a first ``stats --by session`` neither decodes them nor encodes
        them again. A count beyond 64 bits is pickled as it is."""
        try:
            return (_unpack_measured, _sendable(self))
        except (OverflowError, msgspec.EncodeError):
            return super().__reduce__()  # type: ignore[return-value]


def _sendable(m: Measured) -> tuple[bytes, bytes | None]:
    """``m`` packed without its requests, and those as the index keeps them."""
    requests = m.kept if m.requests is None else _encode(m.requests)
    alone = msgspec.structs.replace(m, requests=None, kept=None)
    return _encode(alone), None if requests is None else bytes(requests)


def pack_measure(m: Measured | None) -> bytes | None:
    """``m`` as bytes for the head start to hand back; None when it cannot be (it is measured again)."""
    if m is None:
        return None
    try:
        return _encode(_sendable(m))
    except (OverflowError, msgspec.EncodeError):
        return None


def unpack_measure(data: bytes) -> Measured:
    return _unpack_measured(*_decode_pair(data))


def requests_at(c: list[list[Any]]) -> list[int]:
    """The positions of a session's requests among its messages: the gemini messages that carry tokens."""
    kinds = c[_TYPE]
    return [i for i, input in enumerate(c[_INPUT]) if input is not None and kinds[i] == "gemini"]


def _measure(files: list[FileColumns], c: Columns) -> Measured:
    at = requests_at(c)
    tokens = [[c[j][i] for i in at] for j in _TOKENS]
    r = Requests(_filled([c[_MODEL][i] for i in at]), [c[_TIME][i] for i in at], tokens)
    row = _session_row(files, c, r, [c[_LIVE][i] for i in at])
    hist = [[c[j][i] for i in at] for j in _HIST]
    parts = [sum(part) for part in zip(*composition_parts(tokens[0], hist), strict=True)] or [0, 0, 0, 0]
    row.update(zip(COMPOSITION_COLUMNS, parts, strict=True))
    hidden = _hidden(c, files[-1].derived_from is not None, row["compacted_at"]) if any(c[_SNAP]) else []
    seen = sorted({model for model in c[_MODEL] if model is not None})
    used = sorted({model for model in r.models if model is not None})
    return Measured(row, r, mismatched(tokens), hidden, seen, used, lost=c.lost)


def mismatched(tokens: list[list[int | None]]) -> int:
    """How many requests (``TOKEN_COLUMNS``, a list each) record a total other than their ``TOTAL_PARTS``."""
    return sum(
        (total or 0) != (i or 0) + (o or 0) + (th or 0) + (tl or 0)
        for i, o, _, th, tl, total in zip(*tokens, strict=True)
    )


def _price(m: Measured, table: PriceTable, rates: str) -> None:
    """Price ``m``'s requests at ``table``, whose key for ``m``'s models is ``rates``."""
    from ctxtool.measure.pricing import request_costs

    assert m.requests is not None
    costs, m.nameless, m.impossible = request_costs(table.rates, m.requests.models, m.requests.tokens)
    m.requests.costs, m.priced_at = costs, rates
    m.cost, m.unpriced = known_cost(costs)


def _session_row(
    files: list[FileColumns], c: list[list[Any]], m: Requests, live: list[bool]
) -> dict[str, Any]:
    """One session's row (its last file names it), but its key, kind and costs."""
    p = files[-1]
    started = min((f.start_time for f in files if f.start_time), default=None)
    updated = max((f.last_updated for f in files if f.last_updated), default=None)
    times = [t for t in c[_TIME] if t is not None]
    first, last = (parse_time(min(times)), parse_time(max(times))) if times else (None, None)
    row: dict[str, Any] = {
        "session": os.path.basename(p.path).rsplit(".", 1)[0],
        "session_id": p.session_id,
        "derived_from": p.derived_from,
        "compacted_at": max((f.compacted_at for f in files if f.compacted_at), default=None),
        "project": p.project,
        "subagents": 0,
        "start": min((t for t in (parse_time(started), first) if t is not None), default=None),
        "end": last if last is not None else parse_time(updated),
        "turns": _turns(c),
    }
    row.update(request_figures(m.models, m.tokens, live), compressions=max(sum(c[_INFO]), sum(c[_SNAP])))
    row["tool_calls"], row["tool_errors"] = sum(filter(None, c[_CALLS])), sum(filter(None, c[_ERRORS]))
    row.update(rewinds=sum(f.rewinds for f in files), file=p.path)
    return row


def _hidden_sums(calls: list[tuple[int | None, int | None, str | None]], table: PriceTable) -> dict[str, Any]:
    from ctxtool.measure.pricing import cost_of

    costs = [
        cost_of(table.rates.get(model) if model is not None else None, input, 0, output, 0, 0)
        for input, output, model in calls
        if input is not None and output is not None
    ]
    return {
        "hidden_requests": len(calls) * HIDDEN_CALLS_PER_COMPRESSION,
        "hidden_input": sum(i for i, _, _ in calls if i is not None),
        "hidden_output": sum(o for _, o, _ in calls if o is not None),
        "hidden_cost": math.fsum(cost for cost in costs if cost is not None),
    }


# What a subagent session adds to its parent's row, cost apart.
_ROLLED_UP = (*TOKEN_COLUMNS, "requests", "turns", "tool_calls", "tool_errors", "unpriced")


def session_rows(t: Tally, *, roll_up: bool = True) -> list[dict[str, Any]]:
    """The rows of ``stats --by session``."""
    children: dict[str, list[Session]] = {}
    if roll_up:
        # A subagent whose parent a filter left out keeps a row of its own: its requests still count.
        present = {s.key for s in t.sessions}
        for s in t.sessions:
            if s.parent_key is not None and s.parent_key in present:
                children.setdefault(s.parent_key, []).append(s)
    rows = []
    for s in t.sessions:
        if s.parent_key in children:
            continue
        row = dict(s.row)
        if kids := children.get(s.key):
            for k in _ROLLED_UP:
                row[k] += sum(c.row[k] for c in kids)
            sub = [c.row["cost"] for c in kids if c.row["cost"] is not None]
            known = math.fsum([row["cost"] or 0.0, math.fsum(sub)])
            # Unknown only when none of the requests, the parent's and its subagents', has a price.
            row["cost"] = known_sum(known, row["requests"] - row["unpriced"], row["unpriced"])
            row["cache_ratio"] = cache_ratio(row["cached"], row["input"])
        rows.append(row)
    rows.sort(key=lambda row: session_order(row["start"], row["session"], row["session_key"]))
    return [shown(row, "session") for row in rows]


def session_order(start: Any, session: str | None, key: str) -> tuple[tuple[bool, Any], ...]:
    """Where a session's row stands in ``stats --by session``: ``sort("start", "session", "session_key",
    nulls_last=True)``."""
    return tuple((v is None, v or "") for v in (start, session, key))


def shown(row: dict[str, Any], by: str) -> dict[str, Any]:
    """The columns ``stats`` shows, ``input`` without ``cached``."""
    out: dict[str, Any] = {}
    for col in REPORT_COLUMNS[by]:
        if col == "input":
            out["input"] = row["input"] - (row["cached"] or 0)
        elif col == "cached":
            out["cached"] = row["cached"]
            out["prompt_tokens"] = row["input"]
        else:
            out[col] = row[col]
    return out


def _keys(by: str, s: Session, timezone: str | None = None) -> list[Any]:
    """The group of each request of ``s`` in ``stats --by BY``, days in ``timezone`` (None: UTC)."""
    r = s._requests()
    if by == "model":
        return [m if m is not None else "(unknown)" for m in r.models]
    if by == "project":
        return [s.row["project"]] * len(r.models)
    if by in ("user", "machine"):  # a dataset's rows carry them; local sessions are this machine's
        from ctxtool.common.identity import identity

        return [s.row.get(by) or getattr(identity(), by)] * len(r.models)
    times = r.times
    if timezone is not None:  # each time (in UTC) as ``YYYY-MM-DD`` in ``timezone``
        from zoneinfo import ZoneInfo

        zone = ZoneInfo(timezone)
        times = [
            None if (at := parse_time(t)) is None else at.astimezone(zone).strftime("%Y-%m-%d") for t in times
        ]
    if by == "month":
        return [None if ts is None else ts[:7] for ts in times]
    return [None if ts is None else ts[:10] for ts in times]  # a day; a week is its Monday's


def _key_value(by: str, key: Any) -> Any:
    if key is None or by not in ("day", "week"):
        return key
    day = date.fromisoformat(key)  # (the engine's times are of one shape: canonical_times)
    return day - timedelta(days=day.weekday()) if by == "week" else day  # polars' weeks start on Monday


def request_rows(t: Tally, by: str, timezone: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``stats --by model|project|day|week|month|user|machine``."""
    # key: [sessions, requests, six token sums, peak, known costs, requests of known cost]
    groups: dict[Any, list[Any]] = {}
    values: dict[Any, Any] = {}  # the day (or week) of each key met
    if t.sums is not None:
        for key, g in t.sums(by, timezone).items():
            _merge_group(groups, _key_value(by, key), g)  # (the days of one week merge)
    for s in t.sessions if t.sums is None else ():
        for key, at in _spans(_keys(by, s, timezone)).items():
            if by in ("day", "week"):
                key = values[key] if key in values else values.setdefault(key, _key_value(by, key))
            _add_requests(groups, key, s, at)
    rows = []
    for key in sorted(groups, key=lambda k: (k is not None, k if k is not None else "")):  # nulls first
        keys_seen, n, sums, peak, known, n_known = groups[key]
        row: dict[str, Any] = {by: key, "sessions": len(keys_seen), "requests": n}
        row.update(zip(TOKEN_COLUMNS, sums, strict=True), peak_context=peak, unpriced=n - n_known)
        row["cost"] = None if not known and row["unpriced"] else math.fsum(known)
        row["cache_ratio"] = cache_ratio(row["cached"], row["input"])
        rows.append(shown(row, by))
    return rows


def _spans(keys: list[Any]) -> Mapping[Any, list[int] | None]:
    """The positions of each key in ``keys``; None for all of them when there is one key (nearly always)."""
    if not keys or keys.count(keys[0]) == len(keys):
        return dict.fromkeys(keys[:1])
    out: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return out


def _add_requests(groups: dict[Any, list[Any]], key: Any, s: Session, at: list[int] | None) -> None:
    """Add the requests of ``s`` at positions ``at`` (None: all) to the group of ``key``."""
    r = s._requests()
    tokens, costs = r.tokens, r.costs
    assert costs is not None  # (priced before a Session is made)
    if at is not None:
        tokens, costs = [[col[i] for i in at] for col in tokens], [costs[i] for i in at]
    peak = max((v for v in tokens[0] if v is not None), default=None)
    known = [cost for cost in costs if cost is not None]
    made = [{s.key}, len(costs), [sum(filter(None, col)) for col in tokens], peak, known, len(known)]
    _merge_group(groups, key, made)


def _merge_group(groups: dict[Any, list[Any]], key: Any, other: list[Any]) -> None:
    """Add the group ``other`` to the group of ``key``."""
    g = groups.setdefault(key, other)
    if g is other:
        return
    g[0] |= other[0]
    g[1] += other[1]
    g[2] = [a + b for a, b in zip(g[2], other[2], strict=True)]
    if other[3] is not None and (g[3] is None or other[3] > g[3]):
        g[3] = other[3]
    g[4].extend(other[4])
    g[5] += other[5]


def warnings_of(t: Tally) -> list[str]:
    """What reading and pricing met, a line each."""
    from ctxtool.frames.reading import broken_lines_warning, invalid_utf8_warning

    # (file, requests) of every session with requests whose recorded total is not the sum of its parts
    mismatched = [
        (f, n) for f, _, n in sorted((s.row["file"], s.key, s.mismatches) for s in t.sessions if s.mismatches)
    ]
    return [
        *(str(p) for p in t.problems),
        *(broken_lines_warning(*found) for found in t.broken),
        *(invalid_utf8_warning(path, n, first) for path, n, first in t.invalid_utf8),
        *([describe_total_mismatches(mismatched)] if mismatched else []),
        *t.warnings,
    ]


# What ``merged`` drops of a session: all but its row (what the views and the requests' reports read).
_LIGHT: dict[str, Any] = dict.fromkeys(
    ("requests", "columns", "detail", "files", "meta", "kept", "turns", "kept_messages")
)


def merged(parts: Iterable[Tally]) -> Tally:
    """One tally of ``parts`` (each of other sessions, each reading's own): their sessions' rows alone (not
    what the views read), what reading met, the counts added."""
    p = list(parts)
    light = [msgspec.structs.replace(s, **_LIGHT) for t in p for s in t.sessions]
    lists = ([x for t in p for x in getattr(t, f)] for f in ("problems", "skipped", "broken", "invalid_utf8"))
    problems, skipped, broken, invalid = lists
    warnings = list(dict.fromkeys(w for t in p for w in t.warnings))
    files, size, lines = (sum(getattr(t, f) for t in p) for f in ("files_read", "bytes_read", "broken_lines"))
    return Tally(light, problems, warnings, files, size, lines, skipped, broken, invalid)


def summary_of(t: Tally) -> dict[str, Any]:
    """What was read (``reading.summary``)."""
    from ctxtool.frames.reading import summary

    return summary(
        files=t.files_read,
        size=t.bytes_read,
        sessions=len(t.sessions),
        subagent_sessions=sum(s.row["kind"] == "subagent" for s in t.sessions),
        requests=t.requests,
        total_tokens=sum(s.row["total"] for s in t.sessions),
        broken_lines=t.broken_lines,
        invalid_utf8_lines=sum(n for _, n, _ in t.invalid_utf8),
        total_mismatches=sum(s.mismatches for s in t.sessions),
        skipped=t.skipped,
        problems=t.problems,
    )


def hidden_calls(t: Tally) -> tuple[int, float]:
    """Gemini CLI's unrecorded compression calls: (requests, estimated cost)."""
    rows = [s.row for s in t.sessions]
    return sum(row["hidden_requests"] for row in rows), math.fsum(row["hidden_cost"] for row in rows)


def _rates_key(table: PriceTable, models: Iterable[str]) -> str:
    """What names the rates a session's costs depend on: those ``table`` gives ``models`` (its requests'),
    and which of them it does not know. A worker's table of one session's models and the parent's of every
    model read give the same key when they agree on that session's."""
    names = set(models)
    rates = sorted(
        (name, r.model_id, [msgspec.structs.asdict(t) for t in r.tiers])
        for name in names
        if (r := table.rates.get(name)) is not None
    )
    text = repr((rates, sorted(name for name in names if name in table.unknown)))
    return blake2b(text.encode(), digest_size=12).hexdigest()


class _Keys:
    """``table``'s rates key for each distinct set of models, hashed once in a tally."""

    def __init__(self, table: PriceTable, prices: Callable[[Iterable[str]], PriceTable]) -> None:
        self.table, self.prices = table, prices
        self.known: dict[tuple[str, ...], str] = {}

    def cover(self, models: Iterable[str]) -> PriceTable:
        """The table, with the rates of ``models`` it did not hold yet added (the keys made stay right: a
        key depends only on its models' rates)."""
        if missing := sorted(m for m in set(models) if not self.table.covers(m)):
            self.table = self.table.merged(self.prices(missing))
        return self.table

    def of(self, used: Sequence[str]) -> str:
        models = tuple(used)
        if models not in self.known:
            self.known[models] = _rates_key(self.table, models)
        return self.known[models]


# A ``Measured`` as the index keeps it (``FileIndex.store_sides``); the kind names this version of it.
MEASURED = "tally-measured-4"
# Kept as a tuple decoded into ``_KEPT``, each value typed, so that one of another type (a damaged cache)
# makes its file be measured again, not the report fail. Its requests stay undecoded until a run needs them:
# they are most of its bytes (a warm ``stats --by session`` of the bench corpus: 0.025 s with, 0.006 s
# without).
_Count = Annotated[int, msgspec.Meta(ge=0)]
_ROW_TYPES: dict[str, Any] = {
    **dict.fromkeys(("session", "project", "file"), str),
    **dict.fromkeys(("session_id", "derived_from", "compacted_at", "models"), str | None),
    **dict.fromkeys(("start", "end"), datetime | None),
    **dict.fromkeys(("context", "peak_context"), int | None),
    **dict.fromkeys(("context_share", "cache_ratio"), float | None),
    **dict.fromkeys(("subagents", "turns", "requests", "context_limit", "compressions", "rewinds"), _Count),
    **dict.fromkeys(("tool_calls", "tool_errors", *TOKEN_COLUMNS, *COMPOSITION_COLUMNS), int),
}
_Row = msgspec.defstruct("_Row", list(_ROW_TYPES.items()), forbid_unknown_fields=True)
_KEPT = tuple[
    _Row,  # type: ignore[valid-type]
    _Count,  # mismatches
    list[tuple[_Int64 | None, _Int64 | None, str | None]],  # hidden
    list[str],  # seen
    list[str],  # used
    msgspec.Raw,  # requests
    str | None,  # priced_at
    float | None,  # cost
    _Count,  # unpriced
    _Count,  # nameless
    dict[str, _Count],  # impossible
    dict[str, _Count],  # lost
]
_encode = msgspec.msgpack.Encoder().encode
_decode_kept = msgspec.msgpack.Decoder(_KEPT).decode
_decode_requests = msgspec.msgpack.Decoder(Requests).decode
_UNDECODABLE = (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError)


def _encode_measured(m: Measured) -> bytes:
    requests = _encode(m.requests) if m.requests is not None else m.kept
    kept = (m.row, m.mismatches, m.hidden, m.seen, m.used, msgspec.Raw(requests or b"\xc0"), m.priced_at)
    return _encode((*kept, m.cost, m.unpriced, m.nameless, m.impossible, m.lost))


def _decode_measured(data: bytes) -> Measured:
    """A measure as the index kept it, its requests not decoded yet (``requests_of``)."""
    row, mismatches, hidden, seen, used, requests, priced_at, cost, unpriced, nameless, impossible, lost = (
        _decode_kept(data)
    )
    m = Measured(msgspec.structs.asdict(row), None, mismatches, hidden, seen, used, priced_at, cost, unpriced)
    m.nameless, m.impossible, m.kept, m.lost = nameless, impossible, requests, lost
    return m


def requests_of(m: Measured) -> Requests | None:
    """``m``'s requests, decoded from what the index kept; None when damaged (measure its file again)."""
    if m.requests is None and m.kept is not None:
        try:
            r = _decode_requests(m.kept)
        except _UNDECODABLE:
            return None
        n = m.row["requests"]
        shaped = len(r.models) == len(r.times) == n and len(r.tokens) == len(TOKEN_COLUMNS)
        shaped = shaped and all(len(col) == n for col in r.tokens) and None not in r.tokens[0]
        if not shaped or (r.costs is not None and len(r.costs) != n):
            return None
        m.requests, m.kept = r, None
    return m.requests


_decode_sent = msgspec.msgpack.Decoder(Measured).decode
_decode_pair = msgspec.msgpack.Decoder(tuple[bytes, bytes | None]).decode


def _unpack_measured(data: bytes, requests: bytes | None = None) -> Measured:
    """A measure as a worker sent it (``Measured.__reduce__``)."""
    m = _decode_sent(data)
    if requests is not None:
        m.kept = msgspec.Raw(requests)
    return m


def kept_measures(index: FileIndex, stamps: Mapping[str, Sequence[int] | None]) -> dict[str, Measured]:
    """The measures the index keeps of files still as they were measured (``stamps``: path: [size, mtime])."""
    out: dict[str, Measured] = {}
    for path, data in index.sides(MEASURED, stamps).items():
        try:
            out[path] = _decode_measured(data)
        except _UNDECODABLE:
            continue  # another version's, damaged, or a value of another type: measured again
    return out


def keep_measures(
    index: FileIndex, stamps: Mapping[str, Sequence[int] | None], measured: Mapping[str, Measured | None]
) -> None:
    """Keep ``measured`` (by path) in the index, each with the stamp its file had when read."""
    kept = ((path, stamps.get(path), m) for path, m in measured.items() if m is not None)
    index.store_sides(MEASURED, ((path, stamp, _encode_measured(m)) for path, stamp, m in kept if stamp))
