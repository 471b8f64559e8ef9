"""What goes wrong around `ctxtool export` and `ctxtool archive`, and how the dataset survives it.

Each test reproduces a bug report: archive hooks that run at once (two Gemini CLI windows closing) each wait
their turn and none is dropped; a run killed while it writes is repaired by the next run; a full disk is one
line naming it and its fix, and leaves no file a hive reader (DuckDB, polars) would count.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctxtool import export, frames
from ctxtool.cli import run
from tests.conftest import FIXTURES, REPO

DATA = FIXTURES / "gemini" / "tmp"
CHATS = DATA / "ctxdemo" / "chats"
CTXTOOL = Path(sys.executable).with_name("ctxtool")
# Eight sessions with eight different ids, of both eras.
EIGHT = [
    "session-2026-02-10T09-00-c0ffee01.json",
    "session-2026-03-02T14-20-d00dfeed.json",
    "session-2026-04-22T16-40-5e7a0b1c.jsonl",
    "session-2026-04-23T08-05-9a8b7c6d.jsonl",
    "session-2026-04-28T13-05-7f6e5d4c.jsonl",
    "session-2026-04-30T17-45-1c2d3e4f.json",
    "session-2026-05-25T09-30-c4e5f6a7.jsonl",
    "session-2026-06-10T08-00-0a0b0c0d.jsonl",
]
ENOSPC_FIX = "free some space"


# --- helpers -----------------------------------------------------------------------------------------


def gemini_home(tmp_path: Path, names: list[str] = EIGHT) -> list[Path]:
    """Sessions copied where Gemini CLI keeps them (``~/.gemini/tmp/<project>/chats``)."""
    chats = tmp_path / "gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text("/work/proj", encoding="utf-8")
    return [Path(shutil.copy(CHATS / name, chats / name)) for name in names]


def hook_event(session: Path, event: str = "SessionEnd") -> bytes:
    """The JSON Gemini CLI writes on a hook's standard input (spec/gemini-cli-hooks.md)."""
    [session_id] = ids([session])  # (ctxtool tells the era by content, not by the file's suffix)
    doc = {
        "session_id": session_id,
        "transcript_path": str(session),
        "cwd": "/work/proj",
        "hook_event_name": event,
        "timestamp": "2026-11-20T10:00:00.000Z",
    }
    if event == "SessionEnd":
        doc["reason"] = "exit"
    return json.dumps(doc).encode()


def start_archive(ds: Path, session: Path, *args: str, event: str = "SessionEnd") -> subprocess.Popen[bytes]:
    """``ctxtool archive --to DS`` as Gemini CLI starts it: a process with the event on standard input."""
    stdin = session.parents[3] / f"{session.name}.{event}.event.json"  # beside ~/.gemini, not in it
    stdin.write_bytes(hook_event(session, event))
    with open(stdin, "rb") as fh:
        return subprocess.Popen(
            [str(CTXTOOL), "archive", "--to", str(ds), *args],
            stdin=fh,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.decode(), err.decode()


def archive_now(ds: Path, session: Path, *args: str) -> tuple[int, str, str]:
    return finish(start_archive(ds, session, *args))


def cli(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, str]:
    """Run ctxtool in this process; the exit status and what it wrote on standard error."""
    code = run(list(args))
    return code, capsysbinary.readouterr().err.decode()


def in_dataset(ds: Path) -> set[str]:
    """The session ids the manifest says are in the dataset."""
    return {s["session_id"] or "" for s in export.read_manifest(ds)["sessions"].values()}


def ids(sessions: list[Path]) -> set[str]:
    return set(frames.load([str(s) for s in sessions]).sessions.get_column("session_id").to_list())


def duckdb_count(ds: Path, table: str = "sessions") -> int:
    """Distinct sessions a hive reader globbing the dataset sees (DuckDB, as the README queries it)."""
    duckdb = pytest.importorskip("duckdb")
    files = list((ds / table).rglob("*.parquet"))
    if not files:
        return 0
    glob = (ds / table / "**" / "*.parquet").as_posix()
    sql = f"SELECT count(DISTINCT session_key) FROM read_parquet('{glob}', hive_partitioning = true)"
    [(count,)] = duckdb.sql(sql).fetchall()
    return int(count)


def assert_consistent(ds: Path) -> None:
    """Exactly the parts the manifest lists are on disk, no temporary file is left, and a hive reader counts
    the sessions the manifest lists."""
    manifest = export.read_manifest(ds)
    on_disk = {p.relative_to(ds).as_posix() for p in ds.rglob("*.parquet")}
    assert on_disk == {p["path"] for p in manifest["parts"]}
    assert not list(ds.rglob("*.tmp"))
    assert duckdb_count(ds) == len(manifest["sessions"])
    req_rows = sum(p["rows"] for p in manifest["parts"] if p["table"] == "requests")
    assert sum(pl_height(p) for p in (ds / "requests").rglob("*.parquet")) == req_rows


def pl_height(path: Path) -> int:
    import polars as pl

    return pl.read_parquet(path).height


def pending(ds: Path) -> list[Path]:
    folder = ds / ".ctxtool-pending"
    return sorted(p for p in folder.glob("*.json")) if folder.is_dir() else []


@contextmanager
def lock_held(ds: Path) -> Iterator[None]:
    """Hold the dataset's lock as a running export holds it."""
    ds.mkdir(parents=True, exist_ok=True)
    with open(ds / ".ctxtool-export.lock", "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def snapshot(ds: Path) -> dict[str, bytes]:
    return {p.relative_to(ds).as_posix(): p.read_bytes() for p in ds.rglob("*") if p.is_file()}


# --- 1. concurrent archives ---------------------------------------------------------------------------


def test_eight_archives_at_once_keep_all_eight_sessions(tmp_path: Path) -> None:
    """Eight Gemini CLI windows closing at once: each SessionEnd hook waits its turn, none gives up."""
    sessions = gemini_home(tmp_path)
    ds = tmp_path / "history"
    procs = [start_archive(ds, s) for s in sessions]
    results = [finish(p) for p in procs]
    for code, out, err in results:
        assert code == 0
        assert "not archived" not in err, err
        assert out.strip() == "{}"
    assert in_dataset(ds) == ids(sessions)
    assert len(ids(sessions)) == 8
    assert_consistent(ds)
    assert pending(ds) == []


def test_eight_precompress_hooks_on_a_dataset_that_exists(tmp_path: Path) -> None:
    """The same for PreCompress, on a dataset that holds sessions already (each run rewrites the manifest)."""
    sessions = gemini_home(tmp_path)
    ds = tmp_path / "history"
    assert archive_now(ds, sessions[0])[0] == 0
    procs = [start_archive(ds, s, event="PreCompress") for s in sessions]
    for code, _, err in (finish(p) for p in procs):
        assert code == 0
        assert "not archived" not in err, err
    assert in_dataset(ds) == ids(sessions)
    assert_consistent(ds)


def test_an_archive_that_cannot_get_its_turn_is_retried_by_the_next_archive(tmp_path: Path) -> None:
    first, second = gemini_home(tmp_path, EIGHT[:2])
    ds = tmp_path / "history"
    with lock_held(ds):
        code, out, err = archive_now(ds, first, "--wait", "0.5")
    assert code == 0
    assert out == ""  # Gemini CLI shows the hook's stderr only when stdout is empty
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "not archived yet" in lines[0]
    assert "another ctxtool export" in lines[0]
    assert "next ctxtool archive or export adds it" in lines[0]
    assert len(pending(ds)) == 1
    assert not export.is_dataset(ds)

    code, _, err = archive_now(ds, second)
    assert code == 0, err
    assert "not archived" not in err
    assert in_dataset(ds) == ids([first, second])
    assert pending(ds) == []
    assert_consistent(ds)


def test_a_session_not_archived_is_retried_by_the_next_export(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    first, second = gemini_home(tmp_path, EIGHT[2:4])
    ds = tmp_path / "history"
    assert archive_now(ds, second)[0] == 0
    with lock_held(ds):
        code, _, err = archive_now(ds, first, "--wait", "0.2")
    assert code == 0
    assert "not archived yet" in err
    assert in_dataset(ds) == ids([second])

    # An export of other files (here: the one already in) adds the session left behind.
    code, err = cli(capsysbinary, "export", str(second), "--to", str(ds))
    assert code == 0, err
    assert "an earlier ctxtool archive could not add" in err
    assert in_dataset(ds) == ids([first, second])
    assert pending(ds) == []
    assert_consistent(ds)


def test_an_archive_killed_while_it_waits_is_retried_by_the_next_archive(tmp_path: Path) -> None:
    """Gemini CLI's timeout (or a shutdown) kills the hook while it waits: the session is noted before it
    waits, so the next hook still adds it."""
    first, second = gemini_home(tmp_path, EIGHT[4:6])
    ds = tmp_path / "history"
    with lock_held(ds):
        proc = start_archive(ds, first)
        for _ in range(600):
            if pending(ds):
                break
            time.sleep(0.05)
        assert pending(ds), "the archive noted nothing before waiting"
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
    code, _, err = archive_now(ds, second)
    assert code == 0, err
    assert in_dataset(ds) == ids([first, second])
    assert pending(ds) == []


def test_export_waits_for_a_running_export_and_says_so(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    ds = tmp_path / "history"
    held = threading.Event()

    def hold() -> None:
        with lock_held(ds):
            held.set()
            time.sleep(1.5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        code, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds), "--no-cache")
    finally:
        holder.join()
    assert code == 0, err
    assert "waiting" in err
    assert "Run 1: added 15 sessions" in err
    assert_consistent(ds)

    # With no time to wait, one line says why and how to fix it (exit 1, not a usage error).
    with lock_held(ds):
        code, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds), "--no-cache", "--wait", "0.2")
    lines = err.strip().splitlines()
    assert code == 1
    assert lines[-1].startswith("Error: another ctxtool export has been writing")
    assert "--wait" in lines[-1]


# --- 2. a run killed while it writes -----------------------------------------------------------------

# Runs ctxtool's CLI, killing the process (SIGKILL: nothing is cleaned up) right before it renames the
# manifest into place, or its third part.
_KILLED = """
import os, signal, sys
from pathlib import Path

real, seen = os.replace, [0]

def replace(src, dst, *args, **kwargs):
    name = Path(dst).name
    if sys.argv[1] == "manifest" and name == "_ctxtool_manifest.json":
        os.kill(os.getpid(), signal.SIGKILL)
    if name.endswith(".parquet"):
        seen[0] += 1
        if sys.argv[1] == "part" and seen[0] == 3:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)

os.replace = replace
from ctxtool.cli import run
sys.exit(run(sys.argv[2:]))
"""


def killed_export(where: str, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _KILLED, where, "export", *args, "--no-cache"], cwd=REPO, capture_output=True
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


@pytest.mark.parametrize("where", ["manifest", "part"])
@pytest.mark.parametrize("run_", ["first", "later"])
def test_a_killed_export_is_repaired_by_running_it_again(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], where: str, run_: str
) -> None:
    ds = tmp_path / "history"
    if run_ == "later":
        code, err = cli(capsysbinary, "export", str(CHATS / EIGHT[2]), "--to", str(ds), "--no-cache")
        assert code == 0, err
    killed_export(where, str(DATA), "--to", str(ds))
    leftovers = list(ds.rglob("*.tmp"))
    assert leftovers, "the killed run left no temporary file"
    if where == "manifest":
        assert any(p.name.startswith("._ctxtool_manifest.json.ctxtool-tmp-") for p in leftovers)

    code, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds), "--no-cache")
    assert code == 0, err
    assert len(export.read_manifest(ds)["sessions"]) == 15
    assert_consistent(ds)
    assert [p.name for p in ds.iterdir() if p.name.startswith(".")] == [".ctxtool-export.lock"]


def test_only_ctxtool_leftovers_count_as_empty(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A file of the user's beside ctxtool's leftovers is still refused, and named."""
    ds = tmp_path / "history"
    killed_export("manifest", str(DATA), "--to", str(ds))
    (ds / "requests" / "notes.txt").write_text("mine", encoding="utf-8")
    code, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds), "--no-cache")
    assert code == 2
    assert "not empty" in err
    assert "notes.txt" in err
    assert (ds / "requests" / "notes.txt").read_text(encoding="utf-8") == "mine"


# --- 3. a full disk ----------------------------------------------------------------------------------


def full_disk_at(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """The disk fills up while the ``nth`` part is written: half its bytes land, then ENOSPC."""
    real = export._write_bytes
    calls = [0]

    def write(fd: int, data: bytes) -> None:
        calls[0] += 1
        if calls[0] == nth:
            os.write(fd, data[: len(data) // 2])
            os.close(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)

    monkeypatch.setattr(export, "_write_bytes", write)


def full_disk_at_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk is full when the manifest is written (every part fitted)."""
    from ctxtool.session import write as session_write

    real = session_write._write_fd

    def write(fd: int, chunks: object) -> None:
        if export.MANIFEST_NAME in os.readlink(f"/proc/self/fd/{fd}"):
            os.close(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, chunks)  # type: ignore[arg-type]

    monkeypatch.setattr(session_write, "_write_fd", write)


def assert_one_line_naming_a_full_disk(err: str, ds: Path) -> None:
    lines = [line for line in err.strip().splitlines() if not line.startswith(("warning: ", "notice: "))]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"Error: {ds}")
    assert "No space left on device" in line
    assert ENOSPC_FIX in line
    assert "unexpected" not in line
    assert "ComputeError" not in line
    assert ".tmp" not in line


@pytest.mark.parametrize("where", ["part 1", "part 3", "manifest"])
def test_a_full_disk_is_one_line_and_leaves_no_orphan(
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    ds = tmp_path / "history"
    code, err = cli(capsysbinary, "export", str(CHATS / EIGHT[2]), "--to", str(ds), "--no-cache")
    assert code == 0, err
    before = snapshot(ds)
    if where == "manifest":
        full_disk_at_manifest(monkeypatch)
    else:
        full_disk_at(monkeypatch, int(where.split()[1]))

    code, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds), "--no-cache")
    assert code == 1
    assert_one_line_naming_a_full_disk(err, ds if where != "manifest" else ds / export.MANIFEST_NAME)
    assert snapshot(ds) == before  # the state before the run: not one part of the failed run is left
    assert duckdb_count(ds) == len(export.read_manifest(ds)["sessions"]) == 1
    assert duckdb_count(ds, "requests") == 1
    assert_consistent(ds)

    monkeypatch.undo()
    code, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds), "--no-cache")
    assert code == 0, err
    assert duckdb_count(ds) == 15
    assert_consistent(ds)


def test_a_full_disk_on_a_first_export_leaves_no_part(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = tmp_path / "history"
    full_disk_at(monkeypatch, 3)
    code, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds), "--no-cache")
    assert code == 1
    assert_one_line_naming_a_full_disk(err, ds)
    assert not list(ds.rglob("*.parquet"))
    assert not list(ds.rglob("*.tmp"))


def test_an_archive_on_a_full_disk_says_so_and_is_retried(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    first, second = gemini_home(tmp_path, EIGHT[5:7])
    ds = tmp_path / "history"
    full_disk_at(monkeypatch, 2)
    monkeypatch.setattr(sys, "stdin", io.StringIO(hook_event(first).decode()))
    code, err = cli(capsysbinary, "archive", "--to", str(ds))
    assert code == 0  # a hook never breaks Gemini CLI
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("ctxtool archive: not archived yet (")
    assert "No space left on device" in lines[0]
    assert ENOSPC_FIX in lines[0]
    assert "next ctxtool archive or export adds it" in lines[0]
    assert not list(ds.rglob("*.parquet"))
    assert len(pending(ds)) == 1

    monkeypatch.undo()
    code, _, err = archive_now(ds, second)
    assert code == 0, err
    assert in_dataset(ds) == ids([first, second])
    assert pending(ds) == []
    assert_consistent(ds)


@contextmanager
def tiny_tmpfs(where: Path) -> Iterator[Path]:
    """A real 2 MB file system (tmpfs), mounted for the test and unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the monkeypatched full-disk tests cover the same paths")
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.fail(
            f"running as root, but `mount -t tmpfs` on {where} failed ({done.stderr.strip()}): give the "
            "tests CAP_SYS_ADMIN, or run them as another user (then this test is skipped)"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` up, then give back ``leave`` bytes."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No space left on device"):
            _write_until_full(fd)
    finally:
        os.close(fd)
    os.truncate(filler, max(filler.stat().st_size - leave, 0))


def _write_until_full(fd: int) -> None:
    while True:
        os.write(fd, b"\0" * 65536)


@pytest.mark.parametrize("leave", [0, 16384])
def test_a_real_full_disk(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, leave: int
) -> None:
    import io

    with tiny_tmpfs(tmp_path / "disk") as disk:
        ds = disk / "history"
        code, err = cli(capsysbinary, "export", str(CHATS / EIGHT[2]), "--to", str(ds), "--no-cache")
        assert code == 0, err
        before = snapshot(ds)
        fill(disk, leave)
        code, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds), "--no-cache")
        assert code == 1
        lines = err.strip().splitlines()
        assert len(lines) == 1, lines
        assert "No space left on device" in lines[0]
        assert ENOSPC_FIX in lines[0]
        assert snapshot(ds) == before
        assert_consistent(ds)

        session = gemini_home(tmp_path, EIGHT[3:4])[0]
        monkeypatch.setattr(sys, "stdin", io.StringIO(hook_event(session).decode()))
        code, err = cli(capsysbinary, "archive", "--to", str(ds))
        assert code == 0
        assert err.count("\n") == 1, err
        assert "not archived" in err
        assert "No space left on device" in err
        assert_consistent(ds)

        (disk / "filler").unlink()
        code, err = cli(capsysbinary, "export", str(DATA), str(session), "--to", str(ds), "--no-cache")
        assert code == 0, err
        assert duckdb_count(ds) == 16
        assert_consistent(ds)
