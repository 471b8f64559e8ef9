"""ctxtool.compress.gemini_cli.folder_structure against hand-built trees, Node's localeCompare, npm ignore and
the real Gemini CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from ctxtool.compress.gemini_cli.folder_structure import (
    _InvalidIgnorePath,
    _Rules,
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
    assert found, text_
    assert head.startswith("Showing up to "), text_
    return rest.split("\n") if rest else []


# --- unit tests --------------------------------------------------------------------------------------------


def test_empty_folder(tmp_path: Path) -> None:
    assert folder_structure(str(tmp_path)) == f"{HEADER}\n\n{tmp_path}/\n"


def test_files_only_sorted_as_locale_compare(tmp_path: Path) -> None:
    tree(tmp_path, dict.fromkeys(["b.txt", "A.txt", "a.txt", "_u", "-d", ".h", "10", "9", "é"], ""))
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


def test_a_name_of_dots_breaks_npm_ignore_as_in_gemini_cli(tmp_path: Path) -> None:
    # npm ignore refuses "..." as not `path.relative()`d: outside git Gemini CLI reports the error instead of
    # a tree (checked against Gemini CLI 0.61.0); inside git its parser catches it and keeps the name.
    tree(tmp_path, {"...": "", "a": "", ".geminiignore": "a\n"})
    assert folder_structure(str(tmp_path)) == (
        f'Error processing directory "{tmp_path}": path should be a `path.relative()`d string, but got "..."'
    )
    (tmp_path / ".git").mkdir()
    assert body(tmp_path, folder_structure(str(tmp_path))) == ["├───...", "├───.geminiignore", "└───.git/..."]


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


def test_unreadable_folder_is_listed_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # root reads any folder: refuse the scan the way the kernel refuses it to others (EACCES)
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if os.path.basename(path) == "locked":
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    tree(tmp_path, {"locked/inside": "", "open/f": ""})
    assert body(tmp_path, folder_structure(str(tmp_path))) == ["├───locked/", "└───open/", "    └───f"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads unreadable folders")
def test_unreadable_folder_by_permissions(tmp_path: Path) -> None:
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
    [*"aAbBzZ019._-~ !#$%&()+,;=@[]^`{}'", "é", "E", "ü", "ß", "日", "本", "Ω", "ø", "\u0301"]
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
        ".geminiignore": "\ufeffprivate/\n*.bak \n!keep.bak\n",
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
        "src/.gitignore": "\ufeffgenerated/\r\n/local.txt\r\n!x.log\n  *.gen\n",
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


# --- ignore rules against the npm `ignore` package inside the pinned Gemini CLI --------------------------


def _npm_ignore_module(tmp_path: Path) -> Path:
    """The npm ``ignore`` package as Gemini CLI bundles it, cut out of the bundle into a CommonJS file."""
    from tests.gemini_cli_harness import installed_package_dir

    header = '"packages/core/node_modules/ignore/index.js"('
    for chunk in sorted((installed_package_dir() / "bundle").glob("*.js")):
        source = chunk.read_text()
        start = source.find(header)
        if start >= 0:
            break
    else:
        pytest.fail("the ignore package is not in Gemini CLI's bundle")
    params = source[start + len(header) : source.index(")", start)]
    exports_name, module_name = (p.strip() for p in params.split(","))
    body_start = source.index("{", start) + 1
    body_end = source.index("\n  }\n});", body_start)
    module = tmp_path / "ignore.js"
    module.write_text(
        f"const {module_name} = {{exports: {{}}}}; const {exports_name} = {module_name}.exports;\n"
        f"{source[body_start:body_end]}\nmodule.exports = {module_name}.exports;\n"
    )
    return module


def npm_ignores(module: Path, cases: list[tuple[list[str], list[str]]]) -> list[list[bool | str]]:
    node = _node()
    if node is None:
        pytest.skip("node is not installed")
    script = (
        f"const ignore = require({json.dumps(str(module))});"
        "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{"
        "const out=JSON.parse(s).map(([pats,paths])=>{const ig=ignore().add(pats);"
        "return paths.map(p=>{try{return ig.ignores(p)}catch(e){return 'error'}})});"
        "process.stdout.write(JSON.stringify(out))})"
    )
    done = subprocess.run(
        [node, "-e", script], input=json.dumps(cases), capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    assert isinstance(result, list)
    return result


def our_ignores(cases: list[tuple[list[str], list[str]]]) -> list[list[bool | str]]:
    out: list[list[bool | str]] = []
    for patterns, paths in cases:
        rules = _Rules().add(patterns)
        row: list[bool | str] = []
        for path in paths:
            try:
                row.append(rules.ignores(path))
            except _InvalidIgnorePath:
                row.append("error")
        out.append(row)
    return out


PATHS = [
    "a",
    "a/",
    "b",
    "a/b",
    "a/b/",
    "a/b/c",
    "x/a",
    "x/a/",
    "x/a/b",
    "A",
    "a.log",
    "x/a.log",
    "...",
    ".../a",
]
IGNORE_CASES: list[tuple[list[str], list[str]]] = [
    (["a"], PATHS),
    (["/a"], PATHS),
    (["a/"], PATHS),
    (["/a/"], PATHS),
    (["a/b"], PATHS),
    (["a/*"], PATHS),
    (["a/**"], PATHS),
    (["**/b"], PATHS),
    (["a/**/c"], PATHS),
    (["**/"], PATHS),
    (["*"], PATHS),
    (["*", "!a/"], PATHS),
    (["*", "!a", "!*/"], PATHS),
    (["a/", "!a/b"], PATHS),
    (["a/*", "!a/b/"], PATHS),
    (["*.log", "!x/a.log"], PATHS),
    (["*.LOG"], PATHS),
    (["?"], PATHS),
    (["[ab]"], PATHS),
    (["a  "], PATHS),
    (["\\!a", "\\#b"], ["!a", "#b", "a", "b"]),
    (["/x/**/a"], PATHS),
    (["/x/**/a/"], PATHS),
    (["/a/b/**/*"], PATHS),
    (["/**", "!a"], PATHS),
    (["a/ ", "b "], PATHS),
]


@pytest.fixture(scope="module")
def npm_ignore(gemini_cli: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _npm_ignore_module(tmp_path_factory.mktemp("npm-ignore"))


def test_ignore_rules_match_npm_ignore(npm_ignore: Path) -> None:
    assert our_ignores(IGNORE_CASES) == npm_ignores(npm_ignore, IGNORE_CASES)


# Pattern pieces; `[!a]`, `\*` and trailing spaces are left out: npm ignore reads them unlike
# git and pathspec (ctxtool.compress.gemini_cli.folder_structure._Rules lists them).
_PATTERN = st.builds(
    lambda neg, anchor, body: neg + anchor + body,
    st.sampled_from(["", "!"]),
    st.sampled_from(["", "/"]),
    st.lists(
        st.sampled_from(["a", "b", "A", "*", "**", "/", "?", ".", "[ab]", "x", ".log", " "]),
        min_size=1,
        max_size=5,
    ).map("".join),
).filter(lambda p: p.strip(" !/") != "" and not p.endswith(" "))
_PATH = st.builds(
    lambda segments, slash: "/".join(segments) + slash,
    st.lists(
        st.sampled_from(["a", "b", "A", "x", "ab", "a.log", ".a", "ba", "a b", "?"]), min_size=1, max_size=4
    ),
    st.sampled_from(["", "/"]),
)


# No shrinking: each step runs node, and the differing (patterns, path) pairs are reported as they are.
@settings(max_examples=15, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(
    st.lists(
        st.tuples(st.lists(_PATTERN, min_size=1, max_size=3), st.lists(_PATH, min_size=1, max_size=10)),
        min_size=20,
        max_size=40,
    )
)
def test_ignore_rules_match_npm_ignore_property(
    npm_ignore: Path, cases: list[tuple[list[str], list[str]]]
) -> None:
    theirs = npm_ignores(npm_ignore, cases)
    ours = our_ignores(cases)
    differ = [
        (patterns, path, mine, npm)
        for (patterns, paths), my_row, npm_row in zip(cases, ours, theirs, strict=True)
        for path, mine, npm in zip(paths, my_row, npm_row, strict=True)
        if mine != npm
    ]
    assert differ == [], differ[:10]
