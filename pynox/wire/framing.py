"""Split a byte stream into newline-terminated frames without trusting the sender.

The peer on the other end of a pynox pipe may be hostile code, so the framer
must hold at most ``max_line`` bytes of an unfinished line however long the
peer makes it.  It is sans-IO: the caller moves the bytes, the framer only
decides where one frame ends and the next begins.
"""

import enum
from collections import deque
from dataclasses import dataclass
from typing import Literal


class Sentinel(enum.Enum):
    """Signals that are not frames; compare them with ``is``."""

    NEED_DATA = "NEED_DATA"
    EOF = "EOF"

    def __repr__(self) -> str:
        return self.name


NEED_DATA = Sentinel.NEED_DATA
EOF = Sentinel.EOF


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    """One complete line, without its terminating newline."""

    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Oversized:
    """A line exceeded ``max_line`` and was discarded.

    ``length`` is how many bytes of it had arrived when the limit was crossed,
    not its full length: the remainder is never looked at.
    """

    length: int


Frame = Line | Oversized | Literal[Sentinel.NEED_DATA, Sentinel.EOF]


class LineFramer:
    """Turn fed bytes into ``Line`` / ``Oversized`` frames, then ``EOF``.

    Frames are cut as soon as bytes arrive, so each byte is searched for a
    newline exactly once; feeding one byte at a time stays linear.
    """

    def __init__(self, max_line: int) -> None:
        if max_line < 1:
            raise ValueError(f"max_line must be at least 1, got {max_line}")
        self._max_line = max_line
        self._partial = bytearray()
        self._frames: deque[Line | Oversized] = deque()
        # True while skipping the tail of a line already reported as Oversized.
        self._discarding = False
        self._eof = False

    @property
    def buffered(self) -> int:
        """Bytes held of the unfinished line; never more than ``max_line``."""
        return len(self._partial)

    def feed(self, data: bytes) -> None:
        """Add bytes from the peer; ``b""`` means the peer closed the stream."""
        if self._eof:
            raise RuntimeError("feed() called after EOF was fed")
        if not data:
            self._eof = True
            # A last line without a newline is still a line: dropping it would
            # silently lose the peer's final message.
            if self._partial:
                self._frames.append(Line(data=bytes(self._partial)))
                self._partial.clear()
            return
        view = memoryview(data)
        start = 0
        while (newline := data.find(b"\n", start)) >= 0:
            self._absorb(view[start:newline], complete=True)
            start = newline + 1
        self._absorb(view[start:], complete=False)

    def next_frame(self) -> Frame:
        """Return the next frame, or ``NEED_DATA`` / ``EOF`` when there is none."""
        if self._frames:
            return self._frames.popleft()
        return EOF if self._eof else NEED_DATA

    def _absorb(self, piece: memoryview, *, complete: bool) -> None:
        """Take one run of bytes that contains no newline."""
        if self._discarding:
            self._discarding = not complete
            return
        seen = len(self._partial) + len(piece)
        if seen > self._max_line:
            self._frames.append(Oversized(length=seen))
            self._partial.clear()
            self._discarding = not complete
            return
        if not complete:
            self._partial += piece
        elif self._partial:
            self._partial += piece
            self._frames.append(Line(data=bytes(self._partial)))
            self._partial.clear()
        else:
            self._frames.append(Line(data=bytes(piece)))
