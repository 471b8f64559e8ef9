"""Which lines of a session file are not UTF-8: counted for the report's warnings, never an error.

Owns: ``invalid_utf8`` (the lines holding bytes that are not UTF-8, and the first of them), in pure Python
(``invalid_utf8_pure``, always there and always tested) and, when ``ctxtool/_kernels.c`` was built, compiled
(``ctxtool.common.kernels`` picks; ``CTXTOOL_PURE=1`` forces Python). Gemini CLI reads session files with
``fs.readFile(path, 'utf8')``, which puts U+FFFD in place of such bytes; ctxtool reads them the same way
(``ctxtool.session.read.loads_like_node``) and says so, with these counts.

The check reads every byte: msgspec skips the fields a report never reads without checking their UTF-8, so
checking only the lines it refuses would miss most bad bytes (about 0.19 s of CPU per 500 MB in Python,
0.05 s compiled).

Must not: print, or import anything above ``ctxtool.common``.
"""

from __future__ import annotations

import codecs

from ctxtool.common import kernels

__all__ = ["invalid_utf8", "invalid_utf8_pure", "read_as_node"]


def invalid_utf8_pure(data: bytes, first_line: int = 1, /) -> tuple[int, int | None]:
    """(lines holding bytes that are not UTF-8, the first of them) in ``data``, its lines split on ``b"\\n"``;
    ``first_line`` numbers its first line. ASCII and valid UTF-8 (every session Gemini CLI writes) cost one
    pass in C."""
    if _valid_utf8(data):
        return 0, None
    count, first = 0, None
    for number, line in enumerate(data.split(b"\n"), first_line):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            count += 1
            first = number if first is None else first
    return count, first


_UTF8_CHUNK = 1 << 14


def _valid_utf8(data: bytes) -> bool:
    """Whether ``data`` is UTF-8, without building the string: chunks of ASCII (most of a session) are
    skipped, the others decoded; a character cut by a chunk's end starts the next chunk. On the bench corpus
    (501 MB): 0.15 s of CPU, against 0.16 s with an incremental decoder, 0.33 s with ``data.decode()``."""
    if data.isascii():
        return True
    end = len(data)
    start = 0
    try:
        while start < end:
            chunk = data[start : start + _UTF8_CHUNK]
            if chunk.isascii():
                start += _UTF8_CHUNK
            else:  # the last chunk must end on a whole character (final=True)
                start += codecs.utf_8_decode(chunk, "strict", start + _UTF8_CHUNK >= end)[1]
    except UnicodeDecodeError:
        return False
    return True


# The compiled kernel when there is one: same contract, same answers (tests/test_kernels.py).
if kernels.compiled() is None:
    invalid_utf8 = invalid_utf8_pure
else:
    from ctxtool._kernels import invalid_utf8


def read_as_node(data: bytes, invalid_lines: int | None = None) -> bytes:
    """``data`` as Gemini CLI (Node) reads it: valid UTF-8 is returned as it is (the same object); otherwise
    every ill-formed sequence becomes U+FFFD, one for each maximal subpart, as Node's UTF-8 decoder
    (``fs.readFile(path, 'utf8')``) and Python's ``"replace"`` handler both do (tests/test_utf8_node.py).

    The only place where ctxtool decides what such bytes hold, so no JSON library's release can change it.
    A newline is never part of an ill-formed sequence, so lines split before or after this are the same.
    ``invalid_lines``: what ``invalid_utf8(data)`` counted, when the caller has it already."""
    if invalid_lines is None:
        invalid_lines = invalid_utf8(data)[0]
    return data if not invalid_lines else data.decode("utf-8", "replace").encode("utf-8")
