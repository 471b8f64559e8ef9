"""A team's usage in one Parquet dataset: every machine writes its own objects, with no lock and no manifest.

Owns: the dataset's layout (``docs/dataset.md`` documents it and says why it holds), who wrote a row
(``identity``), what leaves a machine (``private_frames``: usage only unless ``--with-text``), writing a
machine's sessions (``export_corpus``) and reading a dataset back into a ``Corpus`` (``load_dataset``). Must
not: read session files (callers hand over a Corpus), print, or import typer or rich.

The layout, under a folder or a store URL (``ctxtool.store``)::

    _ctxtool_dataset.json                          what the dataset is (the same bytes from every writer)
    <table>/machine=<machine>/<session>.parquet    one object per table, machine and session

for the tables sessions, requests, turns, tool_calls and messages. ``<session>`` is 16 hex digits of a hash
of the machine and the session's place under the Gemini CLI data root, the same on every run. Why a reader
that knows nothing of ctxtool sees each billed request exactly once, at every instant:

* A request is in the objects of the session that billed it (the engine's rule: a copy of a message is not a
  new response), and a session's key depends on nothing that changes as it grows.
* An object is written whole, by one PUT (or a rename into place): a reader lists either the old object or
  the new one. No run ever writes a second object for the same session, so nothing is counted twice during
  a rewrite, after a writer is killed (what it had not written yet is as it was), or after re-runs.
* Only one machine writes under ``machine=<machine>``; two runs on one machine write the same bytes.

A run writes only the sessions whose fingerprint changed since this machine last wrote them (kept in
``<cache>/exports/``; without it, every session is written again, to the same keys). Sessions whose files
are gone (Gemini CLI's retention) stay in the dataset. Datasets of schema 1 (a folder with
``_ctxtool_manifest.json``, written by ctxtool before 0.2) are still read.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ctxtool import __version__
from ctxtool.common.digest import blake2b
from ctxtool.common.errors import CtxtoolError, OutputError, UsageError
from ctxtool.common.identity import Identity
from ctxtool.session.discover import DATASET_MANIFEST, DATASET_MARKER
from ctxtool.store import Store

if TYPE_CHECKING:
    import polars as pl

    from ctxtool.frames.loading import CacheUse
    from ctxtool.frames.model import Corpus
    from ctxtool.frames.tally import Tally
    from ctxtool.measure.usage import ExactSum

    Report = tuple[str | None, str | None]  # (--by, --timezone) of a report that sums requests

DATASET_FORMAT = "ctxtool-dataset"
DATASET_SCHEMA_VERSION = 2
# (sessions last: see export_corpus)
TABLES: tuple[str, ...] = ("messages", "tool_calls", "turns", "requests", "sessions")
_KEYS = ("session_key", "parent_session_key", "root_session_key")
# Text that leaves a machine only with --with-text (then with its secrets redacted, but for --show-secrets).
_TEXT = {"messages": ("preview",), "turns": ("prompt",), "sessions": ("summary",), "tool_calls": ("target",)}
_PATHS = ("file", "group_key", "project_dir")  # named relative to the data root, or by a hash
# Characters Spark's ExternalCatalogUtils.escapePathName percent-encodes, plus the ones Windows forbids.
_HIVE_SPECIAL = frozenset("\"#%'*/:=?\\{[]^<>|\x7f")
_BATCH = 2000
# What the reports that sum requests read of a dataset's session rows (``frames.tally``: warnings, read
# summary, hidden calls, totals, subagents; what filters match): half the time and memory of every column.
_SUMMED = ("session_key", "parent_session_key", "parent_ref", "project_dir", "kind", "file", "requests",
           "total", "project", "session_id", "session", "start", "end", "subagents", "hidden_requests",
           "hidden_cost", "broken_lines", "first_broken_line", "first_overlong_line", "invalid_utf8_lines",
           "first_invalid_utf8_line")  # fmt: skip


def hive_escape(value: str) -> str:
    """A partition value as a directory name that hive readers (Spark, DuckDB, polars) decode back to it: the
    ASCII characters they treat specially, and control characters, as ``%XX``; the rest as it is."""
    return "".join(f"%{ord(c):02X}" if c in _HIVE_SPECIAL or ord(c) < 0x20 else c for c in value)


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What one export run did."""

    target: str
    user: str
    machine: str
    written: tuple[str, ...] = ()  # session keys (of the dataset) written in this run
    unchanged: int = 0
    removed: int = 0  # sessions that merged into another (a resume's stray start): their objects deleted
    objects: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # rows written, per table
    with_text: bool = False


# --- what leaves the machine ---------------------------------------------------------------------------


def dataset_key(machine: str, place: str) -> str:
    """A session's key in a dataset: 16 hex digits of a hash of the machine and its place (``group_key``,
    the same for a legacy ``.json`` and the ``.jsonl`` Gemini CLI resumed it in)."""
    return blake2b(f"{machine}\0{place}".encode(), digest_size=8).hexdigest()


def relative_place(path: str | None, roots: Sequence[str]) -> str | None:
    """``path`` relative to the Gemini CLI data root that holds it (``<project>/chats/session-….jsonl``); a
    path under no root is named by a hash of its folder and its own name."""
    if not path or not os.path.isabs(path):
        return path  # (a name already: a project folder under the root)
    for root in roots:
        try:
            rel = os.path.relpath(path, root)
        except ValueError:  # another drive (Windows)
            continue
        if not rel.startswith(os.pardir):
            return Path(rel).as_posix()
    folder, name = os.path.split(path)
    return f"{hashlib.sha256(folder.encode()).hexdigest()[:12]}/{name}"


def project_name(project: str) -> str:
    """A project as the dataset names it: the last part of its root folder when Gemini CLI recorded one
    (``.project_root``: a local path), else the name it has (its folder under the data root)."""
    if "/" in project or "\\" in project:
        tail = project.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
        return tail or project
    return project


def private_frames(
    corpus: Corpus,
    who: Identity,
    roots: Sequence[str],
    *,
    with_text: bool = False,
    show_secrets: bool = False,
) -> dict[str, pl.DataFrame]:
    """The tables as they leave the machine: the dataset's session keys, paths relative to the data root,
    no text (unless ``with_text``: secrets redacted but for ``show_secrets``), ``user`` on each row."""
    import polars as pl

    from ctxtool.common.secret_scan import redact

    places = corpus.sessions.select("session_key", "group_key").rows()
    keys = {k: dataset_key(who.machine, relative_place(g or k, roots) or k) for k, g in places}
    out: dict[str, pl.DataFrame] = {}
    for table in TABLES:
        df: pl.DataFrame = getattr(corpus, table)
        swaps: list[pl.Expr] = [
            pl.col(c).replace_strict(keys, default=None, return_dtype=pl.String)
            for c in _KEYS
            if c in df.columns
        ]
        for c in _TEXT.get(table, ()):
            if not with_text:
                swaps.append(pl.lit(None, dtype=pl.String).alias(c))
            elif not show_secrets:
                swaps.append(pl.col(c).map_elements(redact, return_dtype=pl.String, skip_nulls=True))
        swaps += [_each_once(df, c, lambda p: relative_place(p, roots)) for c in _PATHS if c in df.columns]
        if "project" in df.columns:
            swaps.append(_each_once(df, "project", project_name))
        out[table] = df.with_columns(swaps).with_columns(user=pl.lit(who.user, dtype=pl.String))
    return out


def _each_once(df: pl.DataFrame, column: str, rename: Callable[[str], str | None]) -> pl.Expr:
    """``column`` with each value renamed, each distinct value once (a project names every request)."""
    import polars as pl

    names = {v: rename(v) for v in df.get_column(column).drop_nulls().unique().to_list()}
    return pl.col(column).replace_strict(names, default=None, return_dtype=pl.String)


def fingerprints(tables: Mapping[str, pl.DataFrame], salt: str) -> dict[str, str]:
    """A fingerprint per session key that changes whenever any row written for the session would: a hash of
    its rows in every table (and of ``salt``: the schema, the writer, whether text was kept)."""
    import polars as pl

    out: dict[str, hashlib._Hash] = {}
    for table in TABLES:
        df = tables[table]
        sums = df.group_by("session_key").agg(
            pl.len().alias("_n"), pl.struct(pl.all().exclude("session_key")).hash(7).sum().alias("_h")
        )
        for key, n, h in sums.iter_rows():
            digest = out.setdefault(key, hashlib.sha256(salt.encode()))
            digest.update(f"{table}:{n}:{h};".encode())
    return {k: d.hexdigest() for k, d in out.items()}


# --- writing -------------------------------------------------------------------------------------------


def export_corpus(
    corpus: Corpus,
    to: str | os.PathLike[str],
    who: Identity,
    *,
    roots: Sequence[str] = (),
    sources: Sequence[str] | None = None,
    with_text: bool = False,
    show_secrets: bool = False,
    state_dir: str | os.PathLike[str] | None = None,
    remember: bool = True,
) -> ExportResult:
    """Write the sessions of ``corpus`` that changed since this machine last wrote them into the dataset at
    ``to`` (a folder, created if missing, or a store URL). A failure (a full disk, an unreachable store) is a
    CtxtoolError naming the cause; what was written before it is in the dataset, whole. ``remember=False``
    (``--no-cache``): no state is read or kept, so every session is written (again)."""
    store = Store.at(to)
    _check_or_mark(store)
    tables = private_frames(corpus, who, [*roots], with_text=with_text, show_secrets=show_secrets)
    salt = f"{DATASET_SCHEMA_VERSION}\0{who.user}\0{with_text}\0{show_secrets}"
    prints = fingerprints(tables, salt)
    state = _State(state_dir, store, who.machine, remember)
    # (the frames keep their rows' order: a session's own file, by its key in the dataset)
    keys = tables["sessions"].get_column("session_key")
    files = dict(zip(keys, corpus.sessions.get_column("file"), strict=True))
    todo = sorted(k for k, p in prints.items() if state.sessions.get(k, {}).get("print") != p)
    parts = {t: tables[t].partition_by("session_key", as_dict=True) for t in TABLES} if todo else {}
    rows = dict.fromkeys(TABLES, 0)
    folder = hive_escape(who.machine)
    written: list[str] = []
    try:
        for key in todo:
            for table in TABLES:  # sessions last: ctxtool's reader counts a session once its rows are in
                if (df := parts[table].get((key,))) is None:
                    df = tables[table].clear()
                rows[table] += df.height
                store.put(f"{table}/machine={folder}/{key}.parquet", _parquet_bytes(df))
            state.sessions[key] = {"print": prints[key], "file": files.get(key)}
            written.append(key)
        read = [*(roots if sources is None else sources)]
        removed = _remove_merged(store, state, set(prints), folder, read)
    finally:
        state.save()
    unchanged, objects = len(prints) - len(todo), len(written) * len(TABLES)
    return ExportResult(
        str(store), who.user, who.machine, tuple(written), unchanged, removed, objects, rows, with_text
    )


def _remove_merged(store: Store, state: _State, now: set[str], folder: str, sources: list[str]) -> int:
    """Delete the objects of sessions this machine wrote that are no longer sessions of their own although
    this run read their file (a resume's stray start, now part of the session it resumed); sessions whose
    files are gone stay, and so do those this run did not read (an archive reads one session)."""
    gone = 0
    for key in sorted(set(state.sessions) - now):
        path = state.sessions[key].get("file")
        if not path or not os.path.exists(path) or not any(_within(path, s) for s in sources):
            continue
        for table in reversed(TABLES):
            store.delete(f"{table}/machine={folder}/{key}.parquet")
        del state.sessions[key]
        gone += 1
    return gone


def _within(path: str, source: str) -> bool:
    source = os.path.abspath(source)
    return path == source or path.startswith(source.rstrip(os.sep) + os.sep)


def _parquet_bytes(df: pl.DataFrame) -> bytes:
    """An object's bytes, made in memory: polars reports a full disk as a ComputeError, while the store's
    own write raises the error that names it."""
    import io

    buf = io.BytesIO()
    df.write_parquet(buf, compression="zstd", statistics=True)
    return buf.getvalue()


def _marker() -> bytes:
    doc = {"format": DATASET_FORMAT, "schema_version": DATASET_SCHEMA_VERSION, "tables": sorted(TABLES)}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def _check_or_mark(store: Store) -> None:
    """Make ``store`` a dataset (its marker: the same bytes from every writer, so writing it twice changes
    nothing), or check that it is one this ctxtool writes; refuse a folder that holds something else."""
    if (found := store.get(DATASET_MARKER)) is not None:
        _schema_of(store, found)
        return
    if not store.remote:
        if os.path.isfile(os.path.join(store.where, DATASET_MANIFEST)):
            raise UsageError(
                f"{store} is a dataset of schema 1 (written by ctxtool before 0.2), which this ctxtool reads "
                "but no longer writes",
                f"Export into a new folder or URL, e.g. ctxtool export --to {store}-v2 (stats reads both)",
            )
        if os.path.isdir(store.where) and _foreign(store.where):
            raise UsageError(
                f"{store} is a folder that is not a ctxtool dataset",
                "Pass --to a new or empty folder, or a dataset ctxtool wrote",
            )
        try:
            Path(store.where).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(store.where, exc) from exc
    store.put(DATASET_MARKER, _marker())


def _foreign(folder: str) -> list[str]:
    """What a folder holds that no writer of a dataset puts there (another writer may be making it one now:
    its marker's temporary file, its tables' folders)."""
    from ctxtool.session.write import TEMP_MARK

    return [n for n in os.listdir(folder) if n not in (*TABLES, DATASET_MARKER) and TEMP_MARK not in n]


def _schema_of(store: Store, marker: bytes) -> None:
    try:
        doc = orjson.loads(marker)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict) or doc.get("format") != DATASET_FORMAT:
        raise CtxtoolError(
            f"{store}: {DATASET_MARKER} is not a ctxtool dataset's", "Point at another dataset"
        )
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > DATASET_SCHEMA_VERSION:
        raise CtxtoolError(
            f"{store} was written by a newer ctxtool (dataset schema_version {version})",
            f"Upgrade ctxtool (this is {__version__}, which reads schema_version {DATASET_SCHEMA_VERSION})",
        )


class _State:
    """What this machine last wrote to a dataset: the fingerprint of each session (``<cache>/exports/``).
    Advisory: without it a run writes every session again, to the same keys; two runs at once on one machine
    may each save theirs, and the next run then writes a session again at worst."""

    def __init__(
        self, state_dir: str | os.PathLike[str] | None, store: Store, machine: str, remember: bool
    ) -> None:
        from ctxtool.session.stamp import cache_root

        name = blake2b(f"{store}\0{machine}".encode(), digest_size=12).hexdigest()
        self.path = cache_root(state_dir) / "exports" / f"{name}.json" if remember else None
        self.sessions: dict[str, dict[str, Any]] = {}
        self._store = str(store)
        with suppress(OSError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
            doc = orjson.loads(self.path.read_bytes()) if self.path is not None else {}
            if doc.get("dataset") == str(store) and doc.get("schema_version") == DATASET_SCHEMA_VERSION:
                self.sessions = dict(doc["sessions"])

    def save(self) -> None:
        from ctxtool.session.write import atomic_write

        if self.path is None:
            return
        doc = {"dataset": self._store, "schema_version": DATASET_SCHEMA_VERSION, "sessions": self.sessions}
        with suppress(CtxtoolError):  # advisory (see the class): the next run writes these sessions again
            atomic_write(self.path, orjson.dumps(doc))


# --- reading back ---------------------------------------------------------------------------------------


def load_dataset(
    where: str | os.PathLike[str],
    *,
    subagents: bool = True,
    sums: bool | tuple[str, str | None] = False,
    days: tuple[date | None, date | None] | None = None,
    filters: Mapping[str, Any] | None = None,
) -> Corpus:
    """Read a dataset (a folder or a store URL) back as a Corpus, so every report works on it as on the
    sessions themselves, with ``user`` and ``machine`` on every row. Columns follow the current frames (one an
    older export lacks comes back null). ``subagents=False`` leaves out subagent sessions.

    ``sums`` (True, or the report to make: ``(by, timezone)``, summed in the same scan): read only the
    sessions and, of the requests, what the reports that sum them read (their model, time, tokens and cost),
    not the largest tables: the corpus's other frames are empty, and its tally holds no message columns
    (enough for ``stats`` without a filter, ``--live`` or the turn and request grains).

    ``days`` (``--since``, ``--until``: UTC days, an open end None): of a session whose first and last times
    both fall outside them only its row is read, its other objects not (it holds nothing a view of those days
    keeps: ``frames.views.view`` drops a session with no message in them).

    ``filters`` (``StatsQuery.filters``, with ``sums`` of a report): the tally is narrowed as
    ``frames.views.view`` narrows one, where the requests are (``_narrowed_tally``)."""
    import polars as pl

    from ctxtool import frames
    from ctxtool.frames.corpus import tally_of_frames, tally_of_sessions

    store, schema_1 = _opened(where)
    template = frames.build_corpus([])
    if isinstance(sums, tuple):
        template.sessions = template.sessions.select(_SUMMED)
    tables, requests, files, size = _read_tables(
        store, template, schema_1=schema_1, sums=bool(sums), days=days
    )
    if not subagents:
        ids = _roots(tables["sessions"]).get_column("session_key").implode()
        tables = {t: df.filter(pl.col("session_key").is_in(ids)) for t, df in tables.items()}
    tables["sessions"] = _with_subagent_counts(tables["sessions"])
    if sums:
        tables["requests"] = template.requests
    t = tables
    corpus = frames.Corpus(t["sessions"], t["messages"], t["requests"], t["tool_calls"], t["turns"])
    corpus.files_read = corpus.files_found = files
    corpus.bytes_read = size
    corpus.broken_lines = int(corpus.sessions.get_column("broken_lines").sum() or 0)
    # Every report of it is the engine's, as of the sessions.
    if sums:
        by, timezone = sums if isinstance(sums, tuple) else (None, None)
        if filters is not None and any(filters.values()):
            corpus.tally = _narrowed_tally(store, corpus, requests, schema_1, (by, timezone), filters)
            return corpus
        present = corpus.sessions.get_column("session_key")
        summed = _RequestSums(store, [k for k, _ in requests], present, schema_1, (by, timezone), None)
        corpus.tally = tally_of_sessions(corpus.sessions, corpus, summed, summed.mismatches())
    else:
        corpus.tally = tally_of_frames(corpus)
    return corpus


def _opened(where: str | os.PathLike[str]) -> tuple[Store, bool]:
    """The dataset's store, and whether it is of schema 1 (a manifest, objects by project and day)."""
    store = Store.at(where)
    marker = store.get(DATASET_MARKER)
    if marker is None and not os.path.isfile(os.path.join(store.where, DATASET_MANIFEST)):
        raise UsageError(
            f"{store} is not a ctxtool dataset (no {DATASET_MARKER})",
            "Create one with: ctxtool export --to URL",
        )
    if marker is not None:
        _schema_of(store, marker)
    return store, marker is None


def _roots(sessions: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    return sessions.filter(pl.col("parent_session_key").is_null() & (pl.col("kind") != "subagent"))


def dataset_families(
    where: str | os.PathLike[str], *, subagents: bool = True, filters: Mapping[str, Any] | None = None
) -> Iterator[Corpus]:
    """``load_dataset`` a few thousand sessions at a time, for a command that checks each session apart
    (``audit``): each corpus holds whole families (a session and its subagents: one ``root_session_key``),
    each table read of those sessions alone, and what was read for them (the first, also the sessions' own
    objects). Of ``filters`` (``StatsQuery.filters``), ``--project`` and ``--session`` are matched over the
    whole dataset first (an ambiguous prefix is an error before any batch), and a session outside
    ``--since``/``--until`` is not read; the caller still filters each corpus. A dataset of schema 1 (its
    objects by project and day) comes whole."""
    import polars as pl

    from ctxtool import frames
    from ctxtool.frames.corpus import tally_of_frames, tally_of_sessions
    from ctxtool.frames.views import kept_keys

    store, schema_1 = _opened(where)
    if schema_1:
        yield load_dataset(where, subagents=subagents)
        return
    template = frames.build_corpus([])
    listed = {t: _objects(store, t, False) for t in TABLES}
    first = [k for k, _ in listed["sessions"]]
    sessions = _read_table(store, "sessions", first, template.sessions)
    sessions = _with_subagent_counts(sessions if subagents else _roots(sessions))
    f = filters or {}
    keys = set(sessions.get_column("session_key"))
    if f.get("projects") or f.get("sessions"):  # (matched as stats matches them: views.kept_keys)
        head = frames.Corpus(
            sessions, template.messages, template.requests, template.tool_calls, template.turns
        )
        every = tally_of_sessions(sessions, head, None, {}).sessions
        keys = kept_keys(every, f.get("projects") or (), f.get("sessions") or ())
    if f.get("since") is not None or f.get("until") is not None:
        keys &= _overlapping(sessions, f.get("since"), f.get("until"))
    broken = int(sessions.get_column("broken_lines").sum() or 0)  # (of every session read, as load_dataset)
    sessions = sessions.filter(pl.col("session_key").is_in(pl.Series(list(keys), dtype=pl.String).implode()))
    of: dict[tuple[str, str], list[tuple[str, int]]] = {}  # (table, session) -> its objects
    for table in TABLES:
        for k, n in listed[table]:
            of.setdefault((table, k.rsplit("/", 1)[-1].removesuffix(".parquet")), []).append((k, n))
    roots = sessions.get_column("root_session_key").unique(maintain_order=True)
    read = listed["sessions"]
    for at in range(0, max(len(roots), 1), _BATCH):  # (one batch, empty, when no session is left)
        t = {"sessions": sessions.filter(pl.col("root_session_key").is_in(roots.slice(at, _BATCH).implode()))}
        for table in (x for x in TABLES if x != "sessions"):
            found = [o for key in t["sessions"].get_column("session_key") for o in of.get((table, key), [])]
            t[table] = _read_table(store, table, [k for k, _ in found], getattr(template, table))
            read += found
        corpus = frames.Corpus(t["sessions"], t["messages"], t["requests"], t["tool_calls"], t["turns"])
        corpus.files_read = corpus.files_found = len(read)
        corpus.bytes_read, corpus.broken_lines = sum(n for _, n in read), broken
        corpus.tally = tally_of_frames(corpus)
        read, broken = [], 0
        yield corpus


def _read_tables(
    store: Store, empty: Corpus, *, schema_1: bool, sums: bool, days: tuple[date | None, date | None] | None
) -> tuple[dict[str, pl.DataFrame], list[tuple[str, int]], int, int]:
    """``load_dataset``'s tables (with ``sums``: the sessions alone, and the requests' objects: key and
    size), and the objects and bytes read."""
    tables: dict[str, pl.DataFrame] = {}
    files = size = 0
    requests: list[tuple[str, int]] = []
    wanted: set[str] | None = None  # the sessions whose other objects are read (None: all)
    for table in ("sessions", *(t for t in TABLES if t != "sessions")):
        base: pl.DataFrame = getattr(empty, table)
        if sums and table not in ("sessions", "requests"):
            tables[table] = base
            continue
        found = _objects(store, table, schema_1)
        if wanted is not None:
            found = _of_sessions(found, wanted, schema_1)
        files += len(found)
        size += sum(n for _, n in found)
        keys = [k for k, _ in found]
        if sums and table == "requests":
            requests, tables[table] = found, base
            continue
        tables[table] = _read_table(store, table, keys, base, schema_1)
        if table == "sessions" and days is not None and not schema_1:
            wanted = _overlapping(tables["sessions"], *days)
    return tables, requests, files, size


class _RequestSums:
    """The groups of the reports that sum requests (``frames.tally.request_rows``), summed by polars where
    the requests are, in one streaming scan: per session and key (``by``, its days in ``tz``), the
    requests, their token sums, the largest prompt, the known costs (each, to be summed exactly) as
    ``tally._add_requests`` adds them up, and the requests whose recorded total is not the sum of its parts
    (as ``tally.mismatched`` counts them); only the requests of the sessions in ``keep`` count."""

    def __init__(
        self, store: Store, keys: list[str], keep: pl.Series, schema_1: bool, report: Report, where: Any
    ) -> None:
        import polars as pl

        from ctxtool.session.schema import TOKEN_KEYS

        self.tokens = list(TOKEN_KEYS)
        self.lazies: list[pl.LazyFrame] = []  # a few thousand objects each (see _read_table)
        columns = ["session_key", "user", "project", "model", "ts", *self.tokens, "cost"]
        for at in range(0, len(keys), _BATCH):
            lazy = _scan(store, keys[at : at + _BATCH], schema_1)
            have = lazy.collect_schema().names()
            cols = [pl.col(c) if c in have else pl.lit(None).alias(c) for c in [*columns, "machine"]]
            lazy = lazy.select(cols).filter(pl.col("session_key").is_in(keep.implode()))
            self.lazies.append(lazy if where is None else lazy.filter(where))
        self.asked = report  # (by, timezone)
        self.parts = self._parts(*report)

    def _parts(self, by: str | None, timezone: str | None) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """Per session and key: the requests, token sums, largest prompt and mismatches; per key and binary
        exponent: the known costs, as exact sums of integers (``exact_costs``)."""
        import polars as pl

        if not self.lazies:
            return None  # (a dataset without requests)
        ts = pl.col("ts") if timezone is None else pl.col("ts").dt.convert_time_zone(timezone)
        key = {
            None: pl.lit(None, dtype=pl.String),  # (--by session: the mismatches alone)
            "model": pl.col("model").fill_null("(unknown)"),
            "month": ts.dt.strftime("%Y-%m"),
            "day": ts.dt.strftime("%Y-%m-%d"),
            "week": ts.dt.strftime("%Y-%m-%d"),  # (a day: the engine takes its Monday)
        }.get(by, pl.col(by or "user"))
        i, o, _, th, tl, total = (pl.col(c).fill_null(0) for c in self.tokens)
        made = []
        # A session's requests are in one object, so the groups of two batches never share a session.
        for lazy in self.lazies:
            # (one batch read once, into memory, for both: a few thousand sessions' requests)
            keyed = lazy.select("session_key", key.alias("_key"), *self.tokens, "cost")
            keyed = keyed.collect(engine="streaming").lazy()
            per_session = keyed.group_by("session_key", "_key").agg(
                pl.len().alias("_n"),
                *(pl.col(c).fill_null(0).sum().alias(c) for c in self.tokens),
                pl.col(self.tokens[0]).max().alias("_peak"),
                (total != i + o + th + tl).sum().alias("_bad"),
            )
            made.append(pl.collect_all([per_session, exact_costs(keyed)]))
        return pl.concat([m[0] for m in made]), pl.concat([m[1] for m in made])

    def mismatches(self) -> dict[str, int]:
        import polars as pl

        if self.parts is None:
            return {}
        bad = self.parts[0].group_by("session_key").agg(pl.col("_bad").sum())
        return {k: int(n) for k, n in bad.iter_rows() if n}

    def __call__(self, by: str, timezone: str | None) -> dict[Any, list[Any]]:
        from ctxtool.measure.usage import ExactSum

        parts = self.parts if (by, timezone) == self.asked else self._parts(by, timezone)
        if parts is None:
            return {}
        groups: dict[Any, list[Any]] = {}
        for row in parts[0].iter_rows(named=True):
            g = groups.setdefault(row["_key"], [set(), 0, [0] * len(self.tokens), None, ExactSum(), 0])
            g[0].add(row["session_key"])
            g[1] += row["_n"]
            g[2] = [a + row[c] for a, c in zip(g[2], self.tokens, strict=True)]
            if row["_peak"] is not None and (g[3] is None or row["_peak"] > g[3]):
                g[3] = row["_peak"]
        for key, known in cost_sums(parts[1]).items():
            groups[key][4], groups[key][5] = known, known.n
        return groups


_LOW_BITS = 28


def cost_sums(buckets: pl.DataFrame) -> dict[Any, ExactSum]:
    """The known costs of each key, exactly, from their buckets (``exact_costs``)."""
    from ctxtool.measure.usage import ExactSum

    out: dict[Any, ExactSum] = {}
    for key, e, count, hi, lo, odd in buckets.iter_rows():
        known = out.setdefault(key, ExactSum())
        known.n += count
        if e is not None:  # (the bucket's sum times 2**(e - 53))
            known.units += ((hi << _LOW_BITS) + lo) << (e - 53 + known.SCALE)
        for x in odd:
            known.add(x)
    return out


def exact_costs(keyed: pl.LazyFrame) -> pl.LazyFrame:
    """The known costs of each key summed exactly where they are: a cost is ``m * 2**(e - 53)``, ``m`` an
    integer below ``2**57``, and the ``m`` of a key and ``e`` sum as integers in two 28-bit halves; the rest
    (0, not finite, too small to scale) comes back as itself. Rows: key, e, costs, halves' sums, the rest."""
    import polars as pl

    c = pl.col("cost")
    e = c.abs().log(2).floor() - 1
    m = c * pl.lit(2.0).pow(53 - e)
    mi = m.cast(pl.Int64, strict=False)
    ok = (c.is_finite() & (c != 0) & (mi.cast(pl.Float64) == m)).fill_null(False)
    hi = mi // (1 << _LOW_BITS)
    return (
        keyed.filter(c.is_not_null())
        .select(
            "_key",
            pl.when(ok).then(e.cast(pl.Int32)).alias("_e"),
            pl.when(ok).then(hi).otherwise(0).alias("_hi"),
            pl.when(ok).then(mi - hi * (1 << _LOW_BITS)).otherwise(0).alias("_lo"),
            pl.when(~ok & (c != 0)).then(c).alias("_odd"),
        )
        .group_by("_key", "_e")
        .agg(pl.len().alias("_count"), pl.col("_hi").sum(), pl.col("_lo").sum(), pl.col("_odd").drop_nulls())
    )


def _narrowed_tally(
    store: Store, corpus: Corpus, found: list[Any], schema_1: bool, report: Report, filters: Mapping[str, Any]
) -> Tally:
    """The tally of a dataset's sessions as ``frames.views.view`` narrows it with ``filters`` (without
    ``--live``), for a report that sums requests, without reading the messages but their times: the sessions
    ``--project`` and ``--session`` keep (``views.kept_keys``); of those, with ``--since`` or ``--until``,
    the ones with a message on those UTC days, with ``--model`` the ones with a request of it there; their
    requests on those days and of those models summed (``_RequestSums``), each session's row counting them."""
    import polars as pl

    from ctxtool.frames.corpus import tally_of_sessions
    from ctxtool.frames.views import kept_keys

    read = tally_of_sessions(corpus.sessions, corpus, None, {})
    opened: list[tuple[str, int]] = []  # the messages' objects read for their times
    since, until = filters.get("since"), filters.get("until")
    models = tuple(filters.get("models") or ())
    keys = kept_keys(read.sessions, filters.get("projects") or (), filters.get("sessions") or ())
    day = pl.col("ts").dt.date()
    within = [day >= since] if since is not None else []
    within += [day <= until] if until is not None else []
    if within:
        keys &= _overlapping(corpus.sessions, since, until)
        with_messages, opened = _with_messages(store, keys, schema_1, pl.all_horizontal(within))
        keys &= with_messages
    match = [pl.any_horizontal([pl.col("model").str.starts_with(m) for m in models])] if models else []
    objects = _of_sessions(found, keys, schema_1)
    # (what was read is told: of the requests' objects, those of the sessions kept)
    read.files_read += len(objects) + len(opened) - len(found)
    read.bytes_read += sum(n for _, n in [*objects, *opened]) - sum(n for _, n in found)
    present = pl.Series("session_key", sorted(keys), dtype=pl.String)
    filtered = pl.all_horizontal([*within, *match]).fill_null(False) if within or match else None
    summed = _RequestSums(store, [k for k, _ in objects], present, schema_1, report, filtered)
    per: dict[str, list[int]] = {}  # session -> [requests, total, mismatched]
    if summed.parts is not None:
        of = summed.parts[0].group_by("session_key").agg(pl.col(c).sum() for c in ("_n", "total", "_bad"))
        per = {k: [n, total, bad] for k, n, total, bad in of.iter_rows()}
    sessions = []
    for s in read.sessions:
        if s.key not in keys or (models and s.key not in per):
            continue
        n, total, bad = per.get(s.key, (0, 0, 0))
        s.row = {**s.row, "requests": n, "total": total}
        s.mismatches = bad
        sessions.append(s)
    files = {s.row["file"] for s in sessions}
    read.broken = [b for b in read.broken if b[0] in files]
    read.invalid_utf8 = [u for u in read.invalid_utf8 if u[0] in files]
    read.sessions, read.sums, read.read_sessions = sessions, summed, len(read.sessions)
    return read


def _with_messages(
    store: Store, keys: set[str], schema_1: bool, within: pl.Expr
) -> tuple[set[str], list[tuple[str, int]]]:
    """The sessions of ``keys`` with a message ``within`` (their times alone, streamed); the objects read."""
    import polars as pl

    found = _of_sessions(_objects(store, "messages", schema_1), keys, schema_1)
    out: set[str] = set()
    for at in range(0, len(found), _BATCH):
        lazy = _scan(store, [k for k, _ in found[at : at + _BATCH]], schema_1).select("session_key", "ts")
        kept = lazy.filter(within.fill_null(False)).select(pl.col("session_key").unique())
        out.update(kept.collect(engine="streaming").get_column("session_key").to_list())
    return out, found


def _of_sessions(found: list[tuple[str, int]], keys: set[str], schema_1: bool) -> list[tuple[str, int]]:
    """The objects (key, size) of ``found`` that hold the sessions ``keys`` (all, in schema 1)."""
    if schema_1:
        return found
    return [(k, n) for k, n in found if k.rsplit("/", 1)[-1].removesuffix(".parquet") in keys]


def load_sessions_or_dataset(
    paths: Sequence[str], *, subagents: bool = True, **reading: Any
) -> tuple[Corpus, CacheUse]:
    """``frames.loading.load_corpus`` of ``paths``, or, for a dataset given alone (a folder ``ctxtool export``
    wrote, or a store URL), the dataset read back (``report`` takes either)."""
    from ctxtool.frames.loading import CacheUse, load_corpus
    from ctxtool.session.discover import dataset_in

    if (dataset := dataset_in(paths)) is None:
        return load_corpus(paths, subagents=subagents, **reading)
    return load_dataset(dataset, subagents=subagents), CacheUse()


def _objects(store: Store, table: str, schema_1: bool) -> list[tuple[str, int]]:
    """(key, size) of a table's objects: those the manifest lists in a dataset of schema 1, else all."""
    if not schema_1:
        return sorted((k, n) for k, n in store.keys(f"{table}/") if k.endswith(".parquet"))
    doc = orjson.loads(Path(store.where, DATASET_MANIFEST).read_bytes())
    out = []
    for part in doc.get("parts", []):
        if part.get("table") == table:
            try:
                out.append((part["path"], os.path.getsize(os.path.join(store.where, part["path"]))))
            except OSError:
                raise CtxtoolError(
                    f"{store} is damaged: {part['path']}, listed in {DATASET_MANIFEST}, is missing",
                    "Restore the directory from a backup, or export the sessions again into a new one",
                ) from None
    return out


def _read_table(
    store: Store, table: str, keys: list[str], base: pl.DataFrame, schema_1: bool = False
) -> pl.DataFrame:
    """A table's objects as one frame of ``base``'s columns (and ``user``, ``machine``), in the frames' row
    order. The partition columns (``machine``; ``project``, ``day`` in schema 1) come from the keys."""
    import polars as pl

    schema: dict[str, Any] = {**base.schema, "user": pl.String, "machine": pl.String}
    if not keys:
        return pl.DataFrame(schema=schema)
    try:
        # A few thousand objects at a time, each batch made one chunk: polars holds each file's metadata until
        # a read ends, and keeps each file's rows as chunks of their own (bench/fleet.py: a fleet's 79,000
        # sessions take 4 GB at once, 1 GB in batches, ... in batches of one chunk each).
        pieces = []
        for at in range(0, len(keys), _BATCH):
            lazy = _scan(store, keys[at : at + _BATCH], schema_1)
            have = lazy.collect_schema().names()
            pieces.append(lazy.select([c for c in schema if c in have]).collect().rechunk())
        df = pl.concat(pieces, how="diagonal_relaxed")
    except Exception as exc:
        raise CtxtoolError(
            f"{store}: cannot read its {table} ({str(exc).splitlines()[0][:300]})",
            "Check the dataset and the store's credentials",
        ) from None
    missing = {c: pl.lit(None, dtype=dtype).alias(c) for c, dtype in schema.items() if c not in df.columns}
    df = df.select([missing.get(c, pl.col(c).cast(dtype, strict=False)) for c, dtype in schema.items()])
    order = {"messages": "position", "requests": "position", "tool_calls": "turn", "turns": "turn"}.get(table)
    by = ["machine", "session_key", *([order] if order else [])]
    return df.sort(by, maintain_order=True, nulls_last=True)


def _scan(store: Store, keys: list[str], schema_1: bool) -> pl.LazyFrame:
    import polars as pl

    return pl.scan_parquet(
        [store.url_of(k) for k in keys],
        hive_partitioning=True,
        # (as written: a machine named 007 is not the number 7)
        hive_schema={"project": pl.String, "day": pl.String} if schema_1 else {"machine": pl.String},
        storage_options=store.storage_options(),
        missing_columns="insert",
        extra_columns="ignore",
    )


def _overlapping(sessions: pl.DataFrame, since: date | None, until: date | None) -> set[str]:
    """The sessions some of whose times may fall on a UTC day in [since, until]: all but those that end
    before ``since`` or start after ``until`` (a session without times is kept)."""
    import polars as pl

    day_start, day_end = pl.col("start").dt.date(), pl.col("end").dt.date()
    keep = pl.lit(True)
    if since is not None:
        keep = keep & (day_end.is_null() | (day_end >= since))
    if until is not None:
        keep = keep & (day_start.is_null() | (day_start <= until))
    return set(sessions.filter(keep).get_column("session_key").to_list())


def _with_subagent_counts(sessions: pl.DataFrame) -> pl.DataFrame:
    """A parent's subagent count as the sessions now in the dataset make it (a child may be written in a later
    run than its parent, or deleted by Gemini CLI since)."""
    import polars as pl

    children = (
        sessions.filter(pl.col("parent_session_key").is_not_null())
        .group_by("parent_session_key")
        .agg(pl.len().alias("_n"))
    )
    return (
        sessions.join(children, left_on="session_key", right_on="parent_session_key", how="left")
        .with_columns(pl.col("_n").fill_null(0).cast(sessions.schema["subagents"]).alias("subagents"))
        .drop("_n")
    )
