"""Ctrl-C and SIGTERM at any moment (issue 15): exit 130 / 143, one line, no traceback, no process left, no
hang, and a write either done whole (with its backup) or not begun.

The signal points are counted from the moment the process has its handlers (read from /proc: the moment
its SigCgt mask shows SIGTERM caught, which the entry point's first line does, before typer, rich or polars
are imported), not from the spawn, so a slow machine moves every point the same way and the test stays
deterministic.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals and /proc as on Linux")

EXE = shutil.which("ctxtool") or str(Path(sys.executable).parent / "ctxtool")
POINTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5)


def big_corpus(root: Path, copies: int = 60) -> Path:
    """Enough data (about 20 MB) for the scan to use worker processes."""
    src = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
    data = src.read_bytes()
    padding = b'{"id":"pad-%d","type":"info","content":"' + b"x" * 60_000 + b'"}\n'
    for n in range(copies):
        chats = root / f"p{n}" / "chats"
        chats.mkdir(parents=True)
        body = data + b"".join(padding.replace(b"%d", str(i).encode()) for i in range(6))
        (chats / f"session-2026-05-25T09-30-{n:08d}.jsonl").write_bytes(body)
    return root


def start(args: list[str], cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ctxtool with default signal dispositions and wait until its handlers are in place."""
    proc = subprocess.Popen(
        [EXE, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=cwd,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            break  # already gone
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        caught = int(fields.get("SigCgt", "0").strip(), 16)
        # SIGTERM caught: ctxtool's handlers are in (before the exec, the forked child still shows the test
        # runner's handlers, and Python itself catches SIGINT, never SIGTERM).
        if "python" in fields.get("Name", "") and caught & (1 << (signal.SIGTERM - 1)):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.001)
    return proc


def finish(proc: subprocess.Popen[bytes], what: str) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=30)  # would block while an orphaned worker holds stderr
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"ctxtool did not end after {what}")
    return proc.returncode, err.decode()


def processes_mentioning(marker: str) -> list[str]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd and int(pid) != os.getpid():
            found.append(pid)
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_point_ends_the_run_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    root = big_corpus(tmp_path / "tmp")
    status = 130 if sig == signal.SIGINT else 143
    for delay in POINTS:
        proc = start(["stats", str(root), "--no-cache", "-f", "json"])
        time.sleep(delay)
        proc.send_signal(sig)
        code, err = finish(proc, f"{sig.name} at {delay} s")
        if code == 0:
            continue  # the run finished before the signal arrived
        assert code == status, (delay, code, err)
        assert err.strip().splitlines() == ["Interrupted."], (delay, err)
    time.sleep(0.1)
    assert processes_mentioning(str(root)) == []


def compact_folder(tmp_path: Path, name: str) -> Path:
    chats = tmp_path / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    shutil.copy2(FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / name, chats / name)
    return chats


@pytest.mark.parametrize(
    "name", ["session-2026-05-25T09-30-c4e5f6a7.jsonl", "session-2026-02-10T09-00-c0ffee01.json"]
)
def test_a_signal_during_compact_in_place_leaves_nothing_behind(tmp_path: Path, name: str) -> None:
    """After SIGTERM or Ctrl-C at any point, the folder holds either the untouched session (no temporary
    file, no backup, no new folder) or the completed compaction with its backup."""
    for n, delay in enumerate(POINTS):
        chats = compact_folder(tmp_path / str(n), name)
        original = (chats / name).read_bytes()
        proc = start(["compact", str(chats / name), "--force", "--in-place"])
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM if n % 2 else signal.SIGINT)
        code, err = finish(proc, f"a signal at {delay} s")
        entries = sorted(p.name for p in chats.iterdir())
        if (chats / name).read_bytes() == original and len(entries) == 1:
            assert entries == [name]  # untouched: nothing else
            continue
        assert code in (0, 130, 143), err
        done = [e for e in entries if e != name]
        assert not any(e.endswith(".tmp") or e.startswith(".") for e in entries), entries
        if name.endswith(".jsonl"):
            assert len(done) == 1, entries
            assert ".ctxtool-backup-" in done[0], entries
            assert (chats / done[0]).read_bytes() == original
        else:
            assert done == [name.replace(".json", ".jsonl")], entries
            assert (chats / name).read_bytes() == original
