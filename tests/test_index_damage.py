"""A damaged index never changes a figure and never ends a run: what the index reads back is checked (a
checksum per entry), an entry that fails the check is read again from its session file, a database SQLite
itself finds damaged is rebuilt, each with one ``notice:`` line naming the index; the run after is warm."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from ctxtool.cli import run
from ctxtool.frames import tally as T
from ctxtool.session import index as index_module
from ctxtool.session import stamp
from tests.conftest import FIXTURES

# A one-file session the warm run serves from the index: its kept measure, entry and rows are what we damage.
ONE_FILE = Path("ops-box") / "chats" / "session-2026-07-22T01-38-a2a-serv.jsonl"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CTXTOOL_NO_REPLAY", "1")  # every run reads the index, none replays the last output
    target = tmp_path / "gemini" / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", target)
    return target


class Run(msgspec.Struct):
    code: int
    doc: dict[str, Any]
    notices: list[str]
    rest: list[str]  # the other lines of stderr

    @property
    def report(self) -> dict[str, Any]:
        """The output without the index's account of itself (what a run without the index prints)."""
        doc = orjson.loads(orjson.dumps(self.doc))
        doc["read"].pop("index")
        return doc  # type: ignore[no-any-return]

    @property
    def index(self) -> dict[str, Any]:
        return self.doc["read"]["index"]  # type: ignore[no-any-return]


def stats(capsysbinary: pytest.CaptureFixture[bytes], home: Path, by: str, *args: str) -> Run:
    code = run(["stats", str(home), "-f", "json", "--by", by, *args])
    got = capsysbinary.readouterr()
    err = got.err.decode().splitlines()
    assert "Traceback" not in got.err.decode()
    doc = orjson.loads(got.out) if code == 0 else {}
    notices = [line for line in err if line.startswith("notice:")]
    return Run(code, doc, notices, [line for line in err if not line.startswith("notice:")])


def database(cache: Path) -> Path:
    return cache / "index" / f"{stamp.STAMP}.sqlite"


def warm_cache(capsysbinary: pytest.CaptureFixture[bytes], home: Path, cache: Path, by: str) -> Run:
    """A cache the next run is served from, and the report of a run without the index."""
    stats(capsysbinary, home, by, "--cache-dir", str(cache))
    warm = stats(capsysbinary, home, by, "--cache-dir", str(cache))
    assert warm.index["files_from_index"] == 16
    cold = stats(capsysbinary, home, by, "--no-cache")
    assert (cold.code, cold.notices) == (0, [])
    assert warm.report == cold.report
    return cold


def damaged_run(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, cache: Path, by: str, cold: Run
) -> Run:
    """The run over the damaged index: the report of a run without it, and one notice naming the index."""
    shutil.rmtree(cache / "corpus", ignore_errors=True)  # (``--by request``: else its stored frames serve)
    hurt = stats(capsysbinary, home, by, "--cache-dir", str(cache))
    assert hurt.code == 0
    assert hurt.report == cold.report
    assert hurt.rest == cold.rest
    assert len(hurt.notices) == 1, hurt.notices
    notice = hurt.notices[0]
    assert str(database(cache)) in notice
    # What became of it: read or measured again, rebuilt, or how to clear it; never a folder to make writable.
    assert any(fix in notice for fix in ("read again", "measured again", "rebuilt", "cache clear")), notice
    assert "cannot be written" not in notice
    return hurt


def assert_repaired(
    capsysbinary: pytest.CaptureFixture[bytes],
    home: Path,
    cache: Path,
    by: str,
    cold: Run,
    *,
    within: int = 1,
) -> None:
    """The runs after the damaged one say nothing and print the same report, and by the ``within``-th every
    file is served from the index again. (Damage the run found is repaired at once; what it did not need to
    read, say the rows of a file whose kept measure it used, the repair finds damaged and leaves out, unsaid,
    and the next run reads that file again.)"""
    for _ in range(within):
        shutil.rmtree(cache / "corpus", ignore_errors=True)
        again = stats(capsysbinary, home, by, "--cache-dir", str(cache))
        assert (again.code, again.notices, again.rest) == (0, [], cold.rest)
        assert again.report == cold.report
    assert again.index["files_from_index"] == 16


def flip_bit(data: bytes, marker: bytes) -> bytes:
    """``data`` with the lowest bit of the last byte of ``marker`` (found once in it) flipped."""
    assert data.count(marker) == 1, marker
    at = data.index(marker) + len(marker) - 1
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def _measure_total(path: str, data: bytes) -> bytes:
    """A kept measure's ``total`` (a figure the warm report sums as it is), one bit off."""
    total = msgspec.msgpack.decode(data)[0]["total"]
    return flip_bit(data, b"\xa5total" + msgspec.msgpack.encode(total))


def _entry_broken_lines(path: str, data: bytes) -> bytes:
    """An entry's count of broken lines (the report's ``broken_lines``), one bit off."""
    return flip_bit(data, b"\xacbroken_lines\x00")


def _rows_total(path: str, data: bytes) -> bytes:
    """A request's total tokens in a file's rows (``7230`` read as ``6230``)."""
    return flip_bit(data, b"7230")


FLIPS = {
    "side": (
        "SELECT path, data FROM side WHERE path = ? AND kind = ?",
        "UPDATE side SET data = ? WHERE path = ?",
    ),
    "entries": (
        "SELECT path, entry FROM entries WHERE path = ?",
        "UPDATE entries SET entry = ? WHERE path = ?",
    ),
    "rows": ("SELECT path, rows FROM rows WHERE path = ?", "UPDATE rows SET rows = ? WHERE path = ?"),
}


@pytest.mark.parametrize(
    ("table", "edit", "by"),
    [
        ("side", _measure_total, "session"),
        ("entries", _entry_broken_lines, "session"),
        ("entries", _entry_broken_lines, "request"),
        ("rows", _rows_total, "request"),
    ],
)
def test_one_flipped_bit_in_an_entry_is_read_again_from_the_session_and_said_once(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path, table: str, edit: Any, by: str
) -> None:
    cache = tmp_path / "cache"
    cold = warm_cache(capsysbinary, home, cache, by)
    select, update = FLIPS[table]
    target = str(home / ONE_FILE)
    with sqlite3.connect(database(cache)) as db:
        args = (target, T.MEASURED) if table == "side" else (target,)
        ((path, data),) = db.execute(select, args).fetchall()
        assert db.execute(update, (edit(path, data), path)).rowcount == 1
    hurt = damaged_run(capsysbinary, home, cache, by, cold)
    assert "1 index entry in " in hurt.notices[0]
    # A kept measure is made again from the file's rows in the index; an entry or rows, from the file.
    again = "measured again" if table == "side" else "read again from the session files"
    assert hurt.notices[0].endswith(f"those files were {again}")
    assert_repaired(capsysbinary, home, cache, by, cold)


def scatter(path: Path, seed: int, count: int) -> None:
    """Write ``count`` random bytes at random places of the database's pages (past SQLite's 100-byte file
    header, whose damage makes it "not a database": ``test_cache_is_data``)."""
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    for _ in range(count):
        data[rng.randrange(100, len(data))] = rng.randrange(256)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("by", ["session", "request"])
@pytest.mark.parametrize(("seed", "count"), [*((seed, 64) for seed in range(1, 9)), (9, 3000)])
def test_random_bytes_over_the_pages_never_change_a_figure_nor_end_the_run(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path, seed: int, count: int, by: str
) -> None:
    cache = tmp_path / "cache"
    cold = warm_cache(capsysbinary, home, cache, by)
    scatter(database(cache), seed, count)
    damaged_run(capsysbinary, home, cache, by, cold)
    assert_repaired(capsysbinary, home, cache, by, cold, within=2)


@pytest.mark.parametrize("by", ["session", "request"])
@pytest.mark.parametrize("keep", [0.5, 0.25, 4096 + 17])
def test_a_truncated_index_never_changes_a_figure_nor_ends_the_run(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path, keep: float, by: str
) -> None:
    cache = tmp_path / "cache"
    cold = warm_cache(capsysbinary, home, cache, by)
    whole = database(cache).read_bytes()
    database(cache).write_bytes(whole[: int(keep if keep > 1 else len(whole) * keep)])
    damaged_run(capsysbinary, home, cache, by, cold)
    assert_repaired(capsysbinary, home, cache, by, cold, within=2)


def test_a_replaced_index_keeps_every_entry_that_passes_its_checksum(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path
) -> None:
    """When SQLite finds the database damaged, the new one that replaces it holds what of it is intact: here
    every file but one, whose rows (which a warm run by session never reads) were damaged; that file alone is
    read again, unsaid, by the next run."""
    cache = tmp_path / "cache"
    cold = warm_cache(capsysbinary, home, cache, "session")
    with sqlite3.connect(database(cache)) as db:
        ((path, data),) = db.execute(FLIPS["rows"][0], (str(home / ONE_FILE),)).fetchall()
        db.execute(FLIPS["rows"][1], (_rows_total(path, data), path))
    index = index_module.FileIndex(cache)
    index._set_aside("damaged by the test")
    assert index._connect(create=True) is not None
    assert index.rebuilt
    index.close()
    assert len(index_module.FileIndex(cache)) == 15
    assert list(database(cache).parent.iterdir()) == [database(cache)]  # the damaged one is gone
    after = stats(capsysbinary, home, "session", "--cache-dir", str(cache))
    assert (after.notices, after.report, after.index["files_parsed"]) == ([], cold.report, 1)
    assert_repaired(capsysbinary, home, cache, "session", cold)


def test_an_emptied_index_file_is_an_empty_index(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path
) -> None:
    """Truncated to nothing, the file is what SQLite takes for a new, empty database: every file is read
    again, as on a first run, and nothing is said."""
    cache = tmp_path / "cache"
    cold = warm_cache(capsysbinary, home, cache, "session")
    database(cache).write_bytes(b"")
    first = stats(capsysbinary, home, "session", "--cache-dir", str(cache))
    assert (first.code, first.notices, first.report) == (0, [], cold.report)
    assert_repaired(capsysbinary, home, cache, "session", cold)


def test_a_damaged_index_that_cannot_be_replaced_is_bypassed_and_says_how_to_clear_it(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite finds the database damaged and it cannot be replaced (here its new database cannot be made):
    the run reads the files without it, and its one notice names the index and ``ctxtool cache clear``."""
    cache = tmp_path / "cache"
    cold = warm_cache(capsysbinary, home, cache, "session")
    whole = database(cache).read_bytes()
    database(cache).write_bytes(whole[: len(whole) // 2])

    def cannot(path: Path) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(index_module, "_fresh", cannot)
    hurt = damaged_run(capsysbinary, home, cache, "session", cold)
    assert "ctxtool cache clear" in hurt.notices[0]
    assert hurt.index["files_parsed"] == 16


def test_cache_info_counts_nothing_of_a_damaged_index(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert run(["stats", str(home), "--cache-dir", str(cache), "-f", "json"]) == 0
    whole = database(cache).read_bytes()
    database(cache).write_bytes(whole[: len(whole) // 2])
    capsys.readouterr()
    assert run(["cache", "info", "--cache-dir", str(cache)]) == 0
    assert "indexed files:" in capsys.readouterr().out


def test_every_table_keeps_a_checksum_of_each_entry(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path
) -> None:
    """Each row of the index carries the CRC-32 of what it holds (and of the key it holds it under),
    and the layout that says so is a new one: an index written before is rebuilt, not misread."""
    cache = tmp_path / "cache"
    stats(capsysbinary, home, "session", "--cache-dir", str(cache))
    with sqlite3.connect(database(cache)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (index_module._LAYOUT,)
        for table in ("entries", "rows", "side"):
            sums = db.execute(f"SELECT sum FROM {table}").fetchall()
            assert len(sums) == 16
            assert all(isinstance(s, bytes) and len(s) == index_module._SUM_SIZE == 4 for (s,) in sums)
    assert index_module._LAYOUT >= 3
