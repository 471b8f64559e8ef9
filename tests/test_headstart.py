"""The head start: a first ``stats`` starts reading in a second process before its command line is parsed
(``ctxtool.session.headstart``, begun by ``ctxtool.launch``), and the scan adopts that process only when it
read the scan's own files, as the scan would: the results never depend on it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer

from ctxtool import launch
from ctxtool.frames import adoption, tally
from ctxtool.session import headstart, scan
from ctxtool.session.discover import discover
from ctxtool.session.index import FileIndex
from tests.conftest import FIXTURES, REAL_SESSIONS

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not headstart.available(), reason="the head start needs Linux (fork, memfd)")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    target = tmp_path / "gemini" / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", target)
    return target


def _start(targets: list[str]) -> headstart.Started:
    """A head start as ``ctxtool.launch`` begins it and a scan of ``stats`` takes it."""
    started = headstart.start(targets, True, adoption.reader)
    assert started is not None
    started.unpack = tally.unpack_measure
    return started


def _read(files: list, started: headstart.Started | None = None, index: FileIndex | None = None) -> tuple:
    kept: dict[str, object] = {}
    results = scan.read_files(
        files, workers=1, then=tally.count_and_price, kept=kept, index=index, started=started
    )
    return [(fc.path, fc.messages_cols, fc.tools_cols, fc.n_messages) for fc in results], {
        path: tally._encode_measured(m)
        for path, m in kept.items()  # type: ignore[arg-type]
    }


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # reaped
    return False


def test_an_adopted_head_start_reads_what_the_scan_alone_reads(data: Path, tmp_path: Path) -> None:
    """Adopted, it and this process share the files (each taken once) and the results, the measures kept
    beside them and the index are those of the scan alone; it is gone after."""
    files = discover([data]).files
    expected = _read(files)
    started = _start([str(data)])
    adopted: list[list[int]] = []
    beside = scan._read_beside

    def recording(s: scan._Scan, st: headstart.Started, order: list[int]) -> None:
        adopted.append(order)
        beside(s, st, order)

    index = FileIndex(tmp_path / "cache")
    scan._read_beside, saved = recording, scan._read_beside  # type: ignore[assignment]
    try:
        got = _read(files, started, index)
    finally:
        scan._read_beside = saved  # type: ignore[assignment]
    assert got == expected
    assert len(adopted) == 1
    assert sorted(adopted[0]) == list(range(len(files)))
    assert _gone(started.pid)
    assert (index.parsed, len(FileIndex(tmp_path / "cache"))) == (len(files), len(files))


def test_what_a_head_start_found_is_what_discovery_finds(data: Path, tmp_path: Path) -> None:
    """Its discovery crosses whole (skipped, missing, empty and unreadable entries too, a project whose name
    is not UTF-8), and is given only for the PATHs and ``--subagents`` it was started with."""
    (data / "proj" / "chats").mkdir(parents=True)  # an empty folder of chats
    (data / "notes.tmp.json").write_text("{}")  # a temporary file, skipped
    odd = os.path.join(os.fsencode(data), b"caf\xe9-\xff", b"chats")  # a name os.fsdecode escapes
    os.makedirs(odd)
    session = next(sp.path for sp in discover([data]).files if sp.path.suffix == ".jsonl")
    shutil.copy(session, os.path.join(os.fsdecode(odd), session.name))
    targets = [str(data), str(tmp_path / "absent")]
    started = _start(targets)
    try:
        assert started.discovery(targets, True) == discover(targets)
        assert started.discovery(targets, False) is None
        assert started.discovery([str(data)], True) is None
    finally:
        started.stop()


def test_a_head_start_that_found_other_files_is_stopped_unused(data: Path, tmp_path: Path) -> None:
    """Its files are not the scan's (another PATH, or one file changed since it looked): it is stopped, and
    the scan reads every file itself."""
    files = discover([data]).files
    expected = _read(files)
    other = tmp_path / "other"
    shutil.copytree(data, other)
    for targets in ([str(other)], [str(data)]):
        started = _start(targets)
        assert started.read_plan() is not None
        if targets == [str(data)]:  # the largest file grew after it looked
            biggest = max(files, key=lambda sp: sp.path.stat().st_size).path
            with biggest.open("ab") as fh:
                fh.write(b"\n")
        got = _read(files, started)
        assert _gone(started.pid)
        if targets == [str(other)]:
            assert got == expected


def test_a_head_start_that_dies_leaves_its_files_to_the_scan(data: Path) -> None:
    """Killed after its plan (for memory, say): the scan reads what it did not finish."""
    files = discover([data]).files
    expected = _read(files)
    started = _start([str(data)])
    assert started.read_plan() is not None
    os.kill(started.pid, signal.SIGKILL)
    assert _read(files, started) == expected
    assert _gone(started.pid)


def test_a_record_that_does_not_read_back_ends_the_head_start(data: Path) -> None:
    """A record this process cannot read back counts as the head start's end: what it did not hand over
    before it, the scan reads itself, and the results are those of the scan alone."""
    files = discover([data]).files
    expected = _read(files)
    started = _start([str(data)])

    def failing(data: bytes) -> object:
        raise ValueError("not a measure")

    started.unpack = failing
    assert _read(files, started) == expected
    assert _gone(started.pid)


def test_a_head_start_ends_when_its_parent_is_gone(data: Path, tmp_path: Path) -> None:
    """A parent killed without a word (``kill -9``): the head start stops at its next file."""
    code = (
        "import os, sys, time\n"
        "from ctxtool.session import headstart\n"
        "from ctxtool.frames import adoption\n"
        f"s = headstart.start([{str(data)!r}], True, adoption.reader)\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)}
    ) as proc:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        proc.kill()
    for _ in range(200):
        try:  # gone, or a zombie left for init to reap
            if Path(f"/proc/{child}/stat").read_text().split(")")[-1].split()[0] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the head start outlived its parent by 10 s")


def test_the_head_start_hears_its_parent_go() -> None:
    """Between files it reads how many files the main process took and records it read; the pipe's end closed
    (the main process is gone) reads as None, and it stops."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        assert headstart._claimed(r, (3, 1)) == (3, 1)  # nothing new
        os.write(w, headstart._CLAIMS.pack(5, 2) + headstart._CLAIMS.pack(7, 4))
        assert headstart._claimed(r, (3, 1)) == (7, 4)  # the latest
        os.close(w)
        assert headstart._claimed(r, (7, 4)) is None
    finally:
        os.close(r)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["stats"], ([], True)),
        (["stats", "a", "b"], (["a", "b"], True)),
        (["stats", "--by", "day", "a", "--format=json", "--no-subagents"], (["a"], False)),
        (["stats", "-b", "week", "-n", "5", "--desc", "--", "--odd"], (["--odd"], True)),
        (["stats", "--no-cache", "--cache-dir", "c", "x"], (["x"], True)),
        (["stats", "--help"], None),
        (["stats", "--unknown"], None),
        (["stats", "--top", "3"], None),
        (["stats", "--top=3", "a"], None),
        (["stats", "--by", "turn"], ([], True)),
        (["stats", "-b", "request", "a"], (["a"], True)),
        (["stats", "--format", "csv"], ([], True)),
        (["stats", "-f", "parquet", "-o", "r.parquet", "a"], (["a"], True)),
        (["stats", "--live"], ([], True)),
        (["stats", "-s", "abcd"], ([], True)),
        (["stats", "--tz", "UTC"], ([], True)),
        (["stats", "--timezone=Asia/Kolkata", "--since", "2026-03-01", "a"], (["a"], True)),
        (["stats", "-p", "x", "-m", "gemini-3", "--sort", "cost", "--desc"], ([], True)),
        (["stats", "--by", "hour"], None),
        (["stats", "--format", "xml"], None),
        (["stats", "--by"], None),
        (["compact", "x"], None),
    ],
)
def test_the_guess_of_what_a_stats_run_reads(
    argv: list[str], expected: tuple[list[str], bool] | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXTOOL_CACHE_DIR", str(tmp_path / "cache"))
    assert launch._guess(argv) == expected


def test_the_guess_knows_every_report_and_format() -> None:
    """Written out in ``ctxtool.launch`` (standard library only), they are the command's choices."""
    from ctxtool.common.choices import BY_CHOICES, FORMATS

    assert set(BY_CHOICES) == launch._TALLY_BY
    assert set(FORMATS) == launch._TALLY_FORMATS


def test_no_guess_once_the_index_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run after the first reads little (the index serves the files): no head start."""
    from ctxtool.session.stamp import STAMP

    monkeypatch.setenv("CTXTOOL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / "index").mkdir(parents=True)
    (tmp_path / "cache" / "index" / f"{STAMP}.sqlite").write_bytes(b"")
    assert launch._guess(["stats", "x"]) is None
    assert launch._guess(["stats", "x", "--no-cache"]) == (["x"], True)


def test_the_guess_knows_every_option_of_stats() -> None:
    """The options that take a value and the flags are those of ``ctxtool stats`` itself: a new option is an
    unknown word until it is added here (then the guess gives up, which costs speed, never a result)."""
    import ctxtool.cli as cli

    cli.register(["stats"])
    command = typer.main.get_command(cli.app).commands["stats"]  # type: ignore[attr-defined]
    valued, flags = set(), set()
    for param in command.params:
        names = {*param.opts, *getattr(param, "secondary_opts", [])}
        if param.param_type_name == "option":
            (flags if param.is_flag else valued).update(names)
    assert (valued, flags) == (set(launch.VALUED), set(launch.FLAGS))


def _stats(home: Path, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "ctxtool", "stats", str(home), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", **env},
    )
    return done.returncode, done.stdout, done.stderr


# Runs one after another in one cache folder: a first run and ``--no-cache`` ones begin with a head start
# (unless it is off), the run after a first one is served by the index it wrote.
_RUNS = {
    "default": [["--format", "json"], ["--format", "json"], ["--by", "day", "--no-cache"]],
    "live": [["--live", "-f", "json", "--no-cache"]],
    "turn": [["--by", "turn", "--no-cache"], ["--by", "turn", "-f", "json", "--no-cache"]],
    "filters": [
        ["--since", "2026-03-01", "--tz", "Asia/Kolkata", "--by", "request", "-f", "csv", "--no-cache"]
    ],
}


@pytest.mark.parametrize("runs", list(_RUNS.values()), ids=list(_RUNS))
@pytest.mark.parametrize("home", [FIXTURES, REAL_SESSIONS], ids=["fixtures", "real-sessions"])
def test_stats_says_the_same_with_and_without_the_head_start(
    home: Path, runs: list[list[str]], tmp_path: Path
) -> None:
    """The same output, status and warnings either way."""
    if not home.is_dir():
        pytest.skip(f"{home} is not here")
    outputs = []
    for off in ("", "1"):
        cache = tmp_path / f"cache-{off or 'on'}"
        env = {"CTXTOOL_NO_HEADSTART": off, "CTXTOOL_CACHE_DIR": str(cache)}
        outputs.append([_stats(home, args, env) for args in runs])
    assert outputs[0] == outputs[1]
