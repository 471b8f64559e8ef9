"""Gemini CLI's empty-response nudge is context, not a prompt and not a user request (issue 11, item 2)."""

from __future__ import annotations

from ctxtool.compress.summarize.facts import is_synthetic_user_text, real_user_prompts
from ctxtool.session.columns import classify_user
from ctxtool.session.schema import EMPTY_RESPONSE_NUDGE_PREFIX

# The whole text Gemini CLI 0.61.0 sends (useGeminiStream.ts, "nudgeMessage").
NUDGE = (
    "[System: You successfully executed a tool but returned an empty response. Please analyze the tool "
    "output and explain your progress or final answer.]"
)


def test_the_prefix_is_the_start_of_the_nudge() -> None:
    assert NUDGE.startswith(EMPTY_RESPONSE_NUDGE_PREFIX)


def test_a_nudge_is_not_a_prompt() -> None:
    assert classify_user([{"text": NUDGE}]) == (False, False, False)
    assert classify_user(NUDGE) == (False, False, False)
    assert classify_user([{"text": "[System: something the user typed]"}]) == (True, False, False)


def test_a_nudge_is_not_a_user_request() -> None:
    assert is_synthetic_user_text(NUDGE)
    history = [
        {"role": "user", "parts": [{"text": "list the files please"}]},
        {"role": "model", "parts": [{"text": ""}]},
        {"role": "user", "parts": [{"text": NUDGE}]},
    ]
    assert [typed for _, typed, _ in real_user_prompts(history)] == ["list the files please"]
