"""How a scan shares its work: this process parses beside its workers, and a lone worker also prices."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxtool.frames.loading import load_corpus
from ctxtool.session import scan
from ctxtool.session.discover import discover
from tests.conftest import FIXTURES
from tests.test_loading import same

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    target = tmp_path / "gemini" / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", target)
    return target


def test_this_process_parses_beside_its_workers(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 2 workers asked for, one worker process is started and this process parses the rest: both take
    files, and the rows are those of a scan in one process."""
    files = discover([data]).files
    expected = [(fc.path, fc.messages_cols, fc.tools_cols) for fc in scan.read_files(files, workers=1)]
    here = os.getpid()
    parsed_here: list[str] = []
    extract = scan.extract_file

    def recording(sp: object, resume: object = None) -> object:
        if os.getpid() == here:  # the forked worker runs this too, and records nothing we can see
            parsed_here.append(str(sp.path))  # type: ignore[attr-defined]
        return extract(sp, resume)  # type: ignore[arg-type]

    monkeypatch.setattr(scan, "extract_file", recording)
    monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)
    got = scan.read_files(files, workers=2)
    assert [(fc.path, fc.messages_cols, fc.tools_cols) for fc in got] == expected
    assert 0 < len(parsed_here) < len(files)


_KILLED = """
import gc, json, os, struct, sys
from concurrent.futures import ProcessPoolExecutor
from ctxtool.session import scan
from ctxtool.session.discover import discover

scan.PARALLEL_MIN_BYTES = 0
scan._LIVENESS_S = 0.2
if __name__ == "__main__":
    files = discover([sys.argv[1]]).files
    mid_send = sys.argv[2:] == ["mid-send"]
    expected = [(fc.path, fc.messages_cols) for fc in scan.read_files(files, workers=1)]
    here, extract = os.getpid(), scan.extract_file

    def dying(sp, resume=None):
        if os.getpid() != here:  # the forked worker: it dies, as the kernel's OOM killer would end it
            if mid_send:  # ... after it began to send a batch's results (a 1 MB message's first bytes)
                (pool,) = [o for o in gc.get_objects() if isinstance(o, ProcessPoolExecutor)]
                os.write(pool._result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"\\x80\\x04")
            os._exit(9)
        return extract(sp, resume)

    scan.extract_file = dying
    got = scan.read_files(files, workers=2)
    print(json.dumps([len(files), [(fc.path, fc.messages_cols) for fc in got] == expected]))
"""


def _killed(tmp_path: Path, folder: Path, *mode: str) -> tuple[int, bool]:
    """(files, whether every file's rows equal a run without workers) of ``_KILLED`` run on ``folder``."""
    script = tmp_path / "killed.py"
    script.write_text(_KILLED, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(folder), *mode], env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    n_files, same_rows = json.loads(done.stdout)
    return n_files, same_rows


def test_a_real_worker_killed_mid_scan_loses_no_file(data: Path, tmp_path: Path) -> None:
    """The worker process dies on its first file: the pool breaks and refuses more work, and this process
    reads every file the worker had or would have had. (In a process of its own: without polars loaded,
    workers are forked and inherit the patch that kills them.)"""
    for copy in range(6):  # enough files for many batches: work is still queued when the pool breaks
        shutil.copytree(FIXTURES / "gemini" / "tmp", data.parent / f"copy-{copy}")
    n_files, same_rows = _killed(tmp_path, data.parent)
    assert n_files > 100
    assert same_rows is True


# The rates shipped in the package (ctxtool/measure/rates_snapshot.json) answer a first run without
# genai-prices; these scripts take a second argument that points pricing elsewhere, so that the run must ask
# the library.
_SNAPSHOT_ARG = """
from pathlib import Path
from ctxtool.measure import pricing

if len(sys.argv) > 2:
    pricing.SNAPSHOT_PATH = Path(sys.argv[2])
"""

_PRICED_BY_THE_WORKER = (
    """
import json, sys
from ctxtool.frames.loading import load_corpus
from ctxtool.session import scan
"""
    + _SNAPSHOT_ARG
    + """
scan.PARALLEL_MIN_BYTES = 0
if __name__ == "__main__":
    corpus, _ = load_corpus([sys.argv[1]], workers=2)
    loaded = "genai_prices.data" in sys.modules
    costs = corpus.requests.select("message_id", "cost").rows()
    print(json.dumps({"loaded_here": loaded, "costs": costs, "warnings": corpus.warnings}))
"""
)


def test_a_lone_worker_prices_the_requests_and_this_process_never_loads_the_price_data(
    data: Path, tmp_path: Path
) -> None:
    """On 2 cores, when the shipped snapshot cannot answer, the one worker loads genai-prices' data and
    resolves the rates (this process would hold that data to its peak); the costs are those of a scan in one
    process, which loads it itself."""
    script = tmp_path / "priced.py"
    script.write_text(_PRICED_BY_THE_WORKER, encoding="utf-8")
    env = {**os.environ, "CTXTOOL_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(script), str(data), str(tmp_path / "no-snapshot.json")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    got = json.loads(done.stdout)
    assert got["loaded_here"] is False
    assert (tmp_path / "cache" / "prices").is_dir()  # the worker memoised the day's rates, as a run does
    alone, _ = load_corpus([data], workers=1)
    assert got["costs"] == [list(r) for r in alone.requests.select("message_id", "cost").rows()]
    assert any(cost is not None for _, cost in got["costs"])
    assert got["warnings"] == alone.warnings


def test_when_the_worker_cannot_price_this_process_does(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The errand's failure (here: its function cannot be sent to the worker) costs time, never a price."""
    from ctxtool.measure import pricing

    real = pricing.price_table
    here: list[int] = []

    def unpicklable(*args: object, **kwargs: object) -> object:  # a local function: pickle refuses it
        here.append(os.getpid())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(pricing, "price_table", unpicklable)
    parallel, _ = load_corpus([data], workers=2)
    assert here  # priced here, after the worker could not
    assert set(here) == {os.getpid()}
    monkeypatch.setattr(pricing, "price_table", real)
    same(parallel, load_corpus([data], workers=1)[0])
    assert parallel.requests.get_column("cost").null_count() < parallel.requests.height


_SMALL_SCAN = (
    """
import json, sys
from ctxtool.frames.loading import load_corpus
"""
    + _SNAPSHOT_ARG
    + """
if __name__ == "__main__":
    corpus, _ = load_corpus([sys.argv[1]])
    print(json.dumps({
        "pool": "concurrent.futures.process" in sys.modules,
        "prices_here": "genai_prices.data" in sys.modules,
        "genai_prices": sorted(m for m in sys.modules if m.split(".")[0] == "genai_prices"),
        "costs": corpus.requests.select("message_id", "cost").rows(),
    }))
"""
)


def _small_scan(data: Path, tmp_path: Path, *snapshot: Path) -> dict[str, Any]:
    assert sum(p.stat().st_size for p in data.rglob("session-*")) < scan.PARALLEL_MIN_BYTES
    script = tmp_path / "small.py"
    script.write_text(_SMALL_SCAN, encoding="utf-8")
    env = {**os.environ, "CTXTOOL_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(script), str(data), *map(str, snapshot)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def test_a_small_first_run_of_the_day_starts_a_worker_for_the_prices_and_a_later_one_does_not(
    data: Path, tmp_path: Path
) -> None:
    """Below ``PARALLEL_MIN_BYTES`` a scan stays in one process, except when genai-prices' data must be
    loaded (the snapshot cannot answer and there is no memo of the day's rates yet): one worker loads it
    while this process imports polars and parses. Once the rates are memoised, the same scan runs in one
    process. The costs are the same."""
    elsewhere = tmp_path / "no-snapshot.json"
    first, later = _small_scan(data, tmp_path, elsewhere), _small_scan(data, tmp_path, elsewhere)
    assert (first["pool"], first["prices_here"]) == (True, False)
    assert (later["pool"], later["prices_here"]) == (False, False)  # the memo answers, in one process
    assert first["costs"] == later["costs"]


def test_a_small_first_run_priced_by_the_snapshot_stays_in_one_process(data: Path, tmp_path: Path) -> None:
    """When the snapshot shipped in the package answers (it is generated here from the installed library, as
    ``make rates`` does), a first run starts no worker for the prices, imports no genai-prices module and
    writes no memo; its costs are those the library gives."""
    from ctxtool.measure import rates_snapshot

    snapshot = tmp_path / "rates.json"
    rates_snapshot.write(rates_snapshot.build(["auto-gemini-3"], datetime.now(tz=UTC).date()), snapshot)
    shipped = _small_scan(data, tmp_path, snapshot)
    assert (shipped["pool"], shipped["genai_prices"]) == (False, [])
    assert not (tmp_path / "cache" / "prices").exists()
    asked = _small_scan(data, tmp_path, tmp_path / "no-snapshot.json")
    assert (asked["pool"], asked["prices_here"]) == (True, False)
    assert shipped["costs"] == asked["costs"]
    assert any(cost is not None for _, cost in shipped["costs"])


def test_a_worker_killed_while_sending_its_results_loses_no_file(data: Path, tmp_path: Path) -> None:
    """A worker killed (for memory, say) in the middle of sending a batch's results: the pool's reader would
    wait for the rest for ever; the scan sees no worker alive, ends the pool as broken and reads the batch
    here."""
    n, same_rows = _killed(tmp_path, data, "mid-send")
    assert n > 1
    assert same_rows


_KILLED_MID_SEND = """
import os, struct, sys, threading, time
from concurrent.futures import ProcessPoolExecutor
from ctxtool.session import scan

POOL = None


def die_in_the_middle_of_sending():
    # In the worker: a message on the pool's result pipe begun (a 1 MB message's header and first bytes), as
    # a worker begins one to send a batch's results, and not finished, as by a worker killed mid-send.
    os.write(POOL._result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"\\x80\\x04")
    time.sleep(600)


if __name__ == "__main__":
    assert scan._mp_context().get_start_method() == "fork"  # as a scan forks its workers (no polars here)
    POOL = ProcessPoolExecutor(max_workers=1, mp_context=scan._mp_context())
    POOL.submit(die_in_the_middle_of_sending)
    time.sleep(0.5)  # the message is begun: the pool's reader waits for the rest of it
    ended = threading.Event()
    threading.Thread(target=lambda: (scan._kill_pool(POOL), ended.set()), daemon=True).start()
    print("ended" if ended.wait(20) else "hung", flush=True)
    os._exit(0)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="fork, as the scan uses it on Linux")
def test_workers_killed_while_sending_results_leave_nothing_waiting(tmp_path: Path) -> None:
    """Ctrl-C without ctxtool's handlers kills the pool's workers (``_kill_pool``). One killed in the middle
    of sending a batch's results left the pool's reader (the thread ``shutdown`` joins) waiting for the rest
    for ever, and the run hung (1 in 80 runs with Ctrl-C at random). Here the worker begins a message and is
    killed: the pool still ends."""
    script = tmp_path / "killed_mid_send.py"
    script.write_text(_KILLED_MID_SEND)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.stdout.strip() == "ended", done.stderr[-2000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="F_SETPIPE_SZ is Linux's")
def test_the_workers_send_their_results_through_a_wide_pipe() -> None:
    """The pipe a worker sends a batch's results on holds 1 MiB, not 64 KiB (``scan._widen``), so a worker
    rarely waits for this process to read before it parses its next batch."""
    import fcntl
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))
    try:
        reader = pool._result_queue._reader.fileno()  # type: ignore[attr-defined]
        before = fcntl.fcntl(reader, fcntl.F_GETPIPE_SZ)
        scan._widen(pool)
        assert fcntl.fcntl(reader, fcntl.F_GETPIPE_SZ) == scan._PIPE_BYTES > before
        assert pool.submit(sum, [1, 2]).result() == 3
    finally:
        pool.shutdown()


def test_elsewhere_than_linux_the_pipe_stays_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where there is no F_SETPIPE_SZ (macOS) or no fcntl module at all (Windows), ``_widen`` leaves the pool
    as it is, and never fails."""
    import builtins
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    real_import = builtins.__import__

    def no_fcntl(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "fcntl":
            raise ImportError("No module named 'fcntl'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fcntl)
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        for platform in ("win32", "darwin"):
            monkeypatch.setattr(sys, "platform", platform)
            scan._widen(pool)
    finally:
        monkeypatch.undo()
        pool.shutdown()


def _collecting() -> bool:
    import gc

    return gc.isenabled()


def test_a_scan_pauses_the_garbage_collector_and_restores_it(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cyclic garbage collector is off while files are read, in this process and in the workers
    (``scan._init_worker``; a scan makes no cycles), and on again after the scan, however it ends."""
    import gc

    files = discover([data]).files
    during: list[bool] = []
    extract = scan.extract_file

    def recording(sp: object, resume: object = None) -> object:
        during.append(gc.isenabled())
        return extract(sp, resume)  # type: ignore[arg-type]

    monkeypatch.setattr(scan, "extract_file", recording)
    assert gc.isenabled()
    scan.read_files(files, workers=1)
    assert during
    assert not any(during)
    assert gc.isenabled()

    def failing(sp: object, resume: object = None) -> object:
        raise RuntimeError("stop")

    monkeypatch.setattr(scan, "extract_file", failing)
    with pytest.raises(RuntimeError):
        scan.read_files(files, workers=1)
    assert gc.isenabled()
    gc.disable()
    try:  # a caller that had it off finds it off
        monkeypatch.setattr(scan, "extract_file", extract)
        scan.read_files(files, workers=1)
        assert not gc.isenabled()
    finally:
        gc.enable()

    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, initializer=scan._init_worker, initargs=(os.getpid(),)) as pool:
        assert pool.submit(_collecting).result() is False


_COLLECTOR_IN_RUN = """
import gc, sys
import ctxtool.cli
seen = []
ctxtool.cli.main = lambda: seen.append(gc.isenabled())
sys.argv = ["ctxtool", *sys.argv[1:]]
from ctxtool.__main__ import main
main()
print(seen)
"""


@pytest.mark.parametrize(("command", "collecting"), [("stats", False), ("diff", True), ("audit", True)])
def test_a_stats_run_goes_without_the_garbage_collector(
    command: str, collecting: bool, tmp_path: Path
) -> None:
    """The console script turns the cyclic collector off for the whole of a ``stats`` run (start-up, the scan,
    the report), and for no other command."""
    env = {**os.environ, "CTXTOOL_NO_REPLAY": "1", "CTXTOOL_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", _COLLECTOR_IN_RUN, command],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert out.stdout.strip() == f"[{collecting}]"


def test_a_scan_gives_the_stamps_it_took(data: Path, tmp_path: Path) -> None:
    """``stamped`` gets what ``discover.file_stamps`` would say of the files before they are read (a vanished
    one: None), from the stats the scan takes, with or without the index."""
    from ctxtool.session.discover import file_stamps
    from ctxtool.session.index import FileIndex

    found = discover([data])
    gone = tmp_path / "gone.jsonl"
    gone.write_text("")
    files = [*found.files, *discover([gone]).files]
    gone.unlink()
    expected = {**file_stamps(found), str(gone): None}
    for index in (None, FileIndex(tmp_path / "cache")):
        stamped: dict[str, list[int] | None] = {}
        scan.read_files(files, workers=1, index=index, stamped=stamped)
        assert stamped == expected
        assert list(stamped) == list(expected)
