"""The real Gemini CLI, pinned, driven against a local fake Gemini API.

ctxtool's reference is the Gemini CLI release named in ``GEMINI_CLI_VERSION``, as npm installs it, not our
memory of its source. This module installs that release once into a cache folder outside the repository
(reused by every clone and every run), serves a scripted Gemini API on 127.0.0.1 that records every request
body, and runs ``gemini`` against it with a throw-away ``GEMINI_CLI_HOME``.

When Gemini CLI releases, change ``GEMINI_CLI_VERSION``: the tests that use this module are how we find out
what changed (docs/development.md, "Checking against Gemini CLI").

How Gemini CLI is pointed at the fake (verified with 0.61.0): ``GEMINI_API_KEY`` (any value),
``GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT``, ``GEMINI_CLI_TRUST_WORKSPACE=true``,
``GEMINI_CLI_HOME=DIR`` with ``DIR/.gemini/settings.json`` selecting the API-key backend, an explicit ``-m``
(no model-routing call), standard input from ``/dev/null``. Chat turns arrive as
``:streamGenerateContent?alt=sse``; utility calls (compression summary and probe, titles, ...) as
``:generateContent``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GEMINI_CLI_VERSION = "0.61.0"

# The chat model the scripted sessions use: naming it skips Gemini CLI's routing call.
CHAT_MODEL = "gemini-3.1-pro-preview"


def _real_home() -> Path:
    """The account's home, not the per-test HOME that tests/conftest.py sets: the cache outlives a test."""
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def npm_cache_root() -> Path:
    """Where the tests' pinned npm packages go (Gemini CLI here, Azurite in tests/objectstore.py):
    ``CTXTOOL_TEST_CACHE`` or ``~/.cache/ctxtool-test``, outside the repository."""
    root = os.environ.get("CTXTOOL_TEST_CACHE")
    return Path(root) if root else _real_home() / ".cache" / "ctxtool-test"


def cache_dir() -> Path:
    """Where the pinned Gemini CLI is installed."""
    return npm_cache_root() / f"gemini-cli-{GEMINI_CLI_VERSION}"


class GeminiCliUnavailable(RuntimeError):
    """npm is missing or the install failed; the message says which and how to fix it."""


def npm_version(prefix: Path, package: str) -> str | None:
    """The version of ``package`` installed under ``prefix`` (its ``node_modules``), or None."""
    try:
        manifest = json.loads((prefix / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    version = manifest.get("version")
    return version if isinstance(version, str) else None


def npm_install_pinned(
    target: Path, package: str, version: str, unavailable: type[Exception], no_npm: str
) -> None:
    """``package@version`` installed into ``target`` on first use; raises ``unavailable`` (``no_npm`` when npm
    or node is missing) when it cannot be.

    The install goes to a temporary folder beside ``target`` and is renamed into place, under a file lock, so
    concurrent test runs (xdist workers) neither install twice nor see half an install."""
    if npm_version(target, package) == version:
        return
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise unavailable(no_npm)
    target.parent.mkdir(parents=True, exist_ok=True)
    spec = f"{package}@{version}"
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if npm_version(target, package) == version:
            return
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        # npm reads its registry settings from the real home's .npmrc, not the test's HOME.
        env = {**os.environ, "HOME": str(_real_home())}
        command = [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(staging), spec]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0 or npm_version(staging, package) != version:
            shutil.rmtree(staging, ignore_errors=True)
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise unavailable(f"npm install {spec} failed: {' / '.join(tail)}")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)


def install_gemini_cli() -> Path:
    """The ``gemini`` executable of the pinned release, installing it on first use (about 5-20 s)."""
    target = cache_dir()
    no_npm = "npm is not installed: install Node.js 20+ with npm to run Gemini CLI tests"
    npm_install_pinned(target, "@google/gemini-cli", GEMINI_CLI_VERSION, GeminiCliUnavailable, no_npm)
    return target / "node_modules" / ".bin" / "gemini"


def installed_package_dir() -> Path:
    """The installed ``@google/gemini-cli`` folder (its ``bundle/`` holds the code we compare with)."""
    return cache_dir() / "node_modules" / "@google" / "gemini-cli"


# --- the fake API -------------------------------------------------------------------------------------------


def usage(
    prompt: int,
    candidates: int = 0,
    *,
    cached: int = 0,
    thoughts: int = 0,
    tool: int = 0,
) -> dict[str, int]:
    """A ``usageMetadata`` object; ``totalTokenCount`` as the API computes it."""
    meta = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts + tool,
    }
    if cached:
        meta["cachedContentTokenCount"] = cached
    if thoughts:
        meta["thoughtsTokenCount"] = thoughts
    if tool:
        meta["toolUsePromptTokenCount"] = tool
    return meta


@dataclass(frozen=True)
class Reply:
    """One scripted model answer: parts (text, functionCall, ...) and its usage metadata."""

    parts: list[dict[str, Any]]
    usage: dict[str, int]
    finish_reason: str = "STOP"
    delay: float = 0.0  # seconds before answering (a model that takes its time)

    def body(self, model: str) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": self.parts}, "index": 0}
        if self.finish_reason:
            candidate["finishReason"] = self.finish_reason
        return {"candidates": [candidate], "usageMetadata": self.usage, "modelVersion": model}


def text(value: str, meta: dict[str, int]) -> Reply:
    return Reply([{"text": value}], meta)


def call(name: str, args: dict[str, Any], meta: dict[str, int]) -> Reply:
    return Reply([{"functionCall": {"name": name, "args": args}}], meta)


def empty(meta: dict[str, int]) -> Reply:
    """An answer with no parts at all (Gemini CLI then nudges the model, or records an empty message)."""
    return Reply([], meta)


@dataclass(frozen=True)
class Recorded:
    """One request Gemini CLI sent: ``stream`` (a chat turn) or ``generate`` (a utility call)."""

    kind: str
    model: str
    body: dict[str, Any]


_MODEL_PATH = re.compile(r"/models/([^/:]+):(streamGenerateContent|generateContent|countTokens)$")


@dataclass
class FakeGeminiAPI:
    """A Gemini API on 127.0.0.1 answering from scripts and recording every request body.

    ``chat`` answers the streamed chat turns in order (one ``Reply`` per request); ``utility`` answers
    ``:generateContent`` calls (it gets the request body and the model; the default returns a short text).
    Running out of chat replies answers 500, which fails the Gemini CLI run loudly rather than hanging it.
    """

    chat: list[Reply] = field(default_factory=list)
    utility: Callable[[dict[str, Any], str], Reply] | None = None
    requests: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        """Serve until the block ends; yields the base URL for ``GOOGLE_GEMINI_BASE_URL``."""
        from pytest_httpserver import HTTPServer

        server = HTTPServer(host="127.0.0.1", port=0)
        server.expect_request(re.compile(".*")).respond_with_handler(self._answer)
        server.start()
        try:
            yield f"http://127.0.0.1:{server.port}"
        finally:
            server.clear()
            if server.is_running():
                server.stop()

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.kind == "stream"]

    def utility_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.kind == "generate"]

    def _answer(self, request: Any) -> Any:
        from werkzeug import Response

        found = _MODEL_PATH.search(request.path)
        body = request.get_json(silent=True) or {}
        if found is None:
            return Response(json.dumps({"error": {"code": 404, "message": request.path}}), status=404)
        model, method = found.group(1), found.group(2)
        if method == "countTokens":
            return Response(json.dumps({"totalTokens": 0}), content_type="application/json")
        with self._lock:
            kind = "stream" if method == "streamGenerateContent" else "generate"
            self.requests.append(Recorded(kind, model, body))
            if kind == "stream":
                if not self.chat:
                    return Response(
                        json.dumps({"error": {"code": 500, "message": "script ran out"}}), status=500
                    )
                reply = self.chat.pop(0)
            else:
                reply = self.utility(body, model) if self.utility else text("Summary.", usage(10, 2))
        payload = json.dumps(reply.body(model))
        if reply.delay:
            time.sleep(reply.delay)
        if kind == "stream":
            return Response(f"data: {payload}\r\n\r\n", content_type="text/event-stream")
        return Response(payload, content_type="application/json")


# --- running Gemini CLI ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Workspace:
    """A ``GEMINI_CLI_HOME`` and a project folder Gemini CLI knows, with the project's ``chats/`` folder."""

    home: Path
    project: Path

    @property
    def gemini_dir(self) -> Path:
        return self.home / ".gemini"

    def chats(self) -> Path:
        """The project's chats folder (Gemini CLI names the project folder after a slug it keeps in
        ``projects.json``; found rather than assumed)."""
        found = sorted(self.gemini_dir.glob("tmp/*/chats"))
        if not found:
            raise FileNotFoundError(f"Gemini CLI wrote no chats folder under {self.gemini_dir / 'tmp'}")
        return found[0]

    def session_files(self) -> list[Path]:
        return sorted(p for p in self.chats().glob("session-*.json*") if p.suffix in (".json", ".jsonl"))


def make_workspace(
    root: Path, settings: dict[str, Any] | None = None, *, project_name: str = "proj"
) -> Workspace:
    """A fresh home whose settings select the API-key backend (plus ``settings``, merged one level deep)."""
    home, project = root / "home", root / project_name
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    project.mkdir(parents=True, exist_ok=True)
    merged: dict[str, Any] = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    for key, value in (settings or {}).items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    (home / ".gemini" / "settings.json").write_text(json.dumps(merged))
    return Workspace(home, project)


def register_project(workspace: Workspace, slug: str = "proj") -> Path:
    """Make Gemini CLI treat ``<home>/.gemini/tmp/<slug>/chats`` as the project's chats folder (for placing
    session files there before Gemini CLI has run in the project)."""
    tmp = workspace.gemini_dir / "tmp" / slug
    (tmp / "chats").mkdir(parents=True, exist_ok=True)
    (tmp / ".project_root").write_text(str(workspace.project))
    (workspace.gemini_dir / "projects.json").write_text(
        json.dumps({"projects": {str(workspace.project): slug}})
    )
    return tmp / "chats"


# ``gemini`` (bundle/gemini.js ``run``) loads most of its 17 MB bundle, then starts itself again as a child
# process with a larger ``--max-old-space-size`` and this variable set; the child does the work. Setting it
# here runs that same code in the first process: each run parses the bundle once, not twice (about a third
# of a run's CPU time). Only the heap limit differs, and no run here comes near either limit.
NO_RELAUNCH = {"GEMINI_CLI_NO_RELAUNCH": "true"}


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        """The ``--output-format json`` document (Gemini CLI may print warnings before it)."""
        start = self.stdout.find("{")
        if start < 0:
            raise AssertionError(
                f"no JSON in Gemini CLI's output: {self.stdout[:500]!r} / {self.stderr[-500:]!r}"
            )
        loaded = json.loads(self.stdout[start:])
        assert isinstance(loaded, dict)
        return loaded


def run_gemini(
    binary: Path,
    workspace: Workspace,
    base_url: str,
    args: list[str],
    *,
    timeout: float = 120,
) -> Run:
    """Run ``gemini ARGS`` in the project folder against the fake; never against a real endpoint."""
    assert base_url.startswith("http://127.0.0.1:"), base_url
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workspace.home),
        "GEMINI_API_KEY": "fake-key-for-the-local-test-server",
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_HOME": str(workspace.home),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "TZ": os.environ.get("TZ", "UTC"),
        "LANG": "en_US.UTF-8",
        **NO_RELAUNCH,
    }
    done = subprocess.run(
        [str(binary), *args],
        cwd=workspace.project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)
