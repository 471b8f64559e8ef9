"""``ctxtool compact``: compact Gemini CLI sessions offline into files Gemini CLI can resume."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ctxtool.cli import compaction, options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import CtxtoolError, UsageError
from ctxtool.compress.gemini_cli.profiles import DEFAULT_PROFILE, PROFILES, get_profile
from ctxtool.compress.summarizer import Summarizer

if TYPE_CHECKING:
    from ctxtool import compact as lib
    from ctxtool.compress.gemini_cli.texts import CompressionTexts
    from ctxtool.session.discover import SessionPath


def _wrapped(text: str, width: int, indent: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent)


def profiles_listing(width: int = 80) -> str:
    """What ``compact --list-profiles`` prints: every profile with its dates and what changed in it, then
    every strategy with what an offline replay of it cannot reproduce, wrapped to ``width``."""
    from ctxtool.compress.strategies.registry import get_strategy, strategy_names

    width = max(width, 40)
    title = f"Profiles (--profile; default {DEFAULT_PROFILE}): Gemini CLI's compression by release."
    lines = [*_wrapped(title, width, ""), ""]
    for p in PROFILES.values():
        lines.append(f"  {p.name}  {p.since} .. {p.until or 'now'}")
        lines += _wrapped(p.description, width, "      ")
    lines += ["", "Strategies (--strategy; default gemini-cli):", ""]
    lines += _wrapped(
        "The others replay other agents' compaction and write a Gemini CLI session too, with the same "
        "summarizers (offline, each writes its own section layout from the same extracted facts). "
        "kode:<preset> are Kode's retention heuristics, which Kode itself never uses. Their tokens are "
        "Gemini CLI's local estimate; each row also carries the strategy's own measure (strategy_tokens). "
        'A stored <session_context> stays first; Gemini CLI\'s "Got it" ack is inserted where a layout '
        "would leave two user messages in a row.",
        width,
        "  ",
    )
    for name in strategy_names():
        st = get_strategy(name)
        lines += ["", f"  {name}"]
        lines += _wrapped(f"{st.description}. Offline replay: {st.exactness}.", width, "      ")
    return "\n".join(lines)


def _list_profiles(value: bool) -> None:
    if value:
        import shutil

        print(profiles_listing(shutil.get_terminal_size().columns))
        raise typer.Exit(0)


HELP = """Compact Gemini CLI sessions offline, as its /compress does, into files it can resume.

Each SESSION gets a summary, then its newest ~30% of messages unchanged (--profile: which Gemini CLI;
--strategy: another agent's way; --list-profiles lists both). Results go under --output DIR (default
./ctxtool-compacted), to --output FILE for one input, beside the original (--as-new-session) or into it
(--in-place; --undo reverts it).

Examples:

\b
  ctxtool compact SESSION.jsonl --dry-run
  ctxtool compact ~/.gemini/tmp/myproj/chats/ --force
  ctxtool compact SESSION.jsonl --force --as-new-session

Exit status: 0 every file processed (whatever its outcome), 1 a file could not be read, summarised or
written, 2 usage error.
"""


OUTPUT = typer.Option(
    None, "--output", "-o", metavar="DIR|FILE", help="Write under DIR, or to FILE.json[l] for one."
)
OUT_ALIAS = typer.Option(None, "--out", hidden=True, help="The former name of --output.")
LIST_PROFILES = typer.Option(
    False,
    "--list-profiles",
    callback=_list_profiles,
    is_eager=True,
    help="List the profiles and strategies, and exit.",
)
AS_NEW_SESSION = typer.Option(False, "--as-new-session", help="Write a new session beside each original.")
IN_PLACE = typer.Option(False, "--in-place", help="Append to each input, after a backup.")
ERA = typer.Option(None, "--era", metavar="jsonl|json", help="Write .jsonl or legacy .json (default: same).")
DRY_RUN = typer.Option(False, "--dry-run", help="Show the plan; write nothing.")
FORCE = typer.Option(False, "--force", help="Compact under the threshold too (/compress).")
THRESHOLD = typer.Option(
    None, "--threshold", metavar="SHARE", help="Of the token limit (default: the profile's)."
)
TRUNCATE_ONLY = typer.Option(False, "--truncate-only", help="Only cut old tool outputs; no summary.")
PROFILE = typer.Option(
    DEFAULT_PROFILE,
    "--profile",
    metavar="NAME",
    show_default=False,
    help="Gemini CLI release to replay (default: latest).",
)
CHAT_MODEL = typer.Option(
    None, "--chat-model", metavar="MODEL", help="The session's model (default: its newest)."
)
SUMMARIZER_MODEL = typer.Option(
    None, "--summarizer-model", metavar="MODEL", help="gemini summarizer's model (default: upstream)."
)
PROMPT_FILE = typer.Option(
    None, "--prompt-file", metavar="FILE", help="The summarizer's system prompt, from FILE."
)
PROMPT_FROM_GEMINI_CLI = typer.Option(
    False, "--prompt-from-gemini-cli", help="Send the installed Gemini CLI's own texts."
)
WORKSPACE = typer.Option(
    None, "--workspace", metavar="DIR", help="Project folder (default: from .project_root)."
)
SUMMARY_BUDGET = typer.Option(
    None, "--summary-budget", metavar="TOKENS", help="Offline summary size (default: 10% of span)."
)
STRATEGY = typer.Option(
    "gemini-cli",
    "--strategy",
    metavar="NAME",
    show_default=False,
    help="Another agent's compaction (--list-profiles).",
)
CONTEXT_WINDOW = typer.Option(
    None, "--context-window", min=1000, metavar="TOKENS", help="Other strategies' window (default: model's)."
)
INSTRUCTIONS = typer.Option(
    None, "--instructions", metavar="TEXT", help="Other strategies: focus of their summary."
)
KEEP_FACTS = typer.Option(False, "--keep-facts", help="gemini summarizer: append the extracted facts.")
REDACT_SECRETS = typer.Option(
    False, "--redact-secrets", help="Write secrets in kept text as [REDACTED:kind]."
)
UNDO = typer.Option(False, "--undo", help="Drop what the last --in-place appended.")
FORMAT = typer.Option("table", "--format", "-f", metavar="FORMAT", help="table or json.", show_default=False)


@dataclass(frozen=True)
class CompactRequest:
    """One ``ctxtool compact`` run's parameters (``--undo`` aside), as given. ``check`` refuses what cannot
    run; the other methods resolve them for the library, in the order the command needs them (so that of
    several mistakes the same one is always reported)."""

    out: Path | None
    as_new_session: bool
    in_place: bool
    era: str | None
    dry_run: bool
    force: bool
    threshold: float | None
    truncate_only: bool
    summarizer: str
    profile: str
    chat_model: str | None
    model: str | None
    base_url: str | None
    prompt_file: Path | None
    prompt_from_gemini_cli: bool
    workspace: Path | None
    summary_budget: int | None
    strategy: str
    context_window: int | None
    instructions: str | None
    keep_facts: bool
    redact_secrets: bool
    fmt: str
    since: str | None
    until: str | None
    project: list[str] | None
    session: list[str] | None
    only_model: list[str] | None
    show_secrets: bool
    color: options.Color
    width: int | None
    wide: bool

    def check(self) -> None:
        """Raise a UsageError for the first option, or combination of options, that cannot run."""
        from ctxtool.compress.strategies.registry import get_strategy

        if self.fmt not in ("table", "json"):
            raise UsageError(f"--format {self.fmt!r} is not supported", "Use table or json")
        if sum((self.out is not None, self.as_new_session, self.in_place)) > 1:
            raise UsageError(
                "--output, --as-new-session and --in-place exclude each other", "Pass only one of them"
            )
        if self.era is not None and self.era not in ("jsonl", "json"):
            raise UsageError(
                f"--era {self.era!r} is not a session format", "Use jsonl (current) or json (legacy)"
            )
        if self.era is not None and self.in_place:
            raise UsageError(
                "--in-place keeps each file's format", "Drop --era, or use --output / --as-new-session"
            )
        compaction.check_summarizer(self.summarizer)
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise UsageError(
                f"--threshold {self.threshold} is not a share of the token limit", "Pass a number in (0, 1]"
            )
        if self.prompt_file is not None and self.prompt_from_gemini_cli:
            raise UsageError("--prompt-file and --prompt-from-gemini-cli exclude each other", "Pass only one")
        compaction.check_summarizer_model(self.summarizer, self.model)
        self.filters()  # in its turn: a bad date, or --since after --until
        if self.keep_facts and self.summarizer != "gemini":
            raise UsageError(
                "--keep-facts adds the facts to a model's summary; "
                "the offline summary is made of them already",
                "Add --summarizer gemini, or drop --keep-facts",
            )
        if self.summarizer == "gemini" and self.summary_budget is not None:
            raise UsageError(
                "--summary-budget applies to the offline summarizer", "Drop it or use --summarizer offline"
            )
        if self.workspace is not None and not self.workspace.is_dir():
            raise UsageError(
                f"--workspace {self.workspace} is not a folder", "Pass the project folder the sessions ran in"
            )
        get_profile(self.profile)
        get_strategy(self.strategy)
        gemini_only = self.truncate_only or self.prompt_file is not None or self.prompt_from_gemini_cli
        if self.strategy.partition(":")[0] != "gemini-cli" and gemini_only:
            raise UsageError(
                "--truncate-only, --prompt-file and --prompt-from-gemini-cli apply to the gemini-cli "
                f"strategy, not {self.strategy}",
                "Drop them or use --strategy gemini-cli",
            )

    def filters(self) -> dict[str, Any]:
        """The session filters (``options.filter_args``)."""
        return options.filter_args(self.since, self.until, self.project, self.session, self.only_model)

    def texts(self) -> CompressionTexts:
        """The fixed texts: ctxtool's (with --prompt-file's system prompt), or Gemini CLI's installed ones."""
        from ctxtool.compress.gemini_cli.texts import CTXTOOL_TEXTS

        if self.prompt_file is not None:
            from ctxtool.compress.gemini_cli.prompts import load_prompt_file

            return replace(CTXTOOL_TEXTS, system_prompt=load_prompt_file(self.prompt_file))
        if self.prompt_from_gemini_cli:
            from ctxtool.compress.gemini_cli.prompts import find_gemini_cli_texts

            return find_gemini_cli_texts()
        return CTXTOOL_TEXTS

    def make_summarizer(self) -> Summarizer:
        return compaction.make_summarizer(
            self.summarizer, self.model, self.base_url, budget=self.summary_budget, keep_facts=self.keep_facts
        )

    def destination(self, sources: list[SessionPath]) -> lib.Destination:
        """Where the results go, checked against the sources (``lib.check_destination``)."""
        from ctxtool import compact as lib

        mode: lib.Mode = "in-place" if self.in_place else "new-session" if self.as_new_session else "out"
        if self.out is not None and lib.is_file_name(self.out):
            destination = lib.Destination(mode, self.out.parent, out_file=self.out)
            if self.era is not None and self.out.suffix != f".{self.era}":
                raise UsageError(
                    f"--era {self.era} does not match --output {self.out}",
                    f"Name the output *.{self.era}, or drop --era",
                )
        else:
            destination = lib.Destination(mode, self.out or Path(lib.DEFAULT_OUT_DIR))
        lib.check_destination(sources, destination)
        return destination

    def compact_options(self, texts: CompressionTexts, destination: lib.Destination) -> lib.CompactOptions:
        """The library's options; --out FILE sets the era by its extension."""
        from ctxtool import compact as lib

        era = self.era if destination.out_file is None else destination.out_file.suffix[1:]
        same = ("profile", "force", "threshold", "truncate_only", "dry_run", "chat_model", "strategy")
        given = {k: getattr(self, k) for k in (*same, "context_window", "redact_secrets", "workspace")}
        return lib.CompactOptions(
            texts=texts,
            custom_instructions=self.instructions,
            era=None if era is None else "jsonl" if era == "jsonl" else "json",
            **given,
        )


def compact(
    paths: list[str] = options.SESSION_PATHS,
    out: Path = OUTPUT,
    out_alias: Path = OUT_ALIAS,
    list_profiles: bool = LIST_PROFILES,
    as_new_session: bool = AS_NEW_SESSION,
    in_place: bool = IN_PLACE,
    era: str = ERA,
    dry_run: bool = DRY_RUN,
    force: bool = FORCE,
    threshold: float = THRESHOLD,
    truncate_only: bool = TRUNCATE_ONLY,
    summarizer: str = options.SUMMARIZER,
    profile: str = PROFILE,
    chat_model: str = CHAT_MODEL,
    model: str = SUMMARIZER_MODEL,
    base_url: str = options.BASE_URL,
    prompt_file: Path = PROMPT_FILE,
    prompt_from_gemini_cli: bool = PROMPT_FROM_GEMINI_CLI,
    workspace: Path = WORKSPACE,
    summary_budget: int = SUMMARY_BUDGET,
    strategy: str = STRATEGY,
    context_window: int = CONTEXT_WINDOW,
    instructions: str = INSTRUCTIONS,
    keep_facts: bool = KEEP_FACTS,
    redact_secrets: bool = REDACT_SECRETS,
    show_secrets: bool = options.SHOW_SECRETS,
    undo: bool = UNDO,
    fmt: str = FORMAT,
    color: options.Color = options.COLOR,
    width: int = options.WIDTH,
    wide: bool = options.WIDE,
    since: str = options.SINCE,
    until: str = options.UNTIL,
    project: list[str] = options.PROJECT,
    session: list[str] = options.SESSION,
    only_model: list[str] = options.MODEL,
) -> int:
    if out is not None and out_alias is not None:  # --out: the former name of --output, hidden
        raise UsageError("--output and --out are the same option", "Pass it once, as --output")
    out = out if out is not None else out_alias
    if undo:
        return _undo(paths, force=force, fmt=fmt)
    given = locals()
    request = CompactRequest(**{f.name: given[f.name] for f in fields(CompactRequest)})
    request.check()
    return _run(request, paths)


def _run(request: CompactRequest, paths: list[str]) -> int:
    """The checked request, run: texts and summarizer, the sessions named, the compactions, the output."""
    texts = request.texts()
    summ = request.make_summarizer()
    found, sources = compaction.session_files(paths, request.filters())
    if not sources and not found.missing:
        return ExitStatus.ERROR  # each refused entry was named above, with its fix
    destination = request.destination(sources)
    opts = request.compact_options(texts, destination)
    return _show(_compact_all(sources, found.missing, summ, opts, destination), request)


def _compact_all(
    sources: list[SessionPath],
    missing: list[str],
    summ: Summarizer,
    opts: lib.CompactOptions,
    destination: lib.Destination,
) -> list[lib.CompactionReport]:
    """One report per session: FAILED for a missing PATH or a failed session (the batch goes on), NOOP for a
    legacy file whose resumed .jsonl is compacted instead."""
    from ctxtool import compact as lib
    from ctxtool.session.discover import matches_nothing

    reports = [lib.CompactionReport.failed(m, matches_nothing(m)) for m in missing]
    superseded = lib.superseded_by_resume(sources) if opts.era and destination.mode == "out" else {}
    with compaction.batch(summ, len(sources), "compacting") as advance:
        for sp in sources:
            if sp.path in superseded:
                reports.append(lib.superseded_report(sp, superseded[sp.path]))
            else:
                try:
                    reports.append(lib.compact_session(sp, summ, opts, destination))
                except (CtxtoolError, OSError) as exc:
                    reports.append(lib.CompactionReport.failed(sp.path, _failure(sp.path, exc)))
            advance(sp.path.name)
    return reports


def _failure(path: Path, exc: Exception) -> str:
    """A CtxtoolError names its file; an OSError is given it."""
    return str(exc) if isinstance(exc, CtxtoolError) else f"{path}: {exc}"


def _rows(reports: Sequence[lib.CompactionReport | lib.UndoReport]) -> list[dict[str, Any]]:
    """The reports as rows, after naming each error on stderr."""
    for report in reports:
        if report.error:
            print(f"Error: {report.error}", file=sys.stderr)
    return [r.as_dict() for r in reports]


def _print_json(command: str, **doc: Any) -> None:
    from ctxtool.frames.model import SCHEMA_VERSION
    from ctxtool.render import formats as output

    doc = {"schema_version": SCHEMA_VERSION, "command": command, **doc}
    output.write_stdout(output.dumps(doc) + b"\n", sys.stdout.buffer)


def _status(reports: Sequence[lib.CompactionReport | lib.UndoReport]) -> int:
    from ctxtool import compact as lib

    return ExitStatus.ERROR if any(r.status == lib.FAILED for r in reports) else ExitStatus.OK


def _show(reports: list[lib.CompactionReport], request: CompactRequest) -> int:
    """The errors on stderr, the reports on stdout (none when every session failed), the exit status."""
    from ctxtool import compact as lib

    rows = _rows(reports)
    if not request.show_secrets:  # a report quotes facts of the sessions (retention's lost facts, notes)
        from ctxtool.common.secret_scan import redact_value

        rows = redact_value(rows)
    if all(r.status == lib.FAILED for r in reports):
        return ExitStatus.ERROR  # nothing was compacted: the errors above say why; stdout stays empty
    if request.fmt == "json":
        _print_json("compact", dry_run=request.dry_run, totals=_compact_totals(rows), sessions=rows)
    else:
        from ctxtool.render import tables as render

        console = render.make_console(width=request.width, color=request.color)
        title = "ctxtool compact" + (" --dry-run (nothing written)" if request.dry_run else "")
        table, notes = render.compact_table(
            rows, title=title, plan=request.dry_run, width=console.width, wide=request.wide
        )
        render.print_table(console, table, wide=request.wide)
        for note in notes:
            console.print(note, markup=False, highlight=False)
        # A path to copy is never shortened: each file written, whole, on a line of its own (not through
        # rich, which would fold it at the width).
        for r in rows:
            if r.get("written") and r.get("output_path"):
                backup = f" (backup: {r['backup_path']})" if r.get("backup_path") else ""
                sys.stdout.write(f"wrote {Path(r['output_path']).absolute()}{backup}\n")
    return _status(reports)


def _undo(paths: list[str], *, force: bool, fmt: str) -> int:
    """``compact --undo``: one row per file, FAILED rows named on stderr."""
    from ctxtool import compact as lib
    from ctxtool.session.discover import discover, matches_nothing, resolve_session_args

    found = discover(resolve_session_args(paths))
    reports = [lib.UndoReport(m, lib.FAILED, error=matches_nothing(m)) for m in found.missing]
    for sp in found.files:
        if lib.is_backup(sp.path):
            continue
        if sp.path.suffix == ".json" and any(o.path == sp.path.with_suffix(".jsonl") for o in found.files):
            continue  # the pair is undone through its .jsonl
        try:
            reports.append(lib.undo_compaction(sp.path, force=force))
        except (CtxtoolError, OSError) as exc:
            reports.append(lib.UndoReport(str(sp.path), lib.FAILED, error=_failure(sp.path, exc)))
    rows = _rows(reports)
    if fmt == "json":
        _print_json("compact --undo", sessions=rows)
    else:
        what = {"record": "dropped the appended compaction", "file": "removed the .jsonl ctxtool wrote"}
        for r in rows:
            detail = what.get(r["removed"] or "", "no compaction by ctxtool at the end of the file")
            if r["status"] != lib.FAILED:
                backup = f" (backup: {r['backup_path']})" if r["backup_path"] else ""
                print(f"{r['status']:<8} {r['path']}: {detail}{backup}")
    return _status(reports)


def _compact_totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a JSON reader wants at a glance: sessions by status, files written, tokens before and after."""
    return {
        "sessions": len(rows),
        "written": sum(bool(r.get("written")) for r in rows),
        "by_status": dict(Counter(str(r.get("status")) for r in rows)),
        "tokens_before": sum(int(r.get("tokens_before") or 0) for r in rows),
        "tokens_after": sum(int(r.get("tokens_after") or 0) for r in rows),
    }
