"""Landlock over its three system calls, without a third-party binding.

Landlock is the filesystem (and, from ABI 4, TCP; from ABI 6, IPC scope) half
of the confinement.  Python has no binding in the standard library, and the
interface is three syscalls and two small structs, so a ctypes layer is
smaller than a dependency and easy to audit.  Rule *building* is a pure
function of the grants and the ABI (:func:`plan_rules`), unit-tested without
touching the kernel; only :func:`restrict_self` applies anything.
"""

import ctypes
import enum
import functools
import errno
import os
import platform
import stat
from dataclasses import dataclass

_SYSCALLS = {
    # landlock_create_ruleset, landlock_add_rule, landlock_restrict_self share
    # numbers across the generic syscall table used by every 64-bit arch.
    "x86_64": (444, 445, 446),
    "aarch64": (444, 445, 446),
}

CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1


class FS(enum.IntFlag):
    EXECUTE = 1 << 0
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13  # ABI 2
    TRUNCATE = 1 << 14  # ABI 3
    IOCTL_DEV = 1 << 15  # ABI 5


class NET(enum.IntFlag):
    BIND_TCP = 1 << 0  # ABI 4
    CONNECT_TCP = 1 << 1


class SCOPE(enum.IntFlag):
    ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
    SIGNAL = 1 << 1


# Rights a rule may name on a non-directory; the kernel rejects the others.
FILE_RIGHTS = FS.EXECUTE | FS.WRITE_FILE | FS.READ_FILE | FS.TRUNCATE | FS.IOCTL_DEV

READ = FS.READ_FILE | FS.READ_DIR
RUNTIME = READ | FS.EXECUTE
WRITE = (
    READ
    | FS.WRITE_FILE
    | FS.REMOVE_DIR
    | FS.REMOVE_FILE
    | FS.MAKE_DIR
    | FS.MAKE_REG
    | FS.MAKE_SYM
    | FS.MAKE_FIFO
    | FS.MAKE_SOCK
    | FS.REFER
    | FS.TRUNCATE
)


@functools.lru_cache(maxsize=None)
def handled_fs(abi: int) -> FS:
    """Every filesystem right this ABI can deny: all of them are denied by default."""
    rights = FS(0)
    for right in FS:
        if right is FS.REFER and abi < 2:
            continue
        if right is FS.TRUNCATE and abi < 3:
            continue
        if right is FS.IOCTL_DEV and abi < 5:
            continue
        rights |= right
    return rights


@dataclass(frozen=True, slots=True, kw_only=True)
class Ruleset:
    """What one child asks of Landlock: the handled rights and the path rules."""

    abi: int
    handled_fs: int
    handled_net: int
    scoped: int
    rules: tuple  # of (path, access)
    # Paths a trusted parent checked in resolved form: each must still resolve
    # to itself when opened, or a symlink swapped in since could widen a grant.
    exact: frozenset = frozenset()


def plan_rules(*, abi: int, read: list, write: list, runtime: list, network: bool, devices: tuple = (),
               exact: frozenset = frozenset()) -> Ruleset:
    """Pure: the ruleset for these grants at this ABI.

    Read grants get read rights only, so nothing beneath them can be written,
    truncated, removed, created, renamed or linked; write grants get the
    write set; runtime paths may also be executed (mapped by the loader);
    ``devices`` are character devices such as /dev/null, read and written.
    Without network, TCP bind and connect are handled with no rule (denied).
    """
    if abi < 1:
        raise ValueError("Landlock is not available")
    fs = handled_fs(abi)
    rules = []
    for paths, access in ((runtime, RUNTIME), (read, READ), (write, WRITE), (devices, READ | FS.WRITE_FILE)):
        for path in paths:
            rules.append((path, int(access & fs)))
    handled_net = int(NET.BIND_TCP | NET.CONNECT_TCP) if abi >= 4 and not network else 0
    scoped = int(SCOPE.ABSTRACT_UNIX_SOCKET | SCOPE.SIGNAL) if abi >= 6 else 0
    return Ruleset(abi=abi, handled_fs=int(fs), handled_net=handled_net, scoped=scoped, rules=tuple(rules),
                   exact=frozenset(exact))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _numbers():
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(errno.ENOSYS, f"Landlock syscall numbers unknown for {platform.machine()}")
    return numbers


def _syscall(number, *args):
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def probe() -> tuple:
    """(ABI, errno): the kernel's Landlock ABI, or 0 and why it is missing.

    ENOSYS means a kernel built without Landlock, EOPNOTSUPP one that has it
    but did not enable it at boot.  Asking changes nothing in this process.
    """
    try:
        create, _, _ = _numbers()
        return _syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)), 0
    except OSError as exc:
        return 0, exc.errno


def abi_version() -> int:
    """The kernel's Landlock ABI, or 0 where Landlock is missing or disabled."""
    return probe()[0]


def _attr_size(abi: int) -> int:
    # Older kernels reject a struct larger than the one they know unless the
    # tail is zero; sending exactly their size is the documented way.
    if abi >= 6:
        return ctypes.sizeof(_RulesetAttr)
    if abi >= 4:
        return 16
    return 8


def restrict_self(ruleset: Ruleset) -> None:
    """Apply ``ruleset`` to the calling thread (and its future threads).

    Needs no_new_privs (or CAP_SYS_ADMIN).  Raises OSError naming the path
    whose rule failed; a missing runtime path is skipped, because a runtime
    directory that does not exist grants nothing.
    """
    create, add_rule, restrict = _numbers()
    attr = _RulesetAttr(ruleset.handled_fs, ruleset.handled_net, ruleset.scoped)
    ruleset_fd = _syscall(create, ctypes.byref(attr), ctypes.c_size_t(_attr_size(ruleset.abi)), ctypes.c_uint32(0))
    try:
        for path, access in ruleset.rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if path in ruleset.exact:
                    now = os.readlink(f"/proc/self/fd/{fd}")
                    if now != path:
                        raise OSError(errno.ELOOP, f"grant {path} now resolves to {now}: it changed after it "
                                                   f"was checked")
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= int(FILE_RIGHTS)
                rule = _PathBeneathAttr(access, fd)
                try:
                    _syscall(add_rule, ctypes.c_int(ruleset_fd), ctypes.c_int(RULE_PATH_BENEATH),
                             ctypes.byref(rule), ctypes.c_uint32(0))
                except OSError as exc:
                    raise OSError(exc.errno, f"rule for {path}: {exc.strerror}") from None
            finally:
                os.close(fd)
        _syscall(restrict, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))
    finally:
        os.close(ruleset_fd)
