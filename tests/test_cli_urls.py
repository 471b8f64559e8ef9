"""A URL where ctxtool takes a local file or folder is a usage error (exit 2) named in one line, and nothing
is written (before, ``export --to s3://team/usage`` wrote a local folder ``s3:`` and exited 0); a dataset in
an object store is the one place a URL is a path (``ctxtool.store``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxtool.cli import run
from ctxtool.common.errors import UsageError
from ctxtool.session.discover import discover
from tests.conftest import FIXTURES

CASES = [
    ["stats", str(FIXTURES), "--output", "gs://bucket/report.json"],
    ["stats", str(FIXTURES), "--output=gs://bucket/report.json"],
    ["export", "s3://team/sessions", "--to", "out"],
    ["export", str(FIXTURES), "--to", "https://team/usage"],
    ["audit", str(FIXTURES), "--output", "s3://team/audit.json"],
    ["report", str(FIXTURES), "--output", "s3://team/report.html"],
    ["compact", "s3://team/session.jsonl", "--dry-run"],
    ["diff", "s3://a.jsonl", "s3://b.jsonl"],
    ["archive", "--to", "http://team/usage"],
    ["hooks", "install", "--archive", "ftp://team/usage"],
]
DATASET_URLS = [
    ["stats", "s3://team/usage", "--by", "user"],
    ["audit", "gs://team/usage"],
    ["report", "az://team/usage", "--output", "r.html"],
    ["export", str(FIXTURES), "--to", "s3://team/usage"],
    ["export", str(FIXTURES), "--to=az://container/usage"],
    ["export", str(FIXTURES), "-o", "gs://bucket/usage"],
    ["archive", "--to", "s3://team/usage"],
    ["hooks", "install", "--archive", "s3://team/usage"],
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_a_url_is_a_usage_error_and_nothing_is_written(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    url = next(a.split("=", 1)[-1] for a in args if "://" in a)
    assert url in err[0]
    assert "is a URL" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", DATASET_URLS, ids=lambda a: " ".join(a[:3]))
def test_a_dataset_url_is_a_path(args: list[str]) -> None:
    from ctxtool.cli import _refuse_urls

    _refuse_urls(args)  # no UsageError


def test_a_url_value_of_a_url_option_is_kept() -> None:
    """``--base-url`` takes a URL: it is not refused as a path (the command then says what it makes of it)."""
    from ctxtool.cli import _refuse_urls

    _refuse_urls(["compact", "x.jsonl", "--base-url", "http://127.0.0.1:9/", "--base-url=https://h/"])
    with pytest.raises(UsageError):
        _refuse_urls(["compact", "x.jsonl", "--base-url", "http://127.0.0.1:9/", "s3://a"])


def test_the_library_refuses_a_url_too() -> None:
    with pytest.raises(UsageError, match=r"s3://team/usage is a URL \(s3://\)"):
        discover(["s3://team/usage"])
    assert discover(["C:/nowhere"]).missing == ["C:/nowhere"]  # a drive letter is not a scheme
