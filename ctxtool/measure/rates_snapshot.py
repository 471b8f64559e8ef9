"""Generate the rates shipped in the package (``rates_snapshot.json``) from the installed genai-prices.

The snapshot holds the rates exactly as ``pricing.price_table`` derives them, for every model of the
``google`` provider plus the names given (``bench/rates_snapshot.py``), so a first run need not load the
library's data (about 0.2 s). The days at which a dated price (``StartDateConstraint``) starts cut time into
windows in which no price changes; the snapshot holds the window around the generation day and every later
one. A model whose price depends on the time of day is left out. ``make rates`` writes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, date, datetime, time
from itertools import pairwise
from pathlib import Path
from typing import Any

from ctxtool.measure import pricing

__all__ = ["build", "change_days", "google_model_ids", "write"]


def google_model_ids() -> list[str]:
    """The ``id`` of every model the library lists under the ``google`` provider."""
    from genai_prices import data_snapshot

    provider = data_snapshot.get_snapshot().find_provider(None, pricing.PROVIDER_ID, None)
    return sorted(model.id for model in provider.models)


def change_days(names: Iterable[str]) -> tuple[list[date], list[str]]:
    """The UTC days at which a dated price of a model of ``names`` starts, and the names whose prices depend
    on the time of day (or on a constraint of a kind not known here), which no snapshot can hold."""
    from genai_prices import data_snapshot
    from genai_prices.types import StartDateConstraint

    snapshot = data_snapshot.get_snapshot()
    days: set[date] = set()
    timed: list[str] = []
    for name in sorted(set(names)):
        try:
            _, info = snapshot.find_provider_model(name, None, pricing.PROVIDER_ID, None)
        except LookupError:
            continue
        conditional = info.prices if isinstance(info.prices, list) else []
        constraints = [c.constraint for c in conditional] + [v.constraint for v in info.price_variants or ()]
        dated = [c for c in constraints if c is not None]
        starts = [c.start_date for c in dated if isinstance(c, StartDateConstraint)]
        if len(starts) == len(dated):
            days.update(starts)
        else:
            timed.append(name)
    return sorted(days), timed


def build(names: Iterable[str], day: date) -> dict[str, Any]:
    """The snapshot document for the ``google`` models and ``names``, generated on ``day`` (UTC)."""
    from genai_prices import __version__ as version

    library = pricing.installed_genai_prices(version)
    if library is None:
        raise RuntimeError(
            f"genai-prices {version} is imported but its genai_prices-{version}.dist-info folder is not "
            "beside it: install it with pip (not as an editable or egg install) and run `make rates` again"
        )
    wanted = sorted(set(names) | set(google_model_ids()))
    days, timed = change_days(wanted)
    covered = [n for n in wanted if n not in timed]
    starts = [d for d in days if d <= day]
    bounds: list[date | None] = [starts[-1] if starts else None, *(d for d in days if d > day), None]
    windows = []
    for index, (start, until) in enumerate(pairwise(bounds)):
        # the first window at the generation day itself; the later ones at their first day
        at = datetime.combine(day if index == 0 or start is None else start, time(12), tzinfo=UTC)
        table = pricing.price_table(covered, at, memo=False)
        windows.append(
            {
                "from": start.isoformat() if start else None,
                "until": until.isoformat() if until else None,
                "unknown": list(table.unknown),
                "rates": pricing.rates_to_doc(table.rates),
            }
        )
    return {
        "format": pricing.SNAPSHOT_FORMAT,
        "generated": day.isoformat(),
        "genai_prices": library,
        "source": pricing.pricing_source(),
        "provider": pricing.PROVIDER_ID,
        "names": covered,
        "windows": windows,
    }


def write(doc: dict[str, Any], path: Path = pricing.SNAPSHOT_PATH) -> None:
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
