"""Imports point down only: core code never imports typer or rich, and google-genai only lazily."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ctxtool"
UI_ONLY = {"typer", "rich", "click"}


def top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:  # module level only: lazy imports inside functions are allowed
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules_do_not_import_ui_libraries() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "cli" or rel.name == "render.py":
            continue
        bad = top_level_imports(path) & (UI_ONLY | {"google"})
        if bad:
            offenders.append(f"{rel}: {sorted(bad)}")
    assert offenders == []


def all_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_session_layer_does_not_import_upper_layers() -> None:
    upper = (
        "ctxtool.frames",
        "ctxtool.compress",
        "ctxtool.cli",
        "ctxtool.render.tables",
        "ctxtool.render.formats",
        "polars",
    )
    for path in (PACKAGE / "session").rglob("*.py"):
        bad = {name for name in all_imports(path) if name.startswith(upper)}
        assert bad == set(), path


def test_stats_does_not_load_google_genai() -> None:
    code = (
        "import sys; from ctxtool.cli import run; run(['stats', '--help']);"
        "import ctxtool.frames;"
        "print('google.genai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_compress_package_imports_nothing_above_it() -> None:
    """The strategies sit below ``compact``, ``compare``, ``diff``, ``frames`` and the CLI (lazy imports
    count too)."""
    upper = (
        "ctxtool.compact",
        "ctxtool.compare",
        "ctxtool.diff",
        "ctxtool.audit",
        "ctxtool.frames",
        "ctxtool.export",
        "ctxtool.frames.store",
        "ctxtool.frames.loading",
        "ctxtool.cli",
        "ctxtool.render.tables",
        "ctxtool.render.formats",
    )
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(bad)
        for path in (PACKAGE / "compress").rglob("*.py")
        if (bad := {name for name in all_imports(path) if name.startswith(upper)})
    }
    assert offenders == {}
