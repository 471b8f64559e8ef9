"""`ctxtool export --to az://…` and `gs://…`, and `ctxtool stats` of those URLs, against real emulators on
127.0.0.1 (tests/objectstore.py): Microsoft's Azurite for Azure Blob Storage, fake-gcs-server for Google
Cloud Storage. What `export` writes reads back, per user, to the token and the cent of what `stats` gives on
the sessions themselves; a second run writes nothing; an endpoint that is not there is one line, exit 1.

fake-gcs-server takes none of object_store's uploads (its XML API has no PUT: ``FakeGcsServer``), so the
gs:// dataset is put there through the emulator's JSON API and read back by `stats`; `export --to gs://…`
is a strict xfail that turns into a failure the day an emulator takes the upload.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctxtool.store import Store
from tests.conftest import FIXTURES
from tests.objectstore import (
    AzuriteServer,
    FakeGcsServer,
    gcs_client_env,
    service_account_file,
    unreachable_endpoint,
)

pytest_plugins = ["tests.objectstore"]

DATA = FIXTURES / "gemini" / "tmp"  # the 15 sessions of tests/test_export.py
CTXTOOL = Path(sys.executable).with_name("ctxtool")
TOKENS = ("requests", "input", "output", "cached", "thoughts", "tool", "total")
SECRET = "s3cr3t-v4lue"


def ctxtool(args: list[str], tmp_path: Path, extra: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run the installed ``ctxtool`` with the test's environment, its export state kept under ``tmp_path``."""
    env = {**os.environ, "CTXTOOL_CACHE_DIR": str(tmp_path / "cache"), **(extra or {})}
    done = subprocess.run([str(CTXTOOL), *args], env=env, capture_output=True, timeout=180, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def stats_json(args: list[str], tmp_path: Path) -> dict[str, Any]:
    code, out, err = ctxtool([*args, "--format", "json"], tmp_path)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def assert_same_usage(url: str, tmp_path: Path) -> None:
    """``stats URL --by user`` is one row, the test's user, with what ``stats`` gives on the sessions."""
    local = stats_json(["stats", str(DATA)], tmp_path)["totals"]
    rows = stats_json(["stats", url, "--by", "user"], tmp_path)["rows"]
    assert [r["user"] for r in rows] == ["tester"]
    for col in TOKENS:
        assert rows[0][col] == local[col], col
    assert abs(rows[0]["cost"] - local["cost"]) < 0.005


def without(monkeypatch: pytest.MonkeyPatch, *prefixes: str) -> None:
    """No variable of the developer's that starts with one of ``prefixes`` reaches the test."""
    for name in list(os.environ):
        if name.startswith(prefixes):
            monkeypatch.delenv(name)


def assert_one_line_exit_1(
    args: list[str], tmp_path: Path, env: dict[str, str], url: str, secret: str
) -> None:
    began = time.monotonic()
    code, _, err = ctxtool(args, tmp_path, env)
    took = time.monotonic() - began
    assert code == 1, err
    assert took < 60, took
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"Error: {url}: cannot "), lines[0]
    assert "reachable" in lines[0], lines[0]
    assert secret not in err


# --- Azure Blob Storage (Azurite) ------------------------------------------------------------------------


@pytest.mark.slow  # (Azurite comes from npm)
@pytest.mark.parametrize("how", ["emulator", "endpoint"])
def test_export_to_azure_reads_back_and_a_second_run_writes_nothing(
    tmp_path: Path, azurite: AzuriteServer, container: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if how == "endpoint":  # AZURE_STORAGE_ENDPOINT over http:// (ctxtool.store carries AZURE_ALLOW_HTTP over)
        for name in azurite.env():
            monkeypatch.delenv(name, raising=False)
        for name, value in azurite.endpoint_env().items():
            monkeypatch.setenv(name, value)
    url = f"az://{container}/team"
    code, _, err = ctxtool(["export", str(DATA), "--to", url], tmp_path)
    assert code == 0, err
    assert "Wrote 15 sessions" in err, err
    written = azurite.objects(container, "team")
    assert len(written) == 1 + 15 * 5  # the marker, and five tables' object of each session
    assert_same_usage(url, tmp_path)
    code, _, err = ctxtool(["export", str(DATA), "--to", url], tmp_path)
    assert code == 0, err
    assert "Nothing new: 15 sessions" in err, err
    assert azurite.objects(container, "team") == written  # the same ETags: no object written again


@pytest.mark.slow  # (Azurite comes from npm)
def test_store_calls_on_azure(container: str) -> None:
    store = Store.at(f"az://{container}/root")
    assert store.get("a/b.bin") is None
    store.put("a/b.bin", b"\x00bytes")
    store.put("a/c d=1/e.bin", b"x" * 10)
    assert store.get("a/b.bin") == b"\x00bytes"
    assert sorted(store.keys("a/")) == [("a/b.bin", 6), ("a/c d=1/e.bin", 10)]
    store.delete("a/b.bin")
    assert sorted(store.keys("a/")) == [("a/c d=1/e.bin", 10)]


def test_an_unreachable_azure_endpoint_is_one_line_exit_1_within_60_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    without(monkeypatch, "AZURE_", "AZURITE_")
    key = base64.b64encode(SECRET.encode() * 4).decode()  # (an account key is base64)
    env = {
        "AZURE_STORAGE_ACCOUNT_NAME": "devstoreaccount1",
        "AZURE_STORAGE_ACCOUNT_KEY": key,
        "AZURE_STORAGE_USE_EMULATOR": "true",
        "AZURITE_BLOB_STORAGE_URL": unreachable_endpoint(),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    url = "az://nowhere/team"
    assert_one_line_exit_1(["export", str(DATA), "--to", url], tmp_path, env, url, key)
    assert_one_line_exit_1(["stats", url], tmp_path, env, url, key)


# --- Google Cloud Storage (fake-gcs-server) ---------------------------------------------------------------


def put_dataset(fake_gcs: FakeGcsServer, bucket: str, tmp_path: Path) -> int:
    """``export`` into a folder, then every object of it into ``gs://bucket/team`` through the JSON API."""
    folder = tmp_path / "ds"
    code, _, err = ctxtool(["export", str(DATA), "--to", str(folder)], tmp_path)
    assert code == 0, err
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    for path in files:
        fake_gcs.upload(bucket, f"team/{path.relative_to(folder).as_posix()}", path.read_bytes())
    return len(files)


@pytest.mark.parametrize(
    "variable", ["GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT_KEY"]
)
def test_stats_reads_a_dataset_in_gcs(
    tmp_path: Path, fake_gcs: FakeGcsServer, gcs_bucket: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing, reading the marker, and polars scanning the objects over gs://, as `stats` does; with the
    service account in any of the variables object_store reads, a file's path or its JSON (polars is given
    it as an option: ctxtool.store)."""
    if variable != "GOOGLE_SERVICE_ACCOUNT":
        account = os.environ["GOOGLE_SERVICE_ACCOUNT"]
        monkeypatch.delenv("GOOGLE_SERVICE_ACCOUNT")
        monkeypatch.setenv(variable, Path(account).read_text() if variable.endswith("_KEY") else account)
    assert put_dataset(fake_gcs, gcs_bucket, tmp_path) == 1 + 15 * 5
    assert_same_usage(f"gs://{gcs_bucket}/team", tmp_path)


def test_store_calls_on_gcs_but_put(fake_gcs: FakeGcsServer, gcs_bucket: str) -> None:
    fake_gcs.upload(gcs_bucket, "root/a/b.bin", b"\x00bytes")
    fake_gcs.upload(gcs_bucket, "root/a/c d=1/e.bin", b"x" * 10)
    store = Store.at(f"gs://{gcs_bucket}/root")
    assert store.get("a/b.bin") == b"\x00bytes"
    assert store.get("a/none.bin") is None
    assert sorted(store.keys("a/")) == [("a/b.bin", 6), ("a/c d=1/e.bin", 10)]
    store.delete("a/b.bin")
    assert sorted(store.keys("a/")) == [("a/c d=1/e.bin", 10)]


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="fake-gcs-server 1.54 has no XML-API PUT, which object_store uploads with: it answers 400 "
    '"invalid uploadType" (fsouza/fake-gcs-server#331; #1164 and #2092 unmerged)',
)
def test_export_to_gcs_reads_back_and_a_second_run_writes_nothing(tmp_path: Path, gcs_bucket: str) -> None:
    url = f"gs://{gcs_bucket}/team"
    code, _, err = ctxtool(["export", str(DATA), "--to", url], tmp_path)
    assert code == 0, err
    assert_same_usage(url, tmp_path)
    code, _, err = ctxtool(["export", str(DATA), "--to", url], tmp_path)
    assert code == 0, err
    assert "Nothing new: 15 sessions" in err, err


def test_an_unreachable_gcs_endpoint_is_one_line_exit_1_within_60_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without(monkeypatch, "GOOGLE_")
    account = service_account_file(tmp_path / "account.json", unreachable_endpoint(), private_key_id=SECRET)
    env = gcs_client_env(account)
    url = "gs://nowhere/team"
    assert_one_line_exit_1(["export", str(DATA), "--to", url], tmp_path, env, url, SECRET)
    assert_one_line_exit_1(["stats", url], tmp_path, env, url, SECRET)
