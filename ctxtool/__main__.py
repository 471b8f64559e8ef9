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
    if args[:1] == ["stats"]:
        # No cyclic garbage collection in a `stats` run: start-up, the scan and the report make many objects
        # and no garbage cycles worth finding, and the run ends soon after (the scan already turned the
        # collector off in its workers and while reading: ctxtool.session.scan). Measured with gc.callbacks on
        # the bench corpus, `stats --no-cache`: 63 collections took 24-25 ms of this process's time, 9 ms of
        # them before the worker started and 15 ms after the scan (the first two after it turned the collector
        # back on went through every object the scan had made); `--by turn`, 56 ms. The peak memory did not
        # move (--by session, --by turn, --top, --live).
        import gc

        gc.disable()
    if args[:1] == ["guard"] and not {"--help", "-h"} & set(args):
        # Before every model call of Gemini CLI: answered without typer (ctxtool.hooks.guard), never status 2.
        import os

        from ctxtool.hooks.guard import main as guard

        answered = guard(args[1:])
        sys.stdout.flush()
        os._exit(answered)
    from ctxtool.common import pipes

    pipes.install()  # `ctxtool … | head`: the run ends quietly, with its own status
    from ctxtool import launch

    code = launch.try_replay(sys.argv[1:])  # a warm `stats` over unchanged files: no heavy import at all
    if code is not None:
        import os

        os._exit(code)
    if args[:1] == ["stats"]:
        launch.begin(args)  # a first run starts reading while the command is imported and parsed
    from ctxtool.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
