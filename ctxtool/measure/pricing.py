"""Cost in USD of Gemini requests, with the genai-prices package as the only source of prices.

Owns: turning the token counts of a Gemini CLI request record (``tokens = {input, output, cached, thoughts,
tool, total}``) into a cost, for one request (:func:`request_cost`) or for a whole polars frame at once
(:func:`add_costs`). Does not read session files, print, or keep a price table of its own.

Token semantics (Gemini API ``usageMetadata`` as Gemini CLI records it):

- ``input`` is ``promptTokenCount``, the whole prompt, and already *includes* ``cached``
  (``cachedContentTokenCount``); cached tokens are priced at the cache-read rate and never counted twice.
- ``tool`` is ``toolUsePromptTokenCount``: prompt-side tokens outside ``promptTokenCount``, priced at the
  input rate.
- ``thoughts`` is ``thoughtsTokenCount``, priced at the output rate.

So the genai-prices usage of a request is ``input_tokens = input + tool``, ``cache_read_tokens = cached``,
``output_tokens = output + thoughts``. Tiered prices (e.g. above 200k prompt tokens) follow the library's
cliff model: ``TieredPrices`` picks the tier whose ``start`` is strictly below ``input_tokens`` (``>``, not
``>=``, see ``genai_prices.types.calc_unit_price``) and the whole request pays that tier's rates.

Speed: ``calc_price`` costs tens of microseconds a call and a stats run prices ~100k requests, so
:func:`price_table` resolves each distinct model once and derives its per-token rates for every tier by
probing ``calc_price`` itself with crafted usages (the library stays the source of truth); :func:`add_costs`
then applies those rates with vectorised polars expressions. Tests compare the two on random token counts.

A model the library does not know (e.g. Gemini CLI's routing alias ``auto-gemini-3``) gets a null cost and a
warning, never $0.

Start-up: importing genai-prices and loading its data costs about a quarter of a second, more than parsing a
few hundred megabytes of sessions takes here. The rates derived for a model are a pure function of the
installed genai-prices data and the day, so they are memoised in a small JSON file in ctxtool's cache
directory (``$CTXTOOL_CACHE_DIR``, else the platform's user cache dir), keyed by the library's data file and
the UTC date; genai-prices is imported only when a model is not in that file yet. Delete the file (or set
``CTXTOOL_NO_PRICE_CACHE=1``) to always ask the library. A scan with one worker process has that worker do
it (``ctxtool.frames.loading``), which is why this module imports polars only inside :func:`add_costs`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from ctxtool.common.wording import plural

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "PROVIDER_ID",
    "TOKEN_COLUMNS",
    "ModelRates",
    "PriceTable",
    "TierRates",
    "add_costs",
    "cost_of",
    "price_table",
    "pricing_source",
    "request_cost",
]

PROVIDER_ID = "google"
TOKEN_COLUMNS = ("input", "cached", "output", "thoughts", "tool")


@dataclass(frozen=True)
class TierRates:
    """USD rates of one price tier, used when ``input + tool > above`` (``above=-1``: the base tier)."""

    above: int
    per_request: float
    input: float
    cached: float
    output: float


@dataclass(frozen=True)
class ModelRates:
    """Rates of one model as recorded in a session (``model``), resolved to the library's ``model_id``."""

    model: str
    model_id: str
    tiers: tuple[TierRates, ...]

    def tier_for(self, prompt_tokens: int) -> TierRates:
        chosen = self.tiers[0]
        for tier in self.tiers:
            if prompt_tokens > tier.above:
                chosen = tier
        return chosen


@dataclass(frozen=True)
class PriceTable:
    """Resolved rates for a set of model names, priced as of ``at``; ``unknown`` models have no price."""

    rates: Mapping[str, ModelRates]
    unknown: tuple[str, ...]
    at: datetime
    source: str = field(default_factory=lambda: pricing_source())

    def covers(self, model: str) -> bool:
        return model in self.rates or model in self.unknown

    def unknown_model_warning(self, model: str) -> str:
        return (
            f"unknown model {model!r}: {self.source} has no {PROVIDER_ID} price for it, so its cost is left "
            "empty (check the model name, or upgrade genai-prices if the model is new)"
        )

    def merged(self, other: PriceTable) -> PriceTable:
        return PriceTable(
            rates={**self.rates, **other.rates},
            unknown=tuple(sorted({*self.unknown, *other.unknown})),
            at=self.at,
            source=self.source,
        )


def warm_up(*, memo: bool = True) -> None:
    """Load what pricing will need: the memoised rates, or genai-prices' data when there are none."""
    if not rates_memoised(memo):
        from genai_prices import data_snapshot

        data_snapshot.get_snapshot()


def rates_memoised(memo: bool = True) -> bool:
    """Whether today's memo of rates exists (``warm_up`` then loads no genai-prices data)."""
    return memo and _load_rate_cache() is not None


def pricing_source() -> str:
    """Which genai-prices version and data snapshot prices come from, for reports to state."""
    from genai_prices import __version__ as _genai_prices_version
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    if snapshot.from_auto_update:
        return (
            f"genai-prices {_genai_prices_version} "
            f"(auto-updated price data fetched {snapshot.timestamp:%Y-%m-%d %H:%M})"
        )
    return f"genai-prices {_genai_prices_version} (bundled offline price data)"


def _probe(model: str, at: datetime, input_tokens: int, cached: int = 0, output: int = 0) -> Decimal:
    from genai_prices import Usage, calc_price

    usage = Usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=output)
    result = calc_price(usage, model, provider_id=PROVIDER_ID, genai_request_timestamp=at)
    return result.total_price


def _tier_starts(model: str, at: datetime) -> list[int]:
    """Every tier threshold of any price key of the model, as the library will apply them at ``at``."""
    from genai_prices import data_snapshot
    from genai_prices.types import TieredPrices

    _, info = data_snapshot.get_snapshot().find_provider_model(model, None, PROVIDER_ID, None)
    prices = info.get_prices(at)
    starts: set[int] = set()
    for value in vars(prices).values():
        if isinstance(value, TieredPrices):
            starts.update(tier.start for tier in value.tiers)
    return sorted(starts)


def _model_rates(model: str, at: datetime) -> ModelRates:
    """Derive per-token rates of each tier by probing ``calc_price`` inside that tier.

    Within one tier the library's price is linear: ``fixed + in*(I - C) + cached*C + out*O``. Two probes a
    token apart give the input rate and the fixed part; one more each gives the cache-read and output rates.
    """
    from genai_prices import data_snapshot

    _, info = data_snapshot.get_snapshot().find_provider_model(model, None, PROVIDER_ID, None)
    starts = _tier_starts(model, at)
    bounds = [-1, *starts]
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
        tiers.append(
            TierRates(
                above=above,
                per_request=float(fixed),
                input=float(in_rate),
                cached=float(cached_rate),
                output=float(out_rate),
            )
        )
    return ModelRates(model=model, model_id=info.id, tiers=tuple(tiers))


def price_table(models: Iterable[str | None], at: datetime | None = None, *, memo: bool = True) -> PriceTable:
    """Resolve each distinct model name once; names the library does not know go to ``unknown``.

    ``at`` is the request time prices are taken for (the library keeps dated prices); default now, in which
    case memoised rates for today are used when present (see the module docstring).
    """
    wanted = sorted({m for m in models if m is not None})
    if at is None and memo:
        cached = _load_rate_cache()
        if cached is not None and all(m in cached.rates or m in cached.unknown for m in wanted):
            return PriceTable(
                rates={m: cached.rates[m] for m in wanted if m in cached.rates},
                unknown=tuple(m for m in wanted if m in cached.unknown),
                at=cached.at,
                source=cached.source,
            )
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


def _rate_cache_path() -> Path | None:
    """The memo file for today's rates under the installed genai-prices data, or None when disabled."""
    if os.environ.get("CTXTOOL_NO_PRICE_CACHE"):
        return None
    import importlib.util

    spec = importlib.util.find_spec("genai_prices")
    if spec is None or spec.origin is None:
        return None
    data = Path(spec.origin).parent / "data.py"
    try:
        st = data.stat()
    except OSError:
        return None
    base = os.environ.get("CTXTOOL_CACHE_DIR")
    if not base:
        from platformdirs import user_cache_dir

        base = user_cache_dir("ctxtool", appauthor=False)
    day = datetime.now(tz=UTC).date().isoformat()
    return Path(base) / "prices" / f"rates-v{_RATE_CACHE_VERSION}-{st.st_size}-{st.st_mtime_ns}-{day}.json"


_RATE_CACHE_VERSION = 1


def _load_rate_cache() -> PriceTable | None:
    path = _rate_cache_path()
    if path is None:
        return None
    try:
        doc = json.loads(path.read_bytes())
        return PriceTable(
            rates={
                name: ModelRates(name, r["model_id"], tuple(TierRates(**t) for t in r["tiers"]))
                for name, r in doc["rates"].items()
            },
            unknown=tuple(doc["unknown"]),
            at=datetime.fromisoformat(doc["at"]),
            source=doc["source"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_rate_cache(table: PriceTable) -> None:
    path = _rate_cache_path()
    if path is None:
        return
    previous = _load_rate_cache()
    if previous is not None:
        table = previous.merged(table)
    doc = {
        "source": table.source,
        "at": table.at.isoformat(),
        "unknown": list(table.unknown),
        "rates": {
            name: {"model_id": r.model_id, "tiers": [vars(t) for t in r.tiers]}
            for name, r in table.rates.items()
        },
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return  # a read-only cache directory only costs speed


def _count(value: int | None) -> int:
    return 0 if value is None else value


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
    """USD cost of one request, or None for an unknown model, missing ``input``/``output`` or invalid counts.

    ``cached``, ``thoughts`` and ``tool`` count as 0 when None (Gemini CLI omits the optional counts).
    """
    if model is None or input is None or output is None:
        return None
    table = price_table([model], at)
    rates = table.rates.get(model)
    if rates is None:
        return None
    prompt = input + _count(tool)
    cache = _count(cached)
    out = output + _count(thoughts)
    if min(input, cache, out, _count(tool), output) < 0 or cache > prompt:
        return None
    tier = rates.tier_for(prompt)
    return tier.per_request + tier.input * (prompt - cache) + tier.cached * cache + tier.output * out


def cost_of(
    rates: ModelRates | None,
    input: int,
    cached: int | None,
    output: int,
    thoughts: int | None,
    tool: int | None,
) -> float | None:
    """One request's cost by :func:`add_costs`' rules, without polars (the ``guard`` hook's path): None for a
    model without rates and for impossible counts (negative, or ``cached`` above ``input + tool``)."""
    if rates is None:
        return None
    cache, think, used = _count(cached), _count(thoughts), _count(tool)
    prompt = input + used
    if min(input, output, cache, think, used) < 0 or cache > prompt:
        return None
    tier = rates.tier_for(prompt)
    return (
        tier.per_request
        + tier.input * (prompt - cache)
        + tier.cached * cache
        + tier.output * (output + think)
    )


def add_costs(
    df: pl.DataFrame, table: PriceTable | None = None, *, at: datetime | None = None, memo: bool = True
) -> tuple[pl.DataFrame, list[str]]:
    """Add a Float64 ``cost`` column (USD) to a frame of requests; return it with warning messages.

    ``df`` has a ``model`` column (str) and integer columns ``input``, ``cached``, ``output``, ``thoughts``,
    ``tool``. ``cost`` is null for an unknown or missing model, when ``input`` or ``output`` is null (no
    token record), and for impossible counts (negative, or ``cached`` above ``input + tool``), which the
    library refuses too. Null ``cached``, ``thoughts`` and ``tool`` count as 0. One warning per unknown model,
    plus one per model with impossible counts. Pass ``table`` to reuse a resolved :class:`PriceTable`.
    """
    import polars as pl  # here, not at the top: a worker process resolves rates without loading polars

    missing = [c for c in ("model", *TOKEN_COLUMNS) if c not in df.columns]
    if missing:
        raise ValueError(f"add_costs needs columns {', '.join(missing)}")
    present: list[str | None] = df.get_column("model").cast(pl.String).unique().sort().to_list()
    names = [m for m in present if m is not None]
    if table is None:
        table = price_table(names, at, memo=memo)
    else:
        uncovered = [m for m in names if not table.covers(m)]
        if uncovered:
            table = table.merged(price_table(uncovered, table.at, memo=memo))
    warnings = [table.unknown_model_warning(m) for m in names if m in table.unknown]
    if None in present:
        nameless = df.get_column("model").null_count()
        warnings.append(
            f"{plural(nameless, 'request')} {'has' if nameless == 1 else 'have'} no model name, so "
            f"{'its' if nameless == 1 else 'their'} cost is left empty (check the session file)"
        )

    prompt = pl.col("input").cast(pl.Int64) + pl.col("tool").cast(pl.Int64).fill_null(0)
    cache = pl.col("cached").cast(pl.Int64).fill_null(0)
    out = pl.col("output").cast(pl.Int64) + pl.col("thoughts").cast(pl.Int64).fill_null(0)
    invalid = (
        (pl.col("input") < 0)
        | (pl.col("output") < 0)
        | (cache < 0)
        | (pl.col("thoughts").fill_null(0) < 0)
        | (pl.col("tool").fill_null(0) < 0)
        | (cache > prompt)
    )

    cost: pl.Expr = pl.lit(None, dtype=pl.Float64)
    # Build the chain so that, per model, the highest tier whose threshold the prompt exceeds is tried first.
    branches: list[tuple[pl.Expr, pl.Expr]] = []
    for name, rates in table.rates.items():
        for tier in reversed(rates.tiers):
            cond = (pl.col("model") == name) & (prompt > tier.above)
            value = (
                pl.lit(tier.per_request)
                + (prompt - cache).cast(pl.Float64) * tier.input
                + cache.cast(pl.Float64) * tier.cached
                + out.cast(pl.Float64) * tier.output
            )
            branches.append((cond, value))
    if branches:
        # Each when/then is null where its condition is false; the first true branch wins.
        cost = pl.coalesce([pl.when(cond).then(value) for cond, value in branches])
    cost = pl.when(invalid.fill_null(False)).then(pl.lit(None, dtype=pl.Float64)).otherwise(cost)

    result = df.with_columns(cost.cast(pl.Float64).alias("cost"))

    bad = (
        df.lazy()
        .filter(invalid.fill_null(False) & pl.col("model").is_in(list(table.rates)))
        .group_by("model")
        .len()
        .sort("model")
        .collect()
    )
    for name, count in bad.iter_rows():
        warnings.append(
            f"{plural(count, 'request')} of model {name!r} {'has' if count == 1 else 'have'} impossible "
            "token counts (negative, or cached above input + tool), so "
            f"{'its' if count == 1 else 'their'} cost is left empty (check the session file)"
        )
    return result, warnings
