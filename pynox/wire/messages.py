"""The two message shapes of the protocol and the rule that tells them apart.

On the wire a message is one flat JSON object: ``op`` and ``id`` are lifted
out and every other key is the body.  A peer's malformed message becomes a
``ProtocolError`` value rather than an exception, so one bad line from
untrusted code cannot unwind the caller's event loop; ``WireError`` is kept
for mistakes made by the local program, which are bugs worth raising.
"""

from dataclasses import dataclass
from typing import Any

RESERVED_KEYS = frozenset({"op", "id"})

# Peer-controlled values are quoted in error messages; cap them so a hostile
# peer cannot make an error message as large as the line that caused it.
_SHOWN_CHARS = 60


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """Ask the peer to perform ``op``; the peer answers with a ``Reply`` of the same ``id``."""

    id: int
    op: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """The answer to the peer's ``Request`` numbered ``id``."""

    id: int
    body: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolError:
    """The peer sent something that is not a valid message."""

    message: str


class WireError(Exception):
    """The local program misused the protocol."""


def to_wire(msg: Request | Reply) -> dict[str, Any]:
    """Flatten ``msg`` into the object that goes on the wire."""
    clash = RESERVED_KEYS & msg.body.keys()
    if clash:
        raise WireError(f"body may not contain the reserved key(s) {sorted(clash)}")
    if not _is_valid_id(msg.id):
        raise WireError(f"id must be an integer >= 1, got {_show(msg.id)}")
    if isinstance(msg, Reply):
        return {"id": msg.id, **msg.body}
    if not _is_valid_op(msg.op):
        raise WireError(f"op must be a non-empty string, got {_show(msg.op)}")
    return {"op": msg.op, "id": msg.id, **msg.body}


def from_wire(obj: dict[str, Any]) -> Request | Reply | ProtocolError:
    """Classify a decoded object: with ``op`` it is a request, without it a reply."""
    if "id" not in obj:
        return ProtocolError(message="message has no 'id'")
    if not _is_valid_id(obj["id"]):
        return ProtocolError(message=f"'id' must be an integer >= 1, got {_show(obj['id'])}")
    body = {key: value for key, value in obj.items() if key not in RESERVED_KEYS}
    if "op" not in obj:
        return Reply(id=obj["id"], body=body)
    if not _is_valid_op(obj["op"]):
        return ProtocolError(message=f"'op' must be a non-empty string, got {_show(obj['op'])}")
    return Request(id=obj["id"], op=obj["op"], body=body)


def _is_valid_id(value: object) -> bool:
    # bool is a subclass of int, but ``true`` is not a request number.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_valid_op(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
