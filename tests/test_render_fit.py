"""Tables fit the terminal: short session ids, paths cut from the left, numbers never cut, --wide."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text

from ctxtool.cli import run
from ctxtool.render import tables as render
from tests.conftest import FIXTURES, REAL_SESSIONS

ROOT = FIXTURES / "gemini"


def test_short_ids_are_the_last_8_and_grow_only_where_two_sessions_collide() -> None:
    names = [
        "session-2026-04-25T01-53-b1b4c413",
        "session-2026-07-22T01-38-a2a-serv",
        "session-2026-07-23T09-12-a2a-serv",
        "p9m2zt",
    ]
    assert render.short_session_ids(names) == {
        "session-2026-04-25T01-53-b1b4c413": "b1b4c413",
        "session-2026-07-22T01-38-a2a-serv": "8-a2a-serv",
        "session-2026-07-23T09-12-a2a-serv": "2-a2a-serv",
        "p9m2zt": "p9m2zt",
    }


def test_session_labels_name_the_extension_only_for_a_json_jsonl_pair() -> None:
    paths = ["a/session-x-abcd1234.json", "a/session-x-abcd1234.jsonl", "a/session-y-c0ffee01.jsonl"]
    assert render.session_labels(paths) == ["abcd1234.json", "abcd1234.jsonl", "c0ffee01"]
    assert render.session_labels(["a/session-x-abcd1234.json"] * 3) == ["abcd1234"] * 3


@pytest.mark.parametrize(
    ("width", "expected"),
    [
        (200, "/home/u/.gemini/tmp/proj/chats/session-2026-04-25T01-53-cd7b13fa.jsonl"),
        (52, "…/proj/chats/session-2026-04-25T01-53-cd7b13fa.jsonl"),
        (50, "…/chats/session-2026-04-25T01-53-cd7b13fa.jsonl"),
        (40, "…/proj/chats/session-…-cd7b13fa.jsonl"),
        (32, "…/chats/session-…-cd7b13fa.jsonl"),
        (26, "…/session-…-cd7b13fa.jsonl"),
        (20, "…-cd7b13fa.jsonl"),
        (12, "…b13fa.jsonl"),
    ],
)
def test_paths_are_shortened_from_the_left(width: int, expected: str) -> None:
    path = "/home/u/.gemini/tmp/proj/chats/session-2026-04-25T01-53-cd7b13fa.jsonl"
    got = render.short_path(path, width)
    assert got == expected
    assert len(got) <= width


BEFORE = "/home/u/.gemini/tmp/proj/chats/session-2026-04-25T01-53-cd7b13fa.jsonl"


@pytest.mark.parametrize(
    ("width", "expected"),
    [
        (120, [f"ctxtool diff {BEFORE} → /tmp/out/compacted.jsonl"]),
        (80, ["ctxtool diff …/proj/chats/session-…-cd7b13fa.jsonl → /tmp/out/compacted.jsonl"]),
        (
            60,
            [
                "ctxtool diff …/chats/session-2026-04-25T01-53-cd7b13fa.jsonl",
                "           → /tmp/out/compacted.jsonl",
            ],
        ),
        (40, ["ctxtool diff …/session-…-cd7b13fa.jsonl", "           → /tmp/out/compacted.jsonl"]),
    ],
)
def test_diff_names_both_files_within_the_width(width: int, expected: list[str]) -> None:
    """The first line of ``ctxtool diff``: one line while each path keeps the name that tells its file apart
    (no ``…ssion-…`` cut into it), else the second path under the first; never past the width."""
    lines = render.two_paths("ctxtool diff", BEFORE, "/tmp/out/compacted.jsonl", width).split("\n")
    assert lines == expected
    assert all(len(line) <= width for line in lines)


def test_narrow_stats_drop_columns_name_them_and_wide_shows_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["stats", str(ROOT), "--by", "session", "--width", "80", "--no-cache"]) == 0
    narrow = capsys.readouterr().out
    assert max(len(line) for line in narrow.splitlines()) <= 80
    # The token columns left out are named with their sums: 226,536 + 6,681 + 242,164 + 2,967 + 100 = 478,448.
    assert "Counted in total, not shown (too narrow): thoughts 2,967 · tool 100." in narrow
    # Named as the headers of a wider table name them (``--wide`` below), not by their JSON fields.
    assert "Not shown (too narrow): start, turns, req, peak ctx," in narrow
    assert "--wide shows every column." in narrow
    assert "│ c4e5f6a7 " in narrow  # the short id, whole
    assert "147,000" in narrow  # numbers whole, every digit (input without the 152,000 cached)
    assert "302,100" in narrow
    header = next(line for line in narrow.splitlines() if "session" in line and "project" in line)
    assert [c.strip() for c in header.split("┃")[3:-1]] == ["input", "output", "cached", "total", "cost"]

    assert run(["stats", str(ROOT), "--by", "session", "--width", "80", "--no-cache", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "Not shown" not in wide
    header = next(line for line in wide.splitlines() if "session" in line and "project" in line)
    for column in ("start", "turns", "thoughts", "tool", "peak ctx", "cache %", "compr."):
        assert column in header
    # The whole project hash, uncut, because --wide lets the table be wider than the terminal.
    assert "2136a2490b0bdc8f317d3e16aecb6c0b6c264127ce17e17345fe6c0dc2ce7069" in wide


def test_a_long_file_target_keeps_its_name_a_command_its_start() -> None:
    path = "src/components/dashboard/MasteryGrid.tsx"
    cut = render.clip("target", Text(path), 16).plain
    assert cut.startswith("…")
    assert cut.endswith("MasteryGrid.tsx")
    command = "npm run build -- --mode production"
    assert render.clip("target", Text(command), 16).plain.startswith("npm run build")


# --- what a reader checks by hand: the numbers add up, nothing is cut, nothing is wider than the terminal ---

WIDTHS = (60, 80, 100, 120)
BYS = ("session", "turn", "request", "model", "project", "day", "week", "month")
TOKEN_HEADERS = ("input", "output", "thoughts", "cached", "tool")
HIDDEN = re.compile(r"Counted in total, not shown \(too narrow\): (.+?)\.(?: |$)")


def _run_at(capsys: pytest.CaptureFixture[str], width: int, *args: str) -> str:
    capsys.readouterr()
    run([*args, "--width", str(width)])
    out = capsys.readouterr().out
    for line in out.splitlines():
        assert len(line) <= width, f"wider than {width}: {line!r}"
    return out


def _cells(line: str, bar: str) -> list[str]:
    return [c.strip() for c in line.split(bar)[1:-1]]


def _boxed(out: str) -> tuple[list[str], list[list[str]], list[str], str]:
    """A stats table's header, body rows and totals row, and its caption joined into one line."""
    lines = out.splitlines()
    header = _cells(next(line for line in lines if line.startswith("┃")), "┃")
    footer_at = next(i for i, line in enumerate(lines) if line.startswith("├"))
    body = [_cells(line, "│") for line in lines[:footer_at] if line.startswith("│")]
    totals = _cells(lines[footer_at + 1], "│")
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    caption = " ".join(line.strip() for line in lines[end + 1 :])
    return header, body, totals, caption


def _count(text: str) -> int:
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", text), f"not a whole count: {text!r}"
    return int(text.replace(",", ""))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("by", BYS)
def test_stats_tokens_shown_and_named_add_up_to_the_total(
    by: str, width: int, capsys: pytest.CaptureFixture[str]
) -> None:
    run(["stats", str(ROOT), "--by", by, "--format", "json"])
    sums = json.loads(capsys.readouterr().out)["totals"]
    header, body, totals, caption = _boxed(_run_at(capsys, width, "stats", str(ROOT), "--by", by))
    assert "total" in header
    assert "cost" in header
    assert totals[0] == "total"
    row = dict(zip(header, totals, strict=True))
    assert _count(row["total"]) == sums["total"]
    assert row["cost"] == f"${sums['cost']:,.2f}"
    for cells in [*body, totals]:
        for name, text in zip(header, cells, strict=True):
            if name not in ("session", "project", "model", "prompt", "timestamp", "start"):
                assert "…" not in text, f"{name} cut: {text!r}"
    shown = {h: _count(row[h]) for h in TOKEN_HEADERS if h in header}
    named = HIDDEN.search(caption)
    hidden = {}
    if named:
        for item in named.group(1).split(" · "):
            name, _, value = item.rpartition(" ")
            hidden[name] = _count(value)
    assert not set(shown) & set(hidden)
    assert sum(shown.values()) + sum(hidden.values()) == sums["total"]
    # Every token kind with tokens in it is either a column or named, with its own sum.
    for kind in TOKEN_HEADERS:
        if sums[kind]:
            assert shown.get(kind, hidden.get(kind)) == sums[kind], kind


def _rows(out: str, bar: str, first: int, starts: str = "") -> list[list[str]]:
    """The rows of a table whose cells may take several lines: a row starts where column ``first`` has
    text (``starts`` in it, if given); a cell's lines joined as they were broken (a space, or nothing after
    a ``/``, ``-`` or ``_``)."""
    rows: list[list[list[str]]] = []
    for line in out.splitlines():
        if bar not in line or line.lstrip().startswith(("┃", "━", "┏", "┡", "└")):
            continue
        cells = _cells(line, bar) if line.startswith(bar) else [c.strip() for c in line.split(bar)]
        if (starts in cells[first] if starts else cells[first]) or not rows:
            rows.append([[c] if c else [] for c in cells])
        else:
            for kept, more in zip(rows[-1], cells, strict=True):
                kept.extend([more] if more else [])
    joined = []
    for row in rows:
        out_row = []
        for parts in row:
            text = ""
            for part in parts:
                text += part if not text or text.endswith(("/", "-", "_")) else " " + part
            out_row.append(text)
        joined.append(out_row)
    return joined


AUDIT = (
    "--no-config",
    "--max-session-tokens",
    "40k",
    "--max-context-share",
    "10%",
    "--min-cache-ratio",
    "30%",
)


@pytest.mark.parametrize("width", WIDTHS)
def test_audit_keeps_every_number_and_the_worst_offender_whole(
    width: int, capsys: pytest.CaptureFixture[str]
) -> None:
    run(["audit", str(ROOT), *AUDIT, "--format", "json"])
    checks = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["status"] != "pass"]
    out = _run_at(capsys, width, "audit", str(ROOT), *AUDIT)
    assert "…" not in out
    lines = out.splitlines()
    header = _cells(next(line for line in lines if line.startswith("┃")), "┃")
    rows = [dict(zip(header, r, strict=True)) for r in _rows(out, "│", 0)]
    assert [r["rule"] for r in rows] == [c["rule"] for c in checks]
    caption = " ".join(line.strip() for line in lines[next(i for i, x in enumerate(lines) if x[0] == "└") :])
    offenders = [c["offender"] for c in checks if c["offender"]]
    assert offenders
    if "worst" in header:
        assert [r["worst"] for r in rows if r["worst"]] == offenders
    else:
        for c in checks:
            if c["offender"]:
                assert f"{c['rule']}: {c['offender']}" in caption
    if "limit" not in header:
        for c in checks:
            assert re.search(rf"Limits: .*{c['rule']} [\d.,%]+", caption)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_keeps_its_numbers_and_facts_whole(width: int, capsys: pytest.CaptureFixture[str]) -> None:
    chats = ROOT / "tmp" / "ctxdemo" / "chats"
    run(["compare", str(chats), "--format", "json"])
    expected = json.loads(capsys.readouterr().out)["rows"]
    out = _run_at(capsys, width, "compare", str(chats))
    assert "…" not in out
    table = out.split("\n\n", 1)[0]
    header_lines = [line for line in table.splitlines() if "┃" in line]
    header = [
        " ".join(w for w in words if w)
        for words in zip(*([c.strip() for c in line.split("┃")] for line in header_lines), strict=True)
    ]
    assert "facts r/p/c/e/d" in header
    assert "tokens" in header
    rows = [dict(zip(header, r, strict=True)) for r in _rows(table, "│", 0)]
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        assert row["strategy"] == want["strategy"]
        assert row["tokens"] == f"{want['tokens_before']:,} → {want['tokens_after']:,}"
        assert re.fullmatch(r"((\d+%|–)/){4}(\d+%|–)", row["facts r/p/c/e/d"]), row
    bars = out.split("per strategy (mean over sessions)", 1)[1]
    for want in {r["strategy"] for r in expected}:
        assert re.search(rf"^ {re.escape(want)} ", bars, re.MULTILINE)


def test_a_recorded_total_that_disagrees_with_its_parts_is_said() -> None:
    sums = {"input": 10, "output": 5, "thoughts": 0, "cached": 80, "tool": 0, "total": 100}
    assert render.parts_note(sums) is not None
    assert "5 more than the sum" in str(render.parts_note(sums))
    assert render.parts_note({**sums, "total": 95}) is None


@pytest.mark.parametrize(
    ("text", "width", "lines"),
    [
        ("turn 24 (8,378,194 tokens)", 22, ["turn 24", "(8,378,194 tokens)"]),
        ("turn 2, request 91000000-0000-4000-8000-000000000006 (120,000 of 1,048,576 tokens)", 24,
         ["turn 2, request", "91000000-0000-4000-8000-", "000000000006 (120,000 of", "1,048,576 tokens)"]),
        ("790,242 → 330,034", 9, ["790,242 →", "330,034"]),
        ("facts r/p/c/e/d", 10, ["facts", "r/p/c/e/d"]),
        ("100%/100%/67%/–/–", 10, ["100%/100%/", "67%/–/–"]),
    ],
)  # fmt: skip
def test_wrapped_text_keeps_every_character_and_breaks_between_words(
    text: str, width: int, lines: list[str]
) -> None:
    assert render.wrap_text(Text(text), width).plain.split("\n") == lines


class _Values:
    def __init__(self, values: list[object]) -> None:
        self.values = values

    def to_list(self) -> list[object]:
        return list(self.values)


class _Rows:
    """A row table that is not a polars DataFrame: what a polars-free ``stats`` hands the renderer."""

    def __init__(self, data: dict[str, list[object]]) -> None:
        self.data = data

    @property
    def columns(self) -> list[str]:
        return list(self.data)

    @property
    def height(self) -> int:
        return len(next(iter(self.data.values())))

    def get_column(self, name: str) -> _Values:
        return _Values(self.data[name])


def test_the_stats_table_reads_any_row_table_and_names_what_it_leaves_out() -> None:
    from rich.console import Console

    rows = _Rows(
        {
            "session": ["session-2026-01-01T00-00-aaaa1111", "session-2026-01-02T00-00-bbbb2222"],
            "derived_from": [None, "aaaa1111-0000"],
            "input": [1_000, 2_000],
            "output": [10, 20],
            "thoughts": [5, 0],
            "cached": [100_000, 200_000],
            "tool": [0, 0],
            "total": [101_015, 202_020],
            "cost": [0.5, None],
            "unpriced": [0, 1],
        }
    )
    sums = {"input": 3_000, "output": 30, "thoughts": 5, "cached": 300_000, "tool": 0, "total": 303_035}
    sums |= {"cost": 0.5, "unpriced": 1}
    table = render.stats_table(rows, sums, by="session", title="t", width=52)
    console = Console(width=52, no_color=True, highlight=False)
    with console.capture() as capture:
        console.print(table)
    out = capture.get()
    assert "bbbb2222 (compacted)" in out
    assert "$0.50+" in out
    assert " tool " not in out  # no request recorded tool tokens: no column, nothing to name
    header, _, totals, caption = _boxed(out)
    named = HIDDEN.search(caption)
    assert named is not None
    row = dict(zip(header, totals, strict=True))
    shown = sum(_count(row[h]) for h in TOKEN_HEADERS if h in header)
    hidden = sum(_count(item.rpartition(" ")[2]) for item in named.group(1).split(" · "))
    assert shown + hidden == 303_035


def _uncropped_width(table: object, width: int) -> int:
    """How wide ``table`` prints on a terminal ``width`` columns wide, lines past the width left whole."""
    import io

    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(table, crop=False)
    return max(len(line) for line in console.file.getvalue().splitlines())  # type: ignore[attr-defined]


@pytest.mark.parametrize("width", [60, 70])
def test_the_compact_table_fits_the_width_instead_of_being_cropped(
    width: int, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Where the key columns and the output's least width are wider than the terminal, the output path gives
    way further (to its session id, ``…-4b1e9c2a.json``) rather than the terminal cropping the table's end."""
    assert run(["compact", str(ROOT), "--dry-run", "--force", "--format", "json"]) == 0
    rows = json.loads(capsysbinary.readouterr().out)["sessions"]
    table, _ = render.compact_table(rows, plan=True, width=width)
    assert _uncropped_width(table, width) <= width
    written = [str(c) for c in table.columns[-1]._cells if "4b1e9c2a" in str(c)]
    assert written
    assert all(w.endswith("-4b1e9c2a.json") for w in written)


@pytest.mark.parametrize("width", [46, 50, 60])
def test_the_diff_message_table_fits_the_width_with_its_numbers_whole(width: int) -> None:
    """The message list of ``ctxtool diff``: the preview gives way to the positions and the estimates (never
    cut), down to a few cells, rather than the terminal cropping the table's end."""
    rows = [
        {"status": "removed", "before_index": 166, "after_index": None, "type": "gemini",
         "estimate": "-26,222", "content": "A long preview of a message too wide for a narrow terminal"},
        {"status": "kept", "before_index": 2, "after_index": 2, "type": "user", "estimate": "1,305",
         "content": "Short"},
    ]  # fmt: skip
    table = render.diff_message_table(rows, title="Messages", width=width)
    assert _uncropped_width(table, width) <= width
    assert [str(c) for c in table.columns[4]._cells] == ["-26,222", "1,305"]


@pytest.mark.parametrize("width", [60, 80])
def test_a_stats_row_name_cut_to_fit_still_tells_the_rows_apart(width: int) -> None:
    """``--by model`` on a home that used both ``gemini-3.1-pro-preview`` and its ``-customtools`` variant:
    the model column, however narrow, is not cut to a start the two names share (``gemini-3.1-pro-…``)."""
    models = ["gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3.1-pro-preview",
              "gemini-3.1-pro-preview-customtools"]  # fmt: skip
    n = len(models)
    big = [123_456_789] * n
    rows = _Rows({"model": models, "sessions": [12] * n, "requests": [1_234] * n, "input": big, "output": big,
                  "thoughts": big, "cached": big, "tool": [0] * n, "total": big, "cache_ratio": [0.5] * n,
                  "cost": [12.5] * n, "unpriced": [0] * n})  # fmt: skip
    sums: dict[str, float] = dict.fromkeys(
        ("input", "output", "thoughts", "cached", "total"), 4 * 123_456_789
    )
    sums |= {"tool": 0, "sessions": 48, "requests": 4_936, "cost": 50.0, "unpriced": 0, "cache_ratio": 0.5}
    table = render.stats_table(rows, sums, by="model", title="t", width=width)
    names = [line for c in table.columns[0]._cells for line in str(c).split("\n")]  # (rows may be joined)
    assert len(set(names)) == n
    assert _uncropped_width(table, width) <= width


@pytest.mark.parametrize("width", [46, 50, 56])
def test_a_narrow_audit_table_wraps_its_rule_names_not_its_values(width: int) -> None:
    """Where status, session, rule and value alone are wider than the terminal, the rule names go onto two
    lines at their hyphens; every value stays whole and the table within the width (it was cropped, values
    cut to ``26,800,``)."""
    checks = [
        {"status": "fail", "subject": "session-2025-09-25T12-32-a025e452", "rule": rule, "value": value,
         "limit": limit, "offender": "turn 24 (8,378,194 tokens)"}
        for rule, value, limit in [("max-session-tokens", "26,800,468", "1,000,000"),
                                   ("max-context-share", "54.3%", "30.0%")]
    ]  # fmt: skip
    table = render.audit_table(checks, title="ctxtool audit", width=width)
    assert _uncropped_width(table, width) <= width
    values = [str(c) for c in table.columns[3]._cells]
    assert values == ["26,800,468", "54.3%"]


# --- down to 40 columns: every table within the width it is given, every number shown whole ---------------

NARROW = (40, 46, 52, 60, 80, 100, 120)
REAL = (40, 60, 80, 120)


def _sources() -> list[tuple[str, tuple[int, ...]]]:
    """The fixtures at every width, and the real sessions (where this machine has them) at a few."""
    from tests.conftest import REAL_SESSIONS

    cases = [(str(ROOT), NARROW)]
    if REAL_SESSIONS.is_dir():
        cases.append((str(REAL_SESSIONS), REAL))
    return cases


_SOURCES = _sources()
_CASES = [(source, width) for source, widths in _SOURCES for width in widths]
_IDS = [f"{'real' if 'real-sessions' in s else 'fixtures'}-{w}" for s, w in _CASES]


def _at_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int, *args: str
) -> str:
    """What the command prints to a pipe on a terminal ``width`` columns wide (``COLUMNS``, as a user's
    shell sets it; no colour), every line checked against the width unless ``--wide`` lets it be wider."""
    monkeypatch.setenv("COLUMNS", str(width))
    capsys.readouterr()
    run(list(args))
    out = capsys.readouterr().out
    for line in out.splitlines():
        if line.startswith("wrote /"):  # a path to copy, never cut: on a line of its own, whole
            assert Path(line.removeprefix("wrote ").split(" (backup: ")[0]).is_file(), line
            continue
        assert len(line) <= width or "--wide" in args, f"wider than {width}: {line!r}"
    return out


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    capsys.readouterr()
    run([*args, "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


def _split(line: str, bar: str) -> list[str]:
    """A table line's cells, with or without the table's outer borders."""
    cells = [c.strip() for c in line.split(bar)]
    return cells[1:-1] if line.startswith(bar) else cells


def _grid(out: str) -> tuple[list[str], list[list[str]], list[str], str]:
    """A stats table printed with or without its outer borders: header, body rows, totals row, and the
    caption joined into one line. A bordered row that lost its right border was cropped: it fails here."""
    lines = out.splitlines()
    header_at = next(i for i, line in enumerate(lines) if "┃" in line)
    header = _split(lines[header_at], "┃")
    rule = next(i for i, line in enumerate(lines) if i > header_at and set(line) <= set("─┼├┤"))
    body = []
    for line in lines[header_at + 1 : rule]:
        if "│" in line:
            assert not line.startswith("│") or line.endswith("│"), f"cropped: {line!r}"
            body.append(_split(line, "│"))
    totals = _split(lines[rule + 1], "│")
    end = rule + 2 + (1 if lines[rule + 2].startswith("└") else 0)
    for row in [*body, totals]:
        assert len(row) == len(header), row
    return header, body, totals, " ".join(line.strip() for line in lines[end:])


def _named(caption: str) -> set[str]:
    """The columns a caption names as not shown, token columns (with their sums) and the others."""
    names: set[str] = set()
    counted = HIDDEN.search(caption)
    if counted:
        names |= {item.rpartition(" ")[0] for item in counted.group(1).split(" · ")}
    others = re.search(r"Not shown \(too narrow\): (.+?) --wide shows every column\.", caption)
    if others:
        names |= {name.rstrip(".") for name in others.group(1).split(", ")}
    return names


def _shown(column: str, value: object, unpriced: object = 0) -> str | None:
    """What a stats table shows for a number (``None``: not a number column), every digit."""
    if column == "cost":
        return "?" if value is None else f"${value:,.2f}" + ("+" if unpriced else "")
    if column in ("context_share", "cache_ratio"):
        return "–" if value is None else f"{float(str(value)) * 100:.1f}%"
    if column == "duration_s":
        return render.duration(value)
    if isinstance(value, int) and not isinstance(value, bool) and column != "session":
        return f"{value:,}"
    return None


def _check_numbers(
    header: list[str], cells: list[str], values: dict[str, object], columns: dict[str, str]
) -> None:
    for name, text in zip(header, cells, strict=True):
        column = columns[name]
        if column in values:
            want = _shown(column, values[column], values.get("unpriced"))
            assert want is None or text == want, f"{column}: {text!r}, not {want!r}"


# The fixtures in every table; the real sessions (2,000 requests) in the two the walk-through found too wide.
_STATS_CASES = [
    (source, width, by)
    for source, width in _CASES
    for by in ("turn", "request", *(() if "real-sessions" in source else ("session", "model", "day")))
]


_KNOWN: dict[tuple[str, ...], tuple[dict[str, object], list[str]]] = {}


def _json_and_every_column(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[dict[str, object], list[str]]:
    """The JSON output of ``args`` and the headers of its ``--wide`` table (the same at every width): worked
    out once per report, the real sessions being slow to read."""
    if args not in _KNOWN:
        every, _, _, _ = _grid(_at_columns(capsys, monkeypatch, 120, *args, "--wide"))
        _KNOWN[args] = (_json(capsys, *args), every)
    return _KNOWN[args]


@pytest.mark.parametrize(
    ("source", "width", "by"),
    _STATS_CASES,
    ids=[f"{'real' if 'real-sessions' in s else 'fixtures'}-{w}-{by}" for s, w, by in _STATS_CASES],
)
def test_stats_fits_down_to_40_columns_with_every_number_whole(
    source: str, width: int, by: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stats --by …`` on a terminal 40 to 120 columns wide: no line past the width (not even cropped by
    the terminal); every number shown equals the JSON output's value, every digit, in every row and the
    totals; and every column ``--wide`` shows is either shown or named under the table, as its header."""
    data, every = _json_and_every_column(capsys, monkeypatch, "stats", source, "--by", by)
    header, body, totals, caption = _grid(
        _at_columns(capsys, monkeypatch, width, "stats", source, "--by", by)
    )
    # A header that ends a sentence keeps one full stop (``compr.``).
    assert {h.rstrip(".") for h in [*header, *_named(caption)]} == {h.rstrip(".") for h in every}
    assert {"total", "cost"} <= set(header)  # room for the cost, down to 40 columns, in all of these
    columns = {render.column_header(c): c for c in render.TABLE_COLUMNS[by]}
    rows = data["rows"]
    assert isinstance(rows, list)
    assert len(body) == len(rows)
    for cells, row in zip(body, rows, strict=True):
        if "session" in header:  # the short id: the end of the row's session name
            short = cells[header.index("session")].removesuffix(render.COMPACTED_MARK)
            assert str(row["session"]).endswith(short), (short, row["session"])
        _check_numbers(header, cells, row, columns)
    sums = data["totals"]
    assert isinstance(sums, dict)
    _check_numbers(header[1:], totals[1:], sums, columns)


AUDIT_BUDGETS = (*AUDIT, "--max-daily-cost", "0.01")


def _audit_header(out: str) -> list[str]:
    """The audit table's header, a header on two lines joined (``session /`` ``day``)."""
    lines = [line for line in out.splitlines() if "┃" in line]
    parts = [_split(line, "┃") for line in lines]
    return [" ".join(p for p in words if p) for words in zip(*parts, strict=True)]


@pytest.mark.parametrize("every", [False, True], ids=["failed", "all"])
@pytest.mark.parametrize(("source", "width"), _CASES, ids=_IDS)
def test_audit_fits_down_to_40_columns_with_every_value_whole(
    source: str, width: int, every: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``audit`` on a terminal 40 to 120 columns wide: no line past the width, each check's value as the
    JSON output has it, and what the table leaves out (the limit, the worst offender, the status) said
    under it: each rule's limit, each offender, and how many rows have each status."""
    from ctxtool.audit import format_value

    args = ["audit", source, *AUDIT_BUDGETS, *(["--all"] if every else [])]
    order = {"fail": 0, "skip": 1, "pass": 2}
    report = _json(capsys, *args)["checks"]
    assert isinstance(report, list)
    checks = sorted((c for c in report if every or c["status"] != "pass"), key=lambda c: order[c["status"]])
    out = _at_columns(capsys, monkeypatch, width, *args)
    lines = out.splitlines()
    for line in lines:
        assert not line.startswith("│") or line.endswith("│"), f"cropped: {line!r}"
    header = _audit_header(out)
    table = "\n".join(line for line in lines if "┃" not in line)
    rows = [dict(zip(header, r, strict=True)) for r in _rows(table, "│", 0)]
    caption = " ".join(line.strip() for line in lines if "│" not in line and "┃" not in line)
    assert len(rows) == len(checks)
    for row, check in zip(rows, checks, strict=True):
        assert row["value"] == format_value(check["rule"], check["value"])
        assert row["rule"] == check["rule"] + (f" [{check['scope']}]" if check["scope"] else "")
        subject = row.get("session", row.get("session / day"))
        assert subject
        assert str(check["subject"]).endswith(subject)
        if "limit" in row:
            assert row["limit"] == format_value(check["rule"], check["limit"])
        else:
            assert f"{check['rule']} {format_value(check['rule'], check['limit'])}" in caption
        if "status" in row:
            assert row["status"] == check["status"].upper()
        if check["offender"] and "worst" not in row:
            assert f"{subject} {check['rule']}: {check['offender']}" in caption
    if "status" not in header:
        statuses = [c["status"].upper() for c in checks]
        said = re.search(r"Not shown \(too narrow\): status \((.+?)\)\.", caption)
        assert said, caption
        if len(set(statuses)) == 1:
            assert said.group(1) == f"every row {statuses[0]}"
        else:
            first = statuses.count(statuses[0])
            assert said.group(1).startswith(f"the first {first:,} rows {statuses[0]}, then ")


@pytest.mark.parametrize(
    ("total", "cost", "dropped"),
    [(298_383_814, 76.01, ""), (1_234_567_890, 12_345.67, "cost")],
)
def test_a_turn_table_too_wide_for_its_key_columns_drops_its_borders_then_its_cost(
    total: int, cost: float, dropped: str
) -> None:
    """``--by turn`` at 40 columns, where the short id, the turn, a nine-digit total and the cost are wider
    than the terminal within the table's borders (42 cells): the outer borders go, every number whole; where
    even that is too wide (a ten-digit total, a five-digit cost), the cost goes too, named under the table."""
    from rich.console import Console

    sessions = ["session-2026-01-01T00-00-0beddad7", "session-2026-01-02T00-00-d2c933ca"]
    rows = _Rows({"session": sessions, "turn": [1, 26], "input": [0, 0], "output": [0, 0], "thoughts": [0, 0],
                  "cached": [0, 0], "tool": [0, 0], "total": [1, total - 1], "cost": [0.0, cost],
                  "unpriced": [0, 0]})  # fmt: skip
    sums = dict.fromkeys(("input", "output", "thoughts", "cached", "tool"), 0)
    sums |= {"total": total, "cost": cost, "unpriced": 0}
    table = render.stats_table(rows, sums, by="turn", title="t", width=40)
    assert _uncropped_width(table, 40) <= 40
    assert not table.show_edge
    console = Console(width=40, no_color=True, highlight=False)
    with console.capture() as capture:
        console.print(table)
    header, body, totals, caption = _grid(capture.get())
    row, sum_row = dict(zip(header, body[1], strict=True)), dict(zip(header, totals, strict=True))
    assert (row["session"], row["turn"], row["total"]) == ("d2c933ca", "26", f"{total - 1:,}")
    assert sum_row["total"] == f"{total:,}"
    if dropped:  # the room the cost leaves takes back a narrower column (the input, here 0)
        assert "cost" not in header
        assert "Not shown (too narrow): cost. --wide shows every column." in caption
    else:
        assert header == ["session", "turn", "total", "cost"]
        assert sum_row["cost"] == f"${cost:,.2f}"
        assert "Not shown" not in caption


# --- stats --top, compact, compare and diff down to 40 columns ----------------------------------------------


def _under(out: str) -> str:
    """What a command prints outside its tables' rows and headers (titles, notes), joined into one line."""
    return " ".join(line.strip() for line in out.splitlines() if "│" not in line and "┃" not in line)


_TOP_HEADERS = {"session": "session", "rank": "rank", "item": "item", "tool": "tool", "target": "target",
                "count": "count", "~tokens": "tokens", "of ctx": "share"}  # fmt: skip


@pytest.mark.parametrize(("source", "width"), _CASES, ids=_IDS)
def test_stats_top_fits_down_to_40_columns_with_every_number_whole(
    source: str, width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stats --top`` on a terminal 40 to 120 columns wide: no line past the width; the session, the item
    (on two lines where it must: ``tool`` / ``output``) and its tokens always shown, every digit as the JSON
    output has it, and every other column shown whole or named under the table as its header is."""
    args = ("stats", source, "--top", "3")
    expected = _json(capsys, *args)["rows"]
    assert isinstance(expected, list)
    out = _at_columns(capsys, monkeypatch, width, *args)
    header = _audit_header(out)
    assert {"session", "item", "~tokens"} <= set(header)
    assert set(header) | _named(_under(out)) == set(_TOP_HEADERS)
    assert not set(header) & _named(_under(out))
    rows = [dict(zip(header, r, strict=True)) for r in _rows(out, "│", 0)]
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        assert str(want["session"]).endswith(row["session"])
        assert row["item"] == want["item"]
        shown = {
            "~tokens": f"{want['tokens']:,}",
            "of ctx": render.percent(want["share"]),
            "rank": str(want["rank"]),
            "count": str(want["count"]),
            "tool": want["tool"] or "–",
        }
        for name, text in shown.items():
            assert row.get(name, text) == text, name


_COMPACT_HEADERS = ("session", "status", "tokens", "msgs sum/kept", "kept facts r/p/c/e/d", "threshold",
                    "split", "cut outputs", "would write")  # fmt: skip
_STATUS_CELL = {"COMPRESSION_FAILED_INFLATED_TOKEN_COUNT": "FAILED_INFLATED",
                "COMPRESSION_FAILED_EMPTY_SUMMARY": "FAILED_EMPTY"}  # fmt: skip


def _compact_cells(want: dict[str, Any]) -> dict[str, str]:
    """What ``compact``'s table shows of a session's JSON report, every number whole."""
    before, after, limit, share = (
        want[k] for k in ("tokens_before", "tokens_after", "token_limit", "threshold")
    )
    status = want["status"]
    if status == "COMPRESSED" and before is not None and after is not None and after > before:
        status = "INFLATED"
    summarised = want["messages_summarised"]
    return {
        "status": _STATUS_CELL.get(status, status),
        "tokens": "–" if before is None else f"{before:,} → {after:,}",
        "msgs sum/kept": "–" if summarised is None else f"{summarised}/{want['messages_kept']}",
        "threshold": "–" if limit is None or share is None else f"{int(share * limit):,}",
        "split": "–" if want["split_index"] is None else str(want["split_index"]),
        "cut outputs": str(len(want["tool_outputs_truncated"] or [])),
    }


@pytest.mark.parametrize(("source", "width"), _CASES, ids=_IDS)
def test_compact_dry_run_fits_down_to_40_columns_with_every_number_whole(
    source: str, width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compact --dry-run`` on a terminal 40 to 120 columns wide: no line past the width; the session, its
    status and its tokens always shown (the tokens on two lines where they must), every number as the JSON
    output has it; the output path, cut from the left, goes last, and each column left out is named."""
    args = ("compact", source, "--dry-run", "--force")
    expected = _json(capsys, *args)["sessions"]
    assert isinstance(expected, list)
    out = _at_columns(capsys, monkeypatch, width, *args)
    header = _audit_header(out)
    assert {"session", "status", "tokens"} <= set(header)
    assert set(header) | _named(_under(out)) == set(_COMPACT_HEADERS)
    rows = [dict(zip(header, r, strict=True)) for r in _rows(out, "│", 0)]
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        name = str(want["input_path"]).rsplit("/", 1)[-1]
        assert name.endswith(row["session"]) or name.rsplit(".", 1)[0].endswith(row["session"])
        for column, text in _compact_cells(want).items():
            assert row.get(column, text) == text, column


@pytest.mark.parametrize("width", [40, 44, 48, 52, 60])
def test_a_compact_status_beside_a_long_session_label_goes_onto_two_lines_rather_than_cut_a_number(
    width: int,
) -> None:
    """Two sessions whose labels run to 15 characters, one ``FAILED_INFLATED``: no line past the width, the
    tokens whole (on two lines where they must, before the status breaks after its ``_``)."""
    import io

    from rich.console import Console

    chats = "/home/u/.gemini/tmp/p/chats/session-2026-01-01T00-00-"
    reports = [
        {
            "input_path": chats + "a0123456789abcd.jsonl",
            "status": "COMPRESSION_FAILED_INFLATED_TOKEN_COUNT",
            "tokens_before": 1_234_567,
            "tokens_after": 2_345_678,
            "reason": "the summary was larger than what it replaced",
        },
        {
            "input_path": chats + "b0123456789abcd.jsonl",
            "status": "NOOP",
            "tokens_before": 1_234_567,
            "tokens_after": 1_234_567,
        },
    ]
    table, _ = render.compact_table(reports, width=width, plan=True)
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(table)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert max(len(line) for line in out.splitlines()) <= width
    rows = [dict(zip(_audit_header(out), r, strict=True)) for r in _rows(out, "│", 0)]
    assert [(r["session"], r["status"], r["tokens"]) for r in rows] == [
        ("a0123456789abcd", "FAILED_INFLATED", "1,234,567 → 2,345,678"),
        ("b0123456789abcd", "NOOP", "1,234,567 → 1,234,567"),
    ]
    # The tokens go onto two lines before the status does (at 40 columns both must).
    assert "FAILED_INFLATED" in out or "1,234,567 → 2,345,678" not in out
    if width in (48, 52):  # room for the status whole once the tokens take two lines
        assert "FAILED_INFLATED" in out


def test_a_compact_table_at_40_columns_leaves_out_where_it_wrote_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that writes: at 40 columns the output path is the column that goes (named by its header,
    ``output``), at 80 it is shown."""
    chats = ROOT / "tmp" / "ctxdemo" / "chats"
    args = ("compact", str(chats), "--force", "--output", str(tmp_path / "out"))
    narrow = _at_columns(capsys, monkeypatch, 40, *args)
    assert _audit_header(narrow) == ["session", "status", "tokens"]
    assert "output" in _named(_under(narrow))
    wide = _at_columns(capsys, monkeypatch, 80, *args)
    assert "output" in _audit_header(wide)
    # Whatever the width, every file written is named in full, on a line of its own, for a user to copy.
    for out in (narrow, wide):
        lines = out.splitlines()
        written = sorted(line.removeprefix("wrote ") for line in lines if line.startswith("wrote "))
        assert written == sorted(str(p) for p in (tmp_path / "out").rglob("*.json*"))


_CHATS = ROOT / "tmp" / "ctxdemo" / "chats"
_COMPARED = [((str(_CHATS),), width) for width in NARROW]
if REAL_SESSIONS.is_dir():  # three sessions of the real ones: the widest short ids, and a long session
    _COMPARED += [
        (
            tuple(
                str(REAL_SESSIONS / name)
                for name in (
                    "Deploy-an-Agent-with-Agent-Development-Kit__session-2026-08-17T17-56-a2a-serv.jsonl",
                    "IDAHO-VAULT__b1f31681-4b57-4337-8bc5-ac73580f752a__xs82vp.json",
                    "TP-Tutor__session-2026-04-25T01-53-b1b4c413.jsonl",
                )
            ),
            width,
        )
        for width in REAL
    ]
_COMPARE_HEADERS = {"session", "strategy", "status", "trigger", "tokens", "cut", "kept", "facts r/p/c/e/d",
                    "time"}  # fmt: skip


def _compare_cells(want: dict[str, Any]) -> dict[str, str]:
    """What ``compare``'s table shows of a row of its JSON output, every number whole (not the time)."""
    facts = "/".join(
        "–" if want[f"{k}_retention"] is None else f"{want[f'{k}_retention']:.0f}%"
        for k in ("requests", "paths", "commands", "errors", "directives")
    )
    trigger, before, after = want["would_trigger"], want["tokens_before"], want["tokens_after"]
    return {
        "strategy": want["strategy"],
        "status": want["status"],
        "trigger": "n/a" if trigger is None else f"turn {want['trigger_turn']}" if trigger else "no",
        "tokens": "–" if before is None or after is None else f"{before:,} → {after:,}",
        "cut": "–" if want["reduction"] is None else f"{100 * want['reduction']:.0f}%",
        "kept": "–" if want["messages_kept"] is None else str(want["messages_kept"]),
        "facts r/p/c/e/d": facts,
    }


@pytest.mark.parametrize(
    ("paths", "width"),
    _COMPARED,
    ids=[f"{'real' if 'real-sessions' in p[0] else 'fixtures'}-{w}" for p, w in _COMPARED],
)
def test_compare_fits_down_to_40_columns_with_every_number_whole(
    paths: tuple[str, ...], width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compare`` on a terminal 40 to 120 columns wide: no line past the width; the tokens and the facts
    kept always shown, every number as the JSON output has it (wrapped, never cut); narrowest, the strategy
    stands under its session in one column (``session`` / ``strategy``), and only then does ``cut`` go.
    The bar chart under it keeps every strategy's name and numbers whole."""
    expected = _json(capsys, "compare", *paths)["rows"]
    assert isinstance(expected, list)
    out = _at_columns(capsys, monkeypatch, width, "compare", *paths)
    table, bars = out.split("per strategy (mean over sessions)", 1)
    assert "…" not in out
    # A header on more lines joined as it reads (``facts r/p/`` ``c/e/d``).
    canon = {_words(h): h for h in [*_COMPARE_HEADERS, "session strategy"]}
    header = [canon[_words(h)] for h in _audit_header(table)]
    stacked = "session strategy" in header
    assert {"tokens", "facts r/p/c/e/d", "session strategy" if stacked else "strategy"} <= set(header)
    assert stacked or "cut" in header or "cut" not in _named(_under(table))  # cut goes only once stacked
    shown = {name for h in header for name in (h.split() if h == "session strategy" else [h])}
    assert shown | _named(_under(table)) == _COMPARE_HEADERS
    # A row starts with its tokens' arrow (which stays with the first number): the session's and the
    # tokens' next lines go on in the columns of both.
    rows = [dict(zip(header, r, strict=True)) for r in _rows(table, "│", header.index("tokens"), "→")]
    assert len(rows) == len(expected)
    names = render.session_labels([str(r["session"]) for r in expected])
    for row, want, name in zip(rows, expected, names, strict=True):
        cells = _compare_cells(want)
        if stacked:
            assert row.pop("session strategy") == f"{name} {cells.pop('strategy')}"
        else:
            assert row.pop("session") == name
        for column, text in cells.items():
            assert row.get(column, text) == text, column
    for strategy in {str(r["strategy"]) for r in expected}:
        assert re.search(rf"^ ?{re.escape(strategy)} +█* ?[\d,]+ / [\d,]+ ", bars, re.MULTILINE), strategy
    for line in bars.splitlines():
        assert len(line) <= width


_PAIR = (
    str(_CHATS / "session-2026-03-20T11-00-abcd1234.json"),
    str(_CHATS / "session-2026-03-20T11-00-abcd1234.jsonl"),
)
_DIFFED = [(_PAIR, width) for width in NARROW]
if REAL_SESSIONS.is_dir():  # README's example: two sessions of one project
    _DIFFED += [
        (
            (
                str(REAL_SESSIONS / "TP-Tutor__session-2026-04-25T01-53-b1b4c413.jsonl"),
                str(REAL_SESSIONS / "TP-Tutor__session-2026-04-24T23-16-c8b2cbd9.jsonl"),
            ),
            width,
        )
        for width in REAL
    ]
_GROUP_HEADERS = ["group", "rec. before", "rec. after", "est. before", "est. after", "est. delta"]
EVERY = re.compile(r"Not shown \(too narrow\): (.+?)\. --width (\d+) shows every column\.")


def _diff_tables(out: str) -> dict[str, tuple[list[str], list[list[str]], str]]:
    """``diff``'s two token tables: each one's header, rows (a label on more lines joined) and the lines
    under it."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Tokens")
    groups = next(i for i, line in enumerate(lines) if line.startswith("Tokens by message type"))
    end = next(i for i, line in enumerate(lines) if i > groups and not line.strip())
    tables = {}
    for name, part in (("tokens", lines[start:groups]), ("groups", lines[groups:end])):
        text = "\n".join(part)
        header = _audit_header(text)
        # A row starts with its first estimate (a tool's recorded tokens are blank): a label's next lines
        # have none.
        first = next(i for i, h in enumerate(header) if h.endswith("before") and not h.startswith("rec."))
        tables[name] = (header, _rows(text, "│", first), _under(text))
    return tables


def _words(label: str) -> str:
    return "".join(label.split())  # a label too long for its column is folded, mid-word


@pytest.mark.parametrize(
    ("paths", "width"),
    _DIFFED,
    ids=[f"{'real' if 'real-sessions' in p[0] else 'fixtures'}-{w}" for p, w in _DIFFED],
)
def test_diff_token_tables_fit_down_to_40_columns_with_every_number_whole(
    paths: tuple[str, str], width: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``diff``'s "Tokens" and "Tokens by message type" tables on a terminal 40 to 120 columns wide: no
    line past the width; the label and before and after always shown, every number as the JSON output has
    it; a column left out (the delta, then the recorded pair by message type) named under its table with the
    ``--width`` that shows every column, which it does."""
    data: dict[str, Any] = _json(capsys, "diff", *paths)
    out = _at_columns(capsys, monkeypatch, width, "diff", *paths)
    before, after = data["before"], data["after"]
    b, a = before["recorded"], after["recorded"]
    expected: dict[str, list[list[Any]]] = {
        "tokens": [
            ["live messages", before["live_messages"], after["live_messages"]],
            ["recorded requests", b["requests"], a["requests"]],
            ["recorded tokens (total)", b["total"], a["total"]],
            ["recorded context (last prompt)", b["context"], a["context"]],
            ["estimated context", before["estimated"], after["estimated"]],
        ],
        "groups": [
            [f"{g['dimension']} {g['key']}", g["recorded_before"], g["recorded_after"], g["estimated_before"],
             g["estimated_after"]]
            for g in data["tokens"]["groups"]
        ],
    }  # fmt: skip
    every = {"tokens": ["", "before", "after", "delta"], "groups": _GROUP_HEADERS}
    for name, (header, rows, under) in _diff_tables(out).items():
        said = EVERY.search(under)
        assert sorted([*header, *(said.group(1).split(", ") if said else [])]) == sorted(every[name])
        assert {"before", "after"} <= {h.removeprefix("est. ") for h in header}
        assert len(rows) >= len(expected[name])
        for row, want in zip(rows, expected[name], strict=False):
            cells = dict(zip(header, row, strict=True))
            assert _words(cells[header[0]]) == _words(want[0])
            values = dict(zip(every[name][1:], [*want[1:], want[-1] - want[-2]], strict=True))
            for column, value in values.items():
                text = "" if value is None else f"{value:+,}" if "delta" in column else f"{value:,}"
                assert cells.get(column, text) == text, column
        if said:  # the width the note names shows every column, and names none
            wider = _diff_tables(_at_columns(capsys, monkeypatch, int(said.group(2)), "diff", *paths))[name]
            assert wider[0] == every[name]
            assert not EVERY.search(wider[2])


def _counts(n: int) -> dict[str, list[Any]]:
    """The token columns, costs and unpriced counts of ``n`` rows of a long stats table: numbers of every
    width, a missing cost every fifth row."""
    return {
        "input": [10**i for i in range(n)],
        "output": [i * 7 for i in range(n)],
        "thoughts": [0] * n,
        "cached": [i * 1_000 for i in range(n)],
        "tool": [0] * n,
        "total": [10**i + i * 1_007 for i in range(n)],
        "cost": [None if i % 5 == 0 else i * 0.37 for i in range(n)],
        "unpriced": [1 if i % 5 == 0 else 0 for i in range(n)],
    }


@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_a_long_stats_table_prints_the_same_bytes_with_its_rows_joined(
    width: int, color: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows whose cells fit on one line go to rich as one row of joined cells (``JOINED_ROWS``), which prints
    faster: the same bytes as row by row, colours included (a styled cell's padding in its style), with
    names of every width (wide characters too), a missing cost, shares in each colour and a row too long."""
    import io

    from rich.console import Console

    n = 24
    rows = _Rows(
        {
            "session": [f"session-2026-01-{1 + i % 28:02d}T00-00-{i:08x}" for i in range(n)],
            "project": ["/home/林/项目", "p", "/a/very/long/project/path/that/will/not/fit/anywhere"]
            * (n // 3),
            **_counts(n),
            "context_share": [None, 0.05, 0.6, 0.9] * (n // 4),
        }
    )
    sums: dict[str, float] = {c: sum(rows.data[c]) for c in ("input", "output", "thoughts", "cached", "tool")}  # type: ignore[misc]
    sums |= {"total": sum(rows.data["total"]), "cost": 50.0, "unpriced": 5}  # type: ignore[arg-type]

    def printed(joined_from: int) -> tuple[str, int]:
        monkeypatch.setattr(render, "JOINED_ROWS", joined_from)
        table = render.stats_table(rows, sums, by="session", title="t", width=width)
        console = Console(width=width, file=io.StringIO(), color_system="truecolor" if color else None)
        console.print(table)
        return console.file.getvalue(), len(table.rows)  # type: ignore[attr-defined]

    joined, rows_given = printed(2)
    assert (joined, n) == printed(10**9)
    assert len(joined.splitlines()) > n
    assert rows_given == (1 if width >= 60 else n)  # (at 40 columns the table is left to rich's measure)


@pytest.mark.parametrize("by", ["session", "model", "day"])
@pytest.mark.parametrize("width", [40, 52, 60, 80, 120, 200])
@pytest.mark.parametrize("odd", [None, "wide", "tab", "trailing"])
def test_a_long_table_in_plain_text_writes_its_rows_as_rich_would(
    width: int, by: str, odd: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In plain text (no colour system) a table of joined rows writes its rows itself, each line made as the
    first row's (``_PlainRows``): the same bytes as rich printing every row, with or without the table's
    edge, with a caption of several lines and cut columns. A row's name not one character a cell (a wide
    character, a tab) leaves the table to rich; a number cell with trailing spaces is justified as rich
    justifies it."""
    import io

    from rich.console import Console

    n = 30
    names = {
        "session": [f"session-2026-01-{1 + i % 28:02d}T00-00-{i:08x}" for i in range(n)],
        "model": [f"gemini-{i}.5-pro-preview-with-a-long-name-{i}" for i in range(n)],
        "day": [f"2026-01-{1 + i % 28:02d}" for i in range(n)],
    }[by]
    names[7] = {"wide": "2026-01-08-项目", "tab": "2026\t01-08"}.get(odd or "", names[7])
    data: dict[str, list[Any]] = {by: names}
    if by == "session":
        data["project"] = [
            "/home/a/project",
            "p",
            "/a/very/long/project/path/that/will/not/fit/anywhere",
        ] * 10
    data |= {
        "sessions": list(range(n)),
        "requests": [i * 3 for i in range(n)],
        **_counts(n),
        "cache_ratio": [None, 0.05, 0.6] * 10,
        "context_share": [None, 0.05, 0.6, 0.9, 0.1] * 6,
    }
    sums: dict[str, Any] = {
        c: sum(data[c]) for c in ("input", "output", "thoughts", "cached", "tool", "total")
    }
    sums |= {"cost": 50.0, "unpriced": 5}
    if odd == "trailing":
        real_cell = render.cell
        monkeypatch.setattr(
            render,
            "cell",
            lambda c, v: Text(real_cell(c, v).plain + "  ") if c == "cost" else real_cell(c, v),
        )
    made: list[object] = []
    lines = render._PlainRows.lines

    def spy(self: render._PlainRows, console: Console, options: Any) -> Any:
        made.append(out := lines(self, console, options))
        return out

    monkeypatch.setattr(render._PlainRows, "lines", spy)
    caption = "read 30 files\na caption line long enough to be wrapped at the narrower widths, twice over"
    joined: list[bool] = []

    def printed(plain: bool) -> str:
        table = render.stats_table(
            _Rows(data), sums, by=by, title=f"stats --by {by}", caption=caption, width=width
        )
        joined.append(table.plain is not None)
        if not plain:
            table.plain = None
        console = Console(width=width, file=io.StringIO(), color_system=None)
        console.print(table)
        return console.file.getvalue()  # type: ignore[attr-defined]

    mine = printed(True)
    assert mine == printed(False)
    assert len(mine.splitlines()) > n
    assert joined[0] or width < 80  # (narrower, a table too wide is left to rich's measure)
    written = [m for m in made if m is not None]
    assert len(written) == (1 if joined[0] and odd not in ("wide", "tab") else 0)
