"""What reading met, without polars: the problems of paths and files (``Problem``), the problems the PATH
arguments themselves have (``discovery_problems``), and the read summary in words (``describe_read``). The
frames and the polars-free ``stats`` path (``ctxtool.frames.tally``) share them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from ctxtool.common.wording import plural
from ctxtool.session.discover import Discovery
from ctxtool.session.stamp import MAX_RECORD_BYTES

# What went wrong with a path: a file that could not be read, a folder that holds no session file, or a
# PATH argument that matches no file at all. Only the first is an unreadable file; the JSON and the
# captions count the three apart.
ProblemKind = Literal["unreadable", "no_sessions", "missing"]
PROBLEM_KINDS: tuple[ProblemKind, ...] = ("unreadable", "no_sessions", "missing")


class Problem(msgspec.Struct):
    path: str
    message: str
    kind: ProblemKind = "unreadable"

    def __str__(self) -> str:
        """One line naming the file (messages that already start with the path are not prefixed again)."""
        return self.message if self.message.startswith(self.path) else f"{self.path}: {self.message}"


def problem_counts(problems: Iterable[Problem]) -> dict[ProblemKind, int]:
    counts: dict[ProblemKind, int] = dict.fromkeys(PROBLEM_KINDS, 0)
    for p in problems:
        counts[p.kind] += 1
    return counts


def describe_problems(n: Mapping[ProblemKind, int]) -> str:
    """Problems counted by kind (``problem_counts``) in words, for a caption or an error: ``1 folder
    without session files, 2 files could not be read`` ("" when there are none)."""
    words: tuple[tuple[ProblemKind, str, str], ...] = (
        ("missing", "PATH", "matching no file"),
        ("no_sessions", "folder", "without session files"),
        ("unreadable", "file", "could not be read"),
    )
    return ", ".join(f"{plural(n[kind], noun)} {what}" for kind, noun, what in words if n[kind])


def discovery_problems(found: Discovery) -> list[Problem]:
    """What the PATH arguments themselves got wrong (nothing matched, a folder with no sessions)."""
    from ctxtool.session.discover import default_root

    root = str(default_root())
    return [
        *(
            Problem(
                m,
                "is where Gemini CLI keeps its sessions, and it does not exist. Pass session files or "
                "folders, or set GEMINI_CLI_HOME to the folder that holds .gemini/"
                if m == root
                else "matches no file. Check the path, or quote a glob so the shell does not expand it",
                "missing",
            )
            for m in found.missing
        ),
        *(Problem(str(d), no_sessions_message(str(d), root), "no_sessions") for d in found.empty_dirs),
        *(Problem(str(path), message) for path, _, message in found.unreadable),
    ]


def no_sessions_message(folder: str, root: str) -> str:
    """Why ``folder`` gave no session, and where to point instead (``root``: Gemini CLI's data root)."""
    kinds = "(session-*.json or session-*.jsonl)"
    if folder == root:
        return f"holds no Gemini CLI session files {kinds} yet: run Gemini CLI first, or pass session files"
    return (
        f"holds no Gemini CLI session files {kinds}: point at {root} or a project's chats/ folder, "
        "or pass session files"
    )


def broken_lines_warning(path: str, broken: int, first: int, overlong: int | None = None) -> str:
    """The warning about a file's broken lines; ``overlong``: the first of them over the record limit
    (``ctxtool.session.stamp.MAX_RECORD_BYTES``), named, since its bytes were not even read."""
    text = f"{path}: skipped {plural(broken, 'broken line')} (first at line {first})"
    if overlong is not None:
        limit = MAX_RECORD_BYTES >> 20
        text += f"; line {overlong} is over {limit} MiB, more than Gemini CLI writes, and was not read"
    return text


def invalid_utf8_warning(path: str, lines: int, first: int | None) -> str:
    return (
        f"{path}: {plural(lines, 'line')} {'holds' if lines == 1 else 'hold'} bytes that are not UTF-8 "
        f"(first at line {first}); read with U+FFFD in their place, as Gemini CLI reads them"
    )


def summary(
    *,
    files: int,
    size: int,
    sessions: int,
    subagent_sessions: int,
    requests: int,
    total_tokens: int,
    broken_lines: int,
    invalid_utf8_lines: int,
    total_mismatches: int,
    skipped: list[tuple[str, str]],
    problems: list[Problem],
) -> dict[str, Any]:
    """What was read, for the JSON envelope (``read``) and the table caption (:func:`describe_read`)."""
    reasons = dict(Counter(why for _, why in skipped))  # (in the order first met)
    return {
        "files": files,
        "bytes": size,
        "sessions": sessions,
        "subagent_sessions": subagent_sessions,
        "requests": requests,
        "total_tokens": total_tokens,
        "broken_lines": broken_lines,
        "invalid_utf8_lines": invalid_utf8_lines,
        "total_mismatches": total_mismatches,
        "skipped": [{"file": f, "reason": why} for f, why in skipped],
        "skipped_by_reason": reasons,
        "errors": [{"file": p.path, "message": p.message} for p in problems if p.kind == "unreadable"],
        "empty_folders": [
            {"path": p.path, "message": p.message} for p in problems if p.kind == "no_sessions"
        ],
        "missing_paths": [{"path": p.path, "message": p.message} for p in problems if p.kind == "missing"],
    }


# The plural of the skip reasons that are nouns (``read.skipped_by_reason`` keys, ctxtool.session.discover);
# the others ("permission denied", "vanished") read the same after any count.
_SKIPPED_PLURAL = {
    "temporary file": "temporary files",
    "unreadable-file backup left by Gemini CLI": "unreadable-file backups left by Gemini CLI",
    "backup made by ctxtool compact --in-place": "backups made by ctxtool compact --in-place",
    "symlink loop": "symlink loops",
    "dangling symlink": "dangling symlinks",
    "not a regular file": "not regular files",
}


def describe_read(summary: dict[str, Any]) -> str:
    size = summary["bytes"]
    amount = f"{size / 1_000_000:,.1f} MB" if size >= 1_000_000 else f"{size / 1_000:,.1f} kB"
    text = (
        f"Read {plural(summary['files'], 'file')} ({amount}): {plural(summary['sessions'], 'session')}"
        f" ({summary['subagent_sessions']:,} subagent), {plural(summary['requests'], 'request')}."
    )
    if summary["skipped_by_reason"]:
        parts = [
            plural(n, why, _SKIPPED_PLURAL[why]) if why in _SKIPPED_PLURAL else f"{n:,} {why}"
            for why, n in sorted(summary["skipped_by_reason"].items())
        ]
        text += f" Skipped {sum(summary['skipped_by_reason'].values())}: " + ", ".join(parts) + "."
    problems = describe_problems(
        {
            "missing": len(summary.get("missing_paths", ())),
            "no_sessions": len(summary.get("empty_folders", ())),
            "unreadable": len(summary["errors"]),
        }
    )
    if problems:
        text += f" {problems[0].upper()}{problems[1:]} (see warnings)."
    if summary["broken_lines"]:
        text += f" {plural(summary['broken_lines'], 'broken line')} skipped."
    if summary.get("invalid_utf8_lines"):
        text += f" {plural(summary['invalid_utf8_lines'], 'line')} with invalid UTF-8 (see warnings)."
    if summary.get("total_mismatches"):
        text += (
            f" {plural(summary['total_mismatches'], 'recorded total')}"
            f" {'disagrees with its' if summary['total_mismatches'] == 1 else 'disagree with their'} parts"
            " (see warnings)."
        )
    index = summary.get("index") or {}
    if index.get("corpus_from_cache"):
        text += " Nothing changed since the last run: served from ctxtool's index."
    elif index.get("files_from_index") or index.get("files_resumed"):
        cached, resumed, parsed = (
            index.get(k, 0) for k in ("files_from_index", "files_resumed", "files_parsed")
        )
        served = (
            (cached, f"{plural(cached, 'unchanged file')} from the index"),
            (
                resumed,
                f"{plural(resumed, 'grown file')} read from where {'it' if resumed == 1 else 'they'} ended",
            ),
            (parsed, f"{parsed:,} read in full"),
        )
        text += f" {'; '.join(part for n, part in served if n)}."
    return text
