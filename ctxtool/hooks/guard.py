"""``ctxtool guard``: a Gemini CLI ``BeforeModel`` hook that holds a session to budgets.

Owns: the guard's options (``parse_args``; the hot path parses them itself, without typer, and
``tests/test_guard.py`` keeps them equal to the typer command's), the verdict (``decide``) and the hook's
protocol: the event as JSON on standard input, the answer as JSON on standard output, exit status 0.

What Gemini CLI 0.61.0 does with the answer (``hookSystem.fireBeforeModelEvent`` and the hook runner's
``close`` handler in the bundle's ``chunk-5FZXKDXH.js``; /work/shared/spec/gemini-cli-hooks.md):

* ``{"continue": false, "stopReason": R}`` stops the agent (``shouldStopExecution``) with
  "Agent execution stopped: R" (``getEffectiveReason``);
* ``hookSpecificOutput.llm_request.model`` changes the model of this one request
  (``applyLLMRequestModifications``), ``systemMessage`` shows one line ("Hook system message: …");
* stdout empty and exit 0: the text on stderr is shown as a system message (``convertPlainTextToHookOutput``);
  exit 2 would block the call, so the guard never exits 2, whatever happens.

Any failure inside ctxtool allows the call and says so in one line on stderr (fail open), unless
``--fail-closed``. Imports nothing but ``json`` and the tally (``ctxtool.hooks.ledger``): it runs before
every model call, and starting Python is most of what a warm call costs (no dataclasses, typing or pathlib,
each of which costs more to import than reading a grown session; ``UsageError`` is imported when raised).
"""

from __future__ import annotations

import math
import sys

TYPE_CHECKING = False  # (mypy reads any name TYPE_CHECKING as typing's)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import IO, Any

# (flag, kind, what it measures): the budgets, in the order a verdict names them.
BUDGETS = (
    ("--max-session-cost", "cost", "session cost"),
    ("--max-session-tokens", "tokens", "session tokens"),
    ("--max-daily-cost", "cost", "today's cost (UTC, every session)"),
    ("--max-context-share", "share", "context share"),
)
VALUE_OPTIONS = (*(flag for flag, _, _ in BUDGETS), "--warn-at", "--fallback-model", "--cache-dir", "--scope")
FLAG_OPTIONS = ("--fail-closed",)
DEFAULT_WARN_AT = 0.8
_TOKENS = r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*$"


class GuardOptions:
    __slots__ = ("cache_dir", "fail_closed", "fallback_model", "limits", "scope", "warn_at")

    def __init__(
        self,
        limits: dict[str, float] | None = None,  # flag -> limit
        warn_at: float = DEFAULT_WARN_AT,
        fallback_model: str | None = None,
        fail_closed: bool = False,
        cache_dir: str | None = None,
        scope: str | None = None,  # where `ctxtool hooks install` put the hook (for the advice in a verdict)
    ) -> None:
        self.limits: dict[str, float] = {} if limits is None else limits
        self.warn_at, self.fallback_model, self.fail_closed = warn_at, fallback_model, fail_closed
        self.cache_dir, self.scope = cache_dir, scope

    def argv(self) -> list[str]:
        """These options as the command line that gives them (what ``ctxtool hooks install`` writes)."""
        plain = {f: format_limit(k, self.limits[f], plain=True) for f, k, _ in BUDGETS if f in self.limits}
        if self.warn_at != DEFAULT_WARN_AT:
            plain["--warn-at"] = format_limit("share", self.warn_at, plain=True)
        named = [*plain.items(), ("--fallback-model", self.fallback_model or None)]
        rest = [("--cache-dir", self.cache_dir or None), ("--scope", self.scope or None)]
        return [*to_argv(named, fail_closed=self.fail_closed), *to_argv(rest, fail_closed=False)]


def parse_limit(kind: str, flag: str, text: str) -> float:
    """A limit as ``ctxtool audit`` reads it: ``5`` or ``$5`` (USD), ``2M``, ``500k`` or ``2_000_000``
    (tokens), ``50%`` or ``0.5`` (shares; a bare number above 1 is refused)."""
    label = f"{flag} {text!r}"
    value = text.strip()
    try:
        if kind == "share":
            number = float(value[:-1].replace("_", "")) / 100 if value.endswith("%") else float(value)
            if not value.endswith("%") and number > 1:
                raise _usage(f"{label} is a share above 1", f"Write it as a percentage, e.g. {number:g}%")
            if not 0 <= number <= 1:
                raise _usage(f"{label} is outside 0-100%", "Write it as e.g. 50% or 0.5")
            return number
        if kind == "tokens":
            import re

            match = re.match(_TOKENS, value)
            if not match:
                raise ValueError(value)
            scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2).lower()]
            number = float(match.group(1).replace("_", "").replace(",", "")) * scale
        else:
            number = float(value.removeprefix("$").replace("_", ""))
    except ValueError:
        example = {"tokens": "2000000 or 2M", "cost": "5 or 2.50 (USD)", "share": "50% or 0.5"}[kind]
        raise _usage(f"{label} is not a number", f"Write it as e.g. {example}") from None
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise _usage(f"{label} is not a usable limit", "Give a positive number")
    return number


def format_limit(kind: str, value: float, *, plain: bool = False) -> str:
    """A figure as a verdict shows it (``$1.62``, ``1,234,567``, ``81%``); ``plain``: as options read it."""
    if kind == "cost":
        if plain:
            return f"{value:g}" if value == round(value, 6) else f"{value:.6f}"
        return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
    if kind == "tokens":
        return f"{value:.0f}" if plain else f"{value:,.0f}"
    return f"{value * 100:g}%" if plain else f"{value * 100:.0f}%"


def to_argv(values: Sequence[tuple[str, str | None]], *, fail_closed: bool) -> list[str]:
    """The guard's command line from option values (``("--max-session-cost", "5")``, ``None`` for one not
    given): what ``ctxtool guard`` hands to ``run`` and what ``hooks install`` writes into settings.json."""
    argv = [x for flag, value in values if value is not None for x in (flag, value)]
    return [*argv, "--fail-closed"] if fail_closed else argv


def _usage(message: str, fix: str) -> Exception:
    """A ``UsageError``, imported only when one is raised (``ctxtool.common.errors`` imports pathlib)."""
    from ctxtool.common.errors import UsageError

    return UsageError(message, fix)


def parse_args(argv: Sequence[str]) -> GuardOptions:
    """The guard's options (``--name value`` or ``--name=value``); a UsageError names what is wrong."""
    opts = GuardOptions()
    kinds = {flag: kind for flag, kind, _ in BUDGETS}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if name in FLAG_OPTIONS and not eq:
            opts.fail_closed = True
            i += 1
            continue
        if name not in VALUE_OPTIONS:
            known = ", ".join((*VALUE_OPTIONS, *FLAG_OPTIONS))
            raise _usage(f"unknown argument {arg!r}", f"Use one of {known}")
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(args):
            value = args[i + 1]
            i += 2
        else:
            raise _usage(f"{name} needs a value", "See `ctxtool guard --help`")
        if name in kinds:
            opts.limits[name] = parse_limit(kinds[name], name, value)
        elif name == "--warn-at":
            opts.warn_at = parse_limit("share", name, value)
        elif name == "--fallback-model":
            opts.fallback_model = value.strip() or None
        elif name == "--cache-dir":
            opts.cache_dir = value
        elif name == "--scope":
            if value not in ("user", "project"):
                raise _usage(f"--scope {value!r}", "Use --scope user or --scope project")
            opts.scope = value
    return opts


class Measured:
    __slots__ = ("flag", "kind", "limit", "value", "what")

    def __init__(self, flag: str, kind: str, what: str, value: float, limit: float) -> None:
        self.flag, self.kind, self.what, self.value, self.limit = flag, kind, what, value, limit

    @property
    def share(self) -> float:
        return math.inf if self.limit == 0 else self.value / self.limit


def measure(spend: Any, opts: GuardOptions) -> list[Measured]:
    """Each budget set with its figure; a budget whose figure is unknown (no price known) is left out."""
    values = {
        "--max-session-cost": spend.session.known_cost,
        "--max-session-tokens": float(spend.session.total),
        "--max-daily-cost": spend.day_cost,
        "--max-context-share": spend.session.context_share,
    }
    return [
        Measured(flag, kind, what, float(values[flag]), opts.limits[flag])
        for flag, kind, what in BUDGETS
        if flag in opts.limits and values[flag] is not None
    ]


def decide(spend: Any, opts: GuardOptions, request: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The hook's answer: ``{}`` (go on), a notice with the fallback model past the warn level, or a stop."""
    measured = measure(spend, opts)
    over = [m for m in measured if m.value >= m.limit]
    if over:
        return {"continue": False, "stopReason": stop_reason(over[0], opts)}
    warned = [m for m in measured if m.value >= m.limit * opts.warn_at]
    if not warned:
        return {}
    worst = max(warned, key=lambda m: m.share)
    notice = (
        f"ctxtool guard: {worst.what} {format_limit(worst.kind, worst.value)} of "
        f"{format_limit(worst.kind, worst.limit)} ({worst.share * 100:.0f}%, {worst.flag})"
    )
    answer: dict[str, Any] = {}
    current, fallback = (request or {}).get("model"), opts.fallback_model
    if fallback:
        notice += f"; this request uses {fallback}"
        if current and current != fallback:
            notice += f" instead of {current}"
        answer["hookSpecificOutput"] = {"hookEventName": "BeforeModel", "llm_request": {"model": fallback}}
    else:
        notice += "; it stops the session at 100%"
    answer["systemMessage"] = notice
    return answer


def stop_reason(m: Measured, opts: GuardOptions) -> str:
    """What the user reads when a budget stops the agent: the budget, the spend, and how to raise it."""
    import copy
    import shlex

    raised = copy.copy(opts)  # without its scope, which ``hooks install`` takes first
    raised.limits, raised.scope = {**opts.limits, m.flag: _raised(m)}, None
    scope = ["--scope", opts.scope] if opts.scope else []
    command = " ".join(["ctxtool", "hooks", "install", *scope, *map(shlex.quote, raised.argv())])
    later = " or wait for the next UTC day" if m.flag == "--max-daily-cost" else " or start a new session"
    return (
        f"ctxtool guard: {m.what} is {format_limit(m.kind, m.value)}, at or past its budget of "
        f"{format_limit(m.kind, m.limit)} ({m.flag}). To go on, raise it: {command}{later}."
    )


def _raised(m: Measured) -> float:
    """A budget comfortably above the figure: twice the old budget, or more when the figure is above that."""
    if m.kind == "share":
        return min(1.0, max(m.limit * 1.5, m.value * 1.2))
    base = max(m.limit * 2, m.value * 1.5)
    if m.kind != "tokens" and base < 1:
        return math.ceil(base * 100) / 100
    if base <= 0:
        return 0.0
    step = 10 ** max(0, int(math.log10(base)) - 1)
    return float(math.ceil(base / step) * step)  # two significant digits, up: 4,280,000 -> 4,300,000


def run(argv: Sequence[str], stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> int:
    """Parse ``argv``, read the event, answer; 0 whatever happens (Gemini CLI must never see status 2)."""
    try:
        opts = parse_args(argv)
    except Exception as exc:
        return _failed(exc, "--fail-closed" in argv, stdout, stderr)
    return respond(opts, stdin, stdout, stderr)


def respond(opts: GuardOptions, stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> int:
    """Answer the hook event on ``stdin`` (fail open on any error, unless ``opts.fail_closed``)."""
    try:
        import json

        text = stdin.read()
        if not text.strip():
            raise ValueError("no hook event on standard input (Gemini CLI sends one as JSON)")
        event = json.loads(text)
        if not isinstance(event, dict):
            raise ValueError("the hook event on standard input is not a JSON object")
        from ctxtool.hooks import ledger

        request = event.get("llm_request")
        model = request.get("model") if isinstance(request, dict) else None
        models = [m for m in (model, opts.fallback_model) if isinstance(m, str)]
        path, whole_day = event.get("transcript_path"), "--max-daily-cost" in opts.limits
        spend = ledger.spend(path, cache_dir=opts.cache_dir, models=models, whole_day=whole_day)
        answer = decide(spend, opts, request if isinstance(request, dict) else None)
    except Exception as exc:  # fail open: never break Gemini CLI
        return _failed(exc, opts.fail_closed, stdout, stderr)
    _write(stdout, answer)
    return 0


def _failed(exc: Exception, fail_closed: bool, stdout: IO[str], stderr: IO[str]) -> int:
    from ctxtool.common.errors import UsageError

    what = str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"
    what = " ".join(what.split())[:300]
    if fail_closed:
        why = f"ctxtool guard failed ({what}); --fail-closed stops the session. See `ctxtool guard --help`."
        _write(stdout, {"continue": False, "stopReason": why})
    else:
        print(f"ctxtool guard: {what}; the call was allowed (fail open)", file=stderr)
        stderr.flush()
    return 0


def _write(stdout: IO[str], answer: Mapping[str, Any]) -> None:
    import json

    stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
    stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """The hot path of ``ctxtool guard`` (``ctxtool.__main__`` calls it before typer is imported)."""
    return run(list(sys.argv[2:] if argv is None else argv), sys.stdin, sys.stdout, sys.stderr)
