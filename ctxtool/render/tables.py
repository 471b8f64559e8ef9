"""The only module that imports rich: tables, colours and numbers for people.

The terminal decides colour and width, never structure: a table shows the same rows and columns as the
machine formats, with readable numbers, a totals row and the context share coloured against Gemini CLI's
compression threshold.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache, partial
from itertools import groupby
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, NamedTuple

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ctxtool.common.wording import plural
from ctxtool.frames.shape import COLUMNS, DROP_ORDER, NUMBER_FORMATS, TABLE_COLUMNS, Format, RowTable
from ctxtool.measure.tokens import COMPRESSION_THRESHOLD

if TYPE_CHECKING:
    import polars as pl

# The stats report's columns as a table shows them: each one's header, format (right-aligned when a number),
# place and drop order, and how far a text column gives way, are its specification's (ctxtool.frames.shape).
_FORMATS: dict[str, Format] = {c.name: c.format for c in COLUMNS}
_RIGHT = {c.name for c in COLUMNS if c.format in NUMBER_FORMATS}
_HEADERS = {c.name: c.heading for c in COLUMNS}
_TEXT_MIN = {c.name: c.least for c in COLUMNS if c.least is not None}
_MAX_WIDTH = {c.name: c.most for c in COLUMNS if c.most is not None}
# The token counts a table shows, in ccusage's order (Input, Output, Reasoning, Cache Read), that add up
# to ``total``; ``tool`` only where some request recorded tool-use prompt tokens.
TOKEN_PARTS = ("input", "output", "thoughts", "cached", "tool")
JOINED_ROWS = 2  # from this many rows a stats table may go to rich as one row of joined cells (``_add_rows``)
# How a table labels a session ctxtool compacted from another (``derivedFrom`` in its metadata), so that a
# copy written with the original's id reads apart from it, or compacted in place (``ctxtoolCompaction``).
COMPACTED_MARK = " (compacted)"
_PATH_COLUMNS = {"file", "output", "path"}


def make_console(
    stream: IO[str] | None = None, *, width: int | None = None, color: bool | str | None = None
) -> Console:
    """A console on ``stream`` (default stdout). ``color``: ``"auto"`` (or None), ``"always"`` (or True),
    ``"never"`` (or False); see :func:`wants_color`."""
    choice = "always" if color is True else "never" if color is False else str(color or "auto")
    target = stream if stream is not None else sys.stdout
    tty = bool(getattr(target, "isatty", lambda: False)())
    to_file = stream is not None and stream not in (sys.stdout, sys.stderr)  # --output, not a pipe
    want = wants_color(choice, tty=tty, env=os.environ, to_file=to_file)
    # rich turns colour off for TERM=dumb even when forced; "always" means always.
    system = ("standard" if os.environ.get("TERM") == "dumb" else "auto") if want else None
    kw: dict[str, Any] = {"no_color": not want, "force_terminal": want or None, "color_system": system}
    return Console(file=stream, width=width, highlight=False, soft_wrap=False, **kw)


@contextmanager
def output_console(output: Path | None, *, width: int | None, color: str | None) -> Iterator[Console]:
    """A console onto the file ``--output`` names (closed on leaving), else onto standard output."""
    from ctxtool.render.formats import open_text

    with open_text(output) if output else nullcontext() as stream:
        yield make_console(stream, width=width, color=color)


def wants_color(choice: str, *, tty: bool, env: Mapping[str, str], to_file: bool = False) -> bool:
    """Whether to colour: ``always`` and ``never`` decide; ``auto`` follows the conventions, in this order:
    ``NO_COLOR`` set (no-color.org) → no; ``FORCE_COLOR`` set (and not ``0``) → yes, even in a pipe but not
    into an ``--output`` file; ``TERM=dumb`` → no; else only on a terminal."""
    if choice in ("always", "never"):
        return choice == "always"
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR") not in (None, "", "0", "false") and not to_file:
        return True
    if env.get("TERM") == "dumb":
        return False
    return tty


def human_int(value: Any) -> str:
    """A count as ccusage prints it: every digit, with thousands separators."""
    return "–" if value is None else f"{int(value):,}"


def percent(value: Any) -> str:
    nan = value is None or (isinstance(value, float) and math.isnan(value))
    return "–" if nan else f"{float(value) * 100:.1f}%"


def money(value: Any) -> str:
    """A cost in US dollars as ccusage prints it (``$1,234.56``); JSON keeps the full precision."""
    if value is None:
        return "?"
    v = float(value)
    return f"-${-v:,.2f}" if v < 0 else f"${v:,.2f}"


def duration(value: Any) -> str:
    if value is None:
        return "–"
    s = float(value)
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s // 60:.0f}m{s % 60:02.0f}s"
    return f"{s // 3600:.0f}h{(s % 3600) // 60:02.0f}m"


def share_style(share: float | None) -> str:
    """Green well below the threshold, yellow approaching it, red at or past it (compression would fire)."""
    if share is None:
        return ""
    if share >= COMPRESSION_THRESHOLD:
        return "bold red"
    return "yellow" if share >= COMPRESSION_THRESHOLD * 0.8 else "green"


def cell(column: str, value: Any) -> Text:
    """``value`` as a stats table shows ``column``: in its specification's ``format``."""
    fmt = _FORMATS.get(column, "text")
    if fmt in ("share", "percent"):
        return Text(percent(value), style=share_style(value) if fmt == "share" else "")
    if fmt == "cost":
        return Text(money(value), style="" if value is not None else "dim")
    if fmt == "duration":
        return Text(duration(value))
    if isinstance(value, bool):
        if fmt == "mark":
            return Text("yes" if value else "", style="magenta")
        return Text("yes" if value else "no", style="" if value else "dim")
    if isinstance(value, int) and fmt == "count":
        return Text(human_int(value))
    if isinstance(value, datetime):
        return Text(value.strftime("%Y-%m-%d %H:%M"))
    if fmt == "second" and isinstance(value, str):
        return Text(value[:19].replace("T", " "))
    if isinstance(value, date):
        return Text(value.isoformat())
    if value is None:
        return Text("–", style="dim")
    text = str(value).removeprefix("session-") if fmt == "short id" else str(value)
    return Text(text, no_wrap=True, overflow="ellipsis")


def stats_table(
    rows: pl.DataFrame | RowTable,
    totals: Mapping[str, Any],
    *,
    by: str,
    title: str,
    caption: str | None = None,
    single_session: bool = False,
    width: int = 120,
    wide: bool = False,
) -> Table:
    """The stats report as a table at most ``width`` columns wide (``wide``: every column, however wide).

    Numbers and the short session id are never cut; text columns give way (a path from the left); the
    least important columns are dropped and named in the last caption lines (:func:`dropped_notes`). The
    row's key and ``total`` always stay, ``cost`` unless even without the table's borders it has no room;
    a token column left out is named with its sum, so the tokens add up to ``total``."""
    # ``session`` only where it tells rows apart, ``tool`` only where some request recorded tool-use prompt
    # tokens (0 in nearly every session).
    present = list(rows.columns)
    skip = {"session"} if single_session and by != "session" else set()
    if "tool" in present and not totals.get("tool") and not any(rows.get_column("tool").to_list()):
        skip.add("tool")
    columns = [c for c in TABLE_COLUMNS.get(by, present) if c in present and c not in skip]
    full = _stats_cells(rows, columns)
    unpriced = totals.get("unpriced", 0)
    footers = {c: _partial(cell(c, totals[c]) if c in totals else Text(""), c, unpriced) for c in columns[1:]}
    footers[columns[0]] = Text("total", style="bold")
    text_min = dict(_TEXT_MIN)
    if columns[0] in text_min:  # the row's name (a model, a project): cut, it still tells the rows apart
        text_min[columns[0]] = _distinct_width(columns[0], full[columns[0]], text_min[columns[0]])
    cells = {c: [footers[c], *full[c]] for c in columns}
    drop_order = [c for c in DROP_ORDER if c != columns[0]]  # the row's key stays, as do those unranked
    fit = partial(fit_columns, columns, cells, width=width, text_min=text_min)
    kept, text_width, dropped = fit(wide=wide, drop_order=drop_order)
    # Where the columns never dropped are too wide even alone within borders (``--by turn`` at 40 columns),
    # the table drops its outer borders (four cells), as ``diff``'s tables do; should that not do, ``cost``
    # goes last. Nothing is cut to make room.
    edge = wide or sum(text_width.get(c, _natural(c, cells, _HEADERS)) + 3 for c in kept) + 1 <= width
    if not edge:
        kept, text_width, dropped = fit(drop_order=[*drop_order, "cost"], edge=False)
    notes = [n for n in (caption, parts_note(totals), *dropped_notes(dropped, totals, _HEADERS)) if n]
    for col, w in text_width.items():  # the columns that give way, cut
        full[col], footers[col] = [clip(col, t, w) for t in full[col]], clip(col, footers[col], w)
    shown = [  # (column, header, footer, width)
        (c, h, footers[c], max([len(h), footers[c].cell_len, *map(_cell_width, full[c])]))
        for c, h in ((c, _HEADERS.get(c, c)) for c in kept)
    ]
    # When the table fits, each column's width is fixed at what rich would measure, so rich does not measure
    # every cell again (0.2 s of printing a table of 800 sessions); a table too wide is left to rich.
    fixed = wide or sum(widest + 3 for *_, widest in shown) + 1 <= width
    frame = partial(_stats_frame, title, "\n".join(notes) or None, shown, edge=edge, fixed=fixed)
    table = frame()
    if _add_rows(table, rows.height, [(col, full[col], widest) for col, *_, widest in shown], joined=fixed):
        table.plain = _PlainRows(frame, [(c in _RIGHT, full[c], w) for c, *_, w in shown], edge)
    return table


def _framed(title: str, caption: str | None = None, edge: bool = True) -> dict[str, Any]:
    """A ``Table``'s arguments: its title and caption on the left; ``edge``: its outer borders and padding."""
    sides = {"title_justify": "left", "caption_justify": "left", "show_edge": edge, "pad_edge": edge}
    return {"title": title, "caption": caption, **sides}


def _column(table: Table, header: str, size: int, *, right: bool, **options: Any) -> None:
    """A column of ``size`` cells added to ``table``, never wrapped."""
    justify: Literal["right", "left"] = "right" if right else "left"
    table.add_column(header, justify=justify, no_wrap=True, min_width=size, max_width=size, **options)


def _stats_frame(
    title: str, caption: str | None, shown: list[tuple[str, str, Text, int]], *, edge: bool, fixed: bool
) -> _StatsTable:
    """The stats table without its rows: its ``shown`` columns (name, header, footer, width), fixed or not."""
    table = _StatsTable(**_framed(title, caption, edge), show_footer=True)
    for col, header, footer, widest in shown:
        _column(table, header, widest, right=col in _RIGHT, footer=footer, width=widest if fixed else None)
    return table


def _add_rows(table: Table, height: int, columns: list[tuple[str, list[Text], int]], *, joined: bool) -> bool:
    """The ``height`` rows of ``columns`` (name, cells, width each) added to ``table``; True when, ``joined``
    (fixed widths every cell fits) and from ``JOINED_ROWS`` rows, as one row of multi-line cells filled as
    rich fills them: the same bytes, faster (820 sessions: 0.46-0.48 s row by row, joined 0.23-0.27 s)."""
    if joined and height >= JOINED_ROWS and not any("\n" in t.plain for _, ts, _ in columns for t in ts):
        filled = [Text("\n").join(_filled(t, w, right=c in _RIGHT) for t in ts) for c, ts, w in columns]
        table.add_row(*filled)
        return True
    for i in range(height):
        table.add_row(*(cells[i] for _, cells, _ in columns))
    return False


class _StatsTable(Table):
    """A stats table; in plain text (a pipe, a file, a CI log) a table of joined rows (``_add_rows``)
    writes its rows itself (``_PlainRows``), the same bytes as rich writes."""

    plain: _PlainRows | None = None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = None if self.plain is None else self.plain.lines(console, options)
        yield from super().__rich_console__(console, options) if lines is None else lines


@dataclass(frozen=True, slots=True)
class _PlainRows:
    """The rows of a joined stats table printed as plain text without rich's layers for each cell: rich lays
    out the table with its first row only (``frame()``), and where that row's line is, every row's line
    goes, made as that one is; if that line is not rich's, rich prints the whole table (820 sessions:
    0.11-0.13 s joined, about 0.01 s so)."""

    frame: Callable[[], Table]
    columns: list[tuple[bool, list[Text], int]]  # (right-justified, cells, width) each
    edge: bool

    def lines(self, console: Console, options: ConsoleOptions) -> list[Segment] | None:
        """The table's segments, or None when rich is to print it."""
        if console.color_system is not None or console.record or console.legacy_windows:
            return None
        if any(t.justify for _, texts, _ in self.columns for t in texts):
            return None  # a cell justified otherwise than its column
        cells = [[t.plain for t in texts] for _, texts, _ in self.columns]
        if not all(  # each character one cell (no wide or zero-width character, no control), and fits
            s.isprintable() and (s.isascii() or cell_len(s) == len(s)) and len(s) <= width
            for c, (_, _, width) in zip(cells, self.columns, strict=True)
            for s in c
        ):
            return None
        first = self.frame()
        first.add_row(*(texts[0] for _, texts, _ in self.columns))
        printed = "".join(segment.text for segment in console.render(first, options))
        if not printed.endswith("\n"):
            return None
        laid = printed[:-1].split("\n")
        first_row = [c[0] for c in cells]
        x = 0 if self.edge else self.columns[0][2] + 1  # where a row's line has the character between cells
        found = [(i, b) for i, line in enumerate(laid) if line == self._line(first_row, b := line[x : x + 1])]
        if len(found) != 1:
            return None
        at, border = found[0]
        rows = [self._line(row, border) for row in zip(*cells, strict=True)]
        return [Segment(line + "\n") for line in [*laid[:at], *rows, *laid[at + 1 :]]]

    def _line(self, row: Sequence[str], border: str) -> str:
        """One row's line, its cells justified as rich justifies them (right: without trailing spaces)."""
        inner = f" {border} ".join(
            value.rstrip().rjust(width) if right else value.ljust(width)
            for value, (right, _, width) in zip(row, self.columns, strict=True)
        )
        return f"{border} {inner} {border}" if self.edge else inner


def _filled(text: Text, width: int, *, right: bool) -> Text:
    """``text`` padded to ``width`` cells as rich pads a cell, the spaces in its style (rich pads an unstyled
    cell alike)."""
    if not text.style:
        return text
    out = text.copy()
    (out.pad_left if right else out.pad_right)(width - out.cell_len)
    return out


def _natural(column: str, cells: Mapping[str, Sequence[Text]], headers: Mapping[str, str]) -> int:
    """A column's width uncut: its widest line of a cell or of its header."""
    widths = [len(h) for h in headers.get(column, column).split("\n")]
    for t in cells[column]:
        widths.append(_cell_width(t) if "\n" not in t.plain else max(map(cell_len, t.plain.split("\n"))))
    return max(widths)


def _cell_width(text: Text) -> int:
    """``text.cell_len``, quicker for most cells: printable ASCII takes a cell a character."""
    plain = text.plain
    return len(plain) if plain.isascii() and plain.isprintable() else text.cell_len


def _distinct_width(column: str, texts: Sequence[Text], least: int) -> int:
    """The narrowest width from ``least`` at which the texts, cut by :func:`clip`, stay as many different
    ones (``gemini-3.1-pro-preview`` and ``…-customtools`` both cut to ``gemini-3.1-pro-…`` read as one)."""
    different = len({t.plain for t in texts})
    widest = max([least, *(t.cell_len for t in texts)])
    fits = (w for w in range(least, widest) if len({clip(column, t, w).plain for t in texts}) == different)
    return next(fits, widest)


def _stats_cells(rows: pl.DataFrame | RowTable, columns: Sequence[str]) -> dict[str, list[Text]]:
    """Every cell of each of ``columns``; a session by its short id, marked when ctxtool compacted it: a
    copy (``derived_from``) or compacted in place (``compacted_at``)."""
    shorts = short_session_ids(rows.get_column("session").to_list()) if "session" in columns else {}
    present = set(rows.columns)
    unpriced = rows.get_column("unpriced").to_list() if "unpriced" in present else [0] * rows.height
    full: dict[str, list[Text]] = {}
    for col in columns:
        values = rows.get_column(col).to_list()
        if col == "session":
            full[col] = [Text(shorts.get(v, v)) if isinstance(v, str) else cell(col, v) for v in values]
        elif _FORMATS.get(col) == "count":  # as ``cell`` prints an int, without its tests
            full[col] = [Text(f"{v:,}") if v.__class__ is int else cell(col, v) for v in values]
        else:
            full[col] = [cell(col, v) for v in values]
        if col == "cost":
            full[col] = [_partial(t, col, m) for t, m in zip(full[col], unpriced, strict=True)]
    if "session" in full:
        marks = [rows.get_column(c).to_list() for c in ("derived_from", "compacted_at") if c in present]
        full["session"] = [
            Text(t.plain + COMPACTED_MARK, style=t.style) if any(v is not None for v in m) else t
            for t, *m in zip(full["session"], *marks, strict=True)
        ]
    return full


def parts_note(totals: Mapping[str, Any]) -> str | None:
    """The caption line for a ``total`` the API recorded that is not the sum of its parts, kept as recorded
    (``measure.tokens.request_total``)."""
    if "total" not in totals or any(k not in totals for k in TOKEN_PARTS):
        return None
    off = int(totals["total"] or 0) - sum(int(totals[k] or 0) for k in TOKEN_PARTS)
    if not off:
        return None
    return (
        f"total is {human_int(abs(off))} {'more' if off > 0 else 'less'} than the sum of the token columns: "
        "totals recorded by the API that disagree with their parts are kept as recorded (see the warning)."
    )


def short_session_ids(names: Sequence[str | None]) -> dict[str, str]:
    """The last 8 characters of each session name (Gemini CLI ends a file name with the first 8 of the
    session id), longer where two different sessions would otherwise read the same."""
    out: dict[str, str] = {}
    n = 8
    pending = sorted({n for n in names if n})
    while pending:
        groups: dict[str, list[str]] = {}
        for name in pending:
            groups.setdefault(name[-n:], []).append(name)
        out.update((group[0], short) for short, group in groups.items() if len(group) == 1)
        pending = [name for group in groups.values() if len(group) > 1 for name in group]
        n += 1
    return out


def clip(column: str, text: Text, width: int) -> Text:
    """``text`` cut to ``width`` cells with an ellipsis: a path from the left, keeping its end, anything else
    from the right. What a path column says instead of a path (``nothing written``) goes onto more lines."""
    if text.cell_len <= width:
        return text
    plain = text.plain
    if column in _PATH_COLUMNS:
        if "/" not in plain and "\\" not in plain:  # a word about the file, not its path: on more lines
            return wrap_text(text, width)
        return Text(short_path(plain, width), style=text.style)
    # a project, or a target that is a file: its end is what tells it apart
    if "/" in plain and (column == "project" or (column == "target" and " " not in plain)):
        return Text(left_ellipsis(plain, width), style=text.style)
    cut = text.copy()
    cut.truncate(width, overflow="ellipsis")
    return cut


def left_ellipsis(text: str, width: int) -> str:
    """The end of ``text`` in at most ``width`` cells, preceded by ``…``; cut at a ``/`` when one is near."""
    if cell_len(text) <= width:
        return text
    tail = ""
    for ch in reversed(text):
        if cell_len(ch + tail) > width - 1:
            break
        tail = ch + tail
    slash = tail.find("/")
    if 0 <= slash < len(tail) // 3:
        tail = tail[slash:]
    return "…" + tail


def short_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` cells, keeping what identifies a session: the folders nearest the file
    go first, then the middle of a Gemini CLI file name (``…/chats/session-…-cd7b13fa.jsonl``)."""
    if cell_len(path) <= width:
        return path
    parts = path.split("/")
    name = parts[-1]
    short_name = _short_name(name)
    for last in (name, short_name):
        for k in range(1, len(parts)):
            candidate = "…/" + "/".join([*parts[k:-1], last])
            if cell_len(candidate) <= width:
                return candidate
    session_id = "…" + short_name.removeprefix("session-…")  # …-cd7b13fa.jsonl: the id, never cut into
    if short_name != name and cell_len(session_id) <= width:
        return session_id
    return left_ellipsis(short_name, width)


def _short_name(name: str) -> str:
    """A Gemini CLI session file's name without its time (``session-…-cd7b13fa.jsonl``); else ``name``."""
    stem, dot, ext = name.partition(".")
    if stem.startswith("session-") and "-" in stem.removeprefix("session-"):
        return "session-…-" + stem.rsplit("-", 1)[1] + dot + ext
    return name


def two_paths(lead: str, before: str, after: str, width: int) -> str:
    """``lead before → after`` in ``width`` cells: on one line while each path keeps at least its file's
    name (:func:`short_path`), else the second path under the first, after an arrow."""
    one = f"{lead} {before} → {after}"
    if cell_len(one) <= width:
        return one
    room = width - cell_len(f"{lead}  → ")
    first = short_path(before, max(room - cell_len(after), room // 2))
    second = short_path(after, room - cell_len(first))
    names = [(shown, path.split("/")[-1]) for shown, path in ((first, before), (second, after))]
    if all(shown.endswith((name, _short_name(name))) for shown, name in names):
        return f"{lead} {first} → {second}"
    indent = cell_len(lead) + 1
    room = max(width - indent, 20)
    return f"{lead} {short_path(before, room)}\n{'→'.rjust(indent - 1)} {short_path(after, room)}"


def dropped_notes(dropped: Sequence[str], sums: Mapping[str, Any], headers: Mapping[str, str]) -> list[str]:
    """The caption lines that name the columns a narrow terminal left out (as ``headers`` call them): token
    columns with their sums (the totals row), so that what is shown and named adds up to ``total``; then the
    others; then how to see them all."""
    tokens = [c for c in dropped if c in TOKEN_PARTS and c in sums]
    others = [c for c in dropped if c not in tokens]
    lines = []
    if tokens:
        named = " · ".join(f"{column_header(c, headers)} {human_int(sums[c])}" for c in tokens)
        lines.append(f"Counted in total, not shown (too narrow): {named}.")
    if others:
        named = ", ".join(column_header(c, headers) for c in others)
        lines.append(f"Not shown (too narrow): {named}" + ("" if named.endswith(".") else "."))  # compr.
    if lines:
        lines[-1] += " --wide shows every column."
    return lines


def column_header(column: str, headers: Mapping[str, str] | None = None) -> str:
    """What a table's ``headers`` (the stats table's by default) call ``column``, on one line."""
    header = (_HEADERS if headers is None else headers).get(column, column)
    return " ".join(header.split())


def fit_columns(
    columns: Sequence[str],
    cells: Mapping[str, Sequence[Text]],
    *,
    width: int,
    text_min: Mapping[str, int],
    drop_order: Sequence[str],
    wide: bool = False,
    headers: Mapping[str, str] = _HEADERS,
    max_width: Mapping[str, int] = _MAX_WIDTH,
    wrap: Mapping[str, int] | None = None,
    edge: bool = True,
) -> tuple[list[str], dict[str, int], list[str]]:
    """Which columns fit in ``width`` cells, the width of each column that gives way, and the dropped
    columns (in the order of ``columns``). ``cells`` holds every cell of a column (footer included).

    A number column is as wide as its widest value; a text column of ``text_min`` may shrink to that
    minimum; columns go in ``drop_order`` until the rest fit, then the most important of those come back
    where they fit after all. A column of ``wrap`` (its narrowest width) is never cut: when the rest is still
    too wide it narrows, in ``wrap``'s order, onto more lines. Should the table still be too wide, the text
    columns give way past their minimum, down to their header's width, rather than the terminal cropping
    the table. ``edge``: a table with outer borders and padding (else ``show_edge=False, pad_edge=False``).
    With ``wide`` nothing is dropped or cut."""
    wrap = {} if wrap is None else wrap

    @cache
    def natural(col: str) -> int:  # measured once a column: a table of 800 sessions asks 350 times
        return _natural(col, cells, headers)

    def least(col: str) -> int:
        return min(natural(col), text_min[col]) if col in text_min else natural(col)

    def need(cols: Sequence[str]) -> int:  # the table's width with every column at its least
        return sum(least(c) + 3 for c in cols) + (1 if edge else -3)

    if wide:
        return list(columns), {}, []
    cols = list(columns)
    gone: list[str] = []
    for victim in drop_order:
        if need(cols) <= width:
            break
        if victim in cols:
            cols.remove(victim)
            gone.append(victim)
    for back in reversed(gone):
        trial = [c for c in columns if c in cols or c == back]
        if need(trial) <= width:
            cols = trial
    spare = width - need(cols)
    text_width: dict[str, int] = {}
    for col in wrap:  # in its order: the first narrows first
        if spare < 0 and col in cols:
            give = min(-spare, natural(col) - wrap[col])
            text_width[col] = natural(col) - give
            spare += give
    for col in [c for c in cols if c in text_min]:
        if spare < 0:  # still too wide: a text column gives way past its minimum, down to its header's width
            header_width = max(len(h) for h in headers.get(col, col).split("\n"))
            give = -max(0, min(-spare, least(col) - header_width))
        else:
            give = max(0, min(spare, min(natural(col), max_width.get(col, natural(col))) - least(col)))
        text_width[col] = least(col) + give
        spare -= give
    return cols, text_width, [c for c in columns if c not in cols]


def _partial(text: Text, column: str, unpriced: int | None) -> Text:
    """A cost that leaves out requests of unknown price ends with ``+``: it is at least that much."""
    if column == "cost" and unpriced and text.plain != "?":
        return Text(text.plain + "+", style=text.style)
    return text


def unpriced_note(unpriced: int) -> str | None:
    """The caption line that explains a ``+`` after a cost."""
    what = plural(unpriced, "request")
    return f"cost+: leaves out {what} whose model has no known price (see the warning)." if unpriced else None


def hidden_note(requests: int, cost: float) -> str | None:
    """The caption line for Gemini CLI's unrecorded compression calls (an estimate, never in the totals)."""
    head = "Not in the totals: Gemini CLI's compression calls, which it does not record: "
    return f"{head}{plural(requests, 'request')}, estimated {money(cost)}." if requests else None


def print_table(console: Console, table: Table, *, wide: bool = False) -> None:
    """Print ``table``; ``wide`` lets it be as wide as its columns need, past the console's width."""
    if wide:
        from rich.measure import Measurement

        need = Measurement.get(console, console.options.update_width(100_000), table).maximum
        if need > console.width:
            console.width = need  # print(width=) cannot exceed the console's width
    console.print(table)


# --- ctxtool audit ----------------------------------------------------------------------------------

# audit's, diff's and (upper case) compact's and compare's
_STATUS_STYLE = {"fail": "bold red", "skip": "dim", "pass": "green", "removed": "red", "added": "green"}
_STATUS_STYLE |= {"changed": "yellow", "kept": "dim", "COMPRESSED": "green", "CONTENT_TRUNCATED": "cyan"}
_STATUS_STYLE |= {"NOOP": "dim", "FAILED": "bold red", "INFLATED": "yellow"}


def audit_table(
    checks: Sequence[Mapping[str, Any]],
    *,
    title: str,
    caption: str | None = None,
    width: int = 120,
    subjects: Sequence[str] | None = None,
) -> Table:
    """One row per check (its fields formatted as text): status, subject (session or day), rule, value,
    limit and the worst offender. ``subjects``: every session audited, so that short ids stay unique.

    Nothing is cut: the worst offender takes the rest of the width, on more lines; when that is too little,
    a ``limit`` column that only repeats each rule's limit gives way to a caption line; narrower still, the
    offenders are listed under the table, the rule names wrap, and :func:`_make_room` takes the rest."""
    names = [str(c["subject"]) for c in checks]
    every = subjects if subjects is not None else names
    shorts = short_session_ids([s for s in every if not _is_day(s)])
    rows = [
        [Text(str(c["status"]).upper(), style=_STATUS_STYLE.get(str(c["status"]), ""))]
        + [Text(shorts.get(s, s))]
        + [Text(str(c[k])) for k in ("rule", "value", "limit")]
        for c, s in zip(checks, names, strict=True)
    ]
    labels = [f"{r[1].plain} {r[2].plain}" for r in rows]  # a row named under the table, its rule whole
    days = any(_is_day(n) for n in names)
    headers = ["status", "session / day" if days else "session", "rule", "value", "limit"]
    offenders = [Text(str(c.get("offender") or "")) for c in checks]
    fixed = [max([len(h), *(r[i].cell_len for r in rows)]) for i, h in enumerate(headers)]
    widest = max([len("worst"), *(o.cell_len for o in offenders)])
    # The room the worst column has: the width, less the other columns and its own borders and padding.
    room = width - 1 - sum(w + 3 for w in fixed) - 3
    limits: dict[str, str] | None = {}  # each rule's limit, when every check of a rule has the same one
    for c in checks:
        if limits is not None and limits.setdefault(str(c["rule"]), str(c["limit"])) != str(c["limit"]):
            limits = None
    notes = []
    narrowest = min(widest, max(_wrap_min(offenders), _WORST_NARROWEST))
    wider = room + fixed[-1] + 3
    lines = _worst_lines(offenders, room)
    if limits is not None and (
        room < -3  # too wide even without a worst column
        or room < narrowest <= wider
        or lines - _worst_lines(offenders, wider) >= _WORST_LINES_SAVED
    ):
        headers, fixed, room, rows = headers[:-1], fixed[:-1], wider, [r[:-1] for r in rows]
        notes.append("Limits: " + " · ".join(f"{rule} {limit}" for rule, limit in limits.items()) + ".")
    edge, room, dropped = _make_room(rows, headers, fixed, room)
    notes.extend([dropped] if dropped else [])
    show_worst = any(o.plain for o in offenders)
    if show_worst and room < narrowest:
        show_worst = False
        notes.append("Worst offenders (too narrow for a column):")
        notes.extend(f"- {n}: {o.plain}" for n, o in zip(labels, offenders, strict=True) if o.plain)
    notes.extend([caption] if caption else [])  # the verdict stays the last line
    table = Table(**_framed(title, "\n".join(notes) or None, edge))
    for h, w in zip(headers, fixed, strict=True):
        _column(table, h, w, right=h in ("value", "limit"))
    if show_worst:
        _column(table, "worst", min(widest, room), right=False)
    for row, offender in zip(rows, offenders, strict=True):
        table.add_row(*row, *([wrap_text(offender, min(widest, room))] if show_worst else []))
    return table


def _make_room(
    rows: list[list[Text]], headers: list[str], fixed: list[int], room: int
) -> tuple[bool, int, str | None]:
    """Where the columns are too wide even with the rule names at their narrowest (40 columns), until they
    fit: the outer borders go, the ``session / day`` header takes two lines, the status column goes (its
    runs named: the rows come sorted by status), then a ``limit`` column. Then, where they are too wide even
    without a worst column, the rule names wrap after their hyphens, so that the values stay whole. Narrows
    ``rows``, ``headers`` and ``fixed`` in place; returns whether the borders stay, the room left and the
    line naming what went."""
    rules_least = max(len("rule"), _wrap_min([r[headers.index("rule")] for r in rows]))

    def too_wide() -> bool:
        return room + fixed[headers.index("rule")] - rules_least < -3

    edge = True
    if too_wide():
        edge, room = False, room + 4
    if too_wide() and headers[1] == "session / day":
        narrow = max(len("session /"), *(r[1].cell_len for r in rows))
        headers[1], room, fixed[1] = "session /\nday", room + fixed[1] - narrow, narrow
    dropped = []
    for name in ("status", "limit"):
        if too_wide() and name in headers:
            i = headers.index(name)
            what = f" ({_status_runs([r[i].plain for r in rows])})" if name == "status" else ""
            dropped.append(name + what)
            room += fixed[i] + 3
            del headers[i], fixed[i]
            for r in rows:
                del r[i]
    if room < -3:
        at = headers.index("rule")
        narrow = max(rules_least, fixed[at] - (-3 - room))
        for r in rows:
            r[at] = wrap_text(r[at], narrow)
        room += fixed[at] - narrow
        fixed[at] = narrow
    return edge, room, f"Not shown (too narrow): {', '.join(dropped)}." if dropped else None


def _status_runs(statuses: Sequence[str]) -> str:
    """What a dropped status column said, row by row: ``every row FAIL``, or ``the first 17 rows FAIL,
    then 1 SKIP``."""
    runs = [(status, len(list(group))) for status, group in groupby(statuses)]
    if len(runs) == 1:
        return f"every row {runs[0][0]}"
    first, n = runs[0]
    head = f"the first row {first}" if n == 1 else f"the first {n:,} rows {first}"
    return ", then ".join([head, *(f"{n:,} {status}" for status, n in runs[1:])])


# A ``limit`` column gives way when that saves the tallest worst offender this many lines. Under the
# narrowest width the offenders are listed under the table instead.
_WORST_LINES_SAVED = 2
_WORST_NARROWEST = 12


def _worst_lines(offenders: Sequence[Text], width: int) -> int:
    """How many lines the tallest worst offender takes at ``width`` (a great many where it cannot fit)."""
    if width < max(1, _wrap_min(offenders)):
        return 1_000
    return max([1, *(len(wrap_text(o, width).plain.split("\n")) for o in offenders)])


def wrap_text(text: Text, width: int) -> Text:
    """``text`` on lines of at most ``width`` cells, nothing left out: a phrase (up to a comma, or a
    bracketed aside) on one line where it fits, else broken at spaces (an arrow stays with the number
    before it), a word too long after a ``/``, ``-`` or ``_``, then folded; runs of white space as one."""
    lines: list[str] = []
    line = ""
    for phrase in re.split(r"(?<=,) | (?=\()", " ".join(text.plain.split())):
        if line and cell_len(f"{line} {phrase}") <= width:
            line = f"{line} {phrase}"
        elif cell_len(phrase) <= width:
            lines.append(line)
            line = phrase
        else:
            words = _wrap_words(f"{line} {phrase}" if line else phrase, width)
            lines.extend(words[:-1])
            line = words[-1]
    lines.append(line)
    return Text("\n".join(x for x in lines if x) or "", style=text.style)


def _wrap_words(plain: str, width: int) -> list[str]:
    """``plain`` on lines of at most ``width`` cells, broken as :func:`wrap_text` says."""
    lines: list[str] = []
    line = ""
    for piece in _pieces(plain):
        if cell_len((line + piece).rstrip()) <= width:
            line += piece
            continue
        if line:
            lines.append(line.rstrip())
        line = ""
        for part in _hyphen_parts(piece) if cell_len(piece.rstrip()) > width else [piece]:
            if line and cell_len((line + part).rstrip()) > width:
                lines.append(line.rstrip())
                line = ""
            while cell_len(part.rstrip()) > width:  # folded: its longest start that fits, at least one
                end = 1
                while end < len(part) and cell_len(part[: end + 1]) <= width:
                    end += 1
                lines.append(part[:end])
                part = part[end:]
            line += part
    lines.append(line.rstrip())
    return lines


def _pieces(plain: str) -> list[str]:
    """``plain``'s words, each with the space after it, an arrow kept with the word before it."""
    out: list[str] = []
    for word in plain.split():
        if word == "→" and out:
            out[-1] += "→ "
        else:
            out.append(word + " ")
    return out


def _hyphen_parts(piece: str) -> list[str]:
    """A word split after each ``/`` and each ``-`` or ``_`` after a letter or digit (never a minus sign)."""
    return [p for p in re.split(r"(?<=/)|(?<=[0-9A-Za-z][-_])", piece) if p]


def _wrap_min(cells: Sequence[Text]) -> int:
    """The narrowest width :func:`wrap_text` brings ``cells`` to without folding a word."""
    parts = [p for t in cells for piece in _pieces(t.plain) for p in _hyphen_parts(piece)]
    return max([0, *(cell_len(p.rstrip()) for p in parts)])


def _is_day(subject: str) -> bool:
    """An audit subject that is a UTC day (``--max-daily-cost``), not a session."""
    return len(subject) == 10 and subject[4] == "-" and subject[7] == "-" and subject[:4].isdigit()


# --- ctxtool diff -----------------------------------------------------------------------------------

_LABEL_MIN = 8  # the narrowest a label column of ``diff`` gets, on more lines


def diff_summary_table(
    rows: Sequence[Sequence[str]],
    *,
    title: str,
    headers: Sequence[str],
    width: int = 120,
    drop: Sequence[Sequence[int]] = (),
) -> Table:
    """A small table of preformatted cells, at most ``width`` columns wide: a label (onto more lines when
    short of room), then numbers, never cut. Where that is too wide the outer borders go, then the groups
    of column indexes of ``drop``, named under the table with the ``--width`` that shows them all."""
    widths = [
        max([*(len(h) for h in name.split("\n")), *(Text(r[i]).cell_len for r in rows)])
        for i, name in enumerate(headers)
    ]
    least = min(widths[0], _LABEL_MIN)

    def label_room(kept: Sequence[int]) -> int:  # the label's room within the outer borders
        return width - 1 - sum(widths[i] + 3 for i in kept[1:]) - 3

    kept = list(range(len(headers)))
    every = least + sum(widths[i] + 3 for i in kept[1:])  # the least width that shows every column
    gone: list[int] = []
    for group in drop:
        if label_room(kept) + 4 >= least:  # fits without the outer borders
            break
        gone.extend(i for i in group if i in kept)
        kept = [i for i in kept if i not in group]
    room = label_room(kept)
    edge = room >= least
    label = max(_LABEL_MIN, min(widths[0], room if edge else room + 4))
    named = ", ".join(" ".join(headers[i].split()) for i in sorted(gone))
    caption = f"Not shown (too narrow): {named}. --width {every} shows every column." if gone else None
    table = Table(**_framed(title, caption, edge))
    for i in kept:
        _column(table, headers[i], label if i == 0 else widths[i], right=i != 0)
    for row in rows:
        table.add_row(wrap_text(Text(row[0]), label), *(row[i] for i in kept[1:]))
    return table


def diff_message_table(rows: Sequence[Mapping[str, Any]], *, title: str, width: int = 120) -> Table:
    """One row per message: status, before/after position, type, estimated tokens and a preview, which
    takes what the numbers leave of ``width``, down to ``_LABEL_MIN`` cells (then the borders go)."""
    cells = [
        [Text(str(r["status"]), style=_STATUS_STYLE.get(str(r["status"]), ""))]
        + [Text("" if r[k] is None else str(r[k])) for k in ("before_index", "after_index")]
        + [Text(str(r[k])) for k in ("type", "estimate")]
        + [Text(str(r["content"]), overflow="ellipsis", no_wrap=True)]
        for r in rows
    ]
    headers = ("status", "#b", "#a", "type", "est.", "content")
    fixed = [max([len(h), *(row[i].cell_len for row in cells)]) for i, h in enumerate(headers[:-1])]
    room = width - sum(w + 3 for w in fixed) - 4  # the preview's room: borders and padding of six columns
    edge = room >= _LABEL_MIN
    room = max(1, room if edge else room + 4)
    table = Table(title=title, title_justify="left", show_edge=edge, pad_edge=edge)
    for h in headers[:-1]:
        table.add_column(h, justify="right" if h in ("#b", "#a", "est.") else "left", no_wrap=True)
    table.add_column("content", overflow="ellipsis", no_wrap=False, min_width=min(20, width // 4, room))
    for row in cells:
        table.add_row(*row)
    return table


# The failed statuses' names are longer than a table at 80 columns has room for; the table says the part
# that tells them apart and the note under it the whole name (Gemini CLI's CompressionStatus).
_COMPACT_STATUS_CELL = {
    "COMPRESSION_FAILED_INFLATED_TOKEN_COUNT": "FAILED_INFLATED",
    "COMPRESSION_FAILED_EMPTY_SUMMARY": "FAILED_EMPTY",
}
_PLAN_COLUMNS = ("threshold", "split", "cut_outputs")  # a dry run's only
_COMPACT_COLUMNS = ("session", "status", "tokens", "msgs", "facts", *_PLAN_COLUMNS, "output")
_COMPACT_HEADERS = {"msgs": "msgs sum/kept", "facts": "kept facts r/p/c/e/d", "cut_outputs": "cut outputs"}
_FACT_KINDS = ("requests", "paths", "commands", "errors", "directives")  # the facts' r/p/c/e/d
_COMPARE_COLUMNS = ("session", "strategy", "status", "trigger", "tokens", "cut", "kept", "facts", "time")
_BAR_MAX = 40  # cells of a full bar on a wide terminal
_BARS_TWO_LINES = ("strategy", "tokens after /\nbefore", "fact\nretention")
_TOP_COLUMNS = ("session", "rank", "item", "tool", "target", "count", "tokens", "share")


def compact_table(
    reports: Sequence[Mapping[str, Any]],
    *,
    title: str = "ctxtool compact",
    plan: bool = False,
    width: int = 120,
    wide: bool = False,
) -> tuple[Table, list[str]]:
    """One row per session of ``ctxtool compact``: status, tokens before → after, messages summarised /
    kept, fact retention and where the result went; ``plan`` (a dry run) adds the threshold, the split turn
    and the number of tool outputs the budget would cut. Returns the table and the lines to print under it,
    among them why a row wrote nothing or failed (a reason cut to fit a column would say nothing)."""
    names = session_labels([str(r.get("input_path", "")) for r in reports])
    cols: dict[str, list[Text]] = {c: [] for c in _COMPACT_COLUMNS}
    notes: list[str] = []
    for r, name in zip(reports, names, strict=True):
        status = str(r.get("status"))
        before, after = r.get("tokens_before"), r.get("tokens_after")
        summarised, kept = r.get("messages_summarised"), r.get("messages_kept")
        retention = r.get("retention") or {}
        facts = "/".join(_retention_cell(retention.get(k)) for k in _FACT_KINDS) if retention else "–"
        if r.get("error"):
            where = "failed (see below)"
            notes.append(f"{name}: {r['error']}")
        elif r.get("output_path"):
            where = str(r["output_path"])
            with suppress(ValueError):
                where = str(Path(where).relative_to(Path.cwd()))
        else:
            where = "nothing written" + (" (see below)" if r.get("reason") else "")
            if r.get("reason"):
                notes.append(f"{name}: {status}, nothing written: {r['reason']}")
        if r.get("output_path") and r.get("reason"):  # a COMPRESSED history that grew
            notes.append(f"{name}: INFLATED: {r['reason']}")
        if status == "COMPRESSED" and before is not None and after is not None and after > before:
            status = "INFLATED"  # Gemini CLI's word for a larger result (COMPRESSION_FAILED_INFLATED_...)
        limit, share = r.get("token_limit"), r.get("threshold")
        shown = _COMPACT_STATUS_CELL.get(status, status)
        values = {
            "session": Text(name),
            "status": Text(shown, style=_STATUS_STYLE.get(status, "yellow")),
            "tokens": Text("–" if before is None else f"{human_int(before)} → {human_int(after)}"),
            "msgs": Text("–" if summarised is None else f"{summarised}/{kept}"),
            "facts": Text(facts),
            "threshold": Text("–" if limit is None or share is None else human_int(int(share * limit))),
            "split": Text("–" if r.get("split_index") is None else str(r["split_index"])),
            "cut_outputs": Text(str(len(r.get("tool_outputs_truncated") or []))),
            "output": Text(where),
        }
        for c in _COMPACT_COLUMNS:
            cols[c].append(values[c])
    columns = [c for c in _COMPACT_COLUMNS if plan or c not in _PLAN_COLUMNS]
    headers = dict(_COMPACT_HEADERS, output="would write" if plan else "output")
    # A status wraps too (FAILED_INFLATED beside a long label at 40 columns). The output path goes last, once
    # it is cut to its header's width and the table still does not fit (40 columns): the session, its status
    # and its tokens say what the run did.
    drop = ("threshold", "cut_outputs", "split", "msgs", "facts")
    right = {"tokens", "msgs", "facts", *_PLAN_COLUMNS}
    fit = _Fit(headers, right, {"output": 24}, drop, wrap=("tokens", "status"), last=("output",))
    table, note = _fitted_table(title, columns, cols, fit, width=width, wide=wide)
    standins = [n for r, n in zip(reports, names, strict=True) if r.get("env_source") == "stand-in"]
    if standins:
        which = ", ".join(standins) if len(standins) <= 3 else plural(len(standins), "session")
        notes.append(
            f"No <session_context> stored in {which}: a stand-in was assumed in the token counts; "
            "--workspace DIR builds Gemini CLI's own."
        )
    return table, notes + ([note] if note else [])


def session_labels(paths: Sequence[str]) -> list[str]:
    """The short id of each session file (:func:`short_session_ids` of the file names without their
    extension), with the extension where a ``.json`` and a ``.jsonl`` of one session are both listed."""
    stems = [p.rsplit("/", 1)[-1].removesuffix(".jsonl").removesuffix(".json") for p in paths]
    shorts = short_session_ids(stems)
    labels = []
    for path, stem in zip(paths, stems, strict=True):
        label = shorts.get(stem, stem)
        if len({q for q, t in zip(paths, stems, strict=True) if t == stem}) > 1:
            label += path[path.rfind(".") :] if path.endswith((".json", ".jsonl")) else ""
        labels.append(label)
    return labels


_Cells = Mapping[str, Sequence[Text]]


class _Fit(NamedTuple):
    """How a :func:`_fitted_table` lays out its columns, besides their cells."""

    headers: Mapping[str, str]
    right: set[str]  # right-justified
    text_min: Mapping[str, int]
    drop_order: Sequence[str]
    wrap: Sequence[str] = ()
    last: Sequence[str] = ()


def _fitted_table(
    title: str, columns: Sequence[str], cells: _Cells, fit: _Fit, *, width: int, wide: bool
) -> tuple[Table, str | None]:
    """A borderless table of the ``columns`` that fit ``width`` (:func:`fit_columns`), each as wide as its
    widest line: the text columns of ``text_min`` give way (cut, a path from the left), those of ``wrap``
    (numbers among them) go onto more lines, their headers too. The columns of ``last`` go only where the
    table is still too wide with the others dropped, wrapped and cut (a ``compact`` table's output path at
    40 columns). Returns the table and the line that names the columns dropped, if any."""
    headers, right, text_min, drop_order, wrap, last = fit
    wrap_min = {c: _wrap_min([Text(headers.get(c, c)), *cells[c]]) for c in wrap}
    fitting = partial(fit_columns, columns, cells, width=width, wide=wide, headers=headers, max_width={})
    for extra in ((), tuple(last)):
        drops = [*drop_order, *extra]
        kept, text_width, dropped = fitting(text_min=text_min, drop_order=drops, wrap=wrap_min, edge=False)
        table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        shown: list[list[Text]] = []
        for col in kept:
            w = text_width.get(col)
            header = headers.get(col, col)
            if w is None:
                column_cells = list(cells[col])
            elif col in wrap_min:
                column_cells = [wrap_text(t, w) for t in cells[col]]
                header = wrap_text(Text(header), w).plain
            else:
                column_cells = [clip(col, t, w) for t in cells[col]]
            lines = [*header.split("\n"), *(line for t in column_cells for line in t.plain.split("\n"))]
            _column(table, header, max(Text(line).cell_len for line in lines), right=col in right)
            shown.append(column_cells)
        if wide or _borderless_width(table) <= width:
            break
    for row in zip(*shown, strict=True):
        table.add_row(*row)
    return table, "\n".join(dropped_notes(dropped, {}, headers)) or None


def _borderless_width(table: Table) -> int:
    """How wide a borderless table of fixed column widths prints: the columns and `` │ `` between each two."""
    return sum(c.max_width or 0 for c in table.columns) + 3 * (len(table.columns) - 1)


def _retention_cell(kind: Any) -> str:
    ok = isinstance(kind, Mapping) and kind.get("total")
    return f"{100 * int(kind['kept']) // int(kind['total'])}%" if ok else "–"


def compare_table(
    rows: Sequence[Mapping[str, Any]], *, title: str = "ctxtool compare", width: int = 120, wide: bool = False
) -> tuple[Table, list[str]]:
    """One row per session and strategy of ``ctxtool compare``, and the lines to print under it. Narrow, the
    time, trigger, messages kept and status go, then the tokens and the facts go onto more lines; narrower
    still (40 columns), the strategy stands under its session, and only then does the reduction go."""
    names = session_labels([str(r.get("session", "")) for r in rows])
    cols: dict[str, list[Text]] = {c: [] for c in _COMPARE_COLUMNS}
    for r, name in zip(rows, names, strict=True):
        status = str(r.get("status"))
        trig = r.get("would_trigger")
        before, after = r.get("tokens_before"), r.get("tokens_after")
        retained = [r.get(f"{k}_retention") for k in _FACT_KINDS]
        facts = "/".join("–" if v is None else f"{float(v):.0f}%" for v in retained)
        values = {
            "session": Text(name),
            "strategy": Text(str(r.get("strategy"))),
            "status": Text(status, style=_STATUS_STYLE.get(status, "yellow")),
            "trigger": Text("n/a" if trig is None else f"turn {r.get('trigger_turn')}" if trig else "no"),
            "tokens": Text("–" if None in (before, after) else f"{human_int(before)} → {human_int(after)}"),
            "cut": Text("–" if r.get("reduction") is None else f"{100 * float(r['reduction']):.0f}%"),
            "kept": Text("–" if r.get("messages_kept") is None else str(r["messages_kept"])),
            "facts": Text(facts),
            "time": Text("–" if r.get("seconds") is None else f"{float(r['seconds']):.2f}s"),
        }
        for c in _COMPARE_COLUMNS:
            cols[c].append(values[c])
    columns: Sequence[str] = _COMPARE_COLUMNS
    headers = {"facts": "facts r/p/c/e/d"}
    for stacked in (False, True):
        if stacked:  # narrower still (40 columns): the strategy under its session, in one column
            session, strategy = cols.pop("session"), cols.pop("strategy")
            cols["session"] = [Text(f"{a.plain}\n{b.plain}") for a, b in zip(session, strategy, strict=True)]
            columns = [c for c in _COMPARE_COLUMNS if c != "strategy"]
            headers["session"] = "session\nstrategy"
        # The facts kept are the point of the comparison: never dropped; they and the tokens wrap instead.
        # The reduction restates the tokens: it goes once stacked and still too wide.
        right = {"trigger", "tokens", "cut", "kept", "facts", "time"}
        drop = ("time", "trigger", "kept", "status")
        fit = _Fit(headers, right, {}, drop, wrap=("tokens", "facts"), last=("cut",) if stacked else ())
        table, note = _fitted_table(title, columns, cols, fit, width=width, wide=wide)
        if wide or _borderless_width(table) <= width:
            break
    return table, [note] if note else []


def compare_bars(means: Sequence[Mapping[str, Any]], *, width: int = 80) -> Table:
    """A bar chart in the terminal, at most ``width`` columns wide: mean tokens after (share of before) and
    mean retention per strategy. The bars give way to the width; names and numbers are never cut."""
    table = Table(title="per strategy (mean over sessions)", title_justify="left", show_edge=False, box=None)
    headers = ("strategy", "tokens after / before", "fact retention")
    rows = []
    for m in means:
        before, after = (float(m.get(k) or 0) for k in ("tokens_before", "tokens_after"))
        ret = m.get("retention")
        share = min(1.0, after / before) if before else 0.0
        kept = (0.0, " –") if ret is None else (float(ret) / 100, f" {float(ret):.0f}%")
        tokens = f" {human_int(round(after))} / {human_int(round(before))}"
        rows.append((str(m.get("strategy")), share, tokens, *kept))
    name_w = max([len(headers[0]), *(len(r[0]) for r in rows)])
    tokens_w = max([0, *(len(r[2]) for r in rows)])
    ret_w = max([0, *(len(r[4]) for r in rows)])

    def table_width(bar: int, heads: Sequence[str], pad: bool) -> int:  # a cell of padding either side
        head_w = [max(len(line) for line in h.split("\n")) for h in heads]
        return (6 if pad else 4) + name_w + max(head_w[1], bar + tokens_w) + max(head_w[2], bar + ret_w)

    # Narrower (40 columns), the headers take two lines, then the table's outer padding goes: the names and
    # the numbers stay whole.
    layouts = [(headers, True), (_BARS_TWO_LINES, True), (_BARS_TWO_LINES, False)]
    heads, pad = next(((h, p) for h, p in layouts if table_width(1, h, p) <= width), layouts[-1])
    table.pad_edge = pad
    bar = next((b for b in range(_BAR_MAX, 1, -1) if table_width(b, heads, pad) <= width), 1)
    for header in heads:
        table.add_column(header, no_wrap=True)
    for name, share, tokens, ret_share, retention in rows:
        bars = Text("█" * round(share * bar), style="cyan"), Text("█" * round(ret_share * bar), style="green")
        table.add_row(name, bars[0].append(tokens), bars[1].append(retention))
    return table


def top_table(
    rows: pl.DataFrame, *, title: str, width: int = 120, wide: bool = False
) -> tuple[Table, list[str]]:
    """``stats --top``: per session, its largest items in context, and the lines to print under it."""
    shorts = short_session_ids(rows.get_column("session").to_list())
    cols: dict[str, list[Text]] = {c: [] for c in _TOP_COLUMNS}
    for r in rows.iter_rows(named=True):
        cols["session"].append(Text(shorts.get(r["session"], r["session"])))
        cols["rank"].append(Text(str(r["rank"])))
        cols["item"].append(Text(str(r["item"])))
        cols["tool"].append(Text(r["tool"] or "–", style="" if r["tool"] else "dim"))
        cols["target"].append(Text(" ".join(str(r["target"] or "").split()) or "–"))
        cols["count"].append(Text(str(r["count"])))
        cols["tokens"].append(Text(human_int(r["tokens"])))
        cols["share"].append(Text(percent(r["share"])))
    # "of ctx", not "ctx %": every other table's "ctx %" is a share of the model's limit (context_share).
    headers = {"tokens": "~tokens", "share": "of ctx"}
    # The item (``tool`` / ``output``) wraps. The share only restates the tokens (of the request's context):
    # it goes before the item or its target, which say what the tokens are.
    right = {"rank", "count", "tokens", "share"}
    fit = _Fit(headers, right, {"target": 12}, ("count", "rank", "tool"), wrap=("item",), last=("share",))
    table, note = _fitted_table(title, _TOP_COLUMNS, cols, fit, width=width, wide=wide)
    notes = [
        "Tokens are estimates (Gemini CLI's estimator, scaled to the recorded prompt).",
        "of ctx: the share of that request's context (ctx %, elsewhere: of the limit).",
    ]
    return table, [*notes, note] if note else notes
