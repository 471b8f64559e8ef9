"""Other agents' compaction strategies (Kode, Pi, OpenClaw, Codex) beside Gemini CLI's: the types they share
(base), one module per agent, and the registry that finds them.
"""
