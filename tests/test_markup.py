"""Hostile session text in every report that writes markup: ``diff`` and ``audit`` markdown, ``audit`` JUnit
XML and GitHub annotations, and ``report``'s HTML page (``compare`` writes its rows there with --compare;
``stats`` writes no markup: its formats are the table, JSON, JSONL, CSV and Parquet).

A user prompt, a tool's name, arguments and output, the model name, the project folder and the session's
file name hold ``<script>``, ``</td>``, ``|``, backticks, ``]]>``, ``&``, line breaks, control characters
and any unicode. Each report must stay well formed (the XML parses; the HTML holds no tag but the page's
own; a markdown table row keeps its cells) and show the original text: the markdown is rendered with a
CommonMark renderer (markdown-it, with GFM tables), the HTML and XML parsed, and what they show compared
with the text the command's JSON or the library gives.
"""

from __future__ import annotations

import html
import json
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.common.utils import MD_TRIM_CHARS

from ctxtool.cli import run
from ctxtool.common.markup import (
    escape_html,
    escape_markdown,
    escape_xml,
    json_in_html_script,
    markdown_code_block,
    workflow_data,
    workflow_property,
)
from ctxtool.compress.summarize.facts import FACT_KINDS
from ctxtool.diff import counts_line, diff_sessions, message_rows
from ctxtool.session.columns import clip_preview
from ctxtool.session.read import read_session
from tests.conftest import write_jsonl

PIECES = [
    "<script>alert(1)</script>",
    "</td>",
    "<!--",
    "|",
    "\\|",
    "`",
    "```",
    "]]>",
    "&",
    "&amp;",
    "&#13;",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "\x00",
    "\x01",
    "\x0b",
    "\x1b[31m",
    "\x7f",
    "\u2028",
    "*",
    "_",
    "~~",
    "$x$",
    "[a](javascript:x)",
    "<br>",
    "\\",
    '"',
    "'",
    "é",
    "日本",
    "😀",
    "\ufeff",
    "1,234",
    " ",
]


def _text(characters: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pieces = st.lists(st.one_of(st.sampled_from(PIECES), characters), min_size=1, max_size=10)
    return pieces.map("".join).filter(lambda s: s.strip() != "")


HOSTILE = _text(st.characters())  # lone surrogates too: what a str may hold
# What a session file can hold: JSON text is Unicode, so no lone surrogate (a line with one is broken).
IN_SESSION = _text(st.characters(exclude_categories=["Cs"]))
# A file or folder name: no "/" or NUL, short enough for any filesystem, not "." or ".." or hidden.
NAME = IN_SESSION.map(lambda s: s.replace("/", "∕").replace("\x00", "")).filter(
    lambda s: s.strip() != "" and len(s.encode()) <= 80 and not s.startswith(".") and s != "chats"
)

MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "div", "table", "thead"}
PAGE_TAGS |= {"tbody", "tr", "th", "td", "script"}
MARKDOWN_TAGS = {
    "h2",
    "h3",
    "p",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "ul",
    "li",
    "pre",
    "code",
    "br",
}


# What CommonMark trims from the two ends of a table cell or a paragraph (its whitespace, as the renderer
# defines it); line breaks are not among them once escaped (``<br>``, ``&#13;``).
_TRIMMED = MD_TRIM_CHARS.replace("\r", "").replace("\n", "")


def shown(text: str) -> str:
    """What a renderer shows of ``text`` in a table cell, list item or paragraph: NUL is U+FFFD
    (CommonMark), and the blanks at its two ends are gone."""
    return text.replace("\x00", "\ufffd").strip(_TRIMMED)


def in_xml(text: str) -> str:
    """``text`` as XML 1.0 can hold it (the characters it cannot, as U+FFFD)."""
    return "".join(
        "\ufffd"
        if (ord(c) < 0x20 and c not in "\t\n\r") or c in "\ufffe\uffff" or "\ud800" <= c <= "\udfff"
        else c
        for c in text
    )


def in_html(text: str) -> str:
    """``text`` as an HTML page in UTF-8 can hold it (NUL and lone surrogates as U+FFFD)."""
    return "".join("\ufffd" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in text)


class Page(HTMLParser):
    """The tags of an HTML text, its tables (cell texts, ``<br>`` as a line feed), code blocks and list
    items."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.code: list[str] = []
        self.items: list[str] = []
        self.paragraphs: list[str] = []
        self.scripts: list[str] = []
        self._open: list[tuple[str, list[str]]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag == "br":
            self.handle_data("\n")
        if tag in ("td", "th", "code", "li", "p", "script"):
            self._open.append((tag, []))

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1][0] == tag:
            _, parts = self._open.pop()
            text = "".join(parts)
            if tag in ("td", "th"):
                self.tables[-1][-1].append(text)
            elif tag == "code":
                self.code.append(text)
            elif tag == "li":
                self.items.append(text)
            elif tag == "script":
                self.scripts.append(text)
            else:
                self.paragraphs.append(text)

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][1].append(data)


def check_markdown(text: str) -> Page:
    """The markdown renders to no tag but markdown's own, every table row has its header's cells, and no
    raw tag of the data is left outside a code block (``<br>`` is the escaper's line break)."""
    page = Page(MD.render(text))
    assert set(page.tags) <= MARKDOWN_TAGS, set(page.tags) - MARKDOWN_TAGS
    for table in page.tables:
        assert {len(row) for row in table} == {len(table[0])}, table
    outside = text.split("\n")
    fence = None
    for line in outside:
        if fence is None and line.startswith("```"):
            fence = line[: len(line) - len(line.lstrip("`"))]
        elif fence is not None and line == fence:
            fence = None
        elif fence is None:
            assert "<" not in line.replace("<br>", ""), line
    return page


# --------------------------------------------------------------------------------------------- escapers


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_markdown_escape_keeps_a_cell_and_shows_the_text(text: str) -> None:
    page = check_markdown(f"| a | b |\n|---|---|\n| {escape_markdown(text)} | 1,234 |\n")
    assert page.tables == [[["a", "b"], [shown(text), "1,234"]]]


@settings(max_examples=100, deadline=None)
@given(HOSTILE)
def test_markdown_escape_in_a_list_item_and_a_paragraph(text: str) -> None:
    page = check_markdown(f"- lost: {escape_markdown(text)}\n\nfrom {escape_markdown(text)} to x\n")
    assert page.items == [shown(f"lost: {text}")]
    assert page.paragraphs[-1] == shown(f"from {text} to x")


@settings(max_examples=100, deadline=None)
@given(HOSTILE)
def test_markdown_code_block_shows_the_text_verbatim(text: str) -> None:
    text = text.replace("\r", "")  # a CR is a line ending: a code block shows it as one (CommonMark)
    page = check_markdown(f"before\n\n{markdown_code_block(text, 'xml')}\n\n| a |\n|---|\n| 1 |\n")
    body = text.replace("\x00", "\ufffd")
    assert page.code == [body if body.endswith("\n") else body + "\n"]
    assert page.tables == [[["a"], ["1"]]]  # the block ended where it should


def test_numbers_are_not_escaped() -> None:
    for number in ("1,234", "-5", "+3", "12.5%", "0.75", "2026-06-01"):
        assert escape_markdown(number) == number


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_html_escape_shows_the_text_and_adds_no_tag(text: str) -> None:
    page = Page(f'<table><tr><td title="{escape_html(text)}">{escape_html(text)}</td></tr></table>')
    assert page.tags == ["table", "tr", "td"]
    assert page.tables == [[[in_html(text)]]]
    assert html.unescape(escape_html(text)) == in_html(text)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(IN_SESSION, st.lists(IN_SESSION, max_size=3), max_size=3))
def test_json_in_a_script_element_parses_back(value: dict[str, list[str]]) -> None:
    text = json_in_html_script(json.dumps(value, ensure_ascii=False))
    assert not {"<", ">", "&", "\u2028", "\u2029"} & set(text)
    assert json.loads(text) == value
    page = Page(f"<script>{text}</script><p>after</p>")
    assert page.tags == ["script", "p"]
    assert json.loads(page.scripts[0]) == value


@settings(max_examples=200, deadline=None)
@given(HOSTILE)
def test_xml_escape_round_trips_through_a_parser(text: str) -> None:
    doc = f'<a b="{escape_xml(text, attribute=True)}">{escape_xml(text)}</a>'
    root = ET.fromstring(doc)
    assert root.get("b") == in_xml(text)
    assert (root.text or "") == in_xml(text)
    assert "]]>" not in escape_xml(text)


@settings(max_examples=100, deadline=None)
@given(HOSTILE)
def test_workflow_commands_stay_on_one_line(text: str) -> None:
    line = f"::error title={workflow_property(text)}::{workflow_data(text)}"
    assert "\n" not in line
    assert "\r" not in line
    title, message = line.removeprefix("::error title=").split("::", 1)
    assert "::" not in title
    assert "," not in title
    assert _workflow_decode(message) == text
    assert _workflow_decode(title) == text


def _workflow_decode(text: str) -> str:
    """What the Actions runner does to a command's value (actions/runner ``ActionCommand`` unescaping)."""
    for code, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(code, char)
    return text


# --------------------------------------------------------------------------------------------- commands

HEADER = {
    "sessionId": "0e5c0000-0000-4000-8000-000000000000",
    "projectHash": "cd" * 32,
    "startTime": "2026-06-01T10:00:00.000Z",
    "lastUpdated": "2026-06-01T10:10:00.000Z",
    "kind": "main",
}


def _session(prompt: str, tool: str, path: str, output: str, model: str) -> list[dict[str, Any]]:
    call = {
        "id": "c1",
        "name": tool,
        "args": {"file_path": path, "command": prompt},
        "result": [{"functionResponse": {"id": "c1", "name": tool, "response": {"output": output}}}],
        "status": "success",
        "timestamp": "2026-06-01T10:00:02.000Z",
    }
    tokens = {"input": 1200, "output": 40, "cached": 100, "thoughts": 0, "tool": 0, "total": 1240}
    return [
        {"id": "u1", "timestamp": "2026-06-01T10:00:01.000Z", "type": "user", "content": [{"text": prompt}]},
        {
            "id": "g1",
            "timestamp": "2026-06-01T10:00:02.000Z",
            "type": "gemini",
            "content": f"Read {path}",
            "model": model,
            "tokens": tokens,
            "toolCalls": [call],
        },
        {"id": "u2", "timestamp": "2026-06-01T10:01:00.000Z", "type": "user", "content": [{"text": "go on"}]},
        {
            "id": "g2",
            "timestamp": "2026-06-01T10:01:02.000Z",
            "type": "gemini",
            "content": output,
            "model": model,
            "tokens": {**tokens, "input": 1500, "total": 1540},
        },
    ]


def _write(root: Path, project: str, name: str, records: list[dict[str, Any]]) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    return write_jsonl(root / "tmp" / project / "chats" / f"session-2026-06-01T10-00-{name}.jsonl", records)


_HOSTILE_SESSION = {
    "prompt": IN_SESSION,
    "tool": IN_SESSION,
    "path": IN_SESSION,
    "output": IN_SESSION,
    "model": IN_SESSION,
    "project": NAME,
    "name": NAME,
}
_SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(**_HOSTILE_SESSION)
def test_diff_markdown_with_hostile_text(
    tmp_path: Path, prompt: str, tool: str, path: str, output: str, model: str, project: str, name: str
) -> None:
    messages = _session(prompt, tool, path, output, model)
    before = _write(tmp_path / "s", project, name, [HEADER, *messages])
    snapshot = f"<state_snapshot>\n{prompt}\n</state_snapshot>"
    compacted = [
        {
            "id": "s1",
            "timestamp": "2026-06-01T10:02:00.000Z",
            "type": "user",
            "content": [{"text": snapshot}],
        },
        *messages[2:],
    ]
    after = write_jsonl(tmp_path / "after.jsonl", [HEADER, *compacted])
    out = tmp_path / "diff.md"
    assert run(["diff", str(before), str(after), "-f", "markdown", "-o", str(out), "--show-secrets"]) == 0
    text = out.read_text(encoding="utf-8")
    page = check_markdown(text)

    d = diff_sessions(read_session(before), read_session(after))
    assert page.paragraphs[0] == shown(f"{before} → {after}: {counts_line(d)}.")
    _, groups, listed = page.tables
    assert [row[0] for row in groups[1:]] == [shown(f"{g.dimension} {g.key}") for g in d.groups]
    assert [row[3] for row in listed[1:]] == [shown(r["type"]) for r in message_rows(d)]
    assert [row[5] for row in listed[1:]] == [shown(clip_preview(r["content"], 80)) for r in message_rows(d)]
    assert page.code == [snapshot.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd") + "\n"]
    assert d.retention is not None
    lost = [fact for kind in FACT_KINDS for fact in d.retention.kind(kind).lost]
    assert [i for i in page.items if i.startswith("lost: ")] == [shown(f"lost: {f}") for f in lost]


@_SETTINGS
@given(**_HOSTILE_SESSION)
def test_audit_markdown_junit_and_annotations_with_hostile_text(
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    prompt: str,
    tool: str,
    path: str,
    output: str,
    model: str,
    project: str,
    name: str,
) -> None:
    _write(tmp_path / "s", project, name, [HEADER, *_session(prompt, tool, path, output, model)])
    budgets = ["--no-config", "--max-session-tokens", "1", "--max-tool-output-share", "0%", "--show-secrets"]
    args = ["audit", str(tmp_path / "s"), *budgets]
    capsysbinary.readouterr()
    assert run([*args, "-f", "json", "-o", str(tmp_path / "a.json"), "--github"]) == 3
    # The runner reads its commands a line at a time, lines ending at LF or CR (not U+2028 and the like).
    annotations = capsysbinary.readouterr().out.decode().split("\n")
    assert annotations.pop() == ""
    doc = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))
    failed = [c for c in doc["checks"] if c["status"] == "fail"]
    assert {c["rule"] for c in failed} == {"max-session-tokens", "max-tool-output-share"}
    assert any(tool in (c["offender"] or "") for c in failed)

    assert run([*args, "-o", str(tmp_path / "a.md")]) == 3
    page = check_markdown((tmp_path / "a.md").read_text(encoding="utf-8"))
    [table] = page.tables
    rows = Counter((row[1], row[5]) for row in table[1:])
    assert rows == Counter((shown(c["subject"]), shown(c["offender"] or "")) for c in doc["checks"])

    assert run([*args, "-o", str(tmp_path / "a.xml")]) == 3
    root = ET.parse(tmp_path / "a.xml").getroot()
    cases = root.findall("./testsuite/testcase")
    assert Counter(c.get("classname") for c in cases) == Counter(
        in_xml(f"ctxtool.audit.{c['subject']}") for c in doc["checks"]
    )
    failures = [f.get("message") for f in root.iter("failure")]
    assert Counter(failures) == Counter(in_xml(c["message"]) for c in failed)
    assert Counter(f.text for f in root.iter("failure")) == Counter(in_xml(c["message"]) for c in failed)

    assert len(annotations) == len(failed)
    got = Counter(_workflow_decode(line.split("::", 2)[2]) for line in annotations)
    assert got == Counter(f"{c['subject']}: {c['message']}" for c in failed)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**_HOSTILE_SESSION)
def test_html_report_with_hostile_text(
    tmp_path: Path, prompt: str, tool: str, path: str, output: str, model: str, project: str, name: str
) -> None:
    _write(tmp_path / "s", project, name, [HEADER, *_session(prompt, tool, path, output, model)])
    page_file = tmp_path / "report.html"
    code = run(
        ["report", str(tmp_path / "s"), "-o", str(page_file), "--no-cache", "--show-secrets", "--compare"]
    )
    assert code == 0
    page = Page(page_file.read_text(encoding="utf-8"))
    assert set(page.tags) <= PAGE_TAGS, set(page.tags) - PAGE_TAGS
    assert page.tags.count("script") == 2  # the Vega runtime and the charts: none from the data
    consumers = page.tables[0]
    header = consumers[0]
    assert tool.replace("\x00", "\ufffd") in [row[header.index("tool")] for row in consumers[1:]]
    # The charts' data and titles are JSON inside the page's last script: it parses, and holds the text.
    specs = _embedded_json(page.scripts[-1])
    assert f"Context per request: session-2026-06-01T10-00-{name}" in _strings(specs)
    compared = page.tables[1]
    assert {row[compared[0].index("session")] for row in compared[1:]} == {
        f"session-2026-06-01T10-00-{name}.jsonl"
    }


def _embedded_json(script: str) -> list[Any]:
    """The JSON values of the ``vegaEmbed(<id>, <spec>, <options>)`` calls of the page's last script."""
    decoder = json.JSONDecoder()
    values = []
    for line in script.strip().split("\n"):
        assert line.startswith("vegaEmbed("), line
        at = len("vegaEmbed(")
        for _ in range(3):
            value, at = decoder.raw_decode(line, at)
            values.append(value)
            at = len(line) - len(line[at:].lstrip(", "))
    return values


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_strings(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value))
    return set()
