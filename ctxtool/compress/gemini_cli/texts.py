"""The fixed texts of a Gemini CLI compression: instruction turn, verification probe, acknowledgement and the
``<session_context>`` template, as one value.

``CTXTOOL_TEXTS`` is ctxtool's own wording of the prompt prose (project rule: no upstream prompt text),
keeping upstream's structure: which turn carries each text, when the anchored variant is chosen (any text part
containing ``<state_snapshot>``), the scratchpad-then-snapshot order and the probe's repeat-or-improve
contract. The acknowledgement and the ``<session_context>`` shape are upstream's byte for byte: they are
written into session files and measured by the split (spec sections 9.5 and 10.3).
``--prompt-from-gemini-cli`` replaces every field with the installed Gemini CLI's own
(``prompts.find_gemini_cli_texts``). Pure values: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ctxtool.common.jsvalue import js_trim

EnvSlot = Literal["today", "platform", "temp_dir", "directory_context", "memory"]

# The acknowledgement of the summary turn (context/chatCompressionService.ts, introduced by 0ca5c07135).
SUMMARY_ACK_TEXT = "Got it. Thanks for the additional context!"

LEGACY_INSTRUCTION = "Think it through in your scratchpad first, then write the <state_snapshot>."
INSTRUCTION_SUFFIX = "Think it through in your scratchpad first, then write the updated <state_snapshot>."
ANCHOR_NEW = "Write a fresh <state_snapshot> from the conversation above."
ANCHOR_EXISTING = (
    "The conversation above already contains an earlier <state_snapshot>. Carry every part of it that still"
    " holds into the new one and bring it up to date with what happened since; keep all constraints and"
    " key facts it established."
)
PROBE_TEXT = (
    "Review the <state_snapshot> you just wrote against the conversation. If it leaves out or blurs any"
    " concrete detail (file paths, commands, tool results, errors, the user's constraints), write a FINAL,"
    " corrected <state_snapshot>. If nothing is missing, write the same <state_snapshot> again unchanged."
)


@dataclass(frozen=True)
class EnvTemplate:
    """The ``<session_context>`` text of ``getEnvironmentContext`` (utils/environmentContext.ts): literal
    pieces around named substitutions, ``.trim()``'d when ``trim``."""

    pieces: tuple[str, ...]  # len(slots) + 1 literal pieces
    slots: tuple[EnvSlot, ...]
    trim: bool = True

    def render(self, values: Mapping[EnvSlot, str]) -> str:
        out = [self.pieces[0]]
        for slot, piece in zip(self.slots, self.pieces[1:], strict=True):
            out += [values.get(slot, ""), piece]
        text = "".join(out)
        return js_trim(text) if self.trim else text


# Gemini CLI 0.61.0 (cc0107ed2) getEnvironmentContext's shape (spec section 10.3).
DEFAULT_ENV_TEMPLATE = EnvTemplate(
    pieces=(
        "\n<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\n"
        "Today's date is ",
        " (formatted according to the user's locale).\nMy operating system is: ",
        "\nThe project's temporary directory is: ",
        "\n",
        "\n\n",
        "\n</session_context>",
    ),
    slots=("today", "platform", "temp_dir", "directory_context", "memory"),
)


@dataclass(frozen=True)
class CompressionTexts:
    """Every fixed text a compression sends or writes. ``system_prompt`` None: the profile's own prompt."""

    system_prompt: str | None = None
    anchor_new: str = ANCHOR_NEW
    anchor_existing: str = ANCHOR_EXISTING
    # The instruction turn is ``before + anchor + after`` (upstream: a template around the anchor).
    instruction_before: str = ""
    instruction_after: str = "\n\n" + INSTRUCTION_SUFFIX
    probe: str = PROBE_TEXT
    ack: str = SUMMARY_ACK_TEXT
    env: EnvTemplate = field(default=DEFAULT_ENV_TEMPLATE)

    def instruction(self, anchored: bool) -> str:
        anchor = self.anchor_existing if anchored else self.anchor_new
        return f"{self.instruction_before}{anchor}{self.instruction_after}"


CTXTOOL_TEXTS = CompressionTexts()
