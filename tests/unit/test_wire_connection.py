"""Connection: numbering, reply matching, and surviving a misbehaving peer."""

import pytest

from pynox.wire import (
    EOF,
    NEED_DATA,
    Connection,
    ProtocolError,
    Reply,
    Request,
    WireError,
    encode,
    from_wire,
    to_wire,
)


def events(conn: Connection) -> list:
    """Every event available now, ending with the NEED_DATA or EOF that stopped it."""
    found = []
    while True:
        event = conn.next_event()
        found.append(event)
        if event is NEED_DATA or event is EOF:
            return found


def test_each_side_numbers_its_own_requests_from_one():
    a, b = Connection(), Connection()
    assert [a.send_request("ping")[0] for _ in range(3)] == [1, 2, 3]
    assert b.send_request("ping")[0] == 1
    assert a.send_request("ping")[0] == 4
    assert a.outstanding == frozenset({1, 2, 3, 4})
    assert b.outstanding == frozenset({1})


def test_two_connections_talk_with_colliding_ids():
    supervisor, child = Connection(), Connection()

    run_id, data = supervisor.send_request("run", code="print(1)", timeout=2.5)
    child.receive_data(data)
    [request, need] = events(child)
    assert request == Request(id=run_id, op="run", body={"code": "print(1)", "timeout": 2.5})
    assert need is NEED_DATA

    # The child asks something of its own before answering; its counter
    # starts at 1 as well, and that must not confuse either side.
    ask_id, ask = child.send_request("read", path="/data")
    assert ask_id == run_id == 1
    answer = child.send_reply(request, stdout="1\n", ok=True)
    supervisor.receive_data(ask + answer)
    assert events(supervisor) == [
        Request(id=1, op="read", body={"path": "/data"}),
        Reply(id=1, body={"stdout": "1\n", "ok": True}),
        NEED_DATA,
    ]
    assert supervisor.outstanding == frozenset()
    assert child.outstanding == frozenset({1})

    child.receive_data(supervisor.send_reply(1, contents=None))
    assert events(child) == [Reply(id=1, body={"contents": None}), NEED_DATA]
    assert child.outstanding == frozenset()


def test_reply_to_unknown_request_is_a_protocol_error():
    conn = Connection()
    conn.receive_data(b'{"id": 7, "ok": true}\n')
    assert events(conn) == [ProtocolError(message="reply to unknown request 7"), NEED_DATA]


def test_second_reply_to_the_same_request_is_a_protocol_error():
    conn = Connection()
    request_id, _ = conn.send_request("go")
    conn.receive_data(b'{"id": 1}\n{"id": 1}\n')
    assert events(conn) == [
        Reply(id=request_id, body={}),
        ProtocolError(message="reply to unknown request 1"),
        NEED_DATA,
    ]


def test_reply_clears_only_its_own_id():
    conn = Connection()
    for _ in range(3):
        conn.send_request("job")
    conn.receive_data(b'{"id": 2, "done": true}\n')
    assert events(conn) == [Reply(id=2, body={"done": True}), NEED_DATA]
    assert conn.outstanding == frozenset({1, 3})


def test_oversized_line_is_reported_and_next_line_still_works():
    conn = Connection(max_line=64)
    conn.receive_data(b'{"op": "x", "id": 1, "pad": "' + b"z" * 200 + b'"}\n')
    conn.receive_data(b'{"op": "y", "id": 2}\n')
    [error, request, need] = events(conn)
    assert isinstance(error, ProtocolError) and "64" in error.message
    assert request == Request(id=2, op="y", body={})
    assert need is NEED_DATA


@pytest.mark.parametrize(
    "line, fragment",
    [
        (b"\xff\xfe\n", "UTF-8"),
        (b"not json\n", "not valid JSON"),
        (b'{"op": "x", "id": 1, "v": NaN}\n', "NaN"),
        (b'{"op": "x", "id": 1, "op": "y"}\n', "duplicate key 'op'"),
        (b"[" * 1000 + b"]" * 1000 + b"\n", "nesting depth"),
        (b"[1]\n", "expected a JSON object"),
        (b'{"op": "x"}\n', "no 'id'"),
        (b'{"op": "x", "id": true}\n', "'id' must be an integer >= 1"),
        (b'{"op": "x", "id": 0}\n', "'id' must be an integer >= 1"),
        (b'{"op": "x", "id": 1.0}\n', "'id' must be an integer >= 1"),
        (b'{"op": "", "id": 1}\n', "'op' must be a non-empty string"),
        (b'{"op": null, "id": 1}\n', "'op' must be a non-empty string"),
        (b'{"id": "1"}\n', "'id' must be an integer >= 1"),
    ],
)
def test_bad_line_becomes_protocol_error_and_connection_keeps_going(line, fragment):
    conn = Connection()
    conn.receive_data(line + b'{"op": "next", "id": 5}\n')
    [error, request, need] = events(conn)
    assert isinstance(error, ProtocolError)
    assert fragment in error.message
    assert request == Request(id=5, op="next", body={})
    assert need is NEED_DATA


def test_peer_controlled_values_are_abbreviated_in_errors():
    conn = Connection()
    conn.receive_data(encode({"op": ["x"] * 10_000, "id": 1}))
    [error, _] = events(conn)
    assert isinstance(error, ProtocolError)
    assert len(error.message) < 200


def test_partial_line_needs_data_until_its_newline():
    conn = Connection()
    conn.receive_data(b'{"op": "a", ')
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b'"id": 3}\n')
    assert conn.next_event() == Request(id=3, op="a", body={})


def test_eof_is_sticky_and_delivers_trailing_line_first():
    conn = Connection()
    request_id, _ = conn.send_request("slow")
    conn.receive_data(b'{"op": "bye", "id": 9}')
    conn.receive_data(b"")
    assert events(conn) == [Request(id=9, op="bye", body={}), EOF]
    assert conn.next_event() is EOF
    # Unanswered requests stay visible so the caller can fail them.
    assert conn.outstanding == frozenset({request_id})
    with pytest.raises(WireError):
        conn.receive_data(b'{"id": 1}\n')


def test_close_stops_sending_but_not_receiving():
    conn = Connection()
    request_id, _ = conn.send_request("work")
    conn.close()
    with pytest.raises(WireError):
        conn.send_request("more")
    with pytest.raises(WireError):
        conn.send_reply(1, ok=True)
    conn.receive_data(b'{"id": 1, "result": 42}\n')
    assert conn.next_event() == Reply(id=request_id, body={"result": 42})


@pytest.mark.parametrize("body", [{"id": 3}, {"op": "other"}])
def test_reserved_keys_in_a_body_are_refused_and_consume_no_id(body):
    conn = Connection()
    with pytest.raises(WireError, match="reserved"):
        conn.send_request("x", **body)
    with pytest.raises(WireError, match="reserved"):
        conn.send_reply(1, **body)
    assert conn.outstanding == frozenset()
    assert conn.send_request("x")[0] == 1


def test_unserialisable_body_is_a_wire_error_and_consumes_no_id():
    conn = Connection()
    with pytest.raises(WireError, match="JSON"):
        conn.send_request("x", value=object())
    assert conn.outstanding == frozenset()
    assert conn.send_request("x")[0] == 1


@pytest.mark.parametrize("op", ["", 5, None])
def test_invalid_op_is_refused_when_sending(op):
    conn = Connection()
    with pytest.raises(WireError, match="op"):
        conn.send_request(op)
    assert conn.outstanding == frozenset()


@pytest.mark.parametrize("bad_id", [0, -1, True, "1"])
def test_reply_to_invalid_id_is_refused(bad_id):
    with pytest.raises(WireError, match="id"):
        Connection().send_reply(bad_id)


def test_sent_bytes_are_one_flat_line():
    conn = Connection()
    _, data = conn.send_request("exec", code="a\nb")
    assert data.count(b"\n") == 1 and data.endswith(b"\n")
    assert data == b'{"op":"exec","id":1,"code":"a\\nb"}\n'
    assert conn.send_reply(Request(id=4, op="exec", body={}), ok=False) == b'{"id":4,"ok":false}\n'


def test_to_wire_and_from_wire_are_inverse():
    request = Request(id=2, op="stat", body={"path": "/", "deep": [1, {"op": "inner"}]})
    reply = Reply(id=2, body={"size": 0})
    assert to_wire(request) == {"op": "stat", "id": 2, "path": "/", "deep": [1, {"op": "inner"}]}
    assert from_wire(to_wire(request)) == request
    assert from_wire(to_wire(reply)) == reply
