"""Secrets in session text: found with detect-secrets' detectors, shown as ``[REDACTED:kind]``.

Owns: which detectors run, finding secrets in a text, replacing them, and counting them in a session's
messages. The patterns are detect-secrets' regex-based plugins, plus the Google API key (``AIza…``), which it
has no plugin for. The high-entropy and keyword plugins are left out: on real sessions they flag hashes,
base64 images and every ``password`` variable name.

Must not import typer or rich; detect-secrets is imported on first use only.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# detect-secrets plugins not used: noisy on session text (see the module docstring).
_LEFT_OUT = frozenset(
    {
        "Base64 High Entropy String",
        "Hex High Entropy String",
        "Secret Keyword",
        "Public IP (ipv4)",
        "Artifactory Credentials",
        "Cloudant Credentials",
        "IBM Cloud IAM Key",
        "IBM COS HMAC Credentials",
        "SoftLayer Credentials",
        "Azure Storage Account access key",
    }
)
# Google API keys (Gemini's own): "AIza" and 35 URL-safe characters.
_GOOGLE = ("Google API Key", re.compile(r"AIza[0-9A-Za-z_\-]{35}"))


@dataclass(frozen=True)
class Secret:
    kind: str  # a short slug: google-api-key, aws-access-key, github-token, ...
    start: int
    end: int


def _slug(kind: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")


@functools.cache
def _detectors() -> tuple[tuple[str, re.Pattern[str]], ...]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    out: list[tuple[str, re.Pattern[str]]] = []
    mapping: dict[str, Any] = dict(get_mapping_from_secret_type_to_class())
    for kind, cls in sorted(mapping.items()):
        if kind in _LEFT_OUT or not issubclass(cls, RegexBasedDetector):
            continue
        for pattern in cls().denylist:
            out.append((_slug(kind), pattern))
    out.append((_slug(_GOOGLE[0]), _GOOGLE[1]))
    return tuple(out)


def find(text: str) -> list[Secret]:
    """The secrets in ``text``, in order, overlapping matches merged (the longest wins its kind)."""
    if len(text) < 8:
        return []
    spans: list[Secret] = []
    for kind, pattern in _detectors():
        for match in pattern.finditer(text):
            if match.end() - match.start() >= 8:
                spans.append(Secret(kind, match.start(), match.end()))
    spans.sort(key=lambda s: (s.start, -(s.end - s.start)))
    merged: list[Secret] = []
    for span in spans:
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            if span.end > last.end:
                merged[-1] = Secret(last.kind, last.start, span.end)
            continue
        merged.append(span)
    return merged


def redact(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:kind]``."""
    found = find(text)
    if not found:
        return text
    out: list[str] = []
    at = 0
    for secret in found:
        out.extend((text[at : secret.start], f"[REDACTED:{secret.kind}]"))
        at = secret.end
    out.append(text[at:])
    return "".join(out)


def redact_value(value: Any) -> Any:
    """Every string inside a JSON-like value redacted (keys kept); other values unchanged."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    return value


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | dict):
        for v in value.values() if isinstance(value, dict) else value:
            yield from _strings(v)


@dataclass(frozen=True)
class Finding:
    """A secret in a session: the message that holds it and its kind (never the value)."""

    message_id: str
    kind: str


def in_messages(messages: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """Every secret in a session's messages: their content, thoughts and tool calls (arguments, results)."""
    found: list[Finding] = []
    for message in messages:
        raw = message.get("id")
        mid = raw if isinstance(raw, str) else "?"  # never "None" for a message without an id
        for field in ("content", "displayContent", "thoughts", "toolCalls"):
            for text in _strings(message.get(field)):
                found.extend(Finding(mid, s.kind) for s in find(text))
    return found


__all__ = ["Finding", "Secret", "find", "in_messages", "redact", "redact_value"]
