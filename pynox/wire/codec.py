"""Turn one JSON object into one line and back, refusing anything ambiguous.

orjson writes lines fast and escapes newlines inside strings, so an encoded
object can never span two frames.  Decoding uses the stdlib parser instead,
because orjson quietly keeps the last of two duplicate keys and a hostile
peer could use that to make two readers disagree about one message.
"""

import json
import math
import re
from itertools import accumulate
from typing import Any, Literal, NoReturn

import orjson

Reason = Literal["utf8", "json", "constant", "number", "duplicate_key", "depth", "not_object"]

# Integers every peer can hold: JSON itself has no bound, orjson and the
# clients in other languages do (signed or unsigned 64-bit).
INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class DecodeError(ValueError):
    """A line is not one acceptable JSON object.

    ``reason`` is a stable token for programs; ``message`` is for people.
    """

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message


def encode(obj: dict[str, Any]) -> bytes:
    """Serialise ``obj`` as a single line ending in ``b"\\n"``."""
    if not isinstance(obj, dict):
        raise TypeError(f"only a dict can be encoded, got {type(obj).__name__}")
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def decode(line: bytes, *, max_depth: int = 64) -> dict[str, Any]:
    """Parse one line into a dict, or raise ``DecodeError`` saying why not."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("utf8", f"line is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    # Counting openers, even inside strings, bounds the depth from above at
    # C speed, so typical shallow messages skip the full scan.
    if text.count("[") + text.count("{") > max_depth:
        depth = _nesting_depth(text)
        if depth > max_depth:
            raise DecodeError("depth", f"nesting depth {depth} exceeds the limit of {max_depth}")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except json.JSONDecodeError as exc:
        raise DecodeError("json", f"line is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise DecodeError("not_object", f"expected a JSON object, got {_json_kind(value)}")
    if _SURROGATE_ESCAPE.search(text):
        # A lone surrogate escape parses but is not Unicode: no reply quoting
        # it could be encoded, so it is refused here, where the line is.
        try:
            orjson.dumps(value)
        except orjson.JSONEncodeError:
            raise DecodeError("utf8", "line has a string with a lone surrogate escape") from None
    return value


# A string runs to its closing quote, or to the end of the text if the quote
# is missing; the unrolled form cannot backtrack, so matching stays linear.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _nesting_depth(text: str) -> int:
    """Deepest bracket nesting outside strings, measured before parsing.

    The stdlib parser recurses once per level, so depth has to be known
    before it runs rather than discovered through a RecursionError.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DecodeError("duplicate_key", f"object has duplicate key {key!r}")
        obj[key] = value
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise DecodeError("constant", f"{name} is not allowed: JSON has no non-finite numbers")


def _finite_float(literal: str) -> float:
    # A literal such as 1e999 overflows to inf, smuggling in the value that
    # the Infinity check exists to keep out.
    value = float(literal)
    if not math.isfinite(value):
        raise DecodeError("constant", f"number {literal} is out of range for a float")
    return value


def _bounded_int(literal: str) -> int:
    # int() refuses very long digit strings with a plain ValueError, which
    # would otherwise escape decode() as an undocumented error.
    try:
        value = int(literal)
    except ValueError:
        raise DecodeError("json", f"integer literal of {len(literal)} characters is too long") from None
    if not INT_MIN <= value <= INT_MAX:
        raise DecodeError("number", f"integer {literal[:30]} is outside the 64-bit range")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"
