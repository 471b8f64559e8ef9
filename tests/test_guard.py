"""ctxtool guard, archive and hooks (issue 29): the tally equals `ctxtool stats`, warm calls read only new
bytes, the verdicts, failing open, and settings.json edits that keep everything else."""

from __future__ import annotations

import io
import json
import math
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxtool import frames
from ctxtool.audit import parse_limit as audit_limit
from ctxtool.cli import run
from ctxtool.hooks import figures, guard, ledger, rescan, settings
from ctxtool.hooks.ledger import Spend, Tally
from tests.conftest import FIXTURES, write_jsonl

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "real-sessions"
MODEL = "gemini-2.5-pro"


def _same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (
        a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    )


def _assert_equals_stats(root: Path, cache: Path) -> None:
    corpus = frames.load([str(root)])
    rows = frames.report(corpus, "session").iter_rows(named=True)
    for row in rows:
        s = ledger.spend(row["file"], roots=[root], cache_dir=cache).session
        assert (s.requests, s.total) == (row["requests"], row["total"]), row["file"]
        assert _same(s.known_cost, row["cost"]), row["file"]
        assert _same(s.context_share, row["context_share"]), row["file"]
    for day in frames.report(corpus, "day").iter_rows(named=True):
        if day["day"] is None:
            continue
        at = datetime.fromisoformat(f"{day['day'].isoformat()}T12:00:00+00:00")
        assert _same(ledger.spend(None, roots=[root], cache_dir=cache, now=at).day_cost, day["cost"])


def test_the_tally_equals_stats_on_the_fixtures(tmp_path: Path) -> None:
    _assert_equals_stats(FIXTURES, tmp_path / "cache")


@pytest.mark.skipif(not REAL.exists(), reason="real sessions absent")
def test_the_tally_equals_stats_on_real_sessions(tmp_path: Path) -> None:
    _assert_equals_stats(REAL, tmp_path / "cache")


def _record(
    i: int, day: str = "2026-11-20", tokens: int = 1000, model: str | None = MODEL
) -> list[dict[str, Any]]:
    reply: dict[str, Any] = {
        "id": f"g{i}",
        "timestamp": f"{day}T10:00:{i:02d}.000Z",
        "type": "gemini",
        "content": "ok",
        "tokens": {
            "input": tokens,
            "output": 10,
            "cached": 0,
            "thoughts": 0,
            "tool": 0,
            "total": tokens + 10,
        },
    }
    if model:
        reply["model"] = model
    return [
        {"id": f"u{i}", "timestamp": f"{day}T10:00:{i:02d}.000Z", "type": "user", "content": f"q{i}"},
        reply,
    ]


def _home(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / ".gemini" / "tmp"
    meta = {"sessionId": "s1", "projectHash": "h", "startTime": "2026-11-20T10:00:00.000Z", "kind": "main"}
    session = write_jsonl(root / "p" / "chats" / "session-2026-11-20T10-00-s1.jsonl",
                          [meta, *_record(0, model=None), *_record(1)])  # fmt: skip
    return root, session


def test_a_warm_call_reads_only_what_was_appended(tmp_path: Path) -> None:
    root, session = _home(tmp_path)
    other = {"sessionId": "s2", "projectHash": "h", "startTime": "2026-11-20T09:00:00.000Z", "kind": "main"}
    write_jsonl(root / "q" / "chats" / "session-2026-11-20T09-00-s2.jsonl", [other, *_record(5, tokens=5000)])
    at = datetime(2026, 11, 20, 12, tzinfo=UTC)
    first = ledger.spend(session, cache_dir=tmp_path / "c", now=at)
    assert first.files_read == 2
    # The request without a model takes the model of the request after it (as stats prices it).
    assert (first.session.requests, first.session.total, first.session.unpriced) == (2, 2020, 0)
    again = ledger.spend(session, cache_dir=tmp_path / "c", now=at)
    assert (again.files_read, again.session.total) == (0, 2020)
    with session.open("ab") as fh:
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in _record(2)))
    grown = ledger.spend(session, cache_dir=tmp_path / "c", now=at)
    assert (grown.files_read, grown.files_resumed) == (1, 1)
    assert (grown.session.requests, grown.session.total) == (3, 3030)
    assert grown.today.days["2026-11-20"][1] == 4  # the other session's request counts for the day
    assert _same(grown.day_cost, grown.session.known_cost + ledger.spend(  # type: ignore[operator]
        root / "q" / "chats" / "session-2026-11-20T09-00-s2.jsonl", cache_dir=tmp_path / "c", now=at
    ).session.known_cost)  # fmt: skip


def test_a_warm_call_without_a_daily_budget_reads_only_its_own_session(tmp_path: Path) -> None:
    """Whatever grew beside the guarded session (another window's session, a file of one huge line), a warm
    call that needs no day's figure reads none of it; one that does reads what was appended, and the day's
    figure then counts it."""
    root, session = _home(tmp_path)
    beside = root / "q" / "chats" / "session-2026-11-20T09-00-s2.jsonl"
    other = {"sessionId": "s2", "projectHash": "h", "startTime": "2026-11-20T09:00:00.000Z", "kind": "main"}
    write_jsonl(beside, [other, *_record(5, tokens=5000)])
    _aged(root)
    at = datetime(2026, 11, 20, 12, tzinfo=UTC)
    first = ledger.spend(session, cache_dir=tmp_path / "c", now=at)
    assert first.today.days["2026-11-20"][1] == 3
    with beside.open("ab") as fh:
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in _record(7, tokens=700)))
    own = ledger.spend(session, cache_dir=tmp_path / "c", now=at, whole_day=False)
    assert (own.files_read, own.files_resumed) == (0, 0)
    assert (own.session.requests, own.session.total) == (first.session.requests, first.session.total)
    day = ledger.spend(session, cache_dir=tmp_path / "c", now=at)
    assert (day.files_read, day.files_resumed) == (1, 1)
    assert day.today.days["2026-11-20"][1] == 4
    assert (day.session.requests, day.session.total) == (first.session.requests, first.session.total)


AT = datetime(2026, 11, 20, 12, tzinfo=UTC)


def _aged(root: Path) -> None:
    """Folders as a session that started a minute ago leaves them (the quick path trusts no folder that
    changed within two seconds of a scan)."""
    past = time.time() - 60
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.utime(folder, (past, past))


def _rescans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each call that needs the full tally (``rescan.spend``) adds one entry."""
    calls: list[str] = []
    full = rescan.spend

    def counted(*args: Any, **kwargs: Any) -> Spend:
        calls.append("rescan")
        return full(*args, **kwargs)

    monkeypatch.setattr(rescan, "spend", counted)
    return calls


def _append(path: Path, *records: dict[str, Any] | bytes) -> None:
    with path.open("ab") as fh:
        fh.write(b"".join(r if isinstance(r, bytes) else orjson.dumps(r) + b"\n" for r in records))


def _user(i: int) -> dict[str, Any]:
    return {"id": f"u{i}", "timestamp": f"2026-11-20T11:{i // 60:02d}:{i % 60:02d}.000Z", "type": "user",
            "content": f"q{i}"}  # fmt: skip


def _reply(i: int, tokens: Any = 1000, model: str | None = MODEL, **more: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"id": f"g{i}", "timestamp": f"2026-11-20T11:{i // 60:02d}:{i % 60:02d}.500Z",
                           "type": "gemini", "content": "ok", **more}  # fmt: skip
    if model is not None:
        rec["model"] = model
    if isinstance(tokens, int):
        tokens = {"input": tokens, "output": 10, "cached": tokens // 4, "thoughts": 3, "tool": 0,
                  "total": tokens + 13}  # fmt: skip
    if tokens is not None:
        rec["tokens"] = tokens
    return rec


def _assert_same(got: Spend, root: Path, session: Path) -> None:
    """``got`` (the spend of ``session``, or of one of its subagents) is what ``ctxtool stats`` says of it."""
    corpus = frames.load([str(root)])
    rows = {r["file"]: r for r in frames.report(corpus, "session").iter_rows(named=True)}
    row = rows[str(session)]
    s = got.session
    assert got.session_file is not None
    assert (s.requests, s.total) == (row["requests"], row["total"])
    assert _same(s.known_cost, row["cost"])
    assert _same(s.context_share, row["context_share"])
    days = {d["day"].isoformat(): d["cost"] for d in frames.report(corpus, "day").iter_rows(named=True)
            if d["day"] is not None}  # fmt: skip
    assert _same(got.day_cost, days.get(got.day, 0.0))


def _session(root: Path, name: str = "session-2026-11-20T10-00-s1.jsonl", sid: str = "s1") -> Path:
    meta = {"sessionId": sid, "projectHash": "h", "startTime": "2026-11-20T10:00:00.000Z", "kind": "main"}
    return write_jsonl(
        root / "p" / "chats" / name, [meta, _user(0), _reply(0, model=None), _user(1), _reply(1)]
    )


def test_a_warm_call_adds_up_only_the_appended_records_as_stats_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / ".gemini" / "tmp"
    session = _session(root)
    _aged(root)
    cache = tmp_path / "c"
    _assert_same(ledger.spend(session, cache_dir=cache, now=AT), root, session)
    rescans = _rescans(monkeypatch)
    steps: list[list[dict[str, Any] | bytes]] = [
        # A prompt, its reply recorded first without tokens, then again with them, as Gemini CLI records it.
        [_user(2), _reply(2, tokens=None), _reply(2, tokens=2000), {"$set": {"lastUpdated": "11:00"}}],
        # A reply without a model (it takes the one before), a blank line, a record that is no message.
        [_user(3), _reply(3, model=None), b"  \n", {"note": "no id"}, [1, 2]],  # type: ignore[list-item]
        # Counts as Gemini CLI never writes them (read as stats reads them), a type that is not a string.
        [_reply(4, tokens={"input": 900.0, "output": True, "cached": "3", "thoughts": None, "total": 0}),
         {"id": "x4", "type": 7, "tokens": {"input": 5}}],
        # An update that names the model only: the reply keeps the tokens it was recorded with.
        [_reply(4, tokens=None, model="gemini-2.5-pro"), _reply(5, tokens={"input": 300_000, "output": 1})],
    ]  # fmt: skip
    for step in steps:
        _append(session, *(orjson.dumps(r) + b"\n" if isinstance(r, list) else r for r in step))
        got = ledger.spend(session, cache_dir=cache, now=AT)
        assert (rescans, got.files_read, got.files_resumed) == ([], 1, 1)
        _assert_same(got, root, session)
    unchanged = ledger.spend(session, cache_dir=cache, now=AT)
    assert (rescans, unchanged.files_read) == ([], 0)
    _assert_same(unchanged, root, session)


def test_a_long_session_freezes_its_older_rows_and_reads_again_when_one_is_updated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / ".gemini" / "tmp"
    session = _session(root)
    _aged(root)
    cache = tmp_path / "c"
    ledger.spend(session, cache_dir=cache, now=AT)
    rescans = _rescans(monkeypatch)
    for start in range(2, 300, 37):  # well past what a running tally keeps whole
        _append(session, *(r for i in range(start, start + 37) for r in (_user(i), _reply(i, model=None))))
        _assert_same(ledger.spend(session, cache_dir=cache, now=AT), root, session)
    assert rescans == []
    running = figures.Running.from_doc(orjson.loads(next((cache / "guard" / "files").iterdir()).read_bytes()))
    assert len(running.rows) <= 2 * figures.KEEP_ROWS < len(running.ids)
    _append(session, _reply(3, tokens=50_000))  # an update of a frozen reply: only a full read can say
    _assert_same(ledger.spend(session, cache_dir=cache, now=AT), root, session)
    assert rescans == ["rescan"]
    _append(session, _user(400), _reply(400))  # the full read kept a running tally: quick again
    _assert_same(ledger.spend(session, cache_dir=cache, now=AT), root, session)
    assert rescans == ["rescan"]


def _rewrite(session: Path) -> None:
    """Compacted: the same file written again with another history, longer than before (not an append)."""
    lines = session.read_bytes().splitlines(keepends=True)
    changed = orjson.dumps({**_user(0), "content": "changed"}) + b"\n"
    session.write_bytes(lines[0] + changed + b"".join(lines[2:]) + orjson.dumps(_reply(9)) + b"\n")


def _truncate(session: Path) -> None:
    session.write_bytes(b"".join(session.read_bytes().splitlines(keepends=True)[:3]))


FULL_READS: dict[str, Any] = {
    "rewind": lambda s: _append(s, {"$rewindTo": "u1"}, _user(5), _reply(5)),
    "checkpoint": lambda s: _append(s, {"$set": {"messages": [_user(6), _reply(6)]}}),
    "session id": lambda s: _append(s, {"$set": {"sessionId": "s9"}}),
    "metadata line": lambda s: _append(s, {"sessionId": "s1", "kind": "main", "messages": [_user(7)]}),
    "unpriced model": lambda s: _append(s, _reply(8, model="gemini-2.5-flash")),
    "half a line": lambda s: _append(s, orjson.dumps(_reply(8))[:-3]),
    "not utf-8": lambda s: _append(s, b'{"id": "u8", "type": "user", "content": "\xff"}\n', _reply(8)),
    "escaped surrogate": lambda s: _append(s, b'{"id": "u8", "type": "user", "content": "\\ud800"}\n'),
    "repeated key": lambda s: _append(
        s, b'{"id": "g8", "id": "g1", "type": "gemini", "tokens": {"input": 4}}\n'
    ),
    "rewritten": _rewrite,
    "truncated": _truncate,
    "a new session": lambda s: _session(s.parents[2], "session-2026-11-20T11-00-s2.jsonl", "s2"),
}


@pytest.mark.parametrize("change", list(FULL_READS))
def test_what_is_not_a_plain_append_is_read_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    root = tmp_path / ".gemini" / "tmp"
    session = _session(root)
    _aged(root)
    cache = tmp_path / "c"
    ledger.spend(session, cache_dir=cache, now=AT)
    rescans = _rescans(monkeypatch)
    FULL_READS[change](session)
    _assert_same(ledger.spend(session, cache_dir=cache, now=AT), root, session)
    assert rescans == ["rescan"]


def test_a_damaged_state_or_running_tally_is_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / ".gemini" / "tmp"
    session = _session(root)
    _aged(root)
    cache = tmp_path / "c"
    ledger.spend(session, cache_dir=cache, now=AT)
    rescans = _rescans(monkeypatch)
    [state] = (cache / "guard").glob("*.json")
    [running] = (cache / "guard" / "files").glob("*.json")
    damages = [
        lambda: state.write_text("{"),  # not JSON
        lambda: running.write_text(json.dumps({"path": str(session)})),  # another shape
        lambda: running.write_text(json.dumps({**json.loads(running.read_text()), "rows": 3})),
    ]
    for damage in damages:
        damage()
        _append(session, _user(len(rescans) + 2), _reply(len(rescans) + 2))
        _assert_same(ledger.spend(session, cache_dir=cache, now=AT), root, session)
    assert rescans == ["rescan"] * 3
    _append(session, _user(9), _reply(9))
    _assert_same(ledger.spend(session, cache_dir=cache, now=AT), root, session)
    assert rescans == ["rescan"] * 3


def test_cache_clear_forgets_what_the_guard_kept(tmp_path: Path) -> None:
    root = tmp_path / ".gemini" / "tmp"
    session = _session(root)
    cache = tmp_path / "c"
    ledger.spend(session, cache_dir=cache, now=AT)
    assert any((cache / "guard").rglob("*.json"))
    assert run(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert not (cache / "guard").exists()


def test_a_resumed_session_and_a_subagent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / ".gemini" / "tmp"
    chats = root / "p" / "chats"
    meta = {"sessionId": "s1", "projectHash": "h", "startTime": "2026-11-20T10:00:00.000Z"}
    legacy = {**meta, "messages": [_user(0), _reply(0), _user(1), _reply(1, model=None)]}
    chats.mkdir(parents=True)
    (chats / "session-2026-11-20T10-00-s1.json").write_bytes(orjson.dumps(legacy))
    # Resumed: Gemini CLI writes the whole history again into a .jsonl beside it and goes on there.
    resumed = write_jsonl(chats / "session-2026-11-20T10-00-s1.jsonl",
                          [{**meta, "kind": "main"}, _user(0), _reply(0), _user(1), _reply(1, model=None),
                           _user(2), _reply(2)])  # fmt: skip
    sub_meta = {
        "sessionId": "sub1",
        "projectHash": "h",
        "startTime": "2026-11-20T10:30:00Z",
        "kind": "subagent",
    }
    subagent = write_jsonl(chats / "s1" / "sub1.jsonl", [sub_meta, _user(10), _reply(10, tokens=7000)])
    _aged(root)
    cache = tmp_path / "c"
    _assert_same(ledger.spend(subagent, cache_dir=cache, now=AT), root, resumed)
    rescans = _rescans(monkeypatch)
    _append(subagent, _user(11), _reply(11, tokens=9000))  # a subagent's own file: quick
    _assert_same(ledger.spend(resumed, cache_dir=cache, now=AT), root, resumed)
    assert rescans == []
    _append(resumed, _user(3), _reply(3))  # a session of two files: the frames sum it again
    got = ledger.spend(resumed, cache_dir=cache, now=AT)
    _assert_same(got, root, resumed)
    assert (rescans, got.from_frames) == (["rescan"], 1)


def test_a_legacy_flat_subagent_counts_for_its_parent(tmp_path: Path) -> None:
    root = tmp_path / ".gemini" / "tmp"
    parent = _session(root, "session-2026-11-20T10-00-abcdef12.jsonl", "abcdef12-0000-4000-8000-000000000000")
    # Before nested subagent folders, a subagent's file sat in chats/ named with its parent's short id.
    flat = {"sessionId": "99999999-0000-4000-8000-000000000000", "projectHash": "h", "kind": "subagent",
            "startTime": "2026-11-20T10:05:00.000Z"}  # fmt: skip
    write_jsonl(root / "p" / "chats" / "session-2026-11-20T10-05-abcdef12.jsonl", [flat, _user(5), _reply(5)])
    got = ledger.spend(parent, cache_dir=tmp_path / "c", now=AT)
    assert got.session.requests == 3
    _assert_same(got, root, parent)
    _assert_equals_stats(root, tmp_path / "c")


def test_a_folder_changed_just_before_a_scan_is_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file created in the same tick of the file system's clock as the scan would leave the folder's
    modification time as it was: such a folder is not trusted until it is older than two seconds."""
    root = tmp_path / ".gemini" / "tmp"
    session = _session(root)
    cache = tmp_path / "c"
    ledger.spend(session, cache_dir=cache, now=AT)
    rescans = _rescans(monkeypatch)
    ledger.spend(session, cache_dir=cache, now=AT)
    assert rescans == ["rescan"]
    _aged(root)
    ledger.spend(session, cache_dir=cache, now=AT)
    _append(session, _user(2), _reply(2))
    _assert_same(ledger.spend(session, cache_dir=cache, now=AT), root, session)
    assert rescans == ["rescan", "rescan"]


def test_the_tally_prices_as_pricing_does() -> None:
    from ctxtool.measure.pricing import cost_of, price_table
    from ctxtool.measure.usage import cost

    table = price_table(["gemini-2.5-pro", "gemini-2.5-flash", "gemini-3.1-pro-preview", "no-such-model"])
    tiers = figures.rates_of(table)
    assert tiers["no-such-model"] is None
    rng = random.Random(29)
    for model, rates in table.rates.items():
        edges = [t.above for t in rates.tiers] + [t.above + 1 for t in rates.tiers]
        for _ in range(500):
            prompt = rng.choice([*edges, rng.randrange(0, 2_000_000)])
            cached = rng.choice([None, 0, rng.randrange(0, prompt + 2), -1])
            output = rng.randrange(-1, 9000)
            thoughts = rng.choice([None, rng.randrange(0, 5000)])
            tool = rng.choice([None, 0, rng.randrange(0, 900)])
            counts = (prompt, cached, output, thoughts, tool)
            assert cost(tiers[model], *counts) == cost_of(rates, *counts), (model, counts)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the quick answer is Linux's")
@pytest.mark.parametrize("xdg", [None, "", "relative/cache", "/somewhere/cache"])
def test_the_cache_folder_is_where_platformdirs_puts_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xdg: str | None
) -> None:
    from platformdirs import user_cache_dir

    from ctxtool.session.stamp import cache_path

    monkeypatch.delenv("CTXTOOL_CACHE_DIR", raising=False)
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    for home in (str(tmp_path), f"{tmp_path}/"):
        monkeypatch.setenv("HOME", home)
        assert cache_path() == user_cache_dir("ctxtool", appauthor=False)


def test_a_warm_call_imports_nothing_heavy(tmp_path: Path) -> None:
    """What a warm call imports beyond Python's start (starting Python is most of what it costs)."""
    root = tmp_path / ".gemini" / "tmp"
    session = _session(root)
    _aged(root)
    cache = tmp_path / "c"
    ledger.spend(session, cache_dir=cache)
    _append(session, _user(2), _reply(2))
    code = (
        "import sys; before = set(sys.modules); from ctxtool.__main__ import main; import io;"
        "from ctxtool.hooks import guard;"
        f"event = io.StringIO({json.dumps(json.dumps({'transcript_path': str(session)}))});"
        f"args = ['--max-session-cost', '5', '--cache-dir', {str(cache)!r}];"
        "guard.run(args, event, sys.stdout, sys.stderr);"
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    answer, loaded = done.stdout.splitlines()
    assert answer == "{}"
    heavy = {"dataclasses", "pathlib", "typing", "hashlib", "orjson", "msgspec", "sqlite3", "polars",
             "platformdirs", "ctxtool.hooks.rescan", "ctxtool.session.index",
             "ctxtool.measure.pricing"}  # fmt: skip
    assert heavy & set(loaded.split()) == set(), loaded


def test_a_full_tally_imports_no_polars(tmp_path: Path) -> None:
    """A first call (no state: every file read through the index, every session grouped, a session of two
    files summed by the stats engine) and the guard command itself, each in a process of its own, end without
    polars."""
    root = tmp_path / ".gemini" / "tmp"
    chats = root / "p" / "chats"
    meta = {"sessionId": "s1", "projectHash": "h", "startTime": "2026-11-20T10:00:00.000Z"}
    chats.mkdir(parents=True)
    legacy = {**meta, "messages": [_user(0), _reply(0), _user(1), _reply(1, model=None)]}
    (chats / "session-2026-11-20T10-00-s1.json").write_bytes(orjson.dumps(legacy))
    resumed = write_jsonl(chats / "session-2026-11-20T10-00-s1.jsonl",
                          [{**meta, "kind": "main"}, _user(0), _reply(0), _user(1), _reply(1, model=None),
                           _user(2), _reply(2)])  # fmt: skip
    sub_meta = {"sessionId": "sub1", "projectHash": "h", "startTime": "2026-11-20T10:30:00.000Z",
                "kind": "subagent"}  # fmt: skip
    write_jsonl(chats / "s1" / "sub1.jsonl", [sub_meta, _user(10), _reply(10, tokens=7000)])
    _session(root, "session-2026-11-20T11-00-s2.jsonl", "s2")
    code = (
        "import sys; from ctxtool.hooks import ledger;"
        f"s = ledger.spend({str(resumed)!r}, cache_dir={str(tmp_path / 'c')!r});"
        "print(s.files_read, s.from_frames, s.session.requests, 'polars' in sys.modules)"
    )
    env = {**os.environ, "GEMINI_CLI_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "1", "4", "False"]  # 3 of the session, 1 of its subagent
    # The command as Gemini CLI runs it (it ends with os._exit: the probe answers just before).
    probe = (
        "import sys, os, runpy\n"
        "sys.argv = ['ctxtool', *sys.argv[1:]]\n"
        "_exit = os._exit\n"
        "def _polars_then_exit(code):\n"
        "    print('POLARS', 'polars' in sys.modules, flush=True)\n"
        "    _exit(code)\n"
        "os._exit = _polars_then_exit\n"
        "runpy.run_module('ctxtool', run_name='__main__')\n"
    )
    args = ["guard", "--max-daily-cost", "50", "--cache-dir", str(tmp_path / "c2")]
    event = json.dumps({"transcript_path": str(resumed), "hook_event_name": "BeforeModel"})
    done = subprocess.run([sys.executable, "-c", probe, *args], input=event, capture_output=True, text=True,
                          cwd=REPO, env=env)  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == ["{}", "POLARS False"]


def _spend(total: int = 0, cost: float = 0.0, day_cost: float = 0.0, peak: int | None = None) -> Spend:
    session = Tally(requests=1, total=total, cost=cost, priced=1, peak_live=peak, limit=1_048_576)
    today = Tally(days={"2026-11-20": [day_cost, 1, 0]})
    return Spend(session=session, today=today, day="2026-11-20", session_file="x")


def test_verdicts_allow_warn_and_stop() -> None:
    opts = guard.parse_args(
        ["--max-session-cost", "2", "--max-daily-cost", "$20", "--fallback-model", "flash"]
    )
    assert guard.decide(_spend(cost=1.5, day_cost=15.9), opts) == {}
    warned = guard.decide(_spend(cost=1.7), opts, {"model": MODEL})
    assert warned["hookSpecificOutput"] == {"hookEventName": "BeforeModel", "llm_request": {"model": "flash"}}
    assert warned["systemMessage"] == (
        "ctxtool guard: session cost $1.70 of $2.00 (85%, --max-session-cost); this request uses flash "
        f"instead of {MODEL}"
    )
    stopped = guard.decide(_spend(cost=2.5), opts)
    assert stopped["continue"] is False
    assert stopped["stopReason"] == (
        "ctxtool guard: session cost is $2.50, at or past its budget of $2.00 (--max-session-cost). "
        "To go on, raise it: ctxtool hooks install --max-session-cost 4 --max-daily-cost 20 "
        "--fallback-model flash or start a new session."
    )
    daily = guard.decide(_spend(day_cost=21), opts)
    assert "today's cost (UTC, every session) is $21.00" in daily["stopReason"]
    assert daily["stopReason"].endswith("or wait for the next UTC day.")
    share = guard.parse_args(["--max-context-share", "50%", "--warn-at", "90%", "--scope", "project"])
    assert guard.decide(_spend(peak=400_000), share) == {}
    assert (
        "--scope project --max-context-share 75%" in guard.decide(_spend(peak=600_000), share)["stopReason"]
    )
    tokens = guard.parse_args(["--max-session-tokens", "2M"])
    assert guard.decide(_spend(total=1_700_000), tokens)["systemMessage"].endswith(
        "it stops the session at 100%"
    )


@pytest.mark.parametrize(
    ("flag", "metric", "text"),
    [("--max-session-tokens", "max-session-tokens", t) for t in ("2M", "500k", "2_000_000", "1,500")]
    + [("--max-session-cost", "max-session-cost", t) for t in ("5", "$2.50", "0")]
    + [("--max-context-share", "max-context-share", t) for t in ("50%", "0.5", "100%")],
)
def test_budgets_read_as_audit_reads_them(flag: str, metric: str, text: str) -> None:
    kind = {f: k for f, k, _ in guard.BUDGETS}[flag]
    assert guard.parse_limit(kind, flag, text) == audit_limit(metric, text)


def test_the_hot_path_takes_the_options_of_the_typer_command() -> None:
    import typer.main

    from ctxtool.cli import app, register

    register(["guard"])
    command = typer.main.get_command(app).commands["guard"]  # type: ignore[attr-defined]
    flags = {o for p in command.params for o in p.opts}
    assert flags - {"--help"} == {*guard.VALUE_OPTIONS, *guard.FLAG_OPTIONS}


def test_guard_and_hooks_install_share_their_budget_options() -> None:
    """Declared once (``ctxtool.cli.guard``): the same flags, metavars, defaults and help in both commands."""
    import typer.main

    from ctxtool.cli import app, register

    register(["guard", "hooks"])
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    install = commands["hooks"].commands["install"]

    def described(command: Any) -> dict[str, tuple[Any, ...]]:
        return {p.opts[0]: (p.metavar, p.default, p.help) for p in command.params}

    shared = [flag for flag, _, _ in guard.BUDGETS] + ["--warn-at", "--fallback-model", "--fail-closed"]
    mine, theirs = described(commands["guard"]), described(install)
    assert {flag: mine[flag] for flag in shared} == {flag: theirs[flag] for flag in shared}


def test_errors_fail_open_and_never_exit_2(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert guard.run(["--max-session-cost", "1"], io.StringIO("not json"), out, err) == 0
    assert out.getvalue() == ""
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().endswith("; the call was allowed (fail open)\n")
    out = io.StringIO()
    assert guard.run(["--max-session-cost", "x", "--fail-closed"], io.StringIO("{}"), out, io.StringIO()) == 0
    assert json.loads(out.getvalue())["continue"] is False
    # The whole program, as Gemini CLI runs it: a bad option still exits 0.
    done = subprocess.run([sys.executable, "-m", "ctxtool", "guard", "--bogus"], input="{}", text=True,
                          capture_output=True, cwd=REPO, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "")
    assert "unknown argument '--bogus'" in done.stderr


def test_the_guard_answers_a_hook_event(tmp_path: Path) -> None:
    _, session = _home(tmp_path)
    event = json.dumps(
        {"session_id": "s1", "transcript_path": str(session), "hook_event_name": "BeforeModel"}
    )
    done = subprocess.run(
        [sys.executable, "-m", "ctxtool", "guard", "--max-session-tokens", "2000",
         "--cache-dir", str(tmp_path / "c")],
        input=event, text=True, capture_output=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0
    assert json.loads(done.stdout)["stopReason"].startswith("ctxtool guard: session tokens is 2,020")


SETTINGS = """// my settings
{
    // the theme
    "theme": "dark", /* inline */
    "hooks": {
        "BeforeModel": [{"matcher": "*", "hooks": [{"name": "mine", "type": "command", "command": "a"}]}],
        "AfterModel": []
    }
}
"""


@pytest.mark.parametrize("original", [SETTINGS, '{"security":{"auth":{"selectedType":"x"}}}', "{}\n", None])
def test_install_and_uninstall_keep_everything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, original: str | None
) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    path = tmp_path / ".gemini" / "settings.json"
    if original is not None:
        path.parent.mkdir(parents=True)
        path.write_text(original)
    args = ["hooks", "install", "--max-session-cost", "5", "--archive", str(tmp_path / "h")]
    assert run(args) == 0
    installed = path.read_text()
    data = json.loads(
        "\n".join(x.split("/*")[0] for x in installed.splitlines() if not x.lstrip().startswith("//"))
    )
    names = [h["name"] for groups in data["hooks"].values() for g in groups for h in g["hooks"]]
    assert sorted(names) == sorted(["ctxtool-guard", "ctxtool-archive", "ctxtool-archive", *(
        ["mine"] if original == SETTINGS else [])])  # fmt: skip
    guard_command = next(h for h in settings.status(path) if h["event"] == "BeforeModel")["command"]
    assert guard_command.split()[1:] == ["guard", "--max-session-cost", "5"]
    if original == SETTINGS:
        assert installed.startswith(
            '// my settings\n{\n    // the theme\n    "theme": "dark", /* inline */\n'
        )
    assert run(args) == 0  # idempotent
    assert path.read_text() == installed
    assert run(["hooks", "status"]) == 0
    assert run(["hooks", "uninstall"]) == 0
    if original is None:  # install created it: uninstall takes it away again
        assert not path.exists()
    else:
        assert path.read_text() == original
    assert (path.parent / "settings.json.ctxtool-backup").read_text() == installed


def test_a_settings_file_gemini_cli_cannot_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    path = tmp_path / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"theme": "dark",}')
    assert run(["hooks", "install", "--max-session-cost", "5"]) == 1
    assert path.read_text() == '{"theme": "dark",}'


def test_archive_adds_the_session_to_the_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, session = _home(tmp_path)
    event = json.dumps({"session_id": "s1", "transcript_path": str(session), "reason": "exit"})
    monkeypatch.setattr(sys, "stdin", io.StringIO(event))
    assert run(["archive", "--to", str(tmp_path / "history")]) == 0
    from ctxtool.export import load_dataset

    corpus = load_dataset(tmp_path / "history")
    assert corpus.sessions.get_column("session_id").to_list() == ["s1"]
    assert corpus.requests.height == 2
