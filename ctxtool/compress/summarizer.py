"""The seam between a compaction algorithm and whatever writes the summary.

A strategy (Gemini CLI's port, Kode, Pi, ...) decides *what* is summarised and builds each model call; a
summarizer (offline, or Gemini through google-genai) only answers one call at a time. Choosing the final
text (probe answer or first summary) is the strategy's job, never the summarizer's, so that the upstream
rule is applied the same way whichever back end runs. Owns no I/O and imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# Wire form of one Gemini ``Content``: {"role": "user"|"model", "parts": [Part, ...]}.
Content = dict[str, Any]

CallKind = Literal["summary", "probe"]


@dataclass(frozen=True)
class ModelCall:
    """One generateContent request a compaction strategy wants answered.

    ``contents`` is exactly what would be sent; ``history`` is the part of it that came from the session
    (what is being summarised), so an offline summarizer need not undo the appended instruction turns."""

    kind: CallKind
    model: str
    system_instruction: str
    contents: list[Content]
    history: list[Content]
    anchored: bool = False
    previous_summary: str | None = None
    prompt_id: str = ""
    max_output_tokens: int | None = None
    # The request's generationConfig, in the API's JSON form (Gemini CLI 0.61's model-config aliases).
    generation_config: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class Summarizer(Protocol):
    """Answers model calls. Returns the response text, or None when the model gave no candidate/parts."""

    name: str
    deterministic: bool

    def generate(self, call: ModelCall) -> str | None: ...
