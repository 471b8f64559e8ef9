"""How ctxtool words a count for people: ``1 file``, ``2 files``, ``1,234 requests``: the one plural helper
every message uses, so no text says ``1 requests`` or ``file(s)``. Standard library only.
"""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` (with thousands separators) and ``noun``, in the plural unless ``count`` is 1.

    ``many`` is the plural when adding an ``s`` is wrong: ``plural(n, "entry", "entries")``."""
    return f"{count:,} {noun if count == 1 else many or noun + 's'}"
