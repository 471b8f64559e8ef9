"""ctxtool: token usage per turn, compaction replay, diffs and CI budgets for Gemini CLI sessions.

The library is the product; the CLI is a client of it. Heavy modules (polars frames, the compression port)
are imported on first use so that ``import ctxtool`` stays cheap.

Imports nothing, not even ``typing``: the console script imports this package before ``ctxtool.__main__`` can
install the signal handlers, and until then Ctrl-C ends the run with a traceback
(``ctxtool.common.interrupt``).
"""

TYPE_CHECKING = False  # (mypy reads any name TYPE_CHECKING as typing's)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ctxtool.frames.build import load
    from ctxtool.frames.model import Corpus
    from ctxtool.frames.query import report
    from ctxtool.session.read import SessionFile, read_session

__all__ = ["Corpus", "SessionFile", "__version__", "load", "read_session", "report"]

_LAZY = {
    "Corpus": "ctxtool.frames",
    "load": "ctxtool.frames",
    "report": "ctxtool.frames",
    "SessionFile": "ctxtool.session.read",
    "read_session": "ctxtool.session.read",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxtool' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
