"""Synthetic Gemini CLI homes for the fleet benchmark (``bench/fleet.py``): one home per machine.

Each home is laid out as Gemini CLI (v0.39+, JSONL) keeps it, with make_corpus's layout::

    <home>/.gemini/tmp/<project slug>/.project_root
    <home>/.gemini/tmp/<project slug>/chats/session-<YYYY-MM-DDTHH-MM>-<id8>.jsonl
    <home>/.gemini/tmp/<project slug>/chats/<parent session id>/<6-char id>.jsonl   (a subagent)

A session file is a metadata line, then per turn a user prompt and the model's requests, each request a
``gemini`` record with ``tokens`` and ``model`` (its tool call's request appended a second time with the same
id once the call finished, last copy wins, as Gemini CLI does), a ``{"$set": {"lastUpdated"}}`` line after
each message and a ``$set`` summary at the end (``../shared/spec/session-format.md``). Records are short
(about 0.5 kB a request, where the real ones average 10 kB of model text and tool output), so that millions of
requests fit on one disk: the fleet measures the dataset, which holds usage, not text. Everything is a pure
function of (seed, machine, parameters): the same homes are built on every machine.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import make_corpus  # a sibling script, not a package: ids of the same shape as the corpus's
import orjson

GENERATOR_VERSION = 1
MODELS = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-3-pro-preview", "gemini-2.5-flash-lite")
TOOLS = (
    ("read_file", "ReadFile", {"file_path": "src/app.py"}),
    ("grep_search", "SearchText", {"pattern": "TODO", "dir_path": "src/"}),
    ("run_shell_command", "Shell", {"command": "pytest -q"}),
    ("replace", "Edit", {"file_path": "src/app.py", "old_string": "a", "new_string": "b"}),
    ("list_directory", "ReadFolder", {"dir_path": "."}),
)


@dataclass(frozen=True)
class Params:
    """What a fleet is made of; ``key`` names its cache folder."""

    machines: int = 200
    days: int = 90
    sessions_per_day: int = 4  # mean, per machine and day
    requests_per_session: int = 50  # mean
    machines_per_user: int = 3
    end: str = "2026-12-01"  # the fleet's last day (fixed, so the cached fleet stays the same)
    seed: int = 1

    @property
    def key(self) -> str:
        text = (
            f"v{GENERATOR_VERSION}-{self.machines}x{self.days}-s{self.sessions_per_day}"
            f"-r{self.requests_per_session}-u{self.machines_per_user}-{self.end}-{self.seed}"
        )
        return text

    def machine(self, i: int) -> str:
        return f"host-{i:03d}"

    def user(self, i: int) -> str:
        return f"user-{i // self.machines_per_user:03d}"


@dataclass
class Counts:
    sessions: int = 0  # main sessions
    subagents: int = 0  # subagent sessions (a file each)
    requests: int = 0  # billed requests (gemini records with tokens), subagents' included
    bytes: int = 0
    files: int = 0

    def add(self, other: Counts) -> None:
        for name in ("sessions", "subagents", "requests", "bytes", "files"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class _Ids:
    """Deterministic ids (UUIDs and 6-char subagent ids), as make_corpus rewrites them."""

    def __init__(self, seed: str) -> None:
        self.n = int(hashlib.sha256(seed.encode()).hexdigest()[:15], 16) << 32  # new_id hashes it

    def uuid(self) -> str:
        self.n += 1
        return make_corpus.new_id("00000000-0000-4000-a000-000000000000", self.n)

    def short(self) -> str:
        self.n += 1
        return make_corpus.new_id("xs82vp", self.n)


def session_bytes(
    rng: random.Random,
    ids: _Ids,
    session_id: str,
    project_hash: str,
    start_ms: int,
    requests: int,
    model: str,
    kind: str = "main",
) -> tuple[bytes, int]:
    """One JSONL session of ``requests`` billed requests; returns its bytes and the last timestamp (ms)."""
    dumps = orjson.dumps
    now = start_ms
    meta = {"sessionId": session_id, "projectHash": project_hash, "startTime": _iso(now),
            "lastUpdated": _iso(now), "kind": kind}  # fmt: skip
    out = [dumps(meta)]
    context = rng.randint(6_000, 14_000)  # system prompt and tool declarations
    done = 0
    turn = 0
    while done < requests:
        turn += 1
        now += rng.randint(20_000, 600_000)
        prompt = f"turn {turn}: please look at the failing test and fix it ({rng.getrandbits(32):08x})"
        out.append(
            dumps({"id": ids.uuid(), "timestamp": _iso(now), "type": "user", "content": [{"text": prompt}]})
        )
        out.append(dumps({"$set": {"lastUpdated": _iso(now)}}))
        context += len(prompt) // 4 + 8
        steps = min(requests - done, rng.randint(1, 5))
        for step in range(steps):
            now += rng.randint(2_000, 40_000)
            output = rng.randint(20, 1_500)
            thoughts = rng.choice((0, 0, rng.randint(50, 900)))
            cached = 0 if done == 0 else int(context * rng.uniform(0.0, 0.9))
            tokens = {"input": context, "output": output, "cached": cached, "thoughts": thoughts, "tool": 0,
                      "total": context + output + thoughts}  # fmt: skip
            text = f"Step {step + 1}: done."
            rec: dict[str, object] = {"id": ids.uuid(), "timestamp": _iso(now), "type": "gemini",
                                      "content": text, "tokens": tokens, "model": model}  # fmt: skip
            if thoughts:
                plan = "Reading the code first."
                rec["thoughts"] = [{"subject": "Planning the change", "description": plan,
                                    "timestamp": _iso(now - 500)}]  # fmt: skip
            if step < steps - 1:  # a tool call, then the next request carries its result
                out.append(dumps(rec))  # streamed first, appended again once the tool call finished
                name, display, args = TOOLS[rng.randrange(len(TOOLS))]
                call_id = f"{name}_{now}_0"
                status = "success" if rng.random() > 0.05 else "error"
                response = {"id": call_id, "name": name, "response": {"output": "ok"}}
                rec["toolCalls"] = [{"id": call_id, "name": name, "args": args, "status": status,
                                     "result": [{"functionResponse": response}],
                                     "timestamp": _iso(now + 300), "resultDisplay": "ok",
                                     "displayName": display, "description": "",
                                     "renderOutputAsMarkdown": True}]  # fmt: skip
                context += rng.randint(200, 6_000)  # the tool's output joins the history
            out.append(dumps(rec))
            out.append(dumps({"$set": {"lastUpdated": _iso(now)}}))
            context += output + 10
            done += 1
    out.append(dumps({"$set": {"summary": f"Fix the failing test ({turn} turns)", "lastUpdated": _iso(now)}}))
    return b"\n".join(out) + b"\n", now


def build_machine(params: Params, index: int, home: Path) -> Counts:
    """Write machine ``index``'s home under ``home`` (which must not exist yet); its counts."""
    rng = random.Random(f"{params.seed}/{index}")
    ids = _Ids(f"{params.seed}/{index}")
    counts = Counts()
    tmp = home / ".gemini" / "tmp"
    projects = []
    for p in range(rng.randint(2, 6)):
        slug = f"project-{index:03d}-{p}"
        root = f"/home/{params.user(index)}/src/{slug}"
        folder = tmp / slug
        (folder / "chats").mkdir(parents=True)
        (folder / ".project_root").write_text(root + "\n")
        projects.append((folder / "chats", hashlib.sha256(root.encode()).hexdigest()))
    main_model = MODELS[index % len(MODELS)]
    end = datetime.fromisoformat(params.end).replace(tzinfo=UTC)
    mean_s, mean_r = params.sessions_per_day, params.requests_per_session
    for day in range(params.days):
        midnight = end - timedelta(days=params.days - 1 - day)
        n = rng.randint(1, max(1, 2 * mean_s - 1))  # mean: mean_s
        clock = int(midnight.timestamp() * 1000) + rng.randint(7, 10) * 3_600_000
        for _ in range(n):
            chats, project_hash = projects[rng.randrange(len(projects))]
            sid = ids.uuid()
            requests = rng.randint(max(1, mean_r // 4), max(1, mean_r * 7 // 4))
            model = main_model if rng.random() < 0.8 else MODELS[rng.randrange(len(MODELS))]
            start = clock
            name = f"session-{_iso(start)[:16].replace(':', '-')}-{sid[:8]}.jsonl"
            data, last = session_bytes(rng, ids, sid, project_hash, start, requests, model)
            (chats / name).write_bytes(data)
            counts.sessions += 1
            counts.files += 1
            counts.requests += requests
            counts.bytes += len(data)
            if rng.random() < 0.1:  # a subagent of its own file, started within the session
                sub = ids.short()
                folder = chats / sid
                folder.mkdir()
                r = rng.randint(2, 12)
                at = start + (last - start) // 2
                data, _ = session_bytes(rng, ids, sub, project_hash, at, r, "gemini-2.5-flash", "subagent")
                (folder / f"{sub}.jsonl").write_bytes(data)
                counts.subagents += 1
                counts.files += 1
                counts.requests += r
                counts.bytes += len(data)
            clock = last + rng.randint(5, 90) * 60_000
    return counts


def extra_session(params: Params, index: int, home: Path, n: int) -> tuple[Path, bytes, int]:
    """One more session (the ``n``-th the benchmark adds) for machine ``index``'s first project, on the
    fleet's last day: its path, bytes and request count (not written)."""
    rng = random.Random(f"{params.seed}/{index}/extra/{n}")
    ids = _Ids(f"{params.seed}/{index}/extra/{n}")
    chats = sorted((home / ".gemini" / "tmp").glob("*/chats"))[0]
    root = (chats.parent / ".project_root").read_text().strip()
    end = datetime.fromisoformat(params.end).replace(tzinfo=UTC)
    start = int(end.timestamp() * 1000) + 23 * 3_600_000 + n * 60_000
    sid = ids.uuid()
    requests = params.requests_per_session
    data, _ = session_bytes(rng, ids, sid, hashlib.sha256(root.encode()).hexdigest(), start, requests,
                            MODELS[index % len(MODELS)])  # fmt: skip
    return chats / f"session-{_iso(start)[:16].replace(':', '-')}-{sid[:8]}.jsonl", data, requests
