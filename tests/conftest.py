"""Shared test set-up: every test runs with its own HOME and no API keys.

Nothing a test does may touch the developer's ~/.gemini or send a real key anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# No property test is a timed test: a busy machine (2 cores shared with other work) must not fail one for
# slowness (hypothesis's default deadline of 200 ms per example, its too_slow health check). Speed is
# measured in `make bench`.
settings.register_profile("ctxtool", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ctxtool")

# tests/installed/ tests the wheel as installed (``make wheel-check`` sets CTXTOOL_INSTALLED to its venv):
# collected only then, so `make check` does not test a venv that is not there.
collect_ignore = [] if os.environ.get("CTXTOOL_INSTALLED") else ["installed"]

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
REAL_SESSIONS = REPO.parent / "shared" / "real-sessions"

_SECRET_VARS = (
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_GEMINI_BASE_URL",
    "GEMINI_CLI_HOME",
    "XDG_CACHE_HOME",
)


# The slowest tier (``make test-fast`` leaves it out, ``make check`` runs it): every test that starts the real
# Gemini CLI or Chromium, found by the fixture it asks for, so a new such test is in the tier without a mark.
SLOW_FIXTURES = frozenset({"gemini_cli", "chromium"})


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects by the mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slowest tier ``slow`` and run it first (stable otherwise): under pytest-xdist the long tests
    then start at once on every worker instead of one of them being the last to finish."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _isolated_env(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for name in _SECRET_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    # Who rows are of (`--by user|machine`, `export`): the same on every machine the tests run on.
    monkeypatch.setenv("CTXTOOL_USER", "tester")
    monkeypatch.setenv("CTXTOOL_MACHINE", "test-box")
    return


def write_jsonl(path: Path, records: list[object]) -> Path:
    import orjson

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


@pytest.fixture(scope="session")
def gemini_cli() -> Path:
    """The pinned Gemini CLI's executable (tests/gemini_cli_harness.py), installed on first use.

    Skipped only where npm is absent on a developer's machine; under ``CI=true`` that is a failure, because
    the tests that run Gemini CLI are how ctxtool proves it matches it.
    """
    from tests.gemini_cli_harness import GeminiCliUnavailable, install_gemini_cli

    try:
        return install_gemini_cli()
    except GeminiCliUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Gemini CLI is required in CI: {exc}")
        pytest.skip(str(exc))
