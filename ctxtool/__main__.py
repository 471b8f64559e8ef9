"""``python -m ctxtool`` and the ``ctxtool`` console script.

The signal handlers go in first, before any other import (typer, rich and polars take most of a second to
import), so that Ctrl-C at any moment ends the run with one line and status 130, never a traceback
(``ctxtool.interrupt``).
"""

from ctxtool import interrupt

interrupt.install()


# polars' allocator (jemalloc, built with the ``_rjem_`` prefix) keeps freed pages for ten seconds by
# default, longer than a whole run: the frames a run builds and drops stay resident until it exits. Measured
# on a first `stats` of the bench corpus (peak RSS of the process tree, 4 runs each): default 239-247 MB;
# 10 ms 216-234 MB at the same wall time; 0 ms 210-214 MB, about 0.1 s slower (pages purged, then faulted
# again).
# Read once, when polars loads; a value the user set wins.
_POLARS_ALLOCATOR = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:10,muzzy_decay_ms:0")


def main() -> None:
    import os
    import sys

    os.environ.setdefault(*_POLARS_ALLOCATOR)

    from ctxtool import replay

    code = replay.try_replay(sys.argv[1:])  # a warm `stats` over unchanged files: no heavy import at all
    if code is not None:
        os._exit(code)
    from ctxtool.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
