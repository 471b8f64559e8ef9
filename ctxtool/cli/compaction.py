"""What ``compact`` and ``compare`` share: the session files a batch works on, the summarizer ``--summarizer``
names, and the progress bar over the batch. Neither command imports the other."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ctxtool.cli import options
from ctxtool.common.errors import SummarizerError, UsageError
from ctxtool.compress.summarizer import ModelCall, Summarizer

if TYPE_CHECKING:
    from ctxtool.session.discover import Discovery, SessionPath


def check_summarizer(summarizer: str) -> None:
    """A usage error unless ``--summarizer`` names one of ctxtool's summarizers."""
    if summarizer not in ("offline", "gemini"):
        raise UsageError(f"--summarizer {summarizer!r} is not known", "Use offline or gemini")


def check_summarizer_model(summarizer: str, model: str | None) -> None:
    """A usage error for ``--summarizer-model`` where no model summarizes."""
    if summarizer == "offline" and model:
        raise UsageError(
            "--summarizer-model applies to --summarizer gemini",
            "Add --summarizer gemini, or drop --summarizer-model",
        )


def make_summarizer(
    summarizer: str,
    model: str | None,
    base_url: str | None,
    *,
    budget: int | None = None,
    keep_facts: bool = False,
) -> Summarizer:
    """A checked ``--summarizer``: offline (at most ``budget`` tokens), or the Gemini model, built at its
    first call (``LazySummarizer``), with the facts list appended when ``keep_facts``."""
    if summarizer == "offline":
        from ctxtool.compress.summarize.offline import OfflineSummarizer

        return OfflineSummarizer(token_budget=budget)

    def make() -> Summarizer:
        from ctxtool.compress.summarize.gemini_model import GeminiSummarizer

        return GeminiSummarizer(model=model, base_url=base_url)

    summ: Summarizer = LazySummarizer(make)
    if keep_facts:
        from ctxtool.compress.summarize.offline import KeepFacts

        summ = KeepFacts(summ)
    return summ


class LazySummarizer:
    """Builds the real summarizer on the first model call, so a missing API key fails only the files that
    need a model (a NOOP does not) and fails each of them with the same one-line error."""

    name = "gemini"
    deterministic = False

    def __init__(self, factory: Callable[[], Summarizer]) -> None:
        self._factory = factory
        self._inner: Summarizer | None = None
        self._error: SummarizerError | None = None

    def generate(self, call: ModelCall) -> str | None:
        if self._error is not None:
            raise self._error
        if self._inner is None:
            try:
                self._inner = self._factory()
            except SummarizerError as exc:
                self._error = exc
                raise
        return self._inner.generate(call)

    def close(self) -> None:
        _close(self._inner)


def session_files(paths: list[str], filters: dict[str, Any]) -> tuple[Discovery, list[SessionPath]]:
    """What PATHS name (files, folders, globs, session ids), without the backups ``--in-place`` leaves and
    the sessions the filters drop. Each entry that could not be examined is named on stderr; PATHS that name
    no session file at all, with nothing missing or unreadable, are a usage error."""
    from ctxtool.compact import is_backup
    from ctxtool.session.discover import discover, resolve_session_args

    found = discover(resolve_session_args(paths))
    sources = options.filter_sources([sp for sp in found.files if not is_backup(sp.path)], filters)
    for path, _, message in found.unreadable:
        print(f"Error: {path}: {message}", file=sys.stderr)
    if not sources and not found.missing and not found.unreadable:
        raise UsageError(f"no session files in {', '.join(paths)}", "Pass session files or a chats/ folder")
    return found, sources


@contextmanager
def batch(summarizer: Summarizer, total: int, label: str) -> Iterator[Callable[[str], None]]:
    """A batch of ``total`` sessions: yields the step of its progress bar on stderr (shown where
    ``options.progress_wanted``, for more than one session), called with each session's file name once it
    is done. However the batch ends, the bar is gone and the summarizer closed afterwards."""
    bar: Any = None
    if options.progress_wanted() and total > 1:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"))
        bar = Progress(*columns, console=Console(stderr=True), transient=True)
        bar.start()
        task = bar.add_task("", total=total)

    def advance(name: str) -> None:
        if bar is not None:
            bar.update(task, advance=1, description=name)

    try:
        yield advance
    finally:
        if bar is not None:
            bar.stop()
        _close(summarizer)


def _close(summarizer: object) -> None:
    close = getattr(summarizer, "close", None)
    if callable(close):
        close()
