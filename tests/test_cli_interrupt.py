"""Ctrl-C during a parallel scan: exit status 130, one line on stderr, no worker process left behind."""

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


@pytest.mark.skipif(sys.platform != "linux", reason="signals and /proc as on Linux")
def test_ctrl_c_exits_130_and_leaves_no_worker(tmp_path: Path) -> None:
    root = big_corpus(tmp_path / "tmp")
    exe = shutil.which("ctxtool") or str(Path(sys.executable).parent / "ctxtool")
    for delay in (0.15, 0.3, 0.45):
        proc = subprocess.Popen(
            [exe, "stats", str(root), "--no-cache", "-f", "json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)  # would block while an orphaned worker holds stderr
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"ctxtool did not end after Ctrl-C at {delay} s")
        if proc.returncode == 0:
            continue  # the scan finished before the signal arrived
        assert proc.returncode == 130, (delay, proc.returncode, err)
        assert err.strip(), (delay, proc.returncode)
        assert err.decode().strip().splitlines()[-1] == "Interrupted."
    time.sleep(0.2)
    mine = [p for p in os.listdir("/proc") if p.isdigit()]
    leftovers = []
    for pid in mine:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(root).encode() in cmd:
            leftovers.append(pid)
    assert leftovers == []
