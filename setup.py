"""The optional compiled kernels (ctxtool/_kernels.c); everything else about the build is in pyproject.toml.

The extension is ``optional``: where no C compiler (or no Python headers) is found, setuptools warns and the
install goes on without it, and ctxtool runs its pure-Python functions (``ctxtool --version`` says which).
It uses only the limited API of Python 3.11, so one wheel per platform (``cp311-abi3``) serves 3.11 and
every later CPython. ``CTXTOOL_BUILD_PURE=1`` builds the pure ``py3-none-any`` wheel the release adds for
every other platform.
"""

import os

from setuptools import Extension, setup

if os.environ.get("CTXTOOL_BUILD_PURE", "") not in ("", "0"):
    setup()
else:
    setup(
        ext_modules=[
            Extension("ctxtool._kernels", ["ctxtool/_kernels.c"], optional=True, py_limited_api=True)
        ],
        options={"bdist_wheel": {"py_limited_api": "cp311"}},
    )
