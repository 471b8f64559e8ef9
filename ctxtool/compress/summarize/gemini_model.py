"""The ``gemini`` summarizer: answers a :class:`ModelCall` with a real generateContent request.

It sends the call's ``contents`` and system instruction unchanged, through google-genai, and reads the
answer the way Gemini CLI's ``getResponseText`` does. Retrying transient failures (429, 5xx, lost
connections) is done here, not by the SDK, so that the policy is the same whatever SDK version is
installed and tests can replace the sleep. Every failure becomes a one-line :class:`SummarizerError`
that never contains the API key.

google-genai is imported inside the methods that need it, so importing this module stays cheap.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ctxtool.common.errors import SummarizerError
from ctxtool.common.wording import plural
from ctxtool.compress.summarizer import ModelCall

if TYPE_CHECKING:
    from google.genai import Client
    from google.genai.errors import APIError

API_KEY_ENV_VARS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")  # Gemini CLI's order: GEMINI_API_KEY wins
VERTEX_ENV_VAR = "GOOGLE_GENAI_USE_VERTEXAI"
BASE_URL_ENV_VAR = "GOOGLE_GEMINI_BASE_URL"
# Gemini CLI (@google/genai) talks to v1beta; google-genai for Python 3.x defaults to v1.
GEMINI_API_VERSION = "v1beta"

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_BACKOFF_INITIAL_S = 2.0
_BACKOFF_MAX_S = 30.0
_JITTER = 0.25  # each wait is stretched by up to this fraction, at random
# A server that asks to wait longer than this (e.g. a daily quota) will not be waited for.
_MAX_SERVER_DELAY_S = 60.0


def get_response_text(response: Any) -> str | None:
    """Port of ``getResponseText`` (packages/core/src/utils/partUtils.ts, gemini-cli 04fbf50725).

    Joins the non-empty, non-thought ``text`` of the first candidate's parts; None when there is no
    candidate, no content or no parts. Parts that are all thoughts give "" (not None), as upstream."""
    if not (candidates := getattr(response, "candidates", None)):
        return None
    if not (parts := getattr(getattr(candidates[0], "content", None), "parts", None)):
        return None
    return "".join(p.text for p in parts if p.text and not p.thought)


def _check_installed() -> None:
    """A one-line SummarizerError naming the install command when google-genai is not installed (it is the
    ``gemini`` extra: most commands never call a model). Finds the package without importing it."""
    import importlib.util

    try:
        found = importlib.util.find_spec("google.genai") is not None
    except ModuleNotFoundError:  # no ``google`` namespace package at all
        found = False
    if not found:
        raise SummarizerError(
            "the gemini summarizer needs the google-genai package, which is not installed",
            "Install it with pip install 'ctxtool[gemini]' (or use the offline summarizer, the default)",
        )


class GeminiSummarizer:
    """Summarizer that calls the Gemini API (or Vertex AI) through google-genai.

    ``model`` overrides ``call.model``. The key comes from the argument, else ``GEMINI_API_KEY``, else
    ``GOOGLE_API_KEY``; with ``GOOGLE_GENAI_USE_VERTEXAI=true`` no key is required and the SDK reads
    its own Vertex variables. ``base_url`` defaults to ``GOOGLE_GEMINI_BASE_URL``. ``system_prompt``
    replaces the call's system instruction (a ``--prompt-file`` or an installed Gemini CLI's prompt).
    ``max_retries`` counts retries after the first attempt. ``sleep`` and ``rng`` shape the backoff
    (tests pass a recorder); ``env`` replaces ``os.environ`` for ctxtool's own lookups (the SDK still
    reads ``os.environ`` for its Vertex AI settings)."""

    name = "gemini"
    deterministic = False

    def __init__(
        self,
        model: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_s: float = 120,
        max_retries: int = 4,
        system_prompt: str | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        _check_installed()
        if timeout_s <= 0:
            raise SummarizerError(
                f"timeout must be positive, got {timeout_s}", "Pass a timeout in seconds > 0"
            )
        if max_retries < 0:
            raise SummarizerError(f"max_retries must be >= 0, got {max_retries}", "Pass 0 or more retries")
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.system_prompt = system_prompt
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        # The same test google-genai applies to GOOGLE_GENAI_USE_VERTEXAI.
        self._vertex = env.get(VERTEX_ENV_VAR, "").strip().lower() in ("true", "1")
        self.base_url = base_url or env.get(BASE_URL_ENV_VAR) or None
        env_keys = [env[v].strip() for v in API_KEY_ENV_VARS if env.get(v, "").strip()]
        explicit = api_key.strip() if api_key and api_key.strip() else None
        # On Vertex AI only an explicit key is passed: the SDK then reads GOOGLE_API_KEY (express mode)
        # or GOOGLE_CLOUD_PROJECT/LOCATION itself, and a Gemini API key must not override those.
        self._api_key = explicit if self._vertex else explicit or next(iter(env_keys), None)
        # Every key this process could send, so that none is ever echoed in an error message.
        self._secrets = sorted({k for k in (explicit, *env_keys) if k}, key=len, reverse=True)
        if self._api_key is None and not self._vertex:
            raise SummarizerError(
                "no Gemini API key found for the gemini summarizer",
                "Set GEMINI_API_KEY (or GOOGLE_API_KEY) to a key from https://aistudio.google.com/apikey, "
                f"or set {VERTEX_ENV_VAR}=true to use Vertex AI credentials",
            )
        self._client: Client | None = None

    def __repr__(self) -> str:  # never show the key
        return (
            f"GeminiSummarizer(model={self.model!r}, base_url={self.base_url!r}, vertex={self._vertex}, "
            f"timeout_s={self.timeout_s}, max_retries={self.max_retries})"
        )

    def _get_client(self) -> Client:
        if self._client is not None:
            return self._client
        from google import genai
        from google.genai import types

        options = types.HttpOptions(
            base_url=self.base_url,
            # Vertex AI keeps the SDK's own version (v1beta1).
            api_version=None if self._vertex else GEMINI_API_VERSION,
            timeout=max(1, round(self.timeout_s * 1000)),
            retry_options=None,  # no SDK retries: generate() owns the policy
        )
        try:
            self._client = genai.Client(vertexai=self._vertex, api_key=self._api_key, http_options=options)
        except Exception as exc:  # ValueError or google.auth's DefaultCredentialsError
            raise SummarizerError(
                f"could not set up the Gemini client: {self._clean(str(exc))}",
                "Set GEMINI_API_KEY, or for Vertex AI set GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION "
                "and run `gcloud auth application-default login`",
            ) from None
        return self._client

    def close(self) -> None:
        """Release the HTTP connections (the summarizer can still be used afterwards)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> GeminiSummarizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def generate(self, call: ModelCall) -> str | None:
        from google.genai import errors, types

        client = self._get_client()
        model, generation = self.request_model(call)
        system = self.system_prompt if self.system_prompt is not None else call.system_instruction
        body: dict[str, Any] = {"contents": call.contents}
        limit = {"maxOutputTokens": call.max_output_tokens} if call.max_output_tokens else {}
        if generation:
            body["generationConfig"] = {**generation, **limit}
        config = types.GenerateContentConfig(
            system_instruction=system,
            max_output_tokens=call.max_output_tokens,
            # The SDK re-serialises contents through its pydantic types, which renames some fields
            # (inlineData.mimeType -> mime_type). extra_body replaces the list (and the generationConfig)
            # with the call's own dicts, so the request carries exactly what the strategy built.
            http_options=types.HttpOptions(extra_body=body),
        )
        timeout_types, connection_types = _transport_errors()
        attempt = 0
        while True:
            try:
                # The SDK's accepted types vary with optional packages (PIL); the body is sent via extra_body.
                contents: Any = call.contents
                response = client.models.generate_content(model=model, contents=contents, config=config)
            except errors.APIError as exc:
                code = int(exc.code or 0)
                server_delay = _retry_delay_s(exc) if code == 429 else None
                if server_delay is not None and server_delay > _MAX_SERVER_DELAY_S:
                    raise self._quota_error(exc, model, attempt + 1, server_delay) from None
                if code in _RETRY_STATUS and attempt < self.max_retries:
                    self._sleep(max(self._backoff(attempt), server_delay or 0.0))
                    attempt += 1
                    continue
                raise self._api_error(exc, model, attempt + 1) from None
            except (errors.UnknownApiResponseError, json.JSONDecodeError):
                raise SummarizerError(
                    f"the Gemini API answered for model {model} with a body that is not JSON",
                    "Check the base URL (GOOGLE_GEMINI_BASE_URL) points at a Gemini API endpoint",
                ) from None
            except connection_types as exc:
                if attempt < self.max_retries:
                    self._sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                where = self.base_url or (
                    "Vertex AI" if self._vertex else "https://generativelanguage.googleapis.com"
                )
                raise SummarizerError(
                    f"could not reach the Gemini API at {where} after {attempt + 1} attempts "
                    f"({type(exc).__name__}: {self._clean(str(exc))})",
                    "Check the network connection and GOOGLE_GEMINI_BASE_URL, then retry",
                ) from None
            except timeout_types:
                raise SummarizerError(
                    f"the Gemini API did not answer within {self.timeout_s:g} s (model {model})",
                    "Retry, or raise the summarizer timeout",
                ) from None
            return get_response_text(response)

    def request_model(self, call: ModelCall) -> tuple[str, dict[str, Any]]:
        """The model and generationConfig this back end sends ``call`` with: the call's own (its Vertex AI
        variant on Vertex AI), or ``--summarizer-model`` with the config Gemini CLI's aliases give that
        model."""
        if self._vertex and "vertex_model" in call.extra:
            model, generation = call.extra["vertex_model"], call.extra["vertex_generation_config"]
        else:
            model, generation = call.model, call.generation_config
        if self.model and self.model != model:
            if call.extra.get("model_configs"):
                from ctxtool.compress.gemini_cli.model_configs import resolved_config

                return self.model, resolved_config(self.model)[1]
            return self.model, {}
        return model, dict(generation)

    def _backoff(self, attempt: int) -> float:
        base: float = min(_BACKOFF_MAX_S, _BACKOFF_INITIAL_S * 2.0**attempt)
        return base * (1 + _JITTER * self._rng.random())

    def _clean(self, text: str) -> str:
        """One line, bounded, and without the key (a proxy might echo it back)."""
        for secret in self._secrets:
            text = text.replace(secret, "[REDACTED]")
        text = " ".join(text.split())
        return text if len(text) <= 300 else text[:297] + "..."

    def _describe(self, exc: APIError) -> str:
        status = f" {exc.status}" if exc.status else ""
        message = f": {self._clean(str(exc.message))}" if exc.message else ""
        return f"HTTP {exc.code}{status}{message}"

    def _quota_error(self, exc: APIError, model: str, attempts: int, wait_s: float | None) -> SummarizerError:
        after = f"; the server asks to wait {wait_s:g} s" if wait_s is not None else ""
        return SummarizerError(
            f"Gemini API quota exhausted for model {model} after {plural(attempts, 'attempt')} "
            f"({self._describe(exc)}){after}",
            "Wait and retry, pick another model with --summarizer-model, or check the quota of your key at "
            "https://aistudio.google.com",
        )

    def _api_error(self, exc: APIError, model: str, attempts: int) -> SummarizerError:
        code, why = int(exc.code or 0), self._describe(exc)
        if code in (401, 403) or "API_KEY_INVALID" in str(exc.details):
            if self._vertex:
                fix = "Check the Vertex AI credentials and that the project may call the model"
            else:
                fix = (
                    "Check GEMINI_API_KEY / GOOGLE_API_KEY: create a valid key at "
                    "https://aistudio.google.com/apikey"
                )
            return SummarizerError(f"the Gemini API rejected the credentials ({why})", fix)
        if code == 429 or exc.status == "RESOURCE_EXHAUSTED":
            return self._quota_error(exc, model, attempts, None)
        if code >= 500:
            return SummarizerError(
                f"the Gemini API failed for model {model} after {attempts} attempts ({why})", "Retry later"
            )
        fix = "Check the model name and the request; rerun with --traceback for details"
        if code == 404:
            fix = "Check the model name (--summarizer-model) and the base URL"
        return SummarizerError(f"the Gemini API refused the request for model {model} ({why})", fix)


def _retry_delay_s(exc: APIError) -> float | None:
    """The ``google.rpc.RetryInfo`` delay a 429 carries (``"retryDelay": "37s"``), if any."""
    details = exc.details.get("error", exc.details) if isinstance(exc.details, dict) else None
    items = details.get("details") if isinstance(details, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("google.rpc.RetryInfo"):
            m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)s\s*", str(item.get("retryDelay", "")))
            if m:
                return float(m.group(1))
    return None


def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(read/write timeouts, connection failures) of the HTTP libraries google-genai may use.

    A connect timeout counts as a connection failure and is retried; a read timeout is not, since the
    model already had ``timeout_s`` to answer."""
    timeouts: list[type[BaseException]] = []
    connection: list[type[BaseException]] = []
    for name in ("httpx", "httpx2"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        connection.extend([mod.ConnectTimeout, mod.NetworkError, mod.RemoteProtocolError])
        timeouts.append(mod.TimeoutException)
    return tuple(timeouts), tuple(connection)
