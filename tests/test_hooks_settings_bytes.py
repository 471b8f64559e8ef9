"""``hooks install`` / ``hooks uninstall`` and the bytes of settings.json: a symlink stays a link, CRLF and
a BOM stay, an empty ``hooks`` object stays, an install that changes nothing writes nothing, a setting Gemini
CLI saves meanwhile is kept, and uninstall gives back the exact bytes it found (an absent file comes back
absent)."""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxtool.cli import run
from ctxtool.common.errors import CtxtoolError
from ctxtool.hooks import settings
from ctxtool.session import write

HOOKS = settings.hooks_for(["--max-session-cost", "5"], "/tmp/history", ["ctxtool"])
OTHER_HOOKS = settings.hooks_for(["--max-session-cost", "9"], None, ["ctxtool"])
OLD_NS = 1_000_000_000 * 10**9  # an mtime in 2001: any write after it shows

THEMED = b'{\n  "theme": "dark"\n}\n'
EMPTY_HOOKS = b'{\n  "hooks": {},\n  "theme": "dark"\n}\n'
ORIGINALS = {
    "absent": None,
    "empty": b"",
    "blank": b"\n",
    "themed": THEMED,
    "crlf": THEMED.replace(b"\n", b"\r\n"),
    "bom": codecs.BOM_UTF8 + THEMED,
    "bom-crlf": codecs.BOM_UTF8 + THEMED.replace(b"\n", b"\r\n"),
    "empty-hooks": EMPTY_HOOKS,
    "empty-hooks-inline": b'{"theme": "dark", "hooks": {}}',
    "empty-event": b'{\n  "hooks": {\n    "BeforeModel": []\n  }\n}\n',
    "comments": b'// mine\n{\n    "theme": "dark" /* kept */\n}\n',
}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / ".gemini" / "settings.json"


def _put(path: Path, data: bytes | None) -> None:
    if data is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _json(data: bytes) -> dict[str, object]:
    text = data.decode("utf-8-sig")
    lines = [line.split("/*")[0] for line in text.splitlines() if not line.lstrip().startswith("//")]
    parsed = json.loads("\n".join(lines) or "{}")
    assert isinstance(parsed, dict)
    return parsed


def _saves_theme(path: Path, times: int) -> Callable[[], None]:
    """What Gemini CLI does when a setting changes while ctxtool edits: it writes the file in place."""
    count = [0]

    def save() -> None:
        if count[0] < times:
            count[0] += 1
            theme = f'"theme": "{count[0]}dark"'.encode()
            path.write_bytes(re.sub(rb'"theme": "\d*dark"', theme, path.read_bytes()))

    return save


def _race(monkeypatch: pytest.MonkeyPatch, path: Path, save: Callable[[], None]) -> None:
    """Run ``save`` after ctxtool made its edit and before it renames it over settings.json: every write of
    ctxtool makes its temporary file with ``temp_beside`` first."""
    real = write.temp_beside

    def racing(directory: Path, name: str, *, like: Path | None = None) -> tuple[int, Path]:
        made = real(directory, name, like=like)
        if name == path.name:
            save()
        return made

    monkeypatch.setattr(write, "temp_beside", racing)


# ------------------------------------------------------------------------------------------ 1. symlinks


def test_a_symlinked_settings_file_stays_a_link(path: Path, tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "gemini-settings.json"
    target.write_bytes(THEMED)
    path.parent.mkdir()
    path.symlink_to(target)

    assert settings.install(path, HOOKS).changed
    assert path.is_symlink()
    assert path.resolve() == target
    assert [h["name"] for h in settings.installed(target.read_text())] == [
        "ctxtool-guard", "ctxtool-archive", "ctxtool-archive"]  # fmt: skip
    assert sorted(p.name for p in dotfiles.iterdir()) == [target.name]  # no temp file, no backup there
    assert (path.parent / "settings.json.ctxtool-backup").read_bytes() == THEMED

    assert settings.uninstall(path).changed
    assert path.is_symlink()
    assert target.read_bytes() == THEMED


def test_a_dangling_symlink_gets_its_target_and_loses_it_again(path: Path, tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "settings.json"
    path.parent.mkdir()
    path.symlink_to(target)
    settings.install(path, HOOKS)
    assert path.is_symlink()
    assert settings.status(path)
    settings.uninstall(path)
    assert path.is_symlink()
    assert not target.exists()


# ------------------------------------------------------------------------------------- 2. CRLF and BOM


@pytest.mark.parametrize("name", ["crlf", "bom", "bom-crlf"])
def test_line_endings_and_a_bom_are_kept(path: Path, name: str) -> None:
    original = ORIGINALS[name]
    assert original is not None
    _put(path, original)
    settings.install(path, HOOKS)
    installed = path.read_bytes()
    assert installed.startswith(codecs.BOM_UTF8) == original.startswith(codecs.BOM_UTF8)
    assert installed.count(codecs.BOM_UTF8) == original.count(codecs.BOM_UTF8)
    if b"\r\n" in original:
        assert installed.count(b"\n") == installed.count(b"\r\n")  # no bare LF
    assert _json(installed)["theme"] == "dark"
    assert (path.parent / "settings.json.ctxtool-backup").read_bytes() == original

    settings.uninstall(path)
    assert path.read_bytes() == original


def test_crlf_is_kept_when_the_user_changed_a_setting_in_between(path: Path) -> None:
    original = codecs.BOM_UTF8 + THEMED.replace(b"\n", b"\r\n")
    _put(path, original)
    settings.install(path, HOOKS)
    path.write_bytes(path.read_bytes().replace(b'"dark"', b'"light"'))
    settings.uninstall(path)
    assert path.read_bytes() == original.replace(b'"dark"', b'"light"')


# ------------------------------------------------------------------------ 3. empty hooks, no-op installs


@pytest.mark.parametrize("name", ["empty-hooks", "empty-hooks-inline", "empty-event"])
def test_an_empty_hooks_object_that_was_there_stays(path: Path, name: str) -> None:
    original = ORIGINALS[name]
    _put(path, original)
    settings.install(path, HOOKS)
    settings.uninstall(path)
    assert path.read_bytes() == original


def test_an_empty_hooks_object_stays_when_the_user_changed_a_setting_in_between(path: Path) -> None:
    _put(path, EMPTY_HOOKS)
    settings.install(path, HOOKS)
    path.write_bytes(path.read_bytes().replace(b'"dark"', b'"light"'))
    settings.uninstall(path)
    assert path.read_bytes() == EMPTY_HOOKS.replace(b'"dark"', b'"light"')


@pytest.mark.parametrize("name", list(ORIGINALS))
def test_a_second_identical_install_writes_nothing(path: Path, name: str) -> None:
    _put(path, ORIGINALS[name])
    assert settings.install(path, HOOKS).changed
    backup = path.parent / "settings.json.ctxtool-backup"
    for p in (path, backup):
        if p.exists():
            os.utime(p, ns=(OLD_NS, OLD_NS))
    installed = path.read_bytes()
    change = settings.install(path, HOOKS)
    assert not change.changed
    assert path.read_bytes() == installed
    assert path.stat().st_mtime_ns == OLD_NS
    assert not backup.exists() or backup.stat().st_mtime_ns == OLD_NS
    assert {p.name for p in path.parent.iterdir()} <= {"settings.json", "settings.json.ctxtool-backup"}


def test_a_second_identical_install_at_the_cli_says_unchanged(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    _put(path, EMPTY_HOOKS)
    args = ["hooks", "install", "--max-session-cost", "5", "--archive", str(tmp_path / "h")]
    assert run(args) == 0
    os.utime(path, ns=(OLD_NS, OLD_NS))
    capsys.readouterr()
    assert run(args) == 0
    assert "already installed, unchanged" in capsys.readouterr().err
    assert path.stat().st_mtime_ns == OLD_NS


# ------------------------------------------------------------------------------- 4. compare-and-swap


@pytest.mark.parametrize("name", ["themed", "crlf", "empty-hooks"])
def test_a_setting_gemini_cli_saves_during_install_is_kept(
    path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    original = ORIGINALS[name]
    assert original is not None
    _put(path, original)
    _race(monkeypatch, path, _saves_theme(path, 2))
    assert settings.install(path, HOOKS).changed
    data = _json(path.read_bytes())
    assert data["theme"] == "2dark"  # both saves kept, none reverted
    assert len(settings.status(path)) == 3
    assert (path.parent / "settings.json.ctxtool-backup").read_bytes() == original.replace(
        b'"dark"', b'"2dark"')  # fmt: skip


@pytest.mark.parametrize("name", ["themed", "empty-hooks"])
def test_a_setting_gemini_cli_saves_during_uninstall_is_kept(
    path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The first attempt's backup is put back when the swap fails: the next attempt still knows the file
    before ctxtool's hooks (so an empty ``hooks`` stays)."""
    original = ORIGINALS[name]
    assert original is not None
    _put(path, original)
    settings.install(path, HOOKS)
    _race(monkeypatch, path, _saves_theme(path, 1))
    assert settings.uninstall(path).changed
    assert path.read_bytes() == original.replace(b'"dark"', b'"1dark"')


def test_a_file_gemini_cli_creates_during_install_is_kept(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def create() -> None:
        if not path.exists():
            path.write_bytes(THEMED)

    path.parent.mkdir()
    _race(monkeypatch, path, create)
    settings.install(path, HOOKS)
    assert _json(path.read_bytes())["theme"] == "dark"
    assert len(settings.status(path)) == 3
    monkeypatch.undo()
    settings.uninstall(path)
    assert path.read_bytes() == THEMED


def test_a_file_that_keeps_changing_is_refused_in_one_line(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _put(path, THEMED)
    _race(monkeypatch, path, _saves_theme(path, 1000))
    with pytest.raises(CtxtoolError) as caught:
        settings.install(path, HOOKS)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message
    assert "run the command again" in message
    assert settings.status(path) == []  # Gemini CLI's last save stands, nothing reverted
    assert _json(path.read_bytes())["theme"].endswith("dark")
    assert {p.name for p in path.parent.iterdir()} <= {"settings.json", "settings.json.ctxtool-backup"}


# ------------------------------------------------------------------- 5. uninstall gives back the bytes


@pytest.mark.parametrize("name", list(ORIGINALS))
@pytest.mark.parametrize("reinstalls", [0, 1])
def test_uninstall_gives_back_the_exact_bytes_it_found(path: Path, name: str, reinstalls: int) -> None:
    original = ORIGINALS[name]
    _put(path, original)
    settings.install(path, HOOKS)
    for _ in range(reinstalls):  # other options: ctxtool's hooks change, the file under them does not
        assert settings.install(path, OTHER_HOOKS).changed
    assert settings.uninstall(path).changed
    if original is None:
        assert not path.exists()
    else:
        assert path.read_bytes() == original
    assert not settings.uninstall(path).changed


def test_an_absent_file_comes_back_absent_at_the_cli(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    assert run(["hooks", "install", "--max-session-cost", "5", "--no-archive"]) == 0
    assert path.exists()
    assert run(["hooks", "uninstall"]) == 0
    assert not path.exists()


@pytest.mark.parametrize("name", ["absent", "empty"])
def test_settings_the_user_added_after_install_stay(path: Path, name: str) -> None:
    _put(path, ORIGINALS[name])
    settings.install(path, HOOKS)
    text = path.read_text()
    path.write_text(text.replace("{", '{\n  "theme": "dark",', 1))
    settings.uninstall(path)
    assert _json(path.read_bytes()) == {"theme": "dark"}
    assert settings.status(path) == []


def test_a_stale_backup_does_not_come_back(path: Path) -> None:
    """A backup from an earlier install is not the file under today's hooks: uninstall removes the hooks."""
    _put(path, THEMED)
    settings.install(path, HOOKS)
    settings.uninstall(path)
    path.write_bytes(b'{\n  "theme": "light"\n}\n')
    (path.parent / "settings.json.ctxtool-backup").write_bytes(THEMED)
    settings.install(path, HOOKS)
    (path.parent / "settings.json.ctxtool-backup").write_bytes(THEMED)
    settings.uninstall(path)
    assert path.read_bytes() == b'{\n  "theme": "light"\n}\n'
