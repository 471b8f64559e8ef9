"""The harness itself: the pinned Gemini CLI runs against the local fake and reports what it was sent."""

from __future__ import annotations

from pathlib import Path

from tests.gemini_cli_harness import (
    CHAT_MODEL,
    GEMINI_CLI_VERSION,
    FakeGeminiAPI,
    installed_package_dir,
    make_workspace,
    run_gemini,
    text,
    usage,
)


def test_the_pinned_release_is_installed(gemini_cli: Path) -> None:
    assert gemini_cli.exists()
    assert f'"version": "{GEMINI_CLI_VERSION}"' in (installed_package_dir() / "package.json").read_text()


def test_gemini_cli_sends_its_chat_to_the_fake_and_counts_the_scripted_usage(
    gemini_cli: Path, tmp_path: Path
) -> None:
    api = FakeGeminiAPI(chat=[text("Hello from the fake.", usage(1200, 7, cached=1000, thoughts=3))])
    workspace = make_workspace(tmp_path)
    with api.serving() as url:
        run = run_gemini(
            gemini_cli, workspace, url, ["-m", CHAT_MODEL, "-p", "say hello", "--output-format", "json"]
        )
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.json()
    assert out["response"] == "Hello from the fake."
    [sent] = api.chat_requests()
    assert sent.model == CHAT_MODEL
    assert sent.body["contents"][-1]["parts"][-1] == {"text": "say hello"}
    tokens = out["stats"]["models"][CHAT_MODEL]["roles"]["main"]["tokens"]
    assert (tokens["prompt"], tokens["candidates"], tokens["cached"], tokens["thoughts"]) == (
        1200,
        7,
        1000,
        3,
    )
    [session] = workspace.session_files()
    assert session.suffix == ".jsonl"
