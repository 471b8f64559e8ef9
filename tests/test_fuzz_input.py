"""Damaged files (cut anywhere, bytes flipped) give a SessionFormatError or a result, never a crash."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxtool.common.errors import SessionFormatError
from ctxtool.session.columns import FileColumns, columns_from_bytes, message_rows
from ctxtool.session.discover import SessionPath
from ctxtool.session.read import SessionFile, parse_session_bytes
from tests.conftest import FIXTURES

SOURCES = sorted(p for p in (FIXTURES / "gemini" / "tmp").rglob("*.json*") if ".tmp" not in p.name)


def damage(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data[: max(0, min(cut, len(data)))])
    for where, value in flips:
        if out:
            out[where % len(out)] = value
    return bytes(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SOURCES),
    st.integers(0, 20_000),
    st.lists(st.tuples(st.integers(0, 20_000), st.integers(0, 255)), max_size=4),
)
def test_damaged_files_never_crash_either_reader(
    source: Path, cut: int, flips: list[tuple[int, int]]
) -> None:
    data = damage(source.read_bytes(), cut, flips)
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
    assert isinstance(full, str) == isinstance(fast, str)
    if isinstance(full, SessionFile) and isinstance(fast, FileColumns):
        ids = [m.get("id") if isinstance(m.get("id"), str) else None for m in full.billed]
        assert [r["message_id"] for r in message_rows(fast)] == ids
        assert fast.live_messages == len(full.messages)
        assert fast.broken_lines == full.broken_lines


@pytest.mark.parametrize("source", SOURCES[:3], ids=lambda p: p.name)
def test_every_prefix_of_a_small_file(source: Path) -> None:
    data = source.read_bytes()[:4000]
    sp = SessionPath(source, "p", "p", None, str(source))
    for cut in range(0, len(data), 7):
        piece = data[:cut]
        for read in (parse_session_bytes, lambda b, _p: columns_from_bytes(b, sp)):
            with contextlib.suppress(SessionFormatError):
                read(piece, source)
