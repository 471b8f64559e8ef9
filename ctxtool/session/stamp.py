"""Where ctxtool's cache lives and the version stamp of what it holds. Imports nothing but ``os`` and
``sys``: a warm run that finds everything in the cache loads only this, discovery and the index, and
the ``guard`` hook, which runs before every model call, loads no more than this of the session layer."""

from __future__ import annotations

import os
import sys

from ctxtool import __version__
from ctxtool.measure.tokens import TOKEN_KEYS

TYPE_CHECKING = False  # (mypy reads any name TYPE_CHECKING as typing's)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

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

# Bump when the rows produced by ctxtool.session.columns change meaning or shape: it invalidates every cached
# index entry. 12: bytes that are not UTF-8 are read as Node reads them (utf8.read_as_node), and a line over
# MAX_RECORD_BYTES is a broken line.
COLUMNS_VERSION = 12
STAMP = f"{__version__}-c{COLUMNS_VERSION}"

# A record (one line of a session file) longer than this is counted as a broken line, and its bytes are not
# held: Gemini CLI writes no line near it (its largest are tool outputs of a few MB), and holding one would
# bound nothing. Here, with the stamp, since every reader (ctxtool.session.read, the guard's) keeps to it.
MAX_RECORD_BYTES = 256 * 1024 * 1024


def cache_root(cache_dir: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``cache_dir`` if given, else ``$CTXTOOL_CACHE_DIR``, else the platform's user cache dir."""
    from pathlib import Path

    return Path(cache_path(cache_dir, env))


def cache_path(cache_dir: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> str:
    """``cache_root`` as a string, without importing pathlib (or, on Linux, platformdirs)."""
    env = os.environ if env is None else env
    if cache_dir:
        return os.path.expanduser(cache_dir)
    if env.get("CTXTOOL_CACHE_DIR"):
        return os.path.expanduser(env["CTXTOOL_CACHE_DIR"])
    quick = _linux_cache_dir(env)
    if quick is not None:
        return quick
    from platformdirs import user_cache_dir

    return user_cache_dir("ctxtool", appauthor=False)


def _linux_cache_dir(env: Mapping[str, str]) -> str | None:
    """What platformdirs answers on Linux (``$XDG_CACHE_HOME/ctxtool`` when that is an absolute path, else
    ``$HOME/.cache/ctxtool``), without its 15 ms import (half of what the guard hook may spend); None (ask
    platformdirs) elsewhere, or when ``HOME`` is not absolute. ``tests/test_guard.py`` holds both alike."""
    if not sys.platform.startswith("linux") or env is not os.environ:
        return None
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "ctxtool")
    home = env.get("HOME", "")
    if not home.startswith("/"):
        return None
    return os.path.join(os.path.expanduser("~/.cache"), "ctxtool")
