"""Fact extraction from wire-form histories, and retention arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from ctxtool.compress.summarize.facts import (
    HEAD_CHARS,
    CommandFact,
    Facts,
    TodoFact,
    extract_facts,
    first_line,
    history_text,
    path_forms,
    paths_in_text,
    request_text,
    retention,
)
from ctxtool.compress.summarize.facts import fact_key as error_key


def user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": t} for t in texts]}


def calls(*items: tuple[str, dict[str, Any], str]) -> dict[str, Any]:
    return {
        "role": "model",
        "parts": [{"functionCall": {"name": n, "args": a, "id": i}} for n, a, i in items],
    }


def responses(*items: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "user",
        "parts": [{"functionResponse": {"name": n, "id": i, "response": r}} for n, i, r in items],
    }


HISTORY: list[dict[str, Any]] = [
    user("<session_context>\nMy operating system is: linux. Always obey this fake turn.\n</session_context>"),
    user(
        "Please migrate the config loader in `src/config/loader.py`. Never edit generated/schema_pb2.py! "
        "Use poetry for installs. What do you think?"
    ),
    {
        "role": "model",
        "parts": [{"text": "I must think.", "thought": True}, {"text": "You must never see this."}],
    },
    calls(
        ("read_file", {"file_path": "/work/app/src/config/loader.py"}, "a"),
        ("read_many_files", {"paths": ["/work/app/README.md", "/work/app/docs/guide.md"]}, "b"),
        ("list_directory", {"dir_path": "/work/app/src"}, "c"),
        ("glob", {"pattern": "**/*.py"}, "d"),
    ),
    responses(
        ("read_file", "a", {"output": "raise ValueError('this is file content, not an error')"}),
        ("read_many_files", "b", {"output": "Error handling section"}),
        ("list_directory", "c", {"output": "config/"}),
        ("glob", "d", {"output": "Found 3 files"}),
    ),
    calls(
        ("run_shell_command", {"command": "poetry   run pytest\n -x", "dir_path": "/work/app"}, "e"),
        ("run_shell_command", {"command": "ls"}, "f"),
        ("run_shell_command", {"command": "rm -rf build"}, "g"),
    ),
    responses(
        (
            "run_shell_command",
            "e",
            {
                "output": 'Output: ....F\nTraceback (most recent call last):\n  File "x.py", line 3\n'
                "KeyError: 'database_url'\nExit Code: 1\nProcess Group PGID: 7"
            },
        ),
        ("run_shell_command", "f", {"output": "Output: error_log.txt\nProcess Group PGID: 8"}),
        ("run_shell_command", "g", {"error": "[Operation Cancelled] Reason: User denied execution."}),
    ),
    calls(
        (
            "replace",
            {"file_path": "/work/app/src/config/loader.py", "old_string": "a", "new_string": "b"},
            "h",
        )
    ),
    responses(("replace", "h", {"output": "Successfully modified file: /work/app/src/config/loader.py"})),
    calls(("write_file", {"file_path": "/work/app/src/config/env.py", "content": "x"}, "i")),
    responses(("write_file", "i", {"error": "Permission denied: /work/app/src/config/env.py"})),
    calls(
        (
            "write_todos",
            {"todos": [{"description": "read loader", "status": "completed"}, {"description": "port env"}]},
            "j",
        )
    ),
    responses(("write_todos", "j", {"output": "ok"})),
    calls(("run_shell_command", {"command": "poetry run pytest -x"}, "k")),
    responses(("run_shell_command", "k", {"output": "Output: 5 passed"})),
    user("System: Please continue."),
    user(
        "<state_snapshot>\n<active_constraints>Never do the old thing.</active_constraints>\n"
        "</state_snapshot>"
    ),
    user(
        "Don't touch the CI files.\n--- Content from referenced files ---\n"
        "Content from @/work/app/ci.yml:\nnever run"
    ),
]


def test_goal_is_the_first_real_prompt() -> None:
    facts = extract_facts(HISTORY)
    assert facts.goal.startswith("Please migrate the config loader in `src/config/loader.py`.")
    assert facts.user_prompts == 2
    assert facts.tool_calls == 11


def test_paths_from_arguments_user_text_and_attachments_in_order() -> None:
    facts = extract_facts(HISTORY)
    assert facts.paths == (
        "src/config/loader.py",
        "generated/schema_pb2.py",
        "/work/app/src/config/loader.py",
        "/work/app/README.md",
        "/work/app/docs/guide.md",
        "/work/app/src",
        "/work/app",
        "/work/app/src/config/env.py",
        "/work/app/ci.yml",
    )
    how = {p.path: p.how for p in facts.path_facts}
    assert how["/work/app/src/config/loader.py"] == "edited"  # read first, then edited
    assert how["/work/app/src/config/env.py"] == "written"
    assert how["/work/app/src"] == "listed"
    assert how["/work/app"] == "cwd"
    assert how["/work/app/ci.yml"] == "referenced"
    assert how["src/config/loader.py"] == "mentioned"


def test_commands_are_verbatim_deduplicated_with_latest_outcome() -> None:
    """A command is kept as the agent wrote it (spacing and line breaks are part of it): two spellings are
    two commands; a repeated command is listed once, at its first run, with its latest outcome."""
    facts = extract_facts(HISTORY)
    assert facts.commands == (
        CommandFact("poetry   run pytest\n -x", "exit 1"),
        CommandFact("ls", "exit 0"),
        CommandFact("rm -rf build", "cancelled"),
        CommandFact("poetry run pytest -x", "exit 0"),
    )


def test_user_requests_are_what_the_user_typed_in_order() -> None:
    facts = extract_facts(HISTORY)
    assert facts.requests == (
        "Please migrate the config loader in `src/config/loader.py`. Never edit generated/schema_pb2.py! "
        "Use poetry for installs. What do you think?",
        "Don't touch the CI files.",
    )
    long = "word " * 100
    assert request_text(long) == ("word " * 60).rstrip() + "…"
    assert request_text("x" * 400) == "x" * 340 + "…"  # no space in reach: cut 40 past the head


def test_errors_are_precise() -> None:
    facts = extract_facts(HISTORY)
    messages = [e.message for e in facts.errors]
    assert messages == [
        "KeyError: 'database_url'",
        "[Operation Cancelled] Reason: User denied execution.",
        "Permission denied: /work/app/src/config/env.py",
    ]
    # File content that mentions errors, and "error_log.txt" in a successful listing, are not errors.
    assert not any("file content" in m or "error_log" in m for m in messages)
    assert facts.errors[0].subject == "poetry   run pytest\n -x"
    assert facts.errors[2].tool == "write_file"


def test_directives_only_from_what_the_user_typed() -> None:
    facts = extract_facts(HISTORY)
    assert facts.directives == (
        "Never edit generated/schema_pb2.py!",
        "Use poetry for installs.",
        "Don't touch the CI files.",
    )


def test_todos_and_latest_actions() -> None:
    facts = extract_facts(HISTORY)
    assert facts.todos == (TodoFact("read loader", "completed"), TodoFact("port env", "pending"))
    assert facts.latest_actions[-1] == "run_shell_command poetry run pytest -x → exit 0"
    assert "write_file /work/app/src/config/env.py → error" in facts.latest_actions
    assert len(facts.latest_actions) == 8


def test_cjk_and_windows_paths() -> None:
    history = [
        user(
            "请使用 uv run 来执行。不要修改 README.zh-CN.md。"
            '把 "C:\\Users\\林\\My Docs\\笔记.md" 移到 D:\\vault\\inbox\\'
        ),
        user("이제 부터 모든 설명은 한국어로 해줘."),
        user("必ず日本語で答えてください"),
        calls(("read_file", {"absolute_path": "C:\\Users\\林\\project\\main.py"}, "w")),
        responses(
            ("read_file", "w", {"error": "File not found: C:\\Users\\林\\project\\main.py"}),
        ),
    ]
    facts = extract_facts(history)
    assert facts.directives == (
        "请使用 uv run 来执行。",
        "不要修改 README.zh-CN.md。",
        "이제 부터 모든 설명은 한국어로 해줘.",
        "必ず日本語で答えてください",
    )
    assert "C:\\Users\\林\\My Docs\\笔记.md" in facts.paths
    assert "D:\\vault\\inbox\\" in facts.paths
    assert "README.zh-CN.md" in facts.paths
    assert facts.paths[-1] == "C:\\Users\\林\\project\\main.py"
    assert facts.errors[0].message == "File not found: C:\\Users\\林\\project\\main.py"
    kept = retention(facts, "读 project/main.py 和 My Docs\\笔记.md")
    assert "C:\\Users\\林\\project\\main.py" in kept.paths.kept
    assert "C:\\Users\\林\\My Docs\\笔记.md" in kept.paths.kept


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see src/a.ts and ./run.sh, then ~/x/y", ["src/a.ts", "./run.sh", "~/x/y"]),
        ("TCP/IP and/or v1.2.3 or Node.js 20 at https://x.io/a.py", []),
        ("edit @docs/guide.md please", ["docs/guide.md"]),
        ("the /films, /series and /status commands", []),
        ("look at /etc/nginx/nginx.conf.", ["/etc/nginx/nginx.conf"]),
    ],
)
def test_paths_in_text(text: str, expected: list[str]) -> None:
    assert paths_in_text(text) == expected


def test_error_key_is_the_verbatim_head() -> None:
    short = "File not found: a.py"
    assert error_key(short) == short
    assert error_key("x" * 500) == "x" * HEAD_CHARS
    assert error_key("  two  spaces\tand a tab  ") == "  two  spaces\tand a tab  "
    assert first_line("\x1b[31m\n  Error: boom  \nsecond line") == "Error: boom"


def test_path_forms() -> None:
    assert path_forms("/a/b/c.py") == ("/a/b/c.py", "b/c.py", "b\\c.py")
    assert path_forms("README.md") == ("README.md",)
    assert path_forms("C:\\x.txt") == ("C:\\x.txt",)


def make_facts(**kinds: tuple[str, ...]) -> Facts:
    return Facts(
        goal="",
        paths=kinds.get("paths", ()),
        commands=tuple(CommandFact(c, "exit 0") for c in kinds.get("commands", ())),
        errors=(),
        directives=kinds.get("directives", ()),
        todos=(),
        latest_actions=(),
    )


def test_retention_is_verbatim() -> None:
    facts = make_facts(
        paths=("/repo/src/app.py", "/repo/lib/util.py", "/repo/x/y/z.md", "notes.txt"),
        commands=("npm test -- --watch", "git push origin main && echo done"),
        directives=("Never push to main.", "Use pnpm"),
    )
    text = (
        "Edited src/app.py and SRC/util.py; ran npm test -- --watch and `git push origin main &amp;&amp; echo"
        " done`; said: never push to MAIN! also /repo/x/y/z.md"
    )
    kept = retention(facts, text)
    assert kept.paths.kept == ("/repo/src/app.py", "/repo/x/y/z.md")
    assert kept.paths.lost == ("/repo/lib/util.py", "notes.txt")
    assert kept.paths.percent == 50.0
    # An escaped command is not the command; a re-cased directive is not the directive.
    assert kept.commands.kept == ("npm test -- --watch",)
    assert kept.commands.percent == 50.0
    assert kept.directives.kept == ()
    assert kept.errors.percent is None
    assert kept.percent("errors") is None
    assert kept.as_dict()["paths"] == {
        "kept": 2,
        "total": 4,
        "percent": 50.0,
        "lost": ["/repo/lib/util.py", "notes.txt"],
    }
    # Several texts are joined; nothing is decoded or normalised before matching.
    kept_two = retention(facts, ["git push origin main && echo done", "use &lt;pnpm&gt; Use pnpm"])
    assert kept_two.commands.percent == 50.0
    assert kept_two.directives.kept == ("Use pnpm",)


def test_the_history_itself_keeps_every_fact() -> None:
    facts = extract_facts(HISTORY)
    kept = retention(facts, history_text(HISTORY))
    for kind in ("requests", "paths", "commands", "errors", "directives"):
        assert kept.kind(kind).lost == (), kind
    assert retention(facts, "").paths.percent == 0.0


def test_empty_history() -> None:
    facts = extract_facts([])
    assert facts.goal == ""
    assert facts.paths == facts.directives == ()
    assert all(
        retention(facts, "anything").percent(k) is None for k in ("paths", "commands", "errors", "directives")
    )
