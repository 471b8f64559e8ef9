"""The column specifications (``ctxtool.frames.shape.COLUMNS``) are what every output of ``stats`` says: the
columns each report writes (JSON from the tally and from the frames, CSV), the totals row, the headers of
its tables, and the fields docs/json.md describes (its table is the specifications', row for row)."""

from __future__ import annotations

import re
from datetime import date, datetime

import orjson
import pytest

from ctxtool.cli import run
from ctxtool.common.choices import BY_CHOICES
from ctxtool.frames.shape import (
    COLUMNS,
    DROP_ORDER,
    GRAINS,
    REPORT_COLUMNS,
    ROW_COLUMNS,
    SPECS,
    TABLE_COLUMNS,
    ColumnSpec,
)
from ctxtool.measure.tokens import TOKEN_KEYS
from tests.conftest import FIXTURES, REPO

JSON_DOCS = REPO / "docs" / "json.md"
FIELDS_MARKER = "Fields of the rows (a column appears in the reports listed in brackets):"


def _stats(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> bytes:
    capsysbinary.readouterr()
    assert run(["stats", str(FIXTURES), "--no-cache", *args]) == 0
    return capsysbinary.readouterr().out


def test_one_spec_per_column_and_each_whole() -> None:
    assert GRAINS == BY_CHOICES
    assert len(SPECS) == len(COLUMNS)
    for c in COLUMNS:
        assert c.reports, c.name
        assert set(c.reports) <= set(GRAINS), c.name
        assert set(c.table) <= set(c.reports), f"{c.name}: a table shows it in a report without it"
        assert (c.place is None) == (not c.table), f"{c.name}: a place in a table when, and only when, shown"
        assert c.drop is None or c.table, f"{c.name}: a drop order, but no table shows it"
        assert (c.least is None) == (c.most is None), f"{c.name}: a text column gives way between the two"
        assert c.least is None or c.format == "text", c.name
    assert [c for c in REPORT_COLUMNS["request"] if c in TOKEN_KEYS] == list(TOKEN_KEYS)
    # One order each, no ties; total and cost never dropped (cost only when nothing else is left).
    places = [c.place for c in COLUMNS if c.place is not None]
    drops = [c.drop for c in COLUMNS if c.drop is not None]
    assert len(set(places)) == len(places)
    assert len(set(drops)) == len(drops)
    assert not {"total", "cost"} & set(DROP_ORDER)
    for by in GRAINS:  # a table starts with what names its rows: a session's, or the key of a group
        assert TABLE_COLUMNS[by][0] == ("session" if by in ("turn", "request", "session") else by), by


def _json_type(spec: ColumnSpec, value: object) -> bool:
    """Whether ``value`` (as JSON decoded it) is of ``spec.type``."""
    if spec.type == "str":
        return isinstance(value, str)
    if spec.type == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if spec.type == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if spec.type == "bool":
        return isinstance(value, bool)
    if spec.type == "datetime":
        return isinstance(value, str) and value.endswith("Z") and bool(datetime.fromisoformat(value))
    if spec.type == "date":
        return isinstance(value, str) and bool(date.fromisoformat(value))
    if spec.type == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    raise AssertionError(f"{spec.name}: unknown type {spec.type!r}")


@pytest.mark.parametrize("by", BY_CHOICES)
def test_every_column_of_every_report_has_a_spec(capsysbinary: pytest.CaptureFixture[bytes], by: str) -> None:
    """The JSON rows carry the columns the specifications give the report, in their order and of their type,
    its totals are the columns with a ``total`` rule; the CSV has the same columns."""
    doc = orjson.loads(_stats(capsysbinary, "--by", by, "-f", "json"))
    assert doc["rows"]
    assert set(REPORT_COLUMNS[by]) <= set(ROW_COLUMNS[by]) == {c.name for c in COLUMNS if by in c.reports}
    for row in doc["rows"]:
        assert list(row) == ROW_COLUMNS[by]
        wrong = {k: v for k, v in row.items() if v is not None and not _json_type(SPECS[k], v)}
        assert wrong == {}, f"--by {by}: values not of their spec's type"
    assert set(doc["totals"]) == {c for c in ROW_COLUMNS[by] if SPECS[c].total is not None}
    csv = _stats(capsysbinary, "--by", by, "-f", "csv")
    assert csv.decode().splitlines()[0].split(",") == ROW_COLUMNS[by]


def _reports_label(reports: tuple[str, ...]) -> str:
    """The reports a field appears in, as docs/json.md brackets them."""
    missing = [g for g in GRAINS if g not in reports]
    if not missing:
        return "all"
    if len(missing) == 1:
        return f"all but {missing[0]}"
    return ", ".join(g for g in GRAINS if g in reports)


def fields_table() -> str:
    """docs/json.md's table of the fields of the rows, as the specifications give it."""
    lines = ["| field | type | table header | meaning |", "|---|---|---|---|"]
    for c in COLUMNS:
        header = f"`{c.heading}`" if c.table else "—"
        lines.append(f"| `{c.name}` | {c.type} | {header} | {c.description} [{_reports_label(c.reports)}] |")
    return "\n".join(lines)


def test_docs_describe_every_column_as_its_spec_does() -> None:
    """docs/json.md lists every field of every report, with its spec's type, table header, description and
    reports: a column added, renamed or moved to another report changes the docs with it."""
    text = JSON_DOCS.read_text(encoding="utf-8")
    assert text.count(FIELDS_MARKER) == 1
    documented = text.split(FIELDS_MARKER, 1)[1].split("\n\n", 2)[1]
    expected = fields_table()
    assert documented == expected, f"docs/json.md's fields of the rows should read:\n\n{expected}\n"
    cells = [line.split(" | ")[0].removeprefix("| ") for line in documented.splitlines()[2:]]
    assert cells == [f"`{c.name}`" for c in COLUMNS]


def _headers(out: str) -> list[str]:
    """The header cells of the table printed in ``out``."""
    line = next(line for line in out.splitlines() if "┃" in line)
    return [cell.strip() for cell in line.strip("┃").split("┃")]


def _bare(header: str) -> str:
    """A header as a sentence names it: a caption line ends one that ends with a full stop (``compr.``)."""
    return header.rstrip(".")


def _not_shown(out: str) -> list[str]:
    """The columns the lines under a table name as not shown (too narrow), token columns with their sums."""
    caption = " ".join(line.strip() for line in out.splitlines() if "│" not in line and "┃" not in line)
    names = []
    counted = re.search(r"Counted in total, not shown \(too narrow\): (.+?)\.(?: |$)", caption)
    if counted:
        names += [item.rpartition(" ")[0] for item in counted.group(1).split(" · ")]
    others = re.search(r"Not shown \(too narrow\): (.+?) --wide shows every column\.", caption)
    if others:
        names += others.group(1).removesuffix(".").split(", ")
    return names


@pytest.mark.parametrize("by", BY_CHOICES)
def test_a_table_is_headed_by_its_specs(capsysbinary: pytest.CaptureFixture[bytes], by: str) -> None:
    """At 200 columns (and with ``--wide``) a ``stats --by`` table shows the columns the specifications give
    its table, in their order and under their headers; those a narrow table drops it names, as headed."""
    doc = orjson.loads(_stats(capsysbinary, "--by", by, "-f", "json"))
    # ``tool`` only where a request recorded some (the fixtures' sessions are many: ``session`` stays).
    expected = [SPECS[c].heading for c in TABLE_COLUMNS[by] if c != "tool" or doc["totals"]["tool"]]
    out = _stats(capsysbinary, "--by", by, "--width", "200").decode()
    shown, dropped = _headers(out), [_bare(h) for h in _not_shown(out)]
    assert shown == [h for h in expected if h in shown]
    assert sorted(map(_bare, shown + dropped)) == sorted(map(_bare, expected)), f"--by {by}: a column lost"
    assert set(dropped) <= {_bare(SPECS[c].heading) for c in DROP_ORDER}
    wide = _stats(capsysbinary, "--by", by, "--wide").decode()
    assert _headers(wide) == expected
    assert _not_shown(wide) == []
