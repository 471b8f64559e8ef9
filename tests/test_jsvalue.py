"""JavaScript-exact JSON, numbers, UTF-16 and truthiness (spec gemini-cli-compression.md section 16)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.common.jsvalue import (
    js_key_order,
    js_number_to_string,
    js_slice,
    js_stringify,
    js_template,
    js_trim,
    js_truthy,
    json_length,
    utf16_len,
    utf16_units,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "1"),  # a session's 1.0 parses to the JS number 1
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (0.1, "0.1"),
        (123.456, "123.456"),
        (-2.5, "-2.5"),
        (-0.0, "0"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (123456789012345680000.0, "123456789012345680000"),
        (1.2345e21, "1.2345e+21"),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
    ],
)
def test_number_to_string(value: float, expected: str) -> None:
    assert js_number_to_string(value) == expected


def test_stringify_numbers_the_js_way() -> None:
    assert js_stringify({"a": 1.0, "b": 1e21, "c": 2.50}) == '{"a":1,"b":1e+21,"c":2.5}'
    assert js_stringify([float("nan"), float("inf"), -0.0]) == "[null,null,0]"
    # Integers beyond 2**53 were rounded to a double by JSON.parse.
    assert js_stringify(2**53 + 1) == "9007199254740992"
    assert js_stringify(10**22) == "1e+22"
    assert js_stringify([True, False, None]) == "[true,false,null]"


def test_stringify_compact_and_indented() -> None:
    value = {"role": "user", "parts": [{"text": 'a"b\\c\n\t\x01'}], "e": {}, "l": []}
    assert js_stringify(value) == (
        '{"role":"user","parts":[{"text":"a\\"b\\\\c\\n\\t\\u0001"}],"e":{},"l":[]}'
    )
    assert js_stringify({"error": "boom", "n": [1, {"k": None}]}, indent=2) == (
        '{\n  "error": "boom",\n  "n": [\n    1,\n    {\n      "k": null\n    }\n  ]\n}'
    )
    assert js_stringify(None, indent=2) == "null"
    assert js_stringify({}, indent=2) == "{}"


def test_integer_like_keys_come_first() -> None:
    assert js_key_order({"b": 1, "2": 2, "1": 3, "01": 4}) == ["1", "2", "b", "01"]
    assert js_stringify({"b": 1, "10": 2, "9": 3}) == '{"9":3,"10":2,"b":1}'


def test_lone_surrogates_are_escaped_and_pairs_are_not() -> None:
    assert js_stringify("\ud800x") == '"\\ud800x"'
    assert json_length("\ud800") == 8  # quotes + 6-unit escape
    assert js_stringify("😀") == '"😀"'
    # A pair Python holds as two code points is still a pair to JS.
    assert js_stringify("\ud83d" + "\ude00") == '"😀"'
    assert js_stringify("\ude00\ud83d") == '"\\ude00\\ud83d"'


def test_utf16_lengths() -> None:
    assert utf16_len("abc") == 3
    assert utf16_len("中文") == 2
    assert utf16_len("😀") == 2
    assert utf16_len("a😀中") == 4
    assert utf16_units("a😀") == [0x61, 0xD83D, 0xDE00]
    assert json_length({"text": "中文😀"}) == len('{"text":""}') + 4


def test_slice_is_by_code_units() -> None:
    assert js_slice("abcdef", -0) == "abcdef"  # slice(-0) is the whole string
    assert js_slice("abcdef", 1, 3) == "bc"
    assert js_slice("abcdef", -2) == "ef"
    assert js_slice("abcdef", 0, -2) == "abcd"
    assert js_slice("abc", 5) == ""
    assert js_slice("abc", -10) == "abc"
    assert js_slice("😀😀", 1) == "\ude00😀"  # splits a surrogate pair, as JS does
    assert utf16_len(js_slice("😀😀", 0, 3)) == 3


def test_trim_uses_the_js_whitespace_set() -> None:
    assert js_trim("\ufeff a \u3000\u2028") == "a"
    # Python's strip() would remove U+001C and U+0085; String.prototype.trim does not.
    assert js_trim("\x1ca\x85") == "\x1ca\x85"
    assert "\x1ca\x85".strip() == "a"


def test_truthiness() -> None:
    assert js_truthy({})
    assert js_truthy([])
    assert js_truthy("0")
    assert js_truthy(-1)
    assert js_truthy(True)
    for falsy in (None, False, 0, 0.0, "", float("nan")):
        assert not js_truthy(falsy)


def test_template_literal_rendering() -> None:
    assert js_template(None) == "null"
    assert js_template("x", missing=True) == "undefined"
    assert js_template(1.0) == "1"
    assert js_template(True) == "true"
    assert js_template({"a": 1}) == "[object Object]"


json_scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


def _no_surrogates_or_index_keys(v: object) -> bool:
    if isinstance(v, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in v)
    if isinstance(v, list):
        return all(_no_surrogates_or_index_keys(x) for x in v)
    if isinstance(v, dict):
        return all(
            _no_surrogates_or_index_keys(k) and not k.isdigit() and _no_surrogates_or_index_keys(x)
            for k, x in v.items()
        )
    return True


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_stringify_agrees_with_json_dumps_where_python_is_already_js(value: object) -> None:
    if not _no_surrogates_or_index_keys(value):
        return
    assert js_stringify(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert js_stringify(value, indent=2) == json.dumps(value, indent=2, ensure_ascii=False)
    assert json.loads(js_stringify(value)) == value


@settings(max_examples=150, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_number_to_string_round_trips(x: float) -> None:
    s = js_number_to_string(x)
    assert float(s) == x or (x == 0 and s == "0")
    assert "e+0" not in s
    assert "e-0" not in s
    assert not s.endswith(".0")
    if x == math.floor(x) and abs(x) < 1e21:
        assert "e" not in s
        assert "." not in s
