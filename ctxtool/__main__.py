"""``python -m ctxtool``."""

from ctxtool.cli import main

if __name__ == "__main__":
    main()
