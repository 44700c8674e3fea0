"""Network attacks, on loopback only: TCP, UDP, unix sockets (pathname and
abstract) and raw sockets.

Every listener runs in a thread of the test with a bounded accept timeout,
and the check is that it saw nothing at all.  The --allow-network positive
control shows that listeners of the same kind are reachable once the grant
is given, while unix sockets stay out of reach even then.

To stay fast, the attempts of one policy run as a batch in one confined
task; each attempt has a listener of its own and is its own test.
"""

import errno
import socket
import time
import uuid

import pytest


def _ipv6_loopback():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


HAVE_IPV6 = _ipv6_loopback()
NO_IPV6 = pytest.mark.skipif(not HAVE_IPV6, reason="no IPv6 loopback here")
PAYLOAD = b"exfiltrated"

# kind: (family, type, how the task reaches it)
CONNECT = ("s = socket.socket({family}, {type})\ns.settimeout(2)\ns.connect({address!r})\n"
           "s.sendall({payload!r})\ns.close()")
SENDTO = "s = socket.socket({family}, {type})\nfor _ in range(5):\n    s.sendto({payload!r}, {address!r})"
CREATE_CONNECTION = "socket.create_connection({address!r}, timeout=2).sendall({payload!r})"
KINDS = {
    "tcp-ipv4": (socket.AF_INET, socket.SOCK_STREAM, CONNECT),
    "tcp-ipv6": (socket.AF_INET6, socket.SOCK_STREAM, CONNECT),
    "tcp-create_connection": (socket.AF_INET, socket.SOCK_STREAM, CREATE_CONNECTION),
    "udp-ipv4": (socket.AF_INET, socket.SOCK_DGRAM, SENDTO),
    "udp-ipv6": (socket.AF_INET6, socket.SOCK_DGRAM, SENDTO),
    "udp-ipv4-connected": (socket.AF_INET, socket.SOCK_DGRAM,
                           "s = socket.socket({family}, {type})\ns.connect({address!r})\ns.send({payload!r})"),
    "unix-path-stream": (socket.AF_UNIX, socket.SOCK_STREAM, CONNECT),
    "unix-path-dgram": (socket.AF_UNIX, socket.SOCK_DGRAM, SENDTO),
    "unix-abstract-stream": (socket.AF_UNIX, socket.SOCK_STREAM, CONNECT),
    "unix-abstract-dgram": (socket.AF_UNIX, socket.SOCK_DGRAM, SENDTO),
}
UNIX_KINDS = [k for k in KINDS if k.startswith("unix")]
IP_KINDS = [k for k in KINDS if not k.startswith("unix")]


def _address(kind, family, short_dir, tag):
    if kind.startswith("unix-path"):
        return str(short_dir / f"{tag}-{kind}")
    if kind.startswith("unix-abstract"):
        return f"\0pynox-e2e-{uuid.uuid4().hex}"
    return ("127.0.0.1" if family == socket.AF_INET else "::1", 0)


def _run_attempts(pynox, listen, short_dir, fs, kinds, *, network, tag):
    listeners, probes = {}, {}
    for kind in kinds:
        family, type_, template = KINDS[kind]
        if family == socket.AF_INET6 and not HAVE_IPV6:
            continue
        listener = listen(family, type_, _address(kind, family, short_dir, tag))
        address = listener.sock.getsockname()
        if family == socket.AF_INET6:
            address = address[:2]
        if isinstance(address, bytes):  # abstract names come back as bytes
            address = address.decode()
        listeners[kind] = listener
        probes[kind] = template.format(family=int(family), type=int(type_), address=address, payload=PAYLOAD)
    extra = ["--allow-network"] if network else []
    # The pathname sockets are beneath a read grant: reading is not connecting.
    result, outcomes = pynox.batch(probes, prelude="import socket", ro=[fs.ro, short_dir], rw=[fs.rw], extra=extra)
    time.sleep(0.15)  # one grace period for every listener, then stop them all at once
    for listener in listeners.values():
        listener._stop.set()
    for listener in listeners.values():
        listener.stop(grace=0)
    return result, outcomes, listeners


@pytest.fixture(scope="module")
def denied(module_pynox, module_listen, short_dir, make_fs):
    """Every kind of attempt, without --allow-network."""
    return _run_attempts(module_pynox, module_listen, short_dir, make_fs("deny"), list(KINDS), network=False,
                         tag="d")


@pytest.fixture(scope="module")
def allowed(module_pynox, module_listen, short_dir, make_fs):
    """Every kind of attempt, with --allow-network."""
    return _run_attempts(module_pynox, module_listen, short_dir, make_fs("allow"), list(KINDS), network=True,
                         tag="a")


def _params(kinds):
    return [pytest.param(k, marks=NO_IPV6) if "ipv6" in k else k for k in kinds]


@pytest.mark.parametrize("kind", _params(KINDS))
def test_loopback_is_unreachable_without_network_grant(denied, kind):
    result, outcomes, listeners = denied
    assert kind in outcomes, f"attempt {kind} never reported: {result}"
    outcome = outcomes[kind]
    assert outcome["ok"] is False, f"{kind} succeeded without --allow-network: {outcome}"
    assert outcome["errno"] in (errno.EPERM, errno.EACCES), outcome
    listener = listeners[kind]
    assert not listener.saw_anything, f"{kind} listener saw {listener.connections or listener.datagrams}"


@pytest.mark.parametrize("kind", UNIX_KINDS)
def test_unix_sockets_stay_unreachable_with_network_grant(allowed, kind):
    result, outcomes, listeners = allowed
    assert kind in outcomes, f"attempt {kind} never reported: {result}"
    assert outcomes[kind]["ok"] is False, f"{kind} succeeded with --allow-network: {outcomes[kind]}"
    assert not listeners[kind].saw_anything, listeners[kind].connections or listeners[kind].datagrams


@pytest.mark.parametrize("kind", _params(IP_KINDS))
def test_allow_network_reaches_the_loopback_listener(allowed, kind):
    """The positive control: the same kinds of listener, reached once the grant is given."""
    result, outcomes, listeners = allowed
    assert outcomes.get(kind) == {"ok": True, "value": None}, f"{kind}: {outcomes.get(kind)}\n{result}"
    listener = listeners[kind]
    received = [data for _, data in listener.connections] + [data for _, data in listener.datagrams]
    assert received and all(data == PAYLOAD for data in received), received


def test_network_denial_hint_names_the_grant(pynox, fs, listen):
    listener = listen(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
    port = listener.sock.getsockname()[1]
    result = pynox.task(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'x')",
                        ro=[fs.ro])
    listener.stop()
    assert result["error"]["type"] == "PermissionError", result
    assert "--allow-network" in (result["error"]["hint"] or ""), result
    assert not listener.saw_anything


# --- sockets of the task's own -----------------------------------------------------------------

@pytest.fixture(scope="module")
def own_sockets(module_pynox, make_fs):
    d = make_fs("own")
    unix_path = d.rw / "mine.sock"
    assert len(str(unix_path)) < 100
    probes = {
        "tcp-listen-loopback": ("s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\ns.bind(('127.0.0.1', 0))\n"
                                "s.listen(1)\nvalue = s.getsockname()", []),
        "udp-bind-loopback": ("s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('127.0.0.1', 0))", []),
        "unix-listener-in-write-grant": (f"s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                                         f"s.bind({str(unix_path)!r})\ns.listen(1)", [unix_path]),
        "unix-abstract-listener": ("s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                                   f"s.bind('\\0pynox-e2e-{uuid.uuid4().hex}')\ns.listen(1)", []),
    }
    return module_pynox.group(probes, prelude="import socket", ro=[d.ro], rw=[d.rw])


@pytest.mark.parametrize("name", ["tcp-listen-loopback", "udp-bind-loopback", "unix-listener-in-write-grant",
                                  "unix-abstract-listener"])
def test_task_cannot_open_a_listener(own_sockets, name):
    own_sockets.assert_denied(name)


# --- raw sockets and other families ------------------------------------------------------------

RAW = {
    "socket-syscall-inet-stream": "libc.syscall(41, 2, 1, 0)",
    "socket-syscall-inet-raw-icmp": "libc.syscall(41, 2, 3, 1)",
    "socket-syscall-packet": "libc.syscall(41, 17, 3, 0x0300)",
    "socket-syscall-netlink-route": "libc.syscall(41, 16, 3, 0)",
    "socket-syscall-netlink-audit": "libc.syscall(41, 16, 3, 9)",
    "socket-syscall-netlink-uevent": "libc.syscall(41, 16, 2, 15)",
    "socket-syscall-vsock": "libc.syscall(41, 40, 1, 0)",
    "socket-syscall-bluetooth": "libc.syscall(41, 31, 3, 0)",
    "socket-syscall-alg": "libc.syscall(41, 38, 5, 0)",
    "socket-syscall-unix": "libc.syscall(41, 1, 1, 0)",
}
RAW_PRELUDE = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
               "def sc(fd):\n    return {'fd': fd, 'errno': ctypes.get_errno() if fd < 0 else 0}")
RAW_WITH_NETWORK = ["socket-syscall-inet-raw-icmp", "socket-syscall-packet", "socket-syscall-netlink-audit",
                    "socket-syscall-netlink-uevent", "socket-syscall-vsock", "socket-syscall-alg",
                    "socket-syscall-unix"]


@pytest.fixture(scope="module")
def raw_sockets(module_pynox):
    probes = {name: f"value = sc({call})" for name, call in RAW.items()}
    without = module_pynox.batch(probes, prelude=RAW_PRELUDE)
    with_network = module_pynox.batch({name: probes[name] for name in RAW_WITH_NETWORK}, prelude=RAW_PRELUDE,
                                      extra=["--allow-network"])
    return {"deny": without, "allow": with_network}


def _raw_outcome(raw_sockets, network, name):
    result, outcomes = raw_sockets[network]
    assert name in outcomes and outcomes[name]["ok"], f"probe {name} did not report: {result}"
    return outcomes[name]["value"]


@pytest.mark.parametrize("name", list(RAW))
def test_socket_syscall_without_network_grant_fails(raw_sockets, name):
    rep = _raw_outcome(raw_sockets, "deny", name)
    assert rep["fd"] == -1 and rep["errno"] == errno.EPERM, rep


@pytest.mark.parametrize("name", RAW_WITH_NETWORK)
def test_non_ip_and_raw_sockets_stay_denied_with_network_grant(raw_sockets, name):
    rep = _raw_outcome(raw_sockets, "allow", name)
    assert rep["fd"] == -1, f"{name} opened with --allow-network: {rep}"
    assert rep["errno"] in (errno.EPERM, errno.EACCES, errno.EAFNOSUPPORT), rep


def test_allow_network_is_reported_in_policy(raw_sockets):
    assert raw_sockets["allow"][0]["policy"]["network"] == "allow"
    assert raw_sockets["deny"][0]["policy"]["network"] == "deny"
