"""Sessions priced in the process that read them (``tally.count_and_price``) cost what the parent prices.

A worker prices the requests of each file it measured at the rates the shipped snapshot or the day's memo
give (never loading genai-prices' data), under a key naming the rates of that session's models only
(``tally._rates_key``); the parent prices again only the sessions whose key its own table does not give.
Every report, warning and summary must be the same, costs float for float, as when the parent prices all.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxtool.frames import tally as T
from ctxtool.frames.grouping import group_sessions
from ctxtool.measure import pricing
from ctxtool.measure.pricing import ModelRates, PriceTable, TierRates, price_table
from ctxtool.session.columns import FileColumns
from ctxtool.session.discover import Discovery, discover
from ctxtool.session.scan import read_files
from tests.conftest import FIXTURES, REAL_SESSIONS, write_jsonl

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "recorded" / "gemini-cli-0.61.0"
SNAPSHOT_MODELS = ["gemini-2.5-pro", "gemini-2.5-flash", "auto-gemini-3"]
MADE_UP = "made-up-model-9"  # neither the library nor our snapshots know it


@pytest.fixture(autouse=True)
def _own_tables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No table another test's reading left in this process, and a day's memo of this test's own."""
    monkeypatch.setattr(T, "_TABLES", {})
    monkeypatch.setenv("CTXTOOL_CACHE_DIR", str(tmp_path / "cache"))


def _snapshot(path: Path, models: list[str], alter: Callable[[float], float] = float) -> Path:
    """A snapshot of the rates of ``models`` that fits the installed genai-prices, for every day; each rate
    passed through ``alter``."""
    table = price_table(models, memo=False)
    rates = {
        name: ModelRates(name, r.model_id, tuple(_scaled(t, alter) for t in r.tiers))
        for name, r in table.rates.items()
    }
    library = pricing.installed_genai_prices(version("genai-prices"))
    assert library is not None, "genai-prices is not installed with its dist-info folder"
    window = {
        "from": None,
        "until": None,
        "unknown": list(table.unknown),
        "rates": pricing.rates_to_doc(rates),
    }
    doc = {"format": pricing.SNAPSHOT_FORMAT, "genai_prices": library, "source": "a test's snapshot"}
    path.write_text(json.dumps({**doc, "windows": [window]}))
    return path


def _scaled(t: TierRates, alter: Callable[[float], float]) -> TierRates:
    return TierRates(t.above, alter(t.per_request), alter(t.input), alter(t.cached), alter(t.output))


def _request(n: int, model: str | None, input: int, cached: int = 0, output: int = 20) -> dict[str, Any]:
    tokens = {"input": input, "output": output, "cached": cached, "thoughts": 3, "tool": 2}
    message: dict[str, Any] = {
        "id": f"g{n}",
        "timestamp": f"2026-05-01T10:00:{n:02d}.000Z",
        "type": "gemini",
        "content": "ok",
        "tokens": {**tokens, "total": input + output + 5},
    }
    if model is not None:
        message["model"] = model
    return message


# Each session: its requests as (model, input, cached). Impossible counts: more cached than the prompt holds.
SESSIONS: dict[str, list[tuple[str | None, int, int]]] = {
    "aaaaaaaa": [
        ("gemini-2.5-pro", 1000, 200),
        ("gemini-2.5-pro", 250_000, 1000),
        ("gemini-2.5-pro", 10, 50),
    ],
    "bbbbbbbb": [("gemini-2.5-flash", 5000, 0), ("gemini-2.5-pro", 7000, 6000), ("gemini-2.5-flash", 9, 90)],
    "cccccccc": [("auto-gemini-3", 3000, 0), ("gemini-2.5-flash", 4000, 100)],
    "dddddddd": [(None, 800, 0), (None, 900, 10)],  # requests without a model name
    "eeeeeeee": [(MADE_UP, 1200, 0), ("gemini-2.5-pro", 1300, 0)],
    "ffffffff": [("gemini-2.5-pro", 60, 0)],
}


def _home(root: Path, sessions: dict[str, list[tuple[str | None, int, int]]] = SESSIONS) -> Path:
    for i, (sid, requests) in enumerate(sessions.items()):
        meta = {
            "sessionId": f"{sid}-1111-4222-8333-444455556666",
            "projectHash": "a" * 64,
            "startTime": "2026-05-01T10:00:00.000Z",
            "lastUpdated": "2026-05-01T10:01:00.000Z",
        }
        prompt = {"id": "u0", "timestamp": "2026-05-01T10:00:00.000Z", "type": "user", "content": "go"}
        records = [meta, prompt, *(_request(n + 1, *r) for n, r in enumerate(requests))]
        write_jsonl(root / "tmp" / "proj" / "chats" / f"session-2026-05-01T10-0{i}-{sid}.jsonl", records)
    return root / "tmp"


def _read(root: Path) -> tuple[list[FileColumns], Discovery]:
    found = discover([str(root)])
    return read_files(found.files, workers=1), found


def _copy(measured: dict[str, T.Measured | None]) -> dict[str, T.Measured | None]:
    """The measures as the parent gets them from a worker (pickled: ``Measured.__reduce__``)."""
    copied: dict[str, T.Measured | None] = pickle.loads(pickle.dumps(measured))
    return copied


def _kept(measured: dict[str, T.Measured | None]) -> dict[str, T.Measured | None]:
    """The measures as the index keeps them (``keep_measures``, ``kept_measures``)."""
    return {p: T._decode_measured(T._encode_measured(m)) for p, m in measured.items() if m is not None}


def _reports(
    results: list[FileColumns],
    found: Discovery,
    measured: dict[str, T.Measured | None],
    *,
    requests: bool,
    prices: Callable[[Iterable[str]], PriceTable] = price_table,
) -> tuple[Any, ...]:
    """Everything ``stats`` prints of a tally: rows (each ``--by`` with requests), warnings, summary."""
    made = T.tally(results, found, prices, measured=measured, requests=requests)
    by_requests = [T.request_rows(made, by) for by in T.BY[1:]] if requests else []
    return T.session_rows(made), by_requests, T.warnings_of(made), T.summary_of(made), T.hidden_calls(made)


@contextmanager
def _pricing() -> Iterator[list[str]]:
    """The first model of each measure priced (``_price``) inside the block, in order."""
    priced: list[str] = []
    real = T._price

    def counting(m: T.Measured, table: PriceTable, rates: str) -> None:
        assert m.requests is not None
        priced.append(str(m.requests.models[0] if m.requests.models else None))
        real(m, table, rates)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(T, "_price", counting)
        yield priced


def assert_priced_where_read_changes_nothing(root: Path) -> int:
    """The reports of ``root`` with each file priced where it was read equal those the parent prices all
    of, float for float, also through the index; the parent prices again only the sessions the reader did
    not price (a session of several files it measures itself). How many sessions the parent priced."""
    results, found = _read(root)
    by_parent = {fc.path: T.count_file(fc) for fc in results}
    where_read = {fc.path: T.count_and_price(fc) for fc in results}
    assert all(m is None or m.priced_at is None for m in by_parent.values())
    groups = group_sessions([fc for fc in results if not fc.error])
    unpriced = sum(
        len(g.files) > 1 or (m := where_read.get(g.files[0].path)) is None or m.priced_at is None
        for g in groups
    )
    for requests in (False, True):
        want = _reports(results, found, _copy(by_parent), requests=requests)
        for taken in (_copy(where_read), _kept(where_read)):
            with _pricing() as priced:
                assert _reports(results, found, taken, requests=requests) == want
            assert len(priced) == unpriced
    return unpriced


def test_a_built_home_costs_the_same_priced_where_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unknown models, requests without a model, impossible counts, a second price tier and a model no
    snapshot knows (its session is priced by the parent, at the library's rates)."""
    monkeypatch.setattr(pricing, "SNAPSHOT_PATH", _snapshot(tmp_path / "rates.json", SNAPSHOT_MODELS))
    root = _home(tmp_path / "home")
    assert assert_priced_where_read_changes_nothing(root) == 1  # the session of MADE_UP
    results, found = _read(root)
    warned = _reports(results, found, {}, requests=False)[2]
    assert any("auto-gemini-3" in w for w in warned)  # the warnings were there to compare
    assert any(MADE_UP in w for w in warned)
    assert any("no model name" in w for w in warned)
    assert any("impossible" in w and "gemini-2.5-pro" in w for w in warned)
    assert any("impossible" in w and "gemini-2.5-flash" in w for w in warned)


@pytest.mark.parametrize(
    "root",
    [
        pytest.param(FIXTURES / "gemini" / "tmp", id="fixtures"),
        pytest.param(RECORDED / "compressions" / "tmp", id="recorded"),
        pytest.param(
            REAL_SESSIONS,
            id="real-sessions",
            marks=pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="../shared/real-sessions is absent"),
        ),
    ],
)
def test_sessions_cost_the_same_priced_where_read(root: Path) -> None:
    """With the shipped snapshot (or, when ``make rates`` is due, whatever answers)."""
    assert_priced_where_read_changes_nothing(root)


def test_the_parent_prices_again_what_was_priced_at_other_rates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader whose snapshot gives a model other rates than the parent's table: the parent prices those
    sessions again, at its rates, and only those."""
    doubled = _snapshot(tmp_path / "rates.json", SNAPSHOT_MODELS, alter=lambda r: r * 2)
    monkeypatch.setattr(pricing, "SNAPSHOT_PATH", doubled)
    root = _home(tmp_path / "home")
    results, found = _read(root)
    where_read = {fc.path: T.count_and_price(fc) for fc in results}
    by_parent = {fc.path: T.count_file(fc) for fc in results}

    def library(models: Iterable[str]) -> PriceTable:
        return price_table(models, memo=False)

    for requests in (False, True):
        want = _reports(results, found, _copy(by_parent), requests=requests, prices=library)
        with _pricing() as priced:
            assert _reports(results, found, _copy(where_read), requests=requests, prices=library) == want
        # all but the session without a model name, whose key (of no model) the two tables share
        assert sorted(priced) == sorted(str(r[0][0]) for sid, r in SESSIONS.items() if sid != "dddddddd")


def test_the_key_names_only_the_rates_of_the_sessions_models() -> None:
    tier = TierRates(-1, 0.0, 1e-6, 2.5e-7, 1e-5)
    pro = ModelRates("pro", "pro-id", (tier,))
    at = datetime(2026, 5, 1, tzinfo=UTC)

    def table(rates: list[ModelRates], unknown: tuple[str, ...] = ()) -> PriceTable:
        return PriceTable({r.model: r for r in rates}, unknown, at, source="test")

    flash = ModelRates("flash", "flash-id", (tier,))
    one = table([pro, flash], ("auto",))
    key = T._rates_key(one, ["pro"])
    assert T._rates_key(table([pro]), ["pro"]) == key  # other models, other unknown ones: the same
    assert T._rates_key(table([pro, ModelRates("flash", "f", (tier,))]), ["pro"]) == key
    assert T._rates_key(one, ["pro", "flash"]) != key
    dearer = ModelRates("pro", "pro-id", (TierRates(-1, 0.0, 2e-6, 2.5e-7, 1e-5),))
    assert T._rates_key(table([dearer, flash]), ["pro"]) != key
    tiered = ModelRates("pro", "pro-id", (tier, TierRates(200_000, 0.0, 2e-6, 5e-7, 2e-5)))
    assert T._rates_key(table([tiered]), ["pro"]) != key
    assert T._rates_key(table([ModelRates("pro", "other-id", (tier,))]), ["pro"]) != key
    assert T._rates_key(one, ["pro", "auto"]) != key  # which of its models are unknown counts
    assert T._rates_key(one, ["pro", "auto"]) == T._rates_key(table([pro], ("auto", "x")), ["pro", "auto"])
    assert T._rates_key(table([pro, ModelRates("auto", "a", (tier,))]), ["pro", "auto"]) != T._rates_key(
        one, ["pro", "auto"]
    )


def test_a_tally_hashes_each_set_of_models_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _home(tmp_path / "home")
    results, found = _read(root)
    measured = {fc.path: T.count_and_price(fc) for fc in results}
    sets = {tuple(m.used) for m in measured.values() if m is not None}
    assert len(sets) < len(measured)
    hashed: list[tuple[str, ...]] = []
    real = T._rates_key

    def counting(table: PriceTable, models: Iterable[str]) -> str:
        models = tuple(models)
        hashed.append(models)
        return real(table, models)

    monkeypatch.setattr(T, "_rates_key", counting)
    T.tally(results, found, price_table, measured=_copy(measured))
    assert sorted(hashed) == sorted(sets)


def test_a_reader_resolves_each_set_of_models_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    more = dict.fromkeys(("gggggggg", "hhhhhhhh"), SESSIONS["ffffffff"])  # of another's models
    root = _home(tmp_path / "home", {**SESSIONS, **more})
    asked: list[tuple[str, ...]] = []
    real = pricing.memoised_table

    def counting(models: Iterable[str | None], *args: Any, **kwargs: Any) -> PriceTable | None:
        models = list(models)
        asked.append(tuple(m for m in models if m is not None))
        return real(models, *args, **kwargs)

    monkeypatch.setattr(pricing, "memoised_table", counting)
    results, _ = _read(root)
    used = [tuple(m.used) for fc in results if (m := T.count_and_price(fc)) is not None]
    assert len(used) > len(set(used))
    assert sorted(asked) == sorted(set(used))


def _whole_tables_key(table: PriceTable) -> str:
    """The key an earlier version kept a measure priced at: of every rate of its table."""
    rates = sorted(
        (name, r.model_id, [msgspec.structs.asdict(t) for t in r.tiers]) for name, r in table.rates.items()
    )
    text = repr((rates, sorted(table.unknown)))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def test_a_measure_kept_under_the_whole_tables_key_is_priced_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept by an earlier version, at other rates (another day's), under the key of its whole table: the
    tally prices it again, at its own table's rates, and reports what a fresh measure costs."""
    root = _home(tmp_path / "home")
    results, found = _read(root)
    fresh = {fc.path: T.count_file(fc) for fc in results}
    old = _copy(fresh)
    for m in old.values():
        assert m is not None
        T.requests_of(m)  # (they crossed encoded, as a worker sends them)
        then = price_table([*m.seen, "gemini-2.5-flash"])  # it held other models
        then = PriceTable(
            {
                name: ModelRates(name, r.model_id, tuple(_scaled(t, lambda x: x * 3) for t in r.tiers))
                for name, r in then.rates.items()
            },
            then.unknown,
            then.at,
            then.source,
        )
        T._price(m, then, _whole_tables_key(then))
    for requests in (False, True):
        want = _reports(results, found, _copy(fresh), requests=requests)
        with _pricing() as priced:
            assert _reports(results, found, _kept(old), requests=requests) == want
        assert len(priced) == len(SESSIONS)
    # A session of every model of the table it was priced at hashed the same text then: the same rates.
    table = price_table(["gemini-2.5-pro", "auto-gemini-3"])
    assert T._rates_key(table, ["gemini-2.5-pro", "auto-gemini-3"]) == _whole_tables_key(table)


_READER = """
import json, sys
from pathlib import Path
from ctxtool.frames import tally
from ctxtool.measure import pricing
from ctxtool.session.discover import discover
from ctxtool.session.scan import read_files

pricing.SNAPSHOT_PATH = Path(sys.argv[2])
found = discover([sys.argv[1]])
kept = {}
read_files(found.files, workers=1, then=tally.count_and_price, kept=kept)
print(json.dumps({
    "priced": {Path(p).stem[-8:]: m.priced_at is not None for p, m in kept.items()},
    "genai_prices": sorted(m for m in sys.modules if m.startswith("genai_prices")),
}))
"""


@pytest.mark.parametrize("answers", ["snapshot", "memo", "neither", "no-price-cache"])
def test_a_reader_never_loads_genai_prices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: str
) -> None:
    """A process that reads files prices them from the snapshot or the day's memo, each session whose
    models they hold, without importing genai-prices; the rest (all, with ``CTXTOOL_NO_PRICE_CACHE``) it
    leaves to the parent."""
    root = _home(tmp_path / "home")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CTXTOOL_CACHE_DIR": str(tmp_path / "cache")}
    snapshot = tmp_path / "no-snapshot.json"
    if answers == "snapshot":
        snapshot = _snapshot(tmp_path / "rates.json", SNAPSHOT_MODELS)
    elif answers == "memo":
        monkeypatch.setattr(pricing, "SNAPSHOT_PATH", snapshot)
        price_table(SNAPSHOT_MODELS)  # the day's memo of them (no snapshot in the way)
        assert pricing._load_rate_cache() is not None
    elif answers == "no-price-cache":
        snapshot = _snapshot(tmp_path / "rates.json", SNAPSHOT_MODELS)
        env["CTXTOOL_NO_PRICE_CACHE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _READER, str(root), str(snapshot)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    out = json.loads(done.stdout)
    assert out["genai_prices"] == []
    can = answers in ("snapshot", "memo")
    assert out["priced"] == {sid: can and sid != "eeeeeeee" for sid in SESSIONS}


def test_a_kept_measure_priced_again_at_new_rates_is_kept_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A measure the index kept, priced again at other rates, is written back: the next run at those rates
    does not price it again."""
    from ctxtool.frames.loading import read_tally

    root, cache = _home(tmp_path / "home"), tmp_path / "index"
    read_tally([root], cache=True, cache_dir=cache, workers=1)
    real = T._rates_key
    monkeypatch.setattr(T, "_rates_key", lambda table, models: real(table, models) + "-new")
    with _pricing() as priced:
        read_tally([root], cache=True, cache_dir=cache, workers=1)
    assert len(priced) == len(SESSIONS)
    with _pricing() as priced:
        read_tally([root], cache=True, cache_dir=cache, workers=1)
    assert priced == []
