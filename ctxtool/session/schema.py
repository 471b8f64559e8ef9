"""The on-disk shape of Gemini CLI session records, written down as TypedDicts.

Source: packages/core/src/services/chatRecordingTypes.ts @ 5411f113ca (2026-08-21). Every key is optional
here because files from every era are read: fields appeared over time (see shared/spec/session-format.md) and
forks add their own. Nothing in this module does I/O.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

# The keys of TokensSummary in Gemini CLI's order, kept beside the accounting (a module that imports nothing).
from ctxtool.measure.tokens import TOKEN_KEYS as TOKEN_KEYS

MessageType = Literal["user", "gemini", "info", "error", "warning"]
# The user turn Gemini CLI sends by itself when the model answers a tool result with no visible text
# ("nudgeMessage" in packages/cli/src/ui/hooks/useGeminiStream.ts and
# packages/core/src/agent/legacy-agent-session.ts, v0.61.0). It is context the model saw, written as a
# ``user`` message, but not something the user typed: not a prompt, not a turn, not a user request.
EMPTY_RESPONSE_NUDGE_PREFIX = "[System: You successfully executed a tool but returned an empty response"

ToolStatus = Literal[
    "success", "error", "cancelled", "validating", "scheduled", "executing", "awaiting_approval"
]


class TokensSummary(TypedDict, total=False):
    input: int  # promptTokenCount: the whole prompt, cached included
    output: int  # candidatesTokenCount
    cached: int  # cachedContentTokenCount, a subset of input
    thoughts: int  # thoughtsTokenCount
    tool: int  # toolUsePromptTokenCount
    total: int  # input + output + thoughts + tool


class ThoughtSummary(TypedDict, total=False):
    subject: str
    description: str
    timestamp: str


class ToolCallRecord(TypedDict, total=False):
    id: str
    name: str
    args: dict[str, Any]
    result: Any  # string, Part, Part[] or null
    status: str
    timestamp: str
    resultDisplay: Any
    displayName: str
    description: str
    renderOutputAsMarkdown: bool
    agentId: str


class MessageRecord(TypedDict, total=False):
    id: str
    timestamp: str
    type: str  # MessageType, or a fork's own value
    content: Any  # string or Part[]
    displayContent: Any
    toolCalls: list[ToolCallRecord]
    thoughts: list[ThoughtSummary]
    tokens: TokensSummary | None
    model: str


class ConversationRecord(TypedDict, total=False):
    sessionId: str
    projectHash: str
    startTime: str
    lastUpdated: str
    messages: list[MessageRecord]
    summary: str
    directories: list[str]
    kind: Literal["main", "subagent"]
    memoryScratchpad: dict[str, Any]
