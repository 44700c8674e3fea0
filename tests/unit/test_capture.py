"""BoundedBuffer keeps the first ``limit`` bytes and marks the rest as truncated."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynox.capture import BoundedBuffer


def kept_bytes(buffer):
    return b"".join(buffer._chunks)


def test_under_the_limit_keeps_everything():
    buffer = BoundedBuffer(10)
    buffer.feed(b"hello")
    buffer.feed(b"")
    assert buffer.text() == "hello"
    assert buffer.truncated is False


def test_exactly_the_limit_is_not_truncated():
    buffer = BoundedBuffer(5)
    buffer.feed(b"abc")
    buffer.feed(b"de")
    assert buffer.text() == "abcde"
    assert buffer.truncated is False


def test_keeps_exactly_limit_bytes_and_sets_truncated():
    buffer = BoundedBuffer(5)
    buffer.feed(b"abc")
    buffer.feed(b"defgh")
    assert buffer.text() == "abcde"
    assert buffer.truncated is True
    buffer.feed(b"more")  # keeps draining without growing
    assert buffer.text() == "abcde"
    assert buffer.truncated is True


def test_empty_feed_after_full_does_not_truncate():
    buffer = BoundedBuffer(3)
    buffer.feed(b"abc")
    buffer.feed(b"")
    assert buffer.truncated is False


def test_zero_limit():
    buffer = BoundedBuffer(0)
    buffer.feed(b"x")
    assert buffer.text() == ""
    assert buffer.truncated is True
    assert buffer._chunks == []


def test_invalid_utf8_is_replaced():
    buffer = BoundedBuffer(100)
    buffer.feed(b"ok \xff\xfe end")
    assert buffer.text() == "ok \ufffd\ufffd end"


def test_multibyte_character_cut_at_limit():
    data = "aé€😀".encode()  # 1 + 2 + 3 + 4 bytes
    for limit in range(len(data) + 1):
        buffer = BoundedBuffer(limit)
        buffer.feed(data)
        text = buffer.text()
        assert buffer.truncated is (limit < len(data))
        assert kept_bytes(buffer) == data[:limit]
        assert text == data[:limit].decode("utf-8", "replace")
    buffer = BoundedBuffer(2)
    buffer.feed("é€".encode())
    assert buffer.text() == "é"
    buffer = BoundedBuffer(4)
    buffer.feed("é€".encode())  # c3 a9 | e2 82 (ac cut)
    assert buffer.text().startswith("é")
    assert buffer.text()[1:] and set(buffer.text()[1:]) == {"\ufffd"}


@given(chunks=st.lists(st.binary(max_size=50), max_size=20), limit=st.integers(0, 200))
def test_keeps_the_prefix_of_the_stream(chunks, limit):
    buffer = BoundedBuffer(limit)
    for chunk in chunks:
        buffer.feed(chunk)
    stream = b"".join(chunks)
    assert kept_bytes(buffer) == stream[:limit]
    assert buffer.truncated == (len(stream) > limit)
    assert buffer.text() == stream[:limit].decode("utf-8", "replace")


@given(text=st.text(max_size=40), limit=st.integers(0, 160), split=st.integers(0, 160))
def test_text_never_raises_on_cut_utf8(text, limit, split):
    data = text.encode()
    buffer = BoundedBuffer(limit)
    buffer.feed(data[:split])
    buffer.feed(data[split:])
    out = buffer.text()
    assert isinstance(out, str)
    if limit >= len(data):
        assert out == text
        assert not buffer.truncated


@pytest.mark.parametrize("size", [1, 4096, 65536])
def test_large_stream_bounded(size):
    buffer = BoundedBuffer(1000)
    for _ in range(100):
        buffer.feed(b"x" * size)
    assert len(kept_bytes(buffer)) == min(1000, 100 * size)
    assert buffer.truncated is (100 * size > 1000)
