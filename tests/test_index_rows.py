"""A warm ``stats`` made without polars reads no rows of the files the index serves, and prints what a run
without the index prints; the rows it does need (a session of several files, a file the tally cannot
measure, a report the frames make) come from the index, or from the file again when the index's are damaged.
What the index keeps of each file's measure is checked for type: an edited one is measured again."""

from __future__ import annotations

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
from tests.conftest import FIXTURES, REAL_SESSIONS
from tests.test_tally import _one_request

SERVED = " Nothing changed since the last run: served from ctxtool's index."


@pytest.fixture
def home(tmp_path: Path) -> Path:
    target = tmp_path / "gemini" / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", target)
    return target


@pytest.fixture
def rows_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many files' rows the index decodes (one item per file)."""
    read: list[int] = []
    decode = index_module._decode_rows

    def counting(data: bytes) -> Any:
        read.append(len(data))
        return decode(data)

    monkeypatch.setattr(index_module, "_decode_rows", counting)
    monkeypatch.setenv("CTXTOOL_NO_REPLAY", "1")
    return read


def stats(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[bytes, bytes]:
    assert run(["stats", *args, "--width", "400"]) == 0
    got = capsysbinary.readouterr()
    return got.out, got.err


def without_index(out: bytes, fmt: str) -> bytes:
    """A report as a run without the index prints it: JSON without the index's account, a table without
    the caption's sentence on it."""
    if fmt == "json":
        doc = orjson.loads(out)
        doc["read"].pop("index")
        return orjson.dumps(doc)
    if fmt == "table":  # (the caption is wrapped, and the table's lines padded to the width)
        return b" ".join(out.split()).replace(SERVED.encode(), b"")
    return out


def index_of(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> dict[str, Any]:
    out, _ = stats(capsysbinary, *args, "-f", "json")
    return orjson.loads(out)["read"]["index"]  # type: ignore[no-any-return]


def database(cache: Path) -> Path:
    return cache / "index" / f"{stamp.STAMP}.sqlite"


def assert_warm_is_cold(
    capsysbinary: pytest.CaptureFixture[bytes], where: Path, cache: Path, *args: str, fmt: str = "json"
) -> None:
    warm = stats(capsysbinary, str(where), *args, "-f", fmt, "--cache-dir", str(cache))
    cold = stats(capsysbinary, str(where), *args, "-f", fmt, "--no-cache")
    assert (without_index(warm[0], fmt), warm[1]) == (without_index(cold[0], fmt), cold[1])


@pytest.mark.parametrize("fmt", ["json", "jsonl", "table"])
def test_a_warm_run_reads_no_rows_and_prints_what_a_run_without_the_index_prints(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path, rows_read: list[int], fmt: str
) -> None:
    cache = tmp_path / "cache"
    stats(capsysbinary, str(home), "-f", fmt, "--cache-dir", str(cache))
    for by in T.BY:
        rows_read.clear()
        assert_warm_is_cold(capsysbinary, home, cache, "--by", by, fmt=fmt)
        # The fixtures' one session of several files (a legacy .json resumed as a .jsonl) is measured
        # again, from its two files' rows; every other file's measure is the one the index kept.
        assert len(rows_read) == 2, by
    assert index_of(capsysbinary, str(home), "--cache-dir", str(cache))["corpus_from_cache"] is True
    one_file_sessions = home / "ops-box"
    stats(capsysbinary, str(one_file_sessions), "-f", fmt, "--cache-dir", str(cache))
    rows_read.clear()
    assert_warm_is_cold(capsysbinary, one_file_sessions, cache, fmt=fmt)
    assert rows_read == []


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="the real sessions are not on this machine")
def test_a_warm_run_over_the_real_sessions_prints_what_a_run_without_the_index_prints(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, rows_read: list[int]
) -> None:
    cache = tmp_path / "cache"
    files = index_of(capsysbinary, str(REAL_SESSIONS), "--cache-dir", str(cache))["files_parsed"]
    for by in ("session", "model", "day"):
        rows_read.clear()
        assert_warm_is_cold(capsysbinary, REAL_SESSIONS, cache, "--by", by)
        assert len(rows_read) < files
    assert_warm_is_cold(capsysbinary, REAL_SESSIONS, cache, fmt="table")


def test_a_time_with_an_offset_is_measured_and_kept_as_any_other(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, rows_read: list[int]
) -> None:
    """A time with an offset: the engine measures the file as it does any other, so a warm run reads no
    file's rows (the measures the index keeps answer) and prints what a cold one does."""
    chats = tmp_path / "tmp" / "p" / "chats"
    _one_request(chats, "b", start="2026-05-01T10:00:00+02:00", input=10)
    _one_request(chats.parent.parent / "q" / "chats", "c", start="2026-05-01T10:00:00.000Z", input=20)
    home, cache = chats.parent.parent, tmp_path / "cache"
    stats(capsysbinary, str(home), "-f", "json", "--cache-dir", str(cache))
    rows_read.clear()
    assert_warm_is_cold(capsysbinary, home, cache)
    assert rows_read == []
    assert index_of(capsysbinary, str(home), "--cache-dir", str(cache))["corpus_from_cache"] is True


def test_rows_the_index_cannot_give_are_read_from_the_file_again_and_said(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path, rows_read: list[int]
) -> None:
    """The rows of a file the warm run needs (here one of the resumed legacy pair) are damaged: that file
    is read again, the notice says so once, and the next run finds it in the index again."""
    cache = tmp_path / "cache"
    stats(capsysbinary, str(home), "-f", "json", "--cache-dir", str(cache))
    pair = home / "ctxdemo" / "chats" / "session-2026-03-20T11-00-abcd1234.jsonl"
    with sqlite3.connect(database(cache)) as db:
        assert (
            db.execute("UPDATE rows SET rows = ? WHERE path = ?", (b"\x93garbage", str(pair))).rowcount == 1
        )
    warm = stats(capsysbinary, str(home), "-f", "json", "--cache-dir", str(cache))
    cold = stats(capsysbinary, str(home), "-f", "json", "--no-cache")
    notice, _, err = warm[1].partition(b"\n")
    assert notice.startswith(b"notice: 1 index entry in ")
    assert b"those files were read again" in notice
    assert (without_index(warm[0], "json"), err) == (without_index(cold[0], "json"), cold[1])
    used = orjson.loads(warm[0])["read"]["index"]
    assert (used["files_from_index"], used["files_parsed"], used["corpus_from_cache"]) == (15, 1, False)
    again = stats(capsysbinary, str(home), "-f", "json", "--cache-dir", str(cache))
    assert b"notice" not in again[1]
    assert orjson.loads(again[0])["read"]["index"]["files_from_index"] == 16


def test_a_grown_file_is_resumed_from_its_rows_in_the_index(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path, rows_read: list[int]
) -> None:
    cache = tmp_path / "cache"
    stats(capsysbinary, str(home), "-f", "json", "--cache-dir", str(cache))
    grown = home / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
    record = {
        "id": "late-2",
        "timestamp": "2026-05-25T10:00:00.000Z",
        "type": "gemini",
        "content": "done",
        "model": "gemini-2.5-pro",
        "tokens": {"input": 1234, "output": 5, "cached": 0, "thoughts": 0, "tool": 0, "total": 1239},
    }
    with open(grown, "ab") as fh:
        fh.write(orjson.dumps(record) + b"\n")
    rows_read.clear()
    used = index_of(capsysbinary, str(home), "--cache-dir", str(cache))
    assert (used["files_resumed"], used["files_from_index"]) == (1, 15)
    assert len(rows_read) == 3  # the grown file's, to resume from; the resumed legacy pair's
    assert_warm_is_cold(capsysbinary, home, cache, "--by", "day")


def _edit_kept(cache: Path, edit: Any) -> str:
    """Apply ``edit`` to the kept measure of one file (as MessagePack decodes it, untyped); its path. Its
    checksum is made anew, as if a hand or another version had written the value: the index's own check
    passes it, and refusing it is the tally's job."""
    with sqlite3.connect(database(cache)) as db:
        path, size, mtime_ns, data = db.execute(
            "SELECT path, size, mtime_ns, data FROM side WHERE kind = ? ORDER BY path LIMIT 1", (T.MEASURED,)
        ).fetchone()
        kept = msgspec.msgpack.decode(data)
        edit(kept)
        data = msgspec.msgpack.encode(kept)
        digest = index_module._sum(index_module._side_key(T.MEASURED, path, size, mtime_ns), data)
        db.execute(
            "UPDATE side SET data = ?, sum = ? WHERE path = ? AND kind = ?", (data, digest, path, T.MEASURED)
        )
    return str(path)


def _kept(cache: Path) -> dict[str, Any]:
    with sqlite3.connect(database(cache)) as db:
        return dict(db.execute("SELECT path, data FROM side WHERE kind = ?", (T.MEASURED,)))


def _row_value(kept: list[Any]) -> None:
    kept[0]["input"] = "a great many"


def _cost(kept: list[Any]) -> None:
    kept[7] = "free"


def _request_tokens(kept: list[Any]) -> None:
    kept[5][2][0][0] = "some"


def _request_count(kept: list[Any]) -> None:
    kept[5][0].append("gemini-2.5-pro")


@pytest.mark.parametrize(
    ("edit", "by"),
    [(_row_value, "session"), (_cost, "session"), (_request_tokens, "day"), (_request_count, "model")],
)
def test_a_kept_measure_of_another_type_is_measured_again(
    capsysbinary: pytest.CaptureFixture[bytes],
    home: Path,
    tmp_path: Path,
    rows_read: list[int],
    edit: Any,
    by: str,
) -> None:
    """A value of another type in what the index keeps of a file's measure (a cache edited by hand, its
    checksum made anew), in its row, its costs or its requests: that file is measured again (its rows read
    from the index) and kept anew; the report is the one a run without the index prints."""
    cache = tmp_path / "cache"
    stats(capsysbinary, str(home), "-f", "json", "--by", by, "--cache-dir", str(cache))
    before = _kept(cache)
    path = _edit_kept(cache, edit)
    rows_read.clear()
    assert_warm_is_cold(capsysbinary, home, cache, "--by", by)
    assert len(rows_read) == 3  # the edited file's, the resumed legacy pair's
    assert _kept(cache)[path] == before[path]  # measured again, and kept as it was


def test_an_index_of_another_layout_is_read_as_none(
    capsysbinary: pytest.CaptureFixture[bytes], home: Path, tmp_path: Path, rows_read: list[int]
) -> None:
    """An index written before a file's rows were kept apart from its entry: its files are read again,
    silently (as after a new reader version), and it is laid out anew."""
    cache = tmp_path / "cache"
    database(cache).parent.mkdir(parents=True)
    with sqlite3.connect(database(cache)) as db:
        db.execute("CREATE TABLE entries (path TEXT PRIMARY KEY, entry BLOB NOT NULL)")
        db.execute("INSERT INTO entries VALUES (?, ?)", (str(home / "x.json"), b"\x90"))
    out, err = stats(capsysbinary, str(home), "-f", "json", "--cache-dir", str(cache))
    assert orjson.loads(out)["read"]["index"]["files_parsed"] == 16
    assert b"notice" not in err
    assert index_of(capsysbinary, str(home), "--cache-dir", str(cache))["files_from_index"] == 16
    with sqlite3.connect(database(cache)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (index_module._LAYOUT,)


def test_rows_another_run_holds_back_are_read_from_the_files_unsaid(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run holds the index (an exclusive lock) between the lookups and the rows: the files are read
    again, as when the lookups themselves find the index held, and nothing is said of damage."""
    from ctxtool.frames.loading import fill_rows, read_plain
    from ctxtool.session.scan import read_files

    cache = tmp_path / "cache"
    read_plain([home], cache=True, cache_dir=cache)
    index = index_module.FileIndex(cache, rows=False)
    results, found, use = read_plain([home], cache=True, cache_dir=cache, index=index)
    assert use.corpus_hit
    assert all(not fc.messages_cols for fc in results)
    monkeypatch.setattr(index_module, "_LOCK_TIMEOUT_S", 0.2)
    other = sqlite3.connect(database(cache), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        fill_rows(results, found, index, use)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert (use.notice, use.corpus_hit, use.files_parsed) == (None, False, 16)
    expected = read_files(found.files, workers=1)
    assert [(fc.path, fc.messages_cols, fc.tools_cols) for fc in results] == [
        (fc.path, fc.messages_cols, fc.tools_cols) for fc in expected
    ]
