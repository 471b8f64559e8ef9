"""Reading a line costs time linear in its length and memory bounded by ``MAX_RECORD_BYTES``: a longer
record is counted as a broken line by every reader, and named as one (its line number)."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxtool.session import columns, read
from ctxtool.session.columns import columns_from_file
from ctxtool.session.discover import SessionPath
from ctxtool.session.read import OVERLONG, iter_file_lines, parse_session_bytes, split_lines


class _Chunks(io.RawIOBase):
    """A file that hands out at most ``size`` bytes a read, and counts the bytes handed out."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.at = data, size, 0

    def read(self, n: int = -1) -> bytes:
        n = self.size if n < 0 else min(n, self.size)
        out = self.data[self.at : self.at + n]
        self.at += len(out)
        return out


@given(st.binary(max_size=300).map(lambda b: b.replace(b"\x01", b"\n")), st.integers(1, 40))
def test_lines_are_split_lines_whatever_the_chunks(data: bytes, chunk: int) -> None:
    assert list(iter_file_lines(io.BytesIO(data), chunk_size=chunk)) == split_lines(data)


@given(st.lists(st.integers(0, 60), max_size=12), st.integers(1, 25))
def test_a_line_over_the_limit_is_overlong_and_the_rest_are_kept(lengths: list[int], chunk: int) -> None:
    data = b"\n".join(b"x" * n for n in lengths)
    got = list(iter_file_lines(_Chunks(data, chunk), chunk_size=chunk, max_line=30))  # type: ignore[arg-type]
    want = [OVERLONG if len(line) > 30 else line for line in split_lines(data)]
    assert got == want
    assert [g is OVERLONG for g in got] == [len(line) > 30 for line in split_lines(data)]


def _session(tmp_path: Path, long_line: bytes) -> Path:
    meta = orjson.dumps({"sessionId": "s1", "projectHash": "h", "startTime": "2026-08-01T10:00:00Z"})
    first = orjson.dumps({"id": "u1", "type": "user", "content": "hi", "timestamp": "2026-08-01T10:00:01Z"})
    answer = {"id": "g1", "type": "gemini", "content": "ok", "timestamp": "2026-08-01T10:00:02Z"}
    answer["tokens"] = {"input": 10, "output": 2, "cached": 0, "thoughts": 0, "tool": 0, "total": 12}
    path = tmp_path / "chats" / "session-2026-08-01T10-00-s1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n".join([meta, first, long_line, orjson.dumps(answer)]) + b"\n")
    return path


def test_both_readers_count_an_overlong_record_as_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the limit (lowered here to 1 KB), a record is a broken line for ``stats``' columns (streamed, as a
    file over STREAM_MIN_BYTES is) and for the full reader alike; the records around it are kept."""
    monkeypatch.setattr(read, "MAX_RECORD_BYTES", 1024)
    monkeypatch.setattr(columns, "STREAM_MIN_BYTES", 0)
    real = read.iter_file_lines
    monkeypatch.setattr(columns, "iter_file_lines", lambda fh: real(fh, chunk_size=100, max_line=1024))
    long_line = orjson.dumps({"id": "big", "type": "info", "content": "y" * 5000})
    path = _session(tmp_path, long_line)
    sp = SessionPath(path, "p", "p", None, str(path))
    fast = columns_from_file(sp)
    full = parse_session_bytes(path.read_bytes(), path)
    assert (fast.broken_lines, fast.first_broken_line) == (1, 3)
    assert (full.broken_lines, full.first_broken_line) == (1, 3)
    assert [m["id"] for m in full.billed] == ["u1", "g1"]
    assert [r["message_id"] for r in columns.message_rows(fast)] == ["u1", "g1"]


def test_memory_stays_bounded_by_the_limit_and_a_chunk(tmp_path: Path) -> None:
    """A 48 MB line read 1 MB at a time with a 4 MB limit: never more than the limit and a few chunks held
    (tracemalloc counts every bytes object made), and the line comes back as OVERLONG."""
    import tracemalloc

    path = tmp_path / "one-line.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"sessionId":"s"}\n{"x":"')
        for _ in range(48):
            fh.write(b"y" * (1 << 20))
        fh.write(b'"}\n{"id":"after"}\n')
    tracemalloc.start()
    try:
        with path.open("rb", buffering=0) as fh:
            kinds = [line is OVERLONG for line in iter_file_lines(fh, chunk_size=1 << 20, max_line=4 << 20)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert kinds == [False, True, False]
    assert peak < 8 << 20, f"held {peak / 2**20:.1f} MB reading a 48 MB line with a 4 MB limit"


def test_the_guards_quick_path_leaves_an_overlong_record_to_the_full_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Appended bytes holding a line over the limit are not parsed by the guard's quick path (stdlib json on a
    line of a GB): the full tally reads the file, in bounded memory, and counts that line broken."""
    from ctxtool.hooks import figures

    monkeypatch.setattr(figures, "MAX_RECORD_BYTES", 100)
    short = orjson.dumps({"id": "a", "type": "info", "content": "x"}) + b"\n"
    long_line = orjson.dumps({"id": "b", "type": "info", "content": "y" * 200}) + b"\n"
    assert figures._records(short) == [orjson.loads(short)]
    assert figures._records(short + long_line) is None


@pytest.mark.parametrize("by", ["session", "request"])  # the tally's report, and the frames'
def test_stats_names_the_overlong_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], by: str
) -> None:
    from ctxtool.cli import run

    monkeypatch.setattr(read, "MAX_RECORD_BYTES", 1024)
    long_line = orjson.dumps({"id": "big", "type": "info", "content": "y" * 5000})
    path = _session(tmp_path, long_line)
    broken = path.read_bytes().replace(b'{"id":"u1"', b'{"id":"u1"broken\n{"id":"u1"', 1)
    path.write_bytes(broken)
    assert run(["stats", str(path), "--by", by, "-f", "json", "--no-cache"]) == 0
    err = capsys.readouterr().err
    assert f"{path}: skipped 2 broken lines (first at line 2); line 4 is over 256 MiB" in err
