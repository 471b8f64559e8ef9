"""The README's promises, checked: its two commands, documented fields, help on every command and option.

The README is for users (at most ``README_MAX_LINES`` lines); the reference lives in docs/*.md. A fact the
tests hold the documentation to is looked up in whichever of those files holds it (``_doc_holding``)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from ctxtool.cli import app, run
from ctxtool.common.choices import BY_CHOICES
from tests.conftest import FIXTURES, REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS_DIR = REPO / "docs"
# README.md and every page of docs/, by their path in the repository.
DOCS = {"README.md": README} | {
    f"docs/{page.name}": page.read_text(encoding="utf-8") for page in sorted(DOCS_DIR.glob("*.md"))
}
README_MAX_LINES = 450


def _doc_holding(marker: str) -> str:
    """The one file of README.md and docs/*.md that holds ``marker``: a fact lives in one place."""
    holders = [path for path, text in DOCS.items() if marker in text]
    assert len(holders) == 1, f"{marker!r} should be in one of README.md and docs/*.md, is in {holders}"
    return DOCS[holders[0]]


def test_readme_opens_with_the_two_fresh_machine_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["make demo", "make check"]


def test_ci_runs_the_readme_test_command() -> None:
    """``make check``, then the fast tier on the pure-Python functions (``make test-pure``), then the wheel as
    a user installs it (``make wheel-check``), as the README says."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert [line for line in ci.splitlines() if line and not line.startswith(("#", "set ", "cd "))] == [
        "make check",
        "make test-pure",
        "make wheel-check",
    ]
    assert "`make test-pure`" in README
    assert "`make wheel-check`" in README


def test_make_demo_runs_stats_on_the_bundled_fixtures(capsys: pytest.CaptureFixture[str]) -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    demo = re.search(r"^demo: (.*)\n\t(.*)$", makefile, re.M)
    assert demo is not None
    assert demo.groups() == ("$(DEMO_STAMP)", "$(DEMO_VENV)/bin/ctxtool stats fixtures/")
    # The demo's venv gets the runtime only: the dev tools are for `make check`.
    install = re.search(r"^\$\(DEMO_STAMP\):.*\n((?:\t.*\n)+)", makefile, re.M)
    assert install is not None
    assert "sync --quiet --locked --no-editable" in install.group(1)  # the locked runtime, and the wheel
    assert "--extra" not in install.group(1)
    assert run(["stats", str(FIXTURES), "--width", "120"]) == 0
    out = capsys.readouterr().out
    assert "total" in out
    assert "Read 16 files" in out


@pytest.mark.parametrize("by", BY_CHOICES)
def test_every_output_field_is_documented(capsysbinary: pytest.CaptureFixture[bytes], by: str) -> None:
    assert run(["stats", str(FIXTURES / "gemini" / "tmp"), "--by", by, "-f", "json"]) == 0
    doc = orjson.loads(capsysbinary.readouterr().out)
    marker = "Fields of the rows (a column appears"
    table = _doc_holding(marker).split(marker, 1)[1].split("\n\n", 2)[1]
    documented: set[str] = set()
    for line in table.splitlines():
        cell = line.split("|")[1] if line.startswith("|") else ""
        documented |= set(re.findall(r"`([a-z0-9_]+)`", cell))
    missing = set(doc["rows"][0]) - documented
    assert missing == set(), f"--by {by}: fields not described in the docs: {sorted(missing)}"
    read = "`read` describes the scan"
    assert set(doc["read"]) <= set(re.findall(r"`([a-z0-9_]+)`", _doc_holding(read).split(read, 1)[1][:800]))


def _commands() -> list[object]:
    import typer.main

    from ctxtool.cli import register

    register()
    group = typer.main.get_command(app)
    return [group, *group.commands.values()]  # type: ignore[attr-defined]


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("stats", "compact", "compare", "diff", "audit", "export", "cache"):
        assert name in out


def test_every_command_and_option_has_help() -> None:
    for command in _commands():
        name = command.name  # type: ignore[attr-defined]
        assert (command.help or "").strip(), f"{name} has no help"  # type: ignore[attr-defined]
        for param in command.params:  # type: ignore[attr-defined]
            if param.param_type_name == "option":
                assert (param.help or "").strip(), f"{name} {param.opts} has no help"
            else:
                assert param.help or command.help, f"{name} argument {param.name} is not described"


def test_readme_is_for_users_and_short() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md: {lines} lines, at most {README_MAX_LINES}: move reference to docs/"
    )


@pytest.mark.parametrize("path", sorted(DOCS))
def test_no_issue_numbers(path: str) -> None:
    """The documentation says what is true, not which tracker entry asked for it."""
    found = [m.group(0) for m in re.finditer(r"\bissue\s+#?\d+", DOCS[path], re.I)]
    assert found == [], f"{path} names {found}"


def test_every_docs_page_is_listed_in_the_index_and_the_readme() -> None:
    pages = {path.removeprefix("docs/") for path in DOCS if path.startswith("docs/")} - {"README.md"}
    assert pages, "docs/ holds no page"
    assert "docs/README.md" in DOCS, "docs/ has no index (docs/README.md)"
    index = DOCS["docs/README.md"]
    assert {page for page in pages if f"]({page})" in index} == pages
    assert {page for page in pages if f"](docs/{page})" in README} == pages


def _without_code(text: str) -> str:
    """Markdown outside fenced code blocks (a ``#`` comment in a shell block is no heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", _without_code(text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        repeats = 0
        while (f"{slug}-{repeats}" if repeats else slug) in anchors:  # a second "Reports" is #reports-1
            repeats += 1
        anchors.add(f"{slug}-{repeats}" if repeats else slug)
    return anchors


def _resolves(page: Path, target: str) -> bool:
    """A relative link of ``page`` names a file that exists and, after ``#``, one of its headings."""
    file, _, anchor = target.partition("#")
    resolved = (page.parent / file).resolve() if file else page
    if not resolved.exists():
        return False
    return not anchor or resolved.suffix != ".md" or anchor in _anchors(resolved.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", sorted(DOCS))
def test_every_link_between_the_pages_resolves(path: str) -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", _without_code(DOCS[path]))
    relative = [target for target in links if not re.match(r"[a-z]+:", target)]  # https://… is not checked
    assert relative, f"{path} links to no other page"
    assert [target for target in relative if not _resolves(REPO / path, target)] == [], (
        f"{path}: broken links"
    )


def test_every_make_target_is_documented() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    phony = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", makefile, re.M)
    assert phony is not None
    targets = phony.group(1).replace("\\\n", " ").split()
    development = DOCS["docs/development.md"]
    assert [t for t in targets if f"`make {t}`" not in development] == []
