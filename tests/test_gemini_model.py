"""The gemini summarizer against a local generateContent server, and the compression prompt sources.

The real google-genai client talks to pytest-httpserver on 127.0.0.1, so these tests check the bytes the
SDK actually sends (URL, key header, request body) and how the summarizer reacts to real HTTP errors.
"""

from __future__ import annotations

import json
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from ctxtool.common.errors import SummarizerError, UsageError
from ctxtool.compress.gemini_cli import chat_compression as gemini_cli
from ctxtool.compress.gemini_cli.chat_compression import summarizer_model
from ctxtool.compress.gemini_cli.prompts import (
    CTXTOOL_COMPRESSION_PROMPT,
    GEMINI_CLI_PATH_ENV,
    ctxtool_compression_prompt,
    find_gemini_cli_prompt,
    load_prompt_file,
)
from ctxtool.compress.summarize.gemini_model import GeminiSummarizer, get_response_text
from ctxtool.compress.summarizer import ModelCall

KEY = "AIzaTEST-secret-key-0123456789"
MODEL = "gemini-2.5-pro"
PATH = f"/v1beta/models/{MODEL}:generateContent"

# The instruction and probe turns the strategy sends (ctxtool's wording, upstream's layout: spec §9.2, §9.4).
INSTRUCTION = f"{gemini_cli.ANCHOR_NEW}\n\n{gemini_cli.INSTRUCTION_SUFFIX}"
PROBE = gemini_cli.PROBE_TEXT

# A history with every part kind the SDK might rewrite: thought signatures, function calls with a float
# and a null argument, function responses, inline data (the SDK would rename mimeType to mime_type).
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "Fix the failing test in parser.py"}]},
    {
        "role": "model",
        "parts": [
            {"text": "Looking at the file.", "thought": True, "thoughtSignature": "c2lnbmF0dXJl"},
            {"functionCall": {"id": "call-1", "name": "read_file", "args": {"path": "parser.py", "n": 1.0}}},
        ],
    },
    {
        "role": "user",
        "parts": [
            {"functionResponse": {"id": "call-1", "name": "read_file", "response": {"output": "x = 1"}}}
        ],
    },
    {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]},
    {"role": "model", "parts": [{"text": "The test now passes."}]},
]


def summary_call(system: str = CTXTOOL_COMPRESSION_PROMPT) -> ModelCall:
    contents = [*HISTORY, {"role": "user", "parts": [{"text": INSTRUCTION}]}]
    return ModelCall(
        kind="summary", model=MODEL, system_instruction=system, contents=contents, history=list(HISTORY)
    )


def probe_call(summary: str) -> ModelCall:
    contents = [
        *HISTORY,
        {"role": "model", "parts": [{"text": summary}]},
        {"role": "user", "parts": [{"text": PROBE}]},
    ]
    return ModelCall(
        kind="probe",
        model=MODEL,
        system_instruction=CTXTOOL_COMPRESSION_PROMPT,
        contents=contents,
        history=list(HISTORY),
        prompt_id="p-1-verify",
    )


def answer(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP"}]}


def api_error(code: int, status: str, message: str, details: list[Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, "details": details or []}}


@pytest.fixture(scope="module")
def server() -> Iterator[HTTPServer]:
    s = HTTPServer(host="127.0.0.1", port=0)
    s.start()
    yield s
    s.clear()
    if s.is_running():
        s.stop()


@pytest.fixture
def httpserver(server: HTTPServer) -> Iterator[HTTPServer]:
    server.clear()
    yield server
    server.clear()


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def make(httpserver: HTTPServer, sleeps: Sleeps, **kwargs: Any) -> GeminiSummarizer:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("base_url", httpserver.url_for("/"))
    return GeminiSummarizer(sleep=sleeps, env={}, **kwargs)


def bodies(httpserver: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(req.get_data(as_text=True)) for req, _ in httpserver.log]


def test_summary_then_probe_send_the_exact_contents(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    snapshot = "<state_snapshot><overall_goal>fix parser</overall_goal></state_snapshot>"
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        answer(
            {"text": "Let me think about the history.", "thought": True},
            {"text": "<scratchpad>notes</scratchpad>\n"},
            {"text": ""},
            {"text": snapshot},
        )
    )
    httpserver.expect_ordered_request(PATH, method="POST").respond_with_json(
        answer({"text": snapshot + "\n"})
    )
    s = make(httpserver, sleeps)
    with s:
        summary = s.generate(summary_call())
        assert summary == "<scratchpad>notes</scratchpad>\n" + snapshot  # thought part left out
        probe = s.generate(probe_call(summary))
    assert probe == snapshot + "\n"  # the summarizer returns text untrimmed; choosing is the strategy's job
    httpserver.check_assertions()

    (req1, _), (req2, _) = httpserver.log
    for req in (req1, req2):
        assert req.path == PATH
        assert req.headers["x-goog-api-key"] == KEY
    first, second = bodies(httpserver)
    system = {"role": "user", "parts": [{"text": CTXTOOL_COMPRESSION_PROMPT}]}
    assert first["systemInstruction"] == system
    assert second["systemInstruction"] == system
    # Byte-for-byte the call's contents: history, then the instruction turn last.
    assert first["contents"] == summary_call().contents
    assert first["contents"][:-1] == HISTORY
    assert first["contents"][-1] == {"role": "user", "parts": [{"text": INSTRUCTION}]}
    assert first["contents"][3]["parts"][0]["inlineData"]["mimeType"] == "image/png"
    # The probe: history, the summary as a model turn, the probe as the last user turn; no instruction turn.
    assert second["contents"] == [
        *HISTORY,
        {"role": "model", "parts": [{"text": summary}]},
        {"role": "user", "parts": [{"text": PROBE}]},
    ]
    assert sleeps == []


def test_model_and_system_prompt_overrides(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request("/v1beta/models/gemini-2.5-flash:generateContent").respond_with_json(
        answer({"text": "ok"})
    )
    with make(httpserver, sleeps, model="gemini-2.5-flash", system_prompt="MY PROMPT") as s:
        assert s.generate(summary_call()) == "ok"
    (body,) = bodies(httpserver)
    assert body["systemInstruction"] == {"role": "user", "parts": [{"text": "MY PROMPT"}]}
    assert "maxOutputTokens" not in body.get("generationConfig", {})


def test_max_output_tokens_is_sent(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH).respond_with_json(answer({"text": "ok"}))
    call = summary_call()
    call = ModelCall(
        kind=call.kind,
        model=call.model,
        system_instruction=call.system_instruction,
        contents=call.contents,
        history=call.history,
        max_output_tokens=512,
    )
    with make(httpserver, sleeps) as s:
        s.generate(call)
    (body,) = bodies(httpserver)
    assert body["generationConfig"]["maxOutputTokens"] == 512


def test_base_url_and_key_from_the_environment(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH).respond_with_json(answer({"text": "ok"}))
    env = {
        "GOOGLE_GEMINI_BASE_URL": httpserver.url_for("/"),
        "GEMINI_API_KEY": "gemini-key",
        "GOOGLE_API_KEY": "g",
    }
    with GeminiSummarizer(sleep=sleeps, env=env) as s:
        assert s.generate(summary_call()) == "ok"
    (req, _) = httpserver.log[0]
    assert req.headers["x-goog-api-key"] == "gemini-key"  # GEMINI_API_KEY wins, as in Gemini CLI
    httpserver.clear()
    httpserver.expect_request(PATH).respond_with_json(answer({"text": "ok"}))
    with GeminiSummarizer(sleep=sleeps, env={**env, "GEMINI_API_KEY": ""}) as s:
        s.generate(summary_call())
    assert httpserver.log[0][0].headers["x-goog-api-key"] == "g"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"candidates": []}, None),
        ({}, None),
        ({"candidates": [{"finishReason": "SAFETY"}]}, None),
        ({"candidates": [{"content": {"role": "model", "parts": []}}]}, None),
        (answer({"text": "only a thought", "thought": True}), ""),  # parts exist: "" like upstream, not None
        (answer({"text": "a"}, {"functionCall": {"name": "f", "args": {}}}, {"text": "b"}), "ab"),
    ],
)
def test_response_text_follows_get_response_text(
    httpserver: HTTPServer, sleeps: Sleeps, body: dict[str, Any], expected: str | None
) -> None:
    httpserver.expect_request(PATH).respond_with_json(body)
    with make(httpserver, sleeps) as s:
        assert s.generate(summary_call()) == expected


def test_get_response_text_without_candidates_attribute() -> None:
    assert get_response_text(object()) is None


def test_retries_429_and_503_then_succeeds(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_ordered_request(PATH).respond_with_json(
        api_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded"), status=429
    )
    httpserver.expect_ordered_request(PATH).respond_with_json(
        api_error(503, "UNAVAILABLE", "The model is overloaded"), status=503
    )
    httpserver.expect_ordered_request(PATH).respond_with_json(answer({"text": "done"}))
    with make(httpserver, sleeps) as s:
        assert s.generate(summary_call()) == "done"
    httpserver.check_assertions()
    assert len(httpserver.log) == 3
    assert len(sleeps) == 2
    assert 2.0 <= sleeps[0] <= 2.5  # 2 s, plus up to 25 % jitter
    assert 4.0 <= sleeps[1] <= 5.0  # doubled
    # Every attempt sent the same request.
    assert len({json.dumps(b, sort_keys=True) for b in bodies(httpserver)}) == 1


def test_retry_waits_as_long_as_the_server_asks(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    retry_info = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"}]
    httpserver.expect_ordered_request(PATH).respond_with_json(
        api_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded", retry_info), status=429
    )
    httpserver.expect_ordered_request(PATH).respond_with_json(answer({"text": "done"}))
    with make(httpserver, sleeps) as s:
        assert s.generate(summary_call()) == "done"
    assert sleeps == [17.0]


def test_a_long_server_delay_is_not_waited_for(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    retry_info = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3600s"}]
    httpserver.expect_request(PATH).respond_with_json(
        api_error(429, "RESOURCE_EXHAUSTED", "Daily quota exceeded", retry_info), status=429
    )
    with make(httpserver, sleeps) as s, pytest.raises(SummarizerError, match="quota exhausted") as err:
        s.generate(summary_call())
    assert "3600 s" in str(err.value)
    assert sleeps == []
    assert len(httpserver.log) == 1


def test_no_retry_on_400(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH).respond_with_json(
        api_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument."), status=400
    )
    with make(httpserver, sleeps) as s, pytest.raises(SummarizerError) as err:
        s.generate(summary_call())
    assert len(httpserver.log) == 1
    assert sleeps == []
    message = str(err.value)
    assert "HTTP 400 INVALID_ARGUMENT" in message
    assert "invalid argument" in message
    assert "\n" not in message


def test_404_names_the_model(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request("/v1beta/models/no-such-model:generateContent").respond_with_json(
        api_error(404, "NOT_FOUND", "models/no-such-model is not found"), status=404
    )
    with make(httpserver, sleeps, model="no-such-model") as s, pytest.raises(SummarizerError) as err:
        s.generate(summary_call())
    assert len(httpserver.log) == 1
    assert "no-such-model" in str(err.value)
    assert "--summarizer-model" in str(err.value)


@pytest.mark.parametrize(
    ("code", "status", "details"),
    [
        (401, "UNAUTHENTICATED", []),
        (403, "PERMISSION_DENIED", []),
        (
            400,
            "INVALID_ARGUMENT",
            [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
        ),
    ],
)
def test_rejected_key(
    httpserver: HTTPServer, sleeps: Sleeps, code: int, status: str, details: list[Any]
) -> None:
    httpserver.expect_request(PATH).respond_with_json(
        api_error(code, status, "API key not valid. Please pass a valid API key.", details), status=code
    )
    with make(httpserver, sleeps) as s, pytest.raises(SummarizerError) as err:
        s.generate(summary_call())
    message = str(err.value)
    assert message.startswith("the Gemini API rejected the credentials")
    assert f"HTTP {code}" in message
    assert "GEMINI_API_KEY" in message  # the fix
    assert len(httpserver.log) == 1
    assert sleeps == []


def test_persistent_429_is_a_quota_error(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH).respond_with_json(
        api_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."), status=429
    )
    with make(httpserver, sleeps, max_retries=2) as s, pytest.raises(SummarizerError) as err:
        s.generate(summary_call())
    assert len(httpserver.log) == 3  # one attempt and two retries
    assert len(sleeps) == 2
    message = str(err.value)
    assert "quota exhausted for model gemini-2.5-pro after 3 attempts" in message
    assert "RESOURCE_EXHAUSTED" in message


def test_persistent_5xx_reports_the_server_error(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH).respond_with_json(
        api_error(500, "INTERNAL", "Internal error"), status=500
    )
    with make(httpserver, sleeps, max_retries=4) as s, pytest.raises(SummarizerError) as err:
        s.generate(summary_call())
    assert len(httpserver.log) == 5
    assert sleeps == sorted(sleeps)
    assert "after 5 attempts (HTTP 500 INTERNAL" in str(err.value)


def test_missing_key_names_the_variables() -> None:
    with pytest.raises(SummarizerError) as err:
        GeminiSummarizer(env={"GEMINI_API_KEY": "", "GOOGLE_API_KEY": "  "})
    message = str(err.value)
    assert "no Gemini API key" in message
    assert "GEMINI_API_KEY" in message
    assert "GOOGLE_API_KEY" in message
    assert "GOOGLE_GENAI_USE_VERTEXAI" in message


def test_vertex_mode_needs_no_key_and_does_not_send_the_gemini_key(
    httpserver: HTTPServer, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SummarizerError):
        GeminiSummarizer(env={"GOOGLE_GENAI_USE_VERTEXAI": "false"})
    # With a custom base URL and no Vertex credentials the SDK posts to the base URL itself (proxy mode).
    httpserver.expect_request("/", method="POST").respond_with_json(answer({"text": "vertex ok"}))
    env = {"GOOGLE_GENAI_USE_VERTEXAI": "true", "GEMINI_API_KEY": KEY}
    with GeminiSummarizer(base_url=httpserver.url_for("/"), sleep=sleeps, env=env) as s:
        assert "vertex=True" in repr(s)
        assert s.generate(summary_call()) == "vertex ok"
    (req, _) = httpserver.log[0]
    assert "x-goog-api-key" not in req.headers
    assert json.loads(req.get_data(as_text=True))["contents"] == summary_call().contents


def test_a_body_that_is_not_json(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    httpserver.expect_request(PATH).respond_with_data("<html>proxy page</html>", content_type="text/html")
    with make(httpserver, sleeps) as s, pytest.raises(SummarizerError, match="not JSON"):
        s.generate(summary_call())


@pytest.mark.parametrize(
    ("code", "status"), [(400, "INVALID_ARGUMENT"), (401, "UNAUTHENTICATED"), (429, "X"), (503, "Y")]
)
def test_the_key_never_appears_in_errors(
    httpserver: HTTPServer, sleeps: Sleeps, code: int, status: str
) -> None:
    # A misbehaving proxy that echoes the key back must not get it printed.
    httpserver.expect_request(PATH).respond_with_json(
        api_error(code, status, f"bad key {KEY} here"), status=code
    )
    s = make(httpserver, sleeps, max_retries=1)
    with s, pytest.raises(SummarizerError) as err:
        s.generate(summary_call())
    assert KEY not in str(err.value)
    assert "[REDACTED]" in str(err.value)
    assert err.value.__cause__ is None
    assert KEY not in repr(s)


def test_unreachable_server_retries_then_fails(sleeps: Sleeps) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    base = f"http://127.0.0.1:{port}/"
    s = GeminiSummarizer(api_key=KEY, base_url=base, max_retries=2, sleep=sleeps, env={})
    with s, pytest.raises(SummarizerError) as err:
        s.generate(summary_call())
    assert len(sleeps) == 2
    assert f"could not reach the Gemini API at {base} after 3 attempts" in str(err.value)
    assert KEY not in str(err.value)


def test_timeout_is_reported_without_retry(httpserver: HTTPServer, sleeps: Sleeps) -> None:
    def slow(request: Request) -> Response:
        time.sleep(0.6)
        return Response(json.dumps(answer({"text": "late"})), content_type="application/json")

    httpserver.expect_request(PATH).respond_with_handler(slow)
    with make(httpserver, sleeps, timeout_s=0.2) as s, pytest.raises(SummarizerError) as err:
        s.generate(summary_call())
    assert "did not answer within 0.2 s" in str(err.value)
    assert sleeps == []
    time.sleep(0.5)  # let the slow handler finish before the next test clears the server
    assert len(httpserver.log) == 1


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gemini-3-pro-preview", "gemini-3-pro-preview"),
        ("gemini-3.1-pro-preview", "gemini-3-pro-preview"),
        ("gemini-3-flash-preview", "gemini-3-flash-preview"),
        ("gemini-3.1-flash-lite", "gemini-3.1-flash-lite"),
        ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
        ("gemini-2.5-pro", "gemini-2.5-pro"),
        ("gemini-2.5-flash", "gemini-2.5-flash"),
        ("gemini-2.0-flash", "gemini-3-pro-preview"),
        ("my-custom-model", "gemini-3-pro-preview"),
    ],
)
def test_compression_model_alias_table(model: str, expected: str) -> None:
    assert summarizer_model(model) == expected


# ------------------------------------------------------------------------------------------------------------
# prompts.py


def test_ctxtool_prompt_asks_for_the_gemini_cli_structure() -> None:
    p = CTXTOOL_COMPRESSION_PROMPT
    assert p == p.strip()
    assert "scratchpad" in p
    assert p.index("### CRITICAL SECURITY RULE") < p.index("### GOAL") < p.index("<state_snapshot>")
    tags = [
        "overall_goal",
        "active_constraints",
        "key_knowledge",
        "artifact_trail",
        "file_system_state",
        "recent_actions",
        "task_state",
    ]
    positions = [p.index(f"<{t}>") for t in tags]
    assert positions == sorted(positions)
    for t in tags:
        assert p.index(f"<{t}>") < p.index(f"</{t}>")
    assert p.rstrip().endswith("</state_snapshot>")
    assert ctxtool_compression_prompt() == p
    assert ctxtool_compression_prompt("") == p


def test_ctxtool_prompt_with_an_approved_plan() -> None:
    p = ctxtool_compression_prompt("/work/plans/plan.md")
    assert "/work/plans/plan.md" in p
    assert p.index("### GOAL") < p.index("/work/plans/plan.md") < p.index("<state_snapshot>\n")
    assert p.replace(p[p.index("\n\n### APPROVED") : p.index("\n\nUse this structure")], "") == (
        CTXTOOL_COMPRESSION_PROMPT
    )


def test_load_prompt_file_trims_like_upstream(tmp_path: Path) -> None:
    f = tmp_path / "prompt.txt"
    f.write_bytes("\ufeff  You summarise.\nLine two ends in a space: \n\n".encode())
    assert load_prompt_file(f) == "You summarise.\nLine two ends in a space:"
    f.write_text("inner  \n spaces \u0085", encoding="utf-8")
    assert load_prompt_file(str(f)) == "inner  \n spaces \u0085"  # U+0085 is not JS whitespace


def test_load_prompt_file_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"does not exist.*--prompt-file"):
        load_prompt_file(tmp_path / "missing.txt")
    with pytest.raises(UsageError, match="is a directory"):
        load_prompt_file(tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n\t\n", encoding="utf-8")
    with pytest.raises(UsageError, match="is empty"):
        load_prompt_file(empty)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("résumé".encode("latin-1"))
    with pytest.raises(UsageError, match=r"not UTF-8 \(invalid byte at offset 1\)"):
        load_prompt_file(latin)


# A compiled snippets module as tsc would emit it; the prose is ours, only the shape imitates upstream.
SNIPPETS_JS = r"""
export function getCoreSystemPrompt(options) {
    return `You are an agent. ${options.name}`;
}
/**
 * The compression prompt.
 */
export function getCompressionPrompt(approvedPlanPath) {
    const planPreservation = approvedPlanPath
        ? `

### PLAN
Keep the plan at ${approvedPlanPath} in mind.`
        : '';
    const re = /`{2}/g; // a regex with backticks must not confuse the scanner
    return `
Fake prompt line one with a \`code\` span, a literal \${dollar} and a back\\slash.
Tab\there, ${"quoted"} substitution, ${'single'} too.${planPreservation}

<state_snapshot>
  <overall_goal></overall_goal>
</state_snapshot>
`.trim();
}
"""
SNIPPETS_EXPECTED = (
    "Fake prompt line one with a `code` span, a literal ${dollar} and a back\\slash.\n"
    "Tab\there, quoted substitution, single too.\n\n"
    "<state_snapshot>\n  <overall_goal></overall_goal>\n</state_snapshot>"
)

# An esbuild bundle: the instruction turn (which also names <state_snapshot>) comes first, an export map
# mentions the name without defining it, the legacy copy is renamed getCompressionPrompt2.
BUNDLE_JS = """
var snippets_exports = {};
__export(snippets_exports, {
  getCompressionPrompt: () => getCompressionPrompt2,
});
function buildInstruction(anchor) {
  return `${anchor}\\n\\nFirst, think. Then write the updated <state_snapshot>.`;
}
__name(buildInstruction, "buildInstruction");
function getCompressionPrompt2() {
  return `
Bundled fake prompt.\r
<state_snapshot>
</state_snapshot>
  `.trim();
}
__name(getCompressionPrompt2, "getCompressionPrompt2");
"""

MINIFIED_JS = (
    "var a=1;var b=function(c){return`Minified \\u{1F600} \\uD83D\\uDE00 "
    "<state_snapshot>x</state_snapshot>`.trim()};"
)


def fake_package(root: Path, package: str, rel: str, js: str, version: str = "0.99.0") -> Path:
    pkg = root / package
    (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
    (pkg / rel).write_text(js, encoding="utf-8")
    (pkg / "package.json").write_text(json.dumps({"name": package, "version": version}), encoding="utf-8")
    return pkg


@pytest.fixture
def no_system_roots(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keep whatever Node packages this machine has out of the search.
    monkeypatch.setattr("ctxtool.compress.gemini_cli.prompts._SYSTEM_ROOTS", ())


@pytest.mark.usefixtures("no_system_roots")
def test_find_prompt_in_the_core_package_via_override(tmp_path: Path) -> None:
    nm = tmp_path / "node_modules"
    fake_package(nm, "@google/gemini-cli-core", "dist/src/prompts/snippets.js", SNIPPETS_JS)
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    found = find_gemini_cli_prompt({GEMINI_CLI_PATH_ENV: str(nm), "PATH": str(empty_bin)})
    assert found.text == SNIPPETS_EXPECTED
    assert found.function == "getCompressionPrompt"
    assert found.package_version == "0.99.0"
    assert found.source == nm / "@google/gemini-cli-core/dist/src/prompts/snippets.js"


@pytest.mark.usefixtures("no_system_roots")
def test_find_prompt_in_a_bundle_through_npm_root(tmp_path: Path) -> None:
    nm = tmp_path / "global" / "lib" / "node_modules"
    fake_package(nm, "@google/gemini-cli", "bundle/gemini.js", BUNDLE_JS)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'root -g' ] && echo '{nm}'\n", encoding="utf-8")
    npm.chmod(npm.stat().st_mode | stat.S_IEXEC)
    found = find_gemini_cli_prompt({"PATH": str(bin_dir), "HOME": str(tmp_path / "home")})
    assert found.text == "Bundled fake prompt.\n<state_snapshot>\n</state_snapshot>"
    assert found.function == "getCompressionPrompt2"


@pytest.mark.usefixtures("no_system_roots")
def test_find_prompt_in_home_prefix_and_minified_js(tmp_path: Path) -> None:
    home = tmp_path / "home"
    fake_package(
        home / ".npm-global" / "lib" / "node_modules", "@google/gemini-cli", "dist/index.js", MINIFIED_JS
    )
    found = find_gemini_cli_prompt({"HOME": str(home), "PATH": ""})
    assert found.text == "Minified \U0001f600 \U0001f600 <state_snapshot>x</state_snapshot>"
    assert found.function is None


@pytest.mark.usefixtures("no_system_roots")
def test_override_may_name_the_js_file(tmp_path: Path) -> None:
    js = tmp_path / "snippets.js"
    js.write_text(SNIPPETS_JS, encoding="utf-8")
    assert find_gemini_cli_prompt({GEMINI_CLI_PATH_ENV: str(js), "PATH": ""}).text == SNIPPETS_EXPECTED


@pytest.mark.usefixtures("no_system_roots")
def test_find_prompt_failure_says_where_it_looked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # A package without the prompt (only the instruction template) does not count.
    fake_package(
        home / ".npm-global" / "lib" / "node_modules",
        "@google/gemini-cli",
        "bundle/gemini.js",
        "x=`<state_snapshot>`",
    )
    with pytest.raises(SummarizerError) as err:
        find_gemini_cli_prompt(
            {"HOME": str(home), "PATH": "", GEMINI_CLI_PATH_ENV: str(tmp_path / "nowhere")}
        )
    message = str(err.value)
    assert str(tmp_path / "nowhere") in message
    assert str(home / ".npm-global" / "lib" / "node_modules") in message
    assert "@google/gemini-cli or @google/gemini-cli-core" in message
    assert "--prompt-file" in message
    assert GEMINI_CLI_PATH_ENV in message
