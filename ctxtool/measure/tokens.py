"""Context-window limits of Gemini models, as Gemini CLI's ``tokenLimit()`` knows them, and what a recorded
response counts (its ``total``, its uncached ``input``): one table and one accounting for every layer.
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


# ---------------------------------------------------------------------------------------------- accounting
# Gemini CLI records ``tokens = {input, output, cached, thoughts, tool, total}`` per response
# (chatRecordingService.ts ``recordMessageTokens``): ``input`` is the whole prompt (``promptTokenCount``),
# ``cached`` the part of it served from the cache, ``total`` is ``totalTokenCount ?? 0``.
# The counts Gemini CLI records per response (``TokensSummary`` in ctxtool.session.schema), in its order.
TOKEN_KEYS: tuple[str, ...] = ("input", "output", "cached", "thoughts", "tool", "total")

# The report's token fields, in the order ``stats`` writes them: ``input`` without the cached tokens (as
# ccusage counts it), ``prompt_tokens`` the whole prompt (Gemini CLI's ``input``), so that input + cached +
# output + thoughts + tool = total.
REPORT_TOKEN_KEYS = ("input", "output", "cached", "prompt_tokens", "thoughts", "tool", "total")


def cache_ratio(cached: int, prompt: int) -> float | None:
    """The share of a prompt served from the cache, ``cached / prompt`` of the same rows' sums (the prompt
    holds the cached tokens); None without prompt tokens. For rows, roll-ups, groups and totals alike."""
    return cached / prompt if prompt > 0 else None


def token_count(value: object) -> int:
    """A token count as recorded: an int as it is, a float holding an integer as that int; anything else
    (missing, null, a bool, a string, a fraction) counts 0."""
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return 0


# What a response's ``total`` adds up, by their recorded names (chatRecordingTypes.ts: total = input +
# output + thoughts + tool); ``cached`` is part of ``input``, never added again. The frames sum these columns.
TOTAL_PARTS = ("input", "output", "thoughts", "tool")


def parts_total(prompt: int, output: int, thoughts: int, tool: int) -> int:
    """The sum of a response's ``TOTAL_PARTS``: its prompt (cached included), output, thoughts and tool."""
    return prompt + output + thoughts + tool


def request_total(recorded: int | None, prompt: int, output: int, thoughts: int, tool: int) -> int:
    """A response's total: the recorded ``total`` when it is above 0, else the sum of its parts (a recorded 0
    or a missing total means the API did not say). A total that disagrees with its parts is kept."""
    if recorded is not None and recorded > 0:
        return recorded
    return parts_total(prompt, output, thoughts, tool)


def total_disagrees(total: int, prompt: int, output: int, thoughts: int, tool: int) -> bool:
    """Whether a response's total (``request_total``'s) is not the sum of its parts: only a recorded total
    above 0 that the parts contradict."""
    return total != parts_total(prompt, output, thoughts, tool)


def report_tokens(tokens: object) -> dict[str, int] | None:
    """A recorded ``tokens`` object as the reports count it (``REPORT_TOKEN_KEYS``), or None when it is not
    an object (no request was recorded). ``input`` is the prompt without the cached tokens."""
    if not isinstance(tokens, dict):
        return None
    prompt, output, cached, thoughts, tool = (
        token_count(tokens.get(k)) for k in ("input", "output", "cached", "thoughts", "tool")
    )
    recorded = tokens.get("total")
    return {
        "input": prompt - cached,
        "output": output,
        "cached": cached,
        "prompt_tokens": prompt,
        "thoughts": thoughts,
        "tool": tool,
        "total": request_total(token_count(recorded), prompt, output, thoughts, tool),
    }


def describe_total_mismatches(files: list[tuple[str, int]]) -> str:
    """The one warning line naming the files (file, count) whose recorded totals disagree with their parts."""
    from ctxtool.common.wording import plural

    count = sum(n for _, n in files)
    named = ", ".join(f"{path} ({n})" for path, n in files)
    return (
        f"{plural(count, 'response')} {'records' if count == 1 else 'record'} a total other than input +"
        f" output + thoughts + tool; the recorded total is counted: {named}"
    )
