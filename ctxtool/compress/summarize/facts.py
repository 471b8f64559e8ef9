"""Key facts of a history, and how many of them survive in a text.

Owns the extraction of what the next turn needs from a history in Gemini wire form (``Content`` dicts): the
user's requests, the files touched, the commands run and how they ended, the errors hit, the constraints the
user set, the todo list; and the measure, per kind, of which of them a text still holds. ``ctxtool compact``
reports it, ``ctxtool diff`` compares it, the offline summarizer writes from the same extraction.

Heuristic but precise by design: errors come from tool responses that carry an ``error`` field or from failed
shell commands, never from the word "error" in a file's content; directives only from what the user typed,
never from ``<session_context>``, ``<state_snapshot>``, ``@path`` contents or other synthesised turns.

Must not do I/O or import beyond the standard library (and the on-disk schema's constants).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ctxtool.session.schema import EMPTY_RESPONSE_NUDGE_PREFIX

FactKind = Literal["requests", "paths", "commands", "errors", "directives"]
FACT_KINDS: tuple[FactKind, ...] = ("requests", "paths", "commands", "errors", "directives")

# Tool-call argument names that hold one path, or a list of paths.
_PATH_ARGS = ("file_path", "absolute_path", "path", "dir_path", "directory", "plan_filename", "notebook_path")
_PATHS_ARGS = ("paths", "file_paths")
# Tools whose ``path``-like argument does not name a file on the user's machine.
_NON_FS_TOOLS = frozenset({"get_internal_docs", "web_fetch", "google_web_search", "activate_skill"})
_SHELL_TOOLS = frozenset({"run_shell_command", "shell"})
_TODO_TOOLS = frozenset({"write_todos"})
# How a tool call touches the paths it names (any other tool reads them; a shell's dir_path is its cwd).
_HOW_BY_TOOL = {
    **dict.fromkeys(("write_file", "create_file"), "written"),
    **dict.fromkeys(("replace", "edit", "smart_edit"), "edited"),
    **dict.fromkeys(("list_directory", "ls", "glob", "grep_search", "search_file_content", "grep"), "listed"),
}

# How much of a fact must appear verbatim to count as kept (``fact_key``); facts are never normalised,
# escaped or re-cased, neither when they are written nor when they are measured.
HEAD_CHARS = 300
# Longest text kept of one fact (a command, an error's first line): beyond, it is cut with "…".
ERROR_MAX_CHARS = 1000
COMMAND_MAX_CHARS = 2000
# A "sentence" longer than this is pasted material, not something the user typed as an instruction.
DIRECTIVE_MAX_CHARS = 400
_END_PUNCT = " .!。！;；:"  # what a directive may end with and still be the same directive
_LATEST_ACTIONS = 8
_MODIFIED_HOWS = frozenset({"written", "edited"})

# User turns that Gemini CLI (or a compaction) writes on the user's behalf. Matched against the stripped
# text at the start of a part.
_SYNTHETIC_PREFIXES = (
    "<session_context>",
    "<hook_context>",
    "<state_snapshot>",
    "<scratchpad>",
    "<compressed_chat_history>",
    "This is the Gemini CLI. We are setting up the context for our chat.",
    "System: Please continue.",
    "Please continue.",
    "You have exceeded the maximum number of turns.",
    "First, reason in your scratchpad.",
    "Generate a new <state_snapshot>",
    "A previous <state_snapshot> exists",
    "Critically evaluate the <state_snapshot>",
    "Summarize our conversation up to this point.",
    EMPTY_RESPONSE_NUDGE_PREFIX,
)
_SYNTHETIC_MARKERS = ("<state_snapshot>", "<compressed_chat_history>")

_REFERENCED_MARKER = "--- Content from referenced files ---"
_REFERENCED_FILE_RE = re.compile(r"^Content from @(.+?):\s*$", re.MULTILINE)
_BLOCK_RES = (
    re.compile(r"<system_note>.*?</system_note>", re.DOTALL),
    re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL),
    re.compile(r"--- Context from: .*? ---.*?--- End of Context from: .*? ---", re.DOTALL),
)

_WS_RE = re.compile(r"\s+")
_XML_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&"))
_TRAIL_PUNCT = ".,;:!?)]}>'\"`*。，、；：！？）」』】"
# File extensions that make a bare name a path (a word list, split once at import).
_KNOWN_EXT = frozenset(
    """
    py pyi ipynb ts tsx js jsx mjs cjs json jsonl md mdx txt rst yaml yml toml ini cfg conf env lock rs
    go java kt kts scala c h cc cpp hpp cs swift rb php pl lua r sh bash zsh fish ps1 bat cmd html htm
    css scss sass less vue svelte sql db sqlite csv tsv xml svg png jpg jpeg gif webp pdf log gradle
    properties dockerfile tf hcl proto graphql gql mk cmake dart ex exs erl hs ml clj nix
    """.split()  # noqa: SIM905
)
_WIN_PATH_RE = re.compile(r"^[A-Za-z]:[\\/]")
_EXT_RE = re.compile(r"\.([A-Za-z0-9]{1,10})$")
_QUOTED_RE = re.compile(r"`([^`\n]{2,260})`|\"([^\"\n]{2,260})\"|'([^'\n]{2,260})'|“([^”\n]{2,260})”")
_TOKEN_RE = re.compile(r"[^\s\"'`<>|“”()\[\]{},;。，、；：！？（）「」『』【】]+")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_EXIT_RE = re.compile(r"^Exit Code: (-?\d+)\s*$", re.MULTILINE)
_SIGNAL_RE = re.compile(r"^Signal: (\S.*)$", re.MULTILINE)
_SHELL_ERROR_FIELD_RE = re.compile(r"^Error: (.+)$", re.MULTILINE)
_SHELL_TRAILERS = (
    "Exit Code:",
    "Signal:",
    "Background PIDs:",
    "Process Group PGID:",
    "Error: (none)",
    "Output too large.",
    "</tool_output_masked>",
    "<tool_output_masked>",
    "Directory:",
    "Command:",
)
_EXC_RE = re.compile(r"(?<![\w.])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\s*:\s*\S")
_ERROR_LINE_RE = re.compile(
    r"(^\s*(?:error|fatal|err!|npm err!|e\d{3,5}|panic)\b[\s:!\[(]"
    r"|\b[A-Z]\w*(?:Error|Exception)\b"
    r"|\bcommand not found\b|\bnot recognized as\b|\bno such file or directory\b|\bpermission denied\b"
    r"|\bcannot (?:find|open|access|resolve|read)\b|\bunable to\b|\bfailed\b|\bfailure\b|\bnot found\b"
    r"|\bsyntax ?error\b|\btraceback\b|\bdenied\b|\brefused\b|\btimed out\b)",
    re.IGNORECASE,
)
_LEAD_RE = re.compile(r"^(?:[-*•>#]+|\d+[.)]|\(?[a-z]\))\s*", re.IGNORECASE)
_POLITE_RE = re.compile(
    r"^(?:(?:please|pls|plz|and|also|then|so|but|now|ok|okay|oh)\b[\s,]*)+", re.IGNORECASE
)
_DIRECTIVE_START_RE = re.compile(
    r"^(?:always|never|don'?t|do not|dont|must|make sure|ensure|use|using|avoid|only|stop|keep|remember|"
    r"no need to|prefer|stick to|refrain|you must|you should|you need to|we must|we need to|"
    r"from now on|going forward|under no circumstances|important:|note:|constraint:|"
    r"n'utilise|ne modifie|utilise|toujours|jamais|no uses|nunca|siempre|immer|niemals)\b",
    re.IGNORECASE,
)
_DIRECTIVE_ANY_RE = re.compile(
    r"\b(?:must|mustn'?t|(?:never|always)(?=\s+\w)|do not|don'?t|should not|shouldn'?t|make sure|"
    r"under no circumstances|"
    r"is not allowed|are not allowed|is forbidden|only use|instead of)\b",
    re.IGNORECASE,
)
_DIRECTIVE_CJK_RE = re.compile(
    r"不要|別再|别再|不准|不得|禁止|必須|必须|务必|務必|一定要|總是|总是|永遠|永远|始终|始終|只能|只用|不需要|避免|確保|确保|"
    r"請使用|请使用|使用|從現在|从现在|以後|以后|"
    r"必ず|しないで|しないでください|禁止|使って|使用して|てください|ないこと|常に|"
    r"항상|절대|반드시|하지 ?마|금지|이제 ?부터|사용해|해줘|해 ?주세요"
)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？])")


@dataclass(frozen=True)
class CommandFact:
    """A shell command the agent ran, with how it ended (``exit 0``, ``exit 1``, ``error``, ``cancelled``,
    ``signal SIGTERM``, ``background``, or ``""`` when the history holds no response)."""

    command: str
    outcome: str
    tool: str = "run_shell_command"


@dataclass(frozen=True)
class ErrorFact:
    """An error a tool reported: ``message`` is its first non-empty line as the tool wrote it (without
    terminal colour codes), at most ERROR_MAX_CHARS long."""

    tool: str
    message: str
    subject: str = ""  # the path or command the failing call was about, when known


@dataclass(frozen=True)
class TodoFact:
    description: str
    status: str


@dataclass(frozen=True)
class PathFact:
    """A path the session touched. ``how``: read, listed, cwd (a shell command's dir_path), mentioned (named
    by the user), referenced (``@path``), or written / edited (these win over the others)."""

    path: str
    how: str

    @property
    def modified(self) -> bool:
        return self.how in _MODIFIED_HOWS


@dataclass(frozen=True)
class Facts:
    """What a compaction must keep. Tuples are ordered by first appearance and de-duplicated."""

    goal: str
    paths: tuple[str, ...]
    commands: tuple[CommandFact, ...]
    errors: tuple[ErrorFact, ...]
    directives: tuple[str, ...]
    todos: tuple[TodoFact, ...]
    latest_actions: tuple[str, ...]
    path_facts: tuple[PathFact, ...] = ()
    user_prompts: int = 0
    tool_calls: int = 0
    requests: tuple[str, ...] = ()  # what the user typed, in order: the first HEAD_CHARS, cut with "…"

    def items(self, kind: FactKind) -> tuple[str, ...]:
        """The facts of one kind as the strings retention looks for."""
        return {
            "requests": self.requests,
            "paths": self.paths,
            "commands": tuple(c.command for c in self.commands),
            "errors": tuple(e.message for e in self.errors),
            "directives": self.directives,
        }[kind]


def normalize_ws(text: str) -> str:
    return _WS_RE.sub(" ", text).strip()


def unescape_xml(text: str) -> str:
    """Undo the five XML entities (a snapshot escapes ``<``, ``>`` and ``&`` in the facts it quotes)."""
    for entity, char in _XML_ENTITIES:
        text = text.replace(entity, char)
    return text


def fact_key(text: str) -> str:
    """What must appear verbatim for a command, an error or a request to count as kept: its first
    HEAD_CHARS characters (all of it when shorter; a request cut with "…" without that mark)."""
    return text.removesuffix("…")[:HEAD_CHARS]


def request_text(typed: str) -> str:
    """A user request as a snapshot quotes it: verbatim, the first HEAD_CHARS characters, and past that the
    rest of the word it cuts, then "…"."""
    text = typed.strip()
    if len(text) <= HEAD_CHARS:
        return text
    end = HEAD_CHARS
    while end < len(text) and not (text[end].isspace() or text[end - 1].isspace()) and end < HEAD_CHARS + 40:
        end += 1
    return text[:end].rstrip() + "…"


def word_clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut at a word boundary and ended with "…" when cut: before
    the word the limit falls in, or, when a single word fills the limit, after it (at most 40 characters
    more); only a longer word is cut inside."""
    if len(text) <= limit:
        return text
    space = max(text.rfind(" ", 0, limit), text.rfind("\n", 0, limit), text.rfind("\t", 0, limit))
    if space > 0 and text[:space].strip():
        return text[:space].rstrip() + "…"
    end = limit - 1
    while end < len(text) and not text[end].isspace() and end < limit + 40:
        end += 1
    return text[:end].rstrip() + ("…" if end < len(text) else "")


def first_line(message: str) -> str:
    """The first non-empty line of a message as written (terminal colour codes removed)."""
    return next((line.strip() for line in _ANSI_RE.sub("", message).splitlines() if line.strip()), "")


def content_parts(content: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The parts of a ``Content`` that are objects."""
    parts = content.get("parts")
    return [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []


def is_synthetic_user_text(text: str) -> bool:
    """True for user-role text Gemini CLI or a compaction wrote, not the user."""
    return text.lstrip().startswith(_SYNTHETIC_PREFIXES) or any(m in text for m in _SYNTHETIC_MARKERS)


def user_typed_text(text: str) -> str:
    """What the user typed: ``@file`` contents, system notes and injected context removed."""
    text = text.partition(_REFERENCED_MARKER)[0]
    for block in _BLOCK_RES:
        text = block.sub(" ", text)
    return text.strip()


def real_user_prompts(history: Sequence[Mapping[str, Any]]) -> Iterator[tuple[int, str, str]]:
    """Yield ``(index, typed_text, raw_text)`` for each user turn that carries a real prompt."""
    for index, content in enumerate(history):
        if content.get("role") != "user":
            continue
        texts = [
            t
            for p in content_parts(content)
            if isinstance(t := p.get("text"), str) and not p.get("thought") and t.strip()
            if not is_synthetic_user_text(t)
        ]
        raw = "\n".join(texts)
        if texts and (typed := user_typed_text(raw)):
            yield index, typed, raw


def _looks_like_path(candidate: str, quoted: bool) -> bool:
    if not candidate or len(candidate) > 260 or any(x in candidate for x in ("://", "*", "\n")):
        return False
    if candidate.startswith(("http:", "https:", "--")):
        return False
    if _WIN_PATH_RE.match(candidate):
        return len(candidate) > 3
    if " " in candidate or (_CJK_RE.search(candidate) and "/" not in candidate):
        return False
    segments = [s for s in re.split(r"[\\/]", candidate) if s]
    if not segments or not all(re.search(r"\w", seg) for seg in segments if seg not in (".", "..", "~")):
        return False
    ext = _EXT_RE.search(segments[-1])
    has_ext = ext is not None and not ext.group(1).isdigit()
    if "/" in candidate or "\\" in candidate:
        if candidate.startswith(("/", "~/", "./", "../", ".\\", "..\\")):
            return len(segments) >= 2 or has_ext or candidate.startswith(("~/", "./", "../"))
        known = has_ext and ext is not None and ext.group(1).lower() in _KNOWN_EXT
        plain_dirs = all(re.fullmatch(r"[\w-]+", seg) for seg in segments)
        return known or (plain_dirs and (candidate.endswith(("/", "\\")) or len(segments) >= 3))
    # A bare name: only with a well-known extension (or quoted with any extension), and not a version number.
    if not has_ext or ext is None or segments[-1].startswith("."):
        return False
    if re.match(r"^v?\d+(\.\d+)+$", candidate) or re.match(r"^[A-Z][a-z]+\.js$", candidate):
        return False  # a version number, or a product name such as Node.js
    return ext.group(1).lower() in _KNOWN_EXT or (quoted and ext.group(1).isalpha() and len(candidate) > 4)


def _clean_path(candidate: str) -> str:
    return candidate.strip().removeprefix("@").rstrip(_TRAIL_PUNCT).lstrip("([{'\"`")


def paths_in_text(text: str) -> list[str]:
    """Paths named in free text: quoted or back-ticked paths (spaces allowed for Windows paths), then bare
    tokens that look like paths (``/abs/x``, ``src/a.ts``, ``C:\\x\\y``, ``README.md``, ``@file``)."""
    found: list[str] = []
    spans: list[tuple[int, int]] = []
    for match in _QUOTED_RE.finditer(text):
        cleaned = _clean_path(next(g for g in match.groups() if g is not None))
        if _looks_like_path(cleaned, quoted=True):
            found.append(cleaned)
            spans.append(match.span())
    for match in _TOKEN_RE.finditer(text):
        if any(start <= match.start() < end for start, end in spans):
            continue  # part of a quoted path already taken whole
        if _looks_like_path(cleaned := _clean_path(match.group(0)), quoted=False):
            found.append(cleaned)
    # Order by position of first occurrence in the text, so that quoted and bare matches interleave.
    return sorted(dict.fromkeys(found), key=lambda p: text.find(p) if p in text else len(text))


def _arg_paths_keyed(name: str, args: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(argument name, path) for every path argument of a tool call."""
    if name in _NON_FS_TOOLS:
        return []
    out = [(key, value.strip()) for key in _PATH_ARGS if isinstance(value := args.get(key), str)]
    for key in _PATHS_ARGS:
        if isinstance(values := args.get(key), list):
            out.extend((key, v.strip()) for v in values if isinstance(v, str))
    return [(k, p) for k, p in out if p and p not in (".", "./", ".\\", "*", "**")]


def _response_payload(part: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any]] | None:
    if not isinstance(fr := part.get("functionResponse"), Mapping):
        return None
    response = fr.get("response")
    return _str(fr.get("name")), _str(fr.get("id")), response if isinstance(response, Mapping) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _as_text(value: Any) -> str:
    if isinstance(value, Mapping | list):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return "" if value is None else value if isinstance(value, str) else str(value)


def _shell_error_line(output: str) -> str:
    """The most telling error line of a failed shell command's output; "" when no line looks like an error
    (the command's outcome still records the failure)."""
    if (field := _SHELL_ERROR_FIELD_RE.search(output)) and field.group(1).strip() not in ("(none)", ""):
        return field.group(1).strip()
    lines: list[str] = []  # the output's lines, without the shell tool's own trailer lines
    for raw in _ANSI_RE.sub("", output).splitlines():
        line = raw.strip()
        if line.startswith(("Output:", "Stdout:", "Stderr:")):
            line = line.split(":", 1)[1].strip()
        if line and line not in ("(empty)", "(none)") and not line.startswith(_SHELL_TRAILERS):
            lines.append(line)
    # A traceback ends with the exception that matters.
    if last := next((m for m in map(_EXC_RE.search, reversed(lines)) if m is not None), None):
        return last.string[last.start() :]
    return next((line for line in lines if _ERROR_LINE_RE.search(line) and len(line) >= 8), "")


def _shell_outcome(response: Mapping[str, Any]) -> tuple[str, str]:
    """(outcome, error message or "") of a run_shell_command response."""
    if error := response.get("error"):
        message = _as_text(error)
        lowered = message.lower()
        return "cancelled" if "cancel" in lowered else "denied" if "denied" in lowered else "error", message
    output = _as_text(response.get("output", response.get("llmContent", "")))
    if (signal := _SIGNAL_RE.search(output)) and (name := signal.group(1).strip()) not in ("(none)", "0"):
        return f"signal {name}", _shell_error_line(output)
    if exit_match := _EXIT_RE.search(output):
        code = int(exit_match.group(1))
        return f"exit {code}", (_shell_error_line(output) if code else "")
    if "Background PIDs:" in output and "(none)" not in output.split("Background PIDs:", 1)[1][:10]:
        return "background", ""
    if not output and not response:
        return "", ""
    return "exit 0", ""  # Gemini CLI omits the exit code line when the command succeeded


def _tool_error(name: str, response: Mapping[str, Any]) -> str:
    """The error message of a non-shell tool response ("" when it succeeded)."""
    if error := response.get("error"):
        return _as_text(error)
    if isinstance(output := response.get("output"), str):
        head = output.lstrip()[:200]
        if re.match(r"(Error\b[^\n:]{0,60}:|Failed to\b)", head):
            return output.strip()
    return ""


def is_directive(sentence: str) -> bool:
    if not (body := _POLITE_RE.sub("", _LEAD_RE.sub("", sentence.strip())).strip()):
        return False
    cjk = _CJK_RE.search(body) is not None
    if len(body) < (4 if cjk else 10) or len(sentence) > DIRECTIVE_MAX_CHARS or body.endswith(("?", "？")):
        return False
    if _DIRECTIVE_START_RE.match(body) or _DIRECTIVE_ANY_RE.search(body):
        return True
    return cjk and _DIRECTIVE_CJK_RE.search(body) is not None


def directives_in_text(text: str) -> list[str]:
    sentences = (p.strip() for line in text.splitlines() for p in _SENTENCE_SPLIT_RE.split(line.strip()))
    return [normalize_ws(_LEAD_RE.sub("", s)) for s in sentences if s and is_directive(s)]


# (content index, tool name, call id, arguments or response) of a call or a response.
_Call = tuple[int, str, str, Mapping[str, Any]]


def _iter_calls(history: Sequence[Mapping[str, Any]]) -> Iterator[_Call]:
    for index, content in enumerate(history):
        for part in content_parts(content) if content.get("role") == "model" else []:
            if isinstance(fc := part.get("functionCall"), Mapping):
                a = fc.get("args")
                yield index, _str(fc.get("name")), _str(fc.get("id")), a if isinstance(a, Mapping) else {}


def _responses(history: Sequence[Mapping[str, Any]]) -> list[_Call]:
    return [
        (index, *payload)
        for index, content in enumerate(history)
        for part in content_parts(content)
        if (payload := _response_payload(part)) is not None
    ]


def _match_response(
    responses: list[_Call], used: set[int], call_index: int, name: str, call_id: str
) -> Mapping[str, Any] | None:
    """The response to a call: same id when both have one, else the next unused response of that name."""
    for i, (index, r_name, r_id, response) in enumerate(responses):
        if i in used or index <= call_index:
            continue
        if (call_id and r_id == call_id) or (not (call_id and r_id) and r_name == name):
            used.add(i)
            return response
    return None


def _subject(name: str, args: Mapping[str, Any]) -> str:
    if name in _SHELL_TOOLS and isinstance(args.get("command"), str):
        return normalize_ws(str(args["command"]))
    for key in (*_PATH_ARGS, "pattern", "query", "url", "prompt", "objective", "request", "sql", "name"):
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return normalize_ws(value)
    paths = _arg_paths_keyed(name, args)
    return paths[0][1] if paths else ""


def _todos(args: Mapping[str, Any]) -> tuple[TodoFact, ...] | None:
    if not isinstance(todos := args.get("todos"), list):
        return None
    out: list[TodoFact] = []
    for item in todos:
        if isinstance(item, Mapping) and isinstance(item.get("description"), str):
            status = item.get("status") if isinstance(item.get("status"), str) else "pending"
            out.append(TodoFact(normalize_ws(str(item["description"])), str(status)))
    return tuple(out)


def extract_facts(history: Sequence[Mapping[str, Any]]) -> Facts:
    """Extract the facts of a history in Gemini wire form (see the module docstring)."""
    # Each kind in order of first appearance, de-duplicated by a normalised key.
    paths: dict[str, PathFact] = {}
    commands: dict[str, CommandFact] = {}  # a later run updates the outcome, not the place
    errors: dict[str, ErrorFact] = {}
    directives: dict[str, str] = {}
    todos: tuple[TodoFact, ...] = ()
    actions: list[str] = []
    goal = ""
    prompts = calls = 0
    requests: dict[str, None] = {}
    events: list[tuple[int, int, str, Any]] = []  # (content index, order, kind, payload) merged in order
    for order, (index, typed, raw) in enumerate(real_user_prompts(history)):
        events.append((index, order, "prompt", (typed, raw)))
    responses = _responses(history)
    used: set[int] = set()
    for order, (index, name, call_id, args) in enumerate(_iter_calls(history)):
        response = _match_response(responses, used, index, name, call_id)
        events.append((index, 1_000_000 + order, "call", (name, args, response)))
    events.sort(key=lambda e: (e[0], e[1]))

    for _index, _order, kind, payload in events:
        if kind == "prompt":
            typed, raw = payload
            prompts += 1
            requests.setdefault(request_text(typed), None)
            if not goal:
                goal = normalize_ws(typed)
            for path in paths_in_text(typed):
                _add_path(paths, path, "mentioned")
            for match in _REFERENCED_FILE_RE.finditer(raw):
                _add_path(paths, _clean_path(match.group(1)), "referenced")
            for sentence in directives_in_text(typed):
                key = normalize_ws(unescape_xml(sentence)).casefold().rstrip(_END_PUNCT)
                directives.setdefault(key, sentence)
            continue
        name, args, response = payload
        calls += 1
        for key, path in _arg_paths_keyed(name, args):
            cwd = key == "dir_path" and name in _SHELL_TOOLS
            _add_path(paths, path, "cwd" if cwd else _HOW_BY_TOOL.get(name, "read"))
        subject = _subject(name, args)
        outcome = ""
        if name in _SHELL_TOOLS and isinstance(args.get("command"), str):
            command = word_clip(str(args["command"]).strip(), COMMAND_MAX_CHARS)
            outcome, message = _shell_outcome(response) if response is not None else ("", "")
            if command:
                commands[command] = CommandFact(command, outcome, name)
            if message:
                _add_error(errors, name, message, command)
        elif response is not None and (message := _tool_error(name, response)):
            outcome = "error"
            _add_error(errors, name, message, subject)
        if name in _TODO_TOOLS and (new_todos := _todos(args)) is not None:
            todos = new_todos
        clipped = word_clip(normalize_ws(_ANSI_RE.sub("", subject)), 120)
        action = f"{name} {clipped}".strip() if subject else name
        actions.append(f"{action} → {outcome}" if outcome else action)

    kinds = (tuple(paths), tuple(commands.values()), tuple(errors.values()), tuple(directives.values()))
    latest = tuple(actions[-_LATEST_ACTIONS:])
    return Facts(goal, *kinds, todos, latest, tuple(paths.values()), prompts, calls, tuple(requests))


def _add_path(paths: dict[str, PathFact], path: str, how: str) -> None:
    """Record a path; a later write or edit upgrades a path first seen as read, listed or mentioned."""
    if path and ((existing := paths.get(path)) is None or (how in _MODIFIED_HOWS and not existing.modified)):
        paths[path] = PathFact(path, how)


def _add_error(errors: dict[str, ErrorFact], tool: str, message: str, subject: str) -> None:
    if len(line := word_clip(first_line(message), ERROR_MAX_CHARS)) >= 4:
        errors.setdefault(fact_key(line), ErrorFact(tool, line, subject))


@dataclass(frozen=True)
class KindRetention:
    """Which facts of one kind were found in a text."""

    kind: FactKind
    kept: tuple[str, ...]
    lost: tuple[str, ...]

    @property
    def total(self) -> int:
        return len(self.kept) + len(self.lost)

    @property
    def percent(self) -> float | None:
        """Share of facts kept, 0-100; None when the history had no fact of this kind."""
        return None if self.total == 0 else 100.0 * len(self.kept) / self.total

    def as_dict(self) -> dict[str, Any]:
        return {"kept": len(self.kept), "total": self.total, "percent": self.percent, "lost": list(self.lost)}


@dataclass(frozen=True)
class Retention:
    requests: KindRetention
    paths: KindRetention
    commands: KindRetention
    errors: KindRetention
    directives: KindRetention

    def kind(self, kind: FactKind) -> KindRetention:
        result: KindRetention = getattr(self, kind)
        return result

    def percent(self, kind: FactKind) -> float | None:
        return self.kind(kind).percent

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {k: self.kind(k).as_dict() for k in FACT_KINDS}


def path_forms(path: str) -> tuple[str, ...]:
    """The forms of a path that count as keeping it: the path itself, or its parent directory name and
    base name joined by either separator. A path with a single component has only itself."""
    segments = [s for s in re.split(r"[\\/]", path) if s]
    forms = [path]
    if len(segments) >= 2 and not (len(segments) == 2 and _WIN_PATH_RE.match(path)):
        forms.append(f"{segments[-2]}/{segments[-1]}")
        forms.append(f"{segments[-2]}\\{segments[-1]}")
    return tuple(dict.fromkeys(forms))


def fact_kept(kind: FactKind, fact: str, text: str) -> bool:
    """Whether a fact survives, verbatim, in ``text`` (nothing normalised, unescaped or re-cased)."""
    if kind == "paths":
        return any(form in text for form in path_forms(fact))
    if kind == "directives":
        return fact.rstrip(_END_PUNCT) in text
    return fact_key(fact) in text


def retention(facts: Facts, text: str | Iterable[str]) -> Retention:
    """Measure which facts survive (``fact_kept``) in ``text`` or the concatenation of several texts: a fact
    that a summary escaped (``&amp;&amp;``) or reflowed is lost."""
    joined = text if isinstance(text, str) else "\n".join(text)

    def split(kind: FactKind) -> KindRetention:
        flags = [(fact, fact_kept(kind, fact, joined)) for fact in facts.items(kind)]
        return KindRetention(kind, tuple(f for f, k in flags if k), tuple(f for f, k in flags if not k))

    return Retention(*(split(kind) for kind in FACT_KINDS))


def history_text(history: Sequence[Mapping[str, Any]]) -> str:
    """A plain rendering of a history for retention checks: every text part, every function call's name and
    arguments, every function response, one per line."""
    lines: list[str] = []
    for content in history:
        for part in content_parts(content):
            if isinstance(part.get("text"), str):
                lines.append(str(part["text"]))
            if isinstance(fc := part.get("functionCall"), Mapping):
                lines.append(f"{fc.get('name', '')} {_as_text(fc.get('args'))}")
                if isinstance(args := fc.get("args"), Mapping):
                    lines.extend(str(v) for v in args.values() if isinstance(v, str))
            if (payload := _response_payload(part)) is not None:
                name, _id, response = payload
                lines.append(name)
                lines.extend(_as_text(v) for v in response.values())
    return "\n".join(lines)
