"""`ctxtool export` and `ctxtool stats DIR` as a user runs them."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ctxtool import export
from ctxtool.cli import run
from ctxtool.session.discover import is_dataset
from tests.conftest import FIXTURES, REAL_SESSIONS

DATA = FIXTURES / "gemini" / "tmp"


def rounded(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Rows with floats rounded: sums over a different row order differ in the last bits."""
    return [{k: round(v, 9) if isinstance(v, float) else v for k, v in r.items()} for r in rows]


def cli(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, bytes, str]:
    code = run(list(args))
    captured = capsysbinary.readouterr()
    return code, captured.out, captured.err.decode()


def test_export_then_stats_reads_the_dataset(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    ds = tmp_path / "history"
    code, out, err = cli(capsysbinary, "export", str(DATA), "--to", str(ds))
    assert code == 0
    assert out == b""
    assert "Wrote 15 sessions (33 requests, 75 objects) to" in err
    assert is_dataset(ds)

    # -o / --output name the same directory as --to (the other commands' output option).
    code, out, err = cli(capsysbinary, "export", str(DATA), "-o", str(ds), "--json")
    doc = orjson.loads(out)
    assert code == 0
    assert doc["written"] == []
    assert doc["unchanged"] == 15
    assert doc["schema_version"] == 2
    assert set(doc) == {
        "schema_version",
        "dataset",
        "user",
        "machine",
        "written",
        "unchanged",
        "removed",
        "objects",
        "rows",
        "with_text",
    }

    # (the reports that sum requests are summed by polars where the requests are: export._RequestSums)
    grains = [[b] for b in ("session", "turn", "day", "model", "week", "month", "user")]
    for by, *tz in [
        *grains,
        ["day", "--timezone", "Pacific/Kiritimati"],
        ["month", "--timezone", "Asia/Tokyo"],
    ]:
        _, direct, _ = cli(capsysbinary, "stats", str(DATA), "--by", by, "-f", "json", *tz)
        code, from_ds, _ = cli(capsysbinary, "stats", str(ds), "--by", by, "-f", "json", *tz)
        assert code == 0
        want, got = orjson.loads(direct), orjson.loads(from_ds)
        rows = got["rows"]
        for r in [*rows, *want["rows"]]:
            if by == "session":  # the file column names the absolute path the export read
                r["file"] = Path(r["file"]).name
                r["project"] = export.project_name(r["project"])  # a dataset names a project, not its path
            if by == "turn":  # no text leaves the machine without --with-text
                r.pop("prompt")
        if by == "turn":
            assert all(r["prompt"] is None for r in orjson.loads(from_ds)["rows"])
        assert rounded(rows) == rounded(want["rows"])
        assert got["read"]["total_tokens"] == want["read"]["total_tokens"]


def test_stats_filters_work_on_a_dataset(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    ds = tmp_path / "history"
    assert cli(capsysbinary, "export", str(DATA), "--to", str(ds))[0] == 0
    args = ("--by", "request", "-f", "json", "--since", "2026-04-01", "--project", "ops-box")
    _, direct, _ = cli(capsysbinary, "stats", str(DATA), *args)
    _, from_ds, _ = cli(capsysbinary, "stats", str(ds), *args)
    assert rounded(orjson.loads(from_ds)["rows"]) == rounded(orjson.loads(direct)["rows"]) != []


FILTERS = [
    ["--since", "2026-04-20"],
    ["--until", "2026-04-20"],
    ["--model", "gemini-2.5"],
    ["--model", "gemini-3", "--since", "2026-04-01"],
    ["--project", "ctxdemo", "--until", "2026-04-30"],
    ["--session", "e1e2"],
    ["--since", "2030-01-01"],
    ["--no-subagents", "--since", "2026-04-01", "--timezone", "Asia/Tokyo"],
]


@pytest.mark.parametrize("window", FILTERS, ids=" ".join)
def test_filtered_reports_that_sum_requests_read_no_message_but_its_time(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, window: list[str]
) -> None:
    """A report that sums requests, under a filter, over a dataset: the report of the sessions themselves
    (rows, totals, what was read), from the sessions' rows, the requests' and, for the days, the messages'
    times alone: the objects read are the sessions', the requests' of the sessions kept, and with --since
    or --until the messages' of those that may hold the days."""
    ds = tmp_path / "history"
    assert cli(capsysbinary, "export", str(DATA), "--to", str(ds))[0] == 0
    objects = {t: len(list((ds / t).rglob("*.parquet"))) for t in ("sessions", "requests", "messages")}
    for by in ("day", "week", "model", "project"):
        args = ("--by", by, "-f", "json", *window)
        code, direct, _ = cli(capsysbinary, "stats", str(DATA), *args)
        assert cli(capsysbinary, "stats", str(ds), *args)[0] == code == 0
        want, got = orjson.loads(direct), orjson.loads(cli(capsysbinary, "stats", str(ds), *args)[1])
        for r in want["rows"]:  # (a dataset names a project, not its folder)
            r.update({"project": export.project_name(r["project"])} if "project" in r else {})
        if by == "project":  # (in the order of those names)
            want["rows"].sort(key=lambda r: str(r[by]))
            got["rows"].sort(key=lambda r: str(r[by]))
        assert got["rows"] == want["rows"], by
        assert got["totals"] == want["totals"], by
        for name in ("sessions", "subagent_sessions", "requests", "total_tokens", "total_mismatches"):
            assert got["read"][name] == want["read"][name], (by, name)
        dated = "--since" in window or "--until" in window
        assert got["read"]["files"] <= objects["sessions"] + objects["requests"] + dated * objects["messages"]
        assert got["read"]["files"] >= objects["sessions"]


def test_usage_errors(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    ds = tmp_path / "history"
    assert cli(capsysbinary, "export", str(DATA), "--to", str(ds))[0] == 0
    code, _, err = cli(capsysbinary, "stats", str(ds), str(DATA))
    assert code == 2
    assert "cannot be combined" in err
    code, _, err = cli(capsysbinary, "export", str(ds), "--to", str(tmp_path / "other"))
    assert code == 2
    assert "is a ctxtool dataset" in err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("x", encoding="utf-8")
    code, _, err = cli(capsysbinary, "export", str(DATA), "--to", str(tmp_path / "full"))
    assert code == 2
    assert "is a folder that is not a ctxtool dataset" in err
    assert err.rstrip().endswith("wrote")
    code, _, err = cli(capsysbinary, "export", str(DATA))
    assert code == 2
    assert "--to" in err


def test_default_root_and_strict(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    import shutil

    shutil.copytree(DATA, home / ".gemini" / "tmp")
    monkeypatch.setenv("GEMINI_CLI_HOME", str(home))
    code, _, err = cli(capsysbinary, "export", "--to", str(tmp_path / "ds"), "--strict")
    assert code == 1
    assert "Wrote 15 sessions" in err


def test_help(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = cli(capsysbinary, "export", "--help")
    assert code == 0
    assert b"machine=<machine>/<session>.parquet" in out
    for option in (b"--with-text", b"--user", b"--machine", b"s3://"):
        assert option in out


def test_written_files_get_the_mode_a_plain_open_gives(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    """Not mkstemp's 0600: a report or dataset is meant to be read by the user's other tools and users."""
    import os

    old = os.umask(0o022)
    try:
        assert cli(capsysbinary, "stats", str(DATA), "-f", "csv", "-o", str(tmp_path / "r.csv"))[0] == 0
        assert cli(capsysbinary, "export", str(DATA), "--to", str(tmp_path / "ds"))[0] == 0
    finally:
        os.umask(old)
    written = [tmp_path / "r.csv", *(tmp_path / "ds").rglob("*.parquet"), *(tmp_path / "ds").glob("*.json")]
    assert len(written) > 3
    assert {oct(p.stat().st_mode & 0o777) for p in written} == {"0o644"}


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="the real sessions are not on this machine")
def test_dated_reports_of_a_dataset_read_only_the_sessions_of_those_days(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    """`--since`/`--until` over a dataset read only the objects of sessions that may hold those days
    (export.load_dataset(days=…)), and every report is still the one of the sessions themselves."""
    import polars as pl

    ds = tmp_path / "history"
    assert cli(capsysbinary, "export", str(REAL_SESSIONS), "--to", str(ds))[0] == 0
    sessions = pl.read_parquet(ds / "sessions" / "**" / "*.parquet")
    messages = pl.read_parquet(ds / "messages" / "**" / "*.parquet")
    span = messages.group_by("session_key").agg(
        pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi")
    )
    both = sessions.join(span, on="session_key")
    assert (both["start"] <= both["lo"]).all()
    assert (both["end"] >= both["hi"]).all()
    days = sorted(set(messages.get_column("ts").dt.date().drop_nulls().to_list()))
    middle = days[len(days) // 2].isoformat()
    windows = [["--since", middle], ["--until", middle], ["--since", middle, "--until", middle]]
    for window in windows:
        for by in ("session", "turn", "request", "day", "user"):
            args = ("--by", by, "-f", "json", *window)
            _, direct, _ = cli(capsysbinary, "stats", str(REAL_SESSIONS), *args)
            _, from_ds, _ = cli(capsysbinary, "stats", str(ds), *args)
            want, got = orjson.loads(direct), orjson.loads(from_ds)
            for r in [*want["rows"], *got["rows"]]:
                r.pop("file", None)
                r.pop("prompt", None)
                if "project" in r:
                    r["project"] = export.project_name(r["project"])
            assert rounded(got["rows"]) == rounded(want["rows"]), (window, by)
            assert got["totals"] == want["totals"], (window, by)
    assert got["read"]["files"] < len(
        list(ds.rglob("*.parquet"))
    )  # the other sessions' objects were not read
