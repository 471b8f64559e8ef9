"""Write ``ctxtool/measure/rates_snapshot.json``, the rates shipped in the package, from the installed
genai-prices (``make rates``).

Run it after upgrading genai-prices (a first run then asks the library again until it is run: see
``ctxtool.measure.pricing``), after the dates the snapshot holds have passed, or when Gemini CLI names a new
model. The names it covers: every ``google`` model of genai-prices
(``ctxtool.measure.rates_snapshot.build``), the model names of Gemini CLI 0.61.0 as ctxtool ports them
(``ctxtool.compress.gemini_cli.model_configs``), the names recorded in the fixtures, in
``../shared/real-sessions`` (when present) and in any PATH given, and the names of the snapshot it replaces
(so that a run without the real sessions loses none).

Usage: ``python bench/rates_snapshot.py [PATH ...] [--check]``; ``--check`` writes nothing and exits 1 when
the file differs from what it would write.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from datetime import UTC, date, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
REAL_SESSIONS = REPO.parent / "shared" / "real-sessions"

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from ctxtool.measure import pricing, rates_snapshot  # noqa: E402


def gemini_cli_names() -> set[str]:
    """Every model name (and routing alias) of Gemini CLI 0.61.0's ``config/models.ts`` and
    ``defaultModelConfigs.ts``, as ported in ``model_configs``: its constants and its aliases' models."""
    from ctxtool.compress.gemini_cli import chat_compression, model_configs

    constants = {v for k, v in vars(model_configs).items() if k.lstrip("_").isupper() and isinstance(v, str)}
    aliased = {model for _, _, model in model_configs._ALIASES.values() if model}
    return constants | aliased | set(chat_compression.COMPRESSION_ALIAS_MODELS.values())


def session_paths() -> list[Path]:
    """The fixtures and the real sessions (each file: their names are not Gemini CLI's)."""
    paths = [FIXTURES]
    if REAL_SESSIONS.is_dir():
        paths += sorted(p for p in REAL_SESSIONS.iterdir() if p.suffix in (".json", ".jsonl"))
    return paths


def session_names(paths: Iterable[Path]) -> set[str]:
    """The model names recorded in the sessions under ``paths``, as ctxtool reads them."""
    from ctxtool.frames.loading import load_corpus

    targets = list(paths)
    if not targets:
        return set()
    corpus, _ = load_corpus(targets, cache=False)
    return set(corpus.messages.get_column("model").drop_nulls().unique().to_list())


def previous_names(path: Path = pricing.SNAPSHOT_PATH) -> set[str]:
    try:
        return set(json.loads(path.read_bytes())["names"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def wanted_names(extra: Iterable[Path] = ()) -> set[str]:
    return gemini_cli_names() | session_names([*session_paths(), *extra]) | previous_names()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "paths", nargs="*", type=Path, help="more session files or folders to take names from"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped snapshot is not current")
    parser.add_argument("--day", type=date.fromisoformat, default=None, help="generation day (default today)")
    args = parser.parse_args(argv)
    day = args.day or datetime.now(tz=UTC).date()
    doc = rates_snapshot.build(wanted_names(args.paths), day)
    target = pricing.SNAPSHOT_PATH
    if args.check:
        try:
            current = json.loads(target.read_bytes())
        except (OSError, ValueError):
            current = None
        same = current is not None and {**current, "generated": None} == {**doc, "generated": None}
        print(f"{target}: {'current' if same else 'out of date: run `make rates`'}")
        return 0 if same else 1
    rates_snapshot.write(doc, target)
    windows = ", ".join(f"{w['from'] or '…'} to {w['until'] or '…'}" for w in doc["windows"])
    where = target.relative_to(REPO)
    print(f"wrote {where}: {len(doc['names'])} names under {doc['source']}; windows {windows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
