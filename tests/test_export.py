"""The Parquet dataset: reports read back equal reports from the sessions; runs append, never duplicate."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from ctxtool import export, frames
from ctxtool.common.choices import BY_CHOICES
from ctxtool.common.errors import CtxtoolError, UsageError
from tests.conftest import FIXTURES, REAL_SESSIONS, REPO

DATA = FIXTURES / "gemini" / "tmp"
GROWING = DATA / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
EXPORT_DOC = REPO / "docs" / "export.md"
EXPORT_HEADING = "## Queries"

# The DuckDB example of docs/export.md (under EXPORT_HEADING); test_documented_sql_matches keeps them equal.
DOC_SQL = """\
SELECT project,
       strftime(day, '%Y-%m') AS month,
       count(DISTINCT session_key) AS sessions,
       count(*) AS requests,
       sum(total) AS total_tokens,
       sum(cached) AS cached_tokens,
       sum(cost) AS cost_usd
FROM read_parquet('DIR/requests/**/*.parquet', hive_partitioning = true)
GROUP BY ALL
ORDER BY project, month;
"""


def assert_same_reports(direct: frames.Corpus, loaded: frames.Corpus) -> None:
    for by in BY_CHOICES:
        assert_frame_equal(frames.report(direct, by), frames.report(loaded, by))
    for by in ("turn", "session", "day"):
        assert_frame_equal(
            frames.report(frames.live_only(direct), by), frames.report(frames.live_only(loaded), by)
        )
    assert frames.read_summary(loaded)["total_tokens"] == frames.read_summary(direct)["total_tokens"]


def parquet_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")}


def make_project(root: Path, name: str, project_root: str, sessions: list[Path]) -> Path:
    chats = root / name / "chats"
    chats.mkdir(parents=True)
    (root / name / ".project_root").write_text(project_root, encoding="utf-8")
    for s in sessions:
        shutil.copy(s, chats / s.name)
    return root


@pytest.mark.parametrize("prompts", [True, False])
def test_reports_from_dataset_equal_reports_from_sessions(tmp_path: Path, prompts: bool) -> None:
    direct = frames.load([DATA])
    result = export.export_corpus(frames.load([DATA]), tmp_path / "ds", prompts=prompts)
    assert result.run == 1
    assert len(result.added) == direct.sessions.height == result.sessions
    loaded = export.load_dataset(tmp_path / "ds")
    if prompts:
        assert_same_reports(direct, loaded)
        assert_frame_equal(
            direct.tool_calls.sort("session_key", "call_id"), loaded.tool_calls.sort("session_key", "call_id")
        )
    else:
        assert loaded.turns.get_column("prompt").null_count() == loaded.turns.height
        assert loaded.messages.get_column("preview").null_count() == loaded.messages.height
        assert loaded.sessions.get_column("summary").null_count() == loaded.sessions.height
        no_text = frames.report(direct, "turn").with_columns(prompt=pl.lit(None, dtype=pl.String))
        assert_frame_equal(no_text, frames.report(loaded, "turn"))


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="the real sessions are not on this machine")
def test_real_sessions_round_trip(tmp_path: Path) -> None:
    copy = shutil.copytree(REAL_SESSIONS, tmp_path / "real")
    direct = frames.load([copy])
    assert direct.requests.height > 0
    export.export_corpus(frames.load([copy]), tmp_path / "ds")
    assert_same_reports(direct, export.load_dataset(tmp_path / "ds"))


def test_layout_and_manifest(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    export.export_corpus(frames.load([DATA]), ds, now="2026-08-01T00:00:00Z")
    manifest = orjson.loads((ds / export.MANIFEST_NAME).read_bytes())
    assert manifest["format"] == "ctxtool-dataset"
    assert manifest["schema_version"] == 1
    assert manifest["runs"] == [
        {
            "run": 1,
            "at": "2026-08-01T00:00:00Z",
            "ctxtool_version": manifest["ctxtool_version"],
            "added": 15,
            "replaced": 0,
            "unchanged": 0,
            "retained": 0,
            "prompts": True,
            "rows": {"sessions": 15, "messages": 75, "requests": 33, "tool_calls": 15, "turns": 25},
        }
    ]
    assert {p["path"] for p in manifest["parts"]} == parquet_files(ds)
    for part in manifest["parts"]:
        m = re.fullmatch(r"(\w+)/project=([^/]+)/day=([^/]+)/part-00001\.parquet", part["path"])
        assert m is not None
        assert m[1] == part["table"]
        assert m[2] == export.hive_escape(part["project"])
        assert m[3] == (part["day"] or export.NULL_PARTITION)
        df = pl.read_parquet(ds / part["path"])
        assert df.height == part["rows"]
        assert "project" not in df.columns
        assert sorted(set(df.get_column("session_key"))) == part["sessions"]
    # Requests sit in the partition of their own UTC day.
    req = pl.read_parquet(ds / "requests" / "**" / "*.parquet", hive_partitioning=True)
    assert (req.get_column("ts").dt.date() == req.get_column("day")).all()
    assert set(manifest["sessions"]) == set(frames.load([DATA]).sessions.get_column("session_key"))


def test_second_run_adds_nothing(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    export.export_corpus(frames.load([DATA]), ds)
    before = {p: (ds / p).read_bytes() for p in parquet_files(ds)}
    manifest = (ds / export.MANIFEST_NAME).read_bytes()
    again = export.export_corpus(frames.load([DATA]), ds)
    assert again.run is None
    assert again.added == again.replaced == ()
    assert again.unchanged == 15
    assert (ds / export.MANIFEST_NAME).read_bytes() == manifest
    assert {p: (ds / p).read_bytes() for p in parquet_files(ds)} == before


def grow(path: Path) -> None:
    """Append a turn the way Gemini CLI records one: a prompt, a reply with tokens, a $set."""
    lines = [
        {
            # New ids: the fixture's compression already used …a1 for its snapshot.
            "id": "91000000-0000-4000-8000-0000000000b1",
            "timestamp": "2026-05-26T08:00:00.000Z",
            "type": "user",
            "content": [{"text": "Now add an index on users.email"}],
        },
        {
            "id": "91000000-0000-4000-8000-0000000000b2",
            "timestamp": "2026-05-26T08:00:09.000Z",
            "type": "gemini",
            "content": "Added the index.",
            "tokens": {
                "input": 25000,
                "output": 40,
                "cached": 20000,
                "thoughts": 0,
                "tool": 0,
                "total": 25040,
            },
            "model": "gemini-3.1-pro-preview",
        },
        {"$set": {"lastUpdated": "2026-05-26T08:00:09.001Z"}},
    ]
    with path.open("ab") as fh:
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in lines))


def test_grown_session_replaces_its_rows_and_deleted_sessions_stay(tmp_path: Path) -> None:
    other = DATA / "ctxdemo" / "chats" / "session-2026-04-23T08-05-9a8b7c6d.jsonl"
    root = make_project(tmp_path / "tmp", "proj", "/work/proj", [GROWING, other])
    ds = tmp_path / "ds"
    first = export.export_corpus(frames.load([root]), ds)
    assert len(first.added) == 2
    first_parts = parquet_files(ds)

    grown = root / "proj" / "chats" / GROWING.name
    grow(grown)
    direct = frames.load([root])
    second = export.export_corpus(frames.load([root]), ds)
    assert second.run == 2
    assert second.added == ()
    assert second.replaced == (frames.session_key(str(grown)),)
    assert second.unchanged == 1
    assert second.rows["requests"] == 5
    assert second.parts_removed > 0
    loaded = export.load_dataset(ds)
    assert_same_reports(direct, loaded)
    assert loaded.requests.select("session_key", "position").is_duplicated().sum() == 0
    # The new day got its own partition; superseded parts are gone, the other session's are untouched.
    manifest = export.read_manifest(ds)
    assert {p["path"] for p in manifest["parts"]} == parquet_files(ds)
    assert any(p["day"] == "2026-05-26" for p in manifest["parts"])
    assert all(p in parquet_files(ds) for p in first_parts if "2026-04-23" in p)

    # Gemini CLI's retention deletes the other session: the dataset keeps it.
    other_copy = root / "proj" / "chats" / other.name
    other_copy.unlink()
    third = export.export_corpus(frames.load([root]), ds)
    assert third.run is None
    assert third.retained == 1
    assert third.sessions == 2
    assert_same_reports(direct, export.load_dataset(ds))


def test_interrupted_run_leaves_a_readable_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path / "tmp", "proj", "/work/proj", [GROWING])
    ds = tmp_path / "ds"
    export.export_corpus(frames.load([root]), ds)
    before = frames.report(export.load_dataset(ds), "request")
    grow(root / "proj" / "chats" / GROWING.name)

    def crash(path: Path, data: bytes) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "_write_bytes_atomic", crash)
    with pytest.raises(KeyboardInterrupt):
        export.export_corpus(frames.load([root]), ds)
    assert_frame_equal(frames.report(export.load_dataset(ds), "request"), before)
    # The parts it wrote are removed before the interrupt propagates: a reader globbing the files sees none.
    assert not any("part-00002" in p for p in parquet_files(ds))
    assert {p["path"] for p in export.read_manifest(ds)["parts"]} == parquet_files(ds)

    monkeypatch.undo()
    done = export.export_corpus(frames.load([root]), ds)
    assert done.run == 2
    assert len(done.replaced) == 1
    assert {p["path"] for p in export.read_manifest(ds)["parts"]} == parquet_files(ds)
    assert not list(ds.rglob("*.tmp"))
    assert_same_reports(frames.load([root]), export.load_dataset(ds))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ops-box", "ops-box"),
        ("/home/dev/x", "%2Fhome%2Fdev%2Fx"),
        ("a=b c%d#é", "a%3Db c%25d%23é"),
        ("", export.NULL_PARTITION),
        (None, export.NULL_PARTITION),
    ],
)
def test_hive_escape(value: str | None, expected: str) -> None:
    assert export.hive_escape(value) == expected


def test_long_project_names_fit_a_directory_name() -> None:
    long = "/home/" + "very-long-folder/" * 40
    name = export.hive_escape(long)
    assert len(name.encode()) <= 200
    assert name != export.hive_escape(long + "x")


WEIRD = ["/home/dev/a b/c=d", "C:\\Users\\dev\\proj", "naïve 100%#?*", "x" * 300]


def test_project_names_round_trip_through_duckdb_and_our_reader(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    root = tmp_path / "tmp"
    for i, name in enumerate(WEIRD):
        make_project(root, f"p{i}", name, [GROWING])
    ds = tmp_path / "ds"
    export.export_corpus(frames.load([root]), ds)
    loaded = export.load_dataset(ds)
    assert sorted(loaded.requests.get_column("project").unique()) == sorted(WEIRD)
    assert_same_reports(frames.load([root]), loaded)
    glob = (ds / "requests" / "**" / "*.parquet").as_posix()
    got = duckdb.sql(
        f"SELECT DISTINCT project FROM read_parquet('{glob}', hive_partitioning = true)"
    ).fetchall()
    # Hive readers decode the directory names; only the name too long for a file system is shortened.
    assert sorted(r[0] for r in got) == sorted([*WEIRD[:3], export.hive_escape(WEIRD[3])])


def test_documented_query_runs_in_duckdb_and_matches_polars(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    ds = tmp_path / "ds"
    export.export_corpus(frames.load([DATA]), ds)
    sql = DOC_SQL.replace("DIR", ds.as_posix())
    rel = duckdb.sql(sql)
    got = pl.DataFrame(rel.fetchall(), schema=rel.columns, orient="row")
    req = frames.load([DATA]).requests
    want = (
        req.group_by("project", month=pl.col("ts").dt.strftime("%Y-%m"))
        .agg(
            pl.col("session_key").n_unique().alias("sessions"),
            pl.len().alias("requests"),
            pl.col("total").sum().alias("total_tokens"),
            pl.col("cached").sum().alias("cached_tokens"),
            pl.col("cost").sum().alias("cost_usd"),
        )
        .sort("project", "month")
    )
    assert got.height == want.height > 3
    assert got.get_column("project").to_list() == want.get_column("project").to_list()
    assert got.get_column("month").to_list() == want.get_column("month").to_list()
    for col in ("sessions", "requests", "total_tokens", "cached_tokens"):
        assert got.get_column(col).cast(pl.Int64).to_list() == want.get_column(col).to_list(), col
    assert got.get_column("cost_usd").to_list() == pytest.approx(want.get_column("cost_usd").to_list())


def test_documented_sql_matches() -> None:
    doc = EXPORT_DOC.read_text(encoding="utf-8")
    assert doc.count(EXPORT_HEADING) == 1, f"docs/export.md has no {EXPORT_HEADING!r} section"
    section = doc.split(EXPORT_HEADING, 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sql\n(.*?)```", section, re.S)
    assert block is not None, "the export section has no ```sql block"
    assert block[1] == DOC_SQL


def test_refuses_a_directory_that_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(UsageError, match="not empty"):
        export.export_corpus(frames.load([DATA]), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    with pytest.raises(UsageError, match="is a file"):
        export.export_corpus(frames.load([DATA]), tmp_path / "notes.txt")
    with pytest.raises(UsageError, match="not a ctxtool dataset"):
        export.load_dataset(tmp_path)


def test_damaged_or_newer_datasets_are_reported(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    export.export_corpus(frames.load([DATA]), ds)
    manifest = export.read_manifest(ds)
    (ds / manifest["parts"][0]["path"]).unlink()
    with pytest.raises(CtxtoolError, match="is missing"):
        export.load_dataset(ds)
    manifest["schema_version"] = 99
    (ds / export.MANIFEST_NAME).write_bytes(orjson.dumps(manifest))
    with pytest.raises(CtxtoolError, match="newer ctxtool"):
        export.load_dataset(ds)


def test_empty_dataset_and_no_subagents(tmp_path: Path) -> None:
    assert not export.is_dataset(tmp_path)
    ds = tmp_path / "ds"
    export.export_corpus(frames.load([DATA]), ds)
    assert export.is_dataset(ds)
    direct = frames.load([DATA], subagents=False)
    loaded = export.load_dataset(ds, subagents=False)
    assert_frame_equal(
        frames.report(direct, "session", include_subagents_in_parent=False),
        frames.report(loaded, "session", include_subagents_in_parent=False).with_columns(pl.col("subagents")),
    )
    # A dataset with no sessions in it still has every column.
    empty = tmp_path / "empty"
    assert export.export_corpus(frames.build_corpus([]), empty).run is None
    assert export.is_dataset(empty)
    nothing = export.load_dataset(empty)
    assert nothing.requests.height == 0
    assert nothing.requests.columns == frames.build_corpus([]).requests.columns
