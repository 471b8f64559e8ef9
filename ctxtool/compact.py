"""Compact one Gemini CLI session file: plan with the Gemini CLI port, then write a file Gemini CLI resumes.

Owns the mapping between the port (``ctxtool.compress.gemini_cli.chat_compression``, which works on curated
history turns) and session files (message records), where the result goes, and the per-session report. It is
pure apart from the writes it is asked to do; it never prints.

The output (spec gemini-cli-compression.md sections 4, 10-13): the session is read as Gemini CLI resumes it
(``SessionFile.messages``), curated (section 11.4) and handed to ``compress``, whose split lands on a plain
user turn (or past the end), found by the id of the user message that opened it (``coalesceConsecutiveRoles``
keeps the first id). Every session message from that one on is kept in its original order, including the
records ``convertSessionToClientHistory`` skips; every message before it is summarised away.

* COMPRESSED writes ``[stored <session_context> message (if the session had one), summary (user), ack
  (gemini), ...kept messages]``, summary and ack in the HEAD shapes of section 12. Kept messages are the
  records as loaded, re-serialised canonically; a tool output that upstream's budget truncation (section 6)
  replaced is set to the truncated response, as Gemini CLI's masking sync does (``synced_messages``).
* CONTENT_TRUNCATED (``truncate_only``, or an automatic attempt after an inflated result) writes every
  message, truncated tool outputs synced the same way.
* NOOP and the COMPRESSION_FAILED statuses write nothing.

Truncated tool outputs are saved to ``<project temp dir of the output>/tool-outputs/`` (upstream's
``saveTruncatedToolOutput`` without a session id). With the offline summarizer, an injected clock and id
generator, the same input gives the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import msgspec

from ctxtool.common import interrupt
from ctxtool.common.errors import CtxtoolError, UsageError
from ctxtool.common.jsvalue import js_iso, js_truthy
from ctxtool.common.wording import plural
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.compress.gemini_cli.profiles import DEFAULT_PROFILE, Profile, get_profile
from ctxtool.compress.gemini_cli.texts import CTXTOOL_TEXTS, CompressionTexts
from ctxtool.compress.strategies.base import (
    StrategyOptions,
    StrategyResult,
    gemini_estimate,
    text_record,
    wire_history,
)
from ctxtool.compress.summarize.facts import extract_facts, history_text, retention
from ctxtool.compress.summarize.offline import KeepFacts, OfflineSummarizer
from ctxtool.compress.summarizer import Content, Summarizer
from ctxtool.session.columns import TurnCounts, classify_user, message_text, turn_counts
from ctxtool.session.discover import SessionPath, discover
from ctxtool.session.ids import idless_lines, with_unique_ids
from ctxtool.session.read import Era, SessionFile, parse_session_bytes
from ctxtool.session.write import (
    BACKUP_MARKER,
    FileStamp,
    atomic_write,
    clean_stale_temps,
    replace_checked,
    session_bytes,
    stringify,
    write_backup,
)

Mode = Literal["out", "new-session", "in-place"]
FAILED = "FAILED"  # status of a file that could not be read or written (not an upstream status)
DEFAULT_CHAT_MODEL = g.DEFAULT_CHAT_MODEL
DEFAULT_OUT_DIR = "ctxtool-compacted"
# The smallest positive threshold: with it the "under the threshold" test never holds, which is how
# `--force` reaches the truncation-only path (upstream forces it only after a latched failure).
_ALWAYS = 5e-324


@dataclass(frozen=True)
class CompactOptions:
    profile: str = DEFAULT_PROFILE
    force: bool = False
    threshold: float | None = None  # of the token limit; None: the profile's default
    truncate_only: bool = False
    dry_run: bool = False
    chat_model: str | None = None  # None: the newest model recorded in the session
    # The fixed texts of the gemini-cli strategy: ctxtool's own; --prompt-file replaces the system prompt,
    # --prompt-from-gemini-cli every text with the installed Gemini CLI's.
    texts: CompressionTexts = CTXTOOL_TEXTS
    # The project folder a session without a stored <session_context> ran in (--workspace); None: the
    # .project_root file beside chats/ names it.
    workspace: Path | None = None
    strategy: str = "gemini-cli"  # ctxtool.compress.strategies name; others than gemini-cli ignore profile
    context_window: int | None = None  # other strategies: window for their trigger (None: their default)
    custom_instructions: str | None = None  # other strategies: focus text appended to their prompt
    era: Era | None = None  # the output's format: "jsonl" (current) or legacy "json"; None: the input's own
    redact_secrets: bool = False  # write secrets found in the kept text as [REDACTED:kind]


@dataclass(frozen=True)
class Destination:
    """Where compacted files go: ``out`` (a tree, or ``out_file`` for one), ``new-session``, ``in-place``."""

    mode: Mode = "out"
    out_dir: Path = Path(DEFAULT_OUT_DIR)
    out_file: Path | None = None


@dataclass
class CompactionReport:
    """What happened to one session file; ``as_dict`` is the JSON form (``ctxtool compact --format json``)."""

    input_path: str
    status: str  # a CompressionStatus name, or FAILED
    written: bool = False
    dry_run: bool = False
    output_path: str | None = None
    era: str | None = None
    output_era: str | None = None
    profile: str | None = None
    model: str | None = None  # the chat model the session ran on (token limit, summarizer alias)
    summarizer: str | None = None
    summarizer_model: str | None = None
    deterministic: bool | None = None
    threshold: float | None = None
    token_limit: int | None = None
    # Tokens before/after: one measure for every command and strategy (``measure_history``): Gemini CLI's
    # local estimate of the history a resume of the session sends, env turn included.
    tokens_before: int | None = None
    tokens_after: int | None = None
    # The prompt tokens recorded for the session's last request (None when it recorded none).
    recorded_prompt_tokens: int | None = None
    # What the gemini-cli strategy's threshold check read, as Gemini CLI does: the recorded prompt tokens,
    # else the estimate ("recorded" or "estimate").
    threshold_tokens: int | None = None
    threshold_tokens_source: str | None = None
    split_index: int | None = None  # into the curated turns
    split_message_id: str | None = None
    messages_total: int | None = None
    messages_summarised: int | None = None
    messages_kept: int | None = None
    turns_summarised: int | None = None
    turns_kept: int | None = None
    tool_outputs_truncated: list[str] = field(default_factory=list)
    synced_messages: list[str] = field(default_factory=list)
    env_synthesized: bool | None = None  # True when the <session_context> turn was not the stored one
    env_source: str | None = None  # stored, built (from the project folder) or stand-in
    # How many tool outputs of the written history Gemini CLI 0.61 will mask when it next sends it.
    masked_by_gemini_cli: int | None = None
    anchored: bool | None = None
    retention: dict[str, dict[str, Any]] | None = None
    backup_path: str | None = None
    session_id: str | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    # Why a NOOP or a failed compression wrote nothing, and what would change it; on a COMPRESSED row, why
    # the history grew (tokens_after > tokens_before).
    reason: str | None = None
    strategy: str = "gemini-cli"
    trigger: dict[str, Any] | None = None  # other strategies: their own trigger replayed on the session
    strategy_tokens: dict[str, Any] | None = None  # other strategies: {measure, before, after} in their unit

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def failed(cls, path: Path | str, error: str) -> CompactionReport:
        return cls(input_path=str(path), status=FAILED, error=error)


def measure_history(messages: Sequence[Mapping[str, Any]], model: str) -> int:
    """Tokens before/after, as ``compact``, ``compare`` and ``diff`` report them (``gemini_estimate``)."""
    return gemini_estimate([dict(m) for m in messages], model)


def _redacted(messages: Sequence[Mapping[str, Any]], report: CompactionReport) -> list[dict[str, Any]]:
    """``--redact-secrets``: every secret in the messages written as ``[REDACTED:kind]``, so a leaked key does
    not travel on into the next conversation."""
    from ctxtool.common.secret_scan import in_messages, redact_value

    if not (found := in_messages(messages)):
        return [dict(m) for m in messages]
    report.notes.append(f"{plural(len(found), 'secret')} written as [REDACTED:kind] (--redact-secrets)")
    keep = ("id", "timestamp", "type", "model", "tokens")
    return [{k: (v if k in keep else redact_value(v)) for k, v in m.items()} for m in messages]


def as_copies(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages ctxtool writes, as copies: without ``tokens``. The requests were billed once, in the
    session they were recorded in; a copy is not a new response (Gemini CLI 0.61.0 writes its own copies the
    same way: chatRecordingService.ts ``updateMessagesFromHistory`` builds them with ``newMessage``)."""
    return [{k: v for k, v in m.items() if k != "tokens"} for m in messages]


def compacted_title(session: SessionFile) -> str:
    """The one-line title Gemini CLI's session list shows for a compacted copy (its ``summary``)."""
    title = session.metadata.get("summary")
    if not isinstance(title, str) or not title.strip():
        # The session's first prompt ever (the billed view: a compression may have dropped it since).
        prompts = (m.get("content") for m in session.billed if m.get("type") == "user")
        first = next((c for c in prompts if classify_user(c)[0]), None)
        title = message_text(first) if first is not None else "session"
    return f"{' '.join(title.split())[:100]} (compacted by ctxtool)"


def new_session_file_name(session_id: str, now: datetime, ext: str) -> str:
    """``session-<YYYY-MM-DDTHH-MM>-<first 8 of id>.<ext>`` (chatRecordingService.ts, UTC minute)."""
    return f"session-{now.astimezone(UTC).strftime('%Y-%m-%dT%H-%M')}-{session_id[:8]}.{ext}"


def chat_model(messages: Sequence[Mapping[str, Any]]) -> str:
    """The newest model recorded on a gemini message, else Gemini CLI's default model."""
    models = (m.get("model") for m in reversed(messages) if m.get("type") == "gemini")
    return next((m for m in models if isinstance(m, str) and m), DEFAULT_CHAT_MODEL)


_NUMBERED = re.compile(r"_(\d+)\.txt$|^(\d+)\.txt$")


def next_truncation_id(directory: Path) -> int:
    """One more than the highest ``<n>`` of the ``…_<n>.txt`` files in ``directory``: compacting several
    sessions of one project never overwrites one."""
    try:
        names = [p.name for p in directory.iterdir()]
    except OSError:
        return 1
    return max((int(m.group(1) or m.group(2)) for n in names if (m := _NUMBERED.search(n))), default=0) + 1


def output_location(
    source: SessionPath, destination: Destination, *, new_name: str | None = None
) -> tuple[Path, Path]:
    """(output file, project temp dir) for ``source``.

    ``out`` keeps ``<project>/chats[/<parent>]/<name>`` under the output directory (``<project>/<name>``
    for a file outside a ``chats/`` folder); ``new-session`` writes ``new_name`` beside the input;
    ``in-place`` is the input itself. The project temp dir is the folder above ``chats/`` (where Gemini
    CLI keeps ``tool-outputs/``), or the output's own folder outside that layout."""
    path = source.path
    in_chats = path.parent.name == "chats" or (
        source.parent_ref is not None and path.parent.parent.name == "chats"
    )
    if destination.mode == "in-place":
        target = path
    elif destination.mode == "new-session":
        target = path.with_name(new_name or path.name)
    elif destination.out_file is not None:
        return destination.out_file, destination.out_file.parent
    else:
        base = destination.out_dir / source.project_dir
        if in_chats:
            base = base / "chats" / (source.parent_ref or "")
        target = base / path.name
    if in_chats:
        chats = target.parent if target.parent.name == "chats" else target.parent.parent
        return target, chats.parent
    return target, target.parent


_NOTHING_OLD = "nothing old enough to summarise: the recent turns are kept as they are"


def _environment_text(
    messages: list[dict[str, Any]], path: Path, opts: CompactOptions, report: CompactionReport
) -> str | None:
    """The ``<session_context>`` text a resume of this session starts with: the stored one (None here, the
    port reads it), else built from the project folder as Gemini CLI 0.61 builds it, else a stand-in."""
    if g.stored_env_index(messages) is not None:
        report.env_source = "stored"
        return None
    from ctxtool.compress.gemini_cli.environment import (
        build_environment_text,
        project_temp_dir,
        recorded_project_root,
    )

    project = opts.workspace if opts.workspace is not None else recorded_project_root(path)
    if project is not None and project.is_dir():
        built = build_environment_text(opts.texts.env, project, project_temp_dir(path))
        report.env_source = "built"
        report.notes.extend(built.notes)
        return built.text
    report.env_source = "stand-in"
    # The machine is unknown too: no temporary folder (a path would make the estimate depend on where the
    # file happens to be).
    return g.synthesize_env_text(g.first_timestamp(messages), template=opts.texts.env)


def _noop_reason(result: g.CompressionResult, turns: int, force: bool) -> str:
    """Why the gemini-cli replay came back NOOP, in the order ``g.compress`` checks (section 4)."""
    before, limit, share = result.original_token_count, result.token_limit, result.threshold
    if turns == 0:
        return "the session has no conversation to compress"
    if not force and limit and share is not None and before < share * limit:
        return (
            f"below the threshold: {plural(before, 'token')} is {before / limit:.1%} of {limit:,}, "
            f"under {share:.0%}; pass --force to compact anyway"
        )
    return _NOTHING_OLD


def _replacements(before: Sequence[Content], after: Sequence[Content]) -> dict[str, dict[str, Any]]:
    """Call id -> truncated functionResponse, for every part budget truncation replaced."""
    out: dict[str, dict[str, Any]] = {}
    for b, a in zip(before, after, strict=True):
        for pb, pa in zip(b.get("parts") or [], a.get("parts") or [], strict=True):
            fr = pa.get("functionResponse") if pa is not pb and isinstance(pa, dict) else None
            if isinstance(fr, dict) and isinstance(fr.get("id"), str):
                out[fr["id"]] = fr
    return out


def _sync_parts(parts: Any, rep: Mapping[str, dict[str, Any]], used: set[str]) -> Any:
    if isinstance(parts, dict):
        fr = parts.get("functionResponse")
        if isinstance(fr, dict) and fr.get("id") in rep:
            used.add(fr["id"])
            return {"functionResponse": rep[fr["id"]]}
        return parts
    if isinstance(parts, list):
        new = [_sync_parts(p, rep, used) for p in parts]
        return parts if all(n is p for n, p in zip(new, parts, strict=True)) else new
    return parts


def _sync_message(msg: dict[str, Any], rep: Mapping[str, dict[str, Any]], used: set[str]) -> dict[str, Any]:
    """``msg`` with truncated tool outputs written back (a copy), or ``msg`` itself when none applies."""
    out = msg
    calls = msg.get("toolCalls")
    if isinstance(calls, list):
        new_calls: list[Any] = []
        for tc in calls:
            if isinstance(tc, dict) and tc.get("id") in rep and js_truthy(result := tc.get("result")):
                if isinstance(result, str):
                    used.add(tc["id"])
                    output = rep[tc["id"]].get("response", {}).get("output")
                    tc = {**tc, "result": output if isinstance(output, str) else result}
                elif (new_result := _sync_parts(result, rep, used)) is not result:
                    tc = {**tc, "result": new_result}
            new_calls.append(tc)
        if any(n is not c for n, c in zip(new_calls, calls, strict=True)):
            out = {**out, "toolCalls": new_calls}
    if (new_content := _sync_parts(content := msg.get("content"), rep, used)) is not content:
        out = {**out, "content": new_content}
    return out


def _sync(
    messages: Sequence[dict[str, Any]], rep: Mapping[str, dict[str, Any]], report: CompactionReport
) -> list[dict[str, Any]]:
    used: set[str] = set()
    out = [_sync_message(msg, rep, used) for msg in messages]
    # every message has a string id (_with_message_ids)
    report.synced_messages += [m["id"] for m, new in zip(messages, out, strict=True) if new is not m]
    if missing := sorted(set(rep) - used):
        report.notes.append(
            f"{plural(len(missing), 'truncated tool output')} matched no stored tool call; "
            f"{'it stays' if len(missing) == 1 else 'they stay'} in full in the file"
        )
    return out


@dataclass(frozen=True)
class _Output:
    """Where one session's result goes (``_place``)."""

    dest: Destination
    target: Path  # the output file
    tool_dir: Path  # where the gemini-cli strategy saves truncated tool outputs
    era: Era  # the output's format
    new_session_id: str | None  # --as-new-session: the new session's id


@dataclass(frozen=True)
class _Job:
    """One session file being compacted: what the steps of ``compact_session`` share once it is read."""

    path: Path
    data: bytes
    stamp: FileStamp | None  # --in-place: the input as read, for the checked replace
    session: SessionFile  # every message with a unique string id (_with_message_ids)
    model: str  # the chat model (token limit, summarizer alias)
    summarizer: Summarizer
    opts: CompactOptions
    profile: Profile
    out: _Output
    now: datetime
    new_id: Callable[[], str]
    before_replace: Callable[[], object] | None

    @property
    def messages(self) -> list[dict[str, Any]]:  # as Gemini CLI resumes them
        return cast(list[dict[str, Any]], self.session.messages)


def compact_session(
    source: SessionPath | Path | str,
    summarizer: Summarizer,
    options: CompactOptions | None = None,
    destination: Destination | None = None,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    before_replace: Callable[[], object] | None = None,
) -> CompactionReport:
    """Plan and (unless ``options.dry_run``) apply the compaction of one session file.

    Raises CtxtoolError (SessionFormatError, SummarizerError, FileChangedError…) or OSError when the file
    cannot be read, summarised or written; the caller turns that into a FAILED row. ``before_replace`` runs
    between writing the temporary file and the checked rename of ``--in-place`` (tests simulate a racing
    writer with it)."""
    opts = options or CompactOptions()
    dest = destination or Destination()
    sp = source if isinstance(source, SessionPath) else _describe(Path(source))
    base_strategy, _, variant = opts.strategy.partition(":")
    profile = get_profile(variant if base_strategy == "gemini-cli" and variant else opts.profile)
    now = clock()
    data = sp.path.read_bytes()
    stamp = FileStamp.of_bytes(data, sp.path) if dest.mode == "in-place" else None
    session, id_note = _with_message_ids(parse_session_bytes(data, sp.path), data)
    messages = cast(list[dict[str, Any]], session.messages)
    model = opts.chat_model or chat_model(messages)
    out = _place(sp, session, opts, profile, dest, now, new_id)
    report = CompactionReport(
        input_path=str(sp.path),
        status=FAILED,
        dry_run=opts.dry_run,
        era=session.era,
        profile=profile.name,
        model=model,
        summarizer=summarizer.name,
        deterministic=summarizer.deterministic,
        messages_total=len(messages),
        session_id=session.session_id,
        notes=[id_note] if id_note is not None else [],
        strategy=opts.strategy,
        output_era=out.era,
    )
    job = _Job(
        sp.path, data, stamp, session, model, summarizer, opts, profile, out, now, new_id, before_replace
    )
    return (_compact_with_port if base_strategy == "gemini-cli" else _compact_with_strategy)(job, report)


def _place(
    sp: SessionPath,
    session: SessionFile,
    opts: CompactOptions,
    profile: Profile,
    dest: Destination,
    now: datetime,
    new_id: Callable[[], str],
) -> _Output:
    """Where the result goes; refuses ``--in-place`` on a ``.json`` Gemini CLI resumed into a ``.jsonl``."""
    if dest.mode == "in-place" and session.era == "json" and sp.path.with_suffix(".jsonl").exists():
        raise CtxtoolError(
            f"{sp.path}: Gemini CLI resumed this session into {sp.path.with_suffix('.jsonl').name}, which is "
            "the session now",
            "Compact the .jsonl file instead",
        )
    new_session_id = new_id() if dest.mode == "new-session" else None
    era: Era = opts.era or ("jsonl" if session.era == "jsonl" else "json")
    new_name = new_session_file_name(new_session_id, now, era) if new_session_id else None
    target, project_tmp = output_location(sp, dest, new_name=new_name)
    if opts.era is not None and dest.mode == "out" and dest.out_file is None:
        target = target.with_suffix(f".{era}")  # the tree keeps names; the extension follows the format
    tool_dir = project_tmp / profile.tool_output_subdir if profile.tool_output_subdir else project_tmp
    return _Output(dest, target, tool_dir, era, new_session_id)


def _compact_with_port(job: _Job, report: CompactionReport) -> CompactionReport:
    """``compact_session`` for the gemini-cli strategy (see the module docstring)."""
    curated = _curate(job, report)
    original = _threshold_input(job, report)
    result = _replay(job, curated, original, _counting(_plan_summarizer(job, report), job, curated), report)
    _report_result(result, len(curated.turns), job.opts.force, report)
    if (messages := _rebuilt(job, curated, result, report)) is None:
        return report
    if result.new_history is not None:
        _note_masking(curated, result.new_history, report)
    report.tokens_after = measure_history(messages, job.model)
    _note_growth(report)
    return _apply(job, report, messages, result.truncated_outputs)


def _curate(job: _Job, report: CompactionReport) -> g.CuratedSession:
    """The curated history a resume of the session sends (section 11.4), its ``<session_context>`` turn the
    stored one, else built or a stand-in (``_environment_text``)."""
    env_text = _environment_text(job.messages, job.path, job.opts, report)
    curated = g.session_to_curated_history(job.messages, job.model, env_text, profile=job.profile)
    report.env_synthesized = env_text is not None
    if report.env_source == "stand-in":
        assumed = g.estimate_token_count(
            curated.env_turn["content"]["parts"], estimator=job.profile.estimator
        )
        report.notes.append(
            "the session stored no <session_context> message and its project folder is unknown (no "
            ".project_root beside chats/, or the folder is gone); a stand-in of "
            f"{plural(assumed, 'token')} was assumed: pass --workspace DIR to build Gemini CLI's own"
        )
    return curated


def _threshold_input(job: _Job, report: CompactionReport) -> int:
    """The token count the threshold check reads, as Gemini CLI does: the prompt tokens recorded for the last
    request, else the local estimate; also the report's tokens before."""
    messages = job.messages
    recorded = g.recorded_input(messages)
    report.recorded_prompt_tokens = recorded or None
    report.tokens_before = measure_history(messages, job.model)
    report.threshold_tokens_source = "recorded" if recorded else "estimate"
    if recorded:
        return recorded
    unrecorded = [{**m, "tokens": None} if m.get("type") == "gemini" else m for m in messages]
    original = g.original_token_count(unrecorded, estimator=job.profile.estimator)
    if recorded == 0:
        report.notes.append("the recorded promptTokenCount is 0; the local estimate is used instead")
    return original


def _plan_summarizer(job: _Job, report: CompactionReport) -> Summarizer:
    """The summarizer to plan with: a dry run does not call a model, it estimates with an offline summary."""
    if job.opts.dry_run and not job.summarizer.deterministic:
        report.notes.append("dry run: the new token count is estimated with an offline summary")
        return OfflineSummarizer()
    return job.summarizer


def _counting(summarizer: Summarizer, job: _Job, curated: g.CuratedSession) -> Summarizer:
    """``summarizer``, an offline summary's header counting what ``ctxtool stats`` counts of the messages it
    summarises (``turn_counts``): the history it is shown is curated turns ``[0, split)``."""
    if not isinstance(summarizer, OfflineSummarizer | KeepFacts):
        return summarizer

    def counts(history: Sequence[Mapping[str, Any]]) -> TurnCounts:
        keep_from = _message_index(curated, len(history), job.messages, job.path)
        within = {mid for m in job.messages[:keep_from] if isinstance(mid := m.get("id"), str)}
        return turn_counts(job.session.billed, job.session.copies, within)

    return summarizer.counting(counts)


def _replay(
    job: _Job, curated: g.CuratedSession, original: int, summarizer: Summarizer, report: CompactionReport
) -> g.CompressionResult:
    """The port's compression, as ``--truncate-only``, ``--force`` and an automatic attempt run it."""
    opts = job.opts

    def run(force: bool, threshold: float | None, failed_before: bool) -> g.CompressionResult:
        return g.compress(
            curated.contents,
            original_token_count=original,
            model=job.model,
            summarizer=summarizer,
            profile=job.profile,
            force=force,
            threshold=threshold,
            has_failed_compression_attempt=failed_before,
            env_turn=curated.env_turn["content"],
            tool_output_dir=str(job.out.tool_dir.absolute()),
            first_truncation_id=next_truncation_id(job.out.tool_dir),
            texts=opts.texts,
        )

    if opts.truncate_only:
        return run(False, _ALWAYS if opts.force else opts.threshold, True)
    result = run(opts.force, opts.threshold, False)
    if result.status == g.CompressionStatus.COMPRESSION_FAILED_INFLATED_TOKEN_COUNT and not opts.force:
        # tryCompressChat latches the failure; the next automatic attempt only truncates (section 4.1).
        fallback = run(False, opts.threshold, True)
        if fallback.status == g.CompressionStatus.CONTENT_TRUNCATED:
            report.notes.append(
                "the summary inflated the history "
                f"({result.new_token_count} > {plural(original, 'token')}); fell back to truncating tool "
                "outputs, as Gemini CLI's next automatic attempt does"
            )
            return fallback
    return result


def _report_result(result: g.CompressionResult, turns: int, force: bool, report: CompactionReport) -> None:
    """What the replay decided, on ``turns`` curated turns, and why a failed compression wrote nothing."""
    report.status, report.threshold = result.status.name, result.threshold
    report.token_limit, report.threshold_tokens = result.token_limit, result.original_token_count
    if result.status == g.CompressionStatus.NOOP:
        report.reason = _noop_reason(result, turns, force)
        report.tokens_after = report.tokens_before  # nothing changes
    report.split_index, report.anchored = result.split_index, result.anchored
    report.tool_outputs_truncated = [s.path for s in result.truncated_outputs]
    if result.calls:
        report.summarizer_model = result.calls[0].model
    if result.split_index is not None:
        report.turns_summarised, report.turns_kept = result.split_index, turns - result.split_index
    if result.status == g.CompressionStatus.COMPRESSION_FAILED_INFLATED_TOKEN_COUNT:
        report.notes.append(
            f"the new history would be larger ({result.new_token_count} > "
            f"{plural(result.original_token_count, 'token')}); nothing was written"
        )
        report.reason = _not_beneficial(result.original_token_count, result.new_token_count)
    elif result.status == g.CompressionStatus.COMPRESSION_FAILED_EMPTY_SUMMARY:
        report.notes.append("the summarizer returned an empty summary; nothing was written")
        report.reason = "the summarizer returned an empty summary"


def _rebuilt(
    job: _Job, curated: g.CuratedSession, result: g.CompressionResult, report: CompactionReport
) -> list[dict[str, Any]] | None:
    """The session messages to write for ``result`` (None: nothing is written), tool outputs synced."""
    if result.status == g.CompressionStatus.COMPRESSED:
        return _compressed(job, curated, result, report)
    if result.status != g.CompressionStatus.CONTENT_TRUNCATED:
        return None
    assert result.new_history is not None
    contents = curated.contents
    out_messages = _sync(job.messages, _replacements(contents, result.new_history), report)
    report.messages_kept, report.messages_summarised = len(out_messages), 0
    report.retention = retention(extract_facts(contents), history_text(result.new_history)).as_dict()
    return out_messages


def _compressed(
    job: _Job, curated: g.CuratedSession, result: g.CompressionResult, report: CompactionReport
) -> list[dict[str, Any]]:
    """COMPRESSED: ``[stored <session_context> message, summary, ack, ...kept messages]``."""
    assert result.new_history is not None
    assert result.split_index is not None
    assert result.summary is not None
    contents, messages, split = curated.contents, job.messages, result.split_index
    keep_from = _message_index(curated, split, messages, job.path)
    report.split_message_id = messages[keep_from]["id"] if keep_from < len(messages) else None
    env_index = g.stored_env_index(messages)
    head = [messages[env_index]] if env_index is not None and env_index < keep_from else []
    report.messages_summarised = keep_from - len(head)
    ts = js_iso(job.now)
    head.append(text_record("user", result.summary, ts, job.new_id))
    head.append(text_record("gemini", job.opts.texts.ack, ts, job.new_id))
    kept = _sync(messages[keep_from:], _replacements(contents[split:], result.kept_history), report)
    report.messages_kept = len(kept)
    report.retention = retention(extract_facts(contents[:split]), history_text(result.new_history)).as_dict()
    return [*head, *kept]


def _note_masking(curated: g.CuratedSession, new_history: list[Content], report: CompactionReport) -> None:
    """How many tool outputs of the written history Gemini CLI 0.61 masks when it next sends it."""
    plan = g.plan_tool_output_masking([curated.env_turn["content"], *new_history])
    report.masked_by_gemini_cli = len(plan.parts)
    if plan.parts:
        report.notes.append(
            f"Gemini CLI 0.61 masks {plural(len(plan.parts), 'older tool output')} of this history "
            f"({plural(plan.prunable_tokens, 'token')}) the next time it sends it (tool output masking); "
            "the token counts here are before that"
        )


# Gemini CLI 0.61.0 words an inflated result by the size of the history (CompressionMessage.tsx): under
# 50,000 tokens "not beneficial for this history size", else "did not reduce size".
_BENEFIT_SIZE = 50_000


def _not_beneficial(before: int, after: int | None) -> str:
    """The reason of a COMPRESSION_FAILED_INFLATED_TOKEN_COUNT row, in Gemini CLI's words."""
    said = (
        "compression was not beneficial for this history size"
        if before < _BENEFIT_SIZE
        else "compression did not reduce the size"
    )
    grown = "" if after is None else f" ({before:,} → {plural(after, 'token')})"
    return f"{said}: the summary and its reply outweigh the turns they replace{grown}"


def _note_growth(report: CompactionReport) -> None:
    """A COMPRESSED result whose history is larger than the one it replaces, by the one measure of tokens
    before and after, gets a ``reason``, so no table calls it compressed without saying so. Gemini CLI 0.61.0
    names a larger result COMPRESSION_FAILED_INFLATED_TOKEN_COUNT (ChatCompressionService ``compress``), but
    its check compares the new history with the prompt tokens last recorded, which count the system prompt
    and tools too: it compresses such a history, and so the file is written as it would be."""
    before, after = report.tokens_before, report.tokens_after
    if report.status != g.CompressionStatus.COMPRESSED.name or before is None or after is None:
        return
    if after <= before:
        return
    said = _not_beneficial(before, after).split(":")[0]
    report.reason = f"{said} ({before:,} → {plural(after, 'token')})"
    if report.recorded_prompt_tokens and report.strategy == "gemini-cli":
        report.reason += (
            f"; written anyway, as Gemini CLI compares with the {report.recorded_prompt_tokens:,} prompt"
            " tokens last recorded, system prompt and tools included"
        )
    if report.summarizer == "offline":
        report.reason += "; a smaller --summary-budget may help"


def _apply(
    job: _Job,
    report: CompactionReport,
    messages: list[dict[str, Any]],
    tool_outputs: Sequence[g.SavedToolOutput] = (),
) -> CompactionReport:
    """Name the output in the report and, unless a dry run, write it: saved tool outputs, then the session."""
    report.output_path = str(job.out.target)
    if job.opts.dry_run:
        return report
    if job.opts.redact_secrets:
        messages = _redacted(messages, report)
    # Before writing: remove the temporary files an earlier ctxtool run, killed mid-write, left there.
    folders = dict.fromkeys((job.path.parent, job.out.target.parent))
    if removed := [p for folder in folders for p in clean_stale_temps(folder)]:
        report.notes.append(
            f"removed {plural(len(removed), 'temporary file')} an interrupted ctxtool run left"
        )
    # The writes complete together or leave nothing: a signal waits for the end of the block
    # (ctxtool.common.interrupt), and an error removes what the block had written (tool outputs, their
    # folder).
    with interrupt.deferred(), _Written() as written:
        for saved in tool_outputs:
            written.write(Path(saved.path), saved.text.encode("utf-8", "surrogatepass"))
        return _write_compacted(report, job, messages, written)


# The key ctxtool adds to the ``$set`` record it appends for ``--in-place`` (Gemini CLI merges unknown
# ``$set`` keys into the session's metadata and ignores them): what ``compact --undo`` looks for.
COMPACTION_MARK = "ctxtoolCompaction"


def _write_compacted(
    report: CompactionReport, job: _Job, messages: list[dict[str, Any]], written: _Written
) -> CompactionReport:
    """Write the compacted session where ``job.out.dest`` says, every message a copy (``as_copies``):
    ``--as-new-session`` and ``--out`` a session ``derivedFrom`` the original's id, ``--in-place`` beside the
    recorded history (``_write_in_place``)."""
    copies = as_copies(messages)
    ts = js_iso(job.now)
    dest, session = job.out.dest, job.session
    if dest.mode == "in-place":
        _write_in_place(report, job, copies, ts)
    else:
        metadata = {**session.metadata, "lastUpdated": ts}
        if session.session_id is not None:
            metadata["derivedFrom"] = session.session_id
        if (new_session_id := job.out.new_session_id) is not None:
            metadata.update(sessionId=new_session_id, startTime=ts, summary=compacted_title(session))
            report.session_id = new_session_id
        written.write(
            job.out.target,
            session_bytes(job.out.era, metadata, copies),
            exclusive=dest.mode == "new-session" or dest.out_file is not None,
            like=job.path if dest.mode == "new-session" else None,  # beside the original: its privacy
        )
    report.written = True
    return report


def _write_in_place(report: CompactionReport, job: _Job, copies: list[dict[str, Any]], ts: str) -> None:
    """``--in-place``: on a ``.jsonl``, append a ``$set.messages`` record with the compacted history (as
    Gemini CLI does when it rebuilds a history), after a backup and through a checked atomic replace; on a
    legacy ``.json``, leave the file as it is and write the ``.jsonl`` beside it that Gemini CLI itself would
    write on resume (the metadata and every recorded message, chatRecordingService.ts ``initialize``),
    followed by that record."""
    assert job.stamp is not None
    source, data = job.path, job.data
    mark = {"at": ts, "strategy": report.strategy, "summarizer": report.summarizer}
    record = {"$set": {"messages": copies, "lastUpdated": ts, COMPACTION_MARK: mark}}
    if job.session.era == "jsonl":
        head = data if data.endswith(b"\n") or not data else data + b"\n"
        new = head + stringify(record) + b"\n"
        backup = _replace_after_backup(source, data, new, job.stamp, job.now, job.before_replace)
        report.backup_path = str(backup)
        return
    beside = source.with_suffix(".jsonl")
    mark["created"] = beside.name
    lines = [stringify({**job.session.metadata, "lastUpdated": ts}), *map(stringify, job.session.messages)]
    atomic_write(beside, b"\n".join([*lines, stringify(record)]) + b"\n", exclusive=True, like=source)
    report.output_path, report.output_era = str(beside), "jsonl"


def _replace_after_backup(
    path: Path, data: bytes, new: bytes, stamp: FileStamp, now: datetime, before: Callable[[], object] | None
) -> Path:
    """Back ``data`` up, then replace ``path`` with ``new`` unless it changed since; the backup's path."""
    backup = write_backup(path, data, now)
    try:
        replace_checked(path, new, stamp, before_replace=before)
    except BaseException:
        backup.unlink(missing_ok=True)  # nothing changed: no backup of it either
        raise
    return backup


class _Written:
    """Files (and the folders made for them) written in one block; removed again if the block fails."""

    def __init__(self) -> None:
        self.files: list[Path] = []
        self.dirs: list[Path] = []

    def write(self, path: Path, data: bytes, *, exclusive: bool = False, like: Path | None = None) -> None:
        folder = path.parent
        while not folder.exists() and folder.parent != folder:  # what atomic_write's mkdir will create
            self.dirs.append(folder)
            folder = folder.parent
        atomic_write(path, data, exclusive=exclusive, like=like)
        self.files.append(path)

    def __enter__(self) -> _Written:
        return self

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        if error is None:
            return
        for path in self.files:
            path.unlink(missing_ok=True)
        for folder in sorted(set(self.dirs), key=lambda p: -len(p.parts)):  # deepest first, if empty
            with contextlib.suppress(OSError):
                folder.rmdir()


@dataclass
class UndoReport:
    """What ``compact --undo`` did to one file."""

    path: str
    status: str  # "UNDONE", "NOTHING" (no compaction of ctxtool's at the end) or FAILED
    removed: str | None = None  # "record" (the appended $set line) or "file" (the .jsonl ctxtool created)
    backup_path: str | None = None
    records_after: int = 0  # records Gemini CLI appended after the compaction (dropped only with --force)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def undo_compaction(path: Path, *, force: bool = False) -> UndoReport:
    """Drop the ``$set.messages`` record the last ``compact --in-place`` appended to ``path`` (a ``.jsonl``;
    for a legacy ``.json``, the ``.jsonl`` ctxtool wrote beside it). The recorded history is untouched, so
    the session is again what it was before. Records appended after the compaction (Gemini CLI resumed the
    compacted session) are kept; undoing then needs ``force``, since they answered the compacted history.
    Raises CtxtoolError when the file cannot be undone."""
    path = Path(path)
    if path.suffix == ".json" and path.with_suffix(".jsonl").exists():
        path = path.with_suffix(".jsonl")
    data = path.read_bytes()
    stamp = FileStamp.of_bytes(data, path)
    lines = data.split(b"\n")
    found = None
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if COMPACTION_MARK.encode() in line and line.startswith(b'{"$set"'):
            with contextlib.suppress(ValueError):
                patch = json.loads(line)["$set"]
                if isinstance(patch, dict) and COMPACTION_MARK in patch:
                    found = (index, patch[COMPACTION_MARK])
                    break
    if found is None:
        return UndoReport(str(path), "NOTHING")
    index, mark = found
    after = sum(1 for line in lines[index + 1 :] if line.strip())
    if after and not force:
        raise UsageError(
            f"{path}: Gemini CLI recorded {plural(after, 'record')} after the compaction (the compacted "
            f"session was resumed); undoing keeps {'it but it' if after == 1 else 'them but they'} answered "
            "the compacted history",
            "Pass --force to undo anyway",
        )
    if isinstance(mark, dict) and mark.get("created") == path.name and not after:
        path.unlink()
        return UndoReport(str(path), "UNDONE", "file", records_after=after)
    new = b"\n".join(lines[:index] + lines[index + 1 :])
    with interrupt.deferred():
        backup = _replace_after_backup(path, data, new, stamp, datetime.now(UTC), None)
    return UndoReport(str(path), "UNDONE", "record", backup_path=str(backup), records_after=after)


def _compact_with_strategy(job: _Job, report: CompactionReport) -> CompactionReport:
    """``compact_session`` for another strategy: it plans the messages, written as gemini-cli's are."""
    from ctxtool.compress.strategies import registry

    opts = job.opts
    strategy = registry.get_strategy(opts.strategy)
    s_opts = StrategyOptions(
        chat_model=job.model,
        context_window=opts.context_window,
        force=opts.force,
        custom_instructions=opts.custom_instructions,
        threshold=opts.threshold,
    )
    summarizer = _plan_summarizer(job, report)
    result = strategy.plan(job.messages, summarizer, s_opts, now=job.now, new_id=job.new_id)
    _report_plan(job, strategy.name, result, report)
    if (new := result.messages) is None:
        return report
    # The new message list, measured as the gemini-cli path measures its own.
    report.tokens_after = measure_history(new, job.model)
    report.messages_kept, report.messages_summarised = result.messages_kept, result.messages_summarised
    if result.kept_from is not None and result.kept_from < len(job.messages):
        report.split_message_id = job.messages[result.kept_from]["id"]
    facts = extract_facts(wire_history(job.messages))
    report.retention = retention(facts, history_text(wire_history(new))).as_dict()
    _note_growth(report)
    return _apply(job, report, new)


def _report_plan(job: _Job, name: str, result: StrategyResult, report: CompactionReport) -> None:
    """What another strategy planned: its status, its own trigger and measure, the tokens before."""
    report.strategy, report.profile, report.status = name, None, result.status
    report.trigger = result.trigger.as_dict()
    if result.status == "NOOP":
        trig = result.trigger
        if trig.would_trigger is False and not job.opts.force:
            report.reason = (
                f"{name}'s trigger ({trig.measure}) is not reached:"
                f" at most {plural(trig.tokens or 0, 'token')}; pass --force to compact anyway"
            )
        else:
            report.reason = _NOTHING_OLD
    report.strategy_tokens = {
        "measure": result.own_measure,
        "before": result.own_tokens_before,
        "after": result.own_tokens_after,
    }
    report.notes.extend(result.notes)
    report.tokens_before = measure_history(job.messages, job.model)
    report.recorded_prompt_tokens = g.recorded_input(job.messages) or None
    if result.calls:
        report.summarizer_model = result.calls[0].model


def _message_index(
    curated: g.CuratedSession, split: int, messages: Sequence[Mapping[str, Any]], path: Path
) -> int:
    """Index of the session message that opens curated turn ``split`` (``len(messages)`` past the end).

    Split 0 on a ``<session_context>`` turn that was not stored (built or a stand-in) keeps every stored
    message: the eras before 0.10 have no NOOP on an empty split and summarise an empty history
    (``tryCompressChat``, 0.3 and 0.7)."""
    turns = curated.turns
    if split >= len(turns):
        return len(messages)
    turn_id = turns[split].get("id")
    for i, msg in enumerate(messages):
        if isinstance(turn_id, str) and msg.get("id") == turn_id:
            return i
    if split == 0:  # the env turn (curated.turns[0]), not a stored message
        return 0
    raise CtxtoolError(
        f"{path}: the split point (turn {split}, id {turn_id!r}) matches no message of the session",
        "Report this with --traceback; compact with a different --profile meanwhile",
    )


def _with_message_ids(session: SessionFile, data: bytes) -> tuple[SessionFile, str | None]:
    """The session with a unique string id on every message, as the split point and Gemini CLI need them
    (ctxtool.session.ids), and the report's note when ids were added; raises CtxtoolError for a ``.jsonl``
    whose message records lack ids.

    A split point is found by the id of the turn it lands on, so without unique ids it matched the first
    message (the whole history was written again after the summary). A legacy ``.json`` is loaded whole by
    Gemini CLI, ids or not, so its messages get ids derived from their position and the output carries them.
    A ``.jsonl`` message line without an id is skipped by Gemini CLI's own reader (and ctxtool's), so the
    session Gemini CLI resumes lacks it: leaving it out of the output, or adding it back, would each change
    the session behind the user's back, so the file is refused."""
    if session.era == "jsonl":
        if lines := idless_lines(data):
            raise CtxtoolError(
                f"{session.path}: {plural(len(lines), 'message record')} "
                f'{"has" if len(lines) == 1 else "have"} no "id" (the first on line {lines[0]}), and Gemini '
                "CLI skips such records when it resumes a .jsonl session",
                'Give each of them a unique "id" string if they belong to the session, or delete them, and '
                "run the command again",
            )
        return session, None
    fix = with_unique_ids(session.messages, session.session_id)
    if not fix.changed:
        return session, None
    return msgspec.structs.replace(session, messages=fix.messages, billed=list(fix.messages)), fix.describe()


def _describe(path: Path) -> SessionPath:
    if not (found := discover([path]).files):
        raise UsageError(f"{path} is not a session file", "Pass a Gemini CLI session file")
    return found[0]


def is_backup(path: Path) -> bool:
    """Whether ``path`` is a backup ``--in-place`` left (never compacted again)."""
    return BACKUP_MARKER in path.name


def check_destination(sources: Sequence[SessionPath], destination: Destination) -> None:
    """Refuse an ``--out`` directory inside an input's Gemini CLI project folder (UsageError)."""
    if destination.mode != "out":
        return
    if destination.out_file is not None:
        _check_out_file(sources, destination.out_file)
        return
    out = destination.out_dir.resolve()
    for sp in sources:
        target, project_tmp = output_location(sp, Destination("in-place"))
        if project_tmp == target.parent:
            continue  # a file outside Gemini CLI's layout: writing under a sibling folder is harmless
        root = project_tmp.resolve()
        if out == root or root in out.parents:
            raise UsageError(
                f"the output directory {destination.out_dir} is inside the input tree {project_tmp}",
                "Pass --output DIR elsewhere, or --as-new-session / --in-place to write into the session "
                "folder",
            )


def is_file_name(out: Path) -> bool:
    """Whether ``--out`` names a session file (``x.json`` / ``x.jsonl``) rather than a directory."""
    return out.suffix in (".json", ".jsonl") and not out.is_dir()


def _check_out_file(sources: Sequence[SessionPath], out: Path) -> None:
    """``--out FILE`` takes exactly one input and never replaces an existing file (its extension sets the
    output's format, see the CLI)."""
    if len(sources) != 1:
        raise UsageError(
            f"--output {out} names one file, but {len(sources)} session files were given",
            "Pass --output DIR (a folder name without .json/.jsonl) to compact several sessions",
        )
    if out.exists():
        if out.resolve() == sources[0].path.resolve():
            raise UsageError(
                f"--output {out} is the input itself; ctxtool does not overwrite it",
                "Pass --in-place to replace the input after a backup, or another file name",
            )
        raise UsageError(
            f"--output {out} already exists; ctxtool does not overwrite it", "Pass a new file name"
        )
    if out.parent.name == "chats":
        raise UsageError(
            f"--output {out} is in a Gemini CLI chats/ folder, where it would be a second copy of the "
            "session",
            "Pass --as-new-session to add the result to Gemini CLI's sessions with its own id",
        )


def superseded_by_resume(sources: Sequence[SessionPath]) -> dict[Path, Path]:
    """Legacy ``session-X.json`` inputs whose ``session-X.jsonl`` (Gemini CLI's resumed copy of the same
    session, a superset of it) is an input too, mapped to that ``.jsonl``. With ``--era`` under ``--out DIR``
    both would be written to one output file."""
    # reversed: the first .jsonl of a session is the one named
    resumed = {sp.group_key: sp.path for sp in reversed(sources) if sp.path.suffix == ".jsonl"}
    return {
        sp.path: resumed[sp.group_key]
        for sp in sources
        if sp.path.suffix == ".json" and sp.group_key in resumed
    }


def superseded_report(source: SessionPath, resumed: Path) -> CompactionReport:
    """The NOOP row of a legacy file left out for its resumed ``.jsonl`` (see superseded_by_resume)."""
    return CompactionReport(
        input_path=str(source.path),
        status="NOOP",
        reason=f"the same session as {resumed.name} (Gemini CLI's resumed copy), which is compacted instead",
    )
