"""The README's promises, checked: its two commands, documented fields, help on every command and option."""

from __future__ import annotations

import re

import orjson
import pytest

from ctxtool.cli import app, run
from ctxtool.common.choices import BY_CHOICES
from tests.conftest import FIXTURES, REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


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
    table = README.split("Fields of the rows", 1)[1].split("\n\n", 2)[1]
    documented: set[str] = set()
    for line in table.splitlines():
        cell = line.split("|")[1] if line.startswith("|") else ""
        documented |= set(re.findall(r"`([a-z0-9_]+)`", cell))
    missing = set(doc["rows"][0]) - documented
    assert missing == set(), f"--by {by}: fields not described in the README: {sorted(missing)}"
    assert set(doc["read"]) <= set(
        re.findall(r"`([a-z0-9_]+)`", README.split("`read` describes the scan", 1)[1][:800])
    )


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
