"""BLAKE2b, the digest ctxtool uses, without loading OpenSSL.

``hashlib.blake2b`` is CPython's own ``_blake2`` module, but importing ``hashlib`` first loads OpenSSL's
``_hashlib`` for the other algorithms: 4.0-4.2 ms of every run's start-up (``python -X importtime``), paid
before the scan's worker starts. Modules that need only BLAKE2b take it from here.
"""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover (a Python built without it)
    from hashlib import blake2b

__all__ = ["blake2b"]
