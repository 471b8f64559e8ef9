"""BLAKE2b, the digest ctxtool uses, without loading OpenSSL: importing ``hashlib`` loads OpenSSL's
``_hashlib`` first, 4.0-4.2 ms of every run's start-up (``python -X importtime``).
"""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover (a Python built without it)
    from hashlib import blake2b

__all__ = ["blake2b"]
