"""The scripts ``make bench`` runs after bench/run.py still run against today's package: ``bench/profile.py``
(each stage of a first ``stats``, timed on its own, calls the package's internals) and ``bench/fleet.py`` (a
fleet's homes exported to one dataset, its reports checked against the homes' own). Both on a tiny input:
what is checked is that they run and that the fleet's check passes, never a speed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_profile_runs_every_stage_on_the_fixtures() -> None:
    done = _run(["bench/profile.py", "fixtures/gemini", "--repeat", "1"], dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    for stage in (
        "msgspec decode of the records",
        "count and price each file's session",
        "price rates (shipped in the package)",
        "build the corpus (frames of the engine's columns)",
        "index entries (encode + SQLite)",
        "real run: stats --no-cache",
    ):
        assert stage in done.stdout, done.stdout


def test_fleet_builds_exports_and_its_check_passes(tmp_path: Path) -> None:
    env = {**os.environ, "CTXTOOL_BENCH_CACHE": str(tmp_path / "bench-cache")}
    small = ["--machines", "2", "--days", "2", "--sessions-per-day", "1", "--repeat", "1"]
    done = _run(["bench/fleet.py", *small], env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "-> PASS" in done.stdout, done.stdout
    assert "stats --by user, first run" in done.stdout
