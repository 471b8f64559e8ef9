"""The ``<session_context>`` turn Gemini CLI 0.61.0 puts first in a chat, for a session that stored none.

Gemini CLI builds it when a chat starts or resumes (``getEnvironmentContext``, utils/environmentContext.ts,
0.61.0 cc0107ed2): today's date in the user's locale, ``process.platform``, the project's temporary folder,
the workspace folders with their structure (``getDirectoryContextString``), then the project memory. Its
size moves the compression split, so a replay builds the same text from the session's project folder (the
``.project_root`` file beside ``chats/``, or ``--workspace DIR``). Known differences, reported to the user:
the date is today's in English (en-US), and the project memory (``GEMINI.md`` files, extensions) is left out.

Reads the project folder (its structure and ignore files); writes nothing."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from ctxtool.compress.gemini_cli.texts import EnvTemplate

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")  # fmt: skip
MEMORY_FILE = "GEMINI.md"  # Gemini CLI's default context file name


def locale_date(day: date) -> str:
    """``toLocaleDateString(undefined, {weekday, year, month: 'long', day})`` in en-US."""
    return f"{_WEEKDAYS[day.weekday()]}, {_MONTHS[day.month - 1]} {day.day}, {day.year}"


def js_platform() -> str:
    """Node's ``process.platform`` for this machine (linux, darwin, win32, freebsd, ...)."""
    return "win32" if sys.platform.startswith("win") else sys.platform.rstrip("0123456789")


def project_temp_dir(session_file: Path) -> str:
    """``storage.getProjectTempDir()`` for a session file under ``<tmp>/<project>/chats/``, else ""."""
    folders = Path(os.path.abspath(session_file)).parents
    return next((str(folder.parent) for folder in folders if folder.name == "chats"), "")


def recorded_project_root(session_file: Path) -> Path | None:
    """The project folder the ``.project_root`` file beside ``chats/`` names, if any."""
    temp = project_temp_dir(session_file)
    if not temp:
        return None
    try:
        text = (Path(temp) / ".project_root").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return Path(text) if text else None


@dataclass(frozen=True)
class BuiltEnvironment:
    text: str
    project: Path
    notes: tuple[str, ...]


def build_environment_text(
    template: EnvTemplate,
    project: Path,
    temp_dir: str,
    *,
    today: date | None = None,
    platform: str | None = None,
) -> BuiltEnvironment:
    """The ``<session_context>`` text for a chat started in ``project`` (which must exist)."""
    from ctxtool.compress.gemini_cli.folder_structure import directory_context

    root = os.path.abspath(project)
    text = template.render(
        {
            "today": locale_date(today or date.today()),
            "platform": platform or js_platform(),
            "temp_dir": temp_dir,
            "directory_context": directory_context([root]),
            "memory": "",
        }
    )
    notes = ["the <session_context> turn was built from the project folder, dated today"]
    if (Path(root) / MEMORY_FILE).is_file():
        notes.append(
            f"Gemini CLI also puts the project's {MEMORY_FILE} files in <session_context>; ctxtool leaves "
            "them out, so its split may differ"
        )
    return BuiltEnvironment(text, Path(root), tuple(notes))
