"""One bad entry never aborts a scan (issue 19): symlink loops, FIFOs, unreadable files, invalid UTF-8."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.cli import run
from tests.conftest import FIXTURES

GOOD = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"


def chats_with_good_session(tmp_path: Path) -> Path:
    chats = tmp_path / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    shutil.copy2(GOOD, chats / GOOD.name)
    return chats


def stats_json(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, dict[str, object], str]:
    code = run(["stats", *args, "--by", "session", "--format", "json", "--no-cache"])
    captured = capsysbinary.readouterr()
    return code, orjson.loads(captured.out) if captured.out else {}, captured.err.decode()


def test_a_symlink_loop_is_skipped_and_named_and_the_rest_reported(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    chats = chats_with_good_session(tmp_path)
    os.symlink("session-b.json", chats / "session-a.json")
    os.symlink("session-a.json", chats / "session-b.json")
    os.symlink(str(tmp_path / "nowhere.json"), chats / "session-gone.json")
    code, doc, err = stats_json(capsysbinary, str(tmp_path / "tmp"))
    assert code == 0
    rows = doc["rows"]
    assert isinstance(rows, list)
    assert [r["session"] for r in rows] == [GOOD.name.removesuffix(".jsonl")]
    read = doc["read"]
    assert isinstance(read, dict)
    assert read["skipped_by_reason"] == {"symlink loop": 2, "dangling symlink": 1}
    assert err.count("session-a.json: is a symlink loop") == 1
    assert "session-gone.json: is a symlink to a file that does not exist" in err
    # Given explicitly, the same path is an error that says why (not "matches no file").
    code, _, err = stats_json(capsysbinary, str(chats / "session-a.json"))
    assert code == 1
    assert "symlink loop" in err
    assert "matches no file" not in err


def test_a_fifo_in_a_chats_folder_is_never_opened(tmp_path: Path) -> None:
    chats = chats_with_good_session(tmp_path)
    os.mkfifo(chats / "session-2026-01-01T00-00-fifofifo.jsonl")
    # In a subprocess with a time limit: opening the FIFO would block forever; this fails instead of hanging.
    done = subprocess.run(
        [sys.executable, "-m", "ctxtool", "stats", str(tmp_path / "tmp"), "--format", "json", "--no-cache"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    assert doc["read"]["skipped_by_reason"] == {"not a regular file": 1}
    assert len(doc["rows"]) >= 1
    assert b"is not a regular file (a FIFO, socket or device), so it is never opened" in done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_is_that_entrys_problem(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    chats = chats_with_good_session(tmp_path)
    locked = chats / "session-2026-01-01T00-00-lockedaa.jsonl"
    shutil.copy2(GOOD, locked)
    locked.chmod(0)
    closed = chats / "sub-folder"
    closed.mkdir()
    closed.chmod(0)
    try:
        code, doc, err = stats_json(capsysbinary, str(tmp_path / "tmp"))
    finally:
        locked.chmod(0o600)
        closed.chmod(0o700)
    assert code == 0
    assert len(doc["rows"]) == 1  # type: ignore[arg-type]
    assert "lockedaa.jsonl: cannot be read" in err
    assert "sub-folder: cannot be read: permission denied" in err


def test_invalid_utf8_is_read_with_replacement_and_reported(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    chats = chats_with_good_session(tmp_path)
    lines = GOOD.read_bytes().splitlines()
    lines[1] = lines[1].replace(b"Refactor", b"Ref\xff\xfeactor")
    bad = chats / "session-2026-01-01T00-00-badutf8a.jsonl"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    code, doc, err = stats_json(capsysbinary, str(bad))
    assert code == 0
    [row] = doc["rows"]  # type: ignore[misc]
    assert row["requests"] == 4
    read = doc["read"]
    assert isinstance(read, dict)
    assert read["invalid_utf8_lines"] == 1
    assert "badutf8a.jsonl: 1 line holds bytes that are not UTF-8 (first at line 2)" in err
    assert run(["stats", str(bad), "--by", "turn", "--format", "json", "--no-cache"]) == 0
    turns = orjson.loads(capsysbinary.readouterr().out)["rows"]
    assert turns[0]["prompt"].startswith("Ref\ufffd\ufffdactor")


@pytest.mark.parametrize("command", [["compare"], ["compact"], ["compact", "--dry-run"]])
def test_a_command_that_fails_prints_nothing_on_stdout(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], command: list[str]
) -> None:
    missing = str(tmp_path / "no-such-session.jsonl")
    assert run([*command, missing]) == 1
    captured = capsysbinary.readouterr()
    assert captured.out == b""
    assert b"no-such-session.jsonl: matches no session file. Check the path, or quote a glob" in captured.err
    chats = chats_with_good_session(tmp_path)
    os.mkfifo(chats / "session-x.jsonl")
    assert run([*command, str(chats / "session-x.jsonl")]) == 1
    captured = capsysbinary.readouterr()
    assert captured.out == b""
    assert b"is not a regular file" in captured.err


@pytest.mark.parametrize(
    ("data", "valid"),
    [
        (b"a" * 20000 + b"\xe9 " + b"b" * 20000, False),  # Latin-1 in the middle
        (b"a" * 16383 + b"\xe2" + b"a" * 20000, False),  # a sequence cut at a chunk boundary
        (b"a" * 16383 + "→".encode() + b"a" * 20000, True),  # a character across the boundary
        (b"x" * 10 + b"\xe2\x86", False),  # cut at the end
        ("日本語".encode() * 9000, True),
        (b"plain ascii", True),
    ],
)
def test_the_utf8_check_agrees_with_decoding(data: bytes, valid: bool) -> None:
    from ctxtool.session.columns import invalid_utf8

    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        decodes = False
    else:
        decodes = True
    assert decodes == valid
    assert (invalid_utf8(data)[0] == 0) == valid


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=8)
        ),
        max_size=30,
    ),
    st.integers(min_value=0, max_value=20000),
)
def test_the_utf8_check_agrees_with_decoding_on_any_bytes(pieces: list[bytes], pad: int) -> None:
    from ctxtool.session.columns import invalid_utf8

    data = b"a" * pad + b"".join(pieces)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        decodes = False
    else:
        decodes = True
    assert (invalid_utf8(data)[0] == 0) == decodes


class _Entry:
    """A directory entry whose examination fails the way the filesystem can fail."""

    def __init__(self, name: str, error: OSError) -> None:
        self.name = name
        self.path = f"/nowhere/{name}"
        self.error = error

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        raise self.error

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        raise self.error

    def is_symlink(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("error", "key", "says"),
    [
        (OSError(errno.ELOOP, "loop"), "symlink loop", "symlink loop"),
        (PermissionError(errno.EACCES, "denied"), "permission denied", "permission denied"),
        (OSError(errno.ENAMETOOLONG, "too long"), "name too long", "name too long"),
        (FileNotFoundError(errno.ENOENT, "gone"), "vanished", "vanished while it was being scanned"),
        (OSError(errno.EIO, "I/O error"), "unreadable", "cannot be examined (I/O error)"),
    ],
)
def test_every_filesystem_error_on_an_entry_is_that_entrys_problem(
    error: OSError, key: str, says: str
) -> None:
    """Each class of error, whoever runs the test (root reads through permissions, so a real
    permission-denied file is tested above only for other users): skipped with its reason, never raised."""
    from ctxtool.session.discover import Discovery, _is_file

    found = Discovery()
    assert _is_file(_Entry("session-x.jsonl", error), found) is False  # type: ignore[arg-type]
    assert found.skipped == [(Path("/nowhere/session-x.jsonl"), key)]
    [(_, _, message)] = found.unreadable
    assert says in message
    # Entries whose name cannot be a session are passed over silently.
    quiet = Discovery()
    assert _is_file(_Entry("notes.txt", error), quiet) is False  # type: ignore[arg-type]
    assert quiet.skipped == []
