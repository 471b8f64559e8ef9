"""Faithful Python port of Gemini CLI's deterministic chat compression.

Upstream: google-gemini/gemini-cli at HEAD 5411f113ca (2026-08-21), mainly
``packages/core/src/context/chatCompressionService.ts`` (``findCompressSplitPoint``,
``truncateHistoryToBudget``, ``ChatCompressionService.compress``), ``utils/tokenCalculation.ts``,
``core/tokenLimits.ts``, ``utils/fileUtils.ts`` (``formatTruncatedToolOutput``), ``utils/sessionUtils.ts``
(``convertSessionToClientHistory``, ``ensureStableToolIds``), ``utils/cryptoUtils.ts`` (``deriveStableId``)
and ``core/geminiChat.ts`` (``extractCuratedHistory``, ``stripThoughts``, ``coalesceConsecutiveRoles``).
The reference is spec/gemini-cli-compression.md; section numbers below point into it. Older behaviour is
selected by a :class:`~ctxtool.compress.gemini_cli.profiles.Profile`, whose fields this module branches on.

Values are plain dicts in Gemini wire form (``{"role": ..., "parts": [...]}``), as loaded from JSON. All
lengths, slices, numbers and truthiness follow JavaScript through :mod:`ctxtool.common.jsvalue`.

This module does no I/O: budget truncation returns the tool outputs to save (path + text) and the caller
writes them. The two model calls go through a :class:`~ctxtool.compress.summarizer.Summarizer`; everything
else is deterministic."""

from __future__ import annotations

import copy
import hashlib
import math
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from itertools import accumulate
from typing import Any

from ctxtool.common.jsvalue import (
    js_slice,
    js_stringify,
    js_template,
    js_trim,
    js_truthy,
    json_length,
    normalize_surrogates,
    utf16_len,
)
from ctxtool.compress.gemini_cli.environment import locale_date
from ctxtool.compress.gemini_cli.model_configs import COMPRESSION_ALIAS_MODELS as COMPRESSION_ALIAS_MODELS
from ctxtool.compress.gemini_cli.model_configs import DEFAULT_GEMINI_MODEL, compression_model
from ctxtool.compress.gemini_cli.profiles import DEFAULT_PROFILE, PROFILES, Profile
from ctxtool.compress.gemini_cli.prompts import ctxtool_compression_prompt
from ctxtool.compress.gemini_cli.texts import ANCHOR_EXISTING as ANCHOR_EXISTING
from ctxtool.compress.gemini_cli.texts import ANCHOR_NEW as ANCHOR_NEW
from ctxtool.compress.gemini_cli.texts import (
    CTXTOOL_TEXTS,
    DEFAULT_ENV_TEMPLATE,
    LEGACY_INSTRUCTION,
    CompressionTexts,
    EnvTemplate,
)
from ctxtool.compress.gemini_cli.texts import INSTRUCTION_SUFFIX as INSTRUCTION_SUFFIX
from ctxtool.compress.gemini_cli.texts import PROBE_TEXT as PROBE_TEXT
from ctxtool.compress.gemini_cli.texts import SUMMARY_ACK_TEXT as SUMMARY_ACK_TEXT
from ctxtool.compress.summarizer import CallKind, Content, ModelCall, Summarizer
from ctxtool.measure.estimator import ESTIMATOR_HEAD, EstimatorSpec
from ctxtool.measure.estimator import estimate_token_count as estimate_token_count
from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT
from ctxtool.measure.tokens import token_limit as _current_token_limit

Part = dict[str, Any]
Turn = dict[str, Any]  # HistoryTurn: {"id": str, "content": Content}

# ---- Constants (spec section 3) ------------------------------------------------------------------

COMPRESSION_PRESERVE_THRESHOLD = 0.3  # context/chatCompressionService.ts:47
COMPRESSION_FUNCTION_RESPONSE_TOKEN_BUDGET = 50_000  # context/chatCompressionService.ts:52
COMPRESSION_TRUNCATE_LINES = 30  # services/chatCompressionService.ts, 08c32f725e..28805a4b2d
DEFAULT_TRUNCATE_TOOL_OUTPUT_THRESHOLD = 40_000  # config/config.ts:478
MAX_TRUNCATED_LINE_WIDTH = 1000  # utils/fileUtils.ts, ee8d425603..28805a4b2d
MAX_TRUNCATED_CHARS = 10_000  # utils/fileUtils.ts, ee8d425603..28805a4b2d
SYNTHETIC_THOUGHT_SIGNATURE = "skip_thought_signature_validator"  # core/geminiChat.ts
ENVIRONMENT_CONTEXT_ID = "d04923d38bb0f6017037e74183378ef4"  # deriveStableId(['environment-context'])

# The summary's acknowledgement, the instruction, anchors and probe live in ctxtool.compress.gemini_cli.texts.
ENV_ACK_TEXT = "Got it. Thanks for the context!"  # after the env turn, until ed0d1a0ba3 (2025-10-07)
STATE_SNAPSHOT_TAG = "<state_snapshot>"

# System prompts. Upstream's prose is not copied (project rule). The v6-structure prompt (HEAD, section 9.1.1)
# is ctxtool's own from ctxtool.compress.gemini_cli.prompts; the v4-structure one below serves the eras before
# 1182168bd9. The summarizer sees the difference; the deterministic algorithm does not.
SYSTEM_PROMPT_V4 = """You condense a long agent conversation into a structured state record.

When the conversation grows too long it is replaced by your record, so keep every fact, path, command \
and decision the agent needs to continue, and drop small talk.

Think first in a private scratchpad, then write the record as one XML block:

<state_snapshot>
    <overall_goal>The user's top-level objective in one sentence.</overall_goal>
    <key_knowledge>Facts, conventions, commands and decisions learned so far.</key_knowledge>
    <file_system_state>Relevant paths: what exists, what was read, created or deleted.</file_system_state>
    <recent_actions>The last significant actions and what they produced.</recent_actions>
    <current_plan>The plan, with each step marked [DONE], [IN PROGRESS] or [TODO].</current_plan>
</state_snapshot>"""


class CompressionStatus(IntEnum):
    """``CompressionStatus`` (packages/core/src/core/turn.ts:183 at HEAD)."""

    COMPRESSED = 1
    COMPRESSION_FAILED_INFLATED_TOKEN_COUNT = 2
    COMPRESSION_FAILED_TOKEN_COUNT_ERROR = 3  # never produced after ffcd996366 (2025-09-27)
    COMPRESSION_FAILED_EMPTY_SUMMARY = 4
    NOOP = 5
    CONTENT_TRUNCATED = 6


# ---- Small JS-faithful helpers -------------------------------------------------------------------


def _parts(content: Any) -> list[Any]:
    """``content.parts || []``."""
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def _has_truthy(parts: Iterable[Any], key: str) -> bool:
    return any(js_truthy(_get(p, key)) for p in parts)


def _flatten_parts(contents: Iterable[Content]) -> list[Any]:
    """``contents.flatMap(c => c.parts || [])``."""
    return [p for c in contents for p in _parts(c)]


def _is_plain_user_turn(content: Content) -> bool:
    return _get(content, "role") == "user" and not _has_truthy(_parts(content), "functionResponse")


def _check_fraction(fraction: float) -> None:
    # Same comparisons as upstream, so NaN passes through exactly as it does in JS.
    if fraction <= 0 or fraction >= 1:
        raise ValueError("Fraction must be between 0 and 1")


# ---- Split point (spec section 5) ----------------------------------------------------------------


def find_compress_split_point(
    contents: Sequence[Content], fraction: float, *, count_candidate_first: bool = False
) -> int:
    """``findCompressSplitPoint`` (context/chatCompressionService.ts, 93694c6a65 .. HEAD).

    Index of the first plain user turn (no functionResponse) before which at least ``fraction`` of the
    total ``JSON.stringify`` length lies; everything when the history ends with a model turn without a
    functionCall; otherwise the last plain user turn. ``count_candidate_first`` reproduces the
    853ae56e7e variant that added the candidate's own length before the check (section 5.2)."""
    _check_fraction(fraction)
    counts = [json_length(c) for c in contents]
    target = sum(counts) * fraction
    last_split_point = 0
    cumulative = 0
    for i, content in enumerate(contents):
        if count_candidate_first:
            cumulative += counts[i]
        if _is_plain_user_turn(content):
            if cumulative >= target:
                return i
            last_split_point = i
        if not count_candidate_first:
            cumulative += counts[i]
    last = contents[-1] if contents else None
    if _get(last, "role") == "model" and not _has_truthy(_parts(last), "functionCall"):
        return len(contents)
    return last_split_point


def find_index_after_fraction(history: Sequence[Content], fraction: float) -> int:
    """``findIndexAfterFraction`` (core/client.ts, 0c70a99b56 .. 853ae56e7e): first index whose running
    ``JSON.stringify`` length reaches ``fraction`` of the total, or ``len(history)``."""
    _check_fraction(fraction)
    counts = [json_length(c) for c in history]
    target = sum(counts) * fraction
    return next((i for i, so_far in enumerate(accumulate(counts)) if so_far >= target), len(history))


def legacy_split_point(history: Sequence[Content], fraction: float) -> int:
    """Split of [0c70a99b56 .. 853ae56e7e): ``findIndexAfterFraction`` then advance past model turns and
    user turns made only of functionResponse parts (the 2f1d6234de rule, section 5.3)."""
    idx = find_index_after_fraction(history, fraction)
    while idx < len(history):
        role, parts = _get(history[idx], "role"), _parts(history[idx])
        only_responses = bool(parts) and all(js_truthy(_get(p, "functionResponse")) for p in parts)
        if not (role == "model" or (role == "user" and only_responses)):
            break
        idx += 1
    return idx


# ---- Token limits and the summarizer model (sections 2.3, 7.4, 9.6) ------------------------------

_LEGACY_LIMITS = {"gemini-1.5-pro": 2_097_152, "gemini-2.0-flash-preview-image-generation": 32_000}


def token_limit(model: str, *, legacy: bool = False) -> int:
    """``tokenLimit(model)`` (core/tokenLimits.ts); ``legacy``: the table before aa480e5fbb (2026-01-09).

    The current table is shared with the frames (``ctxtool.measure.tokens``)."""
    return _LEGACY_LIMITS.get(model, DEFAULT_TOKEN_LIMIT) if legacy else _current_token_limit(model)


_COMPRESSION_ALIASES: dict[str, str] = {
    "gemini-3-pro-preview": "chat-compression-3-pro",
    "gemini-3.1-pro-preview": "chat-compression-3-pro",
    "gemini-3-flash-preview": "chat-compression-3-flash",  # PREVIEW_GEMINI_FLASH_MODEL
    "gemini-3.1-flash-lite": "chat-compression-3.1-flash-lite",
    "none": "chat-compression-3.1-flash-lite",  # PREVIEW_GEMINI_FLASH_LITE_MODEL is the literal 'none'
    "gemini-2.5-flash-lite": "chat-compression-2.5-flash-lite",
    "gemini-2.5-pro": "chat-compression-2.5-pro",
    "gemini-2.5-flash": "chat-compression-2.5-flash",  # DEFAULT_GEMINI_FLASH_MODEL
}
DEFAULT_COMPRESSION_ALIAS = "chat-compression-default"


def model_to_compression_alias(model: str) -> str:
    """``modelStringToModelConfigAlias(model)`` (context/chatCompressionService.ts, HEAD)."""
    return _COMPRESSION_ALIASES.get(model, DEFAULT_COMPRESSION_ALIAS)


def resolve_compression_alias(alias: str) -> str:
    """The concrete model a ``chat-compression-*`` alias resolves to; ValueError for an unknown alias."""
    if alias not in COMPRESSION_ALIAS_MODELS:
        expected = ", ".join(COMPRESSION_ALIAS_MODELS)
        raise ValueError(f"unknown compression alias {alias!r}; expected one of {expected}")
    return COMPRESSION_ALIAS_MODELS[alias]


def summarizer_model(model: str) -> str:
    """The model upstream's summarizer calls actually run on for a chat on ``model``."""
    return resolve_compression_alias(model_to_compression_alias(model))


_AUTO_MODELS = {"auto-gemini-3": "gemini-3-pro-preview", "auto-gemini-2.5": "gemini-2.5-pro"}


def _cleans_history(model: str) -> bool:
    """``isGemini2Model(model) || supportsModernFeatures(model)`` (config/models.ts), the latter being
    ``isGemini3Model || isCustomModel`` on the auto-resolved model."""
    resolved = _AUTO_MODELS.get(model, model)
    is_gemini3 = re.match(r"^gemini-3(\.|-|$)", resolved) is not None
    return re.match(r"^gemini-2(\.|$)", model) is not None or is_gemini3 or not resolved.startswith("gemini-")


# ---- Tool output truncation formatters (section 13.1) --------------------------------------------


def format_truncated_tool_output(content: str, output_file: str, max_chars: int) -> str:
    """``formatTruncatedToolOutput`` (utils/fileUtils.ts, 28805a4b2d .. HEAD): first 20% and last 80% of
    ``max_chars`` UTF-16 units, with en-US grouped numbers; unchanged when it already fits."""
    length = utf16_len(content)
    if length <= max_chars:
        return content
    head = math.floor(max_chars * 0.2)
    tail = max_chars - head
    return (
        f"Output too large. Showing first {head:,} and last {tail:,} characters. "
        f"For full output see: {output_file}\n"
        + js_slice(content, 0, head)
        + f"\n\n... [{length - head - tail:,} characters omitted] ...\n\n"
        + js_slice(content, -tail)
    )


def format_truncated_tool_output_lines(
    content: str, output_file: str, truncate_lines: int = COMPRESSION_TRUNCATE_LINES
) -> str:
    """Line-based ``formatTruncatedToolOutput`` of [ee8d425603 .. 28805a4b2d): always reformats."""
    lines = content.split("\n")
    n = len(lines)
    if n > 1:
        last = lines[-truncate_lines:] if truncate_lines > 0 else lines  # slice(-0) keeps all
        width = MAX_TRUNCATED_LINE_WIDTH
        shown = [
            js_slice(s, 0, width) + "... [LINE WIDTH TRUNCATED]" if utf16_len(s) > width else s for s in last
        ]
        note = " (some long lines truncated)" if any(utf16_len(s) > width for s in last) else ""
        return (
            f"Output too large. Showing the last {len(last)} of {n} lines{note}. "
            f"For full output see: {output_file}\n...\n" + "\n".join(shown)
        )
    return (
        f"Output too large. Showing the last {MAX_TRUNCATED_CHARS:,} characters of the output. "
        f"For full output see: {output_file}\n..." + js_slice(content, -MAX_TRUNCATED_CHARS)
    )


_UNSAFE_FILENAME = re.compile(r"[^a-zA-Z0-9_-]")


def truncated_tool_output_filename(tool_name: str, truncation_id: int | str) -> str:
    """File name ``saveTruncatedToolOutput`` picks (utils/fileUtils.ts, 01906a9205 .. HEAD)."""
    t = _UNSAFE_FILENAME.sub("_", tool_name).lower()
    i = _UNSAFE_FILENAME.sub("_", str(truncation_id)).lower()
    return f"{i}.txt" if i.startswith(t) else f"{t}_{i}.txt"


# ---- Reverse token budget (section 6) ------------------------------------------------------------


@dataclass(frozen=True)
class SavedToolOutput:
    """A tool output upstream would write to disk before replacing it with a placeholder."""

    path: str
    text: str
    tool_name: str
    truncation_id: int


@dataclass(frozen=True)
class BudgetTruncation:
    history: list[Content]
    saved: list[SavedToolOutput]
    next_truncation_id: int  # the id the next truncation would use


def _response_text(response: Any) -> str:
    """The string truncateHistoryToBudget measures for a functionResponse.response."""
    if isinstance(response, str):
        return response
    for key in ("output", "content"):
        if isinstance(response, dict) and isinstance(response.get(key), str):
            return str(response[key])
    return js_stringify(response, indent=2)


def truncate_history_to_budget(
    history: Sequence[Content],
    *,
    tool_output_dir: str,
    max_chars: int = DEFAULT_TRUNCATE_TOOL_OUTPUT_THRESHOLD,
    budget: int = COMPRESSION_FUNCTION_RESPONSE_TOKEN_BUDGET,
    first_truncation_id: int = 1,
    formatter: str = "head_tail",
    estimator: EstimatorSpec = ESTIMATOR_HEAD,
) -> BudgetTruncation:
    """``truncateHistoryToBudget`` (context/chatCompressionService.ts, 08c32f725e .. HEAD).

    Walks newest to oldest, last part first, keeping function responses while their cumulative estimate
    stays within ``budget``; each one that would overflow is replaced by ``{output: placeholder}`` and
    listed in ``saved`` (path + text) for the caller to write. ``formatter`` is ``"head_tail"`` (HEAD)
    or ``"lines"`` (before 28805a4b2d). The input is not modified."""
    counter = 0
    next_id = first_truncation_id
    saved: list[SavedToolOutput] = []
    out: list[Content] = []
    for content in reversed(history):
        new_parts: list[Any] = []
        for part in reversed(_parts(content)):
            fr = _get(part, "functionResponse")  # a dict is always truthy: no js_truthy needed
            text = _response_text(fr["response"]) if isinstance(fr, dict) and "response" in fr else None
            if text is None:
                # Not a function response, or JSON.stringify(undefined), which is undefined: it estimates as
                # `{}` (0 tokens) and writing it throws, so upstream keeps the original part.
                new_parts.append(part)
                continue
            tokens = estimate_token_count([{"text": text}], estimator=estimator)
            if counter + tokens > budget:
                name = _get(fr, "name")
                tool_name = "unknown_tool" if name is None else js_template(name)
                path = posixpath.join(tool_output_dir, truncated_tool_output_filename(tool_name, next_id))
                saved.append(SavedToolOutput(path, text, tool_name, next_id))
                next_id += 1
                if formatter == "lines":
                    message = format_truncated_tool_output_lines(text, path)
                else:
                    message = format_truncated_tool_output(text, path, max_chars)
                part = {"functionResponse": {**fr, "response": {"output": message}}}
                tokens = estimate_token_count([{"text": message}], estimator=estimator)
            counter += tokens
            new_parts.append(part)
        new_parts.reverse()
        out.append({**content, "parts": new_parts} if isinstance(content, dict) else {"parts": new_parts})
    out.reverse()
    return BudgetTruncation(out, saved, next_id)


# ---- Session messages -> client history (section 11) ---------------------------------------------


def _ensure_part_array(content: Any) -> list[Any]:
    """``ensurePartArray`` (utils/sessionUtils.ts)."""
    if isinstance(content, list):
        return [{"text": p} if isinstance(p, str) else p for p in content]
    if isinstance(content, str):
        return [{"text": content}]
    return [content]


def part_list_union_to_string(value: Any) -> str:
    """``partListUnionToString`` = ``partToString(value, {verbose: true})`` (utils/partUtils.ts)."""
    if not js_truthy(value):
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(part_list_union_to_string(p) for p in value)
    if not isinstance(value, dict):
        return ""
    if "videoMetadata" in value:
        return "[Video Metadata]"
    if "thought" in value:
        return f"[Thought: {js_template(value['thought'])}]"
    if "codeExecutionResult" in value:
        return "[Code Execution Result]"
    if "executableCode" in value:
        return "[Executable Code]"
    if "fileData" in value:
        return "[File Data]"
    for key, label in (("functionCall", "Function Call"), ("functionResponse", "Function Response")):
        if key in value:
            name = _get(value[key], "name")
            return f"[{label}: {js_template(name, missing=name is None)}]"
    if "inlineData" in value:
        mime = _get(value["inlineData"], "mimeType")
        return f"<{js_template(mime, missing=mime is None)}>"
    text = value.get("text")
    return "" if text is None else js_template(text)


def is_ignored_user_content(trimmed: str) -> bool:
    """``isIgnoredUserContent`` (utils/sessionUtils.ts, HEAD)."""
    return trimmed == "" or trimmed.startswith(("/", "?", "<session_context>", "<hook_context>"))


def convert_session_to_client_history(messages: Sequence[dict[str, Any]]) -> list[Turn]:
    """``convertSessionToClientHistory`` (utils/sessionUtils.ts, HEAD; section 11.2).

    Takes message records as stored on disk and returns ``[{"id", "content": {"role", "parts"}}]``. Parts
    are deep copies, so later id synthesis never touches the caller's records."""
    history: list[Turn] = []
    for msg in messages:
        kind = msg.get("type")
        if kind in ("info", "error", "warning"):
            continue
        msg_content = copy.deepcopy(msg.get("content"))
        if kind == "user":
            if is_ignored_user_content(js_trim(part_list_union_to_string(msg_content))):
                continue
            parts = _ensure_part_array(msg_content)
            history.append({"id": msg.get("id"), "content": {"role": "user", "parts": parts}})
        elif kind == "gemini":
            content_parts = _ensure_part_array(msg_content) if js_truthy(msg_content) else []
            tool_calls = msg.get("toolCalls")
            tool_calls = tool_calls if isinstance(tool_calls, list) else []
            if _has_truthy(content_parts, "functionCall") or _has_truthy(content_parts, "thought"):
                model_parts = content_parts  # modern record: content is the source of truth
            else:
                thoughts = msg.get("thoughts")
                model_parts = [_thought_part(t) for t in (thoughts if isinstance(thoughts, list) else [])]
                model_parts += content_parts
                for tc in tool_calls:
                    keys = ("id", "name", "args") if isinstance(tc, dict) else ()
                    model_parts.append({"functionCall": {k: copy.deepcopy(tc[k]) for k in keys if k in tc}})
            if not model_parts:
                continue
            history.append({"id": msg.get("id"), "content": {"role": "model", "parts": model_parts}})
            responses: list[Any] = []
            for tc in tool_calls:
                result = _get(tc, "result")
                if not js_truthy(result):
                    continue
                result = copy.deepcopy(result)
                if isinstance(result, str):
                    fr: dict[str, Any] = {k: tc[k] for k in ("id", "name") if k in tc}
                    fr["response"] = {"output": result}
                    responses.append({"functionResponse": fr})
                elif isinstance(result, list):
                    responses.extend(_ensure_part_array(result))
                else:
                    responses.append(result)
            if responses:
                response_id = f"{js_template(msg.get('id'), missing='id' not in msg)}_response"
                history.append({"id": response_id, "content": {"role": "user", "parts": responses}})
    return history


def _thought_part(thought: Any) -> Part:
    subject = _get(thought, "subject")
    has_desc = isinstance(thought, dict) and "description" in thought
    description = _get(thought, "description")
    if js_truthy(subject):
        text = f"**{js_template(subject)}** {js_template(description, missing=not has_desc)}"
        return {"text": text, "thought": True}
    return {"text": description, "thought": True} if has_desc else {"thought": True}


def derive_stable_id(ids: Sequence[str | None]) -> str:
    """``deriveStableId(sourceIds)`` (utils/cryptoUtils.ts): sha256 of the JS-sorted ids joined by ``|``,
    first 32 hex digits. ``None`` stands for ``undefined`` (sorted last, joined as an empty string)."""
    defined = sorted((i for i in ids if i is not None), key=lambda s: s.encode("utf-16-be", "surrogatepass"))
    joined = "|".join(defined + ["" for i in ids if i is None])
    # Node encodes strings as UTF-8 with lone surrogates replaced by U+FFFD.
    data = re.sub("[\ud800-\udfff]", "\ufffd", normalize_surrogates(joined)).encode("utf-8")
    return hashlib.sha256(data).hexdigest()[:32]


def ensure_stable_tool_ids(history: list[Turn]) -> None:
    """``ensureStableToolIds`` (utils/sessionUtils.ts, HEAD): give every functionCall/functionResponse
    without an id a deterministic one, pairing a model turn's calls with the next user turn's responses
    by name and order. MUTATES the parts in place, as upstream does."""
    for i, turn in enumerate(history):
        content = _get(turn, "content")
        turn_id = _get(turn, "id")
        next_content = _get(history[i + 1], "content") if i + 1 < len(history) else None
        if _get(content, "role") == "model" and _get(next_content, "role") == "user":
            calls: dict[str, list[tuple[dict[str, Any], int]]] = {}
            for idx, part in enumerate(_parts(content)):
                fc = _get(part, "functionCall")
                if isinstance(fc, dict) and js_truthy(fc.get("name")):
                    calls.setdefault(js_template(fc["name"]), []).append((fc, idx))
            resps: dict[str, list[dict[str, Any]]] = {}
            for part in _parts(next_content):
                fr = _get(part, "functionResponse")
                if isinstance(fr, dict) and js_truthy(fr.get("name")):
                    resps.setdefault(js_template(fr["name"]), []).append(fr)
            for name, call_list in calls.items():
                for (fc, idx), fr in zip(call_list, resps.get(name, []), strict=False):
                    target = next((x for x in (fc.get("id"), fr.get("id")) if js_truthy(x)), None)
                    if target is None:
                        target = f"synth_{name}_{derive_stable_id([turn_id, str(i), str(idx)])}"
                    fc["id"] = fr["id"] = target
        for part_idx, part in enumerate(_parts(content)):
            for key, prefix in (("functionCall", "synth"), ("functionResponse", "synth_orph")):
                obj = _get(part, key)
                if js_truthy(obj) and isinstance(obj, dict) and not js_truthy(obj.get("id")):
                    name = js_template(obj["name"]) if js_truthy(obj.get("name")) else "tool"
                    obj["id"] = f"{prefix}_{name}_{derive_stable_id([turn_id, str(i), str(part_idx)])}"


# ---- Curated history (section 11.3) --------------------------------------------------------------


def is_valid_content(content: Content, *, head_rule: bool = True) -> bool:
    """``isValidContent`` (core/geminiChat.ts). ``head_rule=False`` is the rule before eaa30429a7."""
    parts = content.get("parts") if isinstance(content, dict) else None
    empty = parts is None or (isinstance(parts, list) and len(parts) == 0)
    if head_rule and _get(content, "role") == "model" and empty:
        return True
    if empty or not isinstance(parts, list):
        return False
    for part in parts:
        if not isinstance(part, dict) or len(part) == 0:
            return False
        if js_truthy(part.get("thought")) or part.get("text") != "":
            continue
        if head_rule and any(k not in ("text", "thought", "callIndex") for k in part):
            continue  # carries a payload beside the empty text (eaa30429a7)
        return False
    return True


def _turn_content(item: Any) -> Content:
    if isinstance(item, dict) and "content" in item and "role" not in item:
        content = item["content"]
        return content if isinstance(content, dict) else {}
    return item if isinstance(item, dict) else {}


def extract_curated_history(contents: Sequence[Any], *, head_rule: bool = True) -> list[Any]:
    """``extractCuratedHistory`` (core/geminiChat.ts): keep every user turn; keep a maximal run of model
    turns only if each is valid. Accepts HistoryTurns (``{"id", "content"}``) or bare Contents."""
    curated: list[Any] = []
    i = 0
    n = len(contents)
    while i < n:
        if _get(_turn_content(contents[i]), "role") == "user":
            curated.append(contents[i])
            i += 1
            continue
        run: list[Any] = []
        valid = True
        while i < n and _get(_turn_content(contents[i]), "role") == "model":
            run.append(contents[i])
            valid = valid and is_valid_content(_turn_content(contents[i]), head_rule=head_rule)
            i += 1
        if not run:
            i += 1  # a role that is neither user nor model: upstream would loop forever; skip it
            continue
        if valid:
            curated.extend(run)
    return curated


def strip_thoughts(turns: Sequence[Turn]) -> list[Turn]:
    """``stripThoughts`` (core/geminiChat.ts, 3818efbbfb): drop thought parts; in a model turn that had
    thoughts, give the first functionCall a synthetic thoughtSignature if it has none; drop turns left
    with no parts."""
    out: list[Turn] = []
    for turn in turns:
        content = turn["content"]
        parts = content.get("parts") if isinstance(content, dict) else None
        if not js_truthy(parts) or not isinstance(parts, list):
            out.append(turn)
            continue
        if not any(js_truthy(_get(p, "thought")) for p in parts if js_truthy(p)):
            if parts:
                out.append(turn)
            continue
        kept = [p for p in parts if js_truthy(p) and not js_truthy(_get(p, "thought"))]
        if content.get("role") == "model":
            j = next((j for j, p in enumerate(kept) if js_truthy(_get(p, "functionCall"))), None)
            if j is not None and not js_truthy(kept[j].get("thoughtSignature")):
                kept[j] = {**kept[j], "thoughtSignature": SYNTHETIC_THOUGHT_SIGNATURE}
        if kept:
            out.append({**turn, "content": {**content, "parts": kept}})
    return out


def coalesce_consecutive_roles(turns: Sequence[Turn]) -> list[Turn]:
    """``coalesceConsecutiveRoles`` (core/geminiChat.ts): merge adjacent same-role turns, keeping the
    first id and concatenating parts."""
    out: list[Turn] = []
    for turn in turns:
        content = turn["content"]
        last_role = out[-1]["content"].get("role") if out else None
        if js_truthy(last_role) and last_role == _get(content, "role"):
            last = out[-1]
            merged = {k: v for k, v in last["content"].items() if k != "parts"}
            if js_truthy(last["content"].get("parts")) or js_truthy(_get(content, "parts")):
                # {...last.content, parts} keeps `parts` where last.content had it
                merged = {**last["content"], "parts": [*_parts(last["content"]), *_parts(content)]}
            out[-1] = {"id": last["id"], "content": merged}
        else:
            out.append({"id": turn.get("id"), "content": dict(content) if isinstance(content, dict) else {}})
    return out


@dataclass(frozen=True)
class CuratedSession:
    """What section 11.4 steps 2-3 produce from a session's messages."""

    turns: list[Turn]  # curated HistoryTurns, env turn first
    env_turn: Turn
    env_synthesized: bool  # True when no stored <session_context> message was found

    @property
    def contents(self) -> list[Content]:
        return [t["content"] for t in self.turns]


def synthesize_env_text(date: datetime | None = None, template: EnvTemplate = DEFAULT_ENV_TEMPLATE) -> str:
    """A stand-in ``<session_context>`` turn shaped like upstream's (section 10.3) for sessions that did not
    store one and whose project folder is unknown: on linux, no temp dir or folder structure, dated by the
    session's start."""
    day = locale_date(date) if date else "unknown"
    return template.render({"today": day, "platform": "linux", "temp_dir": ""})


def first_timestamp(messages: Sequence[dict[str, Any]]) -> datetime | None:
    ts = next((m["timestamp"] for m in messages if isinstance(m.get("timestamp"), str)), None)
    try:
        return None if ts is None else datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


DEFAULT_CHAT_MODEL = DEFAULT_GEMINI_MODEL  # the chat model when a session names none (config/models.ts)


def session_to_curated_history(
    messages: Sequence[dict[str, Any]],
    model: str,
    env_turn_text: str | None = None,
    *,
    profile: Profile | None = None,
) -> CuratedSession:
    """Section 11.4 steps 2-3: convert the records, prepend the env turn, synthesise tool ids, curate.

    The env turn is the stored ``<session_context>`` user message when the session has one; otherwise
    ``env_turn_text``, or a synthesised stand-in (``env_synthesized=True``)."""
    prof = profile or PROFILES[DEFAULT_PROFILE]
    turns, env_turn, synthesized = _client_history(messages, env_turn_text)
    curated = extract_curated_history(turns, head_rule=prof.head_valid_content)
    if prof.coalesce_curated and _cleans_history(model):
        curated = coalesce_consecutive_roles(strip_thoughts(curated))
    return CuratedSession(curated, env_turn, synthesized)


def _client_history(
    messages: Sequence[dict[str, Any]], env_turn_text: str | None
) -> tuple[list[Turn], Turn, bool]:
    """What a resumed chat holds: converted turns behind an env turn, with stable tool ids."""
    turns = convert_session_to_client_history(messages)
    stored = stored_env_index(messages)
    synthesized = stored is None and env_turn_text is None
    if stored is not None:
        env_parts = _ensure_part_array(copy.deepcopy(messages[stored].get("content")))
    elif env_turn_text is not None:
        env_parts = [{"text": env_turn_text}]
    else:
        env_parts = [{"text": synthesize_env_text(first_timestamp(messages))}]
    env_turn: Turn = {"id": ENVIRONMENT_CONTEXT_ID, "content": {"role": "user", "parts": env_parts}}
    # getInitialChatHistory: prepend unless the first turn already is the env turn.
    if not turns or turns[0].get("id") != ENVIRONMENT_CONTEXT_ID:
        turns = [env_turn, *turns]
    ensure_stable_tool_ids(turns)
    return turns, env_turn, synthesized


def recorded_input(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """``tokens.input`` of the newest gemini message that recorded one."""
    for msg in reversed(messages):
        tokens = msg.get("tokens") if msg.get("type") == "gemini" else None
        if isinstance(tokens, dict) and isinstance(tokens.get("input"), int | float):
            return int(tokens["input"])
    return None


def stored_env_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the stored ``<session_context>`` message (by its id, or its text), or None."""
    for i, msg in enumerate(messages):
        if msg.get("type") == "user" and (
            msg.get("id") == ENVIRONMENT_CONTEXT_ID
            or js_trim(part_list_union_to_string(msg.get("content"))).startswith("<session_context>")
        ):
            return i
    return None


def original_token_count(
    messages: Sequence[dict[str, Any]],
    env_turn_text: str | None = None,
    *,
    estimator: EstimatorSpec = ESTIMATOR_HEAD,
) -> int:
    """Section 11.4 step 4: ``tokens.input`` of the newest gemini message that has tokens, else what a
    freshly resumed chat reports: the local estimate of every part of its history (env turn included)."""
    recorded = recorded_input(messages)
    if recorded is not None:
        return recorded
    turns, _, _ = _client_history(messages, env_turn_text)
    return estimate_token_count(_flatten_parts(t["content"] for t in turns), estimator=estimator)


# ---- The algorithm (section 4) -------------------------------------------------------------------


@dataclass(frozen=True)
class CompressionResult:
    """The outcome (upstream's ``ChatCompressionInfo`` and more); fields not given keep "nothing happened"."""

    status: CompressionStatus
    original_token_count: int
    new_token_count: int
    threshold: float
    token_limit: int
    profile: str
    split_index: int | None = None  # None when compression stopped before a split was computed
    new_history: list[Content] | None = None  # [summary user, ack model, ...kept], or truncated history
    compressed_history: list[Content] = field(default_factory=list)  # what the summarizer was shown
    kept_history: list[Content] = field(default_factory=list)
    truncated_outputs: list[SavedToolOutput] = field(default_factory=list)  # tool outputs to save
    summary: str | None = None  # final summary text (probe answer or first summary)
    anchored: bool = False
    summarizer_input_truncated: bool = False  # the hi-fi rule chose the budget-truncated slice
    new_count_needs_api: bool = False  # upstream would have called countTokens (media parts)
    next_truncation_id: int = 1
    calls: list[ModelCall] = field(default_factory=list)


def _text_content(role: str, text: str) -> Content:
    return {"role": role, "parts": [{"text": text}]}


@dataclass(frozen=True)
class _Run:
    """What every phase of one ``compress`` call shares: the era, the model's token limit, the threshold
    used and the token count before compression."""

    profile: Profile
    limit: int
    threshold: float
    original: int
    first_truncation_id: int

    def result(
        self, status: CompressionStatus, new_count: int, *, original: int | None = None, **kw: Any
    ) -> CompressionResult:
        """The outcome with this run's counts."""
        original = self.original if original is None else original
        kw.setdefault("next_truncation_id", self.first_truncation_id)
        return CompressionResult(
            status, original, new_count, self.threshold, self.limit, self.profile.name, **kw
        )


def _split_history(
    curated: list[Content], budget: BudgetTruncation, run: _Run
) -> tuple[list[Content], dict[str, Any]]:
    """``findCompressSplitPoint(truncated, 1 - COMPRESSION_PRESERVE_THRESHOLD)`` (or the era's rule), then
    the high-fidelity choice (08c32f725e ..): the original slice when it fits the model. Returns the
    budget-truncated slice before the split and the result fields every later outcome reports."""
    prof = run.profile
    truncated = budget.history
    fraction = 1 - COMPRESSION_PRESERVE_THRESHOLD
    if prof.split_rule == "index_after_fraction":
        split = legacy_split_point(truncated, fraction)
    else:
        split = find_compress_split_point(
            truncated, fraction, count_candidate_first=prof.split_rule == "compress_split_point_pre"
        )
    to_compress = for_summarizer = truncated[:split]
    summarizer_truncated = False
    if prof.budget_truncation != "none":
        original_slice = curated[:split]
        if estimate_token_count(_flatten_parts(original_slice), estimator=prof.estimator) < run.limit:
            for_summarizer = original_slice
        else:
            summarizer_truncated = True
    return (
        to_compress,
        {
            "split_index": split,
            "compressed_history": list(for_summarizer),  # what the summarizer is shown
            "kept_history": truncated[split:],
            "truncated_outputs": budget.saved,
            "summarizer_input_truncated": summarizer_truncated,
            "next_truncation_id": budget.next_truncation_id,
        },
    )


def _summarize(
    model: str, prof: Profile, texts: CompressionTexts, history: list[Content], llm: Summarizer, pid: str
) -> tuple[str, bool, list[ModelCall]]:
    """The summary call, then the verification probe (1182168bd9 ..): ``(final, anchored, calls)``, where
    final is ``((probe?.trim()) || summary).trim()`` and anchored says the history held a
    ``<state_snapshot>``. Before the probe, the one answer (the legacy instruction's) is final as it came.

    Each call is ``BaseLlmClient.generateContent`` with the model of ``modelStringToModelConfigAlias(model)``,
    the system prompt of ``getCompressionPrompt(config)`` as the era had them, and ``history`` first."""
    alias = model_to_compression_alias(model)
    generation_config: dict[str, Any] = {}
    extra: dict[str, Any] = {"profile": prof.name}  # reported with each call
    if prof.model_configs:
        # BaseLlmClient._generateWithRetry -> applyModelSelection (Gemini CLI 0.61.0): the alias, then the
        # policy chain, which may swap the model and with it the generationConfig (model_configs.py).
        chosen = compression_model(model, "gemini-api-key")
        alias, call_model, generation_config = chosen.alias, chosen.model, chosen.generation_config
        vertex = compression_model(model, "vertex-ai")
        extra |= {"model_configs": True, "vertex_model": vertex.model}
        extra["vertex_generation_config"] = vertex.generation_config
    else:
        call_model = summarizer_model(model) if prof.compression_alias else model
    prompt = texts.system_prompt
    if prompt is None:
        prompt = ctxtool_compression_prompt() if prof.prompt_version == "v6" else SYSTEM_PROMPT_V4
    calls: list[ModelCall] = []

    def ask(kind: CallKind, turns: list[Content], call_id: str, anchored: bool, previous: str | None) -> str:
        # kind, model, system_instruction, contents, history, anchored, previous_summary, prompt_id
        head = (kind, call_model, prompt, [*history, *turns], list(history), anchored, previous, call_id)
        call = ModelCall(
            *head, generation_config=generation_config, extra={"model_config_alias": alias, **extra}
        )
        calls.append(call)
        return llm.generate(call) or ""

    if not prof.verification_probe:
        answer = ask("summary", [_text_content("user", LEGACY_INSTRUCTION)], pid, False, None)
        return answer, False, calls
    flat = _flatten_parts(history)
    anchored = any(isinstance(_get(p, "text"), str) and STATE_SNAPSHOT_TAG in p["text"] for p in flat)
    summary = ask("summary", [_text_content("user", texts.instruction(anchored))], pid, anchored, None)
    probe_turns = [_text_content("model", summary), _text_content("user", texts.probe)]
    probe = ask("probe", probe_turns, f"{pid}-verify", anchored, summary)
    return js_trim(js_trim(probe) or summary), anchored, calls


def _new_chat(
    final: str, keep: list[Content], env_turn: Content | None, prof: Profile, texts: CompressionTexts
) -> tuple[list[Content], int, bool]:
    """``extraHistory`` (summary, acknowledgement, kept turns), then the offline
    ``calculateRequestTokenCount`` of ``getInitialChatHistory(config, extra)``, the new chat with its env turn
    first: ``(extra, count, needs_api)``, needs_api saying upstream would have asked the countTokens API (an
    inlineData/fileData part). The count is the JSON length / 4 in the early eras."""
    extra = [_text_content("user", final), _text_content("model", texts.ack), *keep]
    full = [env_turn if env_turn is not None else {"role": "user", "parts": []}]
    if prof.env_ack_turn:
        full.append(_text_content("model", ENV_ACK_TEXT))  # until ed0d1a0ba3
    full += extra
    if prof.new_count == "json_length":
        return extra, math.floor(sum(json_length(c) for c in full) / 4), False
    flat = _flatten_parts(full)
    needs_api = any(isinstance(p, dict) and ("inlineData" in p or "fileData" in p) for p in flat)
    return extra, estimate_token_count(flat, estimator=prof.estimator), needs_api


def compress(
    curated: Sequence[Content],
    *,
    original_token_count: int,
    model: str,
    summarizer: Summarizer,
    profile: Profile | None = None,
    force: bool = False,
    threshold: float | None = None,
    has_failed_compression_attempt: bool = False,
    env_turn: Content | None = None,
    tool_output_dir: str = "tool-outputs",
    first_truncation_id: int = 1,
    truncate_tool_output_threshold: int = DEFAULT_TRUNCATE_TOOL_OUTPUT_THRESHOLD,
    texts: CompressionTexts = CTXTOOL_TEXTS,
    prompt_id: str = "ctxtool-compress",
) -> CompressionResult:
    """``ChatCompressionService.compress`` (context/chatCompressionService.ts at HEAD), era per ``profile``.

    ``curated`` is the curated history (env turn first, as ``GeminiChat.getHistory(true)`` returns it);
    ``env_turn`` is the env-context Content a new chat would get, counted in the new token estimate.
    ``tool_output_dir`` is the directory truncated outputs would be written to. ``texts`` are the fixed
    texts sent and written (ctxtool's own wording, or an installed Gemini CLI's). Only the two summarizer
    calls are non-deterministic; nothing is written. The phases follow upstream's order (section 4)."""
    prof = profile or PROFILES[DEFAULT_PROFILE]
    limit = token_limit(model, legacy=prof.legacy_token_limits)
    # (await config.getCompressionThreshold()) ?? default: a falsy setting (None, 0) falls back.
    threshold = threshold if threshold is not None and js_truthy(threshold) else prof.default_threshold
    run = _Run(prof, limit, threshold, original_token_count, first_truncation_id)
    curated = list(curated)
    latched = has_failed_compression_attempt and not force
    # cd2e237c73 .. c276d0c7b6: a latched failure made automatic attempts a NOOP with counts 0/0.
    if not curated or (latched and not prof.truncation_only_fallback):
        return run.result(CompressionStatus.NOOP, 0, original=0)
    if not force and original_token_count < threshold * limit:
        return run.result(CompressionStatus.NOOP, original_token_count)
    if prof.budget_truncation == "none":  # no truncateHistoryToBudget before 08c32f725e
        budget = BudgetTruncation(curated, [], first_truncation_id)
    else:
        budget = truncate_history_to_budget(
            curated,
            tool_output_dir=tool_output_dir,
            max_chars=min(4 * (limit - original_token_count), truncate_tool_output_threshold),
            first_truncation_id=first_truncation_id,
            formatter=prof.budget_truncation,
            estimator=prof.estimator,
        )
    if latched:  # the truncation-only fallback (c276d0c7b6 ..): no model call
        count = estimate_token_count(_flatten_parts(budget.history), estimator=prof.estimator)
        if count >= original_token_count:
            return run.result(CompressionStatus.NOOP, original_token_count)
        truncated: dict[str, Any] = {"new_history": budget.history, "truncated_outputs": budget.saved}
        truncated["next_truncation_id"] = budget.next_truncation_id
        return run.result(CompressionStatus.CONTENT_TRUNCATED, count, **truncated)
    to_compress, fields = _split_history(curated, budget, run)
    if not to_compress and prof.noop_on_empty_split:
        kept = {k: fields[k] for k in ("split_index", "kept_history")}
        return run.result(CompressionStatus.NOOP, original_token_count, **kept)

    history = fields["compressed_history"]
    final, anchored, calls = _summarize(model, prof, texts, history, summarizer, prompt_id)
    outcome = {"summary": final, "anchored": anchored, "calls": calls, **fields}
    if prof.verification_probe and not final:
        return run.result(CompressionStatus.COMPRESSION_FAILED_EMPTY_SUMMARY, original_token_count, **outcome)

    extra, new_count, needs_api = _new_chat(final, fields["kept_history"], env_turn, prof, texts)
    outcome["new_count_needs_api"] = needs_api
    if new_count > original_token_count:
        return run.result(CompressionStatus.COMPRESSION_FAILED_INFLATED_TOKEN_COUNT, new_count, **outcome)
    return run.result(CompressionStatus.COMPRESSED, new_count, new_history=extra, **outcome)


# ---- Tool output masking (section 13.2): what Gemini CLI 0.61 does to the history after compressing ----


# context/toolOutputMaskingService.ts and config.ts defaults, Gemini CLI 0.61.0 (cc0107ed2). Code Assist
# users may get other values from remote experiment flags.
MASKING_PROTECTION_THRESHOLD_TOKENS = 50_000
MASKING_MIN_PRUNABLE_TOKENS = 30_000
MASKING_INDICATOR_TAG = "tool_output_masked"
MASKING_EXEMPT_TOOLS = frozenset({"activate_skill", "ask_user", "enter_plan_mode", "exit_plan_mode"})


@dataclass(frozen=True)
class MaskingPlan:
    """The tool outputs ``ToolOutputMaskingService.mask`` would replace in a history: (content index, part
    index, estimated tokens), newest first, and their total. Empty when under the prunable threshold."""

    parts: list[tuple[int, int, int]]
    prunable_tokens: int


def plan_tool_output_masking(history: Sequence[Content]) -> MaskingPlan:
    """The selection of ``ToolOutputMaskingService.mask`` (Gemini CLI 0.61.0), which runs on every turn after
    the compression check and before the request (``GeminiClient.tryMaskToolOutputs``), and persists what it
    masks. Scanning newest to oldest and skipping the latest turn (``protectLatestTurn``), function responses
    fill a protected window of ``MASKING_PROTECTION_THRESHOLD_TOKENS``; the one that crosses it and every
    older one are prunable; nothing is masked under ``MASKING_MIN_PRUNABLE_TOKENS``. (Each replacement is
    kept only when its snippet is smaller; a large output's always is.)"""
    cumulative = 0
    boundary = False
    chosen: list[tuple[int, int, int]] = []
    total = 0
    for i in range(len(history) - 2, -1, -1):
        parts = _parts(history[i])
        for j in range(len(parts) - 1, -1, -1):
            fr = _get(parts[j], "functionResponse")
            response = _get(fr, "response")  # None unless fr is a (truthy) object
            if _get(fr, "name") in MASKING_EXEMPT_TOOLS or not js_truthy(response):
                continue
            try:
                shown = js_stringify(response, 2)
            except TypeError:
                continue
            if not shown or f"<{MASKING_INDICATOR_TAG}" in shown:
                continue
            tokens = estimate_token_count([parts[j]])
            if not boundary:
                cumulative += tokens
                if cumulative <= MASKING_PROTECTION_THRESHOLD_TOKENS:
                    continue
                boundary = True
            chosen.append((i, j, tokens))
            total += tokens
    return MaskingPlan(chosen if total >= MASKING_MIN_PRUNABLE_TOKENS else [], total)
