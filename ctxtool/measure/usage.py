"""The figures of a session's requests: the one statement of the rules ``ctxtool stats`` (``frames.tally``)
and the ``guard`` hook (``hooks.figures``) both count by.

Owns: the model a request recorded without one is billed at (``filled``), what a row takes of its requests
(``request_figures``), the context window of a set of requests (``context_limit``) and a peak's share of it
(``context_share``), a request's cost from its model's price tiers (``cost``, ``price``: the tiers come from
``ctxtool.measure.pricing``) and the cost of requests of which some may have no price (``known_cost``,
``known_sum``). Does not look a price up nor read a file.

Standard library only, and no ``typing`` at run time: the guard imports it on the warm call it answers before
every model call, where importing msgspec, polars or typing would cost more than the call (docs/hooks.md).
"""

from __future__ import annotations

import math

from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT, TOKEN_KEYS, cache_ratio, token_limit

TYPE_CHECKING = False  # (mypy reads any name TYPE_CHECKING as typing's)
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import Any

    # A model's price tiers: (above, per_request, input, cached, output) as pricing.TierRates; None: no price.
    Tiers = Sequence[Sequence[float]]

__all__ = [
    "ExactSum",
    "context_limit",
    "context_share",
    "cost",
    "filled",
    "known_cost",
    "known_sum",
    "price",
    "request_figures",
]


def filled(models: list[str | None]) -> list[str | None]:
    """Each request's model, a missing one taken from the request before it, else the one after."""
    if None not in models:
        return models
    out = models[:]
    last = None
    for i, m in enumerate(out):
        if m is None:
            out[i] = last
        else:
            last = m
    nxt = None
    for i in range(len(out) - 1, -1, -1):
        if out[i] is None:
            out[i] = nxt
        else:
            nxt = out[i]
    return out


def context_limit(models: Iterable[str | None]) -> int:
    """The context window of requests of ``models``: their largest ``token_limit`` (or the default)."""
    return max(map(token_limit, set(models)), default=DEFAULT_TOKEN_LIMIT)


def context_share(peak: int | None, limit: int) -> float | None:
    """The share of a context window of ``limit`` tokens the largest live prompt took; None without one."""
    return None if peak is None else peak / limit


def request_figures(
    models: list[str | None], tokens: list[list[int | None]], live: list[bool]
) -> dict[str, Any]:
    """What a session's row takes of its requests (each one's model, ``TOKEN_KEYS`` and whether it is live):
    their count and token sums, the last and largest live prompt, the context window and the peak's share of
    it, the cache ratio, the models. For a whole history and for what a filter keeps of it alike."""
    row: dict[str, Any] = {"requests": len(models)}
    for name, values in zip(TOKEN_KEYS, tokens, strict=True):
        row[name] = sum(filter(None, values))
    prompts = [v for v, is_live in zip(tokens[0], live, strict=True) if is_live and v is not None]
    row["context"] = prompts[-1] if prompts else None
    row["peak_context"] = max(prompts) if prompts else None
    row["context_limit"] = context_limit(models)
    row["context_share"] = context_share(row["peak_context"], row["context_limit"])
    row["cache_ratio"] = cache_ratio(row["cached"], row["input"])
    row["models"] = ",".join(sorted({model for model in models if model is not None})) if models else None
    return row


def known_sum(cost: float, priced: int, unpriced: int) -> float | None:
    """The cost of requests whose ``priced`` known costs sum to ``cost`` and of which ``unpriced`` have no
    price: None only when none has a price (an unknown cost is never $0)."""
    return None if priced == 0 and unpriced > 0 else cost


class ExactSum:
    """Costs summed exactly without keeping each, in ``units`` of ``2**-SCALE``: ``math.fsum`` of it is the
    correctly rounded sum, as of the costs themselves; ``n`` counts them (true when one was added, 0 too);
    a value not finite is kept as it is, for ``math.fsum`` to meet."""

    SCALE = 1200  # (the smallest double is 2**-1074)

    __slots__ = ("n", "odd", "units")

    def __init__(self) -> None:
        self.units, self.n = 0, 0
        self.odd: list[float] = []

    def add(self, x: float) -> None:
        if not math.isfinite(x):
            self.odd.append(x)
            return
        m, d = x.as_integer_ratio()
        self.units += m << (self.SCALE - d.bit_length() + 1)

    def extend(self, other: ExactSum) -> None:
        self.units, self.n = self.units + other.units, self.n + other.n
        self.odd += other.odd

    def __bool__(self) -> bool:
        return self.n > 0

    def __iter__(self) -> Iterator[float]:
        yield self.units / (1 << self.SCALE)  # (an integer division of ints rounds correctly)
        yield from self.odd


def known_cost(costs: list[float | None]) -> tuple[float | None, int]:
    """The cost of requests (``costs``: None where unknown), summed exactly, and how many have none."""
    known = [cost for cost in costs if cost is not None]
    unpriced = len(costs) - len(known)
    return known_sum(math.fsum(known), len(known), unpriced), unpriced


def cost(
    tiers: Tiers | None, input: int, cached: int | None, output: int, thoughts: int | None, tool: int | None
) -> float | None:
    """One request's cost: None for a model without a price (``tiers`` None) and for impossible counts (a
    negative one, or more cached than the prompt, input and tool results, holds); ``cached``, ``thoughts`` and
    ``tool`` count as 0 when None."""
    if tiers is None:
        return None
    cache, think, used = cached or 0, thoughts or 0, tool or 0
    if min(input, output, cache, think, used) < 0 or cache > input + used:
        return None
    return price(tiers, input + used, cache, output + think)


def price(tiers: Tiers, prompt: int, cache: int, billed_output: int) -> float:
    """The cost of a request of possible counts: ``prompt`` tokens (input and tool results) of which ``cache``
    were cached, and ``billed_output`` (output and thoughts). The last tier whose ``above`` the prompt passes
    prices the whole request (genai-prices' cliff model)."""
    tier = tiers[0]
    if len(tiers) > 1:  # (a loop a request cost 0.1 µs more where most models have one tier)
        for above in tiers:
            if prompt > above[0]:
                tier = above
    return tier[1] + tier[2] * (prompt - cache) + tier[3] * cache + tier[4] * billed_output
