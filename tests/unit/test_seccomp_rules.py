"""The seccomp deny list (pure), its compilation, and one real filter in a forked child."""

import ctypes
import errno
import os
import platform
import socket
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynox.child import seccomp
from pynox.child.privileges import set_no_new_privs
from pynox.child.seccomp import (CLONE_NEW_FLAGS, CLONE_THREAD, CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT,
                                 CMP_MASKED_EQ, CMP_NE, DENIED, ENOSYS, EPERM, compile_filter, plan_rules)
from forked import outcome, run_in_child

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17
NETLINK_ROUTE, NETLINK_AUDIT = 0, 9
U64 = (1 << 64) - 1


# A tiny model of libseccomp's semantics: a rule fires when every comparison
# holds; a call is denied when any rule for it fires (all our rules deny).


def _holds(cmp, args):
    index, op, a, b = cmp
    value = args[index] & U64 if index < len(args) else 0
    return {
        CMP_NE: lambda: value != a,
        CMP_LT: lambda: value < a,
        CMP_LE: lambda: value <= a,
        CMP_EQ: lambda: value == a,
        CMP_GE: lambda: value >= a,
        CMP_GT: lambda: value > a,
        CMP_MASKED_EQ: lambda: value & a == b,
    }[op]()


def action_for(rules, syscall, *args):
    """The action of the first matching rule, or None (allowed)."""
    actions = {rule.action for rule in rules if rule.syscall == syscall and all(_holds(c, args) for c in rule.args)}
    assert len(actions) <= 1, actions
    return actions.pop() if actions else None


def rules_for(rules, syscall):
    return [rule for rule in rules if rule.syscall == syscall]


# plan_rules ---------------------------------------------------------------


@pytest.mark.parametrize("abi", [1, 3, 6, 7])
def test_every_denied_name_is_an_unconditional_eperm(abi):
    for network in (False, True):
        rules = plan_rules(network=network, landlock_abi=abi)
        for name in DENIED:
            assert any(rule.syscall == name and rule.action == EPERM and rule.args == () for rule in rules), name


def test_without_network_socket_is_denied_unconditionally():
    rules = plan_rules(network=False, landlock_abi=7)
    socket_rules = rules_for(rules, "socket")
    assert [(r.action, r.args) for r in socket_rules] == [(EPERM, ())]
    for family in (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET):
        assert action_for(rules, "socket", family, socket.SOCK_STREAM, 0) == EPERM


def test_with_network_no_unconditional_socket_rule():
    rules = plan_rules(network=True, landlock_abi=7)
    socket_rules = rules_for(rules, "socket")
    assert socket_rules
    assert all(rule.args for rule in socket_rules)
    assert all(rule.action == EPERM for rule in socket_rules)


@pytest.mark.parametrize("abi", [1, 7])
def test_with_network_inet_allowed_and_local_families_denied(abi):
    rules = plan_rules(network=True, landlock_abi=abi)
    for family in (AF_INET, AF_INET6):
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_STREAM | socket.SOCK_CLOEXEC):
            assert action_for(rules, "socket", family, kind, 0) is None, (family, kind)
    assert action_for(rules, "socket", AF_UNIX, socket.SOCK_STREAM, 0) == EPERM
    assert action_for(rules, "socket", AF_PACKET, socket.SOCK_RAW, 0) == EPERM
    assert action_for(rules, "socket", AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) is None
    assert action_for(rules, "socket", AF_NETLINK, socket.SOCK_RAW, NETLINK_AUDIT) == EPERM


@given(family=st.integers(0, U64), protocol=st.integers(0, U64))
def test_with_network_only_inet_and_route_netlink_pass(family, protocol):
    rules = plan_rules(network=True, landlock_abi=7)
    allowed = family in (AF_INET, AF_INET6) or (family == AF_NETLINK and protocol == NETLINK_ROUTE)
    assert (action_for(rules, "socket", family, socket.SOCK_STREAM, protocol) is None) == allowed


def test_clone_rules():
    rules = plan_rules(network=False, landlock_abi=7)
    clone = rules_for(rules, "clone")
    assert all(rule.action == EPERM for rule in clone)
    assert (0, CMP_MASKED_EQ, CLONE_THREAD, 0) in [rule.args[0] for rule in clone]
    for flag in CLONE_NEW_FLAGS.values():
        assert any(rule.args == ((0, CMP_MASKED_EQ, flag, flag),) for rule in clone), hex(flag)
    thread_flags = 0x003D0F00  # what glibc's pthread_create passes
    assert thread_flags & CLONE_THREAD
    assert action_for(rules, "clone", thread_flags) is None
    fork_flags = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD, glibc's fork
    assert action_for(rules, "clone", fork_flags) == EPERM
    for flag in CLONE_NEW_FLAGS.values():
        assert action_for(rules, "clone", thread_flags | flag) == EPERM


def test_clone3_answers_enosys_so_libc_falls_back():
    rules = plan_rules(network=False, landlock_abi=7)
    assert [(r.action, r.args) for r in rules_for(rules, "clone3")] == [(ENOSYS, ())]
    assert ENOSYS == seccomp.errno_action(errno.ENOSYS)
    assert EPERM & 0xFFFF == errno.EPERM


@pytest.mark.parametrize("abi", [1, 2, 3, 4, 5, 6, 7])
def test_abi_dependent_rules(abi):
    rules = plan_rules(network=False, landlock_abi=abi)
    truncate = rules_for(rules, "truncate")
    if abi < 3:
        assert [(r.action, r.args) for r in truncate] == [(EPERM, ())]
    else:
        assert truncate == []
    signal_calls = ("tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal")
    if abi < 6:
        # Nothing can tell the task's own pid from another's: no signal at all.
        for pid in (0, 1, (-1) & U64):
            assert action_for(rules, "kill", pid, 15) == EPERM
        for name in signal_calls:
            assert [(r.action, r.args) for r in rules_for(rules, name)] == [(EPERM, ())], name
        assert action_for(rules, "fcntl", 3, 8) == EPERM  # F_SETOWN
        assert action_for(rules, "fcntl", 3, 15) == EPERM  # F_SETOWN_EX
        assert action_for(rules, "fcntl", 3, 1) is None  # F_GETFD stays
    else:
        assert rules_for(rules, "kill") == []
        assert rules_for(rules, "fcntl") == []
        for name in signal_calls:
            assert rules_for(rules, name) == [], name


def test_abi_7_adds_neither_truncate_nor_kill_rules():
    names = {rule.syscall for rule in plan_rules(network=False, landlock_abi=7)}
    assert "truncate" not in names
    assert not names & {"kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal"}


def test_calls_limited_to_the_caller_itself():
    rules = plan_rules(network=False, landlock_abi=7)
    for name in ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr"):
        assert action_for(rules, name, 0) is None, name
        assert action_for(rules, name, 1234) == EPERM, name
    assert action_for(rules, "setpriority", 0, 0) is None
    assert action_for(rules, "setpriority", 1, 0) == EPERM
    assert action_for(rules, "setpriority", 0, 1234) == EPERM
    assert action_for(rules, "ioprio_set", 1, 0) is None
    assert action_for(rules, "ioprio_set", 2, 0) == EPERM
    assert action_for(rules, "personality", 0xFFFFFFFF) is None
    assert action_for(rules, "personality", 0x0040000) == EPERM  # ADDR_NO_RANDOMIZE
    assert action_for(rules, "prctl", seccomp.PR_SET_PDEATHSIG, 0) == EPERM
    assert action_for(rules, "prctl", 15, 0) is None  # PR_SET_NAME


@given(network=st.booleans(), abi=st.integers(1, 10))
def test_rules_are_well_formed(network, abi):
    rules = plan_rules(network=network, landlock_abi=abi)
    assert isinstance(rules, tuple)
    for rule in rules:
        assert rule.action in (EPERM, ENOSYS)
        for cmp in rule.args:
            index, op, a, b = cmp
            assert 0 <= index <= 5
            assert op in (CMP_NE, CMP_LT, CMP_LE, CMP_EQ, CMP_GE, CMP_GT, CMP_MASKED_EQ)
            assert 0 <= a <= U64 and 0 <= b <= U64


# libseccomp -------------------------------------------------------------------

x86_64_only = pytest.mark.skipif(platform.machine() != "x86_64", reason="syscall numbers checked on x86_64")


@x86_64_only
def test_every_denied_name_resolves_on_x86_64():
    lib = seccomp._load_library()
    missing = [name for name in DENIED if seccomp.resolve(lib, name) < 0]
    assert missing == []


@x86_64_only
def test_every_planned_syscall_resolves_on_x86_64():
    lib = seccomp._load_library()
    names = {rule.syscall for abi in (1, 7) for net in (False, True) for rule in plan_rules(network=net, landlock_abi=abi)}
    assert [name for name in sorted(names) if seccomp.resolve(lib, name) < 0] == []


@x86_64_only
def test_resolve_known_numbers_and_unknown_name():
    lib = seccomp._load_library()
    assert seccomp.resolve(lib, "socket") == 41
    assert seccomp.resolve(lib, "fork") == 57
    assert seccomp.resolve(lib, "clone3") == 435
    assert seccomp.resolve(lib, "fchmodat2") == 452
    assert seccomp.resolve(lib, "open_tree_attr") == 467
    assert seccomp.resolve(lib, "no_such_syscall_pynox") == -1


@pytest.mark.parametrize("network", [False, True])
@pytest.mark.parametrize("abi", [1, 5, 7])
def test_compile_filter_returns_bpf(network, abi):
    program = compile_filter(plan_rules(network=network, landlock_abi=abi))
    assert isinstance(program, bytes)
    assert len(program) > 0
    assert len(program) % 8 == 0
    assert len(program) // 8 <= 4096  # BPF_MAXINSNS


def test_compile_filter_is_deterministic():
    rules = plan_rules(network=True, landlock_abi=7)
    assert compile_filter(rules) == compile_filter(rules)


def test_library_version_is_known():
    version = seccomp.library_version()
    assert version is not None and len(version) == 3 and version >= (2, 5, 0)


# the kernel ------------------------------------------------------------------




_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def raw_syscall(number, *args):
    """The errno a raw syscall fails with (0 when it succeeds)."""
    ctypes.set_errno(0)
    result = _libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    return ctypes.get_errno() if result < 0 else 0


def thread_runs():
    seen = []
    thread = threading.Thread(target=seen.append, args=(42,))
    thread.start()
    thread.join(5)
    return seen == [42] and not thread.is_alive()


def try_fork():
    pid = os.fork()
    if pid == 0:  # only reached if the filter is broken
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_installed_filter_denies_without_breaking_the_interpreter():
    program = compile_filter(plan_rules(network=False, landlock_abi=7))

    def body():
        set_no_new_privs()
        seccomp.install(seccomp.Program(program))
        result = {
            "socket": outcome(lambda: socket.socket().close()),
            "fork": outcome(try_fork),
            "thread": outcome(thread_runs),
            "getpid": outcome(os.getpid),
            "pipe": outcome(lambda: [os.close(fd) for fd in os.pipe()] and True),
        }
        if platform.machine() == "x86_64":
            # Safe probes: without the filter both fail with EINVAL and create nothing.
            result["clone3"] = raw_syscall(435, 0, 0)
            result["clone_newuser_thread"] = raw_syscall(56, CLONE_THREAD | CLONE_NEW_FLAGS["CLONE_NEWUSER"], 0, 0, 0, 0)
            result["unshare"] = raw_syscall(272, 0)
        return result

    result = run_in_child(body)
    assert "setup_error" not in result, result
    assert result["socket"] == ("error", "PermissionError", errno.EPERM)
    assert result["fork"] == ("error", "PermissionError", errno.EPERM)
    assert result["thread"] == ("ok", True)
    getpid = result["getpid"]
    assert getpid[0] == "ok" and isinstance(getpid[1], int) and getpid[1] != os.getpid()
    assert result["pipe"] == ("ok", True)
    if platform.machine() == "x86_64":
        assert result["clone3"] == errno.ENOSYS
        assert result["clone_newuser_thread"] == errno.EPERM
        assert result["unshare"] == errno.EPERM


@pytest.mark.skipif(platform.machine() != "x86_64", reason="raw syscall numbers for x86_64")
def test_raw_probes_are_einval_without_the_filter():
    # The baseline for the probes above: the kernel itself refuses them.
    assert raw_syscall(435, 0, 0) == errno.EINVAL
    assert raw_syscall(56, CLONE_THREAD | CLONE_NEW_FLAGS["CLONE_NEWUSER"], 0, 0, 0, 0) == errno.EINVAL


def test_installed_network_filter_allows_inet_only():
    program = compile_filter(plan_rules(network=True, landlock_abi=7))

    def body():
        set_no_new_privs()
        seccomp.install(seccomp.Program(program))
        return {
            "inet": outcome(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()),
            "inet6_udp": outcome(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()),
            "unix": outcome(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()),
            "netlink_audit": outcome(lambda: socket.socket(AF_NETLINK, socket.SOCK_RAW, NETLINK_AUDIT).close()),
            "netlink_route": outcome(lambda: socket.socket(AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE).close()),
        }

    result = run_in_child(body)
    assert "setup_error" not in result, result
    assert result["inet"] == ("ok", None)
    # IPv6 may be absent from the machine (EAFNOSUPPORT), but never filtered.
    assert result["inet6_udp"] == ("ok", None) or result["inet6_udp"][2] != errno.EPERM
    assert result["unix"] == ("error", "PermissionError", errno.EPERM)
    assert result["netlink_audit"] == ("error", "PermissionError", errno.EPERM)
    assert result["netlink_route"] == ("ok", None)


@pytest.mark.parametrize("bpf", [b"", b"\0" * 7, b"\0" * 12])
def test_program_refuses_malformed_bpf(bpf):
    with pytest.raises(ValueError):
        seccomp.Program(bpf)
