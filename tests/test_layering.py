"""The house's layers: imports point down only (docs/architecture.md, "How it is built").

Bottom up: ``common`` → ``measure`` → ``session`` → ``frames`` | ``compress`` → the features (``stats``,
``compact``, ``diff``, ``audit``, ``compare``, ``export``, ``report``) → ``render`` → ``cli`` → the entry
point and its launcher (``__main__``, ``launch``). A module imports (at module level or lazily inside a
function: both count) only modules of its own package or of a lower layer. Core code never imports typer or
rich, and google-genai only lazily. No two modules outside ``cli`` share a file name.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ctxtool"
UI_ONLY = {"typer", "rich", "click"}

# the rank of each top-level part of ctxtool; equal ranks may not import each other (but see SIDEWAYS)
LAYERS = {
    "common": 0,
    "measure": 1,
    "session": 2,
    "frames": 3,
    "compress": 3,
    "stats": 4,
    "compact": 4,
    "diff": 4,
    "audit": 4,
    "compare": 4,
    "export": 4,
    "store": 3,  # where a dataset lives (a folder or an object store), beside the frames
    "report": 4,
    "hooks": 4,
    "render": 5,
    "cli": 6,
    "__main__": 7,
    "launch": 7,  # the launcher beside the entry point: the replay decision and the head start
}
SIDEWAYS = {
    ("compare", "compact"),  # compare runs compactions and measures them the same way
    ("hooks", "export"),  # the archive hook adds a session to the dataset of export
    ("__main__", "launch"),  # the entry point starts a run through its launcher
}
# inside compress: the Summarizer protocol < the Gemini CLI port < summarizers < strategies
COMPRESS = {"summarizer": 0, "gemini_cli": 1, "summarize": 2, "strategies": 3}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, *, lazy: bool = True) -> set[str]:
    """The ctxtool modules (and names) ``path`` imports; ``lazy`` counts imports inside functions too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.walk(tree) if lazy else iter(tree.body)
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def part(module: str) -> str | None:
    """``ctxtool.frames.build`` -> ``frames``; None for the package's lazy face (``ctxtool``)."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[0] == "ctxtool" else None


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_part_has_a_layer() -> None:
    parts = {part(module_name(p)) for p in modules()} - {None}
    assert parts <= set(LAYERS), (
        f"give {sorted(parts - set(LAYERS))} a layer in LAYERS and docs/architecture.md"
    )


def test_imports_point_down() -> None:
    offenders = []
    for path in modules():
        me = part(module_name(path))
        if me is None:
            continue
        for name in imported(path):
            other = part(name)
            if other is None or other == me or other not in LAYERS or (me, other) in SIDEWAYS:
                continue
            if LAYERS[other] >= LAYERS[me]:
                offenders.append(f"{module_name(path)} imports {name}")
    assert offenders == []


def test_compress_inside_points_down() -> None:
    offenders = []
    for path in (PACKAGE / "compress").rglob("*.py"):
        me = module_name(path).split(".")
        if len(me) < 3:
            continue
        for name in imported(path):
            other = name.split(".")
            if other[:2] != ["ctxtool", "compress"] or len(other) < 3 or other[2] == me[2]:
                continue
            if other[2] in COMPRESS and COMPRESS[other[2]] >= COMPRESS[me[2]]:
                offenders.append(f"{module_name(path)} imports {name}")
    assert offenders == []


def test_strategies_never_import_their_registry() -> None:
    """The registry finds the agents; an agent imports only ``base`` (no circle)."""
    folder = PACKAGE / "compress" / "strategies"
    for path in folder.glob("*.py"):
        if path.name in ("registry.py", "__init__.py"):
            continue
        assert not any(name.endswith("strategies.registry") for name in imported(path)), path


def test_no_circle_between_modules() -> None:
    """No two modules import each other, directly or through others (module-level and lazy imports)."""
    by_name = {module_name(p): p for p in modules()}
    graph = {
        name: {m for m in imported(path) if m in by_name and m != name and by_name[m].name != "__init__.py"}
        for name, path in by_name.items()
    }
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        seen[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if seen.get(nxt) == 1:
                pytest.fail("circle: " + " -> ".join([*stack[stack.index(nxt) :], nxt]))
            if nxt not in seen:
                visit(nxt)
        stack.pop()
        seen[node] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name)


def test_module_names_are_unique() -> None:
    """No two modules outside ``cli/`` (one module per command, named as the command) share a file name: a
    name says which module is meant (``tally``, ``headstart``) without its package."""
    by_name: dict[str, list[str]] = {}
    for path in modules():
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "cli" or path.name == "__init__.py":
            continue
        by_name.setdefault(path.name, []).append(rel.as_posix())
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


def test_core_modules_do_not_import_ui_libraries() -> None:
    offenders = []
    for path in modules():
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "cli" or rel.as_posix() == "render/tables.py":
            continue
        bad = {n.split(".")[0] for n in imported(path, lazy=False)} & (UI_ONLY | {"google"})
        if bad:
            offenders.append(f"{rel}: {sorted(bad)}")
    assert offenders == []


def test_session_layer_does_not_import_polars() -> None:
    for path in (PACKAGE / "session").rglob("*.py"):
        assert not any(name.split(".")[0] == "polars" for name in imported(path)), path


def test_stats_does_not_load_google_genai() -> None:
    code = (
        "import sys; from ctxtool.cli import run; run(['stats', '--help']);"
        "import ctxtool.frames.build;"
        "print('google.genai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_replay_runs_without_polars() -> None:
    """The frames package hands its names on lazily: a warm replay imports no polars."""
    code = "import sys; import ctxtool.launch, ctxtool.frames.replays; print('polars' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_no_function_over_80_lines() -> None:
    """Commands resolve options, call one library function and render; long library functions are named
    steps. A function (its signature included) stays within 80 lines."""
    long = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 80:
                    long.append(f"{module_name(path)}.{node.name}: {lines} lines")
    assert long == []
