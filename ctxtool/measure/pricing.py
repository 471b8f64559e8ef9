"""Cost in USD of Gemini requests, with the genai-prices package as the only source of prices.

Owns: turning the token counts of a Gemini CLI request record (``tokens = {input, output, cached, thoughts,
tool, total}``) into a cost. Does not read session files, print, or keep a price table of its own (the rates
shipped in the package are genai-prices' own, generated from it: :mod:`ctxtool.measure.rates_snapshot`).

Token semantics (Gemini API ``usageMetadata`` as Gemini CLI records it): ``input`` is ``promptTokenCount``,
the whole prompt, and already *includes* ``cached`` (``cachedContentTokenCount``, priced at the cache-read
rate); ``tool`` is ``toolUsePromptTokenCount``, priced at the input rate; ``thoughts`` is
``thoughtsTokenCount``, priced at the output rate. So the genai-prices usage of a request is ``input_tokens =
input + tool``, ``cache_read_tokens = cached``, ``output_tokens = output + thoughts``. Tiered prices follow
the library's cliff model: the tier whose ``start`` is strictly below ``input_tokens`` (see
``genai_prices.types.calc_unit_price``) prices the whole request.

``calc_price`` costs tens of microseconds a call, so :func:`price_table` resolves each model once and derives
its per-token rates for every tier by probing ``calc_price`` itself (the library stays the source of truth).
A model the library does not know (e.g. Gemini CLI's routing alias ``auto-gemini-3``) gets a null cost and a
warning, never $0.

Importing genai-prices and loading its data costs about a quarter of a second. The rates are a pure function
of the installed genai-prices and the UTC day, so they are looked up, in this order, in: 1. the snapshot
shipped in the package (``rates_snapshot.json``, ``make rates``), when the installed genai-prices is the one
it was generated from (:func:`installed_genai_prices`, without importing it), the day lies in one of its
windows and it holds every model asked for; 2. the day's memo in ctxtool's cache directory
(``$CTXTOOL_CACHE_DIR``, else the platform's user cache dir); 3. the library itself, whose answers then go to
the memo. ``CTXTOOL_NO_PRICE_CACHE=1`` (or ``memo=False``) skips the first two.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from ctxtool.common.wording import plural
from ctxtool.measure.usage import cost, price

PROVIDER_ID = "google"
TOKEN_COLUMNS = ("input", "cached", "output", "thoughts", "tool")
_URLSAFE = str.maketrans("-_", "+/")
_RATE_CACHE_VERSION = 1
# The snapshot of rates shipped in the package: written by ``make rates`` (ctxtool.measure.rates_snapshot),
# never by hand. Its ``format`` changes when its layout does.
SNAPSHOT_PATH = Path(__file__).with_name("rates_snapshot.json")
SNAPSHOT_FORMAT = 1


class TierRates(msgspec.Struct, frozen=True):
    """USD rates of one price tier, used when ``input + tool > above`` (``above=-1``: the base tier)."""

    above: int
    per_request: float
    input: float
    cached: float
    output: float


class ModelRates(msgspec.Struct, frozen=True, dict=True):
    """Rates of one model as recorded in a session (``model``), resolved to the library's ``model_id``."""

    model: str
    model_id: str
    tiers: tuple[TierRates, ...]
    # The tiers as ``usage.price`` takes them, made once: read per request from the instance's ``__dict__`` as
    # fast as a field, where a property cost ``request_costs`` 3% more.
    plain: ClassVar[tuple[tuple[float, ...], ...]]

    def __post_init__(self) -> None:
        plain = tuple((t.above, t.per_request, t.input, t.cached, t.output) for t in self.tiers)
        self.__dict__["plain"] = plain


class PriceTable(msgspec.Struct, frozen=True):
    """Resolved rates for a set of model names, priced as of ``at``; ``unknown`` models have no price."""

    rates: Mapping[str, ModelRates]
    unknown: tuple[str, ...]
    at: datetime
    source: str = msgspec.field(default_factory=lambda: pricing_source())

    def covers(self, model: str) -> bool:
        return model in self.rates or model in self.unknown

    def unknown_model_warning(self, model: str) -> str:
        return (
            f"unknown model {model!r}: {self.source} has no {PROVIDER_ID} price for it, so its cost is left "
            "empty (check the model name, or upgrade genai-prices if the model is new)"
        )

    def merged(self, other: PriceTable) -> PriceTable:
        unknown = tuple(sorted({*self.unknown, *other.unknown}))
        return msgspec.structs.replace(self, rates={**self.rates, **other.rates}, unknown=unknown)


def warm_up(*, memo: bool = True) -> None:
    """Load genai-prices' data unless the snapshot or the day's memo answers."""
    if not rates_memoised(memo):
        from genai_prices import data_snapshot

        data_snapshot.get_snapshot()


def rates_memoised(memo: bool = True) -> bool:
    """Whether today's rates come without genai-prices: from the shipped snapshot or today's memo."""
    return _memo_allowed(memo) and (
        _snapshot_window(datetime.now(tz=UTC)) is not None or _load_rate_cache() is not None
    )


def _memo_allowed(memo: bool) -> bool:
    return memo and not os.environ.get("CTXTOOL_NO_PRICE_CACHE")


def pricing_source() -> str:
    """Which genai-prices version and data snapshot prices come from, for reports to state."""
    from genai_prices import __version__ as _genai_prices_version
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    if snapshot.from_auto_update:
        data = f"auto-updated price data fetched {snapshot.timestamp:%Y-%m-%d %H:%M}"
        return f"genai-prices {_genai_prices_version} ({data})"
    return f"genai-prices {_genai_prices_version} (bundled offline price data)"


def _probe(model: str, at: datetime, input_tokens: int, cached: int = 0, output: int = 0) -> Decimal:
    from genai_prices import Usage, calc_price

    usage = Usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=output)
    result = calc_price(usage, model, provider_id=PROVIDER_ID, genai_request_timestamp=at)
    return result.total_price


def _model_rates(model: str, at: datetime) -> ModelRates:
    """Derive per-token rates of each tier by probing ``calc_price`` inside that tier: within one tier the
    price is linear (``fixed + in*(I - C) + cached*C + out*O``), so two probes a token apart give the input
    rate and the fixed part, and one more each the cache-read and output rates."""
    from genai_prices import data_snapshot
    from genai_prices.types import TieredPrices

    _, info = data_snapshot.get_snapshot().find_provider_model(model, None, PROVIDER_ID, None)
    # Every tier threshold of any price key of the model, as the library will apply them at ``at``.
    prices = vars(info.get_prices(at)).values()
    starts = {t.start for v in prices if isinstance(v, TieredPrices) for t in v.tiers}
    bounds = [-1, *sorted(starts)]
    tiers: list[TierRates] = []
    for index, above in enumerate(bounds):
        low = above + 1
        high = bounds[index + 1] if index + 1 < len(bounds) else None
        if high is not None and low + 1 > high:
            raise ValueError(f"price tier of {model!r} above {above} tokens is too narrow to probe")
        base = _probe(model, at, low)
        in_rate = _probe(model, at, low + 1) - base
        fixed = base - in_rate * low
        cached_rate = _probe(model, at, low + 1, cached=1) - fixed - in_rate * low
        out_rate = _probe(model, at, low, output=1) - base
        tiers.append(TierRates(above, float(fixed), float(in_rate), float(cached_rate), float(out_rate)))
    return ModelRates(model=model, model_id=info.id, tiers=tuple(tiers))


def price_table(models: Iterable[str | None], at: datetime | None = None, *, memo: bool = True) -> PriceTable:
    """Resolve each distinct model name once; names the library does not know go to ``unknown``. ``at`` is
    the request time prices are taken for (default now); ``memo``: see the module docstring."""
    wanted = sorted({m for m in models if m is not None})
    if (memoised := memoised_table(wanted, at, memo=memo)) is not None:
        return memoised
    when = at or datetime.now(tz=UTC)
    rates: dict[str, ModelRates] = {}
    unknown: list[str] = []
    for model in wanted:
        try:
            rates[model] = _model_rates(model, when)
        except LookupError:
            unknown.append(model)
    table = PriceTable(rates=rates, unknown=tuple(unknown), at=when)
    if at is None and memo:
        _save_rate_cache(table)
    return table


def covering(table: PriceTable | None, *, memo: bool = True) -> Callable[[Iterable[str]], PriceTable]:
    """The rates of a set of models: ``table``'s (resolved already, by a worker say), with those it does not
    hold resolved here; all resolved here without one."""

    def rates(models: Iterable[str]) -> PriceTable:
        names = list(models)
        if table is None:
            return price_table(names, memo=memo)
        uncovered = [m for m in names if not table.covers(m)]
        return table.merged(price_table(uncovered, table.at, memo=memo)) if uncovered else table

    return rates


def memoised_table(
    models: Iterable[str | None], at: datetime | None = None, *, memo: bool = True
) -> PriceTable | None:
    """What :func:`price_table` answers without genai-prices: the shipped snapshot's table, or (for
    ``at=None``) the day's memo's, when one of them holds every model; None when only the library can."""
    wanted = sorted({m for m in models if m is not None})
    when = at or datetime.now(tz=UTC)
    if _memo_allowed(memo) and (found := _snapshot_window(when)) is not None:
        source, window = found
        if (part := _covered(window["rates"], window["unknown"], wanted)) is not None:
            return PriceTable(rates_from_doc(part[0]), part[1], when, source)
    cached = _load_rate_cache() if at is None and memo else None
    if cached is not None and (part := _covered(cached.rates, cached.unknown, wanted)) is not None:
        return PriceTable(part[0], part[1], cached.at, cached.source)
    return None


def _covered(
    rates: Mapping[str, Any], unknown: Sequence[str], wanted: list[str]
) -> tuple[dict[str, Any], tuple[str, ...]] | None:
    """The ``rates`` and ``unknown`` of ``wanted``, when they hold every one of them."""
    if not all(m in rates or m in unknown for m in wanted):
        return None
    return {m: rates[m] for m in wanted if m in rates}, tuple(m for m in wanted if m in unknown)


def installed_genai_prices(version: str) -> dict[str, Any] | None:
    """``{"version", "data_size", "data_sha256"}`` of the installed genai-prices if it is ``version``, without
    importing it (its ``genai_prices-<version>.dist-info`` folder beside the package); None otherwise.

    The data file's SHA-256 and size are those its installer recorded (``RECORD``, PEP 376) when the file
    still has that size: under 1 ms, where hashing the 1.6 MB file costs 6-8 ms (``hashlib`` loads OpenSSL).
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("genai_prices")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    if not (info := package.parent / f"genai_prices-{version}.dist-info").is_dir():
        return None
    data = package / "data.py"
    recorded = _recorded_sha256(info / "RECORD", "genai_prices/data.py")
    try:
        if recorded is not None and data.stat().st_size == recorded[1]:
            return {"version": version, "data_size": recorded[1], "data_sha256": recorded[0]}
        content = data.read_bytes()
    except OSError:
        return None
    import hashlib

    return {"version": version, "data_size": len(content), "data_sha256": hashlib.sha256(content).hexdigest()}


def _recorded_sha256(record: Path, name: str) -> tuple[str, int] | None:
    """(SHA-256 in hex, size) of the file ``name`` as a ``RECORD`` lists it (``name,sha256=<b64>,<size>``)."""
    import binascii

    try:
        text = record.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        path, _, rest = line.partition(",")
        if path != name:
            continue
        digest, _, size = rest.partition(",")
        algorithm, _, encoded = digest.partition("=")
        if algorithm != "sha256" or not size.isdigit():
            return None
        padded = encoded.translate(_URLSAFE) + "=" * (-len(encoded) % 4)
        try:
            raw = binascii.a2b_base64(padded, strict_mode=True)
        except binascii.Error:
            return None
        return (raw.hex(), int(size)) if len(raw) == 32 else None
    return None


class _Snapshot(msgspec.Struct, frozen=True):
    source: str
    windows: tuple[Mapping[str, Any], ...]  # {"from", "until" (ISO days or None), "unknown", "rates"}


@functools.cache
def _read_snapshot(path: Path) -> _Snapshot | None:
    """The snapshot at ``path`` if it was generated from the installed genai-prices, else None."""
    try:
        doc = json.loads(path.read_bytes())
        if doc["format"] != SNAPSHOT_FORMAT:
            return None
        library = doc["genai_prices"]
        if installed_genai_prices(library["version"]) != library:
            return None
        return _Snapshot(source=doc["source"], windows=tuple(doc["windows"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _snapshot_window(when: datetime) -> tuple[str, Mapping[str, Any]] | None:
    """The snapshot's source and its window holding ``when``'s UTC day, when it fits the installed library."""
    if (snapshot := _read_snapshot(SNAPSHOT_PATH)) is None:
        return None
    day = (when.astimezone(UTC) if when.tzinfo is not None else when).date().isoformat()
    for w in snapshot.windows:
        if (w["from"] is None or w["from"] <= day) and (w["until"] is None or day < w["until"]):
            return snapshot.source, w
    return None


def rates_to_doc(rates: Mapping[str, ModelRates]) -> dict[str, Any]:
    """Rates as JSON-ready data (the day's memo and the shipped snapshot keep them so)."""
    return {
        name: {"model_id": r.model_id, "tiers": [msgspec.structs.asdict(t) for t in r.tiers]}
        for name, r in rates.items()
    }


def rates_from_doc(doc: Mapping[str, Any]) -> dict[str, ModelRates]:
    return {
        name: ModelRates(name, r["model_id"], tuple(TierRates(**t) for t in r["tiers"]))
        for name, r in doc.items()
    }


def _rate_cache_path() -> Path | None:
    """The memo file for today's rates under the installed genai-prices data, or None when disabled."""
    if os.environ.get("CTXTOOL_NO_PRICE_CACHE"):
        return None
    import importlib.util

    if (spec := importlib.util.find_spec("genai_prices")) is None or spec.origin is None:
        return None
    data = Path(spec.origin).parent / "data.py"
    try:
        st = data.stat()
    except OSError:
        return None
    if not (base := os.environ.get("CTXTOOL_CACHE_DIR")):
        from platformdirs import user_cache_dir

        base = user_cache_dir("ctxtool", appauthor=False)
    day = datetime.now(tz=UTC).date().isoformat()
    return Path(base) / "prices" / f"rates-v{_RATE_CACHE_VERSION}-{st.st_size}-{st.st_mtime_ns}-{day}.json"


def _load_rate_cache() -> PriceTable | None:
    if (path := _rate_cache_path()) is None:
        return None
    try:
        doc = json.loads(path.read_bytes())
        at = datetime.fromisoformat(doc["at"])
        return PriceTable(rates_from_doc(doc["rates"]), tuple(doc["unknown"]), at, doc["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_rate_cache(table: PriceTable) -> None:
    if (path := _rate_cache_path()) is None:
        return
    if (previous := _load_rate_cache()) is not None:
        table = previous.merged(table)
    doc: dict[str, Any] = {"source": table.source, "at": table.at.isoformat(), "unknown": list(table.unknown)}
    doc["rates"] = rates_to_doc(table.rates)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return  # a read-only cache directory only costs speed


def request_cost(
    model: str | None,
    input: int | None,
    cached: int | None = 0,
    output: int | None = 0,
    thoughts: int | None = 0,
    tool: int | None = 0,
    *,
    at: datetime | None = None,
) -> float | None:
    """USD cost of one request, or None for an unknown model, missing ``input``/``output`` or invalid counts
    (``cached``, ``thoughts`` and ``tool`` count as 0 when None)."""
    if model is None or input is None or output is None:
        return None
    return cost_of(price_table([model], at).rates.get(model), input, cached, output, thoughts, tool)


def cost_of(
    rates: ModelRates | None,
    input: int,
    cached: int | None,
    output: int,
    thoughts: int | None,
    tool: int | None,
) -> float | None:
    """One request's cost (``usage.cost``): None for a model without rates and for impossible counts."""
    return cost(None if rates is None else rates.plain, input, cached, output, thoughts, tool)


def request_costs(
    rates: Mapping[str, ModelRates], models: Sequence[str | None], tokens: Sequence[Sequence[int | None]]
) -> tuple[list[float | None], int, dict[str, int]]:
    """Many requests' costs by :func:`cost_of`'s rules, and what is warned of them: the requests without a
    model, and by model those of impossible counts. ``tokens``: the columns ``input``, ``output``,
    ``cached``, ``thoughts``, ``tool`` (each request has an input). (``usage.cost``'s check is written out
    here: a call per request doubled this loop's time over the bench corpus.)"""
    out: list[float | None] = []
    add, priced = out.append, price
    nameless = 0
    impossible: dict[str, int] = {}
    for model, input, output, cached, thoughts, tool in zip(models, *tokens[:5], strict=True):
        if model is None:
            nameless += 1
            add(None)
            continue
        found = rates.get(model)
        cache, think, used = cached or 0, thoughts or 0, tool or 0
        prompt = input + used
        if input < 0 or cache < 0 or think < 0 or used < 0 or (output or 0) < 0 or cache > prompt:
            if found is not None:
                impossible[model] = impossible.get(model, 0) + 1
            add(None)
        elif found is None or output is None:
            add(None)
        else:
            add(priced(found.plain, prompt, cache, output + think))
    return out, nameless, impossible


def nameless_warning(requests: int) -> str:
    """The warning for requests recorded without a model name (their cost is left empty)."""
    return _left_empty(requests, "", "no model name")


def impossible_warning(model: str, requests: int) -> str:
    """The warning for a model's requests with impossible token counts (their cost is left empty)."""
    what = "impossible token counts (negative, or cached above input + tool)"
    return _left_empty(requests, f" of model {model!r}", what)


def _left_empty(n: int, of: str, what: str) -> str:
    has, its = ("has", "its") if n == 1 else ("have", "their")
    return f"{plural(n, 'request')}{of} {has} {what}, so {its} cost is left empty (check the session file)"
