"""Which model, with which generationConfig, Gemini CLI 0.61.0 asks when it compresses a chat.

``ChatCompressionService.compress`` names a model-config alias (``modelStringToModelConfigAlias``), not a
model. ``BaseLlmClient._generateWithRetry`` turns the alias into a request through ``applyModelSelection``:
the alias's model, then the availability policy chain for it (``resolvePolicyChain``), which on the API-key
backend swaps ``gemini-3-pro-preview`` for ``gemini-3.1-pro-preview-customtools``; when the model changes,
the generationConfig is the new model's own alias (``chat-base-3``: temperature 1, topP 0.95, topK 64,
thoughts included, thinking level HIGH) instead of the compression alias's empty one.

Everything here is read from Gemini CLI 0.61.0 (npm ``@google/gemini-cli@0.61.0``, commit cc0107ed2), bundle
``chunk-5FZXKDXH.js``: ``packages/core/src/config/models.ts`` (model names, ``resolveModel``),
``packages/core/src/availability/policyHelpers.ts`` and ``policyCatalog.ts`` (the chains),
``packages/core/src/config/defaultModelConfigs.ts`` (aliases) and ``packages/core/src/config/config.ts``
(the per-backend launch flags). ``tests/test_gemini_cli_compression.py`` checks the result against the
real Gemini CLI on the API-key backend for several chat models.

Pure: no I/O, standard library only. The experimental dynamic model configuration (off by default in 0.61)
and Code Assist (OAuth) experiment flags are not modelled."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Literal

Backend = Literal["gemini-api-key", "vertex-ai"]

# packages/core/src/config/models.ts (0.61.0): fixed names.
PREVIEW_GEMINI_MODEL = "gemini-3-pro-preview"
PREVIEW_GEMINI_3_1_MODEL = "gemini-3.1-pro-preview"
PREVIEW_GEMINI_3_1_CUSTOM_TOOLS_MODEL = "gemini-3.1-pro-preview-customtools"
DEFAULT_GEMINI_MODEL = "gemini-2.5-pro"
BASE_GEMINI_FLASH_MODEL = "gemini-3.5-flash"
LATEST_GEMINI_FLASH_MODEL = "gemini-3.8-flash"
LEGACY_CCPA_FLASH_MODEL = "gemini-3-flash"
BASE_GEMINI_FLASH_LITE_MODEL = "gemini-3.1-flash-lite"
LATEST_GEMINI_FLASH_LITE_MODEL = "gemini-3.5-flash-lite"
PREVIEW_GEMINI_FLASH_LITE_MODEL = "none"  # a literal 'none' in 0.61.0
PREVIEW_GEMINI_MODEL_AUTO = "auto-gemini-3"
DEFAULT_GEMINI_MODEL_AUTO = "auto-gemini-2.5"
_ALIAS_AUTO, _ALIAS_PRO, _ALIAS_FLASH, _ALIAS_FLASH_LITE = "auto", "pro", "flash", "flash-lite"
_INITIAL_PREVIEW_FLASH = "gemini-3-flash-preview"


@dataclass(frozen=True)
class LaunchFlags:
    """What ``Config`` answers for a backend once started (config.ts ``getGemini31LaunchedSync``,
    ``getUseCustomToolModelSync``, ``hasLatestFlashGAAccess``, ``hasLatestFlashLiteGAAccess``), and the
    mutable model names those calls set (``setFlashModels``, ``setFlashLiteModel``). Both backends have
    preview access from the start (``Config.initialize`` for USE_GEMINI and USE_VERTEX_AI), so what
    ``resolveModel`` and the policy chain do without it (``getHasAccessToPreviewModel``) is not ported."""

    use_gemini_3_1: bool
    use_custom_tools: bool
    latest_flash: bool
    latest_flash_lite: bool
    preview_flash: str  # PREVIEW_GEMINI_FLASH_MODEL after setFlashModels
    default_flash: str  # DEFAULT_GEMINI_FLASH_MODEL after setFlashModels
    default_flash_lite: str  # DEFAULT_GEMINI_FLASH_LITE_MODEL after setFlashLiteModel


def launch_flags(backend: Backend) -> LaunchFlags:
    """Both backends count as launched for 3.1 and the latest Flash / Flash Lite (``isGemini31Launched
    ForAuthType``); only the API-key backend uses the custom-tools model, and only Vertex AI moves the
    preview Flash name to the latest Flash (``hasLatestFlashGAAccess``)."""
    api_key = backend == "gemini-api-key"
    preview_flash = _INITIAL_PREVIEW_FLASH if api_key else LATEST_GEMINI_FLASH_MODEL
    # use_gemini_3_1, use_custom_tools, latest_flash, latest_flash_lite, preview_flash, default_flash(_lite)
    return LaunchFlags(
        True, api_key, True, True, preview_flash, LATEST_GEMINI_FLASH_MODEL, LATEST_GEMINI_FLASH_LITE_MODEL
    )


def model_config_alias(model: str, flags: LaunchFlags) -> str:
    """``modelStringToModelConfigAlias`` (context/chatCompressionService.ts, 0.61.0)."""
    if model in (PREVIEW_GEMINI_MODEL, PREVIEW_GEMINI_3_1_MODEL):
        return "chat-compression-3-pro"
    flash = (flags.preview_flash, BASE_GEMINI_FLASH_MODEL, LATEST_GEMINI_FLASH_MODEL, LEGACY_CCPA_FLASH_MODEL)
    if model in flash:
        return "chat-compression-3-flash"
    lite = (PREVIEW_GEMINI_FLASH_LITE_MODEL, BASE_GEMINI_FLASH_LITE_MODEL, flags.default_flash_lite)
    if model in (*lite, LATEST_GEMINI_FLASH_LITE_MODEL):
        return "chat-compression-3.1-flash-lite"
    if model in ("gemini-2.5-flash-lite", DEFAULT_GEMINI_MODEL, "gemini-2.5-flash"):
        return "chat-compression-" + model.removeprefix("gemini-")  # 2.5-flash-lite, 2.5-pro, 2.5-flash
    return "chat-compression-default"


def resolve_model(requested: str, flags: LaunchFlags, *, use_custom_tools: bool | None = None) -> str:
    """``resolveModel`` (config/models.ts, 0.61.0) without the dynamic configuration branch."""
    custom = flags.use_custom_tools if use_custom_tools is None else use_custom_tools
    model = requested.strip()
    lite = LATEST_GEMINI_FLASH_LITE_MODEL if flags.latest_flash_lite else BASE_GEMINI_FLASH_LITE_MODEL
    if model in (_ALIAS_AUTO, _ALIAS_PRO, PREVIEW_GEMINI_MODEL, PREVIEW_GEMINI_MODEL_AUTO):
        if flags.use_gemini_3_1:
            resolved = PREVIEW_GEMINI_3_1_CUSTOM_TOOLS_MODEL if custom else PREVIEW_GEMINI_3_1_MODEL
        else:
            resolved = PREVIEW_GEMINI_MODEL
    elif model == DEFAULT_GEMINI_MODEL_AUTO:
        resolved = DEFAULT_GEMINI_MODEL
    elif model == _ALIAS_FLASH:
        resolved = LATEST_GEMINI_FLASH_MODEL if flags.latest_flash else flags.preview_flash
    elif model == _ALIAS_FLASH_LITE:
        resolved = lite
    else:
        resolved = model
    if resolved == "none":
        return lite
    flash = (flags.default_flash, flags.preview_flash, BASE_GEMINI_FLASH_MODEL, LEGACY_CCPA_FLASH_MODEL)
    if flags.latest_flash and resolved in (*flash, _ALIAS_FLASH) and model != flags.preview_flash:
        return LATEST_GEMINI_FLASH_MODEL
    flash_lite = (flags.default_flash_lite, BASE_GEMINI_FLASH_LITE_MODEL, _ALIAS_FLASH_LITE)
    if flags.latest_flash_lite and resolved in flash_lite:
        return LATEST_GEMINI_FLASH_LITE_MODEL
    return resolved


def _is_gemini3(model: str, flags: LaunchFlags) -> bool:
    # models.ts isGemini3Model: resolveModel with its default arguments, then a name test.
    defaults = LaunchFlags(
        False, False, False, False, flags.preview_flash, flags.default_flash, flags.default_flash_lite
    )
    return re.match(r"^gemini-3(\.|-|$)", resolve_model(model, defaults)) is not None


def policy_chain(preferred: str, configured: str, flags: LaunchFlags) -> list[str]:
    """The models of ``resolvePolicyChain(config, preferred)`` (availability/policyHelpers.ts, 0.61.0) in
    order, after ``applyDynamicSlicing``; ``configured`` is the chat model (``config.getModel()``)."""
    resolved = resolve_model(preferred, flags)
    originally_3 = _is_gemini3(preferred, flags)
    autos = (PREVIEW_GEMINI_MODEL_AUTO, DEFAULT_GEMINI_MODEL_AUTO, _ALIAS_AUTO)
    auto_preferred, auto_configured = preferred in autos, configured in autos
    wraps = auto_preferred or auto_configured or originally_3
    if resolved == flags.default_flash_lite:  # getFlashLitePolicyChain
        chain = [flags.default_flash_lite, flags.default_flash, DEFAULT_GEMINI_MODEL]
    elif originally_3 or auto_preferred or auto_configured:
        preview = configured != DEFAULT_GEMINI_MODEL_AUTO and (
            originally_3 or PREVIEW_GEMINI_MODEL_AUTO in (preferred, configured)
        )
        if preview:  # policyCatalog.ts getModelPolicyChain
            chain = [resolve_model(PREVIEW_GEMINI_MODEL, flags), flags.preview_flash]
        else:
            chain = [DEFAULT_GEMINI_MODEL, flags.default_flash]
    else:
        chain = [preferred]  # createSingleModelChain
    if resolved in chain:  # applyDynamicSlicing
        at = chain.index(resolved)
        return chain[at:] + chain[:at] if wraps else chain[at:]
    return [resolved]


# config/defaultModelConfigs.ts (0.61.0): the aliases a compression request can end on. Each entry is
# (extends, generateContentConfig, model).
_CHAT_BASE_3_MODELS = (
    "gemini-3-pro-preview",
    "gemini-3-flash-preview",
    "gemini-3.1-pro-preview",
    "gemini-3.1-pro-preview-customtools",
    "gemini-3.1-flash-lite-preview",
    "gemini-3.1-flash-lite",
    "gemini-3.5-flash-lite",
    "gemini-3.5-flash",
    "gemini-3.8-flash",
    "gemma-4-31b-it",
    "gemma-4-26b-a4b-it",
)
_CHAT_BASE_25_MODELS = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite")
_ALIASES: dict[str, tuple[str | None, dict[str, Any], str | None]] = {
    "base": (None, {"temperature": 0, "topP": 1}, None),
    "chat-base": (
        "base",
        {"thinkingConfig": {"includeThoughts": True}, "temperature": 1, "topP": 0.95, "topK": 64},
        None,
    ),
    "chat-base-2.5": ("chat-base", {"thinkingConfig": {"thinkingBudget": 8192}}, None),
    "chat-base-3": ("chat-base", {"thinkingConfig": {"thinkingLevel": "HIGH"}}, None),
    **{m: ("chat-base-3", {}, m) for m in _CHAT_BASE_3_MODELS},
    **{m: ("chat-base-2.5", {}, m) for m in _CHAT_BASE_25_MODELS},
    "chat-compression-3-pro": (None, {}, "gemini-3-pro-preview"),
    "chat-compression-3-flash": (None, {}, "gemini-3-flash-preview"),
    "chat-compression-3.1-flash-lite": (None, {}, "gemini-3.1-flash-lite"),
    "chat-compression-2.5-flash-lite": (None, {}, "gemini-2.5-flash-lite"),
    "chat-compression-2.5-pro": (None, {}, "gemini-2.5-pro"),
    "chat-compression-2.5-flash": (None, {}, "gemini-2.5-flash"),
    "chat-compression-default": (None, {}, "gemini-3-pro-preview"),
}
# The compression aliases' models, the same at HEAD 5411f113ca (defaultModelConfigs.ts:273-307).
COMPRESSION_ALIAS_MODELS: dict[str, str] = {
    a: m for a, (_, _, m) in _ALIASES.items() if m and a.startswith("chat-compression-")
}


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


def resolved_config(name: str) -> tuple[str, dict[str, Any]]:
    """``ModelConfigService.getResolvedConfig({model: name})``: the model and the generateContentConfig of an
    alias after its ``extends`` chain; a name that is no alias is a model with an empty config."""
    chain: list[str] = []
    key: str | None = name
    while key is not None and key in _ALIASES:
        chain.append(key)
        key = _ALIASES[key][0]
    config: dict[str, Any] = {}
    model = name
    for alias in reversed(chain):
        _merge(config, _ALIASES[alias][1])
        model = _ALIASES[alias][2] or model
    return model, config


@dataclass(frozen=True)
class CompressionModel:
    """What a compression request names: the alias, the model on the URL, the generationConfig sent."""

    alias: str
    model: str
    generation_config: dict[str, Any]


def compression_model(chat_model: str, backend: Backend = "gemini-api-key") -> CompressionModel:
    """The model and generationConfig Gemini CLI 0.61.0 sends its summary and verification requests with,
    for a chat on ``chat_model`` (``applyModelSelection`` over the compression alias)."""
    flags = launch_flags(backend)
    alias = model_config_alias(chat_model, flags)
    model, config = resolved_config(alias)
    chain = policy_chain(model, chat_model, flags)
    final = chain[0] if chain else model  # selectFirstAvailable: nothing is marked unavailable offline
    if final != model:
        _, config = resolved_config(final)
    return CompressionModel(alias, final, config)
