"""Network attacks, on loopback only: TCP, UDP, unix sockets (pathname and
abstract) and raw sockets.  Each listener runs in a thread of the test with a
bounded accept timeout, and the check is that it saw nothing at all; the
--allow-network positive control shows the same listener is reachable when
the grant is given.
"""

import errno
import json
import socket
import textwrap
import uuid

import pytest

PRELUDE = textwrap.dedent("""\
    import ctypes, errno, json, os, socket
    def attempt(fn):
        try:
            fn()
            print(json.dumps({"ok": True}))
        except OSError as e:
            print(json.dumps({"ok": False, "errno": e.errno}))
    """)


def probe(pynox, fs, body, *, network=False, ro=()):
    extra = ["--allow-network"] if network else []
    result = pynox.task(PRELUDE + textwrap.dedent(body), ro=[fs.ro, *ro], rw=[fs.rw], extra=extra)
    assert result["exit"] == 0, result
    return result, json.loads(result["stdout"].splitlines()[-1])


def _ipv6_loopback():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


FAMILIES = [pytest.param(socket.AF_INET, "127.0.0.1", id="ipv4"),
            pytest.param(socket.AF_INET6, "::1", id="ipv6",
                         marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here"))]


# --- TCP and UDP without the grant -------------------------------------------------------------

@pytest.mark.parametrize("family, host", FAMILIES)
def test_tcp_connect_to_loopback_is_denied(pynox, fs, listen, family, host):
    listener = listen(family, socket.SOCK_STREAM, (host, 0))
    port = listener.sock.getsockname()[1]
    result, rep = probe(pynox, fs, f"""\
        def go():
            s = socket.socket({int(family)}, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect(({host!r}, {port}))
            s.sendall(b"exfiltrated")
        attempt(go)
        """)
    listener.stop()
    assert rep["ok"] is False, rep
    assert not listener.saw_anything, listener.connections


def test_tcp_via_create_connection_is_denied_with_a_hint(pynox, fs, listen):
    listener = listen(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
    port = listener.sock.getsockname()[1]
    result = pynox.task(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'x')",
                        ro=[fs.ro])
    listener.stop()
    assert result["error"]["type"] == "PermissionError", result
    assert "--allow-network" in (result["error"]["hint"] or ""), result
    assert not listener.saw_anything


@pytest.mark.parametrize("family, host", FAMILIES)
def test_udp_sendto_loopback_is_denied(pynox, fs, listen, family, host):
    listener = listen(family, socket.SOCK_DGRAM, (host, 0))
    port = listener.sock.getsockname()[1]
    result, rep = probe(pynox, fs, f"""\
        def go():
            s = socket.socket({int(family)}, socket.SOCK_DGRAM)
            for _ in range(5):
                s.sendto(b"exfiltrated", ({host!r}, {port}))
        attempt(go)
        """)
    listener.stop()
    assert rep["ok"] is False, rep
    assert not listener.datagrams, listener.datagrams


def test_tcp_listen_on_loopback_is_denied(pynox, fs):
    result, rep = probe(pynox, fs, """\
        def go():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            print(json.dumps({"port": s.getsockname()[1]}))
        attempt(go)
        """)
    assert rep["ok"] is False and '"port"' not in result["stdout"], result


# --- unix sockets ------------------------------------------------------------------------------

@pytest.mark.parametrize("network", [False, True], ids=["no-network", "allow-network"])
def test_pathname_unix_socket_in_read_grant_is_unreachable(pynox, fs, listen, short_dir, network):
    path = short_dir / "s"
    listener = listen(socket.AF_UNIX, socket.SOCK_STREAM, str(path))
    result, rep = probe(pynox, fs, f"""\
        def go():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect({str(path)!r})
            s.sendall(b"exfiltrated")
        attempt(go)
        """, network=network, ro=[short_dir])
    listener.stop()
    assert rep["ok"] is False, rep
    assert not listener.saw_anything, listener.connections


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "allow-network"])
def test_pathname_unix_datagram_socket_is_unreachable(pynox, fs, listen, short_dir, network):
    path = short_dir / "d"
    listener = listen(socket.AF_UNIX, socket.SOCK_DGRAM, str(path))
    result, rep = probe(pynox, fs, f"""\
        def go():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.sendto(b"exfiltrated", {str(path)!r})
        attempt(go)
        """, network=network, ro=[short_dir])
    listener.stop()
    assert rep["ok"] is False, rep
    assert not listener.datagrams


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "allow-network"])
def test_abstract_unix_socket_is_unreachable(pynox, fs, listen, network):
    name = f"\0pynox-e2e-{uuid.uuid4().hex}"
    listener = listen(socket.AF_UNIX, socket.SOCK_STREAM, name)
    result, rep = probe(pynox, fs, f"""\
        def go():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect({name!r})
            s.sendall(b"exfiltrated")
        attempt(go)
        """, network=network)
    listener.stop()
    assert rep["ok"] is False, rep
    assert not listener.saw_anything, listener.connections


def test_unix_socket_in_write_grant_cannot_be_created(pynox, fs, tree):
    """A listener of its own, where the task may create files, still needs socket(AF_UNIX)."""
    path = fs.rw / "mine"
    assert len(str(path)) < 100
    result, rep = probe(pynox, fs, f"""\
        def go():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind({str(path)!r})
            s.listen(1)
        attempt(go)
        """)
    assert rep["ok"] is False, rep
    assert tree(fs.rw) == []


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
}


RAW_PRELUDE = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
               "def sc(fd):\n    return {'fd': fd, 'errno': ctypes.get_errno() if fd < 0 else 0}")
RAW_WITH_NETWORK = ["socket-syscall-inet-raw-icmp", "socket-syscall-packet", "socket-syscall-netlink-audit",
                    "socket-syscall-netlink-uevent", "socket-syscall-vsock", "socket-syscall-alg"]


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


# --- positive control --------------------------------------------------------------------------

@pytest.mark.parametrize("family, host", FAMILIES)
def test_allow_network_reaches_the_loopback_listener(pynox, fs, listen, family, host):
    listener = listen(family, socket.SOCK_STREAM, (host, 0))
    port = listener.sock.getsockname()[1]
    result, rep = probe(pynox, fs, f"""\
        def go():
            s = socket.socket({int(family)}, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(({host!r}, {port}))
            s.sendall(b"hello from the sandbox")
            s.close()
        attempt(go)
        """, network=True)
    listener.stop()
    assert rep == {"ok": True}, result
    assert [data for _, data in listener.connections] == [b"hello from the sandbox"]


def test_allow_network_udp_reaches_the_loopback_listener(pynox, fs, listen):
    listener = listen(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0))
    port = listener.sock.getsockname()[1]
    result, rep = probe(pynox, fs, f"""\
        def go():
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"datagram", ("127.0.0.1", {port}))
        attempt(go)
        """, network=True)
    listener.stop()
    assert rep == {"ok": True}, result
    assert [data for _, data in listener.datagrams] == [b"datagram"]


def test_allow_network_is_reported_in_policy(pynox, fs):
    assert pynox.task("pass", extra=["--allow-network"])["policy"]["network"] == "allow"
    assert pynox.task("pass")["policy"]["network"] == "deny"
