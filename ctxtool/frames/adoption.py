"""The head start's process, from the launcher that starts it to the scan that adopts it.

``ctxtool.launch.begin`` forks, before the command line is parsed, a process that reads the files a first
``stats`` will read (``ctxtool.session.headstart``), and hands it here (``hand``). The scan adopts it as its
worker (``take``) when it reads as that process does (``reader``); any other reading, or a run that ends
without one, stops it. Knows nothing of the command line. Standard library only at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.headstart import Reader, Started

_running: Started | None = None


def hand(started: Started | None) -> None:
    """Keep ``started`` (``ctxtool.session.headstart.start``'s process, if it started) for the scan."""
    global _running
    _running = started


def waiting() -> bool:
    """Whether a head start waits for its scan."""
    return _running is not None


def reader() -> Reader:
    """In the head start: what it reads with (the scan's ``then``), and how it hands each measure back."""
    from ctxtool.frames.tally import count_and_price, pack_measure

    return count_and_price, pack_measure  # type: ignore[return-value]


def take(then: Callable[[FileColumns], object] | None) -> Started | None:
    """The running head start, for a scan whose ``then`` is the one it reads with; None (and it is stopped)
    for any other scan. Once."""
    global _running
    started, _running = _running, None
    if started is None:
        return None
    from ctxtool.frames.tally import count_and_price, unpack_measure

    if then is not count_and_price:
        started.stop()
        return None
    started.unpack = unpack_measure
    return started


def discard() -> None:
    """Stop the head start if no scan adopted it (a run that ended early, or read otherwise)."""
    global _running
    started, _running = _running, None
    if started is not None:
        started.stop()
