"""ctxtool.compress.folder_structure against hand-built trees, Node's localeCompare and the real Gemini CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.compress.folder_structure import (
    directory_context,
    folder_structure,
    locale_key,
)
from tests.gemini_cli_harness import CHAT_MODEL, FakeGeminiAPI, make_workspace, run_gemini, text, usage

HEADER = "Showing up to 200 items (files + folders)."
TRUNCATED = (
    " Folders or files indicated with ... contain more items not shown, were ignored, or the display limit"
    " (200 items) was reached."
)


def tree(root: Path, spec: dict[str, str | None]) -> Path:
    """Make files (str: content) and folders (None) under root; parents are created."""
    for rel, content in spec.items():
        path = root / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    return root


def body(root: Path, text_: str) -> list[str]:
    """The tree lines after the header and the root line."""
    head, found, rest = text_.partition(f"\n\n{root}/\n")
    assert found and head.startswith("Showing up to "), text_
    return rest.split("\n") if rest else []


# --- unit tests --------------------------------------------------------------------------------------------


def test_empty_folder(tmp_path: Path) -> None:
    assert folder_structure(str(tmp_path)) == f"{HEADER}\n\n{tmp_path}/\n"


def test_files_only_sorted_as_locale_compare(tmp_path: Path) -> None:
    tree(tmp_path, {n: "" for n in ["b.txt", "A.txt", "a.txt", "_u", "-d", ".h", "10", "9", "é"]})
    assert body(tmp_path, folder_structure(str(tmp_path))) == [
        "├───_u",
        "├───-d",
        "├───.h",
        "├───10",
        "├───9",
        "├───a.txt",
        "├───A.txt",
        "├───b.txt",
        "└───é",
    ]


def test_nested_folders_files_first_then_folders(tmp_path: Path) -> None:
    tree(tmp_path, {"z.txt": "", "a/x.py": "", "a/b/c/deep.txt": "", "a/b/y.py": "", "e": None})
    assert body(tmp_path, folder_structure(str(tmp_path))) == [
        "├───z.txt",
        "├───a/",
        "│   ├───x.py",
        "│   └───b/",
        "│       ├───y.py",
        "│       └───c/",
        "│           └───deep.txt",
        "└───e/",
    ]


def test_default_ignored_folders_are_shown_with_an_ellipsis(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {"node_modules/x/i.js": "", ".git/HEAD": "", "dist/a.js": "", "pkg/__pycache__/m.pyc": "", "f": ""},
    )
    out = folder_structure(str(tmp_path))
    assert out.startswith(HEADER + TRUNCATED)
    assert body(tmp_path, out) == [
        "├───f",
        "├───.git/...",
        "├───dist/...",
        "├───node_modules/...",
        "└───pkg/",
        "    └───__pycache__/...",
    ]


def test_more_than_max_items_is_cut_breadth_first(tmp_path: Path) -> None:
    tree(tmp_path, {f"f{i:03}": "" for i in range(210)})
    tree(tmp_path, {"sub/inner": ""})
    lines = body(tmp_path, folder_structure(str(tmp_path)))
    assert lines[:2] == ["├───f000", "├───f001"]
    assert lines[199] == "├───f199"
    assert lines[200:] == ["├───...", "└───..."]  # more files, then more folders
    small = folder_structure(str(tmp_path), max_items=3)
    assert small.startswith("Showing up to 3 items (files + folders). Folders or files indicated")
    assert "display limit (3 items)" in small


def test_limit_reached_inside_a_subfolder(tmp_path: Path) -> None:
    tree(tmp_path, {"a.txt": "", "d/1": "", "d/2": "", "d/3": "", "e/4": ""})
    assert body(tmp_path, folder_structure(str(tmp_path), max_items=4)) == [
        "├───a.txt",
        "├───d/",
        "│   └───1",  # upstream marks the last file as last even when "..." follows it
        "│   └───...",
        "└───e/",
    ]


def test_gitignore_root_nested_negation_anchored(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    tree(
        tmp_path,
        {
            ".gitignore": "*.log\n!keep.log\n/top.txt\nbuild/\n# comment\n\n*.TMP\n",
            "top.txt": "",
            "keep.log": "",
            "x.log": "",
            "y.tmp": "",
            "sub/top.txt": "",
            "sub/x.log": "",
            "sub/.gitignore": "secret\n/only-here.txt\n!x.log\n",
            "sub/secret": "",
            "sub/only-here.txt": "",
            "sub/deeper/only-here.txt": "",
            "sub/deeper/secret/s.txt": "",
            "build/out.o": "",
            "other/secret": "",
        },
    )
    assert body(tmp_path, folder_structure(str(tmp_path))) == [
        "├───.gitignore",
        "├───keep.log",
        "├───.git/...",
        "├───build/...",
        "├───other/",
        "│   └───secret",
        "└───sub/",
        "    ├───.gitignore",
        "    ├───top.txt",
        "    ├───x.log",
        "    └───deeper/",
        "        ├───only-here.txt",
        "        └───secret/...",
    ]


def test_star_then_negated_folder_keeps_the_files_ignored(tmp_path: Path) -> None:
    # npm ignore (and git) test each name: `*` ignores src/a.py even though `!src/` re-includes src/.
    (tmp_path / ".git").mkdir()
    tree(tmp_path, {".gitignore": "*\n!src/\n!.gitignore\n", "src/a.py": "", "b.py": ""})
    assert body(tmp_path, folder_structure(str(tmp_path))) == [
        "├───.gitignore",
        "├───.git/...",
        "└───src/",
    ]


def test_gitignore_is_not_read_outside_a_git_repository(tmp_path: Path) -> None:
    tree(tmp_path, {".gitignore": "*.log\n", "x.log": "", ".geminiignore": "*.md\n", "r.md": ""})
    assert body(tmp_path, folder_structure(str(tmp_path))) == [
        "├───.geminiignore",
        "├───.gitignore",
        "└───x.log",
    ]


def test_geminiignore_applies_last_in_a_git_repository(tmp_path: Path) -> None:
    (tmp_path / ".git" / "info").mkdir(parents=True)
    tree(
        tmp_path,
        {
            ".git/info/exclude": "excluded.txt\n",
            ".gitignore": "*.log\n",
            ".geminiignore": "  !x.log\ndocs/\n/notes.md\n",
            "x.log": "",
            "y.log": "",
            "excluded.txt": "",
            "docs/a.md": "",
            "notes.md": "",
            "sub/notes.md": "",
        },
    )
    assert body(tmp_path, folder_structure(str(tmp_path))) == [
        "├───.geminiignore",
        "├───.gitignore",
        "├───x.log",
        "├───.git/...",
        "├───docs/...",
        "└───sub/",
        "    └───notes.md",
    ]


def test_symlinks_are_not_listed(tmp_path: Path) -> None:
    tree(tmp_path, {"real.txt": "", "d/f": ""})
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    (tmp_path / "dlink").symlink_to(tmp_path / "d")
    assert body(tmp_path, folder_structure(str(tmp_path))) == ["├───real.txt", "└───d/", "    └───f"]


def test_missing_folder_and_a_file_instead_of_a_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert folder_structure(str(missing)) == (
        f'Error: Could not read directory "{missing}". Check path and permissions.'
    )
    (tmp_path / "file").write_text("")
    assert folder_structure(str(tmp_path / "file")) == (
        f'Error processing directory "{tmp_path / "file"}": ENOTDIR: not a directory,'
        f" scandir '{tmp_path / 'file'}'"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads unreadable folders")
def test_unreadable_folder_is_listed_empty(tmp_path: Path) -> None:
    tree(tmp_path, {"locked/inside": "", "open/f": ""})
    (tmp_path / "locked").chmod(0)
    try:
        assert body(tmp_path, folder_structure(str(tmp_path))) == ["├───locked/", "└───open/", "    └───f"]
    finally:
        (tmp_path / "locked").chmod(0o755)


def test_directory_context_lists_every_folder(tmp_path: Path) -> None:
    a, b = tree(tmp_path / "a", {"x": ""}), tree(tmp_path / "b", {"y": ""})
    assert directory_context([str(a), str(b)]) == (
        f"- **Workspace Directories:**\n  - {a}\n  - {b}\n- **Directory Structure:**\n\n"
        f"{HEADER}\n\n{a}/\n└───x\n{HEADER}\n\n{b}/\n└───y"
    )


# --- the order against Node's localeCompare ----------------------------------------------------------------


def _node() -> str | None:
    node = shutil.which("node")
    if node is None and os.environ.get("CI") == "true":
        pytest.fail("node is required in CI to check the localeCompare order")
    return node


def node_sorted(names: list[str]) -> list[str]:
    node = _node()
    if node is None:
        pytest.skip("node is not installed")
    script = (
        "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{"
        "const n=JSON.parse(s);n.sort((a,b)=>a.localeCompare(b));process.stdout.write(JSON.stringify(n))})"
    )
    # Node's readdir gives names in strcmp order before the stable sort: feed them the same way.
    ordered = sorted(names, key=lambda n: n.encode("utf-8"))
    done = subprocess.run(
        [node, "-e", script], input=json.dumps(ordered), capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    assert isinstance(result, list)
    return result


NAMES = [
    *"!\"#$%&'()*+,-./0123456789:;<=>?@ABCXYZ[\\]^_`abcxyz{|}~",
    "a.txt", "A.txt", "a-b", "a_b", "a b", "ab", "aB", "Ab", "AB", "a.b.c", "a..b", ".a", "..a", "_a",
    "-a", "10", "9", "1.10", "1.9", "file10.txt", "file9.txt", "File1.txt", "résumé", "resume", "Résumé",
    "über", "uber", "Über", "zebra", "日本", "日本語", "中文", "é", "e", "E", "ß", "ss", "æ", "ae",
    "Ω", "ω", "a\u0301", "á", "naïve", "naive", "émoji😀", "😀", "tab\tname", "~backup", "#x", "@types",
]  # fmt: skip


def test_locale_key_matches_node_on_file_like_names() -> None:
    expected = node_sorted(NAMES)
    ours = sorted(sorted(NAMES, key=lambda n: n.encode("utf-8")), key=locale_key)
    assert ours == expected


_NAME_CHARS = st.sampled_from(
    list("aAbBzZ019._-~ !#$%&()+,;=@[]^`{}'") + ["é", "E", "ü", "ß", "日", "本", "Ω", "ø", "\u0301"]
)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.text(_NAME_CHARS, min_size=1, max_size=6), min_size=2, max_size=60, unique=True))
def test_locale_key_matches_node_property(names: list[str]) -> None:
    expected = node_sorted(names)
    ours = sorted(sorted(names, key=lambda n: n.encode("utf-8")), key=locale_key)
    assert ours == expected


# --- the proof: the real Gemini CLI's environment turn ---------------------------------------------------


def _tricky_project(project: Path, *, many: bool) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True, capture_output=True)
    spec: dict[str, str | None] = {
        ".gitignore": "*.log\n!important.log\n/anchored.txt\nbuild/\ncoverage\n*.TMP\nsecret*\n!secret-ok\n",
        ".geminiignore": "private/\n*.bak\n!keep.bak\n",
        "README.md": "",
        "readme.txt": "",
        "Makefile": "",
        "_underscore.py": "",
        "-dash": "",
        ".env": "",
        "10-ten": "",
        "9-nine": "",
        "a.b.c": "",
        "café.md": "",
        "Über.txt": "",
        "日本.txt": "",
        "x.log": "",
        "important.log": "",
        "anchored.txt": "",
        "upper.tmp": "",
        "secret-key": "",
        "secret-ok": "",
        "old.bak": "",
        "keep.bak": "",
        "build/out.o": "",
        "coverage/index.html": "",
        "private/p.txt": "",
        "node_modules/pkg/index.js": "",
        "dist/bundle.js": "",
        "src/__pycache__/m.pyc": "",
        "src/Main.py": "",
        "src/main_test.py": "",
        "src/anchored.txt": "",
        "src/.gitignore": "generated/\n/local.txt\n!x.log\n*.gen\n",
        "src/local.txt": "",
        "src/x.log": "",
        "src/a.gen": "",
        "src/generated/g.py": "",
        "src/deep/local.txt": "",
        "src/deep/b.gen": "",
        "src/deep/er/est/leaf.txt": "",
        ".pytest_cache/.gitignore": "*\n",
        ".pytest_cache/v/cache": "",
        "empty": None,
        "Docs/Guide.md": "",
        "docs2/a": "",
    }
    if many:
        for i in range(230):
            spec[f"many/item-{i}.txt"] = ""
        for i in range(5):
            spec[f"many/z{i}/f"] = ""
    tree(project, spec)


@pytest.mark.parametrize("many", [False, True], ids=["tricky", "over-200"])
def test_environment_context_matches_gemini_cli(gemini_cli: Path, tmp_path: Path, many: bool) -> None:
    workspace = make_workspace(tmp_path)
    _tricky_project(workspace.project, many=many)
    api = FakeGeminiAPI(chat=[text("ok", usage(10, 2))])
    with api.serving() as url:
        run = run_gemini(gemini_cli, workspace, url, ["-m", CHAT_MODEL, "-p", "hello"])
    assert run.returncode == 0, run.stderr[-2000:]
    sent = api.chat_requests()[0].body["contents"][0]["parts"][0]["text"]
    assert sent.startswith("<session_context>")
    marker = "- **Workspace Directories:**"
    tail = "\n\n\n</session_context>"  # `${directoryContext}\n\n${environmentMemory}\n</session_context>`
    assert sent.endswith(tail), sent[-300:]
    theirs = marker + sent.split(marker, 1)[1].removesuffix(tail)
    project = theirs.split("\n")[1].removeprefix("  - ")
    assert os.path.realpath(project) == os.path.realpath(workspace.project)
    assert theirs == directory_context([project])
    if many:
        assert "display limit (200 items) was reached." in theirs
