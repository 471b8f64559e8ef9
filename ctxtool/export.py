"""History that outlives Gemini CLI: the frames as a hive-partitioned Parquet dataset, appended run by run.

Owns: the on-disk layout ``DIR/<table>/project=<p>/day=<YYYY-MM-DD>/part-<run>.parquet`` for the tables
sessions, messages, requests, tool_calls and turns, the manifest ``DIR/_ctxtool_manifest.json`` (which parts
are live, which sessions are in, with what content fingerprint, and one entry per run that changed
something), and reading a dataset back into a :class:`~ctxtool.frames.model.Corpus`. Must not: read session
files (callers hand over a Corpus), print, or import typer or rich.

Rules that keep the dataset correct:

* ``project`` and ``day`` are partition columns (the hive convention): they live in the directory names,
  not in the files, so DuckDB, Spark and polars see them as columns. Directory names percent-encode the
  characters hive readers treat specially; the manifest keeps the exact value for ctxtool's own reader.
* A session is written again only when its fingerprint changed (Gemini CLI appended to it, a rewind,
  new prices). Its old rows are removed by rewriting the parts that held them: new parts are written
  first (to a hidden temporary name, then renamed), then the manifest, then superseded parts are deleted.
  A run that fails (a full disk, Ctrl-C) removes the parts it wrote before it reports, so a reader that
  globs the files (DuckDB, polars) never counts a part the manifest does not list; a run killed outright
  leaves the previous manifest valid, and the next run removes its leftovers (temporary files, unlisted
  parts) and goes on, a first run included. ``load_dataset`` reads only the parts the manifest lists.
* One run at a time: a run waits (up to ``wait`` seconds) for the dataset's lock instead of giving up.
* Sessions absent from a run's input (Gemini CLI's 30-day retention deleted the file) stay in the dataset.
* The pending list ``DIR/.ctxtool-pending/``: one small file per session an archive hook is adding, written
  before it waits for the lock and removed once the session is in, so that a session a hook could not add
  (no turn within its time, a full disk, the hook killed) is added by the next archive or export. Each
  entry is held locked by the process working on it; only entries nobody holds are taken over.

polars and the frames module are imported inside the functions that need them, so that ``ctxtool stats``
can call :func:`is_dataset` without paying for polars before its worker processes start.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import orjson

from ctxtool import __version__
from ctxtool.common.errors import CtxtoolError, OutputError, UsageError
from ctxtool.session.discover import DATASET_MANIFEST, is_dataset

if TYPE_CHECKING:
    import polars as pl

    from ctxtool.frames.model import Corpus

MANIFEST_NAME = DATASET_MANIFEST  # (ctxtool.session.discover, so that stats tells a dataset cheaply)
DATASET_FORMAT = "ctxtool-dataset"
DATASET_SCHEMA_VERSION = 1
TABLES: tuple[str, ...] = ("sessions", "messages", "requests", "tool_calls", "turns")
PARTITION_COLUMNS: tuple[str, ...] = ("project", "day")
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # what hive, Spark, DuckDB and polars read back as NULL
_LOCK_NAME = ".ctxtool-export.lock"
_PENDING_DIR = ".ctxtool-pending"
PENDING_FORMAT = "ctxtool-pending"
EXPORT_WAIT = 600.0  # seconds a run waits for another run to finish: a large first export takes minutes
# ctxtool.session.write.temp_beside's names (TEMP_MARK), for the manifest; that module is imported only when
# writing, so `ctxtool stats` does not pay for it.
_TEMP_MANIFEST = re.compile(r"^\." + re.escape(MANIFEST_NAME) + r"\.ctxtool-tmp-\d+-[A-Za-z0-9_]+\.tmp$")
# Characters Spark's ExternalCatalogUtils.escapePathName percent-encodes, plus the ones Windows forbids.
_HIVE_SPECIAL = frozenset("\"#%'*/:=?\\{[]^<>|\x7f")
_MAX_DIR_BYTES = 200  # file systems allow 255 bytes per name; keep room for "project="


# --- the manifest, as it is on disk -----------------------------------------------------------------


class PartEntry(TypedDict):
    path: str  # relative to the dataset directory, "/"-separated
    table: str
    project: str  # exact value (the directory name is an encoding of it)
    day: str | None  # YYYY-MM-DD (UTC), None for rows without a timestamp
    rows: int
    sessions: list[str]  # session keys with rows in this part
    run: int


class SessionEntry(TypedDict):
    fingerprint: str
    project: str
    session_id: str | None
    file: str
    run: int  # the run that wrote its current rows


class RunEntry(TypedDict):
    run: int
    at: str
    ctxtool_version: str
    added: int
    replaced: int
    unchanged: int
    retained: int
    prompts: bool
    rows: dict[str, int]


class Manifest(TypedDict):
    format: str
    schema_version: int
    ctxtool_version: str
    tables: list[str]
    partitioning: list[str]
    sessions: dict[str, SessionEntry]
    parts: list[PartEntry]
    runs: list[RunEntry]


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What one export run did."""

    directory: Path
    run: int | None  # None when nothing changed (the dataset was left as it was)
    added: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    unchanged: int = 0
    retained: int = 0  # in the dataset but not in this run's input (deleted by Gemini CLI, or not asked for)
    sessions: int = 0  # in the dataset after the run
    rows: dict[str, int] = field(default_factory=dict)  # rows written for added/replaced sessions
    parts_written: int = 0
    parts_removed: int = 0
    leftovers_removed: int = 0  # files an interrupted run had left (temporary files, parts no manifest lists)


# --- small pure helpers --------------------------------------------------------------------------------


def hive_escape(value: str | None) -> str:
    """A partition value as a directory-name-safe string that hive readers decode back to ``value``.

    ASCII characters that hive, Spark or Windows treat specially (and control characters) become ``%XX``;
    other characters, non-ASCII included, stay as they are (DuckDB and polars decode UTF-8 ``%XX``, Spark
    only single bytes, so escaping non-ASCII would garble it there). A name too long for a file system is
    cut and given a hash suffix; ctxtool's own reader takes the exact value from the manifest.
    """
    if value is None or value == "":
        return NULL_PARTITION

    def enc(text: str) -> str:
        return "".join(f"%{ord(c):02X}" if c in _HIVE_SPECIAL or ord(c) < 0x20 else c for c in text)

    out = enc(value)
    if len(out.encode()) <= _MAX_DIR_BYTES:
        return out
    digest = hashlib.sha256(value.encode()).hexdigest()[:12]
    cut = value
    while len(enc(cut).encode()) > _MAX_DIR_BYTES - 13:
        cut = cut[: len(cut) * 9 // 10]
    return f"{enc(cut)}~{digest}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _empty_manifest() -> Manifest:
    return {
        "format": DATASET_FORMAT,
        "schema_version": DATASET_SCHEMA_VERSION,
        "ctxtool_version": __version__,
        "tables": list(TABLES),
        "partitioning": list(PARTITION_COLUMNS),
        "sessions": {},
        "parts": [],
        "runs": [],
    }


def read_manifest(directory: str | Path) -> Manifest:
    """The manifest of a dataset; a clear error when it is missing, damaged or from a newer ctxtool."""
    path = Path(directory) / MANIFEST_NAME
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise UsageError(
            f"{directory} is not a ctxtool dataset (no {MANIFEST_NAME})",
            "Create one with: ctxtool export --to DIR",
        ) from None
    except orjson.JSONDecodeError as exc:
        raise CtxtoolError(
            f"{path} is not valid JSON ({exc})",
            "Restore it from a backup, or export the sessions again into a new directory",
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != DATASET_FORMAT:
        raise CtxtoolError(f"{path} is not a ctxtool dataset manifest", "Point --to at another directory")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > DATASET_SCHEMA_VERSION:
        raise CtxtoolError(
            f"{directory} was written by a newer ctxtool (dataset schema_version {version})",
            f"Upgrade ctxtool (this is {__version__}, which reads schema_version {DATASET_SCHEMA_VERSION})",
        )
    manifest: Manifest = doc  # type: ignore[assignment]  # checked above: our own format
    return manifest


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    from ctxtool.session.write import atomic_write

    atomic_write(path, data)


@contextmanager
def _locked(directory: Path, wait: float, on_wait: Callable[[], object] | None) -> Iterator[None]:
    """Hold an exclusive lock on the dataset so two exports cannot interleave (released if we crash),
    waiting up to ``wait`` seconds for a run that holds it; ``on_wait`` is called once if we wait."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks, run one export at a time
        yield
        return
    try:
        fh = open(directory / _LOCK_NAME, "a+b")  # noqa: SIM115 - closed below, after the unlock
    except OSError as exc:
        raise OutputError(directory, exc) from exc
    with fh:
        _acquire(fh.fileno(), directory, wait, on_wait)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _acquire(fd: int, directory: Path, wait: float, on_wait: Callable[[], object] | None) -> None:
    """Take the lock on ``fd`` within ``wait`` seconds. Polled rather than blocking, so that the wait has a
    deadline; the pause grows to 0.1 s with jitter, which keeps eight hooks waiting at once cheap and fair
    enough (a run takes a fraction of a second)."""
    import fcntl
    import random
    import time

    deadline = time.monotonic() + max(wait, 0.0)
    pause = 0.005
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            raise CtxtoolError(
                f"another ctxtool export has been writing {directory} for {wait:.3g} s"
                if wait > 0
                else f"another ctxtool export is writing {directory}",
                "Wait for it to finish and run again, or let this run wait longer (--wait SECONDS)",
            )
        if not told and on_wait is not None:
            on_wait()
            told = True
        time.sleep(min(left, pause * random.uniform(0.5, 1.0)))
        pause = min(pause * 2, 0.1)


# --- fingerprints and partitions ---------------------------------------------------------------------


def fingerprints(corpus: Corpus) -> dict[str, str]:
    """A content fingerprint per session key: changes whenever any row exported for the session would.

    Built from the session's row (counts, token sums, cost, last timestamp, live messages, rewinds) and
    sums over its messages and tool calls, so an appended message, a rewind or a changed price all show.
    """
    import polars as pl

    msg = corpus.messages.group_by("session_key").agg(
        pl.len().alias("n"),
        pl.col("live").sum().alias("live"),
        pl.col("text_chars").sum().alias("chars"),
        pl.col("content_bytes").sum().alias("bytes"),
        pl.col("timestamp").max().alias("last"),
        pl.col("total").sum().alias("total"),
    )
    tools = corpus.tool_calls.group_by("session_key").agg(
        pl.len().alias("n"), pl.col("result_bytes").sum().alias("bytes"), pl.col("live").sum().alias("live")
    )
    by_msg = {r.pop("session_key"): r for r in msg.iter_rows(named=True)}
    by_tool = {r.pop("session_key"): r for r in tools.iter_rows(named=True)}
    out: dict[str, str] = {}
    for row in corpus.sessions.iter_rows(named=True):
        key = row["session_key"]
        blob = orjson.dumps(
            [row, by_msg.get(key), by_tool.get(key)],
            default=str,
            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
        )
        out[key] = "sha256:" + hashlib.sha256(blob).hexdigest()
    return out


def _day_expr(table: str) -> pl.Expr:
    """The UTC day a row belongs to: request/message time, turn start, tool-call time, session start."""
    import polars as pl

    if table in ("requests", "messages"):
        return pl.col("ts").dt.date()
    if table == "turns":
        return pl.col("start").dt.date()
    if table == "sessions":
        return pl.col("start").dt.date()
    return pl.col("timestamp").str.to_datetime(time_zone="UTC", strict=False).dt.date()


def _with_partitions(table: str, df: pl.DataFrame, projects: pl.DataFrame) -> pl.DataFrame:
    """``df`` plus string columns ``_project`` and ``_day`` (None when unknown)."""
    import polars as pl

    if "project" in df.columns:
        df = df.with_columns(_project=pl.col("project"))
    else:  # messages carry only the session key
        mapping = dict(projects.iter_rows())
        df = df.with_columns(
            _project=pl.col("session_key").replace_strict(mapping, default=None, return_dtype=pl.String)
        )
    return df.with_columns(_day=_day_expr(table).dt.strftime("%Y-%m-%d"))


def _redact_secrets(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """The text columns with every secret written as ``[REDACTED:kind]`` (ctxtool.common.secret_scan)."""
    import polars as pl

    from ctxtool.common.secret_scan import redact

    text = {"messages": ["preview"], "turns": ["prompt"], "sessions": ["summary"]}.get(table, [])
    cols = [c for c in text if c in df.columns]
    return df.with_columns(
        [
            pl.Series(
                c, [None if v is None else redact(v) for v in df.get_column(c).to_list()], dtype=pl.String
            )
            for c in cols
        ]
    )


def _strip_for_privacy(table: str, df: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    text = {"messages": ["preview"], "turns": ["prompt"], "sessions": ["summary"]}.get(table, [])
    cols = [c for c in text if c in df.columns]
    return df.with_columns([pl.lit(None, dtype=pl.String).alias(c) for c in cols]) if cols else df


# --- export ------------------------------------------------------------------------------------------


def export_corpus(
    corpus: Corpus,
    to_dir: str | Path,
    *,
    prompts: bool = True,
    now: str | None = None,
    show_secrets: bool = False,
    wait: float = EXPORT_WAIT,
    on_wait: Callable[[], object] | None = None,
) -> ExportResult:
    """Add the sessions of ``corpus`` to the dataset at ``to_dir`` (created if needed).

    New sessions are appended; a session whose fingerprint changed since it was exported has its rows
    replaced; unchanged sessions are skipped, so running twice on the same input changes nothing (not even
    the manifest). ``prompts=False`` leaves out prompt text, message previews and session summaries for the
    sessions written in this run. While another run writes the dataset this one waits, up to ``wait``
    seconds (``on_wait`` is called once when it starts waiting). A file that cannot be written (a full disk,
    no permission) is an OutputError naming the cause, raised once this run's parts are removed again.
    """
    directory = Path(to_dir)
    _check_target(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(directory, exc) from exc
    with _locked(directory, wait, on_wait):
        manifest = read_manifest(directory) if is_dataset(directory) else _empty_manifest()
        repaired = _remove_leftovers(directory, manifest)

        changes = _Changes.of(fingerprints(corpus), manifest["sessions"])
        if not changes.added and not changes.replaced:
            if not is_dataset(directory):  # a first run with nothing to add still makes a dataset
                _write_manifest(directory, manifest)
            return ExportResult(
                directory,
                None,
                unchanged=changes.unchanged,
                retained=changes.retained,
                sessions=len(manifest["sessions"]),
                leftovers_removed=repaired,
            )
        opts = _Options(prompts, show_secrets, now)
        return _commit_run(directory, corpus, manifest, changes, opts, repaired)


@dataclass(frozen=True, slots=True)
class _Options:
    prompts: bool
    show_secrets: bool
    now: str | None


def _commit_run(
    directory: Path, corpus: Corpus, manifest: Manifest, changes: _Changes, opts: _Options, repaired: int
) -> ExportResult:
    """Write the run's parts, then the manifest (the commit point), then delete the parts it superseded.
    Until the commit, a failure removes the parts this run wrote before it propagates."""
    run = (manifest["runs"][-1]["run"] if manifest["runs"] else 0) + 1
    fresh: list[Path] = []  # parts this run renamed into place so far
    try:
        written = _write_tables(directory, corpus, manifest, changes, run, opts, fresh)
        live = [p for p in manifest["parts"] if p not in written.superseded] + written.parts
        live.sort(key=lambda p: p["path"])
        _record_run(manifest, corpus, changes, run, live, written.rows, now=opts.now, prompts=opts.prompts)
        _write_manifest(directory, manifest)
    except BaseException:
        _discard(directory, fresh)
        raise
    removed = _delete_superseded(directory, written.superseded, live)
    _prune_empty_dirs(directory)
    return ExportResult(
        directory,
        run,
        added=changes.added,
        replaced=changes.replaced,
        unchanged=changes.unchanged,
        retained=changes.retained,
        sessions=len(manifest["sessions"]),
        rows=written.rows,
        parts_written=len(written.parts),
        parts_removed=removed,
        leftovers_removed=repaired,
    )


def _discard(directory: Path, paths: list[Path]) -> None:
    """Remove the parts of a run that failed before its commit (best effort: the next run removes what is
    left, as it removes every part no manifest lists)."""
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            continue
    with suppress(OSError):
        _prune_empty_dirs(directory)


def _check_target(directory: Path) -> None:
    """Refuse a ``--to`` that is a file, or a directory holding something other than a dataset."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--to {directory} is a file", "Pass a directory (it is created if missing)")
    # Only ctxtool's own files (an interrupted first run's, a pending list) may be there already.
    foreign = _foreign(directory) if directory.is_dir() and not is_dataset(directory) else None
    if foreign is not None:
        raise UsageError(
            f"{directory} is not empty and holds no ctxtool dataset ({foreign.relative_to(directory)} is not "
            "ctxtool's)",
            "Pass a new or empty directory, or one an earlier ctxtool export wrote",
        )


def _foreign(directory: Path) -> Path | None:
    """The first file or folder in ``directory`` that ctxtool did not write, or None: the tables' folders
    with only partition folders and (temporary) parts in them, the lock, the pending list and a temporary
    manifest are ctxtool's."""
    for entry in sorted(directory.iterdir()):
        name = entry.name
        if name in (_LOCK_NAME, _PENDING_DIR) or _TEMP_MANIFEST.match(name):
            continue
        if name in TABLES and entry.is_dir():
            stray = _foreign_in_table(entry)
            if stray is None:
                continue
            return stray
        return entry
    return None


def _foreign_in_table(root: Path) -> Path | None:
    for path in sorted(root.rglob("*")):
        depth = len(path.relative_to(root).parts)
        if path.is_dir() and not path.is_symlink():
            ours = (depth, path.name.split("=", 1)[0]) in ((1, "project"), (2, "day"))
        else:
            ours = depth == 3 and path.is_file() and (_is_part(path.name) or _is_temp_part(path.name))
        if not ours:
            return path
    return None


def _is_part(name: str) -> bool:
    return name.startswith("part-") and name.endswith(".parquet")


def _is_temp_part(name: str) -> bool:
    return name.startswith(".part-") and name.endswith(".tmp")


@dataclass(frozen=True, slots=True)
class _Changes:
    """A run's input against the manifest: the sessions it writes, and how many it leaves as they are."""

    prints: dict[str, str]  # fingerprint per session key of the input
    added: tuple[str, ...]  # not in the dataset yet
    replaced: tuple[str, ...]  # in it with another fingerprint
    unchanged: int
    retained: int  # in the dataset, not in the input

    @classmethod
    def of(cls, prints: dict[str, str], known: dict[str, SessionEntry]) -> _Changes:
        added = sorted(k for k in prints if k not in known)
        replaced = sorted(k for k in prints if k in known and known[k]["fingerprint"] != prints[k])
        unchanged = len(prints) - len(added) - len(replaced)
        retained = sum(1 for k in known if k not in prints)
        return cls(prints, tuple(added), tuple(replaced), unchanged, retained)

    @property
    def write(self) -> set[str]:
        """The sessions whose rows this run writes."""
        return set(self.added) | set(self.replaced)


@dataclass(frozen=True, slots=True)
class _Written:
    """The parts one run wrote, the parts they supersede, and the rows written per table."""

    parts: list[PartEntry]
    superseded: list[PartEntry]
    rows: dict[str, int]


def _write_tables(
    directory: Path,
    corpus: Corpus,
    manifest: Manifest,
    changes: _Changes,
    run: int,
    opts: _Options,
    fresh: list[Path],
) -> _Written:
    """Write the rows of the added and replaced sessions, table by table, with the rows of other sessions
    that share a superseded part. Each part is added to ``fresh`` once it is in place."""
    import polars as pl

    gone = set(changes.replaced)
    write_list = pl.Series(sorted(changes.write), dtype=pl.String).implode()
    projects = corpus.sessions.select("session_key", "project")

    new_parts: list[PartEntry] = []
    superseded: list[PartEntry] = []
    rows: dict[str, int] = {}
    for table in TABLES:
        frame: pl.DataFrame = getattr(corpus, table)
        new = frame.filter(pl.col("session_key").is_in(write_list))
        if not opts.prompts:
            new = _strip_for_privacy(table, new)
        elif not opts.show_secrets:
            new = _redact_secrets(table, new)
        rows[table] = new.height
        new = _with_partitions(table, new, projects)
        old_parts = [p for p in manifest["parts"] if p["table"] == table and gone & set(p["sessions"])]
        superseded.extend(old_parts)
        kept = [_read_part(directory, p, keep_project=False) for p in old_parts]
        kept = [
            k.filter(~pl.col("session_key").is_in(pl.Series(sorted(gone), dtype=pl.String).implode()))
            for k in kept
        ]
        new_parts.extend(_write_partitions(directory, table, run, new, kept, old_parts, fresh))
    return _Written(new_parts, superseded, rows)


def _record_run(
    manifest: Manifest,
    corpus: Corpus,
    changes: _Changes,
    run: int,
    live: list[PartEntry],
    rows: dict[str, int],
    *,
    now: str | None,
    prompts: bool,
) -> None:
    """Enter the run in ``manifest``: the sessions it wrote, the live parts, the run itself."""
    import polars as pl

    known = manifest["sessions"]
    for key in changes.write:
        srow = corpus.sessions.filter(pl.col("session_key") == key).row(0, named=True)
        known[key] = {
            "fingerprint": changes.prints[key],
            "project": srow["project"],
            "session_id": srow["session_id"],
            "file": srow["file"],
            "run": run,
        }
    manifest["sessions"] = dict(sorted(known.items()))
    manifest["parts"] = live
    manifest["ctxtool_version"] = __version__
    manifest["runs"].append(
        {
            "run": run,
            "at": now or _now(),
            "ctxtool_version": __version__,
            "added": len(changes.added),
            "replaced": len(changes.replaced),
            "unchanged": changes.unchanged,
            "retained": changes.retained,
            "prompts": prompts,
            "rows": rows,
        }
    )


def _write_manifest(directory: Path, manifest: Manifest) -> None:
    _write_bytes_atomic(directory / MANIFEST_NAME, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))


def _delete_superseded(directory: Path, superseded: list[PartEntry], live: list[PartEntry]) -> int:
    """Delete the superseded parts no longer live; how many were deleted."""
    live_paths = {p["path"] for p in live}
    removed = 0
    for part in superseded:
        if part["path"] not in live_paths:
            try:
                (directory / part["path"]).unlink(missing_ok=True)
            except OSError as exc:  # the run is in; the next run removes the part (no manifest lists it)
                raise OutputError(directory, exc) from exc
            removed += 1
    return removed


def _write_partitions(
    directory: Path,
    table: str,
    run: int,
    new: pl.DataFrame,
    kept: list[pl.DataFrame],
    old_parts: list[PartEntry],
    fresh: list[Path],
) -> list[PartEntry]:
    """One new part per (project, day): the new rows plus the surviving rows of superseded parts there."""
    import polars as pl

    groups: dict[tuple[str, str | None], list[pl.DataFrame]] = {}
    for part, df in zip(old_parts, kept, strict=True):
        if df.height:
            groups.setdefault((part["project"], part["day"]), []).append(df)
    if new.height:
        for (project, day), df in new.group_by("_project", "_day", maintain_order=True):
            groups.setdefault((str(project), None if day is None else str(day)), []).append(
                df.drop("_project", "_day", "project", strict=False)
            )
    out: list[PartEntry] = []
    for (project, day), frames in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        df = pl.concat(frames, how="diagonal_relaxed")
        rel = f"{table}/project={hive_escape(project)}/day={hive_escape(day)}/part-{run:05d}.parquet"
        target = directory / rel
        data = _parquet_bytes(df)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _put_part(target, data)
        except OSError as exc:
            raise OutputError(directory, exc) from exc
        fresh.append(target)
        keys = sorted(set(df.get_column("session_key").to_list()))
        out.append(
            {
                "path": rel,
                "table": table,
                "project": project,
                "day": day,
                "rows": df.height,
                "sessions": keys,
                "run": run,
            }
        )
    return out


def _parquet_bytes(df: pl.DataFrame) -> bytes:
    """The part's bytes, made in memory: polars reports a full disk as a ComputeError ("Invalid thrift:
    transport error"), while Python's own file writes raise the OSError that names it. A part is one project's
    rows of one day, so the copy is small; the bytes are those polars writes to a file."""
    import io

    buf = io.BytesIO()
    df.write_parquet(buf, compression="zstd", statistics=True)
    return buf.getvalue()


def _put_part(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` through a hidden temporary name (invisible to ``**/*.parquet`` globs until
    the rename), readable like any file the user writes."""
    from ctxtool.session.write import temp_beside  # only when writing: stats imports this module

    fd, tmp = temp_beside(target.parent, target.name)
    try:
        _write_bytes(fd, data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_bytes(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` and close it (an OSError such as ENOSPC propagates)."""
    with open(fd, "wb", closefd=True) as fh:
        fh.write(data)


def _remove_leftovers(directory: Path, manifest: Manifest) -> int:
    """Delete what an interrupted run left (called with the lock held, so no run is writing them): part files
    no manifest lists, temporary parts and temporary manifests. How many files were deleted."""
    live = {p["path"] for p in manifest["parts"]}
    stray = [directory / name for name in os.listdir(directory) if _TEMP_MANIFEST.match(name)]
    for table in TABLES:
        root = directory / table
        if not root.is_dir():
            continue
        for path in root.rglob("*"):
            if not path.is_file():
                continue
            rel = path.relative_to(directory).as_posix()
            if (_is_part(path.name) and rel not in live) or _is_temp_part(path.name):
                stray.append(path)
    try:
        for path in stray:
            path.unlink(missing_ok=True)
        _prune_empty_dirs(directory)
    except OSError as exc:
        raise OutputError(directory, exc) from exc
    return len(stray)


def _prune_empty_dirs(directory: Path) -> None:
    for table in TABLES:
        root = directory / table
        if not root.is_dir():
            continue
        for sub in sorted(
            (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            if not any(sub.iterdir()):
                sub.rmdir()


# --- the pending list: sessions an archive is adding, or could not add -------------------------------


@dataclass(eq=False, slots=True)
class PendingSession:
    """One entry of the pending list (``DIR/.ctxtool-pending/<name>.json``), held locked by this process.

    ``done()`` once the session is in the dataset (the entry is removed); ``release()`` otherwise (the entry
    stays for the next run). Both are safe to call again, and a process that dies releases it too.
    """

    path: Path
    files: tuple[str, ...]
    _fd: int | None

    def done(self) -> None:
        if self._fd is None:
            return
        with suppress(OSError):  # then the next run takes it again, and finds its session unchanged
            self.path.unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def note_pending(to_dir: str | Path, files: Sequence[str]) -> PendingSession:
    """Note the session made of ``files`` (absolute paths) in the pending list of the dataset at ``to_dir``,
    before trying to add it: whatever then happens to this process, the next archive or export adds it.

    Written atomically (a temporary name, fsync, rename) and locked before the rename, so that no other run
    takes it over while this one works on it. An OutputError when it cannot be written.
    """
    directory = Path(to_dir)
    _check_target(directory)
    folder = directory / _PENDING_DIR
    key = hashlib.sha256("\0".join(files).encode()).hexdigest()[:16]
    name = f"{key}-{os.getpid()}-{os.urandom(4).hex()}.json"
    doc = orjson.dumps({"format": PENDING_FORMAT, "files": list(files), "at": _now()})
    from ctxtool.session.write import temp_beside

    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_beside(folder, name)
    except OSError as exc:
        raise OutputError(directory, exc) from exc
    try:
        _lock_entry(fd)  # a new file: never contended
        view = memoryview(doc)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.replace(tmp, folder / name)
    except BaseException as exc:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OutputError(directory, exc) from exc
        raise
    return PendingSession(folder / name, tuple(files), fd)


def claim_pending(to_dir: str | Path) -> list[PendingSession]:
    """The entries of the pending list of ``to_dir`` that no running process holds, now held by this one (an
    empty list when there is none). A damaged entry comes back with no files, to be removed with the rest."""
    folder = Path(to_dir) / _PENDING_DIR
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    from ctxtool.session.write import clean_stale_temps

    clean_stale_temps(folder)  # an entry's writer killed before its rename
    claimed = (_claim(folder / n) for n in names if n.endswith(".json") and not n.startswith("."))
    return [entry for entry in claimed if entry is not None]


def pending_files(entries: Sequence[PendingSession]) -> list[str]:
    """The files of ``entries`` that still exist (Gemini CLI may have deleted a session since), each once."""
    return list(dict.fromkeys(f for e in entries for f in e.files if os.path.exists(f)))


def _claim(path: Path) -> PendingSession | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        # Not held by anyone, and not removed since we opened it (its owner finished meanwhile).
        if not _lock_entry(fd, block=False) or os.fstat(fd).st_nlink == 0:
            os.close(fd)
            return None
        with open(fd, "rb", closefd=False) as fh:
            data = fh.read()
    except OSError:
        os.close(fd)
        return None
    try:
        doc = orjson.loads(data)
        files = doc["files"] if doc.get("format") == PENDING_FORMAT else []
        paths = tuple(f for f in files if isinstance(f, str)) if isinstance(files, list) else ()
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
        paths = ()
    return PendingSession(path, paths, fd)


def _lock_entry(fd: int, *, block: bool = True) -> bool:
    """Lock a pending entry; False when another process holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: entries cannot be held; any run may take one over
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if block else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


# --- reading back ------------------------------------------------------------------------------------


def _read_part(directory: Path, part: PartEntry, *, keep_project: bool = True) -> pl.DataFrame:
    import polars as pl

    path = directory / part["path"]
    try:
        df = pl.read_parquet(path, hive_partitioning=False)
    except FileNotFoundError:
        raise CtxtoolError(
            f"{directory} is damaged: {part['path']}, listed in {MANIFEST_NAME}, is missing",
            "Restore the directory from a backup, or export the sessions again into a new directory",
        ) from None
    if keep_project:
        df = df.with_columns(project=pl.lit(part["project"], dtype=pl.String))
    return df


def load_dataset(directory: str | Path, *, subagents: bool = True) -> Corpus:
    """Read a dataset back as a Corpus, so every report works on it as on the sessions themselves.

    Only parts the manifest lists are read. Columns follow the current frames (a column an older export
    lacks comes back null). ``subagents=False`` leaves out subagent sessions.
    """
    import polars as pl

    from ctxtool import frames

    root = Path(directory)
    manifest = read_manifest(root)
    template = frames.build_corpus([])
    tables: dict[str, pl.DataFrame] = {}
    files = 0
    size = 0
    for table in TABLES:
        base: pl.DataFrame = getattr(template, table)
        parts = [p for p in manifest["parts"] if p["table"] == table]
        pieces = [base]
        for part in parts:
            pieces.append(_read_part(root, part, keep_project="project" in base.columns))
            files += 1
            size += (root / part["path"]).stat().st_size
        df = pl.concat(pieces, how="diagonal_relaxed")
        df = df.select(
            [
                pl.col(c).cast(dtype, strict=False) if c in df.columns else pl.lit(None, dtype=dtype).alias(c)
                for c, dtype in base.schema.items()
            ]
        )
        tables[table] = df.sort(_order(table), maintain_order=True, nulls_last=True)

    sessions = tables["sessions"]
    if not subagents:
        keep = sessions.filter(
            pl.col("parent_session_key").is_null() & (pl.col("kind") != "subagent")
        ).get_column("session_key")
        tables = {t: df.filter(pl.col("session_key").is_in(keep.implode())) for t, df in tables.items()}
        sessions = tables["sessions"]
    # A parent's subagent count follows the sessions now in the dataset (a child may have been added
    # in a later run than its parent, or deleted by Gemini CLI since).
    children = (
        sessions.filter(pl.col("parent_session_key").is_not_null())
        .group_by("parent_session_key")
        .agg(pl.len().alias("_n"))
    )
    tables["sessions"] = (
        sessions.join(children, left_on="session_key", right_on="parent_session_key", how="left")
        .with_columns(pl.col("_n").fill_null(0).cast(sessions.schema["subagents"]).alias("subagents"))
        .drop("_n")
    )
    corpus = frames.Corpus(
        tables["sessions"],
        tables["messages"],
        tables["requests"],
        tables["tool_calls"],
        tables["turns"],
        files_read=files,
        files_found=files,
        bytes_read=size,
    )
    corpus.broken_lines = int(corpus.sessions.get_column("broken_lines").sum() or 0)
    from ctxtool.frames.corpus import tally_of_frames

    corpus.tally = tally_of_frames(corpus)  # every report of it is the engine's, as of the sessions
    return corpus


def _order(table: str) -> list[str]:
    """Row order within a session, as the frames build it (reports and ``live_only`` rely on it)."""
    return {
        "sessions": ["session_key"],
        "messages": ["session_key", "position"],
        "requests": ["session_key", "position"],
        "tool_calls": ["session_key", "turn"],
        "turns": ["session_key", "turn"],
    }[table]
