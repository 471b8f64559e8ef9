"""``read_as_node`` gives the bytes Node gives: the installed Node decodes the same bytes as UTF-8
(``Buffer.toString('utf8')``, what ``fs.readFile(path, 'utf8')`` does for Gemini CLI) and encodes the text
back, and the two must be equal to the byte. Fresh random bytes on every run, beside fixed edge cases."""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess

import pytest

from ctxtool.session.utf8 import invalid_utf8, read_as_node

_EDGES = [
    b"",
    b"plain ascii\n",
    "é€𝄞".encode(),
    b"\x80",
    b"\xc3",
    b"\xc3(",
    b"\xe2\x82",
    b"\xe2\x82(",
    b"\xf0\x9d\x84",
    b"\xc0\xaf",  # overlong
    b"\xe0\x80\xaf",  # overlong
    b"\xed\xa0\x80",  # an encoded surrogate
    b"\xed\xbf\xbf\xed\xa0\x80",
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xf5\x80",
    b"\xff\xfe",
    b'{"a":"\xff"}\n{"b":"\xc3"}\n',
    b"\xe2\x82\n\xac",  # a newline inside a cut sequence stays a newline
]

_NODE = r"""
const samples = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const read = b64 => Buffer.from(b64, 'base64').toString('utf8');
const out = samples.map(b64 => Buffer.from(read(b64), 'utf8').toString('base64'));
process.stdout.write(JSON.stringify(out));
"""


def _samples(rng: random.Random, n: int) -> list[bytes]:
    alphabet = [b"a", b"\n", b'"', b"\x80", b"\xbf", b"\xc2", b"\xdf", b"\xe0", b"\xed", b"\xef", b"\xf0"]
    alphabet += [b"\xf4", b"\xf8", b"\xff", b"\xa0", b"\x9f", "é".encode(), "€".encode(), "𝄞".encode()]
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 24))))
        else:
            out.append(b"".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 16))))
    return out


def test_read_as_node_is_what_node_reads() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: install Node.js (a fresh machine has it; see the README)")
    seed = int.from_bytes(os.urandom(8), "big")
    samples = _EDGES + _samples(random.Random(seed), 3000)
    stdin = json.dumps([base64.b64encode(s).decode() for s in samples])
    done = subprocess.run([node, "-e", _NODE], input=stdin, capture_output=True, text=True, check=True)
    theirs = [base64.b64decode(b) for b in json.loads(done.stdout)]
    assert len(theirs) == len(samples)
    for sample, expected in zip(samples, theirs, strict=True):
        assert read_as_node(sample) == expected, f"seed {seed}: {sample!r}"
        assert (invalid_utf8(sample)[0] == 0) == (expected == sample), f"seed {seed}: {sample!r}"


def test_valid_utf8_is_returned_as_it_is() -> None:
    data = "a session é€𝄞\n".encode() * 100
    assert read_as_node(data) is data
