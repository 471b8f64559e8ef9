"""``ctxtool compact``: compact Gemini CLI sessions offline into files Gemini CLI can resume."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import CtxtoolError, SummarizerError, UsageError
from ctxtool.compress.gemini_cli.profiles import DEFAULT_PROFILE, PROFILES
from ctxtool.compress.summarizer import ModelCall, Summarizer


def strategies_help() -> str:
    """One paragraph per strategy: what it does and what an offline replay cannot reproduce."""
    from ctxtool.compress.strategies.registry import get_strategy, strategy_names

    rows = []
    for name in strategy_names():
        st = get_strategy(name)
        rows.append(f"  {name}: {st.description}. Offline replay: {st.exactness}.")
    return "\n\n".join(rows)


def _profiles_help() -> str:
    rows = [f"  {p.name:<26} {p.since} .. {p.until or 'now':<10}  {p.description}" for p in PROFILES.values()]
    return "\n".join(rows)


HELP = f"""Compact Gemini CLI sessions the way Gemini CLI's /compress does, offline, into files it can resume.

Each SESSION_OR_DIR (file, directory or glob) is read as Gemini CLI would resume it and run through a port
of its compression (--profile). A compacted session holds the summary as a user message, the reply
"Got it. Thanks for the additional context!", then the newest ~30% of the messages unchanged (same ids,
same bytes, written without their recorded `tokens`: a copy is not a new request, so `ctxtool stats` totals
do not change), in the input's own format (.jsonl or .json; --era converts). Tool outputs cut by the token
budget are saved under tool-outputs/ in the output's project folder and referenced by path.

Where results go: --out DIR (default ./ctxtool-compacted, keeping <project>/chats/), or --out FILE.json /
FILE.jsonl for a single input; --as-new-session (a new session beside the original, listed by
`gemini --resume`, marked derivedFrom the original); --in-place (keeps the recorded history: a .jsonl gets
one appended `$set.messages` record with the compacted history, after a backup and through an atomic replace
that is refused if the file changed meanwhile; a legacy .json stays as it is and gets the .jsonl Gemini CLI
writes on resume beside it). --undo drops that record again. Nothing is written on NOOP or failed statuses.

Tokens before/after are one measure everywhere (compact, compare, diff): Gemini CLI's local estimate of the
history a resume sends. The last request's recorded prompt tokens are shown beside it
(recorded_prompt_tokens), and the figure the threshold check read (threshold_tokens) in --format json.

The summary comes from --summarizer offline (deterministic, no model: it writes the facts it extracts and
says so in the summary) or gemini (two model calls, summary and verification, as upstream; these are the
only non-deterministic step; needs GEMINI_API_KEY).

Profiles (Gemini CLI behaviour by date; default {DEFAULT_PROFILE}):

\b
{_profiles_help()}

Strategies (--strategy; default gemini-cli). The others replay other agents' compaction from
shared/spec/other-strategies.md, write a Gemini CLI session too, and use the same summarizers (with
offline, each writes its own section layout from the same extracted facts). kode:<preset> are Kode's
retention heuristics, which Kode itself never uses. Their tokens are Gemini CLI's local estimate; each
row also carries the strategy's own measure (strategy_tokens). A stored <session_context> stays first;
Gemini CLI's "Got it" ack is inserted where a layout would leave two user messages in a row.

{strategies_help()}

Examples:

\b
  ctxtool compact SESSION.jsonl --dry-run
  ctxtool compact ~/.gemini/tmp/myproj/chats/ --force
  ctxtool compact SESSION.jsonl --force --as-new-session

Exit status: 0 every file processed (whatever its outcome), 1 a file could not be read, summarised or
written, 2 usage error.
"""


class _LazySummarizer:
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
        close = getattr(self._inner, "close", None)
        if callable(close):
            close()


class _Progress:
    """A progress bar on stderr (only where ``options.progress_wanted``), one step per session."""

    def __init__(self, total: int, enabled: bool, label: str = "compacting") -> None:
        self.bar: Any = None
        if enabled and total > 1:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.bar = Progress(
                TextColumn(label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=total)

    def advance(self, name: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=name)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def compact(
    paths: list[str] = typer.Argument(
        ..., help="Session files, directories, globs, or session ids (a unique prefix of 4+ characters)."
    ),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="Write compacted sessions under DIR (default: ./ctxtool-compacted), or, for one input, "
        "to FILE when the name ends in .json/.jsonl.",
    ),
    as_new_session: bool = typer.Option(
        False, "--as-new-session", help="Write each result as a new session beside its original."
    ),
    in_place: bool = typer.Option(
        False, "--in-place", help="Replace each input (after a backup <file>.ctxtool-backup-<time>)."
    ),
    era: str = typer.Option(
        None,
        "--era",
        metavar="jsonl|json",
        help="Write the result as a current .jsonl or a legacy .json session (default: the input's own; "
        "--out FILE takes it from the file's extension). Under --out DIR a legacy session-X.json beside the "
        "session-X.jsonl Gemini CLI wrote on resuming it is left out (NOOP): both would become one file.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Show the plan; write nothing."),
    force: bool = typer.Option(False, "--force", help="Compact even under the threshold (as /compress)."),
    threshold: float = typer.Option(
        None, "--threshold", help="Share of the token limit that triggers compaction (default: profile's)."
    ),
    truncate_only: bool = typer.Option(
        False,
        "--truncate-only",
        help="Only cut old tool outputs to the budget (CONTENT_TRUNCATED); no summary.",
    ),
    summarizer: str = options.SUMMARIZER,
    profile: str = typer.Option(
        DEFAULT_PROFILE, "--profile", help="Gemini CLI behaviour to replay (see the list above)."
    ),
    chat_model: str = typer.Option(
        None, "--chat-model", help="Model the session ran on (default: the newest one it recorded)."
    ),
    model: str = typer.Option(
        None,
        "--summarizer-model",
        help="Summarizer model (gemini; default: the model Gemini CLI 0.61 compresses this chat with).",
    ),
    base_url: str = options.BASE_URL,
    prompt_file: Path = typer.Option(
        None, "--prompt-file", help="System prompt for the summarizer, from FILE."
    ),
    prompt_from_gemini_cli: bool = typer.Option(
        False,
        "--prompt-from-gemini-cli",
        help="Send every text of the installed Gemini CLI's compression (system prompt, instruction, "
        "verification probe, acknowledgement, <session_context>) instead of ctxtool's wording.",
    ),
    workspace: Path = typer.Option(
        None,
        "--workspace",
        metavar="DIR",
        help="The project folder the sessions ran in, for a session that stored no <session_context> "
        "(default: the folder .project_root names beside chats/).",
    ),
    summary_budget: int = typer.Option(
        None,
        "--summary-budget",
        help="Offline summarizer: at most TOKENS in the summary (default: 10% of the summarised span, "
        "1000 for a short one).",
    ),
    strategy: str = typer.Option(
        "gemini-cli", "--strategy", help="Compaction strategy to replay (see the list above)."
    ),
    context_window: int = typer.Option(
        None,
        "--context-window",
        min=1000,
        help="Other strategies: context window for their trigger (default: Kode 200000, else the model's).",
    ),
    instructions: str = typer.Option(
        None, "--instructions", help="Other strategies: focus text appended to their summary prompt."
    ),
    keep_facts: bool = typer.Option(
        False,
        "--keep-facts",
        help="With --summarizer gemini: append the deterministic facts list (user requests, commands, "
        "errors, paths; verbatim, within the offline budget) to the model's summary, so a paraphrase cannot "
        "lose them.",
    ),
    redact_secrets: bool = typer.Option(
        False,
        "--redact-secrets",
        help="Write secrets found in the kept text (API keys, tokens, private keys) as [REDACTED:kind], so "
        "a leaked key does not travel on into the next conversation.",
    ),
    show_secrets: bool = options.SHOW_SECRETS,
    undo: bool = typer.Option(
        False,
        "--undo",
        help="Drop the compaction the last --in-place appended to each SESSION (a .json: remove the "
        ".jsonl it wrote); the recorded history is untouched. With --force, also when Gemini CLI recorded "
        "more after it.",
    ),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
    color: options.Color = options.COLOR,
    width: int = options.WIDTH,
    wide: bool = options.WIDE,
    since: str = options.SINCE,
    until: str = options.UNTIL,
    project: list[str] = options.PROJECT,
    session: list[str] = options.SESSION,
    only_model: list[str] = options.MODEL,
) -> int:
    from ctxtool import compact as lib

    if undo:
        return _undo(paths, force=force, fmt=fmt, width=width, color=color)
    from ctxtool.compress.gemini_cli.profiles import get_profile
    from ctxtool.session.discover import discover

    if fmt not in ("table", "json"):
        raise UsageError(f"--format {fmt!r} is not supported", "Use table or json")
    if sum((out is not None, as_new_session, in_place)) > 1:
        raise UsageError("--out, --as-new-session and --in-place exclude each other", "Pass only one of them")
    if era is not None and era not in ("jsonl", "json"):
        raise UsageError(f"--era {era!r} is not a session format", "Use jsonl (current) or json (legacy)")
    if era is not None and in_place:
        raise UsageError("--in-place keeps each file's format", "Drop --era, or use --out / --as-new-session")
    if summarizer not in ("offline", "gemini"):
        raise UsageError(f"--summarizer {summarizer!r} is not known", "Use offline or gemini")
    if threshold is not None and not 0 < threshold <= 1:
        raise UsageError(
            f"--threshold {threshold} is not a share of the token limit", "Pass a number in (0, 1]"
        )
    if prompt_file is not None and prompt_from_gemini_cli:
        raise UsageError("--prompt-file and --prompt-from-gemini-cli exclude each other", "Pass only one")
    if summarizer == "offline" and model:
        raise UsageError(
            "--summarizer-model applies to --summarizer gemini",
            "Add --summarizer gemini, or drop --summarizer-model",
        )
    filters = options.filter_args(since, until, project, session, only_model)
    if keep_facts and summarizer != "gemini":
        raise UsageError(
            "--keep-facts adds the facts to a model's summary; the offline summary is made of them already",
            "Add --summarizer gemini, or drop --keep-facts",
        )
    if summarizer == "gemini" and summary_budget is not None:
        raise UsageError(
            "--summary-budget applies to the offline summarizer", "Drop it or use --summarizer offline"
        )
    if workspace is not None and not workspace.is_dir():
        raise UsageError(
            f"--workspace {workspace} is not a folder", "Pass the project folder the sessions ran in"
        )
    get_profile(profile)
    from ctxtool.compress.strategies.registry import get_strategy

    get_strategy(strategy)
    gemini_only = truncate_only or prompt_file is not None or prompt_from_gemini_cli
    if strategy.partition(":")[0] != "gemini-cli" and gemini_only:
        raise UsageError(
            f"--truncate-only, --prompt-file and --prompt-from-gemini-cli apply to the gemini-cli strategy, "
            f"not {strategy}",
            "Drop them or use --strategy gemini-cli",
        )

    from ctxtool.compress.gemini_cli.texts import CTXTOOL_TEXTS

    texts = CTXTOOL_TEXTS
    if prompt_file is not None:
        from dataclasses import replace

        from ctxtool.compress.gemini_cli.prompts import load_prompt_file

        texts = replace(CTXTOOL_TEXTS, system_prompt=load_prompt_file(prompt_file))
    elif prompt_from_gemini_cli:
        from ctxtool.compress.gemini_cli.prompts import find_gemini_cli_texts

        texts = find_gemini_cli_texts()

    summ: Summarizer
    if summarizer == "offline":
        from ctxtool.compress.summarize.offline import OfflineSummarizer

        summ = (
            OfflineSummarizer() if summary_budget is None else OfflineSummarizer(token_budget=summary_budget)
        )
    else:

        def make() -> Summarizer:
            from ctxtool.compress.summarize.gemini_model import GeminiSummarizer

            return GeminiSummarizer(model=model, base_url=base_url)

        summ = _LazySummarizer(make)
        if keep_facts:
            from ctxtool.compress.summarize.offline import KeepFacts

            summ = KeepFacts(summ)

    from ctxtool.session.discover import resolve_session_args

    found = discover(resolve_session_args(paths))
    sources = options.filter_sources([sp for sp in found.files if not lib.is_backup(sp.path)], filters)
    for path, _, message in found.unreadable:
        print(f"Error: {path}: {message}", file=sys.stderr)
    if not sources and not found.missing:
        if found.unreadable:
            return ExitStatus.ERROR  # each refused entry was named above, with its fix
        raise UsageError(f"no session files in {', '.join(paths)}", "Pass session files or a chats/ folder")
    mode: lib.Mode = "in-place" if in_place else "new-session" if as_new_session else "out"
    if out is not None and lib.is_file_name(out):
        destination = lib.Destination(mode, out.parent, out_file=out)
        if era is not None and out.suffix != f".{era}":
            raise UsageError(
                f"--era {era} does not match --out {out}", f"Name the output *.{era}, or drop --era"
            )
        era = out.suffix[1:]
    else:
        destination = lib.Destination(mode, out if out is not None else Path(lib.DEFAULT_OUT_DIR))
    lib.check_destination(sources, destination)
    compact_opts = lib.CompactOptions(
        profile=profile,
        force=force,
        threshold=threshold,
        truncate_only=truncate_only,
        dry_run=dry_run,
        chat_model=chat_model,
        texts=texts,
        strategy=strategy,
        context_window=context_window,
        custom_instructions=instructions,
        era=None if era is None else "jsonl" if era == "jsonl" else "json",
        redact_secrets=redact_secrets,
        workspace=workspace,
    )

    reports: list[lib.CompactionReport] = [
        lib.CompactionReport.failed(m, f"{m}: no such file or directory") for m in found.missing
    ]
    superseded = lib.superseded_by_resume(sources) if compact_opts.era and mode == "out" else {}
    from ctxtool.cli.options import progress_wanted

    progress = _Progress(len(sources), progress_wanted())
    try:
        for sp in sources:
            if sp.path in superseded:
                reports.append(lib.superseded_report(sp, superseded[sp.path]))
                progress.advance(sp.path.name)
                continue
            try:
                report = lib.compact_session(sp, summ, compact_opts, destination)
            except (CtxtoolError, OSError) as exc:
                message = str(exc) if isinstance(exc, CtxtoolError) else f"{sp.path}: {exc}"
                report = lib.CompactionReport.failed(sp.path, message)
            reports.append(report)
            progress.advance(sp.path.name)
    finally:
        progress.close()
        close = getattr(summ, "close", None)
        if callable(close):
            close()

    for report in reports:
        if report.error:
            print(f"Error: {report.error}", file=sys.stderr)

    rows = [r.as_dict() for r in reports]
    if not show_secrets:  # a report quotes facts of the sessions (retention's lost facts, notes)
        from ctxtool.common.secret_scan import redact_value

        rows = redact_value(rows)
    if all(r.status == lib.FAILED for r in reports):
        return ExitStatus.ERROR  # nothing was compacted: the errors above say why; stdout stays empty
    if fmt == "json":
        from ctxtool.frames.model import SCHEMA_VERSION
        from ctxtool.render import formats as output

        doc = {
            "schema_version": SCHEMA_VERSION,
            "command": "compact",
            "dry_run": dry_run,
            "totals": _compact_totals(rows),
            "sessions": rows,
        }
        output.write_stdout(output.dumps(doc) + b"\n", sys.stdout.buffer)
    else:
        from ctxtool.render import tables as render

        console = render.make_console(width=width, color=color)
        title = "ctxtool compact" + (" --dry-run (nothing written)" if dry_run else "")
        table, notes = render.compact_table(rows, title=title, plan=dry_run, width=console.width, wide=wide)
        render.print_table(console, table, wide=wide)
        for note in notes:
            console.print(note, markup=False, highlight=False)
    return ExitStatus.ERROR if any(r.status == lib.FAILED for r in reports) else ExitStatus.OK


def _undo(paths: list[str], *, force: bool, fmt: str, width: int, color: object) -> int:
    """``compact --undo``: one row per file, FAILED rows named on stderr."""
    from ctxtool import compact as lib
    from ctxtool.session.discover import discover, resolve_session_args

    found = discover(resolve_session_args(paths))
    reports = [lib.UndoReport(m, lib.FAILED, error=f"{m}: no such file or directory") for m in found.missing]
    for sp in found.files:
        if lib.is_backup(sp.path):
            continue
        if sp.path.suffix == ".json" and any(o.path == sp.path.with_suffix(".jsonl") for o in found.files):
            continue  # the pair is undone through its .jsonl
        try:
            reports.append(lib.undo_compaction(sp.path, force=force))
        except (CtxtoolError, OSError) as exc:
            message = str(exc) if isinstance(exc, CtxtoolError) else f"{sp.path}: {exc}"
            reports.append(lib.UndoReport(str(sp.path), lib.FAILED, error=message))
    for report in reports:
        if report.error:
            print(f"Error: {report.error}", file=sys.stderr)
    rows = [r.as_dict() for r in reports]
    if fmt == "json":
        from ctxtool.frames.model import SCHEMA_VERSION
        from ctxtool.render import formats as output

        doc = {"schema_version": SCHEMA_VERSION, "command": "compact --undo", "sessions": rows}
        output.write_stdout(output.dumps(doc) + b"\n", sys.stdout.buffer)
    else:
        for r in rows:
            what = {"record": "dropped the appended compaction", "file": "removed the .jsonl ctxtool wrote"}
            detail = what.get(r["removed"] or "", "no compaction by ctxtool at the end of the file")
            if r["status"] != lib.FAILED:
                backup = f" (backup: {r['backup_path']})" if r["backup_path"] else ""
                print(f"{r['status']:<8} {r['path']}: {detail}{backup}")
    return ExitStatus.ERROR if any(r.status == lib.FAILED for r in reports) else ExitStatus.OK


def register(app: typer.Typer) -> None:
    app.command("compact", help=HELP)(compact)


def _compact_totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a JSON reader wants at a glance: sessions by status, files written, tokens before and after."""
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    return {
        "sessions": len(rows),
        "written": sum(bool(r.get("written")) for r in rows),
        "by_status": statuses,
        "tokens_before": sum(int(r.get("tokens_before") or 0) for r in rows),
        "tokens_after": sum(int(r.get("tokens_after") or 0) for r in rows),
    }
