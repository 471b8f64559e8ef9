"""Damaged files (cut anywhere, lines lost or repeated, bytes that are not UTF-8) give a SessionFormatError or
a result, never a crash, and both projections of the one reading agree on what the file holds.

``parse_session_bytes`` (the messages ``compact``, ``diff``, ``audit`` and ``compare`` read) and
``columns_from_bytes`` (the columns ``stats`` counts) decode through ``ctxtool.session.utf8.read_as_node`` and
the one replay of ``ctxtool.session.read``. The property draws fresh examples on every run (no fixed seed),
over the fixtures and the 43 real sessions; every failure it has found is kept below as an ``@example``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxtool.common.errors import SessionFormatError
from ctxtool.measure.tokens import token_count
from ctxtool.session.columns import FileColumns, columns_from_bytes, message_rows
from ctxtool.session.discover import SessionPath
from ctxtool.session.read import SessionFile, parse_session_bytes
from tests.conftest import FIXTURES, REAL_SESSIONS

FIXTURE_SOURCES = sorted(p for p in (FIXTURES / "gemini" / "tmp").rglob("*.json*") if ".tmp" not in p.name)
REAL_SOURCES = sorted(REAL_SESSIONS.glob("*.json*"))
SOURCES = FIXTURE_SOURCES + REAL_SOURCES
_BYTES = {p: p.read_bytes() for p in SOURCES}

# Bytes that are not UTF-8 on their own: a lone continuation byte, a lead byte without its continuation, an
# overlong form, an encoded surrogate, a code point past U+10FFFF, bytes that are never UTF-8.
_BAD_UTF8 = [b"\x80", b"\xc3", b"\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]
_BAD_UTF8 += [b"\xff", b"\xfe"]

# A damage: ("flip", where, byte) | ("insert", where, bad UTF-8) | ("drop_line", n) | ("repeat_line", n).
_damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 31), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 31), st.sampled_from(_BAD_UTF8)),
    st.tuples(st.just("drop_line"), st.integers(0, 1 << 31)),
    st.tuples(st.just("repeat_line"), st.integers(0, 1 << 31)),
)


def damage(data: bytes, start: int, cut: int, changes: list[tuple[object, ...]]) -> bytes:
    """``data[start:cut]`` (``start`` moved back to a line's start), then ``changes`` applied in order."""
    begin = data.rfind(b"\n", 0, max(0, min(start, len(data)))) + 1 if start else 0
    out = bytearray(data[begin : max(begin, min(cut, len(data)))])
    for change in changes:
        if not out:
            break
        kind, where = change[0], int(change[1])  # type: ignore[call-overload]
        at = where % len(out)
        if kind == "flip":
            out[at] = int(change[2])  # type: ignore[call-overload]
        elif kind == "insert":
            out[at:at] = change[2]  # type: ignore[index]
        else:
            lines = bytes(out).split(b"\n")
            n = where % len(lines)
            if kind == "drop_line":
                del lines[n]
            else:
                lines.insert(n, lines[n])
            out = bytearray(b"\n".join(lines))
    return bytes(out)


@st.composite
def damaged(draw: st.DrawFn) -> tuple[Path, bytes]:
    source = draw(st.sampled_from(SOURCES))
    data = _BYTES[source]
    if draw(st.booleans()):  # the whole file, or a cut of it ending anywhere
        start, cut = 0, draw(st.one_of(st.just(len(data)), st.integers(0, len(data))))
    else:  # a window of at most 64 KB from anywhere in it, from a line's start: big files stay quick
        start = draw(st.integers(0, len(data)))
        cut = start + draw(st.integers(0, 64 * 1024))
    changes = draw(st.lists(_damage, max_size=4))
    return source, damage(data, start, cut, changes)


def _fixture(name: str) -> Path:
    return next(p for p in FIXTURE_SOURCES if p.name == name)


def _old_failure(name: str, cut: int, flips: list[tuple[int, int]]) -> tuple[Path, bytes]:
    """A failure the earlier form of this test found (a cut, then bytes set), kept as an example."""
    source = _fixture(name)
    return source, damage(_BYTES[source], 0, cut, [("flip", at, value) for at, value in flips])


@settings(max_examples=2000)
@given(damaged())
# msgspec 0.23.0 raises DecodeError, where 0.22.0 raised UnicodeDecodeError, on bytes that are not UTF-8: the
# columns counted a broken line, lost a message id, or refused a file the full reader read (2026-12-01).
@example(_old_failure("session-2026-04-20T10-00-e1e2e3e4.jsonl", 376, [(235, 128)]))
@example(_old_failure("session-2026-04-20T10-00-e1e2e3e4.jsonl", 376, [(14, 128)]))
@example(_old_failure("q7w8e9.jsonl", 237, [(14, 128)]))
def test_damaged_files_read_alike_by_both_projections(case: tuple[Path, bytes]) -> None:
    source, data = case
    sp = SessionPath(source, "p", "p", None, str(source))
    outcomes: list[object] = []
    for read in (lambda: parse_session_bytes(data, source), lambda: columns_from_bytes(data, sp)):
        try:
            outcomes.append(read())
        except SessionFormatError as exc:
            outcomes.append(str(exc))
    for outcome in outcomes:
        if isinstance(outcome, str):  # one line, naming the file
            assert "\n" not in outcome
            assert outcome.startswith(str(source))
    full, fast = outcomes
    # Both readers agree on whether the damaged bytes are still a session, and on what it holds.
    if isinstance(full, str) or isinstance(fast, str):
        assert full == fast
        return
    assert isinstance(full, SessionFile)
    assert isinstance(fast, FileColumns)
    ids = [m.get("id") if isinstance(m.get("id"), str) else None for m in full.billed]
    rows = message_rows(fast)
    assert [r["message_id"] for r in rows] == ids
    assert [_counted(r) for r in rows] == [_input(m) for m in full.billed]
    assert fast.live_messages == len(full.messages)
    assert fast.era == full.era
    assert (fast.lines, fast.blank_lines, fast.broken_lines, fast.first_broken_line) == (
        full.lines,
        full.blank_lines,
        full.broken_lines,
        full.first_broken_line,
    )
    assert (fast.rewinds, fast.checkpoints, fast.unknown_records) == (
        full.rewinds,
        full.checkpoints,
        full.unknown_records,
    )


def _counted(row: dict[str, object]) -> object:
    """The prompt tokens ``stats`` counts of a row of the columns: a ``gemini`` message's (a request's)."""
    return row["input"] if row["type"] == "gemini" else None


def _input(message: dict[str, object]) -> object:
    """The prompt tokens ``stats`` counts for a message of the full reader (None for a message without)."""
    tokens = message.get("tokens")
    if message.get("type") != "gemini" or not isinstance(tokens, dict):
        return None
    return token_count(tokens.get("input"))


def test_bad_utf8_becomes_what_node_reads_in_both() -> None:
    """A record holding bytes that are not UTF-8 is kept by both, its text read with U+FFFD."""
    source = _fixture("session-2026-04-20T10-00-e1e2e3e4.jsonl")
    data = _BYTES[source].replace(b'"type":"user"', b'"type":"user","x":"\xff\xc3"', 1)
    assert data != _BYTES[source]
    sp = SessionPath(source, "p", "p", None, str(source))
    full, fast = parse_session_bytes(data, source), columns_from_bytes(data, sp)
    assert full.broken_lines == fast.broken_lines == parse_session_bytes(_BYTES[source], source).broken_lines
    assert fast.invalid_utf8_lines == 1
    assert any(m.get("x") == "\ufffd\ufffd" for m in full.billed)
    assert [r["message_id"] for r in message_rows(fast)] == [m["id"] for m in full.billed]


@pytest.mark.parametrize("source", FIXTURE_SOURCES[:3], ids=lambda p: p.name)
def test_every_prefix_of_a_small_file(source: Path) -> None:
    data = source.read_bytes()[:4000]
    sp = SessionPath(source, "p", "p", None, str(source))
    for cut in range(0, len(data), 7):
        piece = data[:cut]
        for read in (parse_session_bytes, lambda b, _p: columns_from_bytes(b, sp)):
            with contextlib.suppress(SessionFormatError):
                read(piece, source)


def test_a_later_copy_of_another_type_is_no_request_in_either() -> None:
    """What the property test found on 2026-12-02: a message recorded with tokens, then again without them
    under a damaged type (``\x80gemini``, read as U+FFFD then ``gemini``). Both readers carry the counts to
    the later copy (a later copy of the right type must keep them: a checkpoint rewrites a reply without
    them), and neither makes it a request: it is no ``gemini`` message. The property compared the counts of
    every row; it now compares what ``stats`` counts."""
    source = _fixture("session-2026-04-20T10-00-e1e2e3e4.jsonl")
    meta = b'{"sessionId":"e435870b-a192-4f84-bd7e-1ec28e9c2f31","startTime":"2026-04-25T08:23:24.509Z"}\n'
    first = (
        b'{"id":"m1","timestamp":"2026-04-25T08:27:56.277Z","type":"gemini","content":"","tokens":{"input":10901,'
        b'"output":24,"cached":0,"thoughts":721,"tool":0,"total":11646},"model":"gemini-3-flash-preview"}\n'
    )
    again = b'{"id":"m1","timestamp":"2026-04-25T08:27:56.277Z","type":"\x80gemini","content":""}\n'
    data = meta + first + again
    sp = SessionPath(source, "p", "p", None, str(source))
    full = parse_session_bytes(data, source)
    rows = message_rows(columns_from_bytes(data, sp))
    assert [_input(m) for m in full.billed] == [_counted(r) for r in rows] == [None]
    assert rows[0]["input"] == 10901  # carried, and not counted
