"""Durations and sizes as people write them."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynox.units import MAX_DURATION_MS, MAX_SIZE, format_size, parse_duration_ms, parse_size

# parse_duration_ms --------------------------------------------------------------


@pytest.mark.parametrize(
    "value, ms",
    [
        ("300ms", 300),
        ("5s", 5000),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("1.5s", 1500),
        ("0.5m", 30_000),
        ("1.0005s", 1000),  # 1000.5 rounds half to even
        ("5", 5000),  # a bare number is seconds
        (" 5s ", 5000),
        (2, 2000),
        (0.25, 250),
        (1.5, 1500),
        ("0.001s", 1),
    ],
)
def test_parse_duration_ms_accepts(value, ms):
    result = parse_duration_ms(value)
    assert result == ms
    assert type(result) is int


@pytest.mark.parametrize(
    "value",
    ["", "   ", "5x", "-1s", "0s", "0", "0ms", "0.0001s", "s", "5 s", "5S", "1e3", ".5s", "5.s", "5s5",
     True, False, None, [], {}, 0, -1, -0.5, float("nan"), float("inf"), b"5s"],
)
def test_parse_duration_ms_rejects(value):
    with pytest.raises(ValueError):
        parse_duration_ms(value)


@given(n=st.integers(1, 10**6), unit=st.sampled_from(["ms", "s", "m", "h", ""]))
def test_parse_duration_ms_integer_units(n, unit):
    factor = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "": 1000}[unit]
    if n * factor > MAX_DURATION_MS:
        with pytest.raises(ValueError, match="too long"):
            parse_duration_ms(f"{n}{unit}")
    else:
        assert parse_duration_ms(f"{n}{unit}") == n * factor


@given(n=st.integers(0, 10**400), fraction=st.sampled_from(["", ".0", ".5", ".0001"]),
       unit=st.sampled_from(["ms", "s", "m", "h", ""]), as_string=st.booleans())
def test_parse_duration_ms_is_positive_int_or_value_error(n, fraction, unit, as_string):
    # A request or config file may carry any digit string: the parser must
    # answer with a duration or a ValueError (what every caller catches),
    # never another exception.
    value = f"{n}{fraction}{unit}" if as_string else n
    try:
        ms = parse_duration_ms(value)
    except ValueError:
        return
    assert isinstance(ms, int) and ms > 0


@pytest.mark.parametrize("value", ["9" * 400 + "s", "1" + "0" * 400, 10**400], ids=["400-nines-s", "1e400-str", "1e400-int"])
def test_parse_duration_ms_huge_values_raise_value_error(value):
    with pytest.raises(ValueError):
        parse_duration_ms(value)


# parse_size -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, size",
    [
        ("512m", 512 << 20),
        ("1g", 1 << 30),
        ("64k", 64 << 10),
        ("2t", 2 << 40),
        ("65536", 65536),
        ("1K", 1024),
        ("1G", 1 << 30),
        ("1KiB", 1024),
        ("1kib", 1024),
        ("1kb", 1024),  # binary even when written kB
        ("1MB", 1 << 20),
        ("3GiB", 3 << 30),
        ("10b", 10),
        ("10B", 10),
        (" 64k ", 64 << 10),
        (65536, 65536),
        (1, 1),
    ],
)
def test_parse_size_accepts(value, size):
    assert parse_size(value) == size


@pytest.mark.parametrize(
    "value",
    ["0", "0k", "-5", "1.5g", "", " ", "k", "1x", "1kk", "1 k", "1gi", "1kibb", "0x10", "1e3",
     True, False, None, 1.5, 1024.0, 0, -5, [], b"1k"],
)
def test_parse_size_rejects(value):
    with pytest.raises(ValueError):
        parse_size(value)


@given(n=st.integers(1, 10**9), unit=st.sampled_from(["", "k", "m", "g", "t"]),
       suffix=st.sampled_from(["", "b", "ib", "B", "iB"]), upper=st.booleans())
def test_parse_size_units_are_binary(n, unit, suffix, upper):
    if suffix in ("ib", "iB") and not unit:
        suffix = "b"  # "1ib" is an oddity, not a unit anyone writes
    text = f"{n}{unit.upper() if upper else unit}{suffix}"
    size = n << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[unit]
    if size > MAX_SIZE:
        with pytest.raises(ValueError, match="too large"):
            parse_size(text)
    else:
        assert parse_size(text) == size


@given(n=st.integers(1, MAX_SIZE))
def test_parse_size_int_is_identity(n):
    assert parse_size(n) == n
    assert parse_size(str(n)) == n


@given(n=st.integers(MAX_SIZE + 1, 2**70))
def test_parse_size_beyond_the_bound_is_refused(n):
    with pytest.raises(ValueError, match="too large"):
        parse_size(n)


# format_size ------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, text",
    [
        (1 << 30, "1 GiB"),
        (3 << 30, "3 GiB"),
        (512 << 20, "512 MiB"),
        ((1 << 30) + (1 << 20), "1025 MiB"),
        (64 << 10, "64 KiB"),
        (1024, "1 KiB"),
        (1536, "1536 bytes"),
        (1023, "1023 bytes"),
        (1, "1 bytes"),
        (0, "0 bytes"),
        (256 << 20, "256 MiB"),
    ],
)
def test_format_size(size, text):
    assert format_size(size) == text


@given(n=st.integers(1, 2**50))
def test_format_size_round_trips_through_parse_size(n):
    number, unit = format_size(n).split(" ")
    shift = {"GiB": 30, "MiB": 20, "KiB": 10, "bytes": 0}[unit]
    assert int(number) << shift == n
    if unit != "bytes":
        assert parse_size(number + unit) == n
    # Largest exact unit: the next one up would not be exact.
    if shift < 30:
        assert n % (1 << (shift + 10)) != 0 or n < (1 << (shift + 10))
