"""Parse the human units pynox accepts for durations and sizes.

Requests, configuration files and the command line all write ``"5s"`` or
``"512m"``; one parser keeps their meaning identical everywhere.
"""

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}
_SIZE = re.compile(r"(\d+)([kmgt]?)(i?b)?", re.IGNORECASE)
_SIZE_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}
# Limits travel as JSON integers and rlimits; beyond these they mean nothing.
MAX_DURATION_MS = 7 * 24 * 3_600_000
MAX_SIZE = 1 << 62


def parse_duration_ms(value) -> int:
    """``"300ms"``, ``"5s"``, ``"2m"``, ``"1h"`` or a number of seconds, to milliseconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(f"not a duration: {value!r}")
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"not a duration: {value!r} (use e.g. 300ms, 5s, 2m)")
    ms = float(match.group(1)) * _DURATION_MS[match.group(2)]
    if not ms < MAX_DURATION_MS + 1:
        raise ValueError(f"duration too long: {value!r} (at most 7 days)")
    ms = round(ms)
    if ms <= 0:
        raise ValueError(f"duration must be positive: {value!r}")
    return ms


def parse_size(value) -> int:
    """``"512m"``, ``"1g"``, ``"64k"`` or a plain number of bytes, to bytes."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value.strip())
        if not match:
            raise ValueError(f"not a size: {value!r} (use e.g. 65536, 512m, 1g)")
        size = int(match.group(1)) << _SIZE_SHIFT[match.group(2).lower()]
    else:
        raise ValueError(f"not a size: {value!r}")
    if size <= 0:
        raise ValueError(f"size must be positive: {value!r}")
    if size > MAX_SIZE:
        raise ValueError(f"size too large: {value!r} (at most 4 EiB)")
    return size


def format_size(size: int) -> str:
    """Bytes as the largest exact binary unit, for hints a person reads."""
    for suffix, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {suffix}"
    return f"{size} bytes"
