# The optional compiled kernels (ctxtool/_kernels.c); ctxtool.common.kernels says which are in use.

KERNELS: tuple[str, ...]

def invalid_utf8(data: bytes, first_line: int = 1, /) -> tuple[int, int | None]: ...
