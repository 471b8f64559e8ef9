"""The optional compiled kernels (``ctxtool/_kernels.c``) give the answers of the pure-Python functions they
stand in for, and ctxtool's output does not depend on which of them runs.

The pure functions are always tested: ``make test-pure`` runs the fast tier again with ``CTXTOOL_PURE=1``.
The tests named ``test_the_kernel_*`` need only the kernel and ``ctxtool.session.utf8``, and this file
imports nothing from its neighbours, so the wheel build (cibuildwheel, ``pyproject.toml``) runs them on each
wheel it makes, installed, away from this checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.common.jsvalue import utf16_counts_pure
from ctxtool.session.utf8 import invalid_utf8_pure

REPO = Path(__file__).resolve().parents[1]
REAL_SESSIONS = REPO.parent / "shared" / "real-sessions"


def compiler_present() -> bool:
    """Whether the C compiler this Python was built with (or ``$CC``) is on PATH: then setup.py builds the
    kernels, and their absence is a failure, not a reason to skip."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or ""
    return bool(cc.split()) and shutil.which(cc.split()[0]) is not None


@pytest.fixture(scope="module")
def kernels() -> ModuleType:
    try:
        from ctxtool import _kernels
    except ImportError:
        if compiler_present() or os.environ.get("CI") == "true":
            pytest.fail(
                "ctxtool._kernels is not built though a C compiler is here: `pip install -e .` builds it "
                "in place (make does; in a bare checkout: python setup.py build_ext --inplace)"
            )
        pytest.skip("no C compiler here: ctxtool runs its pure-Python functions")
    return _kernels


# Every sequence Unicode's Table 3-7 refuses, and its neighbours it accepts, alone and inside lines.
EDGES = {
    "empty": b"",
    "one newline": b"\n",
    "ascii lines": b"a\nbc\n\n",
    "two-byte min": "\u0080".encode(),
    "two-byte max": "\u07ff".encode(),
    "three-byte min": "\u0800".encode(),
    "before the surrogates": "\ud7ff".encode(),
    "after the surrogates": "\ue000".encode(),
    "BMP max": "\uffff".encode(),
    "four-byte min": "\U00010000".encode(),
    "four-byte max U+10FFFF": "\U0010ffff".encode(),
    "above U+10FFFF": b"\xf4\x90\x80\x80",
    "F5 lead": b"\xf5\x80\x80\x80",
    "FF": b"\xff",
    "overlong two-byte C0": b"\xc0\x80",
    "overlong two-byte C1": b"\xc1\xbf",
    "overlong three-byte": b"\xe0\x80\xaf",
    "overlong three-byte max": b"\xe0\x9f\xbf",
    "overlong four-byte": b"\xf0\x8f\xbf\xbf",
    "surrogate D800": b"\xed\xa0\x80",
    "surrogate DFFF": b"\xed\xbf\xbf",
    "surrogate pair, CESU-8": b"\xed\xa0\xbd\xed\xb8\x80",
    "lone continuation": b"\x80",
    "cut two-byte": b"\xc3",
    "cut three-byte": b"\xe2\x86",
    "cut four-byte": b"\xf0\x9f\x98",
    "cut by a newline": b"\xe2\x86\n\x92",
    "cut at the end after ascii": b"x" * 40 + b"\xf0\x9f",
    "bad in the second of three lines": b"ok\nba\xffd\nok",
    "two bad lines": b"\xff\nok\n\xfe\n",
    "bad after 31 ascii": b"a" * 31 + b"\xff" + b"a" * 40,
    "bad after 32 ascii": b"a" * 32 + b"\xff",
    "character across the 32-byte block": b"a" * 30 + "→".encode() + b"a" * 40,
    "character across the 8-byte word": b"a" * 6 + "😀".encode() + b"a" * 10,
    "Latin-1 in a long line": b"a" * 20000 + b"\xe9 " + b"b" * 20000,
    "CJK": "日本語\n".encode() * 50,
    "NUL": b"\x00\n\x00",
}


@pytest.mark.parametrize("data", EDGES.values(), ids=EDGES.keys())
@pytest.mark.parametrize("first_line", [1, 7])
def test_the_kernel_agrees_on_edge_cases(kernels: ModuleType, data: bytes, first_line: int) -> None:
    expected = invalid_utf8_pure(data, first_line)
    assert kernels.invalid_utf8(data, first_line) == expected
    lines = data.split(b"\n")
    bad = [n for n, line in enumerate(lines, first_line) if not _decodes(line)]
    assert expected == (len(bad), bad[0] if bad else None)


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_the_kernel_agrees_on_every_pair_of_bytes(kernels: ModuleType) -> None:
    """Every two-byte string, at the start, straddling an 8-byte word and after a 32-byte block."""
    for pad in (0, 7, 33):
        prefix = b"a" * pad
        for first in range(256):
            for second in range(256):
                data = prefix + bytes((first, second))
                assert kernels.invalid_utf8(data) == invalid_utf8_pure(data), data


# Where a lead byte's second byte changes meaning (Table 3-7), and bytes that are never continuations.
_BOUNDARIES = (0x00, 0x0A, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF)


def test_the_kernel_agrees_on_every_lead_byte_and_boundary(kernels: ModuleType) -> None:
    for lead in range(0x80, 0x100):
        for second in _BOUNDARIES:
            for third in (0x0A, 0x7F, 0x80, 0xBF, 0xC0):
                for fourth in (b"", b"\x80", b"\xbf", b"\n", b"\xc0"):
                    data = bytes((lead, second, third)) + fourth + b"z"
                    assert kernels.invalid_utf8(data, 3) == invalid_utf8_pure(data, 3), data


_PIECES = st.one_of(
    st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=6),
    st.sampled_from([b"\n", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xf0\x9f\x98", b"a" * 33]),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_PIECES, max_size=40), st.integers(min_value=0, max_value=70), st.integers(-3, 10**9))
def test_the_kernel_agrees_on_any_bytes(
    kernels: ModuleType, pieces: list[bytes], pad: int, first_line: int
) -> None:
    data = b"a" * pad + b"".join(pieces)
    assert kernels.invalid_utf8(data, first_line) == invalid_utf8_pure(data, first_line)
    assert kernels.invalid_utf8(data) == invalid_utf8_pure(data)


# Bytes that would make the view's end look invalid, or complete a character cut there, if they were read.
_AFTER = st.sampled_from([b"\xff", b"\x80", b"\xbf\xbf", b"\x98\x80", b"\xe2"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=20), st.integers(min_value=0, max_value=70), _AFTER)
def test_the_kernel_stops_at_the_end_of_a_view(
    kernels: ModuleType, pieces: list[bytes], pad: int, after: bytes
) -> None:
    """A view into a larger buffer: the bytes after its end are never read. (A bytes object ends in a NUL,
    which hides an over-read.)"""
    data = b"a" * pad + b"".join(pieces)
    assert kernels.invalid_utf8(memoryview(data + after)[: len(data)]) == invalid_utf8_pure(data)


@pytest.mark.parametrize("character", ["é", "→", "😀", "\U0010ffff"])
def test_the_kernel_reads_no_byte_past_the_end(kernels: ModuleType, character: str) -> None:
    """Every length of ASCII (the word-at-a-time paths end exactly at the end, or short of it), and a
    character cut by the end, which the bytes after the view would complete."""
    for n in range(80):
        assert kernels.invalid_utf8(memoryview(b"a" * n + b"\xff")[:n]) == (0, None), n
    whole = b"a" * 40 + character.encode()
    for cut in range(41, len(whole)):
        assert kernels.invalid_utf8(memoryview(whole)[:cut]) == invalid_utf8_pure(whole[:cut]) == (1, 1)
    assert kernels.invalid_utf8(memoryview(whole)) == (0, None)


def test_the_kernel_refuses_what_is_not_bytes(kernels: ModuleType) -> None:
    with pytest.raises(TypeError):
        kernels.invalid_utf8("text")
    with pytest.raises(TypeError):
        kernels.invalid_utf8()
    with pytest.raises(TypeError):
        kernels.invalid_utf8(b"", 1, 2)
    assert kernels.KERNELS == ("utf8", "utf16")


# Characters at each boundary of UTF-8's lengths and UTF-16's surrogates, lone surrogates included.
_CHARACTERS = ["a", "\x00", "\x7f", "\x80", "é", "\u07ff", "\u0800", "中", "\ud7ff", "\ud800", "\udbff"]
_CHARACTERS += ["\udc00", "\udfff", "\ue000", "\uffff", "\U00010000", "😀", "\U0010ffff", "\n"]


def test_the_kernel_counts_utf16_units_at_every_boundary(kernels: ModuleType) -> None:
    """Each character alone and after every length of ASCII (the eight-byte steps end exactly at the end, or
    short of it), and every pair."""
    for character in _CHARACTERS:
        for n in range(20):
            text = "a" * n + character + "b" * (n % 3)
            assert kernels.utf16_counts(text) == utf16_counts_pure(text), (character, n)
        for other in _CHARACTERS:
            assert kernels.utf16_counts(character + other) == utf16_counts_pure(character + other)
    assert kernels.utf16_counts("") == (0, 0)
    assert kernels.utf16_counts("a😀\ud800é") == (5, 1)


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=80))
def test_the_kernel_counts_utf16_units_of_any_text(kernels: ModuleType, text: str) -> None:
    assert kernels.utf16_counts(text) == utf16_counts_pure(text)
    assert kernels.utf16_counts(text * 9) == utf16_counts_pure(text * 9)


def test_the_kernel_refuses_what_is_not_a_str(kernels: ModuleType) -> None:
    with pytest.raises(TypeError):
        kernels.utf16_counts(b"bytes")


def _ctxtool(*args: str, pure: bool, cwd: Path = REPO, pythonpath: str | None = None) -> bytes:
    """``python -m ctxtool ARGS`` in a process of its own, with or without ``CTXTOOL_PURE=1``; its stdout
    and stderr, which must not differ between the two."""
    env = {k: v for k, v in os.environ.items() if k != "CTXTOOL_PURE"}
    if pure:
        env["CTXTOOL_PURE"] = "1"
    python = [sys.executable]
    if pythonpath is not None:
        # Without site's .pth files (-S): an editable install of this checkout (make's .venv) puts a finder
        # on sys.meta_path that would find ctxtool._kernels in the checkout, not in the installed copy.
        import site

        env["PYTHONPATH"] = os.pathsep.join([pythonpath, *site.getsitepackages()])
        python.append("-S")
    done = subprocess.run(
        [*python, "-m", "ctxtool", *args], cwd=cwd, env=env, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout + b"\n--- stderr ---\n" + done.stderr


def test_version_says_which_functions_run(kernels: ModuleType) -> None:
    from ctxtool import __version__

    assert _ctxtool("--version", pure=False).startswith(
        f"ctxtool {__version__} (compiled kernels: utf8, utf16)\n".encode()
    )
    assert _ctxtool("--version", pure=True).startswith(f"ctxtool {__version__} (pure Python)\n".encode())


def test_stats_is_byte_identical_with_and_without_the_kernels(kernels: ModuleType, tmp_path: Path) -> None:
    """``stats`` JSON (and its warnings) on the fixtures, on files with invalid UTF-8 in every era and
    place, and on the real sessions: the same bytes whichever function checks the UTF-8."""
    assert b"(compiled kernels: utf8, utf16)" in _ctxtool("--version", pure=False)  # not pure twice
    chats = tmp_path / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    good = (
        REPO / "fixtures" / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
    )
    lines = good.read_bytes().splitlines()
    lines[1] = lines[1].replace(b"Refactor", b"Ref\xff\xfeactor")  # in a prompt the report shows
    lines[3] = lines[3].replace(b'"id"', b'"x":"\xed\xa0\x80","id"', 1)  # in a field the reader skips
    (chats / "session-2026-01-01T00-00-badutf8a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    legacy = b'{"sessionId":"s1","messages":[{"id":"m1","type":"user","content":"caf\xe9"}]}'
    (chats / "session-2026-01-02T00-00-badutf8b.json").write_bytes(legacy)
    targets = [str(tmp_path / "tmp"), str(REPO / "fixtures")]
    if REAL_SESSIONS.is_dir():
        targets.append(str(REAL_SESSIONS))
    outputs = []
    for target in targets:
        args = ("stats", target, "--format", "json", "--no-cache")
        outputs.append(_ctxtool(*args, pure=False))
        assert outputs[-1] == _ctxtool(*args, pure=True), target
    out, err = outputs[0].split(b"\n--- stderr ---\n")
    assert orjson.loads(out)["read"]["invalid_utf8_lines"] == 3
    assert b"badutf8a.jsonl: 2 lines hold bytes that are not UTF-8 (first at line 2)" in err


def _install(tmp_path: Path, label: str, env: dict[str, str]) -> Path:
    """``pip install`` this checkout's sources (copied: a build writes beside them) into a folder of its
    own, without its dependencies (the running environment has them); the folder."""
    from importlib.metadata import version

    setuptools = version("setuptools")
    assert int(setuptools.split(".")[0]) >= 77, (
        f"setuptools {setuptools} cannot build ctxtool: run make (pip install -e '.[dev]' brings 77 or later)"
    )
    src = tmp_path / "src"
    if not src.exists():
        ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.egg-info", "build")
        shutil.copytree(REPO / "ctxtool", src / "ctxtool", ignore=ignore)
        for name in ("pyproject.toml", "setup.py", "README.md"):
            shutil.copy2(REPO / name, src / name)
    target = tmp_path / label
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-build-isolation",
        "--no-deps",
        "--no-index",
    ]
    done = subprocess.run(
        [*pip, "--target", str(target), str(src)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return target


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CTXTOOL_PURE", "PYTHONPATH", "CC")}
    return {**env, **extra}


def _built(target: Path) -> list[str]:
    return sorted(p.name for p in (target / "ctxtool").glob("_kernels*") if p.suffix in (".so", ".pyd"))


def test_an_install_without_a_compiler_runs_pure_python(tmp_path: Path) -> None:
    target = _install(tmp_path, "no-compiler", _environment(CC="/bin/false"))
    assert _built(target) == []
    version = _ctxtool("--version", pure=False, cwd=tmp_path, pythonpath=str(target))
    assert version.split(b"\n")[0].endswith(b" (pure Python)")


def test_an_install_with_a_compiler_runs_the_kernels(kernels: ModuleType, tmp_path: Path) -> None:
    target = _install(tmp_path, "compiler", _environment())
    assert _built(target) != []
    version = _ctxtool("--version", pure=False, cwd=tmp_path, pythonpath=str(target))
    assert version.split(b"\n")[0].endswith(b" (compiled kernels: utf8, utf16)")
