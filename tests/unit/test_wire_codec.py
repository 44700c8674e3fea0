"""encode/decode: one object per line, and every way a line can be refused."""

import sys

import pytest

from pynox.wire import DecodeError, decode, encode


def reason_of(line: bytes, **kwargs) -> str:
    with pytest.raises(DecodeError) as caught:
        decode(line, **kwargs)
    return caught.value.reason


def test_encode_is_one_line_even_with_newlines_in_strings():
    obj = {"text": "a\nb\r\nc\u2028d\u2029e", "nested": {"k\n": ["\n"]}}
    line = encode(obj)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode(line) == obj


def test_encode_rejects_non_objects():
    with pytest.raises(TypeError):
        encode([1, 2])  # type: ignore[arg-type]


def test_decode_accepts_surrounding_whitespace_and_carriage_return():
    assert decode(b'  {"a": [1, 2.5, null, true]} \r') == {"a": [1, 2.5, None, True]}


@pytest.mark.parametrize(
    "line",
    [
        b'{"a": "\xff"}',
        b'{"a": "\xc3"}',  # truncated two-byte sequence
        b'{"a": "\xed\xa0\x80"}',  # UTF-8-encoded surrogate
        b'{"a": "\xc0\xaf"}',  # overlong encoding of "/"
    ],
)
def test_invalid_utf8(line):
    with pytest.raises(DecodeError) as caught:
        decode(line)
    assert caught.value.reason == "utf8"
    assert "UTF-8" in caught.value.message


@pytest.mark.parametrize("line", [b"", b"{", b'{"a":}', b'{"a":1,}', b"{'a':1}", b'{"a":1} {"b":2}', b"{} x"])
def test_invalid_json(line):
    with pytest.raises(DecodeError) as caught:
        decode(line)
    assert caught.value.reason == "json"
    assert "not valid JSON" in caught.value.message


def test_overlong_integer_literal_is_a_json_error_not_a_crash():
    assert reason_of(b'{"n": ' + b"9" * 10_000 + b"}") == "json"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_constants_are_rejected(literal):
    with pytest.raises(DecodeError) as caught:
        decode(f'{{"x": [1, {{"y": {literal}}}]}}'.encode())
    assert caught.value.reason == "constant"
    assert literal in caught.value.message


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "1.5e400"])
def test_float_overflow_to_infinity_is_rejected(literal):
    assert reason_of(f'{{"x": {literal}}}'.encode()) == "constant"


def test_large_but_finite_float_is_fine():
    assert decode(b'{"x": 1.7e308, "y": 5e-324}') == {"x": 1.7e308, "y": 5e-324}


@pytest.mark.parametrize(
    "line, key",
    [
        (b'{"a": 1, "a": 2}', "a"),
        (b'{"a": {"b": 1, "c": 2, "b": 1}}', "b"),
        (b'{"a": [0, {"z": [{"deep": 1, "deep": 1}]}]}', "deep"),
        (b'{"\\u0061": 1, "a": 2}', "a"),  # the same key spelt two ways
    ],
)
def test_duplicate_keys_at_any_depth(line, key):
    with pytest.raises(DecodeError) as caught:
        decode(line)
    assert caught.value.reason == "duplicate_key"
    assert repr(key) in caught.value.message


def test_same_key_in_sibling_objects_is_not_a_duplicate():
    assert decode(b'{"a": [{"k": 1}, {"k": 2}], "b": {"k": 3}}') == {"a": [{"k": 1}, {"k": 2}], "b": {"k": 3}}


def nested(depth: int) -> bytes:
    """An object whose brackets nest exactly ``depth`` levels."""
    return b'{"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def test_depth_limit_boundary():
    value, levels = decode(nested(64)), 0
    while value:
        levels += 1
        value = value["a"] if isinstance(value, dict) else value[0]
    assert levels == 63  # the innermost [] is the 64th level
    with pytest.raises(DecodeError) as caught:
        decode(nested(65))
    assert caught.value.reason == "depth"
    assert "65" in caught.value.message and "64" in caught.value.message
    assert reason_of(nested(3), max_depth=2) == "depth"
    assert decode(nested(3), max_depth=3) == {"a": [[]]}


def test_hundred_thousand_deep_nesting_is_refused_without_recursion():
    before = sys.getrecursionlimit()
    assert reason_of(b"[" * 100_000 + b"]" * 100_000) == "depth"
    assert reason_of(b'{"a":' * 100_000 + b"1" + b"}" * 100_000) == "depth"
    assert reason_of(b"[" * 100_000) == "depth"  # unterminated as well
    assert sys.getrecursionlimit() == before


def test_brackets_inside_strings_do_not_count_towards_depth():
    text = "[" * 500 + '\\"' + "{" * 500
    assert decode(('{"s": "' + text + '"}').encode()) == {"s": "[" * 500 + '"' + "{" * 500}


def test_many_shallow_brackets_are_not_deep():
    line = b'{"a": [' + b",".join([b"[]"] * 10_000) + b"]}"
    assert len(decode(line)["a"]) == 10_000


@pytest.mark.parametrize(
    "line, kind",
    [(b"[1, 2]", "array"), (b'"s"', "string"), (b"3", "number"), (b"1.5", "number"), (b"null", "null"), (b"true", "boolean")],
)
def test_top_level_must_be_an_object(line, kind):
    with pytest.raises(DecodeError) as caught:
        decode(line)
    assert caught.value.reason == "not_object"
    assert kind in caught.value.message


def test_decode_error_is_a_value_error_with_message():
    with pytest.raises(ValueError) as caught:
        decode(b"[]")
    assert isinstance(caught.value, DecodeError)
    assert str(caught.value) == caught.value.message
