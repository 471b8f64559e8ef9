"""``ctxtool cache``: where the incremental index lives, how big it is, and clearing it."""

from __future__ import annotations

from pathlib import Path

import typer

from ctxtool.cli.status import ExitStatus

cache_app = typer.Typer(
    help="Inspect or clear ctxtool's caches (the index of parsed sessions, kept outputs, resolved prices).",
    no_args_is_help=True,
)

_DIR_OPTION = typer.Option(
    None,
    "--cache-dir",
    metavar="DIR",
    envvar="CTXTOOL_CACHE_DIR",
    help="The cache directory (default: the platform's user cache directory).",
)


@cache_app.command("info", help="Print where the cache is and what it holds.")
def info(cache_dir: Path = _DIR_OPTION) -> int:
    from ctxtool.session.index import FileIndex, cache_root

    root = cache_root(cache_dir)
    index = FileIndex(root)
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0
    kept = len(list((root / "replay").glob("*.json"))) if (root / "replay").exists() else 0
    print(f"cache directory: {root}")
    print(f"indexed files:   {len(index):,}")
    print(f"kept outputs:    {kept}")
    print(f"size on disk:    {size / 1e6:,.1f} MB")
    return ExitStatus.OK


@cache_app.command("clear", help="Delete the cache; the next run reads every session file again.")
def clear(cache_dir: Path = _DIR_OPTION) -> int:
    from ctxtool.session.index import cache_root
    from ctxtool.session.index import clear as clear_cache

    root = cache_root(cache_dir)
    freed = clear_cache(root)
    print(f"cleared {root} ({freed / 1e6:,.1f} MB)")
    return ExitStatus.OK
