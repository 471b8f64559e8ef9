"""Install ctxtool's hooks in Gemini CLI's ``settings.json``, and take them out again, touching nothing else.

Owns: where the settings live (user: ``$GEMINI_CLI_HOME/.gemini/settings.json``, else ``~/.gemini/…``,
as Gemini CLI 0.61.0's ``Storage.getGlobalSettingsPath`` and ``homedir``; project:
``<folder>/.gemini/settings.json``), which entries are ctxtool's (hook configs named ``ctxtool-guard`` and
``ctxtool-archive``), and editing the file as text: Gemini CLI reads it with
``JSON.parse(stripJsonComments(content))`` (``loadSettings``), so a file may hold comments and its author's
layout, which a re-serialised file would lose. The edits are splices at the spans a small JSON-with-comments
parser finds, in the file's indentation and line endings (CRLF or LF), keeping a UTF-8 BOM: installing adds
ctxtool's groups after the existing ones; uninstalling removes exactly those spans, and the containers install
created once they are empty, so the rest of the file stays byte for byte.

Uninstall gives back the exact bytes install found, an absent file as an absent file, from the backup
(``settings.json.ctxtool-backup``: the file before ctxtool's hooks went in, see ``_before``); when the user
changed something since, only ctxtool's hooks go. An install that changes nothing writes nothing. A symlinked
settings file (dotfiles) stays a link: its target is edited.

Every write is atomic and compare-and-swap: when the file changed right before the rename (Gemini CLI saved a
setting meanwhile) the edit is made again on what it holds now, a few times at most, then refused. Must not:
re-serialise the file, print, or import the CLI.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxtool.common.errors import CtxtoolError, OutputError

if TYPE_CHECKING:
    from ctxtool.session.write import FileStamp

GUARD_NAME = "ctxtool-guard"
ARCHIVE_NAME = "ctxtool-archive"
OURS = (GUARD_NAME, ARCHIVE_NAME)
GUARD_TIMEOUT_MS = 10_000  # a first call on a large home reads every session once
ARCHIVE_TIMEOUT_MS = 120_000
BACKUP_SUFFIX = ".ctxtool-backup"
# A settings save is one small write: a file that changed under this many edits in a row has a writer that
# keeps at it, and waiting longer would only hide that.
ATTEMPTS = 5


@dataclass(slots=True)
class Node:
    kind: str  # "object", "array" or "scalar"
    start: int
    end: int  # one past the last character
    value: Any = None  # scalars: the value
    members: list[Member] = field(default_factory=list)  # objects
    items: list[Node] = field(default_factory=list)  # arrays


@dataclass(slots=True)
class Member:
    key: str
    start: int  # where the key's string starts
    value: Node

    @property
    def end(self) -> int:
        return self.value.end


class _Parser:
    """JSON with ``//`` and ``/* */`` comments, as strip-json-comments lets Gemini CLI read it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def fail(self, what: str) -> CtxtoolError:
        line = self.text.count("\n", 0, self.i) + 1
        return CtxtoolError(f"not valid JSON at line {line}: {what}")

    def skip(self) -> None:
        t = self.text
        while self.i < len(t):
            c = t[self.i]
            if c in " \t\r\n\ufeff":
                self.i += 1
            elif t.startswith("//", self.i):
                nl = t.find("\n", self.i)
                self.i = len(t) if nl < 0 else nl + 1
            elif t.startswith("/*", self.i):
                close = t.find("*/", self.i + 2)
                if close < 0:
                    raise self.fail("a comment that never ends")
                self.i = close + 2
            else:
                return

    def value(self) -> Node:
        self.skip()
        if self.i >= len(self.text):
            raise self.fail("the text ends where a value should be")
        if self.text[self.i] in "{[":
            return self.container()
        start = self.i
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.i)
        except json.JSONDecodeError as exc:
            raise self.fail(exc.msg) from None
        self.i = end
        return Node("scalar", start, end, value=value)

    def container(self) -> Node:
        """An object or an array, from its opening bracket."""
        kind, close = ("object", "}") if self.text[self.i] == "{" else ("array", "]")
        node = Node(kind, self.i, -1)
        self.i += 1
        self.skip()
        if not self.text.startswith(close, self.i):
            while True:
                if kind == "array":
                    node.items.append(self.value())
                else:
                    key = self.value()
                    if key.kind != "scalar" or not isinstance(key.value, str):
                        raise self.fail("an object key that is not a string")
                    self.skip()
                    if not self.text.startswith(":", self.i):
                        raise self.fail("a ':' is missing after a key")
                    self.i += 1
                    node.members.append(Member(key.value, key.start, self.value()))
                self.skip()
                if self.text.startswith(",", self.i):
                    self.i += 1
                elif self.text.startswith(close, self.i):
                    break
                else:
                    raise self.fail(f"a ',' or '{close}' is missing")
        self.i += 1
        node.end = self.i
        return node


def parse(text: str) -> Node:
    """The top-level object of a settings file (an empty file is an empty object)."""
    if not text.strip():
        return Node("object", 0, 0)
    parser = _Parser(text)
    node = parser.value()
    parser.skip()
    if parser.i != len(text):
        raise parser.fail("text after the settings object")
    if node.kind != "object":
        raise parser.fail("the settings are not a JSON object")
    return node


def to_python(node: Node) -> Any:
    if node.kind == "object":
        return {m.key: to_python(m.value) for m in node.members}
    if node.kind == "array":
        return [to_python(n) for n in node.items]
    return node.value


@dataclass(frozen=True, slots=True)
class Hook:
    event: str
    name: str
    command: str
    timeout: int
    matcher: str | None = None

    def group(self) -> dict[str, Any]:
        hook = {"name": self.name, "type": "command", "command": self.command, "timeout": self.timeout}
        return {"matcher": self.matcher, "hooks": [hook]} if self.matcher is not None else {"hooks": [hook]}


def _line_indent(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    line = text[start:at]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _render(value: Any, indent: str, step: str, nl: str = "\n") -> str:
    """``value`` as JSON laid out like the file: nested lines indented from ``indent`` by ``step``, ending
    in ``nl``."""
    if not step:
        return json.dumps(value, ensure_ascii=False)
    lines = json.dumps(value, ensure_ascii=False, indent=len(step.expandtabs())).splitlines()
    return nl.join([lines[0], *[indent + line for line in lines[1:]]])


def _step(text: str, root: Node) -> str:
    """The file's indentation step (two spaces when it cannot tell; nothing when it is on one line)."""
    if root.members and "\n" not in text[root.start : root.members[0].start]:
        return ""
    return next((indent for m in root.members if (indent := _line_indent(text, m.start))), "  ")


def _insert(text: str, node: Node, key: str | None, value: Any, step: str, nl: str = "\n") -> str:
    """Add ``value`` (``"key": value`` in an object) as the last element of ``node``: the inverse of
    ``_cut`` on it."""
    elements = node.members if node.kind == "object" else node.items
    prefix = "" if key is None else f"{json.dumps(key)}: "
    if elements:
        first, last = elements[0], elements[-1]
        sep = text[node.start + 1 : first.start]
        indent = _line_indent(text, first.start)
        inline = "\n" not in sep
        piece = f",{sep or ' '}{prefix}{_render(value, indent, '' if inline else step, nl)}"
        return text[: last.end] + piece + text[last.end :]
    piece = prefix + _render(value, _line_indent(text, node.start) + step, step, nl)
    # The only element: on a line of its own when the file has lines and nothing but blanks is inside
    # (``_cut`` takes the lines away again).
    if step and not text[node.start + 1 : node.end - 1].strip():
        closing = _line_indent(text, node.start)
        return f"{text[: node.start + 1]}{nl}{closing}{step}{piece}{nl}{closing}{text[node.end - 1 :]}"
    return text[: node.start + 1] + piece + text[node.start + 1 :]


def _cut(text: str, inside: Node, spans: Sequence[tuple[int, int]], at: int) -> tuple[int, int]:
    """The text to remove for element ``at`` of ``spans`` (the elements of ``inside``), with the separator
    that goes with it; the last element goes with the blanks around it, as ``_insert`` put it."""
    start, end = spans[at]
    if len(spans) == 1:
        first, last = inside.start + 1, inside.end - 1
        return (first, last) if not text[first:start].strip() and not text[end:last].strip() else (start, end)
    return (spans[at - 1][1], end) if at == len(spans) - 1 else (start, spans[at + 1][0])


def _is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and hook.get("name") in OURS


def remove_ours(text: str, keep: Collection[str] = ()) -> str:
    """``text`` without ctxtool's hooks, nor the containers their removal left empty (splices only): an event
    list or a ``hooks`` object that was empty before stays, and so do the event lists named in ``keep``
    and the ``hooks`` object when ``keep`` holds ``""`` (they were there before ctxtool's hooks)."""
    emptied: set[str] = set()  # events whose last group was ctxtool's
    while True:
        span = _next_removal(text, parse(text), emptied, keep)
        if span is None:
            return text
        text = text[: span[0]] + text[span[1] :]


def _next_removal(text: str, root: Node, emptied: set[str], keep: Collection[str]) -> tuple[int, int] | None:
    """One span to remove (the file is parsed again after each)."""
    hooks = next((m for m in root.members if m.key == "hooks"), None)
    if hooks is None or hooks.value.kind != "object":
        return None
    events = hooks.value
    for e_at, event in enumerate(events.members):
        if event.value.kind != "array":
            continue
        groups = event.value.items
        for g_at, group in enumerate(groups):
            if group.kind != "object":
                continue
            inner = next((m for m in group.members if m.key == "hooks"), None)
            if inner is None or inner.value.kind != "array":
                continue
            mine = [i for i, h in enumerate(inner.value.items) if _is_ours(to_python(h))]
            if not mine:
                continue
            if len(mine) == len(inner.value.items):  # a group of ctxtool's alone: the whole group goes
                if len(groups) == 1 and event.key not in keep:
                    emptied.add(event.key)
                return _cut(text, event.value, [(g.start, g.end) for g in groups], g_at)
            return _cut(text, inner.value, [(h.start, h.end) for h in inner.value.items], mine[0])
        if not groups and event.key in emptied:
            emptied.discard(event.key)
            if len(events.members) == 1 and "" not in keep:
                emptied.add("")  # the hooks object is emptied too
            return _cut(text, events, [(m.start, m.end) for m in events.members], e_at)
    if not events.members and "" in emptied:
        emptied.discard("")
        return _cut(text, root, [(m.start, m.end) for m in root.members], root.members.index(hooks))
    return None


def add_ours(text: str, hooks: Sequence[Hook]) -> str:
    """``text`` with ``hooks`` added, each as a group of its own after the event's existing groups."""
    step = _step(text, parse(text))
    first = text.find("\n")  # the file's line ending, as its first line ends (LF when it has one line)
    nl = "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"
    if not text.strip():
        text = "{}" + nl
    for hook in hooks:
        root = parse(text)
        section = next((m for m in root.members if m.key == "hooks"), None)
        if section is None:
            text = _insert(text, root, "hooks", {hook.event: [hook.group()]}, step, nl)
            continue
        if section.value.kind != "object":
            raise CtxtoolError('"hooks" is not an object', "Fix settings.json so Gemini CLI can read it")
        event = next((m for m in section.value.members if m.key == hook.event), None)
        if event is None:
            text = _insert(text, section.value, hook.event, [hook.group()], step, nl)
        elif event.value.kind != "array":
            raise CtxtoolError(f'"hooks.{hook.event}" is not a list', "Fix settings.json first")
        else:
            text = _insert(text, event.value, None, hook.group(), step, nl)
    return text


def _our_groups(text: str) -> Iterator[tuple[str, Any, list[Any]]]:
    """The event, the group and its hooks of each hook group in a settings text that holds ctxtool's."""
    section = to_python(parse(text)).get("hooks")
    for event, groups in section.items() if isinstance(section, dict) else []:
        for group in groups if isinstance(groups, list) else []:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(inner, list) and any(_is_ours(h) for h in inner):
                yield event, group, inner


def installed(text: str) -> list[dict[str, Any]]:
    """ctxtool's hook configs in a settings text, each with its ``event``."""
    return [{"event": event, **h} for event, _, inner in _our_groups(text) for h in inner if _is_ours(h)]


def as_installed(text: str) -> list[Hook] | None:
    """ctxtool's hooks in a settings text in file order, when each is as ``add_ours`` writes it (alone in a
    group of its own, nothing added); None when one is not."""
    out: list[Hook] = []
    for event, group, inner in _our_groups(text):
        if len(inner) != 1 or not {"name", "command", "timeout"} <= set(inner[0]):
            return None
        h = inner[0]
        hook = Hook(event, h["name"], h["command"], h["timeout"], group.get("matcher"))
        if hook.group() != group:
            return None
        out.append(hook)
    return out


def settings_path(scope: str) -> Path:
    if scope == "user":
        home = os.environ.get("GEMINI_CLI_HOME")
        return (Path(home).expanduser() if home else Path.home()) / ".gemini" / "settings.json"
    if scope == "project":
        return Path.cwd().resolve() / ".gemini" / "settings.json"
    raise CtxtoolError(f"unknown scope {scope!r}", "Use --scope user or --scope project")


def ctxtool_command() -> list[str]:
    """How Gemini CLI should run this ctxtool, by absolute path (its environment may lack the PATH)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "ctxtool" and script.is_file():
        return [str(script.resolve())]
    beside = Path(sys.executable).parent / "ctxtool"
    if beside.is_file():
        return [str(beside)]
    return [sys.executable, "-m", "ctxtool"]


def hooks_for(
    guard_args: Sequence[str], archive_to: str | None, command: Sequence[str] | None = None
) -> list[Hook]:
    base = list(command or ctxtool_command())
    out = [Hook("BeforeModel", GUARD_NAME, shlex.join([*base, "guard", *guard_args]), GUARD_TIMEOUT_MS, "*")]
    if archive_to is not None:
        archive = shlex.join([*base, "archive", "--to", archive_to])
        out += [Hook(e, ARCHIVE_NAME, archive, ARCHIVE_TIMEOUT_MS) for e in ("SessionEnd", "PreCompress")]
    return out


@dataclass(frozen=True, slots=True)
class Change:
    path: Path
    changed: bool
    backup: Path | None  # the backup this change wrote, if it wrote one
    hooks: list[dict[str, Any]]
    exists: bool = True  # False: uninstall removed the file install had created


@dataclass(frozen=True, slots=True)
class _Edit:
    new: bytes | None  # None: no file (install had created it)
    backup: bool  # keep the bytes found as the backup first


@dataclass(frozen=True, slots=True)
class _Before:
    data: bytes | None  # None: there was no file


def _backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def _read(target: Path) -> tuple[bytes | None, FileStamp | None]:
    """The bytes of ``target`` and what they looked like (fstat of the same open file), for the swap."""
    from ctxtool.session.write import FileStamp

    try:
        with target.open("rb") as fh:
            data = fh.read()
            st = os.fstat(fh.fileno())
    except (FileNotFoundError, NotADirectoryError):  # (a file where the folder should be: said on writing)
        return None, None
    except OSError as exc:
        raise CtxtoolError(f"{target}: cannot be read ({exc})", "Check its permissions") from None
    return data, FileStamp(len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest())


def _decode(data: bytes) -> tuple[str, bool]:
    """The text of a settings file and whether it starts with a UTF-8 BOM (kept on writing)."""
    bom = data.startswith(codecs.BOM_UTF8)
    return data.removeprefix(codecs.BOM_UTF8).decode("utf-8"), bom


def _encode(text: str, bom: bool) -> bytes:
    return (codecs.BOM_UTF8 if bom else b"") + text.encode("utf-8")


def _text(path: Path, data: bytes | None) -> tuple[str, bool]:
    """The text of ``path``'s bytes (none: an empty text); refused in one line when Gemini CLI cannot read
    it."""
    try:
        text, bom = _decode(data or b"")
        parse(text)
    except UnicodeDecodeError:
        raise CtxtoolError(
            f"{path}: not UTF-8", "Save it as UTF-8 (as Gemini CLI reads it), then run again"
        ) from None
    except CtxtoolError as exc:
        raise CtxtoolError(
            f"{path}: {exc}",
            "Fix the file (Gemini CLI cannot read it either) or move it away, then run again",
        ) from None
    return text, bom


def _clean(data: bytes | None) -> tuple[str, bool] | None:
    """The text of a file that can be what settings.json was before ctxtool's hooks went in: one Gemini CLI
    reads, with none of ctxtool's hooks (no file: an empty text)."""
    try:
        text, bom = _decode(data or b"")
        return (text, bom) if not installed(text) else None
    except (UnicodeDecodeError, CtxtoolError):
        return None


def _with(data: bytes | None, hooks: Sequence[Hook]) -> bytes:
    """``data`` (none: no file) with ``hooks`` installed, as install writes it."""
    text, bom = _decode(data or b"")
    return _encode(add_ours(text, hooks), bom)


def _before(path: Path, found: bytes | None) -> _Before | None:
    """What ``path`` was before ctxtool's hooks went in, when that is certain: what was found when it holds
    none of them; else the backup, or no file, when installing the hooks there gives ``found`` byte for
    byte. None when neither does (the user changed something since, or the backup is of another time)."""
    if found is None or _clean(found) is not None:
        return _Before(found)
    ours = as_installed(_decode(found)[0])
    if not ours:
        return None
    try:
        candidates: list[bytes | None] = [_backup_path(path).read_bytes(), None]
    except OSError:
        candidates = [None]
    for candidate in candidates:
        try:
            if _clean(candidate) is not None and _with(candidate, ours) == found:
                return _Before(candidate)
        except CtxtoolError:  # a backup whose hooks section cannot hold them
            continue
    return None


def _kept(path: Path) -> frozenset[str]:
    """The containers the backup holds, kept when ctxtool's hooks leave them empty (see ``remove_ours``): a
    backup with none of ctxtool's hooks is the file before they went in, however it changed since."""
    try:
        clean = _clean(_backup_path(path).read_bytes())
    except OSError:
        return frozenset()
    section = to_python(parse(clean[0])).get("hooks") if clean is not None else None
    if not isinstance(section, dict):
        return frozenset()
    return frozenset({"", *(key for key, value in section.items() if isinstance(value, list))})


def _swap(target: Path, found: bytes | None, stamp: FileStamp | None, new: bytes | None) -> None:
    """Put ``new`` (None: no file) where ``found`` was, atomically; FileChangedError, and nothing written,
    when the file no longer holds ``found``."""
    from ctxtool.session.write import FileChangedError, atomic_write, replace_checked

    changed = FileChangedError(f"{target}: changed on disk", "Run again")
    if found is None:
        assert new is not None
        try:
            atomic_write(target, new, exclusive=True)  # (makes the folder, or says in one line why not)
        except OutputError as exc:
            if isinstance(exc.__cause__, FileExistsError):
                raise changed from None
            raise
    elif new is None:
        if _read(target)[0] != found:
            raise changed
        try:
            target.unlink()
        except OSError as exc:
            raise OutputError(target, exc) from exc
    else:
        assert stamp is not None
        replace_checked(target, new, stamp)


def _edit(path: Path, plan: Callable[[bytes | None], _Edit | None]) -> tuple[bytes | None, bool, Path | None]:
    """Apply ``plan`` (the bytes found -> the edit, None for none) to ``path`` as a compare-and-swap, again
    on a fresh read when the file changed meanwhile. Returns the bytes the file holds now, whether they
    were written, and the backup written, if any."""
    from ctxtool.session.write import FileChangedError, atomic_write

    target = Path(os.path.realpath(path)) if os.path.islink(path) else path  # a symlink stays a link
    for _ in range(ATTEMPTS):
        found, stamp = _read(target)
        edit = plan(found)
        if edit is None:
            return found, False, None
        backup, previous = None, None
        if edit.backup and found is not None:
            backup = _backup_path(path)
            previous = _read(backup)[0]
            atomic_write(backup, found, like=target)  # a private settings file keeps a private backup
        try:
            _swap(target, found, stamp, edit.new)
        except FileChangedError:
            if backup is not None:  # the next attempt reads the backup as it was (see _before)
                if previous is None:
                    backup.unlink(missing_ok=True)
                else:
                    atomic_write(backup, previous)
            continue
        return edit.new, True, backup
    raise CtxtoolError(
        f"{path}: changed on disk {ATTEMPTS} times while ctxtool was editing it, so ctxtool left it as the "
        "other program wrote it",
        "Let Gemini CLI finish saving its settings (or close it), then run the command again",
    )


def _install_edit(path: Path, found: bytes | None, hooks: Sequence[Hook]) -> _Edit | None:
    text, bom = _text(path, found)
    if hooks and Counter(as_installed(text) or []) == Counter(hooks):
        return None  # the same hooks are in: nothing to write
    before = _before(path, found)
    try:
        if before is not None:
            new = _with(before.data, hooks)
        else:
            new = _encode(add_ours(remove_ours(text, _kept(path)), hooks), bom)
    except CtxtoolError as exc:
        raise CtxtoolError(f"{path}: {exc.message}", exc.fix) from None
    if new == found:
        return None
    # A backup of the file found, unless the backup (or no file) is already what was under ctxtool's hooks:
    # the file found differs from it only in those hooks, and uninstall gives it back.
    return _Edit(new, found is not None and (before is None or before.data == found))


def _uninstall_edit(path: Path, found: bytes | None) -> _Edit | None:
    text, bom = _text(path, found)  # (no file: an empty text, without ctxtool's hooks)
    if not installed(text):
        return None
    before = _before(path, found)
    return _Edit(before.data if before is not None else _encode(remove_ours(text, _kept(path)), bom), True)


def install(path: Path, hooks: Sequence[Hook]) -> Change:
    """Put ``hooks`` in ``path`` in place of any ctxtool hooks there; no write when nothing changes."""
    now, changed, backup = _edit(path, lambda found: _install_edit(path, found, hooks))
    return Change(path, changed, backup, installed(_text(path, now)[0]))


def uninstall(path: Path) -> Change:
    """Take ctxtool's hooks out of ``path``: the bytes install found, when nothing else changed since."""
    now, changed, backup = _edit(path, lambda found: _uninstall_edit(path, found))
    return Change(path, changed, backup, [], exists=now is not None)


def status(path: Path) -> list[dict[str, Any]]:
    return installed(_text(path, _read(path)[0])[0])
