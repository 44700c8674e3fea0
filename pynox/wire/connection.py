"""One end of a pynox conversation, with no I/O of its own.

Both ends may send requests, so each end numbers only its own requests and
remembers which are still awaiting a reply; that is enough to spot a reply
the peer invented.  Everything the peer gets wrong is reported as a
``ProtocolError`` event and the next line is read normally: the peer may be
untrusted code, and whether one bad line ends the session is the caller's
policy, not the codec's.
"""

from typing import Any, Literal

from .codec import DecodeError, decode, encode
from .framing import EOF, NEED_DATA, LineFramer, Oversized, Sentinel
from .messages import ProtocolError, Reply, Request, WireError, from_wire, to_wire

Event = Request | Reply | ProtocolError | Literal[Sentinel.NEED_DATA, Sentinel.EOF]


class Connection:
    """Feed it the peer's bytes, read events back; ask it for bytes to send."""

    def __init__(self, max_line: int = 1 << 20) -> None:
        self._framer = LineFramer(max_line)
        self._max_line = max_line
        self._last_id = 0
        self._outstanding: set[int] = set()
        self._peer_closed = False
        self._closed = False

    @property
    def outstanding(self) -> frozenset[int]:
        """Ids of requests this side sent that have not been answered yet."""
        return frozenset(self._outstanding)

    def receive_data(self, data: bytes) -> None:
        """Hand over bytes read from the peer; ``b""`` means the peer closed."""
        if self._peer_closed:
            raise WireError("receive_data() called after the peer's EOF")
        self._peer_closed = not data
        self._framer.feed(data)

    def next_event(self) -> Event:
        """Return the next event; ``NEED_DATA`` asks for more bytes."""
        frame = self._framer.next_frame()
        if frame is NEED_DATA or frame is EOF:
            return frame
        if isinstance(frame, Oversized):
            return ProtocolError(
                message=f"line exceeds the limit of {self._max_line} bytes "
                f"({frame.length} bytes seen before it was discarded)"
            )
        try:
            message = from_wire(decode(frame.data))
        except DecodeError as exc:
            return ProtocolError(message=exc.message)
        if isinstance(message, Reply):
            if message.id not in self._outstanding:
                return ProtocolError(message=f"reply to unknown request {message.id}")
            self._outstanding.remove(message.id)
        return message

    def send_request(self, op: str, /, **body: Any) -> tuple[int, bytes]:
        """Number a new request and return its id with the bytes to send."""
        request_id = self._last_id + 1
        data = self._serialise(Request(id=request_id, op=op, body=body))
        # Commit the id only once encoding succeeded, so a rejected body
        # leaves no phantom request waiting for a reply.
        self._last_id = request_id
        self._outstanding.add(request_id)
        return request_id, data

    def send_reply(self, request: Request | int, /, **body: Any) -> bytes:
        """Return the bytes answering ``request`` (the request or its id)."""
        request_id = request.id if isinstance(request, Request) else request
        return self._serialise(Reply(id=request_id, body=body))

    def close(self) -> None:
        """Stop sending; replies to requests already sent can still arrive."""
        self._closed = True

    def _serialise(self, message: Request | Reply) -> bytes:
        if self._closed:
            raise WireError("cannot send after close()")
        wire = to_wire(message)
        try:
            return encode(wire)
        except TypeError as exc:
            raise WireError(f"body is not JSON-serialisable: {exc}") from exc
