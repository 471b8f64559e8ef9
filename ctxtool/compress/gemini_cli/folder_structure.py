"""The folder-structure text Gemini CLI puts in its first chat turn, ported byte for byte.

Upstream: Gemini CLI 0.61.0 (cc0107ed2), ``packages/core/src/utils/getFolderStructure.ts``
(``getFolderStructure``, ``readFullStructure``, ``formatStructure``), ``utils/environmentContext.ts``
(``getDirectoryContextString``), ``services/fileDiscoveryService.ts`` (``FileDiscoveryService``),
``utils/gitIgnoreParser.ts`` (``GitIgnoreParser``), ``utils/ignoreFileParser.ts`` (``IgnoreFileParser``),
``utils/gitUtils.ts`` (``isGitRepository``) and ``utils/ignorePathUtils.ts``
(``getNormalizedRelativePath``). ctxtool needs the exact text to count the tokens of the environment turn
that Gemini CLI sends before every conversation; tests/test_folder_structure.py compares it with what the
real Gemini CLI sends.

Only the options Gemini CLI uses for the environment context are ported: ``respectGitIgnore`` and
``respectGeminiIgnore`` true, no custom ignore files, no include pattern, ``DEFAULT_IGNORED_FOLDERS``. Linux
and macOS paths only (no ``\\`` separators; the macOS ``/private`` canonicalisation is not ported).

Ignore matching uses ``pathspec``'s gitignore patterns, driven the way the npm ``ignore`` package (7.x,
bundled in Gemini CLI) drives its rules; see :class:`_Rules` for the differences found and bridged.
Entry order follows JavaScript ``localeCompare`` (ICU, en-US) through ``pyuca``; see :func:`locale_key`.

This module reads the file system and nothing else; it never writes."""

from __future__ import annotations

import errno
import functools
import os
import posixpath
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from ctxtool.common.jsvalue import JS_WHITESPACE

MAX_ITEMS = 200  # getFolderStructure.ts
TRUNCATION_INDICATOR = "..."  # getFolderStructure.ts
DEFAULT_IGNORED_FOLDERS = frozenset({"node_modules", ".git", "dist", "__pycache__"})  # getFolderStructure.ts
GEMINI_IGNORE_FILE_NAME = ".geminiignore"  # config/constants.ts

_LAST = "└───"
_MIDDLE = "├───"

# ---- Ordering: JavaScript String.prototype.localeCompare -----------------------------------------


@functools.cache
def _collator() -> Any:
    # Loading the collation table takes about 0.3 s: only on the first sort.
    import pyuca

    return pyuca.Collator()


@functools.lru_cache(maxsize=65536)
def locale_key(name: str) -> tuple[tuple[int, ...], bytes]:
    """A sort key giving the order of ``names.sort((a, b) => a.localeCompare(b))`` on Node's readdir result.

    ``localeCompare`` with no locale is ICU's default collator for en-US, which is the CLDR root collation:
    the Unicode Collation Algorithm, non-ignorable punctuation, tertiary strength, lower case before upper.
    ``pyuca`` implements the UCA with the DUCET table. Names that collate equal (differing only in
    completely ignorable characters, or canonically equivalent) keep readdir's order, and libuv's scandir
    returns names sorted with ``strcmp``: hence the UTF-8 bytes as the second key.

    Known differences: pyuca's newest table is Unicode 10 while Node 20 ships ICU with Unicode 15-17, so
    characters assigned since then get implicit weights here; CLDR root's few tailorings of the DUCET
    (mostly outside the scripts used in file names) are not applied."""
    return tuple(_collator().sort_key(name)), name.encode("utf-8", "surrogatepass")


# ---- The npm `ignore` package's rule semantics over pathspec's gitignore patterns ----------------


class _InvalidIgnorePath(ValueError):
    """npm ``ignore``'s RangeError for a path that is not ``path.relative()``d (like ``...``)."""


_INVALID_PATH = re.compile(r"^\.*/|^\.+$")  # ignore: REGEX_TEST_INVALID_PATH


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negative: bool
    # `a/**` compiles to the prefix `^a/`, which also matches the folder `a/` itself; npm ignore (and git)
    # match only what is inside.
    inside_only: bool


_TRAILING_SPACES = re.compile(r"(?<!\\) +$")


@functools.lru_cache(maxsize=4096)
def _rule(pattern: str) -> _Rule | None:
    trimmed = _TRAILING_SPACES.sub("", pattern)
    if trimmed != pattern and trimmed.endswith("/"):
        # npm ignore decides "a slash in the middle anchors the pattern" before dropping trailing spaces, so
        # `build/ ` is anchored there (`/build/`); pathspec drops the spaces first.
        negation = "!" if trimmed.startswith("!") else ""
        body = trimmed[len(negation) :]
        pattern = negation + (body if body.startswith("/") else "/" + body)
    if pattern.removeprefix("!") == "/**":
        # npm ignore compiles `/**` to `^[^/]*[^/]*(?=$|/$)`: top-level names only, as `/*` (git: everything).
        pattern = pattern[:-1]
    try:
        compiled = GitIgnoreSpecPattern(pattern)
    except ValueError:
        return None  # npm ignore skips patterns it cannot parse (a trailing lone backslash)
    if compiled.include is None or compiled.regex is None:
        return None  # blank line or comment
    source = compiled.regex.pattern
    if "(?P<ps_d>" in source:
        # The pattern's match may end at a folder mark, matching every path below that folder: npm ignore
        # matches the path's own name only (its parents are tested on their own), so the match must end at
        # the end of the path.
        source += r"\Z"
    # npm ignore matches case-insensitively by default (its `ignorecase` option); Gemini CLI keeps it.
    # Python's and JavaScript's case folding differ for a few non-ASCII letters (the Kelvin sign, ß).
    return _Rule(re.compile(source, re.IGNORECASE), not compiled.include, source.endswith("/"))


@dataclass
class _Rules:
    """An ``ignore()`` instance: patterns added in order, the last matching one decides.

    pathspec's regexes also match every path below a matched directory, and its last-match-wins then lets a
    negation re-include a file whose own name an earlier pattern ignores (``*`` then ``!src/``: pathspec keeps
    ``src/a.py``, npm ignore and git drop it). npm ignore instead tests each path on its own name and calls a
    path ignored when any parent folder (tested with a trailing slash) is. So a rule counts here only when it
    matches the path itself (see :func:`_rule`), and parents are tested first as npm ignore's ``_t`` does.

    Differences left (found by tests/test_folder_structure.py's comparison with the bundled npm ignore, none
    likely in a real ignore file): npm ignore reads ``[!a]`` as a class holding ``!`` and ``a``, not its
    negation; it treats an escaped ``\\*`` as a wildcard; a pattern of ``!`` and spaces re-includes
    everything there and nothing here; trailing spaces after a wildcard (``!/** ``) change its meaning there.
    """

    rules: list[_Rule] = field(default_factory=list)

    def add(self, patterns: Iterable[str] | _Rules) -> _Rules:
        rules = patterns.rules if isinstance(patterns, _Rules) else [_rule(p) for p in patterns]
        self.rules.extend([rule for rule in rules if rule is not None])
        return self

    def copy(self) -> _Rules:
        return _Rules(list(self.rules))

    def ignores(self, path: str) -> bool:
        if not path:
            raise _InvalidIgnorePath("path must not be empty")
        if _INVALID_PATH.search(path):
            raise _InvalidIgnorePath(f'path should be a `path.relative()`d string, but got "{path}"')
        slices = [s for s in path.split("/") if s]
        parents = ("/".join(slices[:depth]) + "/" for depth in range(1, len(slices)))
        return any(self._test_one(parent) for parent in parents) or self._test_one(path)

    def _test_one(self, path: str) -> bool:
        for rule in reversed(self.rules):
            found = rule.regex.search(path)
            if found is not None and not (rule.inside_only and found.end() == len(path)):
                return not rule.negative
        return False


# ---- Paths ---------------------------------------------------------------------------------------


def get_normalized_relative_path(project_root: str, file_path: str, is_directory: bool) -> str | None:
    """``getNormalizedRelativePath`` (utils/ignorePathUtils.ts), Gemini CLI 0.61.0 (cc0107ed2), POSIX only."""
    if not file_path:
        return None
    absolute = os.path.normpath(os.path.join(project_root, file_path))
    if not _is_within_root(absolute, project_root):
        return None
    normalized = os.path.relpath(absolute, project_root)  # never starts with "/": no leading "/" to strip
    if normalized == ".":
        return "/" if is_directory else ""
    return normalized + "/" if is_directory and not normalized.endswith("/") else normalized


def _is_within_root(path: str, root: str) -> bool:
    # isWithinRoot (utils/fileUtils.ts), Gemini CLI 0.61.0 (cc0107ed2), without its macOS realpath retry.
    path, root = os.path.abspath(path), os.path.abspath(root)
    with_sep = root if root.endswith("/") else root + "/"
    return path == root or path.startswith(with_sep)


def is_git_repository(directory: str) -> bool:
    """``isGitRepository`` (utils/gitUtils.ts), Gemini CLI 0.61.0 (cc0107ed2): a ``.git`` entry of any
    kind in the folder or any parent."""
    current = os.path.abspath(directory)
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return True
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent


def _split_lines(content: str) -> list[str]:
    return re.split(r"\r\n|\n|\r", content)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


# ---- Ignore files --------------------------------------------------------------------------------


class GitIgnoreParser:
    """``GitIgnoreParser`` (utils/gitIgnoreParser.ts), Gemini CLI 0.61.0 (cc0107ed2).

    ``.git`` always, then ``.git/info/exclude``, then the ``.gitignore`` of every folder from the root down to
    the path's parent (to the path itself for a folder), each rewritten to be anchored at its folder, then the
    extra patterns (``.geminiignore``'s); loading stops below a folder those rules already ignore."""

    def __init__(self, project_root: str, extra_patterns: Sequence[str] | None = None) -> None:
        self.project_root = os.path.abspath(project_root)
        self.processed_extra_patterns = _Rules().add(self.process_patterns(extra_patterns or [], "."))
        self.cache: dict[str, _Rules] = {}
        self.global_patterns: _Rules | None = None

    def load_patterns_for_file(self, patterns_file_path: str) -> _Rules:
        content = _read_text(patterns_file_path)
        if content is None:
            return _Rules()
        if patterns_file_path.endswith(os.path.join(".git", "info", "exclude")):
            base = "."
        else:
            base = os.path.dirname(os.path.relpath(patterns_file_path, self.project_root)) or "."
        return _Rules().add(self.process_patterns(_split_lines(content), base))

    @staticmethod
    def process_patterns(raw_patterns: Iterable[str], relative_base_dir: str) -> list[str]:
        """``processPatterns``: a nested pattern becomes ``/base/**/p`` (no slash in p) or ``/base/p``."""
        out: list[str] = []
        for raw in raw_patterns:
            p = raw.lstrip(JS_WHITESPACE)  # trimStart: a byte-order mark goes too
            if p == "" or p.startswith("#"):
                continue
            negative, p = p.startswith("!"), p.removeprefix("!")
            anchored, p = p.startswith("/"), p.removeprefix("/")
            if p == "":
                continue
            new = p
            nested = bool(relative_base_dir) and relative_base_dir != "."
            if nested:
                new = _posix_join(relative_base_dir, p if anchored or "/" in p else _posix_join("**", p))
            if (nested or anchored) and not new.startswith("/"):
                new = "/" + new
            out.append("!" + new if negative else new)
        return out

    def is_ignored(self, file_path: str, is_directory: bool) -> bool:
        normalized = get_normalized_relative_path(self.project_root, file_path, is_directory)
        if normalized is None or normalized in ("", "/"):
            return False
        try:
            ig = _Rules().add([".git"])
            if self.global_patterns is None:  # a missing file loads as no patterns
                exclude = os.path.join(self.project_root, ".git", "info", "exclude")
                self.global_patterns = self.load_patterns_for_file(exclude)
            ig.add(self.global_patterns)
            parts = normalized.split("/")[:-1]
            for folder in (os.path.join(self.project_root, *parts[:k]) for k in range(len(parts) + 1)):
                if os.path.relpath(folder, self.project_root) != ".":
                    parent_relative = get_normalized_relative_path(self.project_root, folder, True)
                    current_ig = ig.copy().add(self.processed_extra_patterns)
                    if parent_relative and current_ig.ignores(parent_relative):
                        break
                if folder not in self.cache:
                    self.cache[folder] = self.load_patterns_for_file(os.path.join(folder, ".gitignore"))
                ig.add(self.cache[folder])
            return ig.add(self.processed_extra_patterns).ignores(normalized)
        except _InvalidIgnorePath:
            return False


def _posix_join(*parts: str) -> str:
    # path.posix.join normalises ("a/./b", "a//b"); posixpath.normpath does the same for these inputs.
    return posixpath.normpath(posixpath.join(*parts))


class IgnoreFileParser:
    """``IgnoreFileParser`` (utils/ignoreFileParser.ts), Gemini CLI 0.61.0 (cc0107ed2): plain patterns
    matched from the project root, used outside git repositories."""

    def __init__(self, project_root: str, patterns: Sequence[str]) -> None:
        self.project_root = os.path.abspath(project_root)
        self.patterns = list(patterns)
        self.ig = _Rules().add(self.patterns)

    @staticmethod
    def parse_ignore_file(path: str) -> list[str]:
        """``parseIgnoreFile``: trimmed lines, no blanks or comments."""
        content = _read_text(path)
        if content is None:
            return []
        lines = (line.strip(JS_WHITESPACE) for line in _split_lines(content))
        return [p for p in lines if p and not p.startswith("#")]

    def is_ignored(self, file_path: str, is_directory: bool) -> bool:
        normalized = get_normalized_relative_path(self.project_root, file_path, is_directory)
        if not self.patterns or normalized is None or normalized in ("", "/"):
            return False
        return self.ig.ignores(normalized)  # an invalid path raises, as upstream (no try here)


class FileDiscoveryService:
    """``FileDiscoveryService`` (services/fileDiscoveryService.ts), Gemini CLI 0.61.0 (cc0107ed2), with
    both ``respect*`` options true: the combined filter decides alone.

    ``_shouldIgnore``'s symlink branch is not ported: the folder structure skips symlinks before asking."""

    def __init__(self, project_root: str) -> None:
        self.project_root = os.path.abspath(project_root)
        patterns = IgnoreFileParser.parse_ignore_file(
            os.path.join(self.project_root, GEMINI_IGNORE_FILE_NAME)
        )
        parser = GitIgnoreParser if is_git_repository(self.project_root) else IgnoreFileParser
        self.combined_ignore_filter: GitIgnoreParser | IgnoreFileParser = parser(self.project_root, patterns)

    def should_ignore_file(self, file_path: str) -> bool:
        return self.combined_ignore_filter.is_ignored(file_path, False)

    def should_ignore_directory(self, dir_path: str) -> bool:
        return self.combined_ignore_filter.is_ignored(dir_path, True)


# ---- The folder structure ------------------------------------------------------------------------


@dataclass
class _Folder:
    name: str
    path: str
    files: list[str] = field(default_factory=list)
    sub_folders: list[_Folder] = field(default_factory=list)
    has_more_files: bool = False
    has_more_subfolders: bool = False
    is_ignored: bool = False


class _NodeError(Exception):
    """An error Gemini CLI does not catch in readFullStructure; its message is Node's."""


# libuv's messages for the readdir errors readFullStructure rethrows (uv_strerror).
_UV_MESSAGES = {
    errno.ENOTDIR: "not a directory",
    errno.ELOOP: "too many symbolic links encountered",
    errno.ENAMETOOLONG: "name too long",
    errno.EIO: "i/o error",
    errno.EMFILE: "too many open files",
    errno.ENFILE: "file table overflow",
    errno.ENOMEM: "not enough memory",
}


def _js_name(name: str) -> str:
    # Node decodes file names as UTF-8 with U+FFFD for invalid bytes; Python keeps them as surrogates.
    return os.fsencode(name).decode("utf-8", "replace")


def _read_dir(path: str) -> list[tuple[str, bool, bool]]:
    """(name, is_file, is_dir) of each entry, sorted as readFullStructure sorts them; symlinks are neither."""
    with os.scandir(path) as it:
        entries = [
            (_js_name(e.name), e.is_file(follow_symlinks=False), e.is_dir(follow_symlinks=False)) for e in it
        ]
    return sorted(entries, key=lambda e: locale_key(e[0]))


def read_full_structure(
    root_path: str, max_items: int, ignored_folders: frozenset[str], file_service: FileDiscoveryService
) -> _Folder | None:
    """``readFullStructure`` (utils/getFolderStructure.ts), Gemini CLI 0.61.0 (cc0107ed2): breadth first,
    files before folders in each folder, stopping at ``max_items``; None when the root does not exist."""
    root = _Folder(os.path.basename(root_path), root_path)
    queue: deque[tuple[_Folder, str]] = deque([(root, root_path)])
    count = 0
    processed: set[str] = set()
    while queue:
        folder, current = queue.popleft()
        if current in processed:
            continue
        processed.add(current)
        if count >= max_items:
            continue
        try:
            entries = _read_dir(current)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.ENOENT, errno.EPERM):
                if current == root_path and exc.errno == errno.ENOENT:
                    return None
                continue
            code = errno.errorcode.get(exc.errno or 0, "UNKNOWN")
            message = _UV_MESSAGES.get(exc.errno or 0) or (exc.strerror or "unknown error").lower()
            raise _NodeError(f"{code}: {message}, scandir '{current}'") from exc
        for name in (name for name, is_file, _ in entries if is_file):
            if count >= max_items:
                folder.has_more_files = True
                break
            if file_service.should_ignore_file(os.path.join(current, name)):
                continue
            folder.files.append(name)
            count += 1
        for name in (name for name, _, is_dir in entries if is_dir):
            if count >= max_items:
                folder.has_more_subfolders = True
                break
            sub_path = os.path.join(current, name)
            ignored = file_service.should_ignore_directory(sub_path)
            sub = _Folder(name, sub_path, is_ignored=name in ignored_folders or ignored)
            folder.sub_folders.append(sub)
            count += 1
            if not sub.is_ignored:
                queue.append((sub, sub_path))
    return root


def format_structure(
    node: _Folder, current_indent: str, is_last_child: bool, is_root: bool, builder: list[str]
) -> None:
    """``formatStructure`` (utils/getFolderStructure.ts), Gemini CLI 0.61.0 (cc0107ed2)."""
    connector = _LAST if is_last_child else _MIDDLE
    if not is_root or node.is_ignored:
        marker = TRUNCATION_INDICATOR if node.is_ignored else ""
        builder.append(f"{current_indent}{connector}{node.name}/{marker}")
    indent = "" if is_root else current_indent + ("    " if is_last_child else "│   ")
    for i, name in enumerate(node.files):
        last = i == len(node.files) - 1 and not node.sub_folders and not node.has_more_subfolders
        builder.append(f"{indent}{_LAST if last else _MIDDLE}{name}")
    if node.has_more_files:
        last = not node.sub_folders and not node.has_more_subfolders
        builder.append(f"{indent}{_LAST if last else _MIDDLE}{TRUNCATION_INDICATOR}")
    for i, sub in enumerate(node.sub_folders):
        format_structure(
            sub, indent, i == len(node.sub_folders) - 1 and not node.has_more_subfolders, False, builder
        )
    if node.has_more_subfolders:
        builder.append(f"{indent}{_LAST}{TRUNCATION_INDICATOR}")


def _is_truncated(node: _Folder) -> bool:
    flags = node.has_more_files or node.has_more_subfolders or node.is_ignored
    return flags or any(_is_truncated(sub) for sub in node.sub_folders)


def folder_structure(directory: str, *, max_items: int = MAX_ITEMS, project_root: str | None = None) -> str:
    """``getFolderStructure`` (utils/getFolderStructure.ts), Gemini CLI 0.61.0 (cc0107ed2): the tree text of
    ``directory`` as Gemini CLI's environment context shows it.

    ``project_root`` is the folder Gemini CLI's file discovery service was made for (its working directory;
    by default ``directory``): ignore files are read from there, and paths outside it are never ignored."""
    resolved = os.path.abspath(directory)
    try:
        service = FileDiscoveryService(project_root if project_root is not None else resolved)
        root = read_full_structure(resolved, max_items, DEFAULT_IGNORED_FOLDERS, service)
        if root is None:
            return f'Error: Could not read directory "{resolved}". Check path and permissions.'
        lines: list[str] = []
        format_structure(root, "", True, True, lines)
        summary = f"Showing up to {max_items} items (files + folders)."
        if _is_truncated(root):
            summary += (
                f" Folders or files indicated with {TRUNCATION_INDICATOR} contain more items not shown, were"
                f" ignored, or the display limit ({max_items} items) was reached."
            )
        return f"{summary}\n\n{resolved}/\n" + "\n".join(lines)
    except (_NodeError, _InvalidIgnorePath) as exc:
        return f'Error processing directory "{resolved}": {exc}'


def directory_context(directories: list[str]) -> str:
    """``getDirectoryContextString`` (utils/environmentContext.ts), Gemini CLI 0.61.0 (cc0107ed2).

    ``directories`` are the workspace folders as Gemini CLI lists them, its working directory first; every
    tree is filtered by the ignore files of that first folder, as upstream's one file service does."""
    root = directories[0] if directories else None
    trees = "\n".join(folder_structure(d, project_root=root) for d in directories)
    listed = "\n".join(f"  - {d}" for d in directories)
    return f"- **Workspace Directories:**\n{listed}\n- **Directory Structure:**\n\n{trees}"
