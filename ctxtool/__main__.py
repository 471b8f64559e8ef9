"""``python -m ctxtool`` and the ``ctxtool`` console script.

The signal handlers go in first, before any other import (typer, rich and polars take most of a second to
import), so that Ctrl-C at any moment ends the run with one line and status 130, never a traceback
(``ctxtool.common.interrupt``, which says what is left before this line runs).
"""

from ctxtool.common import interrupt

interrupt.install()


def main() -> None:
    import sys

    args = sys.argv[1:]
    if args[:1] == ["guard"] and not {"--help", "-h"} & set(args):
        # Before every model call of Gemini CLI: answered without typer (ctxtool.hooks.guard), never status 2.
        import os

        from ctxtool.hooks.guard import main as guard

        answered = guard(args[1:])
        sys.stdout.flush()
        os._exit(answered)
    from ctxtool.common import pipes

    pipes.install()  # `ctxtool … | head`: the run ends quietly, with its own status
    from ctxtool.frames import replay

    code = replay.try_replay(sys.argv[1:])  # a warm `stats` over unchanged files: no heavy import at all
    if code is not None:
        import os

        os._exit(code)
    from ctxtool.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
