"""LineFramer: where frames start and end, and how much it may hold."""

import pytest

from pynox.wire import EOF, NEED_DATA, Line, LineFramer, Oversized


def drain(framer: LineFramer) -> list:
    """Every frame available now, ending with the NEED_DATA or EOF that stopped it."""
    frames = []
    while True:
        frame = framer.next_frame()
        frames.append(frame)
        if frame is NEED_DATA or frame is EOF:
            return frames


def test_byte_at_a_time_yields_each_line_once_complete():
    framer = LineFramer(max_line=100)
    stream = b'{"a":1}\nhello\n\nlast'
    frames = []
    for byte in stream:
        framer.feed(bytes([byte]))
        frames.extend(f for f in drain(framer) if f is not NEED_DATA)
    assert frames == [Line(data=b'{"a":1}'), Line(data=b"hello"), Line(data=b"")]
    framer.feed(b"")
    assert drain(framer) == [Line(data=b"last"), EOF]


def test_line_split_across_feeds():
    framer = LineFramer(max_line=100)
    framer.feed(b"hel")
    assert framer.next_frame() is NEED_DATA
    assert framer.buffered == 3
    framer.feed(b"lo\nwor")
    assert drain(framer) == [Line(data=b"hello"), NEED_DATA]
    assert framer.buffered == 3
    framer.feed(b"ld\n")
    assert drain(framer) == [Line(data=b"world"), NEED_DATA]
    assert framer.buffered == 0


def test_several_lines_in_one_feed_come_out_in_order():
    framer = LineFramer(max_line=100)
    framer.feed(b"one\ntwo\nthree\nfour")
    assert drain(framer) == [Line(data=b"one"), Line(data=b"two"), Line(data=b"three"), NEED_DATA]
    assert framer.buffered == 4


def test_line_of_exactly_max_line_is_kept_and_one_more_byte_is_not():
    framer = LineFramer(max_line=5)
    framer.feed(b"12345\n123456\nok\n")
    assert drain(framer) == [Line(data=b"12345"), Oversized(length=6), Line(data=b"ok"), NEED_DATA]


def test_oversized_line_followed_by_normal_line_across_feeds():
    framer = LineFramer(max_line=8)
    framer.feed(b"x" * 9)
    # Reported as soon as the limit is passed, before the newline turns up.
    assert drain(framer) == [Oversized(length=9), NEED_DATA]
    assert framer.buffered == 0
    framer.feed(b"y" * 50)
    # The rest of the same line is dropped silently: one report per line.
    assert drain(framer) == [NEED_DATA]
    assert framer.buffered == 0
    framer.feed(b"zzz\nnormal\n")
    assert drain(framer) == [Line(data=b"normal"), NEED_DATA]


def test_oversized_length_counts_bytes_seen_when_reported():
    framer = LineFramer(max_line=8)
    framer.feed(b"abcde")
    framer.feed(b"fghijkl")
    assert drain(framer) == [Oversized(length=12), NEED_DATA]


def test_ten_megabyte_line_in_64k_chunks_never_buffers_more_than_max_line():
    max_line = 1 << 20
    framer = LineFramer(max_line=max_line)
    stream = b"x" * (10 * 1024 * 1024) + b'\n{"after":true}\n'
    chunk = 64 * 1024
    frames = []
    for start in range(0, len(stream), chunk):
        framer.feed(stream[start : start + chunk])
        assert framer.buffered <= max_line
        frames.extend(f for f in drain(framer) if f is not NEED_DATA)
    assert len(frames) == 2
    oversized, after = frames
    assert isinstance(oversized, Oversized)
    assert max_line < oversized.length <= max_line + chunk
    assert after == Line(data=b'{"after":true}')


def test_single_huge_feed_is_not_held():
    framer = LineFramer(max_line=10)
    framer.feed(b"q" * 1_000_000)
    assert framer.buffered == 0
    assert drain(framer) == [Oversized(length=1_000_000), NEED_DATA]


def test_trailing_partial_line_is_returned_at_eof():
    framer = LineFramer(max_line=100)
    framer.feed(b"first\nsecond")
    assert drain(framer) == [Line(data=b"first"), NEED_DATA]
    framer.feed(b"")
    assert drain(framer) == [Line(data=b"second"), EOF]
    # EOF is sticky.
    assert framer.next_frame() is EOF
    assert framer.next_frame() is EOF


def test_eof_after_newline_adds_no_empty_line():
    framer = LineFramer(max_line=100)
    framer.feed(b"only\n")
    framer.feed(b"")
    assert drain(framer) == [Line(data=b"only"), EOF]


def test_eof_on_empty_stream():
    framer = LineFramer(max_line=100)
    framer.feed(b"")
    assert drain(framer) == [EOF]


def test_oversized_partial_line_at_eof_is_not_returned_as_a_line():
    framer = LineFramer(max_line=4)
    framer.feed(b"ok\ntoolong")
    framer.feed(b"")
    assert drain(framer) == [Line(data=b"ok"), Oversized(length=7), EOF]


def test_frames_fed_before_eof_are_all_returned_before_eof():
    framer = LineFramer(max_line=100)
    framer.feed(b"a\nb\n")
    framer.feed(b"c")
    framer.feed(b"")
    assert drain(framer) == [Line(data=b"a"), Line(data=b"b"), Line(data=b"c"), EOF]


def test_feed_after_eof_is_a_bug():
    framer = LineFramer(max_line=100)
    framer.feed(b"")
    with pytest.raises(RuntimeError):
        framer.feed(b"more\n")
    with pytest.raises(RuntimeError):
        framer.feed(b"")


def test_max_line_must_be_positive():
    with pytest.raises(ValueError):
        LineFramer(max_line=0)
