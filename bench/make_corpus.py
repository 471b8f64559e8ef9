"""Build (or reuse) the ~500 MB benchmark corpus from the real Gemini CLI sessions in ../shared/real-sessions.

Layout, as Gemini CLI writes it under a home directory::

    bench/corpus/.gemini/tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-<id8>.json[l]
    bench/corpus/.gemini/tmp/<project>/chats/<parent session id>/<subagent id>.json[l]
    bench/corpus/manifest.json   (written last: the corpus is complete only when it exists and matches)

Every copy of the 43 source files is a distinct session: each session id (a UUID, or a subagent's 6-character
id) is replaced by a new one of the same length everywhere in the copy, including the ``chats/<parent id>/``
folder of its subagents and the ``<id8>`` in the file name. Nothing else in the bytes changes, so sizes,
structure and token counts stay as Gemini CLI wrote them. The a2a-server files keep their constant session
id ``a2a-server`` (real ones all share it) and differ by file name and project only.

Usage: ``python bench/make_corpus.py [--size-mb 500] [--out bench/corpus]
[--source ../shared/real-sessions]``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "real-sessions"
DEFAULT_OUT = REPO / "bench" / "corpus"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
CONSTANT_IDS = {"a2a-server"}  # shared by every a2a-server session; never rewritten


class CorpusError(Exception):
    """The corpus cannot be built; the message says how to fix it."""


@dataclass(frozen=True)
class Source:
    path: Path
    repo: str  # the source repository, from the `<repo>__<name>` file name
    session_id: str | None
    start_time: str | None
    parent_ref: str | None  # folder under chats/ for a subagent file (parent id or skill-extraction-<8hex>)
    stem: str  # original file name part that stays (e.g. "session-2026-04-25T01-53"), or "" to derive one
    suffix: str  # ".json" or ".jsonl", kept as found (some ".jsonl" hold a JSON document, as in the wild)


def _metadata(data: bytes) -> dict[str, object]:
    """The top-level object of a legacy .json document, or the first line of a .jsonl file."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = orjson.loads(data.split(b"\n", 1)[0])
    return doc if isinstance(doc, dict) else {}


def read_sources(source: Path) -> list[Source]:
    if not source.is_dir():
        raise CorpusError(
            f"source folder {source} is absent: the benchmark corpus is built from the real Gemini CLI "
            "sessions in ../shared/real-sessions beside the repository; check out shared/ next to the repo "
            "or pass --source DIR"
        )
    sources: list[Source] = []
    for path in sorted(p for p in source.iterdir() if p.suffix in (".json", ".jsonl")):
        repo, _, rest = path.name.partition("__")
        meta = _metadata(path.read_bytes())
        sid = meta.get("sessionId")
        start = meta.get("startTime")
        parts = rest.split("__")
        parent_ref = parts[0] if len(parts) == 2 else None  # `<repo>__<parent>__<id>.json`: a subagent file
        name = parts[-1]
        stem = name[: -len("-xxxxxxxx" + path.suffix)] if name.startswith("session-") else ""
        sources.append(
            Source(
                path=path,
                repo=repo.lower(),
                session_id=sid if isinstance(sid, str) else None,
                start_time=start if isinstance(start, str) else None,
                parent_ref=parent_ref,
                stem=stem,
                suffix=path.suffix,
            )
        )
    if not sources:
        raise CorpusError(f"no .json/.jsonl files in {source}; point --source at the real-sessions folder")
    return sources


def new_id(old: str, copy: int) -> str:
    """A deterministic replacement id of the same length and shape (UUID, short base36 id, or hex)."""
    digest = hashlib.sha256(f"{old}/{copy}".encode()).hexdigest()
    if len(old) == 36 and old.count("-") == 4:
        h = digest[:32]
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"
    if all(c in "0123456789abcdef" for c in old):
        return digest[: len(old)]
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    number = int(digest, 16)
    out = []
    for _ in range(len(old)):
        number, rest = divmod(number, 36)
        out.append(alphabet[rest])
    return "".join(out)


def plan_copy(sources: list[Source], copy: int) -> tuple[dict[str, str], list[tuple[Source, str]]]:
    """Id replacements for one copy, and each source's path relative to the corpus root."""
    ids = {s.session_id for s in sources if s.session_id and s.session_id not in CONSTANT_IDS}
    ids |= {
        s.parent_ref for s in sources if s.parent_ref and not s.parent_ref.startswith("skill-extraction-")
    }
    mapping = {old: new_id(old, copy) for old in sorted(ids)}
    placed: list[tuple[Source, str]] = []
    for s in sources:
        project = f"{s.repo}-{copy:02d}"
        sid = s.session_id or hashlib.sha256(s.path.name.encode()).hexdigest()[:36]
        new_sid = mapping.get(sid, sid)
        if s.parent_ref is not None:
            if s.parent_ref.startswith("skill-extraction-"):
                hex8 = s.parent_ref.removeprefix("skill-extraction-")
                parent = f"skill-extraction-{new_id(hex8, copy)}"
            else:
                parent = mapping[s.parent_ref]
            rel = f"{project}/chats/{parent}/{new_sid}{s.suffix}"
        else:
            stem = s.stem
            if not stem:
                when = (s.start_time or "2026-01-01T00:00")[:16].replace(":", "-")
                stem = f"session-{when}"
            rel = f"{project}/chats/{stem}-{new_sid[:8]}{s.suffix}"
        placed.append((s, f".gemini/tmp/{rel}"))
    return mapping, placed


def _manifest_matches(out: Path, expected: dict[str, object]) -> bool:
    try:
        manifest = orjson.loads((out / MANIFEST).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    if {k: manifest.get(k) for k in expected} != expected:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict):
        return False
    for rel, size in files.items():
        try:
            if (out / rel).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


def build(source: Path = DEFAULT_SOURCE, out: Path = DEFAULT_OUT, size_mb: int = 500) -> Path:
    """Make sure a complete corpus of about ``size_mb`` MB is at ``out``; return its .gemini/tmp root."""
    sources = read_sources(source)
    source_bytes = sum(s.path.stat().st_size for s in sources)
    copies = max(1, math.ceil(size_mb * 1_000_000 / source_bytes))
    fingerprint = hashlib.sha256(
        "\n".join(f"{s.path.name}:{s.path.stat().st_size}" for s in sources).encode()
    ).hexdigest()
    expected: dict[str, object] = {"version": MANIFEST_VERSION, "copies": copies, "sources": fingerprint}
    if _manifest_matches(out, expected):
        print(f"corpus: reusing {out} ({copies} copies of {len(sources)} files)", file=sys.stderr)
        return out / ".gemini" / "tmp"

    print(f"corpus: building {out}: {copies} copies of {len(sources)} files from {source}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # incomplete until the manifest is written again
    shutil.rmtree(out / ".gemini", ignore_errors=True)
    contents = {s.path: s.path.read_bytes() for s in sources}
    files: dict[str, int] = {}
    for copy in range(copies):
        mapping, placed = plan_copy(sources, copy)
        for s, rel in placed:
            data = contents[s.path]
            for old, new in mapping.items():
                if old.encode() in data:
                    data = data.replace(old.encode(), new.encode())
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            files[rel] = len(data)
        for project in {rel.split("/")[2] for _, rel in placed}:
            # Gemini CLI >= 0.29 keeps the project root beside a slug-named project folder.
            (out / ".gemini" / "tmp" / project / ".project_root").write_text(f"/home/user/{project}\n")
    manifest = {**expected, "total_bytes": sum(files.values()), "files": files}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, out / MANIFEST)
    print(f"corpus: {len(files)} files, {sum(files.values()) / 1e6:.0f} MB", file=sys.stderr)
    return out / ".gemini" / "tmp"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="folder of real session files")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="corpus folder (git-ignored)")
    parser.add_argument("--size-mb", type=int, default=500, help="approximate corpus size")
    args = parser.parse_args(argv)
    try:
        root = build(args.source, args.out, args.size_mb)
    except CorpusError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
