"""The Parquet dataset in a folder: reports read back equal reports from the sessions; each machine's objects
are fixed by machine and session, written whole, never twice; nothing private leaves the machine unasked."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from ctxtool import export, frames
from ctxtool.common.choices import BY_CHOICES
from ctxtool.common.errors import CtxtoolError, UsageError
from ctxtool.common.identity import Identity, identity
from ctxtool.stats import StatsQuery, tally_report
from tests.conftest import FIXTURES, REAL_SESSIONS

DATA = FIXTURES / "gemini" / "tmp"
GROWING = DATA / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
ME = Identity("alice", "lab/box 1=2")  # a machine name a hive path must escape
# What only the machine that wrote them knows, or what the sessions' text says: not in the dataset.
PRIVATE = {
    "sessions": ("summary",),
    "messages": ("preview",),
    "turns": ("prompt",),
    "tool_calls": ("target",),
}
KEYS = ("session_key", "parent_session_key", "root_session_key", "file", "group_key", "project_dir")


def write(corpus: frames.Corpus, ds: Path, who: Identity = ME, **kw: object) -> export.ExportResult:
    return export.export_corpus(corpus, ds, who, roots=[str(DATA)], state_dir=ds.parent / "cache", **kw)  # type: ignore[arg-type]


def report(corpus: frames.Corpus, by: str, *, live: bool = False) -> pl.DataFrame:
    """A report's frame without the columns that name a session or a file (the dataset has its own keys)."""
    df = frames.report(frames.live_only(corpus) if live else corpus, by)
    df = df.drop([c for c in (*KEYS, "session", "prompt", "summary") if c in df.columns])
    if "project" in df.columns:  # a dataset names a project, not its path (export.project_name)
        df = df.with_columns(pl.col("project").map_elements(export.project_name, return_dtype=pl.String))
    return df.sort("project", maintain_order=True) if by == "project" else df


def assert_same_reports(direct: frames.Corpus, loaded: frames.Corpus) -> None:
    for by in BY_CHOICES:
        if by not in ("user", "machine"):
            assert_frame_equal(report(direct, by), report(loaded, by))
    for by in ("turn", "session", "day"):
        assert_frame_equal(report(direct, by, live=True), report(loaded, by, live=True))
    assert frames.read_summary(loaded)["total_tokens"] == frames.read_summary(direct)["total_tokens"]


def objects(ds: Path) -> dict[str, bytes]:
    return {p.relative_to(ds).as_posix(): p.read_bytes() for p in ds.rglob("*") if p.is_file()}


def test_reports_from_dataset_equal_reports_from_sessions(tmp_path: Path) -> None:
    direct = frames.load([DATA])
    result = write(frames.load([DATA]), tmp_path / "ds")
    assert len(result.written) == direct.sessions.height == 15
    assert result.objects == 15 * len(export.TABLES)
    loaded = export.load_dataset(tmp_path / "ds")
    assert_same_reports(direct, loaded)
    for by in ("user", "machine"):
        rows = frames.report(loaded, by)
        assert rows.get_column(by).to_list() == [getattr(ME, by)]
        assert rows.get_column("total").to_list() == [direct.requests.get_column("total").sum()]


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="the real sessions are not on this machine")
def test_real_sessions_round_trip(tmp_path: Path) -> None:
    copy = shutil.copytree(REAL_SESSIONS, tmp_path / "real")
    direct = frames.load([copy])
    assert direct.requests.height > 0
    export.export_corpus(
        frames.load([copy]), tmp_path / "ds", ME, roots=[str(copy)], state_dir=tmp_path / "c"
    )
    assert_same_reports(direct, export.load_dataset(tmp_path / "ds"))


def test_layout(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    write(frames.load([DATA]), ds)
    marker = orjson.loads((ds / "_ctxtool_dataset.json").read_bytes())
    assert marker == {"format": "ctxtool-dataset", "schema_version": 2, "tables": sorted(export.TABLES)}
    keys = {
        export.dataset_key(ME.machine, export.relative_place(g, [str(DATA)]) or "")
        for g in frames.load([DATA]).sessions.get_column("group_key")
    }
    for table in export.TABLES:
        found = sorted(p.name for p in (ds / table / "machine=lab%2Fbox 1%3D2").iterdir())
        assert found == sorted(f"{k}.parquet" for k in keys), table
    req = pl.read_parquet(ds / "requests" / "**" / "*.parquet", hive_partitioning=True)
    assert set(req.get_column("machine")) == {ME.machine}
    assert set(req.get_column("user")) == {ME.user}
    # A plain reader counts each billed request once.
    assert req.select("session_key", "message_id").is_unique().all()
    assert req.height == frames.load([DATA]).requests.height


def test_nothing_private_leaves_the_machine_by_default(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    result = write(frames.load([DATA]), ds)
    assert not result.with_text
    direct = frames.load([DATA])
    for table, cols in PRIVATE.items():
        df = pl.read_parquet(ds / table / "**" / "*.parquet")
        for c in cols:
            assert df.get_column(c).null_count() == df.height, (table, c)
            assert getattr(direct, table).get_column(c).null_count() < getattr(direct, table).height, c
    blob = b"".join(objects(ds).values())
    assert str(DATA).encode() not in blob
    assert str(FIXTURES).encode() not in blob
    sessions = pl.read_parquet(ds / "sessions" / "**" / "*.parquet")
    assert all(not f.startswith("/") for f in sessions.get_column("file"))
    assert "ctxdemo/chats/session-2026-05-25T09-30-c4e5f6a7.jsonl" in sessions.get_column("file").to_list()


def test_with_text_keeps_the_text_with_secrets_redacted(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    assert write(frames.load([DATA]), ds, with_text=True).with_text
    loaded = export.load_dataset(ds)
    direct = frames.load([DATA])
    assert_frame_equal(
        frames.report(direct, "turn").select("prompt"), frames.report(loaded, "turn").select("prompt")
    )
    assert (
        loaded.messages.get_column("preview").null_count()
        == direct.messages.get_column("preview").null_count()
    )


def test_a_second_run_writes_nothing(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    write(frames.load([DATA]), ds)
    before = objects(ds)
    again = write(frames.load([DATA]), ds)
    assert again.written == ()
    assert again.unchanged == 15
    assert objects(ds) == before


def test_without_its_state_a_run_writes_the_same_objects_again(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    write(frames.load([DATA]), ds)
    before = objects(ds)
    shutil.rmtree(tmp_path / "cache")
    assert len(write(frames.load([DATA]), ds).written) == 15
    assert objects(ds) == before


def grow(path: Path) -> None:
    """Append a turn the way Gemini CLI records one: a prompt, a reply with tokens, a $set."""
    lines = [
        {
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


def test_a_grown_session_is_written_again_in_place_and_deleted_sessions_stay(tmp_path: Path) -> None:
    home = shutil.copytree(DATA, tmp_path / "tmp")
    ds = tmp_path / "ds"
    roots = [str(home)]
    export.export_corpus(frames.load([home]), ds, ME, roots=roots, state_dir=tmp_path / "c")
    before = objects(ds)
    grown = home / GROWING.relative_to(DATA)
    grow(grown)
    again = export.export_corpus(frames.load([home]), ds, ME, roots=roots, state_dir=tmp_path / "c")
    assert len(again.written) == 1
    changed = {k for k, v in objects(ds).items() if before.get(k) != v}
    mine = {f"{t}/machine=lab%2Fbox 1%3D2/{again.written[0]}.parquet" for t in export.TABLES}
    assert f"requests/machine=lab%2Fbox 1%3D2/{again.written[0]}.parquet" in changed <= mine
    assert set(objects(ds)) == set(before)
    # Gemini CLI's retention deletes a session: it stays in the dataset.
    grown.unlink()
    gone = export.export_corpus(frames.load([home]), ds, ME, roots=roots, state_dir=tmp_path / "c")
    assert gone.written == ()
    assert gone.removed == 0
    loaded = export.load_dataset(ds)
    assert loaded.sessions.height == 15
    assert (
        loaded.requests.get_column("total").sum()
        == frames.load([DATA]).requests.get_column("total").sum() + 25040
    )


def test_two_machines_and_two_users_in_one_dataset(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    write(frames.load([DATA]), ds, Identity("alice", "m1"))
    write(frames.load([DATA]), ds, Identity("bob", "m2"))
    loaded = export.load_dataset(ds)
    total = frames.load([DATA]).requests.get_column("total").sum()
    for by, names in (("user", ["alice", "bob"]), ("machine", ["m1", "m2"])):
        rows = frames.report(loaded, by).sort(by)
        assert rows.get_column(by).to_list() == names
        assert rows.get_column("total").to_list() == [total, total]
    assert loaded.sessions.height == 30


def test_identity_from_options_environment_and_system(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXTOOL_USER", raising=False)
    monkeypatch.delenv("CTXTOOL_MACHINE", raising=False)
    system = identity()
    assert system.user
    assert system.machine
    monkeypatch.setenv("CTXTOOL_USER", "carol")
    monkeypatch.setenv("CTXTOOL_MACHINE", "ci-7")
    assert identity() == Identity("carol", "ci-7")
    assert identity("dave", "laptop") == Identity("dave", "laptop")
    with pytest.raises(UsageError, match="--machine"):
        identity(machine="a\nb")


def test_refuses_a_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(UsageError, match="not a ctxtool dataset"):
        write(frames.load([DATA]), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    with pytest.raises(UsageError, match="not a ctxtool dataset"):
        export.load_dataset(tmp_path)


def test_newer_or_foreign_datasets_are_reported(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    write(frames.load([DATA]), ds)
    (ds / "_ctxtool_dataset.json").write_bytes(
        orjson.dumps({"format": "ctxtool-dataset", "schema_version": 99})
    )
    with pytest.raises(CtxtoolError, match="newer ctxtool"):
        export.load_dataset(ds)
    with pytest.raises(CtxtoolError, match="newer ctxtool"):
        write(frames.load([DATA]), ds)
    (ds / "_ctxtool_dataset.json").write_bytes(b"{}")
    with pytest.raises(CtxtoolError, match="not a ctxtool dataset"):
        export.load_dataset(ds)


def test_a_schema_1_dataset_is_read_not_written(tmp_path: Path) -> None:
    """A folder ctxtool wrote before (a manifest, parts by project and day) still reads; export refuses it."""
    ds = tmp_path / "old"
    direct = frames.load([DATA])
    part = "requests/project=ctxdemo/day=2026-05-25/part-00001.parquet"
    rows = direct.requests.drop("project")
    (ds / part).parent.mkdir(parents=True)
    rows.write_parquet(ds / part)
    sessions = "sessions/project=ctxdemo/day=2026-05-25/part-00001.parquet"
    (ds / sessions).parent.mkdir(parents=True)
    direct.sessions.drop("project").write_parquet(ds / sessions)
    manifest = {
        "format": "ctxtool-dataset",
        "schema_version": 1,
        "parts": [{"path": part, "table": "requests"}, {"path": sessions, "table": "sessions"}],
    }
    (ds / "_ctxtool_manifest.json").write_bytes(orjson.dumps(manifest))
    loaded = export.load_dataset(ds)
    assert loaded.requests.get_column("total").sum() == direct.requests.get_column("total").sum()
    # A filtered report that sums requests (its objects hold a project's day, not a session): the requests'
    # report of the sessions themselves; with --since, none (no messages were written: none is on a day).
    for window in ({"models": ["gemini-2.5"]}, {"since": date(2026, 4, 21)}):
        query = StatsQuery(by="day", filters=window)
        plain = tally_report(direct.tally, query, warn=lambda _: None)
        summed = export.load_dataset(ds, sums=("day", None), filters=window).tally
        made = tally_report(summed, query, warn=lambda _: None)
        assert plain is not None
        assert made is not None
        want = plain.rows.to_dicts() if "models" in window else []
        assert made.rows.to_dicts() == want
    with pytest.raises(UsageError, match="schema 1"):
        write(direct, ds)


def test_empty_dataset_and_no_subagents(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    write(frames.load([DATA]), ds)
    direct = frames.load([DATA], subagents=False)
    loaded = export.load_dataset(ds, subagents=False)
    assert_frame_equal(
        report(direct, "session").drop("subagents"), report(loaded, "session").drop("subagents")
    )
    empty = tmp_path / "empty"
    assert write(frames.build_corpus([]), empty).written == ()
    nothing = export.load_dataset(empty)
    assert nothing.requests.height == 0
    assert nothing.requests.columns[: len(frames.build_corpus([]).requests.columns)] == (
        frames.build_corpus([]).requests.columns
    )


def test_audit_of_a_dataset_with_budgets_per_user(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxtool.cli import run

    chats = DATA / "ctxdemo" / "chats"
    ds = tmp_path / "ds"
    alice = frames.load([str(chats / "session-2026-02-10T09-00-c0ffee01.json")])
    write(alice, ds, Identity("alice", "m1"))
    write(frames.load([str(chats / "session-2026-04-22T16-40-5e7a0b1c.jsonl")]), ds, Identity("bob", "m2"))
    config = tmp_path / "ctxtool.toml"
    config.write_text(
        "[audit]\n"
        'max_session_tokens = [{limit = 1000, users = ["alice"]}, {limit = 100000000}]\n'
        'max_daily_cost = {limit = 0.001, users = ["bob"]}\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    assert run(["audit", str(ds), "--config", str(config), "--format", "json"]) == 3
    doc = orjson.loads(capsysbinary.readouterr().out)
    got = sorted((c["rule"], c["status"], c["scope"]) for c in doc["checks"])
    assert got == [
        ("max-daily-cost", "fail", "users bob"),
        ("max-session-tokens", "fail", "users alice"),
        ("max-session-tokens", "pass", ""),
    ]
    assert alice.requests.get_column("total").sum() > 1000


@pytest.mark.parametrize(
    "filters", [[], ["--since", "2026-04-01"], ["--project", "ctxdemo"], ["--model", "gemini-2.5-pro"]]
)
def test_a_dataset_is_audited_in_batches_of_whole_families_as_in_one(
    filters: list[str],
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ctxtool.cli import run

    ds = tmp_path / "ds"
    corpus = frames.load([DATA, *([REAL_SESSIONS] if REAL_SESSIONS.is_dir() else [])])
    write(corpus, ds)
    args = ["audit", "--max-session-tokens", "200k", "--max-turn-tokens", "50k", "--max-daily-cost", "0.2"]
    args += ["--min-cache-ratio", "10%", "--format", "json", *filters]

    def audited(batch: int, where: Path) -> dict[str, Any]:
        monkeypatch.setattr(export, "_BATCH", batch)
        assert run([*args, str(where)]) in (0, 3)
        doc = orjson.loads(capsysbinary.readouterr().out)
        assert doc["checks"]
        return doc

    whole = audited(2000, ds)
    assert audited(3, ds) == whole  # read, checks, their order and the sessions' metrics alike
    assert corpus.sessions.filter(pl.col("parent_session_key").is_not_null()).height  # (a family of two)
    # The sessions themselves: the same checks, but that a dataset names a file relative to its root, a
    # project by its name.
    monkeypatch.setattr(export, "_BATCH", 2000)
    assert run(
        [*args, "--no-cache", str(DATA), *([str(REAL_SESSIONS)] if REAL_SESSIONS.is_dir() else [])]
    ) in (0, 3)
    direct = orjson.loads(capsysbinary.readouterr().out)

    def unnamed(doc: dict[str, Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in c.items() if k not in ("file", "project")} for c in doc["checks"]]

    assert unnamed(direct) == unnamed(whole)
    assert direct["summary"] == whole["summary"]
