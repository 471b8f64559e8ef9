"""``ctxtool report`` writes the same bytes for the same sessions on every machine: polars splits a large
``group_by`` across as many partitions as it has threads, and a sum of floats added in another order differs
in its last digits (0.075867 or 0.07586700000000002), so each thread count is tried in a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MODELS = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.0-flash")


def _home(root: Path, sessions: int = 40, requests: int = 60) -> Path:
    """Priced requests over days, models and projects: 2,400, enough for polars to use every thread."""
    chats = root / "gemini" / "tmp"
    for s in range(sessions):
        folder = chats / f"proj{s % 12:02d}" / "chats"
        folder.mkdir(parents=True, exist_ok=True)
        day = f"2026-05-0{1 + s % 9}"
        lines = [{"sessionId": f"s{s:03d}", "projectHash": f"h{s % 12}", "startTime": f"{day}T10:00:00.000Z"}]
        for r in range(requests):
            n = 1000 + (s * 7919 + r * 104729) % 90_000
            at = f"{day}T10:{r // 60:02d}:{r % 60:02d}"
            lines.append({"id": f"u{r}", "timestamp": f"{at}.000Z", "type": "user", "content": "go"})
            lines.append(
                {
                    "id": f"g{r}",
                    "timestamp": f"{at}.500Z",
                    "type": "gemini",
                    "content": "ok",
                    "model": MODELS[(s + r) % 3],
                    "tokens": {"input": n, "output": n % 997, "cached": n % 5003, "total": n + n % 997},
                }
            )
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (folder / f"session-{day}T10-00-s{s:03d}.jsonl").write_text(text, encoding="utf-8")
    return chats


def test_report_is_the_same_bytes_whatever_polars_thread_count(tmp_path: Path) -> None:
    chats = _home(tmp_path)
    pages = []
    for threads in (1, 2, 4):
        page = tmp_path / f"report-{threads}.html"
        done = subprocess.run(
            [sys.executable, "-m", "ctxtool", "report", str(chats), "--output", str(page), "--no-cache"],
            env={**os.environ, "POLARS_MAX_THREADS": str(threads)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        pages.append(page.read_bytes())
    assert pages[1] == pages[0]
    assert pages[2] == pages[0]
