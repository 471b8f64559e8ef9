"""Choices the command line validates before any heavy module is imported."""

from __future__ import annotations

BY_CHOICES: tuple[str, ...] = ("turn", "request", "session", "model", "project", "day")
MACHINE_FORMATS: tuple[str, ...] = ("json", "jsonl", "csv", "parquet")
FORMATS: tuple[str, ...] = ("table", *MACHINE_FORMATS)
