"""Context-window limits of Gemini models, as Gemini CLI's ``tokenLimit()`` knows them.

Lives at the bottom layer so that both the frames (context share) and the compression port use one table.
"""

from __future__ import annotations

# packages/core/src/core/tokenLimits.ts @ d4c5333dcf (2026-04-23): every model string maps to the default
# except the two Gemma 4 models.
DEFAULT_TOKEN_LIMIT = 1_048_576
GEMMA_4_TOKEN_LIMIT = 256_000
MODEL_LIMITS: dict[str, int] = {
    "gemma-4-31b-it": GEMMA_4_TOKEN_LIMIT,
    "gemma-4-26b-a4b-it": GEMMA_4_TOKEN_LIMIT,
}

# DEFAULT_COMPRESSION_TOKEN_THRESHOLD (chatCompressionService.ts): compression fires at this share.
COMPRESSION_THRESHOLD = 0.5


def token_limit(model: str | None) -> int:
    """Gemini CLI's ``tokenLimit(model)`` at HEAD (tokenLimits.ts @ d4c5333dcf)."""
    return MODEL_LIMITS.get(model or "", DEFAULT_TOKEN_LIMIT)
