"""Ctrl-C and SIGTERM at any moment (issues 15 and 26): exit 130 / 143, one line, no traceback, no process
left, no hang, and a write either done whole (with its backup) or not begun.

The signal instants are counted from the moment the process has its handlers (read from /proc: the moment
its SigCgt mask shows SIGTERM caught, which the entry point's first line does, before typer, rich or polars
are imported), not from the spawn, so a slow machine moves every instant the same way; the instants that must
land while worker processes parse are counted from the first worker's appearance (which the worker reports
the moment it is forked: ``Forks``). Each run is the leader of its own process group, which its workers join:
once the run has exited, that group must be empty at once (the main process kills and reaps its workers
before it exits; nothing is left for init to collect later).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxtool.session.scan import PARALLEL_MIN_BYTES
from tests.conftest import FIXTURES

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals and /proc as on Linux")

EXE = shutil.which("ctxtool") or str(Path(sys.executable).parent / "ctxtool")
POINTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5)
INTERRUPTED = (130, "Interrupted.\n")
TERMINATED = (143, "Interrupted.\n")
FINISHED = (0, "")  # a stats run that ended before the signal came: nothing on stderr


def big_corpus(root: Path, copies: int = 60) -> Path:
    """Enough data (about 44 MB) for the scan to use worker processes."""
    src = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"
    data = src.read_bytes()
    padding = b'{"id":"pad-%d","type":"info","content":"' + b"x" * 60_000 + b'"}\n'
    for n in range(copies):
        chats = root / f"p{n}" / "chats"
        chats.mkdir(parents=True)
        body = data + b"".join(padding.replace(b"%d", str(i).encode()) for i in range(12))
        (chats / f"session-2026-05-25T09-30-{n:08d}.jsonl").write_bytes(body)
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = big_corpus(tmp_path_factory.mktemp("corpus") / "tmp")
    assert sum(f.stat().st_size for f in root.rglob("*.jsonl")) > PARALLEL_MIN_BYTES  # workers start
    return root


def start(
    args: list[str], log: Path, command: list[str] | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ctxtool (stderr into ``log``) as the leader of a new process group, with default signal
    dispositions, and wait until its handlers are in place."""
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*(command or [EXE]), *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            env=env,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            break  # already gone
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        caught = int(fields.get("SigCgt", "0").strip(), 16)
        # SIGTERM caught: ctxtool's handlers are in (Popen returns after the exec; Python itself catches
        # SIGINT, never SIGTERM).
        if caught & (1 << (signal.SIGTERM - 1)):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.0005)
    return proc


def fields(stat: str) -> list[str]:
    return stat.rpartition(")")[2].split()  # after "pid (comm)": state, ppid, pgrp, ...


def processes() -> dict[int, list[str]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = fields(Path(f"/proc/{entry}/stat").read_text())
            except OSError:
                continue
    return found


def group(pgid: int) -> list[str]:
    """The processes in process group ``pgid``, as "pid state"."""
    return [f"{pid} {f[0]}" for pid, f in processes().items() if int(f[2]) == pgid]


_REPORT_FORKS = """
import os

_FIFO = os.environ.get("CTXTOOL_TEST_FORKS")


def _report():
    try:
        fd = os.open(_FIFO, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b"%d %d\\n" % (os.getpid(), os.getppid()))
    except OSError:
        pass
    finally:
        os.close(fd)


if _FIFO:
    os.register_at_fork(after_in_child=_report)
"""


class Forks:
    """Each process a run forks (the scan's workers, the head start, a forkserver's workers) reports its id
    and its parent's the moment it exists, through a FIFO (a ``sitecustomize`` module on the run's
    ``PYTHONPATH`` has every Python process of the run report its forks, a forkserver's included).

    Not found by polling /proc: a pool's workers live only while the files are parsed (0.13 s and up on 2
    loaded cores), and one look through /proc took up to 0.55 s there (other tests running), so a run could
    start its worker and end between two looks ("no worker process started"). A report waits in the FIFO
    until it is read."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(_REPORT_FORKS)
        self.folder = folder
        self.fifo = folder / "forks"
        os.mkfifo(self.fifo)
        # Both ends held here: a report can always be written, and the FIFO never reads as ended.
        self._reader = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        self._writer = os.open(self.fifo, os.O_WRONLY)
        self._lines = b""

    def watch(self) -> dict[str, str]:
        """The environment of the next run: the reports of earlier runs are dropped."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._reader, 65536):
                pass
        self._lines = b""
        path = os.pathsep.join(filter(None, [str(self.folder), os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path, "CTXTOOL_TEST_FORKS": str(self.fifo)}

    def first(self, proc: subprocess.Popen[bytes], *, grandchild: bool = False) -> int | None:
        """The id of the first process that the run of ``proc`` forks (with ``grandchild``, that one of its
        children forks), once it exists; None when the run ends without one, or none within 60 s."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ended = proc.poll() is not None  # (first: what was forked before the end is reported by then)
            if select.select([self._reader], [], [], 0.05)[0]:
                self._lines += os.read(self._reader, 65536)
            while b"\n" in self._lines:
                line, _, self._lines = self._lines.partition(b"\n")
                pid, ppid = map(int, line.split())
                if not grandchild or ppid != proc.pid:
                    return pid
            if ended:
                return None
        return None

    def close(self) -> None:
        os.close(self._reader)
        os.close(self._writer)


@pytest.fixture
def forks(tmp_path: Path) -> Iterator[Forks]:
    watcher = Forks(tmp_path / "site")
    yield watcher
    watcher.close()


def send(proc: subprocess.Popen[bytes], sig: int, *, to_group: bool) -> None:
    """As the terminal sends Ctrl-C (to the whole process group) or as ``kill`` does (to the process)."""
    if to_group:
        with contextlib.suppress(ProcessLookupError):  # the run has ended
            os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)


def end(proc: subprocess.Popen[bytes], log: Path, what: str) -> tuple[tuple[int, str], list[str]]:
    """The run's (status, stderr), and what is left of its process group the moment it has exited."""
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"ctxtool did not end after {what}")
    left = group(proc.pid)  # at once: no grace period
    if left:
        os.killpg(proc.pid, signal.SIGKILL)  # (not to leave them to the rest of the test session)
    return (code, log.read_text()), left


# 50 instants, 0.01 s to 0.5 s after the handlers are in: the imports, discovery, the pool's start, the
# parse (about 0.2 s to 0.5 s on 2 idle cores), the frames and the output.
INSTANTS = [round(0.01 * k, 2) for k in range(1, 51)]


def test_ctrl_c_at_any_instant_of_a_first_scan_ends_it_whole(corpus: Path, tmp_path: Path) -> None:
    for k, delay in enumerate(INSTANTS):
        # A first scan, with the index (an empty cache folder) or without it.
        cache = ["--no-cache"] if k % 2 else [f"--cache-dir={tmp_path / f'cache{k}'}"]
        proc = start(["stats", str(corpus), *cache, "-f", "json"], tmp_path / "err")
        time.sleep(delay)
        send(proc, signal.SIGINT, to_group=bool(k // 2 % 2))
        result, left = end(proc, tmp_path / "err", f"Ctrl-C at {delay} s")
        assert left == [], (delay, result)
        assert result in (INTERRUPTED, FINISHED), delay


@pytest.mark.parametrize(
    ("sig", "expected"),
    [(signal.SIGINT, INTERRUPTED), (signal.SIGTERM, TERMINATED)],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_while_workers_parse_ends_and_reaps_them(
    corpus: Path, tmp_path: Path, forks: Forks, sig: signal.Signals, expected: tuple[int, str]
) -> None:
    """From the moment the first worker exists (maybe still being started: the signal then waits until the
    pool has recorded it) to well before the parse can end."""
    for k, offset in enumerate((0.0, 0.0, 0.002, 0.005, 0.01, 0.03)):
        proc = start(["stats", str(corpus), "--no-cache", "-f", "json"], tmp_path / "err", env=forks.watch())
        assert forks.first(proc), "no worker process started"
        time.sleep(offset)
        send(proc, sig, to_group=bool(k % 2))
        result, left = end(proc, tmp_path / "err", f"{sig.name} {offset} s after a worker started")
        assert left == [], (offset, result)
        assert result == expected, offset


def test_sigterm_at_any_instant_ends_the_run_with_143(corpus: Path, tmp_path: Path) -> None:
    for delay in INSTANTS[4::5]:
        proc = start(["stats", str(corpus), "--no-cache", "-f", "json"], tmp_path / "err")
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        result, left = end(proc, tmp_path / "err", f"SIGTERM at {delay} s")
        assert left == [], (delay, result)
        assert result in (TERMINATED, FINISHED), delay


_FAILING_WORKER = """
import os, sys
from ctxtool.common import interrupt
interrupt.install()  # as the console script does
from ctxtool.session import scan

def fail(batch, then=None):
    {body}

scan._extract_batch = fail  # (workers are forked: they run this one)
sys.argv = ["ctxtool", "stats", sys.argv[1], "--no-cache", "-f", "json"]
from ctxtool.cli import main
main()
"""


@pytest.mark.parametrize("failure", ["raises", "dies"])
def test_a_failing_worker_leaves_no_process(corpus: Path, tmp_path: Path, failure: str) -> None:
    body = 'raise RuntimeError("a worker failed")' if failure == "raises" else "os._exit(3)"
    code = _FAILING_WORKER.format(body=body)
    proc = start([str(corpus)], tmp_path / "err", command=[sys.executable, "-c", code])
    (status, err), left = end(proc, tmp_path / "err", f"a worker that {failure}")
    assert left == [], (status, err)
    if failure == "raises":
        assert status == 1, err
        assert err.startswith("Error: unexpected RuntimeError: a worker failed"), err
        assert err.count("\n") == 1, err
    else:  # this process reads the dead worker's files itself
        assert (status, err) == FINISHED


_WITHOUT_HANDLERS = "import sys; from ctxtool.cli import main; sys.argv[0] = 'ctxtool'; main()"


def test_ctrl_c_without_the_handlers_still_ends_the_workers(
    corpus: Path, tmp_path: Path, forks: Forks
) -> None:
    """A script that calls ``ctxtool.cli.main`` gets Python's KeyboardInterrupt, not ctxtool's handler: the
    scan kills and joins its workers before the interrupt goes on. (Where the KeyboardInterrupt lands is
    Python's business, e.g. in a callback that reports it and carries on, so only this is exact: no process
    is left, and an interrupted run says so in one line.)"""
    for k, offset in enumerate((0.0, 0.01, 0.03)):
        with (tmp_path / "err").open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-c", _WITHOUT_HANDLERS, "stats", str(corpus), "--no-cache", "-f", "json"],
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                env=forks.watch(),
            )
        assert forks.first(proc), "no worker process started"
        time.sleep(offset)
        send(proc, signal.SIGINT, to_group=bool(k % 2))
        (code, err_text), left = end(proc, tmp_path / "err", f"Ctrl-C {offset} s after a worker started")
        assert left == [], (offset, code, err_text)
        if code == INTERRUPTED[0]:
            assert err_text == INTERRUPTED[1], offset


def test_kill_9_takes_the_workers_with_it(corpus: Path, tmp_path: Path, forks: Forks) -> None:
    """SIGKILL cannot be handled: each worker asked the kernel to kill it when its parent dies (else it
    would wait on the pool's queue for ever). Dead, they wait for init to collect them (a zombie holds no
    memory), which may take a while on some machines; none may still run."""
    proc = start(["stats", str(corpus), "--no-cache", "-f", "json"], tmp_path / "err", env=forks.watch())
    assert forks.first(proc), "no worker process started"
    time.sleep(0.02)  # past the worker's start
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 2
    running = group(proc.pid)
    while time.monotonic() < deadline:
        running = [p for p in group(proc.pid) if not p.endswith(("Z", "X"))]
        if not running:
            break
        time.sleep(0.01)
    if running:
        os.killpg(proc.pid, signal.SIGKILL)
    assert running == []


@pytest.fixture
def socket_tmpdir() -> Iterator[Path]:
    """A short TMPDIR for a forkserver: its socket, TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, must fit the 107
    bytes of an AF_UNIX address, which a path under pytest's tmp_path (deeper under pytest-xdist) can pass."""
    folder = Path(tempfile.mkdtemp(prefix="ctxtool-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_ctrl_c_while_a_forkserver_pool_parses_leaves_nothing(
    corpus: Path, tmp_path: Path, socket_tmpdir: Path, forks: Forks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that has loaded polars before it scans (``audit``) starts its workers through a forkserver,
    beside multiprocessing's resource tracker: both are ended too, the server's socket folder is removed
    and the tracker says nothing (it would warn of the pool's semaphores, which are unlinked instead)."""
    monkeypatch.setenv("TMPDIR", str(socket_tmpdir))
    for k, offset in enumerate((0.0, 0.005, 0.02)):
        monkeypatch.setenv("CTXTOOL_CACHE_DIR", str(tmp_path / f"cache{k}"))  # a first scan each time
        audit = ["audit", str(corpus), "--max-session-tokens", "2M"]
        proc = start(audit, tmp_path / "err", env=forks.watch())
        assert forks.first(proc, grandchild=True), (tmp_path / "err").read_text() or "no worker started"
        time.sleep(offset)
        send(proc, signal.SIGINT, to_group=bool(k % 2))
        result, left = end(proc, tmp_path / "err", f"Ctrl-C {offset} s after a worker started")
        assert left == [], (offset, result)
        assert result == INTERRUPTED, offset
    assert list(socket_tmpdir.iterdir()) == []


_SEMAPHORE = """
import multiprocessing, time
from ctxtool.common import interrupt
interrupt.install()
context = multiprocessing.get_context("forkserver")
lock = context.Lock()  # a named semaphore, registered with the resource tracker
worker = context.Process(target=time.sleep, args=(60,))
worker.start()
print(lock._semlock.name, flush=True)
time.sleep(60)
"""


def test_ctrl_c_unlinks_the_named_semaphores_of_a_forkserver_pool(
    tmp_path: Path, socket_tmpdir: Path
) -> None:
    """The resource tracker is killed with the other children: the semaphores it would have unlinked (with
    a warning) once this process was gone are unlinked by the handler."""
    with (tmp_path / "err").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SEMAPHORE],
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
            env={**os.environ, "TMPDIR": str(socket_tmpdir)},  # (the forkserver's socket folder)
        )
    assert proc.stdout is not None
    try:
        name = proc.stdout.readline().decode().strip()
        semaphore = Path("/dev/shm") / f"sem.{name.lstrip('/')}"  # where glibc keeps a named semaphore
        assert semaphore.exists(), (tmp_path / "err").read_text()
        proc.send_signal(signal.SIGINT)
        result, left = end(proc, tmp_path / "err", "Ctrl-C")
    finally:  # a failure above must not leave the process to a later test's warnings
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
    assert left == []
    assert result == INTERRUPTED
    assert not semaphore.exists()
    assert list(socket_tmpdir.iterdir()) == []  # no pymp-* folder


_WINDOW = """
import _signal, sys
python_handler = _signal.getsignal(_signal.SIGINT)
imported = []

def audit(event, args):
    if event == "import" and _signal.getsignal(_signal.SIGINT) is python_handler:
        imported.append(args[0])

sys.addaudithook(audit)
from ctxtool.__main__ import main  # the console script's one line
print(*sorted(imported))
print(_signal.getsignal(_signal.SIGINT) is not python_handler, _signal.getsignal(_signal.SIGTERM))
"""


def test_the_entry_point_imports_nothing_before_its_handlers() -> None:
    """Until the handlers are in, Ctrl-C is Python's: a KeyboardInterrupt with a traceback. Before them the
    console script imports only the modules it must (``ctxtool``, ``ctxtool.__main__``, the ``ctxtool.common``
    package, whose ``__init__`` holds only its docstring, and ``ctxtool.common.interrupt``), and those import
    nothing the interpreter has not loaded already: no ``typing``, ``contextlib`` or ``signal``, which took
    about 20 ms."""
    out = subprocess.run([sys.executable, "-c", _WINDOW], capture_output=True, text=True, check=True)
    imported, handlers = out.stdout.splitlines()
    assert imported.split() == ["ctxtool", "ctxtool.__main__", "ctxtool.common", "ctxtool.common.interrupt"]
    assert handlers.startswith("True <function _handle"), handlers


def compact_folder(tmp_path: Path, name: str) -> Path:
    chats = tmp_path / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    shutil.copy2(FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / name, chats / name)
    return chats


@pytest.mark.parametrize(
    "name", ["session-2026-05-25T09-30-c4e5f6a7.jsonl", "session-2026-02-10T09-00-c0ffee01.json"]
)
def test_a_signal_during_compact_in_place_leaves_nothing_behind(tmp_path: Path, name: str) -> None:
    """After SIGTERM or Ctrl-C at any point, the folder holds either the untouched session (no temporary
    file, no backup, no new folder) or the completed compaction with its backup."""
    for n, delay in enumerate(POINTS):
        chats = compact_folder(tmp_path / str(n), name)
        original = (chats / name).read_bytes()
        proc = start(["compact", str(chats / name), "--force", "--in-place"], tmp_path / "err")
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM if n % 2 else signal.SIGINT)
        (code, err), left = end(proc, tmp_path / "err", f"a signal at {delay} s")
        assert left == [], (delay, code, err)
        entries = sorted(p.name for p in chats.iterdir())
        if (chats / name).read_bytes() == original and len(entries) == 1:
            assert entries == [name]  # untouched: nothing else
            continue
        assert code in (0, 130, 143), err
        done = [e for e in entries if e != name]
        assert not any(e.endswith(".tmp") or e.startswith(".") for e in entries), entries
        if name.endswith(".jsonl"):
            assert len(done) == 1, entries
            assert ".ctxtool-backup-" in done[0], entries
            assert (chats / done[0]).read_bytes() == original
        else:
            assert done == [name.replace(".json", ".jsonl")], entries
            assert (chats / name).read_bytes() == original
