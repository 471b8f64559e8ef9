"""Where ctxtool's cache lives and the version stamp of what it holds. Imports nothing heavy: a warm run
that finds everything in the cache loads only this, discovery and the stored frames."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ctxtool import __version__
from ctxtool.session.schema import TOKEN_KEYS

# The columns of the rows ctxtool.session.columns produces (one per billed message, one per tool call).
MESSAGE_COLUMNS = (
    "message_id",
    "type",
    "timestamp",
    "live",
    "text_chars",
    "content_bytes",
    "is_prompt",
    "is_command",
    "is_snapshot",
    "compression_info",
    "model",
    "preview",
    "tool_calls",
    "tool_errors",
    *TOKEN_KEYS,
    # What the message adds to the history Gemini CLI sends (Gemini CLI's estimator, see columns._estimate):
    "est_prompts",
    "est_model",
    "est_tool_io",
    # The history before the message when it was first recorded (the live messages' estimates, summed),
    # and how many $rewindTo records and $set.messages checkpoints the file held by then.
    "hist_prompts",
    "hist_model",
    "hist_tool_io",
    "rewinds_seen",
    "checkpoints_seen",
)
# result_bytes: size of the tool result as stored (its JSON text, in bytes); results are never decoded.
# target: the file path, command, pattern or URL the call was about (from its args), for `stats --top`.
TOOL_COLUMNS = ("message_id", "call_id", "name", "status", "timestamp", "result_bytes", "target")

# Bump when the rows produced by ctxtool.session.columns change meaning or shape, or what the stored frames
# derive from them (ctxtool.frames.build.build_corpus): it invalidates every cached index entry and stored
# corpus. 8: a session's `turns` counts its turn rows; legacy flat subagent files link to their parent. 9: a
# response recorded with `total: 0` (or none) counts the sum of its parts (tokens.request_total). 10: no
# hidden compression calls for the snapshots ctxtool wrote into a compacted copy (frames.sessions). 11: a
# session ctxtool compacted in place (``ctxtoolCompaction``) is marked (``compacted_at``), and its snapshot
# adds no hidden calls either.
COLUMNS_VERSION = 11
STAMP = f"{__version__}-c{COLUMNS_VERSION}"


def cache_root(cache_dir: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``cache_dir`` if given, else ``$CTXTOOL_CACHE_DIR``, else the platform's user cache dir."""
    env = os.environ if env is None else env
    if cache_dir:
        return Path(cache_dir).expanduser()
    if env.get("CTXTOOL_CACHE_DIR"):
        return Path(env["CTXTOOL_CACHE_DIR"]).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ctxtool", appauthor=False))
