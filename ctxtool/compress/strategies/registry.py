"""The registry of compaction strategies: names to strategies. The agents' modules never import it
(they import ``base``); it imports them when asked for one."""

from __future__ import annotations

from ctxtool.common.errors import UsageError
from ctxtool.compress.strategies.base import Strategy
from ctxtool.compress.strategies.gemini_cli import GeminiCliStrategy

STRATEGY_NAMES = ("gemini-cli", "kode", "pi", "openclaw", "codex")


def strategy_names() -> list[str]:
    """Every name ``get_strategy`` accepts, except the ``gemini-cli:<profile>`` forms."""
    from ctxtool.compress.strategies.kode import RETENTION_DESCRIPTIONS

    return [*STRATEGY_NAMES, *(f"kode:{k}" for k in RETENTION_DESCRIPTIONS)]


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name`` (UsageError when unknown)."""
    base, _, variant = name.partition(":")
    if base == "gemini-cli":
        return GeminiCliStrategy(variant or None)
    if base == "kode":
        from ctxtool.compress.strategies.kode import RETENTION_DESCRIPTIONS, KodeAutoCompact, KodeRetention

        if variant in RETENTION_DESCRIPTIONS:
            return KodeRetention(variant)
        if not variant:
            return KodeAutoCompact()
    if not variant and base in ("pi", "openclaw"):
        from ctxtool.compress.strategies.openclaw import OpenClawStrategy
        from ctxtool.compress.strategies.pi import PiStrategy

        return PiStrategy() if base == "pi" else OpenClawStrategy()
    if not variant and base == "codex":
        from ctxtool.compress.strategies.codex import CodexStrategy

        return CodexStrategy()
    raise UsageError(
        f"unknown compaction strategy {name!r}",
        f"Use one of {', '.join(strategy_names())}, or gemini-cli:<profile>",
    )
