"""Landlock rule planning (pure) and one real restrict_self in a forked child."""

import errno
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynox.child import landlock
from pynox.child.landlock import FS, NET, SCOPE, handled_fs, plan_rules
from pynox.child.privileges import set_no_new_privs
from forked import outcome, run_in_child

BASE_13 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM, the ABI 1 rights
WRITE_ONLY_RIGHTS = (FS.WRITE_FILE | FS.REMOVE_DIR | FS.REMOVE_FILE | FS.MAKE_CHAR | FS.MAKE_DIR | FS.MAKE_REG
                     | FS.MAKE_SOCK | FS.MAKE_FIFO | FS.MAKE_BLOCK | FS.MAKE_SYM | FS.REFER | FS.TRUNCATE)


# handled_fs ---------------------------------------------------------------


@pytest.mark.parametrize(
    "abi, expected",
    [
        (1, BASE_13),
        (2, BASE_13 | FS.REFER),
        (3, BASE_13 | FS.REFER | FS.TRUNCATE),
        (4, BASE_13 | FS.REFER | FS.TRUNCATE),
        (5, BASE_13 | FS.REFER | FS.TRUNCATE | FS.IOCTL_DEV),
        (6, BASE_13 | FS.REFER | FS.TRUNCATE | FS.IOCTL_DEV),
        (7, BASE_13 | FS.REFER | FS.TRUNCATE | FS.IOCTL_DEV),
    ],
)
def test_handled_fs_per_abi(abi, expected):
    assert int(handled_fs(abi)) == int(expected)


@pytest.mark.parametrize("abi", range(1, 8))
def test_handled_fs_introduces_rights_at_their_abi(abi):
    rights = handled_fs(abi)
    assert bool(rights & FS.REFER) == (abi >= 2)
    assert bool(rights & FS.TRUNCATE) == (abi >= 3)
    assert bool(rights & FS.IOCTL_DEV) == (abi >= 5)
    # The ABI 1 rights are always handled.
    for right in (FS.EXECUTE, FS.WRITE_FILE, FS.READ_FILE, FS.READ_DIR, FS.REMOVE_DIR, FS.REMOVE_FILE,
                  FS.MAKE_CHAR, FS.MAKE_DIR, FS.MAKE_REG, FS.MAKE_SOCK, FS.MAKE_FIFO, FS.MAKE_BLOCK, FS.MAKE_SYM):
        assert rights & right


def test_handled_fs_is_monotonic_in_abi():
    for abi in range(1, 10):
        assert int(handled_fs(abi)) & int(handled_fs(abi + 1)) == int(handled_fs(abi))


# plan_rules ---------------------------------------------------------------


def access_of(ruleset, path):
    matches = [access for p, access in ruleset.rules if p == path]
    assert len(matches) == 1, (path, ruleset.rules)
    return matches[0]


@pytest.mark.parametrize("abi", [0, -1])
def test_plan_rules_refuses_missing_landlock(abi):
    with pytest.raises(ValueError):
        plan_rules(abi=abi, read=["/r"], write=[], runtime=[], network=False)


@pytest.mark.parametrize("abi", range(1, 8))
def test_read_grants_never_carry_write_rights(abi):
    ruleset = plan_rules(abi=abi, read=["/data"], write=[], runtime=["/usr"], network=False)
    for path in ("/data", "/usr"):
        access = access_of(ruleset, path)
        assert access & FS.READ_FILE and access & FS.READ_DIR
        assert access & int(WRITE_ONLY_RIGHTS) == 0, FS(access)
    assert access_of(ruleset, "/data") & FS.EXECUTE == 0
    assert access_of(ruleset, "/usr") & FS.EXECUTE


@pytest.mark.parametrize("abi", range(1, 8))
def test_write_grants_carry_the_write_set(abi):
    ruleset = plan_rules(abi=abi, read=[], write=["/out"], runtime=[], network=False)
    access = FS(access_of(ruleset, "/out"))
    for right in (FS.READ_FILE, FS.READ_DIR, FS.WRITE_FILE, FS.REMOVE_DIR, FS.REMOVE_FILE, FS.MAKE_DIR,
                  FS.MAKE_REG, FS.MAKE_SYM, FS.MAKE_FIFO, FS.MAKE_SOCK):
        assert access & right, right
    assert bool(access & FS.REFER) == (abi >= 2)
    assert bool(access & FS.TRUNCATE) == (abi >= 3)
    # Never device nodes, nor execution, even for a write grant.
    assert not access & (FS.MAKE_CHAR | FS.MAKE_BLOCK | FS.EXECUTE)


@pytest.mark.parametrize("abi", range(1, 8))
def test_devices_are_read_and_written_only(abi):
    ruleset = plan_rules(abi=abi, read=[], write=[], runtime=[], network=False, devices=("/dev/null",))
    assert access_of(ruleset, "/dev/null") == int(FS.READ_FILE | FS.READ_DIR | FS.WRITE_FILE)


paths = st.lists(st.text(alphabet="abc/", min_size=1, max_size=6).map(lambda s: "/" + s), max_size=4)


@given(abi=st.integers(1, 12), read=paths, write=paths, runtime=paths, devices=paths, network=st.booleans())
def test_plan_rules_invariants(abi, read, write, runtime, devices, network):
    ruleset = plan_rules(abi=abi, read=read, write=write, runtime=runtime, network=network,
                         devices=tuple(devices))
    assert ruleset.abi == abi
    assert ruleset.handled_fs == int(handled_fs(abi))
    # One rule per grant, in order runtime, read, write, devices.
    assert [p for p, _ in ruleset.rules] == runtime + read + write + devices
    for _, access in ruleset.rules:
        assert isinstance(access, int)
        assert access != 0
        assert access & ~ruleset.handled_fs == 0  # a subset of what is handled
    n_runtime, n_read, n_write = len(runtime), len(read), len(write)
    for _, access in ruleset.rules[n_runtime:n_runtime + n_read]:
        assert access & int(WRITE_ONLY_RIGHTS) == 0
    for _, access in ruleset.rules[n_runtime + n_read:n_runtime + n_read + n_write]:
        assert access & FS.WRITE_FILE and access & FS.REMOVE_FILE and access & FS.MAKE_REG
    if abi >= 4 and not network:
        assert ruleset.handled_net == int(NET.BIND_TCP | NET.CONNECT_TCP)
    else:
        assert ruleset.handled_net == 0
    if abi >= 6:
        assert ruleset.scoped == int(SCOPE.ABSTRACT_UNIX_SOCKET | SCOPE.SIGNAL)
    else:
        assert ruleset.scoped == 0


@pytest.mark.parametrize(
    "abi, network, handled_net",
    [(1, False, 0), (3, False, 0), (4, False, 3), (4, True, 0), (7, False, 3), (7, True, 0)],
)
def test_tcp_denied_only_from_abi_4_without_network(abi, network, handled_net):
    ruleset = plan_rules(abi=abi, read=[], write=[], runtime=[], network=network)
    assert ruleset.handled_net == handled_net


@pytest.mark.parametrize("abi, scoped", [(1, 0), (5, 0), (6, 3), (7, 3)])
def test_ipc_scope_only_from_abi_6(abi, scoped):
    for network in (False, True):
        assert plan_rules(abi=abi, read=[], write=[], runtime=[], network=network).scoped == scoped


def test_ruleset_is_frozen():
    ruleset = plan_rules(abi=7, read=[], write=[], runtime=[], network=False)
    with pytest.raises(AttributeError):
        ruleset.abi = 1  # type: ignore[misc]


# the kernel ------------------------------------------------------------------


def test_probe_reports_landlock_on_this_machine():
    abi, err = landlock.probe()
    assert abi >= 1
    assert err == 0
    assert landlock.abi_version() == abi




def test_restrict_self_enforces_read_and_write_grants(tmp_path):
    abi = landlock.abi_version()
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "data.txt").write_text("hello")
    (b / "existing.txt").write_text("old")
    assert os.path.exists("/etc/hostname")

    def read_file(path):
        with open(path, "rb") as f:
            return f.read()

    def write_file(path, data):
        with open(path, "wb") as f:
            f.write(data)
        return True

    def body():
        set_no_new_privs()
        landlock.restrict_self(plan_rules(abi=abi, read=[str(a)], write=[str(b)], runtime=[], network=False))
        return {
            "write_in_a": outcome(lambda: write_file(str(a / "data.txt"), b"x")),
            "create_in_a": outcome(lambda: write_file(str(a / "new.txt"), b"x")),
            "read_in_a": outcome(lambda: read_file(str(a / "data.txt"))),
            "list_a": outcome(lambda: sorted(os.listdir(str(a)))),
            "truncate_in_a": outcome(lambda: os.truncate(str(a / "data.txt"), 0)),
            "unlink_in_a": outcome(lambda: os.unlink(str(a / "data.txt"))),
            "write_in_b": outcome(lambda: write_file(str(b / "new.txt"), b"written")),
            "read_back_b": outcome(lambda: read_file(str(b / "new.txt"))),
            "rename_b_to_a": outcome(lambda: os.rename(str(b / "existing.txt"), str(a / "moved.txt"))),
            "read_hostname": outcome(lambda: read_file("/etc/hostname")),
            "list_tmp_parent": outcome(lambda: os.listdir(str(tmp_path))),
        }

    result = run_in_child(body)
    assert "setup_error" not in result, result
    denied = ("error", "PermissionError", errno.EACCES)
    assert result["write_in_a"] == denied
    assert result["create_in_a"] == denied
    assert result["read_in_a"] == ("ok", b"hello")
    assert result["list_a"] == ("ok", ["data.txt"])
    if abi >= 3:
        assert result["truncate_in_a"] == denied
    assert result["unlink_in_a"] == denied
    assert result["write_in_b"] == ("ok", True)
    assert result["read_back_b"] == ("ok", b"written")
    assert result["rename_b_to_a"][0] == "error"
    assert result["read_hostname"] == denied
    assert result["list_tmp_parent"] == denied
    # Nothing the child tried in A took effect; B has the new file.
    assert (a / "data.txt").read_text() == "hello"
    assert sorted(p.name for p in a.iterdir()) == ["data.txt"]
    assert (b / "new.txt").read_bytes() == b"written"
    assert (b / "existing.txt").read_text() == "old"
