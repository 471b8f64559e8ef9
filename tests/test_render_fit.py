"""Tables fit the terminal: short session ids, paths cut from the left, numbers never cut, --wide."""

from __future__ import annotations

import json
import re

import pytest
from rich.text import Text

from ctxtool.cli import run
from ctxtool.render import tables as render
from tests.conftest import FIXTURES

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
    assert "Not shown (too narrow): start, turns, requests, peak_context," in narrow
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


def _rows(out: str, bar: str, first: int) -> list[list[str]]:
    """The rows of a table whose cells may take several lines: a row starts where column ``first`` has
    text; a cell's lines joined as they were broken (a space, or nothing after a ``/`` or ``-``)."""
    rows: list[list[list[str]]] = []
    for line in out.splitlines():
        if bar not in line or line.lstrip().startswith(("┃", "━", "┏", "┡", "└")):
            continue
        cells = _cells(line, bar) if line.startswith(bar) else [c.strip() for c in line.split(bar)]
        if cells[first] or not rows:
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
                text += part if not text or text.endswith(("/", "-")) else " " + part
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
    names = [str(c) for c in table.columns[0]._cells]
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
