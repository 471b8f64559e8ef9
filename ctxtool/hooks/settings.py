"""Install ctxtool's hooks in Gemini CLI's ``settings.json``, and take them out again, touching nothing else.

Owns: where the settings live (user: ``$GEMINI_CLI_HOME/.gemini/settings.json``, else ``~/.gemini/…``,
as Gemini CLI 0.61.0's ``Storage.getGlobalSettingsPath`` and ``homedir``; project:
``<folder>/.gemini/settings.json``),
which entries are ctxtool's (hook configs named ``ctxtool-guard`` and ``ctxtool-archive``), and editing the
file as text: Gemini CLI reads it with ``JSON.parse(stripJsonComments(content))`` (``loadSettings``), so a
file may hold comments and its author's layout, both of which a re-serialised file would lose. The edits are
splices at the spans a small JSON-with-comments parser finds: installing adds ctxtool's groups after the
existing ones (creating ``hooks`` and the event arrays when missing); uninstalling removes exactly those
spans, and the containers it created once they are empty, so the rest of the file stays byte for byte.
Every write keeps the previous file as ``settings.json.ctxtool-backup`` and is atomic.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxtool.common.errors import CtxtoolError

GUARD_NAME = "ctxtool-guard"
ARCHIVE_NAME = "ctxtool-archive"
OURS = (GUARD_NAME, ARCHIVE_NAME)
GUARD_TIMEOUT_MS = 10_000  # a first call on a large home reads every session once
ARCHIVE_TIMEOUT_MS = 120_000
BACKUP_SUFFIX = ".ctxtool-backup"


# --------------------------------------------------------------------------- a JSON parser that keeps spans


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
        c = self.text[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        start = self.i
        decoder = json.JSONDecoder()
        try:
            value, end = decoder.raw_decode(self.text, self.i)
        except json.JSONDecodeError as exc:
            raise self.fail(exc.msg) from None
        self.i = end
        return Node("scalar", start, end, value=value)

    def obj(self) -> Node:
        node = Node("object", self.i, -1)
        self.i += 1
        self.skip()
        if self.text.startswith("}", self.i):
            self.i += 1
            node.end = self.i
            return node
        while True:
            self.skip()
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
                continue
            if self.text.startswith("}", self.i):
                self.i += 1
                node.end = self.i
                return node
            raise self.fail("a ',' or '}' is missing")

    def arr(self) -> Node:
        node = Node("array", self.i, -1)
        self.i += 1
        self.skip()
        if self.text.startswith("]", self.i):
            self.i += 1
            node.end = self.i
            return node
        while True:
            node.items.append(self.value())
            self.skip()
            if self.text.startswith(",", self.i):
                self.i += 1
                continue
            if self.text.startswith("]", self.i):
                self.i += 1
                node.end = self.i
                return node
            raise self.fail("a ',' or ']' is missing")


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


# ------------------------------------------------------------------------------------------- the edits


@dataclass(frozen=True, slots=True)
class Hook:
    event: str
    name: str
    command: str
    timeout: int
    matcher: str | None = None

    def group(self) -> dict[str, Any]:
        hook = {"name": self.name, "type": "command", "command": self.command, "timeout": self.timeout}
        group: dict[str, Any] = {"matcher": self.matcher} if self.matcher is not None else {}
        group["hooks"] = [hook]
        return group


def _line_indent(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    line = text[start:at]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _render(value: Any, indent: str, step: str) -> str:
    """``value`` as JSON laid out like the file: nested lines indented from ``indent`` by ``step``."""
    if not step:
        return json.dumps(value, ensure_ascii=False)
    lines = json.dumps(value, ensure_ascii=False, indent=len(step.expandtabs())).splitlines()
    return "\n".join([lines[0], *[indent + line for line in lines[1:]]])


def _step(text: str, root: Node) -> str:
    """The file's indentation step (two spaces when it cannot tell; nothing when it is on one line)."""
    if root.members and "\n" not in text[root.start : root.members[0].start]:
        return ""
    for m in root.members:
        indent = _line_indent(text, m.start)
        if indent:
            return indent
    return "  "


def _insert_member(text: str, obj: Node, key: str, value: Any, step: str) -> str:
    """Add ``"key": value`` as the last member of ``obj`` (the inverse of ``_remove_member`` on it)."""
    if obj.members:
        first, last = obj.members[0], obj.members[-1]
        sep = text[obj.start + 1 : first.start]
        indent = _line_indent(text, first.start)
        inline = "\n" not in sep
        piece = f",{sep or ' '}{json.dumps(key)}: {_render(value, indent, '' if inline else step)}"
        return text[: last.end] + piece + text[last.end :]
    indent = _line_indent(text, obj.start) + step
    piece = f"{json.dumps(key)}: {_render(value, indent, step)}"
    return text[: obj.start + 1] + piece + text[obj.start + 1 :]


def _insert_item(text: str, arr: Node, value: Any, step: str) -> str:
    """Add ``value`` as the last item of ``arr`` (the inverse of ``_remove_item`` on it)."""
    if arr.items:
        first, last = arr.items[0], arr.items[-1]
        sep = text[arr.start + 1 : first.start]
        indent = _line_indent(text, first.start)
        inline = "\n" not in sep
        piece = f",{sep or ' '}{_render(value, indent, '' if inline else step)}"
        return text[: last.end] + piece + text[last.end :]
    indent = _line_indent(text, arr.start) + step
    return text[: arr.start + 1] + _render(value, indent, step) + text[arr.start + 1 :]


def _cut(text: str, spans: Sequence[tuple[int, int]], at: int) -> tuple[int, int]:
    """The text to remove for element ``at`` of ``spans``, with the separator that goes with it."""
    start, end = spans[at]
    if len(spans) == 1:
        return start, end
    if at == len(spans) - 1:
        return spans[at - 1][1], end
    return start, spans[at + 1][0]


def _is_ours(hook: Any) -> bool:
    return isinstance(hook, dict) and hook.get("name") in OURS


def remove_ours(text: str) -> str:
    """``text`` without ctxtool's hooks, nor the containers their removal left empty (splices only): an event
    list or a ``hooks`` object that was empty before stays."""
    emptied: set[str] = set()  # events whose last group was ctxtool's
    while True:
        span = _next_removal(text, parse(text), emptied)
        if span is None:
            return text
        text = text[: span[0]] + text[span[1] :]


def _next_removal(text: str, root: Node, emptied: set[str]) -> tuple[int, int] | None:
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
                if len(groups) == 1:
                    emptied.add(event.key)
                return _cut(text, [(g.start, g.end) for g in groups], g_at)
            return _cut(text, [(h.start, h.end) for h in inner.value.items], mine[0])
        if not groups and event.key in emptied:
            emptied.discard(event.key)
            if len(events.members) == 1:
                emptied.add("")  # the hooks object is emptied too
            return _cut(text, [(m.start, m.end) for m in events.members], e_at)
    if not events.members and "" in emptied:
        emptied.discard("")
        return _cut(text, [(m.start, m.end) for m in root.members], root.members.index(hooks))
    return None


def add_ours(text: str, hooks: Sequence[Hook]) -> str:
    """``text`` with ``hooks`` added, each as a group of its own after the event's existing groups."""
    step = _step(text, parse(text))
    if not text.strip():
        text = "{}\n"
    for hook in hooks:
        root = parse(text)
        section = next((m for m in root.members if m.key == "hooks"), None)
        if section is None:
            text = _insert_member(text, root, "hooks", {hook.event: [hook.group()]}, step)
            continue
        if section.value.kind != "object":
            raise CtxtoolError('"hooks" is not an object', "Fix settings.json so Gemini CLI can read it")
        event = next((m for m in section.value.members if m.key == hook.event), None)
        if event is None:
            text = _insert_member(text, section.value, hook.event, [hook.group()], step)
        elif event.value.kind != "array":
            raise CtxtoolError(f'"hooks.{hook.event}" is not a list', "Fix settings.json first")
        else:
            text = _insert_item(text, event.value, hook.group(), step)
    return text


def installed(text: str) -> list[dict[str, Any]]:
    """ctxtool's hook configs in a settings text, each with its ``event``."""
    data = to_python(parse(text))
    out = []
    for event, groups in (data.get("hooks") or {}).items() if isinstance(data.get("hooks"), dict) else []:
        for group in groups if isinstance(groups, list) else []:
            for hook in group.get("hooks") or [] if isinstance(group, dict) else []:
                if _is_ours(hook):
                    out.append({"event": event, **hook})
    return out


# ------------------------------------------------------------------------------------- files and commands


def settings_path(scope: str, project: str | Path | None = None) -> Path:
    if scope == "user":
        home = os.environ.get("GEMINI_CLI_HOME")
        return (
            Path(home).expanduser() / ".gemini" / "settings.json"
            if home
            else Path.home() / ".gemini" / "settings.json"
        )
    if scope == "project":
        return Path(project or os.getcwd()).resolve() / ".gemini" / "settings.json"
    raise CtxtoolError(f"unknown scope {scope!r}", "Use --scope user or --scope project")


def ctxtool_command() -> list[str]:
    """How Gemini CLI should run this ctxtool, by absolute path (its environment may lack the PATH)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "ctxtool":
        found = script if script.is_absolute() else Path(os.path.abspath(script))
        if found.is_file():
            return [str(found.resolve())]
    beside = Path(sys.executable).parent / "ctxtool"
    if beside.is_file():
        return [str(beside)]
    return [sys.executable, "-m", "ctxtool"]


def hooks_for(
    guard_args: Sequence[str], archive_to: str | None, command: Sequence[str] | None = None
) -> list[Hook]:
    base = list(command or ctxtool_command())
    out = [
        Hook("BeforeModel", GUARD_NAME, shlex.join([*base, "guard", *guard_args]), GUARD_TIMEOUT_MS, "*"),
    ]
    if archive_to is not None:
        archive = shlex.join([*base, "archive", "--to", archive_to])
        out += [
            Hook("SessionEnd", ARCHIVE_NAME, archive, ARCHIVE_TIMEOUT_MS),
            Hook("PreCompress", ARCHIVE_NAME, archive, ARCHIVE_TIMEOUT_MS),
        ]
    return out


@dataclass(frozen=True, slots=True)
class Change:
    path: Path
    changed: bool
    backup: Path | None
    hooks: list[dict[str, Any]]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CtxtoolError(f"{path}: cannot be read ({exc})", "Check its permissions and encoding") from None


def _parsed(path: Path, text: str) -> None:
    try:
        parse(text)
    except CtxtoolError as exc:
        raise CtxtoolError(
            f"{path}: {exc}",
            "Fix the file (Gemini CLI cannot read it either) or move it away, then run again",
        ) from None


def _write(path: Path, old: str | None, new: str) -> Path | None:
    from ctxtool.session.write import atomic_write

    backup = None  # (atomic_write makes the folder, or says in one line why it cannot)
    if old is not None:
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        atomic_write(backup, old.encode("utf-8"))
    atomic_write(path, new.encode("utf-8"))
    return backup


def install(path: Path, hooks: Sequence[Hook]) -> Change:
    """Put ``hooks`` in ``path`` in place of any ctxtool hooks there; no write when nothing changes."""
    old = _read(path)
    text = old or ""
    _parsed(path, text)
    new = add_ours(remove_ours(text), hooks)
    if old is not None and new == old:
        return Change(path, False, None, installed(new))
    return Change(path, True, _write(path, old, new), installed(new))


def uninstall(path: Path) -> Change:
    old = _read(path)
    if old is None:
        return Change(path, False, None, [])
    _parsed(path, old)
    new = remove_ours(old)
    if new == old:
        return Change(path, False, None, [])
    return Change(path, True, _write(path, old, new), [])


def status(path: Path) -> list[dict[str, Any]]:
    text = _read(path)
    if text is None:
        return []
    _parsed(path, text)
    return installed(text)
