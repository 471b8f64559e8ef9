"""Tables fit the terminal: short session ids, paths cut from the left, numbers never cut, --wide."""

from __future__ import annotations

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
        (12, "…b13fa.jsonl"),
    ],
)
def test_paths_are_shortened_from_the_left(width: int, expected: str) -> None:
    path = "/home/u/.gemini/tmp/proj/chats/session-2026-04-25T01-53-cd7b13fa.jsonl"
    got = render.short_path(path, width)
    assert got == expected
    assert len(got) <= width


def test_narrow_stats_drop_columns_name_them_and_wide_shows_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["stats", str(ROOT), "--by", "session", "--width", "80", "--no-cache"]) == 0
    narrow = capsys.readouterr().out
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert "Not shown (too narrow): start, turns, cached, thoughts, peak_context," in narrow
    assert "--wide shows every column." in narrow
    assert "│ c4e5f6a7 " in narrow  # the short id, whole
    assert "147,000" in narrow  # numbers whole, every digit (input without the 152,000 cached)
    assert "302,100" in narrow

    assert run(["stats", str(ROOT), "--by", "session", "--width", "80", "--no-cache", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "Not shown" not in wide
    header = next(line for line in wide.splitlines() if "session" in line and "project" in line)
    for column in ("start", "turns", "thoughts", "peak ctx", "cache %", "compr."):
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
