"""``python -m ctxtool`` and the ``ctxtool`` console script.

The signal handlers go in first, before any other import (typer, rich and polars take most of a second to
import), so that Ctrl-C at any moment ends the run with one line and status 130, never a traceback
(``ctxtool.interrupt``).
"""

from ctxtool import interrupt

interrupt.install()


def main() -> None:
    from ctxtool.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
