"""Kode's auto-compact (trigger, layout, file recovery from the transcript) and its retention heuristics."""

from __future__ import annotations

from ctxtool.compress.strategies import kode
from ctxtool.compress.summarize.offline import OfflineSummarizer
from tests.test_strategy_pi import NOW, call, gemini, ids, opts, roundtrip, user


def session() -> list[dict[str, object]]:
    return [
        user(1, "Fix the error in app.py"),
        gemini(1, "", [call("c1", "read_file", {"file_path": "/p/app.py"}, "a = 1\nb = 2")], total=1000),
        gemini(
            2,
            "",
            [
                call(
                    "c2",
                    "replace",
                    {"file_path": "/p/app.py", "old_string": "b = 2", "new_string": "b = 3"},
                    "ok",
                )
            ],
        ),
        gemini(3, "", [call("c3", "read_file", {"file_path": "/p/node_modules/x.js"}, "skip me")]),
        gemini(4, "", [call("c4", "read_file", {"file_path": "/p/gone.py"}, "boom", status="error")]),
        gemini(5, "There was an error, fixed.", total=180_000),
    ]


def test_trigger_at_nine_tenths_of_the_window() -> None:
    trig = kode.KodeAutoCompact().trigger(session(), opts())
    assert trig.limit == 180_000
    assert trig.would_trigger
    assert trig.message_id == "g5"
    assert trig.turn == 1
    assert not kode.KodeAutoCompact().trigger(session(), opts(context_window=300_000)).would_trigger


def test_synthetic_assistant_messages_are_skipped_by_count_tokens() -> None:
    msgs = [user(1, "a"), gemini(1, "x", total=500), gemini(2, "No response requested.", total=9)]
    assert kode.count_tokens(msgs) == 500


def test_layout_replaces_everything_and_recovers_files_from_the_transcript() -> None:
    result = kode.KodeAutoCompact().plan(session(), OfflineSummarizer(), opts(), now=NOW, new_id=ids())
    assert result.status == "COMPRESSED"
    assert result.messages is not None
    out = roundtrip(result.messages)
    assert [m["type"] for m in out] == ["user", "gemini", "user", "gemini"]
    assert out[0]["content"][0]["text"] == (
        "Context automatically compressed due to token limit. Compression model pointer 'compact' is not "
        "configured. Using 'main' for compression."
    )
    summary = out[1]["content"][0]["text"]
    assert [h for h in kode.KODE_HEADINGS if h in summary] == list(kode.KODE_HEADINGS)
    recovered = out[2]["content"][0]["text"]
    # The edit was applied to the content read earlier; node_modules is excluded; gone.py has no content.
    assert recovered == (
        "**Recovered File: /p/app.py**\n\n```\n     1→a = 1\n     2→b = 3\n```\n\n"
        "*Automatically recovered (3 tokens)*"
    )
    assert any("gone.py" in n for n in result.notes)
    assert result.messages_kept == 0


def test_add_line_numbers() -> None:
    assert kode.add_line_numbers("") == ""
    assert kode.add_line_numbers("x\ny") == "     1→x\n     2→y"


def test_preserve_important_keeps_users_keyword_replies_and_recent() -> None:
    msgs = [
        user(i, f"q{i}") if i % 2 else gemini(i, "warning: disk" if i == 2 else f"a{i}") for i in range(1, 13)
    ]
    result = kode.KodeRetention("balanced").plan(msgs, OfflineSummarizer(), opts(), now=NOW, new_id=ids())
    kept = [m["id"] for m in result.messages or []]
    assert kept == ["u1", "g2", "u3", "u5", "u7", "g8", "u9", "g10", "u11", "g12"]
    assert result.trigger.would_trigger is None


def test_preserve_recent_repairs_orphan_tool_results() -> None:
    msgs = [user(1, "go"), gemini(1, "", [call("c1", "ls", {}, "out")]), gemini(2, "end")]
    strat = kode.KodeRetention("preserve_recent")
    result = strat.plan(msgs, OfflineSummarizer(), opts(context_window=100), now=NOW, new_id=ids())
    # window 100 -> maxTokens 70 -> estimateMessageCount 3: units [assistant c1, result c1, assistant g2]
    assert [m["id"] for m in result.messages or []] == ["g1", "g2"]


def test_smart_compression_summary_text() -> None:
    msgs = [user(i, "please fix the bug") if i % 2 else gemini(i, f"a{i}") for i in range(1, 11)]
    result = kode.KodeRetention("conservative").plan(msgs, OfflineSummarizer(), opts(), now=NOW, new_id=ids())
    assert result.messages is not None
    assert result.messages[0]["content"][0]["text"] == (
        "[CONVERSATION SUMMARY - 7 messages compressed]\n\n"
        "Previous conversation included 4 user messages and "
        "3 assistant responses, with 0 tool invocations. Key topics: debugging, problem-solving.\n\n"
        "[END SUMMARY - Recent context follows...]"
    )
    assert [m["id"] for m in result.messages[1:]] == ["g8", "u9", "g10"]


def test_smart_compression_below_four_messages_keeps_all() -> None:
    msgs = [user(1, "a"), gemini(1, "b")]
    result = kode.KodeRetention("smart_compression").plan(
        msgs, OfflineSummarizer(), opts(), now=NOW, new_id=ids()
    )
    assert result.messages is not None
    assert result.messages[1:] == msgs
    assert "0 messages compressed" in result.messages[0]["content"][0]["text"]
