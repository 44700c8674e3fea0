"""pynox.wire: the JSON-Lines protocol spoken between supervisor and sandbox.

Theory of operation:

* Every message is one JSON object on one line.  The encoder escapes
  newlines inside strings, so a line break always ends a message.
* A message carrying ``"op"`` is a request; one without ``"op"`` is the
  reply to the request with the same ``"id"``.  All other keys form the body.
* Both sides may send requests, and each numbers its own from 1 upwards.
  A reply's id refers to a request of the side receiving it, so the two
  counters never collide and need no coordination.
* Frames are bounded: a line longer than ``max_line`` is reported and
  skipped without ever being held in memory, so a hostile peer cannot
  exhaust memory with one endless line.
* The codec never touches a socket.  Callers move bytes in with
  ``receive_data`` and out with the bytes ``send_*`` return, which makes the
  protocol testable without I/O and usable over pipes, sockets or asyncio.
"""

from .codec import DecodeError, decode, encode
from .connection import Connection, Event
from .framing import EOF, NEED_DATA, Frame, Line, LineFramer, Oversized, Sentinel
from .messages import RESERVED_KEYS, ProtocolError, Reply, Request, WireError, from_wire, to_wire

__all__ = [
    "EOF",
    "NEED_DATA",
    "RESERVED_KEYS",
    "Connection",
    "DecodeError",
    "Event",
    "Frame",
    "Line",
    "LineFramer",
    "Oversized",
    "ProtocolError",
    "Reply",
    "Request",
    "Sentinel",
    "WireError",
    "decode",
    "encode",
    "from_wire",
    "to_wire",
]
