"""``--summarizer gemini --keep-facts``: a paraphrasing model cannot lose the span's facts (issue 12)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ctxtool.cli import run
from ctxtool.compress.summarize.facts import FACT_KINDS, extract_facts, retention
from ctxtool.compress.summarize.offline import KeepFacts, OfflineSummarizer
from ctxtool.compress.summarizer import ModelCall
from tests.conftest import FIXTURES
from tests.gemini_cli_harness import FakeGeminiAPI, text, usage
from tests.test_offline_summarizer import HISTORY

PARAPHRASE = "<state_snapshot>\n<overall_goal>Fix the parser; tests failed.</overall_goal>\n</state_snapshot>"


class Paraphraser:
    name = "fake-model"
    deterministic = False

    def __init__(self) -> None:
        self.calls: list[ModelCall] = []

    def generate(self, call: ModelCall) -> str | None:
        self.calls.append(call)
        return call.previous_summary if call.kind == "probe" else PARAPHRASE


def summary_call(kind: str = "summary", previous: str | None = None) -> ModelCall:
    return ModelCall(
        kind=kind,  # type: ignore[arg-type]
        model="m",
        system_instruction="",
        contents=[],
        history=HISTORY,
        previous_summary=previous,
    )


def test_the_facts_follow_the_models_summary_verbatim() -> None:
    keep = KeepFacts(Paraphraser())
    first = keep.generate(summary_call())
    assert first is not None
    assert first.startswith(PARAPHRASE.removesuffix("</state_snapshot>"))
    assert first.endswith("</verbatim_facts>\n</state_snapshot>")
    assert first.count("</state_snapshot>") == 1
    facts = extract_facts(HISTORY)
    assert retention(facts, PARAPHRASE).percent("commands") == 0.0
    kept = retention(facts, first)
    assert all(kept.percent(kind) == 100.0 for kind in FACT_KINDS if kept.kind(kind).total)
    # The probe sees the first answer and echoes it: the block is replaced, not doubled.
    again = keep.generate(summary_call("probe", first))
    assert again is not None
    assert again.count("<verbatim_facts>") == 1
    assert again == first
    assert keep.name == "fake-model+facts"


def test_an_empty_answer_stays_empty() -> None:
    class Silent(Paraphraser):
        def generate(self, call: ModelCall) -> str | None:
            return ""

    assert KeepFacts(Silent()).generate(summary_call()) == ""


def test_compact_keep_facts_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
    path = tmp_path / source.name
    shutil.copy2(source, path)
    out = tmp_path / "out.jsonl"

    def answer(body: dict[str, Any], model: str) -> Any:
        return text(PARAPHRASE, usage(100, 20))

    api = FakeGeminiAPI(utility=answer)
    monkeypatch.setenv("GEMINI_API_KEY", "fake-key-for-the-local-test-server")
    with api.serving() as url:
        args = [
            "compact",
            str(path),
            "--force",
            "--out",
            str(out),
            "--summarizer",
            "gemini",
            "--base-url",
            url,
        ]
        assert run([*args, "--keep-facts", "-f", "json"]) == 0
    report = json.loads(capsys.readouterr().out)["sessions"][0]
    assert report["status"] == "COMPRESSED"
    assert len(api.utility_requests()) == 2  # summary and probe, as upstream
    retained = report["retention"]
    assert all(v["kept"] == v["total"] for v in retained.values()), retained
    written = out.read_text()
    assert "<verbatim_facts>" in written
    # Without the flag the same paraphrase keeps less, and the report says so per kind.
    with api.serving() as url:
        args = ["compact", str(path), "--force", "--out", str(tmp_path / "plain.jsonl")]
        assert run([*args, "--summarizer", "gemini", "--base-url", url, "-f", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)["sessions"][0]["retention"]
    assert any(v["kept"] < v["total"] for v in plain.values()), plain


def test_keep_facts_needs_the_gemini_summarizer(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["compact", "x.jsonl", "--keep-facts"]) == 2
    assert "--keep-facts" in capsys.readouterr().err


def test_the_offline_budget_bounds_the_block() -> None:
    small = KeepFacts(Paraphraser(), OfflineSummarizer(token_budget=250)).generate(summary_call())
    assert small is not None
    assert len(small) <= len(PARAPHRASE) + 250 * 4 + 60
