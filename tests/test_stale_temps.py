"""After ``kill -9`` the session is whole, and the next run removes the temporary files it can prove are its
own: ctxtool's name pattern and no process of the id in the name (issue 15)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxtool.cli import run
from ctxtool.session.read import read_session
from ctxtool.session.write import TEMP_MARK, clean_stale_temps
from tests.conftest import FIXTURES

FIXTURE = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
EXE = shutil.which("ctxtool") or str(Path(sys.executable).parent / "ctxtool")


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_provably_abandoned_temps_of_ctxtool_are_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "tmp" / "p" / "chats"
    chats.mkdir(parents=True)
    session = chats / FIXTURE.name
    shutil.copy2(FIXTURE, session)
    stale = chats / f".{FIXTURE.name}.{TEMP_MARK}{dead_pid()}-abc123.tmp"
    live = chats / f".{FIXTURE.name}.{TEMP_MARK}{os.getppid()}-def456.tmp"
    foreign = chats / f".{FIXTURE.name}.q1w2e3.tmp"  # not a name ctxtool makes
    for path in (stale, live, foreign):
        path.write_text("half a write")
    assert run(["compact", str(session), "--force", "--in-place", "-f", "json"]) == 0
    report = json.loads(capsys.readouterr().out)["sessions"][0]
    assert any("removed 1 temporary file" in note for note in report["notes"])
    assert not stale.exists()
    assert live.exists()
    assert foreign.exists()
    assert clean_stale_temps(chats) == []


@pytest.mark.skipif(sys.platform != "linux", reason="signals as on Linux")
def test_kill_9_leaves_a_whole_session(tmp_path: Path) -> None:
    for n, delay in enumerate((0.4, 0.7, 1.0)):
        chats = tmp_path / str(n) / "chats"
        chats.mkdir(parents=True)
        session = chats / FIXTURE.name
        shutil.copy2(FIXTURE, session)
        before = session.read_bytes()
        proc = subprocess.Popen(
            [EXE, "compact", str(session), "--force", "--in-place"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        after = session.read_bytes()
        assert after == before or after.startswith(before), delay
        read_session(session)  # whole: it reads
        clean_stale_temps(chats)
        assert not [p for p in chats.iterdir() if TEMP_MARK in p.name]
