"""The incremental index as a user meets it: second runs served from it, grown files resumed, clearing."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxtool.cli import run
from ctxtool.session import stamp as index_module
from tests.conftest import FIXTURES


@pytest.fixture
def data(tmp_path: Path) -> Path:
    target = tmp_path / "gemini" / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", target)
    return target


def stats_json(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> dict[str, object]:
    assert run(["stats", *args, "-f", "json", "--by", "request"]) == 0
    return orjson.loads(capsysbinary.readouterr().out)  # type: ignore[no-any-return]


def test_second_run_comes_from_the_index_with_the_same_rows(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path
) -> None:
    cache = str(tmp_path / "cache")
    first = stats_json(capsysbinary, str(data), "--cache-dir", cache)
    second = stats_json(capsysbinary, str(data), "--cache-dir", cache)
    cold = stats_json(capsysbinary, str(data), "--no-cache")
    assert first["read"]["index"]["files_parsed"] == 16  # type: ignore[index]
    assert second["read"]["index"]["corpus_from_cache"] is True  # type: ignore[index]
    assert first["rows"] == second["rows"] == cold["rows"]
    assert cold["read"]["index"]["enabled"] is False  # type: ignore[index]


def test_a_grown_session_is_resumed_and_counted_once(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path
) -> None:
    cache = str(tmp_path / "cache")
    stats_json(capsysbinary, str(data), "--cache-dir", cache)
    grown = data / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
    with open(grown, "ab") as fh:
        fh.write(
            orjson.dumps({"id": "late-1", "type": "user", "content": [{"text": "one more thing"}]}) + b"\n"
        )
        record = {
            "id": "late-2",
            "type": "gemini",
            "content": "done",
            "model": "gemini-2.5-pro",
            "tokens": {"input": 1234, "output": 5, "cached": 0, "thoughts": 0, "tool": 0, "total": 1239},
        }
        fh.write(orjson.dumps(record) + b"\n")
    after = stats_json(capsysbinary, str(data), "--cache-dir", cache)
    cold = stats_json(capsysbinary, str(data), "--no-cache")
    assert after["read"]["index"]["files_resumed"] == 1  # type: ignore[index]
    assert after["read"]["index"]["files_from_index"] == 15  # type: ignore[index]
    assert after["rows"] == cold["rows"]
    assert any(r["message_id"] == "late-2" for r in after["rows"])  # type: ignore[attr-defined]


def test_a_new_reader_version_invalidates_the_index(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = str(tmp_path / "cache")
    stats_json(capsysbinary, str(data), "--cache-dir", cache)
    monkeypatch.setattr(index_module, "STAMP", index_module.STAMP + "-next")
    again = stats_json(capsysbinary, str(data), "--cache-dir", cache)
    assert again["read"]["index"]["files_parsed"] == 16  # type: ignore[index]
    assert [d.name for d in (tmp_path / "cache" / "index").iterdir()] == [f"{index_module.STAMP}.sqlite"]


def test_a_damaged_index_is_rebuilt(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    (database,) = (cache / "index").glob("*.sqlite")
    database.write_bytes(b"garbage" * 1000)
    shutil.rmtree(cache / "corpus", ignore_errors=True)
    again = stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    assert again["read"]["index"]["files_parsed"] == 16  # type: ignore[index]
    # ... and the index was written anew: a third run finds every file in it.
    shutil.rmtree(cache / "corpus", ignore_errors=True)
    third = stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    assert third["read"]["index"]["files_from_index"] == 16  # type: ignore[index]


def test_index_commits_do_not_wait_on_the_disk_and_a_torn_index_is_not_trusted(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path
) -> None:
    """The index is a cache whose commits are not synced (a first run's parent waited 0.1-0.2 s on them).
    What that risks, a database torn by a power loss, costs a re-read, never a wrong report: here the file is
    cut in half, and the next run reads what it cannot trust again and reports the same rows."""
    from ctxtool.session.index import FileIndex

    cache = tmp_path / "cache"
    first = stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    index = FileIndex(cache)
    db = index._connect(create=True)
    assert db is not None
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 0  # OFF
    index.close()
    (database,) = (cache / "index").glob("*.sqlite")
    whole = database.read_bytes()
    database.write_bytes(whole[: len(whole) // 2])
    shutil.rmtree(cache / "corpus", ignore_errors=True)
    shutil.rmtree(cache / "replay", ignore_errors=True)
    again = stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    assert again["rows"] == first["rows"]
    assert again["read"]["index"]["files_parsed"] > 0  # type: ignore[index]


def test_no_cache_writes_nothing_and_clear_empties(
    capsys: pytest.CaptureFixture[str], data: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert run(["stats", str(data), "--no-cache", "--cache-dir", str(cache), "-f", "csv"]) == 0
    assert not cache.exists()
    assert run(["stats", str(data), "--cache-dir", str(cache), "-f", "csv"]) == 0
    capsys.readouterr()
    assert run(["cache", "info", "--cache-dir", str(cache)]) == 0
    assert "indexed files:   16" in capsys.readouterr().out
    assert run(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert "cleared" in capsys.readouterr().out
    assert not (cache / "index").exists()
    assert not (cache / "corpus").exists()


def test_a_worker_that_dies_does_not_lose_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed worker (out of memory, say) breaks the pool; its files are read in the main process."""
    from concurrent.futures.process import BrokenProcessPool

    from ctxtool.session import scan
    from ctxtool.session.discover import discover

    files = discover([FIXTURES / "gemini" / "tmp"]).files
    expected = [fc.messages_cols for fc in scan.read_files(files, workers=1)]

    submitted: list[object] = []

    class DyingPool:
        """Its worker dies on the first task; like a real pool, it then refuses new work."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            self.broken = False

        def submit(self, fn: object, *args: object) -> object:
            from concurrent.futures import Future

            if self.broken:
                raise BrokenProcessPool("a worker died")
            submitted.append(fn)
            fut: Future[object] = Future()
            fut.set_exception(BrokenProcessPool("a worker died"))
            self.broken = True
            return fut

        def shutdown(self, *args: object, **kwargs: object) -> None:
            pass

    import concurrent.futures

    # scan imports the pool class when it starts one, so the class it finds is this one.
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", DyingPool)
    monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)
    got = scan.read_files(files, workers=2)
    assert submitted  # the dying pool was the one used
    assert [fc.messages_cols for fc in got] == expected


def test_the_table_caption_says_what_came_from_the_index(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path
) -> None:
    def caption() -> str:
        assert run(["stats", str(data), "--cache-dir", str(tmp_path / "cache"), "--width", "400"]) == 0
        out = capsysbinary.readouterr().out.decode()
        return " ".join(out[out.index("Read 16 files") :].split())  # the caption, unwrapped

    assert "index" not in caption()
    assert "Nothing changed since the last run: served from ctxtool's index." in caption()
    grown = data / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
    with open(grown, "ab") as fh:
        fh.write(orjson.dumps({"id": "late-1", "type": "user", "content": [{"text": "more"}]}) + b"\n")
    text = caption()
    # The read description ends there (the notes that may follow it are on lines of their own).
    assert " 15 unchanged files from the index; 1 grown file read from where it ended." in text, text


def test_rows_decoded_as_workers_return_them_leave_the_index_whole(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With worker processes, the index stores every file's rows as the workers return them, and the frames
    equal a build in one process."""
    from ctxtool.frames.loading import load_corpus
    from ctxtool.session import scan
    from ctxtool.session.discover import discover
    from ctxtool.session.index import FileIndex
    from tests.test_loading import same

    monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)
    cache = tmp_path / "cache"
    parallel, use = load_corpus([data], cache=True, cache_dir=cache, workers=2)
    assert use.files_parsed == 16
    same(parallel, load_corpus([data], workers=1)[0])

    read = scan.read_files
    files = discover([data]).files
    index = FileIndex(cache)
    hits = read(files, index=index, workers=1)
    assert index.hits == 16
    expected = read(files, workers=1)
    assert [(fc.path, fc.messages_cols, fc.tools_cols) for fc in hits] == [
        (fc.path, fc.messages_cols, fc.tools_cols) for fc in expected
    ]
    assert any(fc.messages_cols for fc in hits)


def test_entries_are_written_as_batches_arrive_and_never_lock_out_other_runs(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run writes each batch's entries as it arrives (nothing is held until the end), each batch in a
    short transaction of its own: between batches another run can read the index (one long transaction, once
    spilled to the file, made readers wait their whole timeout), and a scan that fails part-way keeps the
    entries it wrote, which are valid."""
    import sqlite3

    from ctxtool.session import scan
    from ctxtool.session.discover import discover
    from ctxtool.session.index import FileIndex

    monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)
    files = discover([data]).files
    cache = tmp_path / "cache"
    index = FileIndex(cache)
    seen: list[tuple[int, int]] = []  # (entries still held in memory, entries another run can read)

    def arrived(batch: list[object]) -> None:
        other = sqlite3.connect(index.path, timeout=0.1)
        try:
            seen.append((len(index._pending), other.execute("SELECT COUNT(*) FROM entries").fetchone()[0]))
        finally:
            other.close()

    scan.read_files(files, workers=2, index=index, arrived=arrived)
    assert len(seen) > 1
    assert all(held == 0 for held, _ in seen)
    assert [visible for _, visible in seen] == sorted({visible for _, visible in seen})  # grows per batch
    assert seen[-1][1] == 16
    assert len(FileIndex(cache)) == 16

    class Stop(Exception):
        pass

    def fail(batch: list[object]) -> None:
        raise Stop

    shutil.rmtree(cache)
    index = FileIndex(cache)
    with pytest.raises(Stop):
        scan.read_files(files, workers=2, index=index, arrived=fail)
    index.close()
    kept = len(FileIndex(cache))
    assert 0 < kept < 16  # the first batch's entries
    again = FileIndex(cache)
    scan.read_files(files, workers=1, index=again)
    assert again.hits == kept
    assert len(FileIndex(cache)) == 16


@contextmanager
def index_held(cache: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Another run holds the index database in a ``BEGIN <mode>`` transaction; ctxtool waits 0.2 s on it."""
    import sqlite3

    from ctxtool.session import index as index_lib

    (database,) = (cache / "index").glob("*.sqlite")
    monkeypatch.setattr(index_lib, "_LOCK_TIMEOUT_S", 0.2)
    other = sqlite3.connect(database, isolation_level=None)
    other.execute(f"BEGIN {mode}")
    try:
        yield database
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_an_index_locked_by_another_run_is_skipped_not_waited_on_forever(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    with index_held(cache, "IMMEDIATE", monkeypatch):  # another run is writing
        shutil.rmtree(cache / "corpus", ignore_errors=True)
        (data / "ctxdemo" / "chats" / "session-2026-09-09T00-00-new00001.jsonl").write_bytes(
            orjson.dumps({"sessionId": "new00001", "projectHash": "h"}) + b"\n"
        )
        again = stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    assert again["read"]["index"]["files_from_index"] == 16  # type: ignore[index]
    assert again["read"]["index"]["files_parsed"] == 1  # type: ignore[index]
    assert again["rows"] == first["rows"]


def test_an_index_held_by_another_run_is_left_alone(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even an exclusive lock (another run committing) is waited on and skipped, never taken for damage."""
    from ctxtool.session import index as index_lib

    cache = tmp_path / "cache"
    first = stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    with index_held(cache, "EXCLUSIVE", monkeypatch) as database:
        inode = database.stat().st_ino
        shutil.rmtree(cache / "corpus", ignore_errors=True)
        again = stats_json(capsysbinary, str(data), "--cache-dir", str(cache))
    assert again["read"]["index"]["files_parsed"] == 16  # type: ignore[index]
    assert again["rows"] == first["rows"]
    assert database.stat().st_ino == inode
    assert len(index_lib.FileIndex(cache)) == 16


@given(
    st.lists(st.integers(min_value=0, max_value=10**7), max_size=400), st.integers(min_value=1, max_value=8)
)
def test_batches_cover_every_file_once_costliest_first_and_end_small(costs: list[int], workers: int) -> None:
    from ctxtool.session.scan import _BATCH_FILES, _Carver

    cost = dict(enumerate(costs))
    carver = _Carver(list(cost), cost, workers)
    batches: list[list[int]] = []
    while carver:  # every batch cut from the costly end (a scan without this process)
        batches.append(carver.cut(costly=True))
    assert sorted(i for b in batches for i in b) == list(cost)
    assert all(0 < len(b) <= _BATCH_FILES for b in batches)
    flat = [cost[i] for b in batches for i in b]
    assert flat == sorted(flat, reverse=True)
    if batches:
        # Shrinking: the last batch costs no more than the first, so no worker is left alone with much.
        assert sum(cost[i] for i in batches[-1]) <= sum(cost[i] for i in batches[0])


@given(
    st.lists(st.integers(min_value=0, max_value=10**7), max_size=400),
    st.integers(min_value=1, max_value=8),
    st.lists(st.booleans(), max_size=400),
)
def test_batches_cut_from_both_ends_cover_every_file_once_and_end_small(
    costs: list[int], workers: int, ends: list[bool]
) -> None:
    """The workers cut from the costly end, this process from the cheap one, in any order: every file is
    read once, and the batches cut near the meeting point are small (a floor plus one file), not cut for
    what was left at the start."""
    from ctxtool.session.scan import _BATCH_FILES, _Carver

    cost = dict(enumerate(costs))
    carver = _Carver(list(cost), cost, workers)
    seen: list[int] = []
    turn = 0
    while carver:
        costly = ends[turn % len(ends)] if ends else True
        turn += 1
        left = carver.left
        batch = carver.cut(costly=costly)
        assert 0 < len(batch) <= _BATCH_FILES
        weights = [cost[i] for i in batch]
        assert weights == sorted(weights, reverse=costly)  # costliest first from that end, cheapest from this
        if left <= carver.floor * workers * 4:
            assert sum(weights) < carver.floor + max(weights) or len(batch) == _BATCH_FILES
        seen.extend(batch)
    assert sorted(seen) == list(cost)
    assert carver.left == 0


def test_a_cache_folder_that_cannot_be_written_is_said_once_and_the_run_goes_on(tmp_path: Path) -> None:
    """Not a passing lock: the index cannot be written at all (here its folder would be under a file). One
    notice line says so and how to fix it; the report is the one a run without the index prints."""
    import subprocess
    import sys

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    run = [sys.executable, "-m", "ctxtool", "stats", str(FIXTURES), "-f", "json"]
    env = {**os.environ, "CTXTOOL_CACHE_DIR": str(blocker / "cache")}
    done = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    plain = subprocess.run([*run, "--no-cache"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0
    notices = [line for line in done.stderr.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1
    assert "cannot be written" in notices[0]
    assert "--cache-dir" in notices[0]
    assert str(blocker) in notices[0]
    assert done.stderr.replace(notices[0] + "\n", "") == plain.stderr
    got, want = orjson.loads(done.stdout), orjson.loads(plain.stdout)
    got["read"].pop("index"), want["read"].pop("index")
    assert got == want
