"""JavaScript-exact JSON values: ``JSON.stringify``, ``Number::toString``, UTF-16 strings, truthiness.

Gemini CLI measures history in UTF-16 code units of ``JSON.stringify`` output, slices strings by code units,
formats numbers the ECMAScript way and tests ``part.functionResponse`` by JS truthiness; Python differs on
every one. This module owns those differences so the port can be written as plainly as the upstream
TypeScript (spec: gemini-cli-compression.md section 16). Values are what ``json.loads`` produces. No I/O.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from ctxtool.common import kernels

# ECMAScript WhiteSpace + LineTerminator code points, the set String.prototype.trim removes. Python's
# str.strip() also strips U+001C..U+001F and U+0085 and keeps U+FEFF, so it is not the same set.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)

_SURROGATE = re.compile("[\ud800-\udfff]")
# Largest integer a double holds exactly; beyond it JSON.parse already rounded the value.
_MAX_SAFE_INTEGER = 2**53 - 1
_MAX_ARRAY_INDEX = 2**32 - 2


def js_iso(now: datetime) -> str:
    """``new Date().toISOString()``: UTC with milliseconds and a Z."""
    utc = now.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def js_trim(s: str) -> str:
    """``String.prototype.trim``."""
    return s.strip(JS_WHITESPACE)


def js_truthy(value: Any) -> bool:
    """JS truthiness of a JSON value: ``{}`` and ``[]`` are truthy; ``""``, ``0``, ``NaN``, null are not."""
    if value is None or isinstance(value, bool | int | float | str):
        return bool(value) and value == value  # (NaN is the one value not equal to itself)
    return True


# UTF-16


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-le", "surrogatepass")


def utf16_len(s: str) -> int:
    """``s.length`` in JS: UTF-16 code units (an astral character counts 2, a lone surrogate 1)."""
    return len(s) if s.isascii() else len(_utf16(s)) // 2


def utf16_counts_pure(s: str, /) -> tuple[int, int]:
    """(``s.length`` in JS, how many of its characters are ASCII). ``utf16_counts`` is this function, or its
    compiled kernel (``ctxtool/_kernels.c``) when built."""
    if s.isascii():
        return len(s), len(s)
    return len(_utf16(s)) // 2, len(s.encode("ascii", "ignore"))


def utf16_units(s: str) -> list[int]:
    """The code units ``s.charCodeAt(i)`` would return, in order."""
    if s.isascii():
        return [ord(c) for c in s]
    b = _utf16(s)
    return [b[i] | (b[i + 1] << 8) for i in range(0, len(b), 2)]


def _from_utf16(b: bytes) -> str:
    return b.decode("utf-16-le", "surrogatepass")


def js_slice(s: str, start: int, end: int | None = None) -> str:
    """``String.prototype.slice(start, end)`` on code units (a surrogate pair may be split, as in JS)."""
    n = utf16_len(s)
    lo = max(n + start, 0) if start < 0 else min(start, n)
    hi = n if end is None else (max(n + end, 0) if end < 0 else min(end, n))
    if lo >= hi:
        return ""
    if s.isascii():
        return s[lo:hi]
    return _from_utf16(_utf16(s)[2 * lo : 2 * hi])


def normalize_surrogates(s: str) -> str:
    """Join surrogate halves that Python holds as two code points into one character, as JS sees them."""
    return s if _SURROGATE.search(s) is None else _from_utf16(_utf16(s))


# Numbers


def js_number_to_string(x: float) -> str:
    """ECMAScript ``Number::toString(x)`` (radix 10), e.g. ``1.0 -> "1"``, ``1e21 -> "1e+21"``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"  # includes -0
    if x < 0:
        return "-" + js_number_to_string(-x)
    # repr() gives the shortest round-tripping digits, the same digits ECMAScript requires.
    _sign, digit_tuple, exp = Decimal(repr(x)).as_tuple()
    assert isinstance(exp, int)
    digits = "".join(str(d) for d in digit_tuple).rstrip("0")
    exp += len(digit_tuple) - len(digits)
    digits = digits.lstrip("0") or "0"
    k = len(digits)
    n = k + exp  # x = 0.digits * 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    exp_str = ("+" if e >= 0 else "-") + str(abs(e))
    if k == 1:
        return digits + "e" + exp_str
    return digits[0] + "." + digits[1:] + "e" + exp_str


def _json_number(x: int | float) -> str:
    if isinstance(x, int):
        if -_MAX_SAFE_INTEGER <= x <= _MAX_SAFE_INTEGER:
            return str(x)
        x = float(x)  # JSON.parse would already have rounded it to a double
    if math.isnan(x) or math.isinf(x):
        return "null"
    return js_number_to_string(x)


# JSON.stringify


def _quote(s: str) -> str:
    # json.dumps escapes exactly the characters JSON.stringify escapes (", \, and < 0x20 with the same
    # short forms and lowercase \u00xx), except lone surrogates, which ES2019 well-formed stringify escapes.
    out = json.dumps(s, ensure_ascii=False)
    if _SURROGATE.search(out) is None:
        return out
    out = json.dumps(normalize_surrogates(s), ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)


def is_array_index(key: str) -> bool:
    """Whether JS treats ``key`` as an array index (such keys come first, in numeric order, in an object)."""
    return (
        key.isascii()
        and key.isdigit()
        and (key == "0" or not key.startswith("0"))
        and int(key) <= _MAX_ARRAY_INDEX
    )


def js_key_order(obj: dict[str, Any]) -> list[str]:
    """Own-key order of a JS object built from ``obj``: integer-like keys ascending, then insertion order."""
    keys = list(obj)
    index_keys = [k for k in keys if is_array_index(k)]
    if not index_keys:
        return keys
    index_keys.sort(key=int)
    return index_keys + [k for k in keys if not is_array_index(k)]


def js_stringify(value: Any, indent: int | None = None) -> str:
    """``JSON.stringify(value)`` or ``JSON.stringify(value, null, indent)``; TypeError for values JSON cannot
    hold (JS would give ``undefined`` for the whole call)."""
    parts: list[str] = []
    _emit(value, parts, indent, "")
    return "".join(parts)


_LITERALS = {None: "null", True: "true", False: "false"}


def _emit(value: Any, out: list[str], indent: int | None, cur: str) -> None:
    if value is None or isinstance(value, bool):
        out.append(_LITERALS[value])
    elif isinstance(value, str):
        out.append(_quote(value))
    elif isinstance(value, int | float):
        out.append(_json_number(value))
    elif isinstance(value, dict | list | tuple):
        is_object = isinstance(value, dict)
        opening, closing = "{}" if is_object else "[]"
        if not value:
            out.append(opening + closing)
            return
        inner = cur + " " * indent if indent else cur
        out.append(opening + "\n" + inner if indent else opening)
        entries = js_key_order(value) if isinstance(value, dict) else value
        for i, entry in enumerate(entries):
            if i:
                out.append(",\n" + inner if indent else ",")
            if is_object:
                if not isinstance(entry, str):
                    raise TypeError(f"object keys must be strings, not {type(entry).__name__}")
                out.append(_quote(entry) + (": " if indent else ":"))
            _emit(value[entry] if is_object else entry, out, indent, inner)
        out.append("\n" + cur + closing if indent else closing)
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


def json_length(value: Any) -> int:
    """``JSON.stringify(value).length``: UTF-16 code units of the compact JS serialisation."""
    return utf16_len(js_stringify(value))


def js_template(value: Any, *, missing: bool = False) -> str:
    """How a value prints inside a JS template literal (``${value}``); ``missing`` means ``undefined``."""
    if missing:
        return "undefined"
    if value is None or isinstance(value, bool):
        return _LITERALS[value]
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return js_number_to_string(float(value)) if isinstance(value, float) else _json_number(value)
    if isinstance(value, list):
        return ",".join("" if v is None else js_template(v) for v in value)
    return "[object Object]"


# The compiled kernel when there is one: same contract, same answers (tests/test_kernels.py).
if kernels.compiled() is None:
    utf16_counts = utf16_counts_pure
else:
    from ctxtool._kernels import utf16_counts as utf16_counts
