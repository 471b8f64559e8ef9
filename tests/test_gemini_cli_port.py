"""The Gemini CLI compression port against hand-computed expectations from spec/gemini-cli-compression.md."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from ctxtool.common.errors import UsageError
from ctxtool.common.jsvalue import js_stringify
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.compress.gemini_cli.chat_compression import CompressionStatus
from ctxtool.compress.gemini_cli.profiles import (
    DEFAULT_PROFILE,
    ESTIMATOR_2025_11_26,
    PROFILES,
    Profile,
    get_profile,
)
from ctxtool.compress.summarizer import ModelCall

REAL_SESSIONS = Path(__file__).resolve().parents[2] / "shared" / "real-sessions"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def model(text: str) -> dict[str, Any]:
    return {"role": "model", "parts": [{"text": text}]}


def call(name: str, **extra: Any) -> dict[str, Any]:
    return {"role": "model", "parts": [{"functionCall": {"name": name, "args": {}, **extra}}]}


def response(name: str, resp: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "parts": [{"functionResponse": {"name": name, "response": resp, **extra}}]}


class FakeSummarizer:
    """Deterministic: answers each call kind with a fixed text and records what it was asked."""

    name = "fake"
    deterministic = True

    def __init__(self, summary: str | None = "S" * 40, probe: str | None = "") -> None:
        self.answers = {"summary": summary, "probe": probe}
        self.calls: list[ModelCall] = []

    def generate(self, call: ModelCall) -> str | None:
        self.calls.append(call)
        return self.answers[call.kind]


class RefusingSummarizer:
    name = "refusing"
    deterministic = True

    def generate(self, call: ModelCall) -> str | None:
        raise AssertionError("no model call expected on this path")


# --------------------------------------------------------------------------------------------------
# Split point (section 5)

FIVE = [
    user("This is the first message."),
    model("This is the second message."),
    user("This is the third message."),
    model("This is the fourth message."),
    user("This is the fifth message."),
]


def test_five_message_fixture_lengths_and_split() -> None:
    from ctxtool.common.jsvalue import json_length

    assert [json_length(c) for c in FIVE] == [63, 65, 63, 65, 63]  # spec section 15, not 66/68/...
    assert g.find_compress_split_point(FIVE, 0.5) == 4  # HEAD: cumulative excludes the candidate
    assert g.find_compress_split_point(FIVE, 0.5, count_candidate_first=True) == 2  # 853ae56e7e variant


def test_split_compresses_everything_after_a_model_text_turn() -> None:
    assert g.find_compress_split_point([*FIVE, model("done")], 0.99) == 6
    # Ending on a functionCall: fall back to the last plain user turn before the target.
    assert g.find_compress_split_point([*FIVE, call("ls")], 0.99) == 4


def test_split_skips_function_responses_even_empty_ones() -> None:
    history = [
        user("a" * 10),
        model("b" * 100),
        {"role": "user", "parts": [{"functionResponse": {}}]},
        call("x"),
    ]
    # {} is truthy in JS, so index 2 is no candidate; the fallback is index 0.
    assert g.find_compress_split_point(history, 0.5) == 0


@pytest.mark.parametrize("fraction", [0, 1, -0.5, 1.5])
def test_fraction_out_of_range(fraction: float) -> None:
    with pytest.raises(ValueError, match=r"^Fraction must be between 0 and 1$"):
        g.find_compress_split_point(FIVE, fraction)
    with pytest.raises(ValueError, match=r"^Fraction must be between 0 and 1$"):
        g.find_index_after_fraction(FIVE, fraction)


def test_find_index_after_fraction_and_legacy_skip() -> None:
    # running lengths 63, 128, 191 reach 0.5 * 319 = 159.5 at index 2
    assert g.find_index_after_fraction(FIVE, 0.5) == 2
    assert g.find_index_after_fraction([], 0.5) == 0
    # JSON lengths 237, 39, 86, 38 (total 400)
    history = [user("x" * 200), model("y"), response("ls", {"output": "z"}), user("w")]
    assert g.find_index_after_fraction(history, 0.5) == 0
    assert g.find_index_after_fraction(history, 0.6) == 1  # 276 >= 240
    assert g.find_index_after_fraction(history, 0.7) == 2  # 362 >= 280
    # advance past the model turn and the all-functionResponse user turn
    assert g.legacy_split_point(history, 0.6) == 3
    assert g.legacy_split_point(history, 0.5) == 0


# --------------------------------------------------------------------------------------------------
# Token estimation (section 7)


def test_estimate_text() -> None:
    assert g.estimate_token_count([{"text": "abcd"}]) == 1
    assert g.estimate_token_count([{"text": "abc"}]) == 0
    assert g.estimate_token_count([{"text": "中文"}]) == 3  # 2 units x 1.5
    assert g.estimate_token_count([{"text": "😀"}]) == 3  # 2 UTF-16 units x 1.5
    assert g.estimate_token_count([{"text": "ab"}, {"text": "cd"}]) == 1  # floor once, at the end
    assert g.estimate_token_count([{"text": "中" * 100_000}]) == 150_000  # exactly 100,000: per unit
    assert g.estimate_token_count([{"text": "中" * 100_001}]) == 25_000  # above: length / 4
    # charsPerToken 3: six sequential additions of 1/3 give 1.9999999999999998, twelve give exactly 4.0
    assert g.estimate_token_count([{"text": "abcdef"}], chars_per_token=3) == 1
    assert g.estimate_token_count([{"text": "a" * 12}], chars_per_token=3) == 4
    assert g.estimate_token_count([{"text": "x", "thought": True}]) == 0


def test_estimate_non_text_parts() -> None:
    fc = {"functionCall": {"name": "ls", "args": {"a": 1.0}}}
    assert js_stringify(fc) == '{"functionCall":{"name":"ls","args":{"a":1}}}'  # 45 units, not 47
    assert g.estimate_token_count([fc]) == 11
    fr = {"functionResponse": {"name": "read", "response": {"output": "abcd"}}}
    # name 4/4 + len('{"output":"abcd"}') 17/4 = 5.25
    assert g.estimate_token_count([fr]) == 5
    assert g.estimate_token_count([{"functionResponse": {"name": "ab", "response": "abcdef"}}]) == 2
    assert g.estimate_token_count([{"inlineData": {"mimeType": "image/png", "data": "x" * 999}}]) == 3000
    assert g.estimate_token_count([{"fileData": {"mimeType": "application/pdf", "fileUri": "f"}}]) == 25_800
    assert g.estimate_token_count([{}]) == 0  # "{}" is 2 units
    assert g.estimate_token_count([]) == 0


def test_estimate_nested_parts_are_floored_and_depth_limited() -> None:
    inner = {"functionResponse": {"name": "", "response": "abc", "parts": [{"text": "ab"}, {"text": "ab"}]}}
    # 3/4 + floor(0.5 + 0.5) = 1.75 -> 1
    assert g.estimate_token_count([inner]) == 1
    deep: dict[str, Any] = {"text": "abcd" * 10}
    for _ in range(5):
        deep = {"functionResponse": {"name": "", "parts": [deep]}}
    assert g.estimate_token_count([deep]) == 0  # beyond depth 3 counts nothing


def test_older_estimator_accumulates_sequentially() -> None:
    # Thirty sequential additions of 1.3 give 38.99999999999999, so the floor is 38 (30 * 1.3 = 39.0).
    assert g.estimate_token_count([{"text": "中" * 30}], estimator=ESTIMATOR_2025_11_26) == 38
    # Code points, not units, in that era: one emoji is one increment.
    assert g.estimate_token_count([{"text": "😀" * 10}], estimator=ESTIMATOR_2025_11_26) == 13


# --------------------------------------------------------------------------------------------------
# Limits and aliases (sections 2.3, 9.6)


def test_token_limit() -> None:
    assert g.token_limit("gemini-2.5-pro") == 1_048_576
    assert g.token_limit("gemini-1.5-pro") == 1_048_576
    assert g.token_limit("gemma-4-31b-it") == 256_000
    assert g.token_limit("gemma-4-26b-a4b-it") == 256_000
    assert g.token_limit("gemini-1.5-pro", legacy=True) == 2_097_152
    assert g.token_limit("gemini-2.0-flash-preview-image-generation", legacy=True) == 32_000


@pytest.mark.parametrize(
    ("chat_model", "alias", "resolved"),
    [
        ("gemini-3-pro-preview", "chat-compression-3-pro", "gemini-3-pro-preview"),
        ("gemini-3.1-pro-preview", "chat-compression-3-pro", "gemini-3-pro-preview"),
        ("gemini-3-flash-preview", "chat-compression-3-flash", "gemini-3-flash-preview"),
        ("gemini-3.1-flash-lite", "chat-compression-3.1-flash-lite", "gemini-3.1-flash-lite"),
        ("gemini-2.5-flash-lite", "chat-compression-2.5-flash-lite", "gemini-2.5-flash-lite"),
        ("gemini-2.5-pro", "chat-compression-2.5-pro", "gemini-2.5-pro"),
        ("gemini-2.5-flash", "chat-compression-2.5-flash", "gemini-2.5-flash"),
        ("gemini-3.1-pro-preview-customtools", "chat-compression-default", "gemini-3-pro-preview"),
        ("my-local-model", "chat-compression-default", "gemini-3-pro-preview"),
    ],
)
def test_compression_alias(chat_model: str, alias: str, resolved: str) -> None:
    assert g.model_to_compression_alias(chat_model) == alias
    assert g.resolve_compression_alias(alias) == resolved
    assert g.summarizer_model(chat_model) == resolved


def test_unknown_alias() -> None:
    with pytest.raises(ValueError, match="unknown compression alias"):
        g.resolve_compression_alias("chat-compression-9")


# --------------------------------------------------------------------------------------------------
# Truncation formatters (section 13.1)


def test_format_truncated_tool_output_head_tail() -> None:
    assert g.format_truncated_tool_output("short", "f.txt", 10) == "short"
    assert g.format_truncated_tool_output("x" * 10, "f.txt", 10) == "x" * 10
    assert g.format_truncated_tool_output("a" * 20 + "b" * 30, "f.txt", 10) == (
        "Output too large. Showing first 2 and last 8 characters. For full output see: f.txt\n"
        "aa\n\n... [40 characters omitted] ...\n\nbbbbbbbb"
    )
    big = g.format_truncated_tool_output("y" * 50_000, "/t/tool-outputs/x_1.txt", 40_000)
    assert big.startswith(
        "Output too large. Showing first 8,000 and last 32,000 characters. "
        "For full output see: /t/tool-outputs/x_1.txt\n"
    )
    assert "\n\n... [10,000 characters omitted] ...\n\n" in big


def test_format_truncated_tool_output_edge_cases() -> None:
    # maxChars 0: head 0 and slice(-0) is the whole string.
    assert g.format_truncated_tool_output("abc", "f", 0) == (
        "Output too large. Showing first 0 and last 0 characters. For full output see: f\n"
        "\n\n... [3 characters omitted] ...\n\nabc"
    )
    # UTF-16 slicing can split a surrogate pair: 6 units, max 3 -> head 0, tail 3.
    out = g.format_truncated_tool_output("😀😀😀", "f", 3)
    assert out.endswith("\n\n... [3 characters omitted] ...\n\n\ude00😀")


def test_format_truncated_tool_output_lines() -> None:
    text = "\n".join(f"line{i}" for i in range(40))
    out = g.format_truncated_tool_output_lines(text, "f.txt", 30)
    assert out == (
        "Output too large. Showing the last 30 of 40 lines. For full output see: f.txt\n...\n"
        + "\n".join(f"line{i}" for i in range(10, 40))
    )
    wide = g.format_truncated_tool_output_lines("a\n" + "w" * 1001, "f", 30)
    assert wide == (
        "Output too large. Showing the last 2 of 2 lines (some long lines truncated). "
        "For full output see: f\n...\na\n" + "w" * 1000 + "... [LINE WIDTH TRUNCATED]"
    )
    single = g.format_truncated_tool_output_lines("z" * 10_005, "f", 30)
    assert single == (
        "Output too large. Showing the last 10,000 characters of the output. For full output see: f\n..."
        + "z" * 10_000
    )


def test_truncated_tool_output_filename() -> None:
    assert g.truncated_tool_output_filename("run_shell_command", 1) == "run_shell_command_1.txt"
    assert g.truncated_tool_output_filename("My Tool!", 2) == "my_tool__2.txt"
    assert g.truncated_tool_output_filename("", 3) == "3.txt"  # every id starts with ""


# --------------------------------------------------------------------------------------------------
# Reverse token budget (section 6)


def test_budget_keeps_newest_and_truncates_older() -> None:
    history = [
        user("go"),
        response("read_file", {"output": "a" * 80_000}),  # 20,000 tokens each
        response("read_file", {"output": "b" * 80_000}),
        response("read_file", {"output": "c" * 80_000}),
    ]
    out = g.truncate_history_to_budget(history, tool_output_dir="/p/tool-outputs")
    assert out.history[2:] == history[2:]  # newest two fit: 40,000 <= 50,000
    assert out.history[0] == history[0]
    assert [s.path for s in out.saved] == ["/p/tool-outputs/read_file_1.txt"]
    assert out.saved[0].text == "a" * 80_000
    assert out.next_truncation_id == 2
    placeholder = out.history[1]["parts"][0]["functionResponse"]["response"]["output"]
    assert placeholder == g.format_truncated_tool_output(
        "a" * 80_000, "/p/tool-outputs/read_file_1.txt", 40_000
    )
    assert history[1]["parts"][0]["functionResponse"]["response"]["output"] == "a" * 80_000  # input untouched


def test_budget_reshapes_every_response_once_over() -> None:
    history = [
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "c1", "name": "grep", "response": {"error": "boom"}}},
                {
                    "functionResponse": {"name": "x", "response": {"content": "hi", "n": 1}},
                    "thoughtSignature": "s",
                },
                {"functionResponse": {"name": "gone"}},  # response undefined: kept as is
                {"text": "between"},
            ],
        },
        response("shell", {"output": "a" * 80}),  # 20 tokens > budget 10: truncated although newest
    ]
    out = g.truncate_history_to_budget(history, tool_output_dir="d", budget=10, first_truncation_id=7)
    newest = out.history[1]["parts"][0]
    assert newest == {"functionResponse": {"name": "shell", "response": {"output": "a" * 80}}}
    parts = out.history[0]["parts"]
    # parts are walked last first, so ids run 8 (x) then 9 (grep)
    assert parts[1] == {
        "functionResponse": {"name": "x", "response": {"output": "hi"}}
    }  # sibling key dropped
    assert parts[0] == {
        "functionResponse": {"id": "c1", "name": "grep", "response": {"output": '{\n  "error": "boom"\n}'}}
    }
    assert parts[2] == {"functionResponse": {"name": "gone"}}
    assert parts[3] == {"text": "between"}
    assert [(s.path, s.truncation_id) for s in out.saved] == [
        ("d/shell_7.txt", 7),
        ("d/x_8.txt", 8),
        ("d/grep_9.txt", 9),
    ]
    assert out.next_truncation_id == 10


# --------------------------------------------------------------------------------------------------
# Session conversion (section 11)


def test_convert_legacy_records() -> None:
    messages = [
        {"id": "i0", "type": "info", "content": "hello"},
        {"id": "u0", "type": "user", "content": "<session_context>\nenv</session_context>"},
        {"id": "u1", "type": "user", "content": "  /help  "},
        {"id": "u2", "type": "user", "content": [{"text": "list files"}]},
        {"id": "u3", "type": "user", "content": [{"text": "   "}]},
        {
            "id": "g1",
            "type": "gemini",
            "content": "Looking.",
            "thoughts": [{"subject": "Plan", "description": "read it"}, {"subject": "", "description": "d2"}],
            "toolCalls": [
                {"id": "c1", "name": "ls", "args": {"p": 1.0}, "result": "a.txt", "status": "success"},
                {
                    "id": "c2",
                    "name": "cat",
                    "args": {},
                    "result": [
                        {"functionResponse": {"id": "c2", "name": "cat", "response": {"output": "x"}}}
                    ],
                },
                {"id": "c3", "name": "rm", "args": {}, "result": None},
                {
                    "id": "c4",
                    "name": "ok",
                    "args": {},
                    "result": {"functionResponse": {"name": "ok", "response": {}}},
                },
            ],
        },
        {"id": "g2", "type": "gemini", "content": ""},
        {"id": "e1", "type": "error", "content": "bad"},
    ]
    turns = g.convert_session_to_client_history(messages)
    assert turns == [
        {"id": "u2", "content": {"role": "user", "parts": [{"text": "list files"}]}},
        {
            "id": "g1",
            "content": {
                "role": "model",
                "parts": [
                    {"text": "**Plan** read it", "thought": True},
                    {"text": "d2", "thought": True},
                    {"text": "Looking."},
                    {"functionCall": {"id": "c1", "name": "ls", "args": {"p": 1.0}}},
                    {"functionCall": {"id": "c2", "name": "cat", "args": {}}},
                    {"functionCall": {"id": "c3", "name": "rm", "args": {}}},
                    {"functionCall": {"id": "c4", "name": "ok", "args": {}}},
                ],
            },
        },
        {
            "id": "g1_response",
            "content": {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": "c1", "name": "ls", "response": {"output": "a.txt"}}},
                    {"functionResponse": {"id": "c2", "name": "cat", "response": {"output": "x"}}},
                    {"functionResponse": {"name": "ok", "response": {}}},
                ],
            },
        },
    ]
    # Conversion copies: mutating the output leaves the records alone.
    turns[1]["content"]["parts"][3]["functionCall"]["id"] = "changed"
    assert messages[5]["toolCalls"][0]["id"] == "c1"


def test_convert_modern_record_uses_content_only() -> None:
    parts = [{"text": "t", "thought": True}, {"functionCall": {"id": "c", "name": "ls", "args": {}}}]
    messages = [
        {"id": "g", "type": "gemini", "content": parts, "toolCalls": [{"id": "c", "name": "ls", "args": {}}]}
    ]
    turns = g.convert_session_to_client_history(messages)
    assert turns == [{"id": "g", "content": {"role": "model", "parts": parts}}]  # toolCalls without result


def test_user_content_string_uses_verbose_part_rendering() -> None:
    assert (
        g.part_list_union_to_string([{"functionResponse": {"name": "x"}}, {"text": "a"}])
        == "[Function Response: x]a"
    )
    assert g.part_list_union_to_string({"inlineData": {"mimeType": "image/png"}}) == "<image/png>"
    assert g.part_list_union_to_string({"text": "t", "thought": True}) == "[Thought: true]"
    # A user message made only of an image is not empty, so it is kept.
    turns = g.convert_session_to_client_history(
        [{"id": "u", "type": "user", "content": [{"inlineData": {"mimeType": "image/png", "data": ""}}]}]
    )
    assert len(turns) == 1


def test_derive_stable_id() -> None:
    assert g.derive_stable_id(["environment-context"]) == g.ENVIRONMENT_CONTEXT_ID
    assert g.derive_stable_id(["m1", "1", "0"]) == hashlib.sha256(b"0|1|m1").hexdigest()[:32]
    assert g.derive_stable_id(["b", "a"]) == g.derive_stable_id(["a", "b"])


def test_ensure_stable_tool_ids_pairs_by_name_and_order() -> None:
    turns = [
        {"id": "u", "content": user("go")},
        {
            "id": "m",
            "content": {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "ls", "args": {}}},
                    {"functionCall": {"name": "cat", "args": {}, "id": "keep"}},
                    {"functionCall": {"name": "ls", "args": {"p": 2}}},
                ],
            },
        },
        {
            "id": "m_response",
            "content": {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "cat", "response": {}}},
                    {"functionResponse": {"name": "ls", "response": {}}},
                    {"functionResponse": {"name": "ls", "response": {}}},
                    {"functionResponse": {"name": "orphan", "response": {}}},
                ],
            },
        },
    ]
    g.ensure_stable_tool_ids(turns)
    calls = [p["functionCall"]["id"] for p in turns[1]["content"]["parts"]]
    resps = [p["functionResponse"]["id"] for p in turns[2]["content"]["parts"]]
    ls0 = "synth_ls_" + hashlib.sha256(b"0|1|m").hexdigest()[:32]
    ls2 = "synth_ls_" + hashlib.sha256(b"1|2|m").hexdigest()[:32]
    assert calls == [ls0, "keep", ls2]
    orphan = "synth_orph_orphan_" + hashlib.sha256(b"2|3|m_response").hexdigest()[:32]
    assert resps == ["keep", ls0, ls2, orphan]


# --------------------------------------------------------------------------------------------------
# Curation (section 11.3)


def test_extract_curated_history_drops_invalid_model_runs() -> None:
    bad = {"role": "model", "parts": [{"text": ""}]}
    history = [user("a"), model("ok"), bad, user("b"), model("fine")]
    assert g.extract_curated_history(history) == [user("a"), user("b"), model("fine")]
    turns = [{"id": str(i), "content": c} for i, c in enumerate(history)]
    assert [t["id"] for t in g.extract_curated_history(turns)] == ["0", "3", "4"]


def test_valid_content_head_vs_legacy_rule() -> None:
    with_payload = {"role": "model", "parts": [{"text": "", "functionCall": {"name": "ls"}}]}
    empty_model = {"role": "model", "parts": []}
    assert g.is_valid_content(with_payload)
    assert not g.is_valid_content(with_payload, head_rule=False)
    assert g.is_valid_content(empty_model)
    assert not g.is_valid_content(empty_model, head_rule=False)
    assert not g.is_valid_content({"role": "user", "parts": []})
    assert not g.is_valid_content({"role": "model", "parts": [{}]})
    assert g.is_valid_content({"role": "model", "parts": [{"text": "", "thought": True}]})


def test_strip_thoughts() -> None:
    turns = [
        {
            "id": "a",
            "content": {
                "role": "model",
                "parts": [
                    {"text": "hmm", "thought": True},
                    {"text": "calling"},
                    {"functionCall": {"name": "ls"}},
                    {"functionCall": {"name": "cat"}},
                ],
            },
        },
        {"id": "b", "content": {"role": "model", "parts": [{"text": "only", "thought": True}]}},
        {"id": "c", "content": {"role": "model", "parts": [{"functionCall": {"name": "ls"}}]}},
        {"id": "d", "content": {"role": "user", "parts": []}},
        {"id": "e", "content": {"role": "user"}},
    ]
    out = g.strip_thoughts(turns)
    assert [t["id"] for t in out] == ["a", "c", "e"]
    assert out[0]["content"]["parts"] == [
        {"text": "calling"},
        {"functionCall": {"name": "ls"}, "thoughtSignature": "skip_thought_signature_validator"},
        {"functionCall": {"name": "cat"}},
    ]
    assert out[1] is turns[2]  # no thought: untouched, no signature added
    assert turns[0]["content"]["parts"][0]["thought"] is True  # input untouched


def test_coalesce_consecutive_roles() -> None:
    turns = [
        {"id": "env", "content": user("env")},
        {"id": "u1", "content": user("hi")},
        {"id": "m1", "content": model("yo")},
        {"id": "m2", "content": model("more")},
    ]
    assert g.coalesce_consecutive_roles(turns) == [
        {"id": "env", "content": {"role": "user", "parts": [{"text": "env"}, {"text": "hi"}]}},
        {"id": "m1", "content": {"role": "model", "parts": [{"text": "yo"}, {"text": "more"}]}},
    ]
    no_parts = g.coalesce_consecutive_roles(
        [{"id": "a", "content": {"role": "user"}}, {"id": "b", "content": {"role": "user"}}]
    )
    assert no_parts == [{"id": "a", "content": {"role": "user"}}]


def test_session_to_curated_history_uses_stored_env() -> None:
    env_text = "<session_context>\nstored</session_context>"
    messages = [
        {"id": g.ENVIRONMENT_CONTEXT_ID, "type": "user", "content": [{"text": env_text}]},
        {"id": "u1", "type": "user", "content": "hello"},
        {"id": "g1", "type": "gemini", "content": "hi", "thoughts": [{"subject": "", "description": "x"}]},
    ]
    cs = g.session_to_curated_history(messages, "gemini-3-flash-preview")
    assert not cs.env_synthesized
    # env and first prompt coalesce; the thought part is stripped for a Gemini 3 model
    assert cs.contents == [
        {"role": "user", "parts": [{"text": env_text}, {"text": "hello"}]},
        {"role": "model", "parts": [{"text": "hi"}]},
    ]
    assert cs.turns[0]["id"] == g.ENVIRONMENT_CONTEXT_ID
    legacy_model = g.session_to_curated_history(messages, "gemini-1.5-pro")
    assert len(legacy_model.contents) == 3  # not Gemini 2/3/custom: no strip, no coalesce


def test_session_to_curated_history_synthesises_env() -> None:
    messages = [{"id": "u1", "type": "user", "content": "hello", "timestamp": "2026-03-02T10:00:00.000Z"}]
    cs = g.session_to_curated_history(messages, "gemini-2.5-pro")
    assert cs.env_synthesized
    text = cs.env_turn["content"]["parts"][0]["text"]
    assert text.startswith("<session_context>\n")
    assert text.endswith("</session_context>")
    assert "Monday, March 2, 2026" in text
    given = g.session_to_curated_history(messages, "gemini-2.5-pro", env_turn_text="ENV")
    assert not given.env_synthesized
    assert given.contents == [{"role": "user", "parts": [{"text": "ENV"}, {"text": "hello"}]}]


def test_original_token_count() -> None:
    messages = [
        {"id": "u", "type": "user", "content": "hello"},
        {"id": "g1", "type": "gemini", "content": "a", "tokens": {"input": 120, "output": 3}},
        {"id": "g2", "type": "gemini", "content": "b", "tokens": None},
        {"id": "i", "type": "info", "content": ""},
    ]
    assert g.original_token_count(messages) == 120
    # no tokens: estimate of [env "abcdefgh", "hello", "a", "b"] = (8 + 5 + 1 + 1) / 4
    no_tokens = [{k: v for k, v in m.items() if k != "tokens"} for m in messages]
    assert g.original_token_count(no_tokens, env_turn_text="abcdefgh") == 3


# --------------------------------------------------------------------------------------------------
# The algorithm (section 4): every CompressionStatus


ENV = user("e" * 4)  # 1 token


def history_for_compress() -> list[dict[str, Any]]:
    return [ENV, model("x" * 400), user("y" * 400), model("z" * 400), user("k" * 8), model("m" * 8)]


def test_compressed_layout_calls_and_count() -> None:
    fake = FakeSummarizer(summary="S" * 40, probe="  ")
    r = g.compress(
        history_for_compress(),
        original_token_count=1000,
        model="gemini-2.5-pro",
        summarizer=fake,
        force=True,
        env_turn=ENV,
    )
    assert r.status is CompressionStatus.COMPRESSED
    assert r.split_index == 4
    assert r.kept_history == [user("k" * 8), model("m" * 8)]
    assert r.compressed_history == history_for_compress()[:4]
    assert r.summary == "S" * 40  # blank probe falls back to the first summary
    assert r.new_history == [
        user("S" * 40),
        model("Got it. Thanks for the additional context!"),
        *r.kept_history,
    ]
    # env 1 + summary 10 + ack 42/4 + 2 + 2 = 25.5 -> 25
    assert (r.original_token_count, r.new_token_count) == (1000, 25)
    assert not r.anchored
    assert r.token_limit == 1_048_576
    assert r.threshold == 0.5
    summary_call, probe_call = fake.calls
    assert summary_call.kind == "summary"
    assert summary_call.model == "gemini-2.5-pro"
    assert summary_call.extra["model_config_alias"] == "chat-compression-2.5-pro"
    # The instruction turn: the anchor, a blank line, then the scratchpad sentence (1182168bd9 layout).
    assert summary_call.contents[-1] == user(f"{g.ANCHOR_NEW}\n\n{g.INSTRUCTION_SUFFIX}")
    assert summary_call.contents[:-1] == r.compressed_history
    assert probe_call.contents[-2:] == [model("S" * 40), user(g.PROBE_TEXT)]
    assert probe_call.prompt_id == summary_call.prompt_id + "-verify"


def test_probe_answer_wins_and_is_trimmed_the_js_way() -> None:
    fake = FakeSummarizer(summary="first", probe="\ufeff final \x1c")
    r = g.compress(
        history_for_compress(),
        original_token_count=1000,
        model="gemini-2.5-pro",
        summarizer=fake,
        force=True,
        env_turn=ENV,
    )
    assert r.summary == "final \x1c"  # JS trim keeps U+001C, Python strip would not


def test_anchored_instruction_when_a_snapshot_exists() -> None:
    history = history_for_compress()
    history[1] = model("<state_snapshot>old</state_snapshot>" + "x" * 370)
    fake = FakeSummarizer()
    r = g.compress(history, original_token_count=1000, model="gemini-2.5-pro", summarizer=fake, force=True)
    assert r.anchored
    assert fake.calls[0].contents[-1]["parts"][0]["text"] == f"{g.ANCHOR_EXISTING}\n\n{g.INSTRUCTION_SUFFIX}"


def test_noop_paths() -> None:
    fake = FakeSummarizer()
    empty = g.compress([], original_token_count=10, model="m", summarizer=fake, force=True)
    assert (empty.status, empty.original_token_count, empty.new_token_count) == (CompressionStatus.NOOP, 0, 0)
    below = g.compress(
        history_for_compress(), original_token_count=524_287, model="gemini-2.5-pro", summarizer=fake
    )
    assert (below.status, below.new_token_count) == (CompressionStatus.NOOP, 524_287)
    nothing_before = g.compress(
        [user("a"), call("ls")], original_token_count=10, model="m", summarizer=fake, force=True
    )
    assert nothing_before.status is CompressionStatus.NOOP
    assert nothing_before.split_index == 0
    assert fake.calls == []


def test_threshold_equality_triggers_and_falsy_setting_falls_back() -> None:
    r = g.compress(
        history_for_compress(),
        original_token_count=524_288,
        model="gemini-2.5-pro",
        summarizer=FakeSummarizer(),
        threshold=0,
    )
    assert r.threshold == 0.5
    assert r.status is CompressionStatus.COMPRESSED
    r2 = g.compress(
        history_for_compress(),
        original_token_count=179_199,
        model="gemma-4-31b-it",
        summarizer=FakeSummarizer(),
        threshold=0.7,
    )
    assert r2.status is CompressionStatus.NOOP  # 179,199 < 0.7 * 256,000 = 179,200
    assert (r2.threshold, r2.token_limit, r2.new_token_count) == (0.7, 256_000, 179_199)


def test_empty_summary() -> None:
    r = g.compress(
        history_for_compress(),
        original_token_count=1000,
        model="gemini-2.5-pro",
        summarizer=FakeSummarizer(summary=None, probe=" \n"),
        force=True,
    )
    assert r.status is CompressionStatus.COMPRESSION_FAILED_EMPTY_SUMMARY
    assert (r.new_token_count, r.new_history, r.summary) == (1000, None, "")


def test_inflated() -> None:
    r = g.compress(
        history_for_compress(),
        original_token_count=20,
        model="gemini-2.5-pro",
        summarizer=FakeSummarizer(),
        force=True,
        env_turn=ENV,
    )
    assert r.status is CompressionStatus.COMPRESSION_FAILED_INFLATED_TOKEN_COUNT
    assert (r.original_token_count, r.new_token_count, r.new_history) == (20, 25, None)


def test_content_truncated_fallback_makes_no_model_call() -> None:
    history = [user("go"), *[response("read_file", {"output": c * 80_000}) for c in "abc"], model("done")]
    r = g.compress(
        history,
        original_token_count=600_000,
        model="gemini-2.5-pro",
        summarizer=RefusingSummarizer(),
        has_failed_compression_attempt=True,
        tool_output_dir="/t/tool-outputs",
    )
    assert r.status is CompressionStatus.CONTENT_TRUNCATED
    assert [s.path for s in r.truncated_outputs] == ["/t/tool-outputs/read_file_1.txt"]
    assert r.new_history is not None
    assert r.new_history[2:] == history[2:]
    assert r.new_token_count == g.estimate_token_count([p for c in r.new_history for p in c["parts"]])
    # Forced attempts ignore the latch; the 0.29 era answered a latched automatic attempt with NOOP 0/0.
    old = g.compress(
        history,
        original_token_count=600_000,
        model="gemini-2.5-pro",
        summarizer=RefusingSummarizer(),
        has_failed_compression_attempt=True,
        profile=get_profile("gemini-cli@0.29"),
    )
    assert (old.status, old.original_token_count, old.new_token_count) == (CompressionStatus.NOOP, 0, 0)


def test_high_fidelity_choice_sends_truncated_slice_when_original_is_too_big() -> None:
    huge = "a" * 1_100_000  # 275,000 tokens > Gemma 4's 256,000 limit
    history = [
        user("go"),
        call("read_file"),
        response("read_file", {"output": huge}),
        user("next"),
        model("ok"),
    ]
    fake = FakeSummarizer()
    r = g.compress(history, original_token_count=200_000, model="gemma-4-31b-it", summarizer=fake, force=True)
    assert r.summarizer_input_truncated
    sent = fake.calls[0].history[2]["parts"][0]["functionResponse"]["response"]["output"]
    assert sent.startswith("Output too large. Showing first 8,000 and last 32,000 characters.")
    # the split is measured on the truncated history: "next" lies after 70% of it
    assert r.split_index == 3
    assert r.kept_history == history[3:]
    assert r.compressed_history[2]["parts"][0]["functionResponse"]["response"]["output"] == sent


def test_older_profiles_change_the_protocol() -> None:
    fake = FakeSummarizer(summary="SUM")
    r = g.compress(
        history_for_compress(),
        original_token_count=1000,
        model="gemini-2.5-pro",
        summarizer=fake,
        force=True,
        env_turn=ENV,
        profile=get_profile("gemini-cli@0.10"),
    )
    assert [c.kind for c in fake.calls] == ["summary"]
    assert fake.calls[0].contents[-1] == user(g.LEGACY_INSTRUCTION)
    assert fake.calls[0].model == "gemini-2.5-pro"
    assert r.summary == "SUM"
    expected = sum(len(json.dumps(c, separators=(",", ":"))) for c in [ENV, *(r.new_history or [])]) // 4
    assert r.new_token_count == expected  # 0.10 era: floor(sum of JSON lengths / 4)
    assert r.threshold == 0.7


def test_profiles_table() -> None:
    assert DEFAULT_PROFILE == "gemini-cli@latest"
    head = get_profile("gemini-cli@latest")
    assert head.default_threshold == 0.5
    assert head.verification_probe
    assert head.budget_truncation == "head_tail"
    thresholds = {p.default_threshold for p in PROFILES.values()}
    assert {0.7, 0.2, 0.5} <= thresholds
    kinds = {(p.split_rule, p.budget_truncation, p.verification_probe) for p in PROFILES.values()}
    assert ("index_after_fraction", "none", False) in kinds
    assert any(t == "lines" for _, t, _ in kinds)
    assert any(probe for *_, probe in kinds)
    for p in PROFILES.values():
        assert isinstance(p, Profile)
        assert p.description
        assert p.commit
        assert p.since
        assert p.until is None or p.until > p.since
    with pytest.raises(UsageError, match="gemini-cli@latest"):
        get_profile("gemini-cli@9.9")


# --------------------------------------------------------------------------------------------------
# Real sessions


def _load_messages(path: Path) -> list[dict[str, Any]]:
    """Minimal session reader: legacy documents, and JSONL with upserts, $set, $set.messages, $rewindTo."""
    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        return list(doc["messages"])
    messages: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict):
            continue
        if "$rewindTo" in rec:
            keys = list(messages)
            cut = keys.index(rec["$rewindTo"]) if rec["$rewindTo"] in keys else 0
            for key in keys[cut:]:
                del messages[key]
        elif isinstance(rec.get("$set"), dict):
            if isinstance(rec["$set"].get("messages"), list):
                messages = {m["id"]: m for m in rec["$set"]["messages"]}
        elif isinstance(rec.get("id"), str):
            messages[rec["id"]] = rec
        elif isinstance(rec.get("messages"), list):
            messages = {m["id"]: m for m in rec["messages"]}
    return list(messages.values())


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="shared real-sessions folder not present")
def test_every_real_session_converts_curates_and_splits() -> None:
    files = sorted(p for p in REAL_SESSIONS.iterdir() if p.suffix in (".json", ".jsonl"))
    assert len(files) >= 40
    for path in files:
        messages = _load_messages(path)
        chat_model = next((m["model"] for m in reversed(messages) if m.get("model")), "gemini-2.5-pro")
        turns = g.convert_session_to_client_history(messages)
        curated = g.session_to_curated_history(messages, chat_model)
        contents = curated.contents
        assert contents, path.name
        assert contents[0]["role"] == "user", path.name
        split = g.find_compress_split_point(contents, 0.7)
        assert split == 0 or split == len(contents) or g._is_plain_user_turn(contents[split]), path.name
        assert g.original_token_count(messages) >= 0
        assert len(turns) + 1 >= len(contents)
        budget = g.truncate_history_to_budget(contents, tool_output_dir="t")
        assert len(budget.history) == len(contents)
