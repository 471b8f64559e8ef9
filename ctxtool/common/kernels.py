"""Which optional compiled kernels this run uses (``ctxtool/_kernels.c``, built when a compiler is present).

Owns: the choice between the compiled module ``ctxtool._kernels`` and the pure-Python functions it speeds up
(each always there and tested), and how ``ctxtool --version`` names it. ``CTXTOOL_PURE=1`` forces the pure
functions. Must not import any of ctxtool's modules but ``ctxtool._kernels``.
"""

from __future__ import annotations

import os
from types import ModuleType


def compiled() -> ModuleType | None:
    """The compiled kernels, or None when they are not built or ``CTXTOOL_PURE`` is set (any value but empty
    or ``0``)."""
    if os.environ.get("CTXTOOL_PURE", "") not in ("", "0"):
        return None
    try:
        from ctxtool import _kernels
    except ImportError:
        return None
    return _kernels


def describe() -> str:
    """``compiled kernels: utf8, utf16`` or ``pure Python``, as ``ctxtool --version`` says it."""
    module = compiled()
    return "pure Python" if module is None else "compiled kernels: " + ", ".join(module.KERNELS)
