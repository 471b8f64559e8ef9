"""ctxtool's cache is data, never code (issue 15): no pickle anywhere; a planted payload never runs; an
unusable entry or database is ignored, the files read again, and the user told in one line."""

from __future__ import annotations

import ast
import os
import pickle
import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest

from ctxtool.cli import run
from tests.conftest import FIXTURES

PACKAGE = Path(__file__).resolve().parents[1] / "ctxtool"


class _Payload:
    """Unpickling this runs ``os.system`` (what a hostile cache would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_no_module_of_ctxtool_uses_pickle_or_marshal() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] in ("pickle", "marshal", "shelve", "dill", "cloudpickle") for n in names):
                offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


@pytest.fixture
def data(tmp_path: Path) -> Path:
    target = tmp_path / "gemini" / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", target)
    return target


def rows(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[object, dict[str, object], str]:
    assert run(["stats", *args, "-f", "json", "--by", "request"]) == 0
    captured = capsysbinary.readouterr()
    doc = orjson.loads(captured.out)
    return doc["rows"], doc["read"]["index"], captured.err.decode()


def test_a_planted_pickle_in_the_index_never_runs(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    cold, _, _ = rows(capsysbinary, str(data), "--no-cache")
    rows(capsysbinary, str(data), "--cache-dir", str(cache))
    (database,) = (cache / "index").glob("*.sqlite")
    marker = tmp_path / "payload-ran"
    with sqlite3.connect(database) as db:
        paths = [p for (p,) in db.execute("SELECT path FROM entries")]
        assert len(paths) == 16
        db.executemany(
            "UPDATE entries SET entry = ? WHERE path = ?",
            [(pickle.dumps(_Payload(marker)), p) for p in paths],
        )
    shutil.rmtree(cache / "corpus", ignore_errors=True)
    again, index, err = rows(capsysbinary, str(data), "--cache-dir", str(cache))
    assert not marker.exists()
    assert again == cold
    assert index["files_parsed"] == 16  # type: ignore[index]
    notices = [line for line in err.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1
    assert "16 index entries" in notices[0]
    assert "read again" in notices[0]
    # ...and the entries were written anew, as data: the next run uses them and says nothing.
    shutil.rmtree(cache / "corpus", ignore_errors=True)
    third, index, err = rows(capsysbinary, str(data), "--cache-dir", str(cache))
    assert third == cold
    assert index["files_from_index"] == 16  # type: ignore[index]
    assert "notice:" not in err


def test_a_database_that_is_not_one_is_rebuilt_with_a_notice(
    capsysbinary: pytest.CaptureFixture[bytes], data: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    cold, _, _ = rows(capsysbinary, str(data), "--no-cache")
    rows(capsysbinary, str(data), "--cache-dir", str(cache))
    (database,) = (cache / "index").glob("*.sqlite")
    database.write_bytes(b"not a database " * 500)
    shutil.rmtree(cache / "corpus", ignore_errors=True)
    again, _, err = rows(capsysbinary, str(data), "--cache-dir", str(cache))
    assert again == cold
    assert [line for line in err.splitlines() if line.startswith("notice:")] == [
        f"notice: the index at {database} was not a usable database; it was rebuilt"
    ]
