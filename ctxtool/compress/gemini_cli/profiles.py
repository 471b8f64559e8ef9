"""Gemini CLI compression behaviour by era: one frozen profile per stretch of the upstream history.

The port in ``ctxtool.compress.gemini_cli.chat_compression`` branches on these fields, never on a profile's
name, so a new era is a new table row. Dates and commits come from spec/gemini-cli-compression.md section 2
(timeline), section 3 (constants), section 7 (estimator history) and section 13.1 (truncation formatters). A
profile describes the state at its ``since`` commit; smaller changes inside a range are named in
``description``.

No I/O, no imports beyond the standard library and ctxtool.common.errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ctxtool.common.errors import UsageError

SplitRule = Literal["index_after_fraction", "compress_split_point_pre", "compress_split_point"]
Truncation = Literal["none", "lines", "head_tail"]
NewCount = Literal["json_length", "estimate"]

# The estimator eras live with the estimator (below the session layer); the names stay importable here.
from ctxtool.measure.estimator import ESTIMATOR_2025_11_26 as ESTIMATOR_2025_11_26  # noqa: E402
from ctxtool.measure.estimator import ESTIMATOR_2026_01_16 as ESTIMATOR_2026_01_16  # noqa: E402
from ctxtool.measure.estimator import ESTIMATOR_2026_01_30 as ESTIMATOR_2026_01_30  # noqa: E402
from ctxtool.measure.estimator import ESTIMATOR_HEAD as ESTIMATOR_HEAD  # noqa: E402
from ctxtool.measure.estimator import EstimatorSpec as EstimatorSpec  # noqa: E402


@dataclass(frozen=True)
class Profile:
    """One era of ``ChatCompressionService.compress`` / ``GeminiClient.tryCompressChat``."""

    name: str
    since: str  # first day (YYYY-MM-DD) of the era
    until: str | None  # first day of the next era, None for HEAD
    commit: str  # upstream commit that opened the era
    description: str
    default_threshold: float  # of tokenLimit(model); compression when original >= threshold * limit
    split_rule: SplitRule
    preserve_fraction: float  # COMPRESSION_PRESERVE_THRESHOLD; split at 1 - this
    budget_truncation: Truncation  # truncateHistoryToBudget formatter, or none before 08c32f725e
    function_response_token_budget: int
    truncate_lines: int  # COMPRESSION_TRUNCATE_LINES (line formatter only)
    tool_output_subdir: str  # where saveTruncatedToolOutput wrote under the project temp dir
    verification_probe: bool  # 1182168bd9: anchored instruction, probe, EMPTY_SUMMARY status
    truncation_only_fallback: bool  # c276d0c7b6: CONTENT_TRUNCATED when a failure has latched
    noop_on_empty_split: bool  # a3fe9279d8: NOOP when nothing precedes the split
    new_count: NewCount  # how newTokenCount is computed offline
    estimator: EstimatorSpec
    legacy_token_limits: bool  # gemini-1.5-pro 2M etc. before aa480e5fbb (2026-01-09)
    prompt_version: Literal["v4", "v6"]  # structure of the system prompt the era used
    coalesce_curated: bool  # 3818efbbfb: getHistory(true) strips thoughts and merges roles
    head_valid_content: bool  # eaa30429a7: empty-text parts with payload keys and empty model turns ok
    compression_alias: bool  # e50bf6adad: summarizer runs on a chat-compression-* alias, not the chat model
    model_configs: bool  # 0.61.0: the alias goes through the model chain (customtools, chat-base-3 config)
    env_ack_turn: bool  # env turn followed by a "Got it. Thanks for the context!" model turn (< ed0d1a0ba3)


_HEAD = Profile(
    name="gemini-cli@latest",
    since="2026-08-19",
    until=None,
    commit="5411f113ca",
    description="HEAD: threshold 0.5, budget truncation head 20%/tail 80%, probe, truncation-only fallback",
    default_threshold=0.5,
    split_rule="compress_split_point",
    preserve_fraction=0.3,
    budget_truncation="head_tail",
    function_response_token_budget=50_000,
    truncate_lines=30,
    tool_output_subdir="tool-outputs",
    verification_probe=True,
    truncation_only_fallback=True,
    noop_on_empty_split=True,
    new_count="estimate",
    estimator=ESTIMATOR_HEAD,
    legacy_token_limits=False,
    prompt_version="v6",
    coalesce_curated=True,
    head_valid_content=True,
    compression_alias=True,
    model_configs=True,
    env_ack_turn=False,
)


def _era(**changes: object) -> Profile:
    from dataclasses import replace

    # Only HEAD (0.61.0) is checked against the real model chain; older eras call the alias's own model.
    changes.setdefault("model_configs", False)
    return replace(_HEAD, **changes)  # type: ignore[arg-type]


# What the eras before 0.20 (e1d2653a7a) share: no budget truncation, no probe or fallback, the new count
# by JSON length, the first estimator and token limits, the v4 prompt, no curation changes, the chat model.
_BEFORE_0_20: dict[str, object] = {
    "budget_truncation": "none",
    "verification_probe": False,
    "truncation_only_fallback": False,
    "new_count": "json_length",
    "estimator": ESTIMATOR_2025_11_26,
    "legacy_token_limits": True,
    "prompt_version": "v4",
    "coalesce_curated": False,
    "head_valid_content": False,
    "compression_alias": False,
}

_ALL: tuple[Profile, ...] = (
    _era(
        name="gemini-cli@0.3",
        since="2025-08-27",
        until="2025-09-18",
        commit="cd2e237c73",
        description="0.7, findIndexAfterFraction then skip to a non-tool user turn; inflation check",
        default_threshold=0.7,
        split_rule="index_after_fraction",
        **_BEFORE_0_20,
        noop_on_empty_split=False,
        env_ack_turn=True,
    ),
    _era(
        name="gemini-cli@0.7",
        since="2025-09-18",
        until="2025-09-27",
        commit="853ae56e7e",
        description="0.7 threshold, findCompressSplitPoint counting the candidate before the check",
        default_threshold=0.7,
        split_rule="compress_split_point_pre",
        **_BEFORE_0_20,
        noop_on_empty_split=False,
        env_ack_turn=True,
    ),
    _era(
        name="gemini-cli@0.10",
        since="2025-10-14",
        until="2025-10-30",
        commit="a3fe9279d8",
        description="0.7 threshold, HEAD split rule, NOOP on empty split, new count = JSON length / 4",
        default_threshold=0.7,
        **_BEFORE_0_20,
    ),
    _era(
        name="gemini-cli@0.13",
        since="2025-10-30",
        until="2025-11-14",
        commit="68afb7200e",
        description="default threshold 0.2 (v0.13-v0.16); otherwise as 0.10",
        default_threshold=0.2,
        **_BEFORE_0_20,
    ),
    _era(
        name="gemini-cli@0.20",
        since="2025-11-26",
        until="2026-01-18",
        commit="e1d2653a7a",
        description="threshold 0.5 (c7b5dcd28f), new count by estimateTokenCountSync, no budget truncation",
        budget_truncation="none",
        verification_probe=False,
        truncation_only_fallback=False,
        estimator=ESTIMATOR_2025_11_26,
        legacy_token_limits=True,
        prompt_version="v4",
        coalesce_curated=False,
        head_valid_content=False,
    ),
    _era(
        name="gemini-cli@0.26-pre-probe",
        since="2026-01-18",
        until="2026-01-20",
        commit="08c32f725e",
        description="reverse token budget with the last-30-lines formatter and hi-fi input, no probe yet",
        budget_truncation="lines",
        tool_output_subdir="",
        verification_probe=False,
        truncation_only_fallback=False,
        estimator=ESTIMATOR_2026_01_16,
        prompt_version="v4",
        coalesce_curated=False,
        head_valid_content=False,
    ),
    _era(
        name="gemini-cli@0.26",
        since="2026-01-20",
        until="2026-02-06",
        commit="1182168bd9",
        description="anchored instruction + verification probe, line-based budget truncation",
        budget_truncation="lines",
        tool_output_subdir="",
        truncation_only_fallback=False,
        estimator=ESTIMATOR_2026_01_16,
        coalesce_curated=False,
        head_valid_content=False,
    ),
    _era(
        name="gemini-cli@0.29",
        since="2026-02-06",
        until="2026-02-19",
        commit="28805a4b2d",
        description="budget truncation keeps head 20% / tail 80% of 40,000 chars; failed latch gives NOOP",
        truncation_only_fallback=False,
        estimator=ESTIMATOR_2026_01_30,
        coalesce_curated=False,
        head_valid_content=False,
    ),
    _era(
        name="gemini-cli@0.31",
        since="2026-02-19",
        until="2026-05-01",
        commit="c276d0c7b6",
        description="truncation-only fallback (CONTENT_TRUNCATED) once an automatic attempt has inflated",
        estimator=ESTIMATOR_2026_01_30,
        coalesce_curated=False,
        head_valid_content=False,
    ),
    _HEAD,
)

PROFILES: dict[str, Profile] = {p.name: p for p in _ALL}
DEFAULT_PROFILE = _HEAD.name


def get_profile(name: str) -> Profile:
    """The profile called ``name``; UsageError listing the valid names otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(PROFILES)
        raise UsageError(f"unknown Gemini CLI profile {name!r}", f"Use one of: {valid}") from None
