"""The rows of ``make bench`` for ``ctxtool guard``, the BeforeModel hook Gemini CLI runs before every model
call (run from ``bench/run.py``; not a test).

* warm, one record appended: a 10 MB session the guard saw at its previous call grew by one request; the
  guard reads only the new bytes (the index keeps where it stopped) and answers. Target: 100 ms.
* first call on a home of the real sessions: nothing in the cache yet. Target: 1 s.

Each call runs as Gemini CLI runs it: the console script, the hook event as JSON on standard input.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import scenarios  # a sibling script, not a package

WARM_TARGET_S = 0.1
FIRST_TARGET_S = 1.0


def _call(exe: str, home: Path, transcript: Path, cache: Path) -> list[str]:
    event = home / "event.json"
    request = {"model": "gemini-2.5-pro"}
    event.write_text(json.dumps({"session_id": "bench", "transcript_path": str(transcript),
                                 "hook_event_name": "BeforeModel", "llm_request": request}))  # fmt: skip
    args = f"--max-session-cost 1000 --max-daily-cost 5000 --cache-dir {cache}"
    return ["sh", "-c", f"GEMINI_CLI_HOME={home} exec {exe} guard {args} < {event}"]


def guard_scenarios(
    exe: str, repeat: int, best_of: Callable[..., Any]
) -> tuple[list[tuple[str, Any, str]], list[str]]:
    rows: list[tuple[str, Any, str]] = []
    verdicts: list[str] = []
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
        runs = []
        for i in range(repeat):
            session.write_bytes(original)
            cache = home / f"cache-{i}"
            best_of(1, _call(exe, home, session, cache))  # the previous call: the state and the index
            with session.open("ab") as fh:
                fh.write(extra)
            runs.append(best_of(1, _call(exe, home, session, cache)))
        warm = scenarios.best_run(runs)
        ok = warm.returncode == 0 and warm.stdout.strip() == b"{}"
        note = (f"{len(extra):,} bytes appended to {len(original) / 1e6:.1f} MB; target <= "
                f"{WARM_TARGET_S * 1000:.0f} ms")  # fmt: skip
        rows.append(("ctxtool guard, 10 MB session grown by one request", warm if ok else None,
                     note if ok else f"failed: {warm.stderr[-300:]!r}"))  # fmt: skip
        verdicts.append(f"guard warm <= {WARM_TARGET_S * 1000:.0f} ms: {warm.wall * 1000:.0f} ms -> "
                        f"{'PASS' if ok and warm.wall <= WARM_TARGET_S else 'FAIL'}")  # fmt: skip

        real = home / "real"
        real_chats = real / ".gemini" / "tmp" / "real" / "chats"
        real_chats.mkdir(parents=True)
        for f in scenarios.REAL.glob("*.json*"):
            shutil.copy2(f, real_chats / f.name)
        transcript = max(real_chats.iterdir(), key=lambda p: p.stat().st_size)
        firsts = [best_of(1, _call(exe, real, transcript, real / f"cache-{i}")) for i in range(repeat)]
        first = scenarios.best_run(firsts)
        files = len(list(real_chats.iterdir()))
        ok = first.returncode == 0 and first.stdout.strip().startswith(b"{")
        rows.append(("ctxtool guard, first call", first if ok else None,
                     f"{files} real session files, empty cache; target <= {FIRST_TARGET_S:.0f} s"
                     if ok else f"failed: {first.stderr[-300:]!r}"))  # fmt: skip
        verdicts.append(f"guard first call <= {FIRST_TARGET_S:.0f} s: {first.wall:.2f} s -> "
                        f"{'PASS' if ok and first.wall <= FIRST_TARGET_S else 'FAIL'}")  # fmt: skip
    return rows, verdicts
