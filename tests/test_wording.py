"""Counts in words: ``ctxtool.common.wording.plural``, and no message of ctxtool hedging with ``(s)``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ctxtool.common.wording import plural

PACKAGE = Path(__file__).resolve().parents[1] / "ctxtool"


def test_plural() -> None:
    assert plural(0, "file") == "0 files"
    assert plural(1, "file") == "1 file"
    assert plural(2, "request") == "2 requests"
    assert plural(1_234, "token") == "1,234 tokens"
    assert plural(1, "index entry", "index entries") == "1 index entry"
    assert plural(3, "index entry", "index entries") == "3 index entries"


def test_no_message_counts_with_a_hedged_plural() -> None:
    """Every count goes through ``plural`` (or words of its own): no string literal of ctxtool says
    ``file(s)`` or ``request(s)``."""
    hedged = re.compile(r"[A-Za-z]\(s\)")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and hedged.search(node.value)
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    assert found == []
