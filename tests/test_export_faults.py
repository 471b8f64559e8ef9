"""What goes wrong around `ctxtool export` and `ctxtool archive`, in a folder and in an S3-compatible store
(moto's server on 127.0.0.1), and why a reader still sees each billed request exactly once.

Writers that run at once (eight machines, eight Gemini CLI windows closing), a writer SIGKILLed at ten
instants while a reader polls, a full disk, a store that answers 503 or resets connections, and one that is
not there: each is one line naming the cause, and the dataset is whole at every instant.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest

from ctxtool import frames
from ctxtool.cli import run
from tests.conftest import FIXTURES, REAL_SESSIONS
from tests.objectstore import FaultProxy, S3Server, unreachable_endpoint

pytest_plugins = ["tests.objectstore"]

DATA = FIXTURES / "gemini" / "tmp"
CHATS = DATA / "ctxdemo" / "chats"
CTXTOOL = Path(sys.executable).with_name("ctxtool")
# Eight sessions with eight different ids, of both eras.
EIGHT = [
    "session-2026-02-10T09-00-c0ffee01.json",
    "session-2026-03-02T14-20-d00dfeed.json",
    "session-2026-04-22T16-40-5e7a0b1c.jsonl",
    "session-2026-04-23T08-05-9a8b7c6d.jsonl",
    "session-2026-04-28T13-05-7f6e5d4c.jsonl",
    "session-2026-04-30T17-45-1c2d3e4f.json",
    "session-2026-05-25T09-30-c4e5f6a7.jsonl",
    "session-2026-06-10T08-00-0a0b0c0d.jsonl",
]


# --- helpers -----------------------------------------------------------------------------------------


def gemini_home(home: Path, names: list[str] = EIGHT) -> Path:
    """A home with these sessions where Gemini CLI keeps them (``<home>/.gemini/tmp/<project>/chats``)."""
    chats = home / ".gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text("/work/proj", encoding="utf-8")
    for name in names:
        shutil.copy(CHATS / name, chats / name)
    return chats


def env_for(home: Path, extra: dict[str, str] | None = None, **names: str) -> dict[str, str]:
    env = {
        **os.environ,
        "GEMINI_CLI_HOME": str(home),
        "CTXTOOL_CACHE_DIR": str(home / "cache"),
        **(extra or {}),
    }
    env.update({f"CTXTOOL_{k.upper()}": v for k, v in names.items()})
    return env


def hook_event(session: Path) -> bytes:
    """The JSON Gemini CLI writes on a SessionEnd hook's standard input (spec/gemini-cli-hooks.md)."""
    [session_id] = set(frames.load([str(session)]).sessions.get_column("session_id").to_list())
    doc = {
        "session_id": session_id,
        "transcript_path": str(session),
        "cwd": "/work/proj",
        "hook_event_name": "SessionEnd",
        "timestamp": "2026-11-20T10:00:00.000Z",
        "reason": "exit",
    }
    return json.dumps(doc).encode()


def start(args: list[str], env: dict[str, str], stdin: bytes | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [str(CTXTOOL), *args], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
    assert proc.stdin is not None
    proc.stdin.close()
    proc.stdin = None  # (communicate would flush it)
    return proc


def finish(proc: subprocess.Popen[bytes], timeout: float = 180) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


def requests_seen(where: str, storage_options: dict[str, str] | None = None) -> pl.DataFrame:
    """The requests a plain reader sees: polars globbing the dataset, knowing nothing of ctxtool."""
    glob = f"{where}/requests/**/*.parquet"
    try:
        return pl.read_parquet(glob, hive_partitioning=True, storage_options=storage_options).select(
            "machine", "session_key", "message_id", "total"
        )
    except (FileNotFoundError, pl.exceptions.ComputeError) as exc:
        if "expanded paths were empty" in str(exc) or "no such file" in str(exc).lower():
            return pl.DataFrame(
                schema={
                    "machine": pl.String,
                    "session_key": pl.String,
                    "message_id": pl.String,
                    "total": pl.Int64,
                }
            )
        raise


def assert_each_request_once(seen: pl.DataFrame) -> None:
    dupes = seen.filter(seen.select("machine", "session_key", "message_id").is_duplicated())
    assert dupes.height == 0, dupes


def total_of(*homes: Path) -> int:
    return sum(
        int(frames.load([str(h / ".gemini" / "tmp")]).requests.get_column("total").sum()) for h in homes
    )


# --- many writers at once ------------------------------------------------------------------------------


def test_eight_machines_export_to_one_store_at_once(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    url = f"s3://{bucket}/team"
    homes = []
    for i in range(8):
        homes.append(tmp_path / f"m{i}")
        gemini_home(homes[-1], EIGHT[i:] + EIGHT[:i])
    procs = [
        start(["export", "--to", url], env_for(h, s3.env(), user=f"u{i % 3}", machine=f"m{i}"))
        for i, h in enumerate(homes)
    ]
    for proc in procs:
        code, err = finish(proc)
        assert code == 0, err
    seen = requests_seen(url, s3.storage_options())
    assert_each_request_once(seen)
    assert seen.height == 8 * frames.load([str(CHATS / n) for n in EIGHT]).requests.height
    assert int(seen.get_column("total").sum()) == total_of(*homes)
    _, out = _stats_json(["stats", url, "--by", "machine", "--format", "json"], s3.env())
    assert [r["machine"] for r in out["rows"]] == [f"m{i}" for i in range(8)]
    # Per user, to the token and the cent, what `ctxtool stats` gives on each user's own machines.
    _, by_user = _stats_json(["stats", url, "--by", "user", "--format", "json"], s3.env())
    local = [_stats_json(["stats", "--format", "json"], env_for(h))[1]["totals"] for h in homes]
    assert [r["user"] for r in by_user["rows"]] == ["u0", "u1", "u2"]
    for row in by_user["rows"]:
        mine = [t for i, t in enumerate(local) if f"u{i % 3}" == row["user"]]
        for col in ("requests", "input", "output", "cached", "thoughts", "tool", "total"):
            assert row[col] == sum(t[col] for t in mine), (row["user"], col)
        assert abs(row["cost"] - sum(t["cost"] for t in mine)) < 0.005


def test_eight_archives_at_once_on_one_machine_keep_all_eight(tmp_path: Path) -> None:
    home = tmp_path / "home"
    chats = gemini_home(home)
    ds = tmp_path / "history"
    procs = [start(["archive", "--to", str(ds)], env_for(home), hook_event(chats / n)) for n in EIGHT]
    for proc in procs:
        code, err = finish(proc)
        assert code == 0, err
        assert "not archived" not in err, err
    seen = requests_seen(str(ds))
    assert_each_request_once(seen)
    assert int(seen.get_column("total").sum()) == total_of(home)
    assert len(list((ds / "sessions").rglob("*.parquet"))) == 8


def test_an_archive_that_could_not_write_is_written_by_the_next(tmp_path: Path) -> None:
    home = tmp_path / "home"
    chats = gemini_home(home, EIGHT[:2])
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder", encoding="utf-8")
    ds = blocked / "history"
    code, err = finish(start(["archive", "--to", str(ds)], env_for(home), hook_event(chats / EIGHT[0])))
    assert code == 0
    assert err.count("\n") == 1, err
    assert "not archived yet" in err, err
    blocked.unlink()
    blocked.mkdir()
    code, err = finish(start(["archive", "--to", str(ds)], env_for(home), hook_event(chats / EIGHT[1])))
    assert code == 0, err
    assert "Wrote 2 sessions" in err, err
    assert int(requests_seen(str(ds)).get_column("total").sum()) == total_of(home)
    assert not list((home / "cache" / "exports" / "pending").rglob("*.json"))


# --- a writer killed at any instant -------------------------------------------------------------------


def _grow_all(chats: Path) -> None:
    """Every session grows by one request (Gemini CLI appended a turn to each)."""
    for i, path in enumerate(sorted(chats.glob("*.jsonl"))):
        line = {
            "id": f"92000000-0000-4000-8000-{i:012d}",
            "timestamp": "2026-07-01T08:00:09.000Z",
            "type": "gemini",
            "content": "more",
            "tokens": {"input": 1000, "output": 10, "cached": 0, "thoughts": 0, "tool": 0, "total": 1010},
            "model": "gemini-2.5-pro",
        }
        with path.open("ab") as fh:
            fh.write(json.dumps(line).encode() + b"\n")


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="the real sessions are not on this machine")
def test_a_writer_killed_at_ten_instants_never_shows_a_request_twice_or_loses_one(
    tmp_path: Path, s3: S3Server, bucket: str
) -> None:
    url = f"s3://{bucket}/team"
    home = tmp_path / "home"
    chats = home / ".gemini" / "tmp" / "real" / "chats"
    shutil.copytree(REAL_SESSIONS, chats, ignore=shutil.ignore_patterns("README*"))
    env = env_for(home, s3.env(), machine="m1")
    began = time.monotonic()
    code, err = finish(start(["export", "--to", url, "--no-cache"], env))
    assert code == 0, err
    whole = time.monotonic() - began  # a run that writes every session: the ten instants spread over it
    first = requests_seen(url, s3.storage_options())
    _grow_all(chats)
    want = total_of(home)
    stop = threading.Event()
    polls: list[pl.DataFrame] = []

    def poll() -> None:
        while not stop.is_set():
            polls.append(requests_seen(url, s3.storage_options()))

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for delay in (whole * i / 11 for i in range(1, 11)):
            proc = start(["export", "--to", url, "--no-cache"], env)
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
    finally:
        stop.set()
        reader.join(timeout=60)
    assert len(polls) >= 10
    for seen in polls:
        assert_each_request_once(seen)
        assert seen.height >= first.height  # a rewrite never hides a request that was there
    code, err = finish(start(["export", "--to", url], env))
    assert code == 0, err
    after = requests_seen(url, s3.storage_options())
    assert_each_request_once(after)
    assert int(after.get_column("total").sum()) == want


# --- a store that fails, a disk that fills ------------------------------------------------------------


def test_503s_and_resets_are_retried(
    tmp_path: Path, s3: S3Server, bucket: str, fault_proxy: FaultProxy
) -> None:
    home = tmp_path / "home"
    gemini_home(home, EIGHT[:3])
    env = env_for(home, {**s3.env(), "AWS_ENDPOINT_URL": fault_proxy.url}, machine="m1")
    fault_proxy.fail_next(2, 503)
    code, err = finish(start(["export", "--to", f"s3://{bucket}/team"], env))
    assert code == 0, err
    fault_proxy.reset_next(2)
    _grow_all(home / ".gemini" / "tmp" / "proj" / "chats")
    code, err = finish(start(["export", "--to", f"s3://{bucket}/team"], env))
    assert code == 0, err
    assert int(
        requests_seen(f"s3://{bucket}/team", s3.storage_options()).get_column("total").sum()
    ) == total_of(home)


def test_slow_answers_are_waited_for(
    tmp_path: Path, s3: S3Server, bucket: str, fault_proxy: FaultProxy
) -> None:
    home = tmp_path / "home"
    gemini_home(home, EIGHT[:2])
    env = env_for(home, {**s3.env(), "AWS_ENDPOINT_URL": fault_proxy.url}, machine="m1")
    fault_proxy.delay_responses(0.3)
    code, err = finish(start(["export", "--to", f"s3://{bucket}/team"], env))
    assert code == 0, err
    assert fault_proxy.requests >= 10  # the marker, then five objects a session, each answered late
    fault_proxy.pass_through()
    assert int(
        requests_seen(f"s3://{bucket}/team", s3.storage_options()).get_column("total").sum()
    ) == total_of(home)


def test_a_store_that_keeps_failing_is_one_line_and_exit_1(
    tmp_path: Path, s3: S3Server, bucket: str, fault_proxy: FaultProxy
) -> None:
    home = tmp_path / "home"
    gemini_home(home, EIGHT[:2])
    env = env_for(
        home, {**s3.env(), "AWS_ENDPOINT_URL": fault_proxy.url, "AWS_SECRET_ACCESS_KEY": "s3cr3t-v4lue"}
    )
    fault_proxy.fail_next(1000, 500)
    code, err = finish(start(["export", "--to", f"s3://{bucket}/team"], env))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"Error: s3://{bucket}/team: cannot ")
    assert "s3cr3t-v4lue" not in err


def test_an_unreachable_endpoint_is_one_line_exit_1_within_60_s(tmp_path: Path) -> None:
    home = tmp_path / "home"
    gemini_home(home, EIGHT[:1])
    endpoint = unreachable_endpoint()
    env = env_for(
        home,
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_REGION": "us-east-1",
        },
    )
    began = time.monotonic()
    code, err = finish(start(["export", "--to", "s3://nowhere/team"], env), timeout=90)
    took = time.monotonic() - began
    assert code == 1
    assert took < 60, took
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "s3://nowhere/team" in lines[0]
    assert "reachable" in lines[0]
    code, err = finish(start(["stats", "s3://nowhere/team"], env), timeout=90)
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1, err


@contextmanager
def tiny_tmpfs(where: Path) -> Iterator[Path]:
    """A real 2 MB file system (tmpfs), mounted for the test and unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.fail(f"running as root, but `mount -t tmpfs` on {where} failed ({done.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_real_full_disk_is_one_line_and_leaves_whole_objects(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    with tiny_tmpfs(tmp_path / "disk") as disk:
        ds = disk / "history"
        filler = disk / "filler"
        with open(filler, "wb") as fh:
            fh.write(b"\0" * (2 * 1024 * 1024 - 200 * 1024))  # room for some sessions, not all
        code = run(["export", str(DATA), "--to", str(ds), "--no-cache"])
        err = capsysbinary.readouterr().err.decode()
        assert code == 1
        lines = [line for line in err.strip().splitlines() if not line.startswith(("warning: ", "notice: "))]
        assert len(lines) == 1, lines
        assert "No space left on device" in lines[0]
        assert "free some space" in lines[0]
        assert not list(ds.rglob("*.tmp"))
        assert not list(ds.rglob(".*"))
        seen = requests_seen(str(ds))
        assert_each_request_once(seen)
        filler.unlink()
        assert run(["export", str(DATA), "--to", str(ds), "--no-cache"]) == 0
        capsysbinary.readouterr()
        assert requests_seen(str(ds)).height == frames.load([DATA]).requests.height


def _stats_json(args: list[str], env: dict[str, str]) -> tuple[int, dict[str, object]]:
    done = subprocess.run([str(CTXTOOL), *args], env={**os.environ, **env}, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done.returncode, json.loads(done.stdout)


def test_hooks_install_an_archive_to_a_store_and_it_writes_there(
    tmp_path: Path, s3: S3Server, bucket: str
) -> None:
    """`ctxtool hooks install --archive s3://…` puts that URL in Gemini CLI's SessionEnd hook as it is; the
    command it installs, run as Gemini CLI runs it, writes the session into the store."""
    import shlex

    from ctxtool.hooks import settings

    home = tmp_path / "home"
    chats = gemini_home(home, EIGHT[:1])
    url = f"s3://{bucket}/team"
    env = env_for(home, s3.env(), user="alice", machine="m1")
    done = subprocess.run(
        [str(CTXTOOL), "hooks", "install", "--max-daily-cost", "20", "--archive", url],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    [end] = [h for h in settings.status(home / ".gemini" / "settings.json") if h["event"] == "SessionEnd"]
    command = shlex.split(end["command"])
    assert command[-3:] == ["archive", "--to", url]
    code, err = finish(start([*command[1:]], env, hook_event(chats / EIGHT[0])))
    assert code == 0, err
    assert "Wrote 1 session" in err, err
    assert int(requests_seen(url, s3.storage_options()).get_column("total").sum()) == total_of(home)
