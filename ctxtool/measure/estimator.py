"""Gemini CLI's local token estimate (``estimateTokenCountSync``,
packages/core/src/utils/tokenCalculation.ts), in every era ctxtool replays.

Lives at the bottom layer so that the session reader (what fills each request's context, ``stats``) and the
compression port (``ctxtool.compress.gemini_cli.chat_compression``, which re-exports these names) use one
implementation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from ctxtool.common.jsvalue import (
    js_truthy,
    json_length,
    normalize_surrogates,
    utf16_counts,
    utf16_len,
    utf16_units,
)

MAX_CHARS_FOR_FULL_HEURISTIC = 100_000  # utils/tokenCalculation.ts
MAX_RECURSION_DEPTH = 3  # utils/tokenCalculation.ts
IMAGE_TOKEN_ESTIMATE = 3000  # utils/tokenCalculation.ts
PDF_TOKEN_ESTIMATE = 25_800  # utils/tokenCalculation.ts


class EstimatorSpec(msgspec.Struct, frozen=True):
    """Which ``estimateTokenCountSync`` (packages/core/src/utils/tokenCalculation.ts) an era used."""

    ascii_rate: float | None  # None: 1/charsPerToken (07792f98cd, HEAD)
    non_ascii_rate: float
    per_code_unit: bool  # charCodeAt (f605628624) vs code points (for...of)
    structured_function_response: bool  # name + response (+ nested parts) instead of JSON of the part
    media_rates: bool  # image/* 3000, application/pdf* 25800
    long_text_shortcut: bool  # text > 100,000 units -> length / charsPerToken


ESTIMATOR_HEAD = EstimatorSpec(None, 1.5, True, True, True, True)  # 07792f98cd 2026-05-12
ESTIMATOR_2026_01_30 = EstimatorSpec(0.25, 1.3, True, True, True, True)  # f605628624
ESTIMATOR_2026_01_16 = EstimatorSpec(0.25, 1.3, False, False, True, True)  # ee8d425603
ESTIMATOR_2025_11_26 = EstimatorSpec(0.25, 1.3, False, False, False, False)  # e1d2653a7a


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def _exact_rate(rate: float) -> bool:
    # A rate with a small power-of-two denominator (0.25, 1.5, 0.5) accumulates without rounding, so
    # the sequential JS sum equals count * rate whatever the order.
    return rate.as_integer_ratio()[1] <= 1024 and rate < 1024


def _add_text(total: float, text: str, cpt: float, spec: EstimatorSpec) -> float:
    n_units, n_ascii = utf16_counts(text)  # (a compiled kernel where built: ctxtool/_kernels.c)
    if spec.long_text_shortcut and n_units > MAX_CHARS_FOR_FULL_HEURISTIC:
        return total + n_units / cpt
    ascii_rate = 1 / cpt if spec.ascii_rate is None else spec.ascii_rate
    other_rate = spec.non_ascii_rate
    if _exact_rate(ascii_rate) and _exact_rate(other_rate):
        n_other = (n_units if spec.per_code_unit else len(normalize_surrogates(text))) - n_ascii
        return total + (n_ascii * ascii_rate + n_other * other_rate)
    # Inexact rates (1.3, 0.33, 1/3): add one increment per character into the running total, in order,
    # as the per-character loops of e1d2653a7a .. f605628624 did.
    units = utf16_units(text) if spec.per_code_unit else [ord(c) for c in normalize_surrogates(text)]
    for u in units:
        total += ascii_rate if u <= 127 else other_rate
    return total


def estimate_token_count(
    parts: Sequence[Any],
    chars_per_token: float = 4,
    *,
    depth: int = 0,
    estimator: EstimatorSpec = ESTIMATOR_HEAD,
) -> int:
    """``estimateTokenCountSync(parts, depth, charsPerToken)`` (utils/tokenCalculation.ts, HEAD 07792f98cd).

    Text: 1/charsPerToken per ASCII UTF-16 unit, 1.5 per other unit, ``length/charsPerToken`` above
    100,000 units; functionResponse: name + response (+ nested parts); images 3000, PDFs 25800; anything
    else ``JSON.stringify(part).length / charsPerToken``. Floored once per call. ``estimator`` selects an
    older formula (section 7.1)."""
    if depth > MAX_RECURSION_DEPTH:
        return 0
    cpt = chars_per_token
    total = 0.0
    for part in parts:
        text = _get(part, "text")
        if isinstance(text, str):
            total = _add_text(total, text, cpt, estimator)
        elif estimator.structured_function_response and js_truthy(_get(part, "functionResponse")):
            total += _function_response_tokens(part["functionResponse"], depth, cpt, estimator)
        else:
            media = _media_tokens(part) if estimator.media_rates else None
            if media is not None:
                total += media
            elif part is None:
                continue  # JS would throw on `null.text`; a JSON null part is skipped here
            else:
                total += json_length(part) / cpt
    return math.floor(total)


def _function_response_tokens(fr: Any, depth: int, cpt: float, spec: EstimatorSpec) -> float:
    name = _get(fr, "name")
    tokens = (utf16_len(name) if isinstance(name, str) else 0) / cpt
    if isinstance(fr, dict):
        response = fr.get("response")
        if isinstance(response, str):
            tokens += utf16_len(response) / cpt
        elif response is not None:
            tokens += json_length(response) / cpt
        nested = fr.get("parts")
        if isinstance(nested, list) and nested:
            tokens += estimate_token_count(nested, cpt, depth=depth + 1, estimator=spec)
    return tokens


def _media_tokens(part: Any) -> int | None:
    mime = _get(_get(part, "inlineData"), "mimeType") or _get(_get(part, "fileData"), "mimeType")
    if isinstance(mime, str):
        if mime.startswith("image/"):
            return IMAGE_TOKEN_ESTIMATE
        if mime.startswith("application/pdf"):
            return PDF_TOKEN_ESTIMATE
    return None


def estimate_text(text: str) -> int:
    """``estimate_token_count([{"text": text}])`` (the HEAD estimator, 4 characters a token), without
    building the part: the session reader calls it for every message."""
    if text.isascii():  # 1/4 token per character, long or short: floor(n / 4)
        return len(text) // 4
    return math.floor(_add_text(0.0, text, 4, ESTIMATOR_HEAD))
