"""Gemini CLI compression behaviour by era: one frozen profile per stretch of the upstream history.

The port in ``ctxtool.compress.gemini_cli.chat_compression`` branches on these fields, never on a profile's
name, so a new era is a new table row. Dates and commits come from spec/gemini-cli-compression.md section 2
(timeline), section 3 (constants), section 7 (estimator history) and section 13.1 (truncation formatters). A
profile describes the state at its ``since`` commit; smaller changes inside a range are named in
``description``.

No I/O, no imports beyond the standard library and ctxtool.common.errors."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

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
    """One era of ``ChatCompressionService.compress`` / ``GeminiClient.tryCompressChat``; each behaviour
    defaults to HEAD's."""

    name: str
    since: str  # first day (YYYY-MM-DD) of the era
    until: str | None  # first day of the next era, None for HEAD
    commit: str  # upstream commit that opened the era
    description: str
    default_threshold: float = 0.5  # of tokenLimit(model); compression when original >= threshold * limit
    split_rule: SplitRule = "compress_split_point"
    budget_truncation: Truncation = "head_tail"  # truncateHistoryToBudget formatter, none before 08c32f725e
    tool_output_subdir: str = "tool-outputs"  # where saveTruncatedToolOutput wrote under the project temp dir
    verification_probe: bool = True  # 1182168bd9: anchored instruction, probe, EMPTY_SUMMARY status
    truncation_only_fallback: bool = True  # c276d0c7b6: CONTENT_TRUNCATED when a failure has latched
    noop_on_empty_split: bool = True  # a3fe9279d8: NOOP when nothing precedes the split
    new_count: NewCount = "estimate"  # how newTokenCount is computed offline
    estimator: EstimatorSpec = ESTIMATOR_HEAD
    legacy_token_limits: bool = False  # gemini-1.5-pro 2M etc. before aa480e5fbb (2026-01-09)
    prompt_version: Literal["v4", "v6"] = "v6"  # structure of the system prompt the era used
    coalesce_curated: bool = True  # 3818efbbfb: getHistory(true) strips thoughts and merges roles
    head_valid_content: bool = True  # eaa30429a7: empty-text parts with payload keys, empty model turns ok
    compression_alias: bool = True  # e50bf6adad: summarizer on a chat-compression-* alias, not the chat model
    model_configs: bool = True  # 0.61.0: the alias goes through the model chain (customtools, chat-base-3)
    env_ack_turn: bool = False  # env turn then a "Got it. Thanks for the context!" model turn (< ed0d1a0ba3)


_HEAD = Profile(
    name="gemini-cli@latest",
    since="2026-08-19",
    until=None,
    commit="5411f113ca",
    description="HEAD: threshold 0.5, budget truncation head 20%/tail 80%, probe, truncation-only fallback",
)


# The eras before HEAD, newest first, each as the one after it with that one's changes undone.
_UNDONE: tuple[dict[str, Any], ...] = (
    {
        "name": "gemini-cli@0.31",
        "since": "2026-02-19",
        "until": "2026-05-01",
        "commit": "c276d0c7b6",
        "description": "truncation-only fallback (CONTENT_TRUNCATED) once an automatic attempt has inflated",
        "estimator": ESTIMATOR_2026_01_30,
        "coalesce_curated": False,
        "head_valid_content": False,
        # Only HEAD (0.61.0) is checked against the real model chain; older eras call the alias's own model.
        "model_configs": False,
    },
    {
        "name": "gemini-cli@0.29",
        "since": "2026-02-06",
        "until": "2026-02-19",
        "commit": "28805a4b2d",
        "description": "budget truncation keeps head 20% / tail 80% of 40,000 chars; failed latch gives NOOP",
        "truncation_only_fallback": False,
    },
    {
        "name": "gemini-cli@0.26",
        "since": "2026-01-20",
        "until": "2026-02-06",
        "commit": "1182168bd9",
        "description": "anchored instruction + verification probe, line-based budget truncation",
        "budget_truncation": "lines",
        "tool_output_subdir": "",
        "estimator": ESTIMATOR_2026_01_16,
    },
    {
        "name": "gemini-cli@0.26-pre-probe",
        "since": "2026-01-18",
        "until": "2026-01-20",
        "commit": "08c32f725e",
        "description": "reverse token budget with the last-30-lines formatter and hi-fi input, no probe yet",
        "verification_probe": False,
        "prompt_version": "v4",
    },
    {
        "name": "gemini-cli@0.20",
        "since": "2025-11-26",
        "until": "2026-01-18",
        "commit": "e1d2653a7a",
        "description": (
            "threshold 0.5 (c7b5dcd28f), new count by estimateTokenCountSync, no budget truncation"
        ),
        "budget_truncation": "none",
        "tool_output_subdir": "tool-outputs",
        "estimator": ESTIMATOR_2025_11_26,
        "legacy_token_limits": True,
    },
    {
        "name": "gemini-cli@0.13",
        "since": "2025-10-30",
        "until": "2025-11-14",
        "commit": "68afb7200e",
        "description": "default threshold 0.2 (v0.13-v0.16); otherwise as 0.10",
        "default_threshold": 0.2,
        "new_count": "json_length",
        "compression_alias": False,
    },
    {
        "name": "gemini-cli@0.10",
        "since": "2025-10-14",
        "until": "2025-10-30",
        "commit": "a3fe9279d8",
        "description": "0.7 threshold, HEAD split rule, NOOP on empty split, new count = JSON length / 4",
        "default_threshold": 0.7,
    },
    {
        "name": "gemini-cli@0.7",
        "since": "2025-09-18",
        "until": "2025-09-27",
        "commit": "853ae56e7e",
        "description": "0.7 threshold, findCompressSplitPoint counting the candidate before the check",
        "split_rule": "compress_split_point_pre",
        "noop_on_empty_split": False,
        "env_ack_turn": True,
    },
    {
        "name": "gemini-cli@0.3",
        "since": "2025-08-27",
        "until": "2025-09-18",
        "commit": "cd2e237c73",
        "description": "0.7, findIndexAfterFraction then skip to a non-tool user turn; inflation check",
        "split_rule": "index_after_fraction",
    },
)


def _eras(head: Profile, undone: Iterable[dict[str, Any]]) -> tuple[Profile, ...]:
    eras = [head]
    for changes in undone:
        eras.insert(0, replace(eras[0], **changes))
    return tuple(eras)  # oldest first


PROFILES: dict[str, Profile] = {p.name: p for p in _eras(_HEAD, _UNDONE)}
DEFAULT_PROFILE = _HEAD.name


def get_profile(name: str) -> Profile:
    """The profile called ``name``; UsageError listing the valid names otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(PROFILES)
        raise UsageError(f"unknown Gemini CLI profile {name!r}", f"Use one of: {valid}") from None
