"""The stored scan: a splice writes a delta, not the whole frames, and reading base + delta gives the spliced
frames; the base is written again when the delta grows or other sessions' rows moved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from ctxtool.frames import store
from ctxtool.frames.build import without_sessions
from ctxtool.frames.loading import load_corpus
from tests.conftest import FIXTURES
from tests.test_loading import CHATS, add_session, append, delete_parent, reply, same


def scan_folder(cache: Path) -> Path:
    (folder,) = (cache / "corpus").iterdir()
    return folder


def state(cache: Path) -> dict[str, object]:
    names = json.loads((scan_folder(cache) / "files.json").read_text())["store"]
    assert isinstance(names, dict)
    return names


def stored_dirs(cache: Path) -> list[str]:
    return sorted(p.name for p in scan_folder(cache).iterdir() if p.is_dir())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", root)
    return root


def grown_file(root: Path, n: int = 0) -> Path:
    return [p for p in sorted((root / CHATS).glob("*.jsonl")) if p.read_bytes().endswith(b"\n")][n]


def test_successive_splices_write_deltas_over_one_base(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "DELTA_MAX_SHARE", 1.0)  # the fixtures are few: any delta is a large share
    cache = tmp_path / "cache"
    load_corpus([root], cache=True, cache_dir=cache)
    first = state(cache)
    assert first["delta"] is None
    assert stored_dirs(cache) == [f"base-{first['base']}"]

    for step, change in enumerate(
        [
            lambda: append(grown_file(root, 0), reply("d1", 1111)),
            lambda: append(grown_file(root, 0), reply("d2", 2222)),
            lambda: add_session(root),
            lambda: append(grown_file(root, 1), reply("d3", 3333)),
        ]
    ):
        change()
        spliced, use = load_corpus([root], cache=True, cache_dir=cache)
        assert not use.corpus_hit, step
        now = state(cache)
        assert now["base"] == first["base"], step  # the base was not written again
        assert isinstance(now["delta"], str)
        assert stored_dirs(cache) == [f"base-{first['base']}", f"delta-{now['delta']}"]
        full, _ = load_corpus([root])
        same(spliced, full)
        again, use = load_corpus([root], cache=True, cache_dir=cache)
        assert use.corpus_hit
        same(again, full)


def test_a_large_delta_writes_the_base_again(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    load_corpus([root], cache=True, cache_dir=cache)
    before = state(cache)
    monkeypatch.setattr(store, "DELTA_MAX_SHARE", 0.0)
    append(grown_file(root), reply("big", 5555))
    load_corpus([root], cache=True, cache_dir=cache)
    after = state(cache)
    assert after["base"] != before["base"]
    assert after["delta"] is None
    assert stored_dirs(cache) == [f"base-{after['base']}"]
    again, use = load_corpus([root], cache=True, cache_dir=cache)
    assert use.corpus_hit
    same(again, load_corpus([root])[0])


def test_a_moved_parent_link_writes_the_base_again(root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load_corpus([root], cache=True, cache_dir=cache)
    before = state(cache)
    delete_parent(root)  # its subagents' rows get new root keys: rows outside the re-read session move
    spliced, _ = load_corpus([root], cache=True, cache_dir=cache)
    after = state(cache)
    assert after["base"] != before["base"]
    assert after["delta"] is None
    full, _ = load_corpus([root])
    same(spliced, full)
    same(load_corpus([root], cache=True, cache_dir=cache)[0], full)


def test_the_tool_calls_and_turns_are_derived_when_read_not_stored(root: Path, tmp_path: Path) -> None:
    """A scan stores the tool calls as read and derives their joined columns and the turns when a report
    reads them: a first run whose report never reads them neither builds nor holds them (its peak memory is
    writing the store). Read back, they equal a build's."""
    cache = tmp_path / "cache"
    first, _ = load_corpus([root], cache=True, cache_dir=cache)
    assert not isinstance(vars(first)["_turns"], pl.DataFrame)  # not built
    base = scan_folder(cache) / f"base-{state(cache)['base']}"
    assert sorted(p.name for p in base.glob("*.arrow")) == [
        "calls.arrow",
        "messages.arrow",
        "requests.arrow",
        "sessions.arrow",
    ]
    again, use = load_corpus([root], cache=True, cache_dir=cache)
    assert use.corpus_hit
    same(again, load_corpus([root])[0])
    assert again.tool_calls.height > 0
    assert again.turns.height > 0


def test_a_missing_stored_folder_means_a_full_build(root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load_corpus([root], cache=True, cache_dir=cache)
    append(grown_file(root), reply("x1", 4444))
    load_corpus([root], cache=True, cache_dir=cache)
    delta = state(cache)["delta"]
    shutil.rmtree(scan_folder(cache) / f"delta-{delta}")  # e.g. pruned by a concurrent run
    corpus, use = load_corpus([root], cache=True, cache_dir=cache)
    assert not use.corpus_hit
    same(corpus, load_corpus([root])[0])
    assert state(cache)["delta"] is None


def test_the_layout_before_deltas_is_cleared(root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load_corpus([root], cache=True, cache_dir=cache)
    folder = scan_folder(cache)
    (folder / "messages.arrow").write_bytes(b"old layout")
    (folder / "meta.json").write_text("{}")
    state_file = folder / "files.json"
    old = json.loads(state_file.read_text())
    del old["store"]  # a state written before deltas: not trusted, so everything is read again
    state_file.write_text(json.dumps(old))
    corpus, use = load_corpus([root], cache=True, cache_dir=cache)
    assert not use.corpus_hit
    assert not (folder / "messages.arrow").exists()
    assert not (folder / "meta.json").exists()
    same(corpus, load_corpus([root])[0])


@given(
    st.lists(st.sampled_from("abcdef"), max_size=300),
    st.lists(st.sampled_from("abcdefg"), max_size=4),
)
def test_without_sessions_equals_a_filter(keys: list[str], drop: list[str]) -> None:
    # Contiguous or interleaved, few runs or more than _MAX_SLICES: the same rows in the same order.
    df = pl.DataFrame(
        {"session_key": keys, "n": list(range(len(keys)))}, schema={"session_key": pl.String, "n": pl.Int64}
    )
    expected = df.filter(pl.col("session_key").is_in(drop).not_())
    assert_frame_equal(without_sessions(df, drop), expected)


def test_prune_spares_another_runs_young_folders_and_removes_stale_ones(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import time

    cache = tmp_path / "cache"
    load_corpus([root], cache=True, cache_dir=cache)
    folder = scan_folder(cache)
    young = folder / "base-0123456789ab"  # another run wrote it and has not named it in files.json yet
    writing = folder / ".base-ba9876543210.tmp"  # another run is writing it
    stale = folder / "delta-00000000dead"  # left by a run that crashed long ago
    for d in (young, writing, stale):
        d.mkdir()
        (d / "messages.arrow").write_bytes(b"x")
    old = time.time() - store.STALE_AFTER_S - 60
    os.utime(stale, (old, old))
    append(grown_file(root), reply("p1", 7777))
    load_corpus([root], cache=True, cache_dir=cache)
    names = {p.name for p in folder.iterdir()}
    assert young.name in names
    assert writing.name in names
    assert stale.name not in names
