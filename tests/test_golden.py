"""Golden outputs: `ctxtool stats` on the bundled fixtures, every --by, kept beside the fixtures.

The hand-derived numbers live in fixtures/expected/manifest.json (tests/test_fixtures_expected.py); these
files pin the whole JSON output so any change to it shows up in review. Costs are left out (they follow the
installed genai-prices data, tested against the library in tests/test_pricing.py). Regenerate after an
intended change with ``CTXTOOL_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from ctxtool.cli import run
from ctxtool.common.choices import BY_CHOICES
from tests.conftest import FIXTURES, REPO

GOLDEN = FIXTURES / "expected" / "golden"


def normalise(doc: dict[str, object], under: Path = REPO) -> dict[str, object]:
    """A stats JSON document as the golden files keep it: paths relative to ``under``, no costs, no index."""
    root = str(under) + "/"
    text = orjson.dumps(doc).decode().replace(root, "")
    out = orjson.loads(text)
    for row in out["rows"]:
        row.pop("cost", None)
    out["read"].pop("index", None)
    return out  # type: ignore[no-any-return]


@pytest.mark.parametrize("by", BY_CHOICES)
def test_stats_output_matches_golden(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    monkeypatch.chdir(REPO)
    assert run(["stats", "fixtures/", "--by", by, "-f", "json", "--no-cache"]) == 0
    got = normalise(orjson.loads(capsysbinary.readouterr().out))
    path = GOLDEN / f"stats-by-{by}.json"
    if os.environ.get("CTXTOOL_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(got, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    assert path.exists(), f"missing {path}; create it with CTXTOOL_UPDATE_GOLDEN=1"
    assert got == orjson.loads(Path(path).read_bytes())
