"""Which optional compiled kernels this run uses (``ctxtool/_kernels.c``, built when a compiler is present).

Owns: the choice between the compiled module ``ctxtool._kernels`` and the pure-Python functions it speeds up
(each kernel has the contract of one such function, and the Python one is always there and always tested),
and how ``ctxtool --version`` names that choice. ``CTXTOOL_PURE=1`` forces the pure functions; so does an
install made without a compiler, where the module is missing.

Must not: import any of ctxtool's modules but ``ctxtool._kernels`` (the session reader imports this one at
module level).
"""

from __future__ import annotations

import os
from types import ModuleType


def forced_pure() -> bool:
    """Whether ``CTXTOOL_PURE`` asks for the pure-Python functions (any value but empty or ``0``)."""
    return os.environ.get("CTXTOOL_PURE", "") not in ("", "0")


def compiled() -> ModuleType | None:
    """The compiled kernels, or None when they are not built or ``CTXTOOL_PURE`` is set."""
    if forced_pure():
        return None
    try:
        from ctxtool import _kernels
    except ImportError:
        return None
    return _kernels


def describe() -> str:
    """``compiled kernels: utf8, utf16`` or ``pure Python``, as ``ctxtool --version`` says it."""
    module = compiled()
    if module is None:
        return "pure Python"
    return "compiled kernels: " + ", ".join(module.KERNELS)
