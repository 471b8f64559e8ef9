"""docs/dataset.md, held to the dataset: its column tables are the files' schema, and its SQL, run as written
on DuckDB and on Apache Spark (local mode), gives every report of ``ctxtool stats DIR --by …``.

The dataset is a fleet of two machines: the fixtures exported as alice on machine ``42``, the real sessions as
bob on machine ``007`` (names a hive reader would take for numbers unless told). One object of each machine is
then rewritten without a column, as a release of the same schema version that lacked it would have written
it, so that the documented setups read a dataset of mixed releases. The queries are found in the page by the
HTML comment before each ```sql block (``<!-- sql: NAME -->``, ``<!-- sql: setup ENGINE -->``); both engines
start in a time zone 14 hours from UTC, so a day is a UTC day only because the setup says so. Spark must
start: a machine without Java or pyspark fails here, it does not skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import FIXTURES, REAL_SESSIONS, REPO

DOC_PATH = REPO / "docs" / "dataset.md"
TABLES = ("sessions", "requests", "turns", "tool_calls", "messages")
FLEET = (("alice", "42", FIXTURES), ("bob", "007", REAL_SESSIONS))
# One object per machine rewritten as an older release of schema 2 would have: without this column.
OLDER = {"requests": ("42", "event"), "sessions": ("007", "hidden_cost")}
TEXT = {"messages": "preview", "turns": "prompt", "sessions": "summary", "tool_calls": "target"}
FAR_ZONE = "Pacific/Kiritimati"  # UTC+14: most requests fall on another day there
# The report each documented query is (``stats --by``), and the columns its rows are keyed by.
REPORTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "totals": ("user", ()),  # the totals row of any report
    "by-user": ("user", ("user",)),
    "by-machine": ("machine", ("machine",)),
    "by-model": ("model", ("model",)),
    "by-day": ("day", ("day",)),
    "by-session": ("session", ("session", "file")),
}
EXACT = ("requests", "input", "output", "cached", "thoughts", "tool", "total", "unpriced")
Stats = dict[str, dict[str, Any]]  # stats' JSON by report: "user", …, and "sessions model" of the files
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
TIMES: dict[str, float] = {}  # seconds, reported at the end of the module (pytest -s, or -rA)


# --- the page ---------------------------------------------------------------------------------------


def doc() -> str:
    return DOC_PATH.read_text(encoding="utf-8")


def queries() -> dict[str, str]:
    """Every marked SQL block of the page, by its name (``setup duckdb``, ``totals``, ``by-user``, …)."""
    found = re.findall(r"<!-- sql: ([\w -]+?) -->\n```sql\n(.*?)```", doc(), re.S)
    names = [name for name, _ in found]
    assert len(set(names)) == len(names), f"a query name is used twice in {DOC_PATH.name}: {names}"
    return dict(found)


def statements(sql: str, where: Path) -> list[str]:
    """A block's statements, with ``DIR`` the dataset's folder."""
    out = [s.strip() for s in re.split(r";\s*(?:\n|$)", sql.replace("'DIR/", f"'{where.as_posix()}/"))]
    return [s for s in out if s]


def documented_columns() -> dict[str, list[tuple[str, str]]]:
    """(column, type) of each table, as the page's ``<!-- columns: TABLE -->`` tables list them."""
    out: dict[str, list[tuple[str, str]]] = {}
    for table, body in re.findall(r"<!-- columns: (\w+) -->\n((?:\|.*\n)+)", doc()):
        rows = [line.split("|")[1:3] for line in body.splitlines()[2:]]
        out[table] = [(name.strip().strip("`"), kind.strip()) for name, kind in rows]
    return out


# --- the fleet ----------------------------------------------------------------------------------------


def clean_env(home: Path, cache: Path) -> dict[str, str]:
    """The environment of a ``ctxtool`` run: its own HOME and cache, no API key, no identity from outside."""
    drop = {"CTXTOOL_USER", "CTXTOOL_MACHINE", "GEMINI_CLI_HOME", "XDG_CACHE_HOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop and "API_KEY" not in k and "GOOGLE" not in k}
    return env | {"HOME": str(home), "CTXTOOL_CACHE_DIR": str(cache), "NO_COLOR": "1", "COLUMNS": "120"}


class Fleet:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ds = root / "dataset"
        self.env = clean_env(root / "home", root / "cache")
        (root / "home").mkdir()
        self.schemas: dict[str, set[tuple[tuple[str, str], ...]]] = {}

    def ctxtool(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "ctxtool", *args], env=self.env, capture_output=True, check=False, cwd=REPO
        )

    def stats(self, *paths: Path, by: str) -> dict[str, Any]:
        done = self.ctxtool("stats", *map(str, paths), "--by", by, "--format", "json")
        assert done.returncode == 0, done.stderr.decode()
        report: dict[str, Any] = orjson.loads(done.stdout)
        return report


def _type(dtype: Any) -> str:
    """A polars dtype as the page names it."""
    import polars as pl

    if isinstance(dtype, pl.Datetime):
        return f"Timestamp({dtype.time_unit}, {dtype.time_zone})"
    return str(dtype)


def _rewrite_as_older(fleet: Fleet) -> None:
    import polars as pl

    for table, (machine, column) in OLDER.items():
        objects = sorted((fleet.ds / table / f"machine={machine}").glob("*.parquet"))
        path = next(p for p in objects if pl.read_parquet(p).height)
        pl.read_parquet(path).drop(column).write_parquet(path)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    import polars as pl

    if not REAL_SESSIONS.is_dir():
        pytest.skip(f"the real sessions are not on this machine ({REAL_SESSIONS})")
    fleet = Fleet(tmp_path_factory.mktemp("fleet"))
    started = time.perf_counter()
    for user, machine, sessions in FLEET:
        done = fleet.ctxtool(
            "export", str(sessions), "--to", str(fleet.ds), "--user", user, "--machine", machine
        )
        assert done.returncode == 0, done.stderr.decode()
    TIMES["export (2 machines)"] = time.perf_counter() - started
    for table in TABLES:
        fleet.schemas[table] = {
            tuple((name, _type(dtype)) for name, dtype in pl.read_parquet_schema(path).items())
            for path in (fleet.ds / table).glob("machine=*/*.parquet")
        }
    _rewrite_as_older(fleet)
    return fleet


@pytest.fixture(scope="module")
def stats(fleet: Fleet) -> Stats:
    """``ctxtool stats DIR --by …`` for every report, and ``stats`` over the session folders themselves."""
    started = time.perf_counter()
    out = {by: fleet.stats(fleet.ds, by=by) for by in {by for by, _ in REPORTS.values()}}
    sources = [sessions for _, _, sessions in FLEET]
    for by in ("model", "day"):
        out[f"sessions {by}"] = fleet.stats(*sources, by=by)
    TIMES["ctxtool stats"] = time.perf_counter() - started
    return out


# --- the engines --------------------------------------------------------------------------------------

Run = Callable[[str], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def duckdb_run(fleet: Fleet) -> Iterator[Run]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET TimeZone = '{FAR_ZONE}'")

    def run(sql: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for statement in statements(sql, fleet.ds):
            cursor = con.execute(statement)
            if cursor.description:
                names = [d[0] for d in cursor.description]
                rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        return rows

    started = time.perf_counter()
    run(queries()["setup duckdb"])
    TIMES["duckdb setup"] = time.perf_counter() - started
    yield run
    con.close()


def _java_fault() -> str | None:
    java = (
        Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    )
    if java is None or not Path(java).exists():
        return "no Java found (JAVA_HOME unset and no `java` on PATH); Spark needs Java 17 or 21"
    return None


@pytest.fixture(scope="module")
def spark_run(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One local Spark session for the module (``local[1]``: the tests share 2 cores), stopped after, and its
    JVM with it."""
    if fault := _java_fault():
        pytest.fail(f"Spark cannot start: {fault}")
    try:
        from pyspark.core.context import SparkContext
        from pyspark.sql import SparkSession
    except ImportError as exc:
        pytest.fail(f"Spark cannot start: pyspark is not importable ({exc}); install the dev extras")
    work = tmp_path_factory.mktemp("spark")
    started = time.perf_counter()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        env.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
        try:
            spark = (
                SparkSession.builder.master("local[1]")
                .appName("ctxtool-dataset-docs")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.log.level", "ERROR")
                .config("spark.sql.shuffle.partitions", "1")
                .config("spark.default.parallelism", "1")
                .config("spark.driver.memory", "1g")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.local.dir", str(work))
                .config("spark.sql.warehouse.dir", str(work / "warehouse"))
                # A few small queries: C1 alone compiles fast enough, and no query needs generated code
                # or adaptive plans (the three halved the module's Spark time on a busy machine).
                .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={work} {JVM_OPTIONS}")
                .config("spark.sql.codegen.wholeStage", "false")
                .config("spark.sql.adaptive.enabled", "false")
                .config("spark.sql.session.timeZone", FAR_ZONE)
                .getOrCreate()
            )
        except Exception as exc:  # a JVM that does not start, a port it cannot bind
            pytest.fail(f"Spark cannot start: {type(exc).__name__}: {exc}")
    TIMES["spark start"] = time.perf_counter() - started

    def run(sql: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for statement in statements(sql, fleet.ds):
            rows = [row.asDict() for row in spark.sql(statement).collect()]
        return rows

    started = time.perf_counter()
    run(queries()["setup spark"])
    TIMES["spark setup"] = time.perf_counter() - started
    yield run
    started = time.perf_counter()
    gateway = SparkContext._gateway
    spark.stop()
    if gateway is not None:  # the JVM this fixture started: it ends when its stdin closes
        gateway.shutdown()
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        SparkContext._gateway = None
        SparkContext._jvm = None
    TIMES["spark stop"] = time.perf_counter() - started


@pytest.fixture(scope="module", autouse=True)
def _report_times() -> Iterator[None]:
    yield
    if TIMES:
        line = ", ".join(f"{what} {seconds:.1f} s" for what, seconds in TIMES.items())
        sys.stderr.write(f"\n{Path(__file__).name} timings: {line}\n")


# --- comparing -----------------------------------------------------------------------------------------


def _key(row: dict[str, Any], columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple("(unknown)" if row[c] is None and c == "model" else str(row[c]) for c in columns)


def assert_same(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    """One row of SQL against one row (or the totals) of ``stats``: counts exact, cost to the cent."""
    for field in (*EXACT, *(f for f in ("sessions", "prompt_tokens") if f in got)):
        assert int(got[field]) == want[field], f"{where}: {field} {got[field]} != stats' {want[field]}"
    cost, expected = got["cost"], want["cost"]
    if cost is None and want["requests"] == 0:
        cost = 0.0  # a session without requests: SQL's sum of nothing, stats' 0
    if expected is None or cost is None:
        assert cost is expected, f"{where}: cost {cost} != stats' {expected}"
    else:
        assert abs(cost - expected) < 0.005, f"{where}: cost {cost} != stats' {expected}"
    if "cache_ratio" in got:
        assert got["cache_ratio"] == pytest.approx(want["cache_ratio"], rel=1e-12), where


def check_report(report: str, rows: list[dict[str, Any]], stats: Stats, engine: str) -> None:
    by, key = REPORTS[report]
    if not key:
        assert len(rows) == 1
        assert_same(rows[0], stats[by]["totals"], f"{engine} {report}")
        # ... and the totals of stats over the session files, before any export.
        assert_same(rows[0], stats["sessions model"]["totals"], f"{engine} {report} (session files)")
        return
    want = {_key(r, key): r for r in stats[by]["rows"]}
    got = {_key(r, key): r for r in rows}
    assert len(got) == len(rows), f"{engine} {report}: two rows with one key"
    assert sorted(got) == sorted(want), f"{engine} {report}: not the rows of stats --by {by}"
    for k, row in got.items():
        assert_same(row, want[k], f"{engine} {report} {k}")
        if by == "session":
            assert row["project"] == want[k]["project"], f"{engine} {report} {k}"
    if f"sessions {by}" in stats:  # the same rows as stats gives on the session files themselves
        direct = {_key(r, key): r for r in stats[f"sessions {by}"]["rows"]}
        assert sorted(direct) == sorted(got)
        for k, row in got.items():
            assert_same(row, direct[k], f"{engine} {report} {k} (session files)")


# --- the tests -----------------------------------------------------------------------------------------


def test_the_page_marks_every_report_and_both_setups() -> None:
    assert set(queries()) == {"setup duckdb", "setup spark", *REPORTS}
    for engine in ("duckdb", "spark"):
        assert "'DIR/" in queries()[f"setup {engine}"]


def test_the_dataset_is_a_fleet_of_two(stats: Stats) -> None:
    assert [r["user"] for r in stats["user"]["rows"]] == [user for user, _, _ in FLEET]
    machines = sorted(r["machine"] for r in stats["machine"]["rows"])
    assert machines == sorted(m for _, m, _ in FLEET), (
        f"ctxtool stats DIR --by machine names the machines {machines}: a reader that infers the type of "
        "the machine= partition turns `007` into 7 (read it as a string: polars' hive_schema)"
    )


def test_documented_columns_are_the_files_columns(fleet: Fleet) -> None:
    documented = documented_columns()
    assert list(documented) == list(TABLES)
    for table in TABLES:
        assert len(fleet.schemas[table]) == 1, f"{table}: its objects do not share one schema"
        (written,) = fleet.schemas[table]
        assert documented[table] == list(written), f"docs/dataset.md's {table} table is not the files' schema"
        assert "machine" not in dict(written), "machine is a partition column: in the path, not in the files"


def test_the_marker_is_the_documented_one(fleet: Fleet) -> None:
    shown = re.search(r"<!-- marker -->\n```json\n(.*?)```", doc(), re.S)
    assert shown is not None
    marker = (fleet.ds / "_ctxtool_dataset.json").read_bytes()
    assert orjson.loads(marker) == orjson.loads(shown.group(1))
    assert marker.decode() == shown.group(1)


def test_no_text_and_no_absolute_file_paths(fleet: Fleet, duckdb_run: Run) -> None:
    for table, column in TEXT.items():
        (row,) = duckdb_run(
            f"SELECT count({column}) AS n FROM read_parquet('DIR/{table}/**/*.parquet', union_by_name = true)"
        )
        assert row["n"] == 0, f"{table}.{column} holds text without --with-text"
    (row,) = duckdb_run("SELECT count(*) AS n FROM sessions WHERE file LIKE '/%' OR group_key LIKE '/%'")
    assert row["n"] == 0


def test_a_newer_schema_is_refused_with_the_documented_message(fleet: Fleet, tmp_path: Path) -> None:
    newer = tmp_path / "newer"
    newer.mkdir()
    marker = orjson.loads((fleet.ds / "_ctxtool_dataset.json").read_bytes())
    (newer / "_ctxtool_dataset.json").write_bytes(orjson.dumps({**marker, "schema_version": 3}))
    done = fleet.ctxtool("stats", str(newer))
    assert done.returncode == 1
    message = done.stderr.decode().strip().replace(str(newer), "DIR")
    message = re.sub(r"this is [^,]+,", "this is 0.2.0,", message)
    assert message in doc()


def _present(fleet: Fleet, table: str, column: str) -> tuple[int, int]:
    """(rows, non-null values of ``column``) of a table's objects, read one by one."""
    import polars as pl

    rows = values = 0
    for path in (fleet.ds / table).glob("machine=*/*.parquet"):
        df = pl.read_parquet(path)
        rows += df.height
        values += df.get_column(column).count() if column in df.columns else 0
    return rows, values


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_the_setups_read_objects_of_an_older_release(
    engine: str, fleet: Fleet, request: pytest.FixtureRequest
) -> None:
    """A column one object lacks reads as null there, and as it is in the others."""
    run: Run = request.getfixturevalue(f"{engine}_run")
    for table, (_, column) in OLDER.items():
        (row,) = run(f"SELECT count(*) AS n, count({column}) AS v FROM {table}")
        assert (row["n"], row["v"]) == _present(fleet, table, column), f"{engine}: {table}.{column}"


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
@pytest.mark.parametrize("report", list(REPORTS))
def test_each_engine_gives_the_reports_of_stats(
    report: str, engine: str, request: pytest.FixtureRequest, stats: Stats
) -> None:
    run: Run = request.getfixturevalue(f"{engine}_run")
    started = time.perf_counter()
    rows = run(queries()[report])
    TIMES[f"{engine} queries"] = TIMES.get(f"{engine} queries", 0) + time.perf_counter() - started
    check_report(report, rows, stats, engine)
