"""The wheel a user installs, tested as installed: ``make wheel-check`` builds it (from the sdist), installs
it with the locked runtime dependencies into a clean venv (``CTXTOOL_INSTALLED``), and runs this module.

Every ``ctxtool`` here is that venv's, run from a folder outside the source tree with nothing of it on the
path, so a file the wheel leaves out fails here as it would for a user. ``tests/conftest.py`` collects this
folder only when ``CTXTOOL_INSTALLED`` is set; ``.ci/run`` sets it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from ctxtool.common.choices import BY_CHOICES
from tests.conftest import FIXTURES, REPO
from tests.test_golden import GOLDEN, normalise

VENV = Path(os.environ.get("CTXTOOL_INSTALLED", "/nonexistent"))
PYTHON = VENV / "bin" / "python"
CTXTOOL = VENV / "bin" / "ctxtool"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder away from the checkout, holding a copy of the fixtures (as a user's own folder would)."""
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    return tmp_path


def run(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CTXTOOL_PURE", "VIRTUAL_ENV")}
    env |= {"NO_COLOR": "1", "COLUMNS": "100"}
    done = subprocess.run(
        [str(CTXTOOL), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if check:
        assert done.returncode == 0, f"ctxtool {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done


def test_the_install_is_the_wheel_not_the_checkout(outside: Path) -> None:
    code = "import ctxtool, sys, orjson; print(orjson.dumps([ctxtool.__file__, sys.path]).decode())"
    done = subprocess.run(
        [str(PYTHON), "-I", "-c", code], cwd=outside, capture_output=True, text=True, check=True
    )
    where, path = orjson.loads(done.stdout)
    assert VENV.resolve() in Path(where).resolve().parents, where
    assert REPO not in [Path(p).resolve() for p in path if p]


def _wheel() -> Path:
    wheels = sorted((REPO / "dist").glob("ctxtool-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in dist/, found {wheels}: run make wheel-check"
    return wheels[0]


def test_every_tracked_file_of_the_package_is_in_the_wheel() -> None:
    """Every file git tracks under ctxtool/ is in the wheel but the C source (compiled into it instead)."""
    tracked = subprocess.run(
        ["git", "ls-files", "ctxtool"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "ctxtool/measure/rates_snapshot.json" in tracked
    with zipfile.ZipFile(_wheel()) as wheel:
        names = set(wheel.namelist())
    missing = [name for name in tracked if not name.endswith(".c") and name not in names]
    assert missing == []


def _commands() -> Iterator[list[str]]:
    """Every command and sub-command of the installed app, from the app itself."""
    code = (
        "import typer.main, orjson; from ctxtool.cli import app, register\n"
        "register()\n"
        "def walk(cmd, path):\n"
        "    yield path\n"
        "    for name, sub in sorted(getattr(cmd, 'commands', {}).items()):\n"
        "        yield from walk(sub, [*path, name])\n"
        "print(orjson.dumps(list(walk(typer.main.get_command(app), []))).decode())\n"
    )
    done = subprocess.run([str(PYTHON), "-I", "-c", code], capture_output=True, text=True, check=True)
    return iter(orjson.loads(done.stdout))


def test_every_command_has_help(outside: Path) -> None:
    commands = list(_commands())
    assert len(commands) > 10
    for path in commands:
        done = run(*path, "--help", cwd=outside)
        assert "Usage: ctxtool" in done.stdout, path
        assert done.stderr == "", path


@pytest.mark.parametrize("by", BY_CHOICES)
def test_stats_on_the_fixtures_is_the_golden_output(outside: Path, by: str) -> None:
    done = run("stats", "fixtures/", "--by", by, "-f", "json", "--no-cache", cwd=outside)
    got = normalise(orjson.loads(done.stdout), outside)
    assert got == orjson.loads((GOLDEN / f"stats-by-{by}.json").read_bytes())


def test_stats_prices_from_the_shipped_rates_without_genai_prices(outside: Path) -> None:
    """The shipped rates make a first run's cost: genai-prices (with pydantic and httpx) is not imported."""
    args = ["stats", "fixtures/", "--no-cache", "-f", "json", "--by", "model"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CTXTOOL_PURE", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(PYTHON), "-X", "importtime", str(CTXTOOL), *args],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "ctxtool.measure.pricing" in imported
    assert {m for m in imported if m.split(".")[0] in ("genai_prices", "pydantic", "httpx")} == set()
    rows = orjson.loads(done.stdout)["rows"]
    assert any(row.get("cost") for row in rows)


def test_report_writes_a_page(outside: Path) -> None:
    run("report", "fixtures/", "--output", "report.html", "--no-cache", cwd=outside)
    page = (outside / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") or page.startswith("<!doctype html>")
    assert "vega" in page.lower()


def test_compact_dry_run_writes_nothing(outside: Path) -> None:
    before = {p: p.read_bytes() for p in (outside / "fixtures").rglob("*") if p.is_file()}
    session = next((outside / "fixtures").rglob("session-2026-04-20T10-00-e1e2e3e4.jsonl"))
    done = run("compact", str(session), "--dry-run", "--force", "-f", "json", cwd=outside)
    assert orjson.loads(done.stdout)
    after = {p: p.read_bytes() for p in (outside / "fixtures").rglob("*") if p.is_file()}
    assert after == before
    assert not (outside / "ctxtool-compacted").exists()


def test_the_install_is_byte_compiled() -> None:
    """As pip installs a wheel: every module of ctxtool and of the dependencies a run imports has its .pyc,
    so no run compiles them (and where PYTHONDONTWRITEBYTECODE is set, every run would)."""
    code = (
        "import importlib.util, orjson, sys\n"
        "names = ['ctxtool', 'ctxtool.cli', 'ctxtool.session.columns', 'typer', 'rich', 'polars', 'orjson']\n"
        "out = {}\n"
        "for name in names:\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    if spec and spec.origin and spec.origin.endswith('.py'):\n"
        "        import os; out[name] = os.path.exists(importlib.util.cache_from_source(spec.origin))\n"
        "print(orjson.dumps(out).decode())\n"
    )
    done = subprocess.run([str(PYTHON), "-I", "-c", code], capture_output=True, text=True, check=True)
    compiled = orjson.loads(done.stdout)
    assert len(compiled) == 7
    assert all(compiled.values()), compiled
