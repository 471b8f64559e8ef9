"""The costs of a dataset's reports are summed exactly where they are (``export.exact_costs``,
``export.cost_sums``, ``measure.usage.ExactSum``): equal, bit for bit, to ``math.fsum`` of the costs."""

from __future__ import annotations

import math

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.export import cost_sums, exact_costs
from ctxtool.measure.usage import ExactSum

# Costs as ctxtool computes them, and what a damaged dataset may hold: 0, negatives, subnormals, the very
# large (short of where ``math.fsum`` itself overflows).
COSTS = st.one_of(
    st.floats(min_value=1e-12, max_value=1e4),
    st.floats(min_value=-1e300, max_value=1e300),
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e300]),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(COSTS, max_size=60))
def test_a_sum_of_floats_is_fsum(costs: list[float]) -> None:
    made = ExactSum()
    for x in costs:
        made.add(x)
    made.n = len(costs)
    assert math.fsum(made) == math.fsum(costs)
    assert bool(made) == bool(costs)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.one_of(st.none(), COSTS)), max_size=80))
def test_the_buckets_of_each_key_sum_to_fsum(rows: list[tuple[str | None, float | None]]) -> None:
    frame = pl.LazyFrame(
        {"_key": [k for k, _ in rows], "cost": [c for _, c in rows]},
        schema={"_key": pl.String, "cost": pl.Float64},
    )
    got = cost_sums(exact_costs(frame).collect())
    keys = {k for k, c in rows if c is not None}
    assert set(got) == keys
    for key in keys:
        want = [c for k, c in rows if k == key and c is not None]
        assert got[key].n == len(want)
        assert math.fsum(got[key]) == math.fsum(want), (key, want)


def test_sums_merge_exactly() -> None:
    """The days of one week merge (``frames.tally._merge_group``): exact still."""
    parts = [[0.1] * 10, [1e-9, 3.25e-05], [1e16, 1.0, -1e16]]
    made = []
    for costs in parts:
        s = ExactSum()
        for x in costs:
            s.add(x)
        s.n = len(costs)
        made.append(s)
    made[0].extend(made[1])
    made[0].extend(made[2])
    assert math.fsum(made[0]) == math.fsum([x for costs in parts for x in costs])
    assert made[0].n == 15
