"""``stats`` without polars (``ctxtool.frames.tally``) makes the reports the frames make.

Each home is read once; its report is made both ways: by the tally, and by the frames built of the same
files (``stats_report`` over ``build_corpus``). Every column of every row, the totals row, the read summary
and the warnings must agree: integers and text exactly, costs to the last bits that the order of a sum can
change (the tally sums them exactly, with ``math.fsum``; polars' sums depend on its grouping). Homes: the
bundled fixtures, the sessions the real Gemini CLI 0.61.0 wrote in tests/recorded, the 43 real sessions
(skipped when absent), and homes generated here in Gemini CLI's JSONL format with everything the reports
count (subagents, resumed legacy files, unknown and missing models, impossible counts, recorded totals that
disagree, compressions and ctxtool's compacted copies, rewinds, broken lines, invalid UTF-8).
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxtool.frames import tally as T
from ctxtool.measure.pricing import price_table
from ctxtool.session.discover import discover
from ctxtool.session.scan import read_files
from ctxtool.stats import StatsQuery, tally_report
from tests.conftest import FIXTURES, REAL_SESSIONS
from tests.oracle.build import build_corpus
from tests.oracle.sessions import HIDDEN_CALLS_PER_COMPRESSION
from tests.oracle.stats import OracleReport as StatsReport
from tests.oracle.stats import stats_report

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "recorded" / "gemini-cli-0.61.0"


def _same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _both(root: Path, by: str, *, subagents: bool = True) -> tuple[T.Tally, Any, StatsReport]:
    found = discover([str(root)], subagents=subagents)
    results = read_files(found.files, workers=1)
    made = T.tally(results, found, price_table, subagents=subagents)
    corpus = build_corpus(copy.deepcopy(results), found, subagents=subagents)
    query = StatsQuery(by=by, subagents=subagents)
    told: list[str] = []
    frames_report = stats_report(corpus, query, warn=told.append)
    heard: list[str] = []
    plain = tally_report(made, query, warn=heard.append)
    assert plain is not None
    assert heard == told
    return made, plain, frames_report


def assert_precount_changes_nothing(root: Path, *, subagents: bool = True) -> None:
    """Measuring each file where it is read (``count_file``), or taking the measure the index kept, makes the
    same tally as measuring them all at the end."""
    found = discover([str(root)], subagents=subagents)
    results = read_files(found.files, workers=1)
    whole = T.tally(results, found, price_table, subagents=subagents)
    measured = {fc.path: T.count_file(fc) for fc in results}
    assert any(measured.values()) or not results
    kept = {p: T._decode_measured(T._encode_measured(m)) for p, m in measured.items() if m is not None}
    for taken in (measured, kept):
        made = T.tally(results, found, price_table, subagents=subagents, measured=dict(taken))
        assert T.session_rows(made) == T.session_rows(whole)
        for by in T.BY[1:]:
            assert T.request_rows(made, by) == T.request_rows(whole, by)
        assert T.warnings_of(made) == T.warnings_of(whole)
        assert T.summary_of(made) == T.summary_of(whole)


def assert_reports_agree(root: Path, *, subagents: bool = True) -> None:
    from ctxtool.frames.loading import CacheUse

    assert_precount_changes_nothing(root, subagents=subagents)

    for by in T.BY:
        _, plain, frames_report = _both(root, by, subagents=subagents)
        assert plain.rows.columns == frames_report.rows.columns, by
        want = frames_report.rows.to_dicts()
        got = plain.rows.to_dicts()
        assert len(got) == len(want), by
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            for col in w:
                _same(g[col], w[col], f"--by {by} row {i} {col}")
        sums, frames_sums = plain.totals(), frames_report.totals()
        assert list(sums) == list(frames_sums), by
        for col in frames_sums:
            _same(sums[col], frames_sums[col], f"--by {by} totals {col}")
        use = CacheUse()
        assert plain.read_summary(use) == frames_report.read_summary(use)
        hidden, frames_hidden = plain.hidden_calls(), frames_report.hidden_calls()
        assert hidden[0] == frames_hidden[0]
        _same(hidden[1], frames_hidden[1], "hidden cost")
        assert plain.problems == frames_report.problems
        assert plain.broken_lines == frames_report.broken_lines


def test_the_hidden_calls_per_compression_are_the_frames_own() -> None:
    assert T.HIDDEN_CALLS_PER_COMPRESSION == HIDDEN_CALLS_PER_COMPRESSION


@pytest.mark.parametrize("subagents", [True, False])
def test_the_bundled_fixtures_agree(subagents: bool) -> None:
    assert_reports_agree(FIXTURES / "gemini" / "tmp", subagents=subagents)


@pytest.mark.parametrize("scenario", ["compressions", "tools-and-resumes"])
def test_what_gemini_cli_wrote_agrees(scenario: str) -> None:
    assert_reports_agree(RECORDED / scenario / "tmp")


def test_the_real_sessions_agree(tmp_path: Path) -> None:
    if not REAL_SESSIONS.is_dir():
        pytest.skip("../shared/real-sessions is absent")
    assert_reports_agree(REAL_SESSIONS)


# --- generated homes -------------------------------------------------------------------------------------

MODELS = ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-3-pro-preview", "auto-gemini-3", None]


def _time(minute: int) -> str:
    month, day, hour = 1 + minute // 1440 % 9, 10 + minute // 60 % 18, minute // 60 % 24
    return f"2026-0{month}-{day:02d}T{hour:02d}:{minute % 60:02d}:00.000Z"


@st.composite
def _session(draw: st.DrawFn, sid: str, start: int, *, derived: bool = False) -> list[Any]:
    meta: dict[str, Any] = {"sessionId": sid, "projectHash": "a" * 64, "startTime": _time(start)}
    meta["lastUpdated"] = _time(start + 50)
    if derived:
        meta["derivedFrom"] = "0" * 8 + sid[8:]
    records: list[Any] = [meta]
    minute = start
    for n in range(draw(st.integers(0, 8))):
        minute += draw(st.integers(0, 3000))
        mid = f"{sid[:8]}-{n}"
        kind = draw(st.sampled_from(["prompt", "request", "request", "snapshot", "info", "rewind", "set"]))
        if kind == "prompt":
            records.append(
                {"id": mid, "timestamp": _time(minute), "type": "user", "content": [{"text": "go"}]}
            )
        elif kind == "snapshot":
            text = "<state_snapshot>" + "x" * draw(st.integers(0, 400)) + "</state_snapshot>"
            records.append(
                {"id": mid, "timestamp": _time(minute), "type": "user", "content": [{"text": text}]}
            )
        elif kind == "info":
            records.append(
                {
                    "id": mid,
                    "timestamp": _time(minute),
                    "type": "info",
                    "content": "Context compressed from 80% to 20%.",
                }
            )
        elif kind == "rewind" and n:
            records.append({"$rewindTo": f"{sid[:8]}-{draw(st.integers(0, n - 1))}"})
        elif kind == "set":
            records.append(
                {"$set": {"messages": [r for r in records[1:] if isinstance(r, dict) and "id" in r][-2:]}}
            )
        else:
            inp = draw(st.integers(-5, 300_000))
            cached = draw(st.integers(0, 320_000))
            out, thoughts, tool = (
                draw(st.integers(-1, 5000)),
                draw(st.integers(0, 900)),
                draw(st.integers(0, 50)),
            )
            total = draw(st.sampled_from([inp + out + thoughts + tool, 0, inp + 1]))
            message: dict[str, Any] = {
                "id": mid,
                "timestamp": _time(minute),
                "type": "gemini",
                "content": "ok",
                "tokens": {
                    "input": inp,
                    "output": out,
                    "cached": cached,
                    "thoughts": thoughts,
                    "tool": tool,
                    "total": total,
                },
            }
            model = draw(st.sampled_from(MODELS))
            if model is not None:
                message["model"] = model
            if draw(st.booleans()):
                message["toolCalls"] = [
                    {
                        "id": f"c{n}",
                        "name": "run_shell_command",
                        "status": draw(st.sampled_from(["success", "error"])),
                        "args": {"command": "ls"},
                        "result": [],
                    }
                ]
            records.append(message)
    return records


def _lines(records: list[Any], broken: bool) -> bytes:
    lines = [orjson.dumps(r) for r in records]
    if broken and len(lines) > 1:
        lines.insert(1, b'{"id": "half')
    return b"".join(line + b"\n" for line in lines)


@st.composite
def homes(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    for p in range(draw(st.integers(1, 3))):
        for s in range(draw(st.integers(1, 3))):
            sid = f"{p}{s}aaaaaa-1111-4222-8333-44445555666{s}"
            start = draw(st.integers(0, 20_000))
            records = draw(_session(sid, start, derived=draw(st.booleans()) and s > 0))
            name = f"proj{p}/chats/session-2026-01-01T00-0{s}-{sid[:8]}.jsonl"
            data = _lines(records, draw(st.booleans()))
            if draw(st.booleans()):  # bytes Gemini CLI reads as U+FFFD
                data = data.replace(b'"ok"', b'"o\xffk"', 1)
            files.append((name, data))
            if draw(st.booleans()):  # a subagent of this session
                sub = draw(_session("9" * 8 + sid[8:], start + 5))
                files.append((f"proj{p}/chats/{sid}/sub{s}.jsonl", _lines(sub, False)))
    return files


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(home=homes())
def test_generated_homes_agree(
    tmp_path_factory: pytest.TempPathFactory, home: list[tuple[str, bytes]]
) -> None:
    root = tmp_path_factory.mktemp("home") / "tmp"
    for name, data in home:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for subagents in (True, False):
        assert_reports_agree(root, subagents=subagents)


# --- the command -----------------------------------------------------------------------------------------


def _stats(*args: str, cache: Path, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes, bool]:
    """(exit status, stdout, stderr, whether polars was imported) of ``ctxtool stats`` in a new process."""
    probe = (
        "import sys, runpy, os\n"
        "sys.argv = ['ctxtool', *sys.argv[1:]]\n"
        "os._exit_orig = os._exit\n"
        "def _exit(code):\n"
        "    sys.stderr.write('POLARS=%s\\n' % ('polars' in sys.modules))\n"
        "    sys.stderr.flush()\n"
        "    os._exit_orig(code)\n"
        "os._exit = _exit\n"
        "runpy.run_module('ctxtool', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "stats", *args],
        capture_output=True,
        env={**os.environ, "CTXTOOL_CACHE_DIR": str(cache), **(env or {})},
        cwd=REPO,
        timeout=120,
    )
    err, _, flag = done.stderr.rpartition(b"POLARS=")
    return done.returncode, done.stdout, err, flag.strip() == b"True"


@pytest.mark.parametrize(
    "args",
    [
        ["--by", "session"],
        ["--by", "turn"],
        ["--by", "request", "-f", "csv"],
        ["--by", "day", "--live", "--since", "2026-03-01"],
        ["--model", "gemini-3", "--sort", "total", "--desc", "--timezone", "Asia/Kolkata"],
        ["--by", "week", "-f", "parquet"],
    ],
)
def test_a_stats_run_imports_no_polars_whatever_it_reports(tmp_path: Path, args: list[str]) -> None:
    """Every report but ``--top`` is the engine's: no polars, but to write a CSV or Parquet of its rows."""
    code, out, err, polars = _stats("fixtures/", *args, "--no-cache", cache=tmp_path)
    assert code == 0, err
    assert out
    assert polars == any(fmt in args for fmt in ("csv", "parquet"))


def _one_request(chats: Path, letter: str, *, start: str, input: int) -> None:
    """A session of one request in ``chats``, written with the standard library's json (orjson writes no
    integer beyond 64 bits)."""
    meta = {"sessionId": letter * 8 + "-1111-4222-8333-444455556666", "startTime": start}
    request = {
        "id": "g1",
        "timestamp": "2026-05-01T10:00:02.000Z",
        "type": "gemini",
        "content": "ok",
        "model": "gemini-2.5-pro",
        "tokens": {"input": input, "output": 2, "cached": 0, "thoughts": 0, "tool": 0, "total": 12},
    }
    chats.mkdir(parents=True)
    text = json.dumps(meta) + "\n" + json.dumps(request) + "\n"
    (chats / f"session-2026-05-01T10-00-{letter * 8}.jsonl").write_text(text)


def test_times_in_other_shapes_are_read_as_the_frames_read_them(tmp_path: Path) -> None:
    """An offset, no zone, a space, another fraction: the tally reads each as the frames do (``parse_times``),
    its report made in plain Python, equal to theirs, in every grain."""
    from tests.test_views import assert_views_agree

    chats = tmp_path / "tmp" / "p" / "chats"
    _one_request(chats, "b", start="2026-05-01T10:00:00+02:00", input=10)
    other = chats / "session-2026-05-01T10-00-bbbbbbbb.jsonl"
    text = other.read_text().replace("2026-05-01T10:00:02.000Z", "2026-05-01 23:30:02.5")
    other.write_text(
        text
        + text.splitlines()[1].replace('"g1"', '"g2"').replace("23:30:02.5", "2026-05-02T01:00:00-03:00")
        + "\n"
    )
    found = discover([str(chats)])
    made = T.tally(read_files(found.files, workers=1), found, price_table)
    assert [s.row["start"] for s in made.sessions] == [datetime(2026, 5, 1, 8, 0, tzinfo=UTC)]
    assert_views_agree(tmp_path / "tmp")
    assert_reports_agree(tmp_path / "tmp")
    code, _, _, polars = _stats(str(chats), "--by", "session", "-f", "json", "--no-cache", cache=tmp_path)
    assert (code, polars) == (0, False)


def _grow(home: Path) -> Path:
    """Append a prompt to the first ``.jsonl`` under ``home``, as Gemini CLI appends one: that file."""
    session = next(home.rglob("*.jsonl"))
    with session.open("ab") as f:
        f.write(
            orjson.dumps(
                {"id": "late", "timestamp": "2026-05-01T10:00:09.000Z", "type": "user", "content": "x"}
            )
            + b"\n"
        )
    return session


def test_the_first_run_keeps_what_the_second_prints(tmp_path: Path) -> None:
    """The second run over unchanged files is replayed (no polars, no reading), and prints exactly what a
    run served from the index computes; a file changed after the first run is read again."""
    home = tmp_path / "home"
    import shutil

    shutil.copytree(FIXTURES / "gemini" / "tmp" / "ops-box", home / "ops-box")
    cache = tmp_path / "cache"
    for fmt in ("json", "table"):
        first = _stats(str(home), "--by", "session", "-f", fmt, cache=cache)
        assert first[0] == 0
        assert not first[3]
        assert any((cache / "replay").iterdir())
        second = _stats(str(home), "--by", "session", "-f", fmt, cache=cache)
        computed = subprocess.run(
            [sys.executable, "-m", "ctxtool", "stats", str(home), "--by", "session", "-f", fmt],
            capture_output=True,
            env={**os.environ, "CTXTOOL_CACHE_DIR": str(cache), "CTXTOOL_NO_REPLAY": "1"},
            cwd=REPO,
            timeout=120,
        )
        assert second[:3] == (0, computed.stdout, computed.stderr)
        words = b" ".join(second[1].split())
        assert b"served from ctxtool's index" in words or b'"corpus_from_cache": true' in words
    _grow(home)
    code, out, _, _ = _stats(str(home), "--by", "session", "-f", "json", cache=cache)
    assert code == 0
    assert (
        orjson.loads(out)["read"]["index"]["files_resumed"]
        + orjson.loads(out)["read"]["index"]["files_parsed"]
        == 1
    )


def test_a_run_over_unchanged_files_measures_none_of_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The index keeps what was measured of each file: a later run measures only the file that changed, and
    prints what measuring them all prints."""
    from ctxtool.cli import run

    home = tmp_path / "home"
    import shutil

    shutil.copytree(FIXTURES / "gemini" / "tmp" / "ops-box", home / "ops-box")
    monkeypatch.setenv("CTXTOOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CTXTOOL_NO_REPLAY", "1")
    args = ["stats", str(home), "--by", "session", "-f", "json"]

    def output(capsys: Any) -> Any:
        doc = orjson.loads(capsys.readouterr().out)
        doc["read"].pop("index")
        return doc

    measured: list[str] = []
    real = T._measure

    def counting(files: list[Any], c: Any) -> Any:
        measured.extend(f.path for f in files)
        return real(files, c)

    monkeypatch.setattr(T, "_measure", counting)
    priced: list[int] = []
    real_price = T._price

    def pricing(m: Any, table: Any, rates: Any) -> Any:
        priced.append(len(m.requests.models))
        return real_price(m, table, rates)

    monkeypatch.setattr(T, "_price", pricing)
    runs = []
    outputs = []
    for _ in range(2):
        measured.clear()
        priced.clear()
        assert run(args) == 0
        outputs.append(output(capsys))
        runs.append((list(measured), len(priced)))
    assert runs[0][0]
    assert runs[0][1]
    assert runs[1] == ([], 0)  # nothing measured nor priced again
    assert outputs[1] == outputs[0]
    session = _grow(home)
    measured.clear()
    assert run(args) == 0
    assert measured == [str(session)]


def test_a_count_beyond_64_bits_is_left_empty_as_the_frames_leave_it(tmp_path: Path) -> None:
    """The frames leave such a value empty and say so; the tally does the same, in plain Python, and the
    command prints the same warning, on a first run and on one the index serves."""
    from tests.test_views import assert_views_agree

    chats = tmp_path / "tmp" / "p" / "chats"
    _one_request(chats, "c", start="2026-05-01T10:00:00.000Z", input=2**64)
    found = discover([str(chats)])
    results = read_files(found.files, workers=1)
    measured = T.count_file(results[0])
    assert measured is not None
    assert measured.lost == {"input": 1}
    assert_reports_agree(tmp_path / "tmp")
    assert_views_agree(tmp_path / "tmp")
    for _ in range(2):
        code, _, err, polars = _stats(str(chats), "--by", "session", "-f", "json", cache=tmp_path)
        assert (code, polars) == (0, False)
        assert b"1 value of column 'input' does not fit its type (Int64)" in err


def test_a_measure_crosses_between_processes_unchanged() -> None:
    """A worker sends each file's measure back pickled (as MessagePack, ``Measured.__reduce__``), its requests
    encoded as the index keeps them: what the parent gets equals what was measured once they are decoded
    (``requests_of``), and the index keeps those very bytes; a count beyond what MessagePack holds crosses
    too."""
    import pickle

    found = discover([str(FIXTURES)])
    results = read_files(found.files, workers=1)
    measures = [m for m in (T.count_and_price(fc) for fc in results) if m is not None]
    assert measures
    assert any(m.requests is not None and m.requests.costs for m in measures)
    got = pickle.loads(pickle.dumps(measures))
    assert all(m.requests is None and m.kept is not None for m in got)
    assert [T._encode_measured(m) for m in got] == [T._encode_measured(m) for m in measures]
    again = pickle.loads(pickle.dumps(got))  # undecoded, they cross again as they are
    assert [T._encode_measured(m) for m in again] == [T._encode_measured(m) for m in measures]
    for m in [*got, *again]:
        T.requests_of(m)
    assert got == measures
    assert again == measures
    huge = copy.deepcopy(measures[0])
    huge.row["input"] = 2**70  # a hand-edited file's sum: pickled as it is
    assert pickle.loads(pickle.dumps(huge)) == huge


def test_a_damaged_kept_measure_of_a_model_not_asked_for_is_measured_and_priced_again() -> None:
    """A kept measure whose requests do not decode, and whose models (damaged too) leave out the one its file
    uses: the file is measured again, the rates of that model are added to the table, and the report is a
    clean one's."""
    found = discover([str(FIXTURES / "gemini" / "tmp")])
    results = read_files(found.files, workers=1)
    clean = T.tally(results, found, price_table)
    measured = {fc.path: T.count_file(fc) for fc in results}
    seen = {p: set(m.seen) for p, m in measured.items() if m is not None}

    def alone(p: str) -> bool:  # no other file names its models
        return not seen[p] & set().union(*(v for q, v in seen.items() if q != p))

    path, m = next((p, m) for p, m in measured.items() if m is not None and m.used and alone(p))
    damaged = T._decode_measured(T._encode_measured(m))
    damaged.seen, damaged.kept = [], msgspec.Raw(b"\xc1")  # (0xc1: never valid MessagePack)
    measured[path] = damaged
    asked: list[list[str]] = []

    def prices(models: Any) -> Any:
        asked.append(sorted(models))
        return price_table(models)

    made = T.tally(results, found, prices, measured=measured)
    assert len(asked) == 2  # the table, then the rates of the model it lacked
    assert asked[1] == m.used
    assert T.session_rows(made) == T.session_rows(clean)
    assert T.request_rows(made, "model") == T.request_rows(clean, "model")
