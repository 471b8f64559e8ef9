"""Gemini CLI's own compaction as a strategy beside the others: its trigger is replayed here, its plan is
``ctxtool.compact``'s port."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ctxtool.common.errors import UsageError
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.compress.strategies.base import (
    Job,
    Record,
    Strategy,
    StrategyOptions,
    Trigger,
    first_crossing,
    token_count,
    window,
)


class GeminiCliStrategy(Strategy):
    name = "gemini-cli"
    description = (
        "Gemini CLI's /compress (the reference port, --profile picks the era): <state_snapshot> summary, "
        "ack, newest ~30% of the history verbatim"
    )
    exactness = "exact port; the two model calls are the only non-deterministic step"

    def __init__(self, profile: str | None = None) -> None:
        from ctxtool.compress.gemini_cli.profiles import DEFAULT_PROFILE, get_profile

        self.profile = get_profile(profile or DEFAULT_PROFILE)
        if profile is not None:
            self.name = f"gemini-cli:{profile}"

    def trigger(self, messages: Sequence[Record], options: StrategyOptions) -> Trigger:
        share = options.threshold if options.threshold is not None else self.profile.default_threshold
        limit_tokens = window(
            options, g.token_limit(options.chat_model, legacy=self.profile.legacy_token_limits)
        )
        limit = math.ceil(share * limit_tokens)
        return first_crossing(
            messages,
            lambda t: token_count(t, "input"),
            lambda v: v >= share * limit_tokens,
            measure=f"promptTokenCount >= {share:g} x {limit_tokens}",
            limit=limit,
        )

    def compact(self, job: Job) -> None:
        raise UsageError(
            "the gemini-cli strategy is planned by ctxtool.compact.compact_session",
            "Call compact_session with CompactOptions(strategy='gemini-cli')",
        )
