"""The rows of ``make bench`` for ``ctxtool guard``, the BeforeModel hook Gemini CLI runs before every model
call (run from ``bench/run.py``; not a test).

* warm, one record appended: a 10 MB session the guard saw at its previous call grew by one request; the
  guard reads only the new bytes (its running tally of the file keeps where it stopped) and answers. The
  event carries the request's history, as Gemini CLI's does. Target: 100 ms.
* first call on a home of the real sessions (laid out as Gemini CLI keeps them, as ``make_corpus`` lays out
  one copy): nothing in the cache yet. Target: 1 s.
* first call beside a 1 GB session made of one line (over ctxtool's 256 MiB record limit): before, reading it
  took time that grew with the square of its length (173 s for 2 GB), past Gemini CLI's 10 s hook timeout,
  so no budget was enforced at all. Target: 2 s.

Each call runs as Gemini CLI runs it: the console script, the hook event as JSON on standard input. The
machine may be busy, so ``python -c pass`` and ``ctxtool --help`` run in the same rounds: the ratios to them,
and CPU times, say more than wall times alone.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import make_corpus  # a sibling script, not a package
import scenarios

WARM_TARGET_S = 0.1
FIRST_TARGET_S = 1.0
BESIDE_TARGET_S = 2.0
LONG_LINE_MB = 1024


def _call(exe: str, home: Path, transcript: Path, cache: Path, history: list[dict[str, str]]) -> list[str]:
    event = home / "event.json"
    request = {"model": "gemini-2.5-pro", "messages": history, "config": {}}
    event.write_text(json.dumps({"session_id": "bench", "transcript_path": str(transcript),
                                 "hook_event_name": "BeforeModel", "llm_request": request}))  # fmt: skip
    args = f"--max-session-cost 1000 --max-daily-cost 5000 --cache-dir {cache}"
    return ["sh", "-c", f"GEMINI_CLI_HOME={home} exec {exe} guard {args} < {event}"]


def _history(session: bytes) -> list[dict[str, str]]:
    """The request's messages a BeforeModel event carries: the history's text, by role."""
    out = []
    for line in session.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("type") not in ("user", "gemini"):
            continue
        content = rec.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        text = "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
        out.append({"role": "user" if rec["type"] == "user" else "model", "content": text})
    return out


def _aged(root: Path) -> None:
    """Folders as a session that started a while ago leaves them (a folder changed within two seconds of the
    guard's scan is listed again at the next call: ``ctxtool.hooks.rescan``)."""
    past = time.time() - 600
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.utime(folder, (past, past))


def _real_home(home: Path) -> Path:
    """One copy of the real sessions under ``home``, as Gemini CLI keeps them; returns the largest file."""
    mapping, placed = make_corpus.plan_copy(make_corpus.read_sources(scenarios.REAL), 0)
    for source, rel in placed:
        data = source.path.read_bytes()
        for old, new in mapping.items():
            data = data.replace(old.encode(), new.encode())
        target = home / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    _aged(home / ".gemini")
    return max((home / ".gemini").rglob("*.json*"), key=lambda p: p.stat().st_size)


def _one_line_session(chats: Path, mb: int) -> None:
    """A session in Gemini CLI's layout whose second line is one record of ``mb`` MB."""
    chats.mkdir(parents=True, exist_ok=True)
    meta = {"sessionId": "one-line", "projectHash": "1" * 64, "startTime": "2026-11-01T00:00:00.000Z"}
    with (chats / "session-2026-11-01T00-00-oneline1.jsonl").open("wb") as fh:
        fh.write(json.dumps(meta).encode() + b'\n{"id":"long","type":"info","content":"')
        block = b"y" * (1 << 20)
        for _ in range(mb):
            fh.write(block)
        fh.write(b'"}\n')


def _timed(best_of: Callable[..., Any], cmd: list[str]) -> tuple[Any, float]:
    """One run: its measure, and the CPU time (user + system) of its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = best_of(1, cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return m, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _python_of(exe: str) -> str:
    first = Path(exe).read_bytes()[:512].split(b"\n", 1)[0]
    return first[2:].decode().strip() if first.startswith(b"#!") else "python3"


def guard_scenarios(
    exe: str, repeat: int, best_of: Callable[..., Any]
) -> tuple[list[tuple[str, Any, str]], list[str]]:
    if not scenarios.REAL.exists():
        return [("ctxtool guard", None, f"skipped: {scenarios.REAL} is absent")], ["guard: not measured"]
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        home = Path(tmp)
        chats = home / ".gemini" / "tmp" / "bench" / "chats"
        chats.mkdir(parents=True)
        big = scenarios.make_giant(10, "session-2026-11-01T00-00-guard010.jsonl")
        session = chats / big.name
        original = big.read_bytes()
        extra = scenarios._appended_records(original)
        history = _history(original + extra)
        real = home / "real"
        transcript = _real_home(real)
        session.write_bytes(original)
        _one_line_session(home / ".gemini" / "tmp" / "beside" / "chats", LONG_LINE_MB)
        _aged(home / ".gemini")
        sh = ["sh", "-c"]
        names = ("pass", "help", "warm", "first", "beside")
        runs: dict[str, list[tuple[Any, float]]] = {k: [] for k in names}
        for i in range(repeat):  # rounds: one run of each, so that a busy moment falls on all of them
            runs["pass"].append(_timed(best_of, [*sh, f"exec {_python_of(exe)} -c pass"]))
            runs["help"].append(_timed(best_of, [*sh, f"exec {exe} --help > /dev/null"]))
            session.write_bytes(original)
            cache = home / f"cache-{i}"
            best_of(1, _call(exe, home, session, cache, history[:-2]))  # the previous call: its state
            with session.open("ab") as fh:
                fh.write(extra)
            runs["warm"].append(_timed(best_of, _call(exe, home, session, cache, history)))
            event_mb = (home / "event.json").stat().st_size / 1e6
            runs["first"].append(_timed(best_of, _call(exe, real, transcript, real / f"cache-{i}", [])))
            runs["beside"].append(_timed(best_of, _call(exe, home, session, home / f"beside-{i}", history)))
        files = sum(1 for p in (real / ".gemini").rglob("*.json*"))
        return _report(runs, len(extra), len(original), files, event_mb)


def _report(
    runs: dict[str, list[tuple[Any, float]]], appended: int, size: int, files: int, event_mb: float
) -> tuple[list[tuple[str, Any, str]], list[str]]:
    best = {name: scenarios.best_run([m for m, _ in found]) for name, found in runs.items()}
    cpu = {name: min(c for _, c in found) for name, found in runs.items()}
    base, help_ = best["pass"], best["help"]

    def versus(name: str) -> str:
        m = best[name]
        return (f"cpu {cpu[name] * 1000:.0f} ms; {m.wall / base.wall:.1f}x python -c pass, "
                f"{m.wall / help_.wall:.2f}x ctxtool --help (wall, same rounds)")  # fmt: skip

    rows: list[tuple[str, Any, str]] = [
        ("python -c pass (guard rounds)", base, f"cpu {cpu['pass'] * 1000:.0f} ms"),
        ("ctxtool --help (guard rounds)", help_, f"cpu {cpu['help'] * 1000:.0f} ms"),
    ]
    verdicts = []
    warm = best["warm"]
    ok = warm.returncode == 0 and warm.stdout.strip() == b"{}"
    note = (f"{appended:,} bytes appended to {size / 1e6:.1f} MB, a {event_mb:.1f} MB event; "
            f"{versus('warm')}; target <= {WARM_TARGET_S * 1000:.0f} ms")  # fmt: skip
    rows.append(("ctxtool guard, 10 MB session grown by one request", warm if ok else None,
                 note if ok else f"failed: {warm.stderr[-300:]!r}"))  # fmt: skip
    verdicts.append(f"guard warm <= {WARM_TARGET_S * 1000:.0f} ms: {warm.wall * 1000:.0f} ms "
                    f"({cpu['warm'] * 1000:.0f} ms cpu) -> "
                    f"{'PASS' if ok and warm.wall <= WARM_TARGET_S else 'FAIL'}")  # fmt: skip

    def cold(name: str, what: str, note: str, target: float) -> None:
        """The row and verdict of a first call (``best[name]``), which answers with a JSON object."""
        m = best[name]
        ok = m.returncode == 0 and m.stdout.strip().startswith(b"{")
        rows.append((f"ctxtool guard, {what}", m if ok else None,
                     f"{note}; {versus(name)}; target <= {target:.0f} s" if ok
                     else f"failed: {m.stderr[-300:]!r}"))  # fmt: skip
        verdicts.append(f"guard {what} <= {target:.0f} s: {m.wall:.2f} s -> "
                        f"{'PASS' if ok and m.wall <= target else 'FAIL'}")  # fmt: skip

    cold("first", "first call", f"{files} real session files, empty cache", FIRST_TARGET_S)
    beside = f"a {LONG_LINE_MB} MB one-line session beside, empty cache"
    cold("beside", "first call beside a 1 GB line", beside, BESIDE_TARGET_S)
    return rows, verdicts
