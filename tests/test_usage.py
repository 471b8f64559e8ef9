"""``ctxtool.measure.usage`` states the figure rules of ``ctxtool.frames.tally`` (its ``_filled``,
``known_cost`` and ``request_figures``) once, for the stats engine and the guard: until the engine imports
them from there, they give what its own copies give, on any requests.

(Goes when ``frames/tally.py`` imports them: then there is one copy to hold to itself.)
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxtool.frames import tally
from ctxtool.measure import usage
from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT, MODEL_LIMITS, TOKEN_KEYS

# Model names as sessions record them: the ones with a window of their own, others, none, odd ones.
MODELS = (
    st.none()
    | st.sampled_from(["gemini-2.5-pro", "gemini-2.5-flash", "", *MODEL_LIMITS])
    | st.text(max_size=4)
)
COUNTS = st.integers(min_value=-5, max_value=2**40)


@st.composite
def requests(draw: Any) -> tuple[list[str | None], list[list[int | None]], list[bool]]:
    """A session's requests as the engine holds them: each one's model, ``TOKEN_KEYS`` (a list each; every
    request has an input) and whether it is live."""
    n = draw(st.integers(min_value=0, max_value=12))
    models = draw(st.lists(MODELS, min_size=n, max_size=n))
    tokens = [draw(st.lists(COUNTS, min_size=n, max_size=n))]
    tokens += [draw(st.lists(st.none() | COUNTS, min_size=n, max_size=n)) for _ in TOKEN_KEYS[1:]]
    live = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return models, tokens, live


@given(st.lists(MODELS, max_size=12))
def test_the_model_fill_is_the_engines(models: list[str | None]) -> None:
    assert usage.filled(list(models)) == tally._filled(list(models))
    assert usage._filled is usage.filled


@given(st.lists(st.none() | st.floats(min_value=0, max_value=1e4, allow_nan=False), max_size=20))
def test_the_known_cost_is_the_engines(costs: list[float | None]) -> None:
    got = usage.known_cost(costs)
    assert got == tally.known_cost(costs)
    priced = sum(c is not None for c in costs)
    assert got[0] == usage.known_sum(got[0] or 0.0, priced, got[1])


@given(requests())
def test_the_request_figures_are_the_engines(
    made: tuple[list[str | None], list[list[int | None]], list[bool]],
) -> None:
    models, tokens, live = made
    row = usage.request_figures(models, tokens, live)
    assert row == tally.request_figures(models, tokens, live)
    assert row["context_limit"] == max(
        (MODEL_LIMITS.get(m or "", DEFAULT_TOKEN_LIMIT) for m in models), default=DEFAULT_TOKEN_LIMIT
    )
    assert row["context_share"] == usage.context_share(row["peak_context"], row["context_limit"])
