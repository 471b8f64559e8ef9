"""The figures of a session's requests: the one statement of the rules ``ctxtool stats`` (the plain-Python
engine, ``ctxtool.frames.tally``) and the ``guard`` hook (``ctxtool.hooks.figures``) both count by.

Owns: the model a request recorded without one is billed at (``filled``), what a row takes of its requests
(``request_figures``: their count and token sums, the last and largest live prompt, the context window and
the share of it the peak took, the cache ratio, the models), the context window of a set of requests
(``context_limit``, of Gemini CLI's ``tokenLimit``: ``ctxtool.measure.tokens.token_limit``) and a peak's share
of it (``context_share``), and the cost of requests of which some may have no price (``known_cost``, and
``known_sum`` for sums already made). Does not price a request (``ctxtool.measure.pricing``) nor read a file.

Standard library only, and no ``typing`` at run time: the guard imports it on the warm call it answers before
every model call, where importing msgspec, orjson, polars, dataclasses or typing would cost more than the rest
of the call (docs/hooks.md).
"""

from __future__ import annotations

import math

from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT, TOKEN_KEYS, cache_ratio, token_limit

TYPE_CHECKING = False  # (mypy reads any name TYPE_CHECKING as typing's)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

__all__ = ["context_limit", "context_share", "filled", "known_cost", "known_sum", "request_figures"]


def filled(models: list[str | None]) -> list[str | None]:
    """Each request's model, a missing one taken from the request before it, else the one after
    (``frames.build._derive``: ``forward_fill().backward_fill()`` over the session)."""
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
    """The context window of requests of ``models`` (each one's, a missing one's the default): the largest
    ``token_limit`` among them, the default when there are none."""
    return max(map(token_limit, set(models)), default=DEFAULT_TOKEN_LIMIT)


def context_share(peak: int | None, limit: int) -> float | None:
    """The share of a context window of ``limit`` tokens the largest live prompt took; None without one."""
    return None if peak is None else peak / limit


def request_figures(
    models: list[str | None], tokens: list[list[int | None]], live: list[bool]
) -> dict[str, Any]:
    """What a session's row takes of its requests (each one's model, ``TOKEN_KEYS`` and whether it is
    live), and the ratios of them: the one statement of them, for a session's whole history and for what a
    filter or the live view keeps of it alike (``ctxtool.frames.views``), so that no row keeps a ratio or a
    peak of requests it no longer counts. Costs apart (``known_cost``)."""
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
    known price: None only when there are requests and none has a price (an unknown cost is never $0)."""
    return None if priced == 0 and unpriced > 0 else cost


def known_cost(costs: list[float | None]) -> tuple[float | None, int]:
    """The cost of requests (``costs``: each one's, None when its model has no known price) and how many have
    none: the known part summed exactly; None only when there are requests and none has a price."""
    known = [cost for cost in costs if cost is not None]
    unpriced = len(costs) - len(known)
    return known_sum(math.fsum(known), len(known), unpriced), unpriced
