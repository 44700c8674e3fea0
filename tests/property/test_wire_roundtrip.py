"""Properties of pynox.wire that must hold for any data and any chunking."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pynox.wire import EOF, NEED_DATA, Connection, Line, LineFramer, Oversized, ProtocolError, Reply, Request, decode, encode

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text()


def json_values(depth: int) -> st.SearchStrategy:
    """JSON values nested at most ``depth`` containers deep."""
    if depth == 0:
        return json_scalars
    children = json_values(depth - 1)
    return json_scalars | st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)


# Five levels of values inside the top-level object stays well under decode's
# default limit of 64, so every generated object must come back.
json_objects = st.dictionaries(st.text(), json_values(5), max_size=6)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """Cut ``data`` at the given offsets (taken modulo its length)."""
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def same(a, b) -> bool:
    """Equality that also tells 1, 1.0 and True apart, at any depth."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@settings(max_examples=300)
@given(objects=st.lists(json_objects, max_size=6), cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_objects_survive_encode_frame_decode(objects, cuts):
    stream = b"".join(encode(obj) for obj in objects)
    framer = LineFramer(max_line=1 << 20)
    decoded = []
    for chunk in split(stream, cuts):
        framer.feed(chunk)
        while isinstance(frame := framer.next_frame(), Line):
            decoded.append(decode(frame.data))
        assert frame is NEED_DATA
    framer.feed(b"")
    assert framer.next_frame() is EOF
    assert len(decoded) == len(objects)
    assert all(same(got, want) for got, want in zip(decoded, objects))


def reference_frames(stream: bytes, max_line: int) -> list:
    """What a framer with unlimited memory would report, ignoring Oversized lengths."""
    *complete, tail = stream.split(b"\n")
    lines = complete + ([tail] if tail else [])
    return [Line(data=line) if len(line) <= max_line else Oversized for line in lines]


@settings(max_examples=300)
@given(
    stream=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"xyzxyzxyz"]), max_size=60).map(b"".join),
    cuts=st.lists(st.integers(min_value=0), max_size=30),
    max_line=st.integers(min_value=1, max_value=12),
)
def test_framing_ignores_chunking_and_stays_bounded(stream, cuts, max_line):
    framer = LineFramer(max_line=max_line)
    frames = []
    for chunk in split(stream, cuts):
        framer.feed(chunk)
        assert framer.buffered <= max_line
        while (frame := framer.next_frame()) is not NEED_DATA:
            frames.append(frame)
    framer.feed(b"")
    while (frame := framer.next_frame()) is not EOF:
        frames.append(frame)
    assert [Oversized if isinstance(f, Oversized) else f for f in frames] == reference_frames(stream, max_line)
    assert all(f.length > max_line for f in frames if isinstance(f, Oversized))


message_lines = st.one_of(
    st.binary(max_size=80),
    st.builds(lambda ident, body: encode({"id": ident, **body}), st.integers(-2, 6), json_objects),
    st.builds(
        lambda op, ident, body: encode({**body, "op": op, "id": ident}),
        st.text(max_size=4),
        st.integers(-2, 6) | st.booleans(),
        json_objects,
    ),
)


@settings(max_examples=300)
@given(
    pieces=st.lists(message_lines, max_size=12),
    own_requests=st.integers(min_value=0, max_value=4),
    cuts=st.lists(st.integers(min_value=0), max_size=20),
    max_line=st.integers(min_value=1, max_value=200),
)
def test_arbitrary_bytes_only_ever_produce_events(pieces, own_requests, cuts, max_line):
    conn = Connection(max_line=max_line)
    for _ in range(own_requests):
        conn.send_request("probe")
    stream = b"\n".join(pieces)
    replied: list[int] = []
    for chunk in split(stream, cuts) + [b""]:
        conn.receive_data(chunk)
        while (event := conn.next_event()) is not NEED_DATA and event is not EOF:
            assert isinstance(event, (Request, Reply, ProtocolError))
            if isinstance(event, Reply):
                replied.append(event.id)
    assert conn.next_event() is EOF
    # Each own request is answered at most once; nothing else is accepted.
    assert len(replied) == len(set(replied))
    assert set(replied) | conn.outstanding == set(range(1, own_requests + 1))
    assert not set(replied) & conn.outstanding
