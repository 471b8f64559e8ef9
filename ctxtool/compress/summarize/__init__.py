"""Summarizers: the deterministic offline one, the facts it keeps, and a real Gemini model."""
