"""Privilege steps of the confinement: no_new_privs, capabilities, parent death.

Each function does one prctl/capset job and verifies it by reading the state
back, because a privilege drop the kernel did not record is worse than an
error: it would run the task believing it confined.
"""

import ctypes
import errno
import functools
import os

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_IS_SET = 1
PR_CAP_AMBIENT_CLEAR_ALL = 4

# NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE, each with its lock, and
# KEEP_CAPS locked off: uid 0 can never regain capabilities.
SECUREBITS_LOCKED_DOWN = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_CAP_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    result = _libc.prctl(option, arg2, arg3, 0, 0)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")
    return result


def set_parent_death_signal(signum: int, parent_pid: int) -> None:
    """Die with ``signum`` when the parent dies, and fail if it already has."""
    prctl(PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent_pid:
        raise OSError(errno.ESRCH, "the parent exited before the child was confined")


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if prctl(PR_GET_NO_NEW_PRIVS) != 1:
        raise OSError(errno.EPERM, "no_new_privs did not stick")


@functools.lru_cache(maxsize=None)
def last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 40  # CAP_CHECKPOINT_RESTORE, the last one as of Linux 5.9


def _capget():
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capget: {os.strerror(err)}")
    return data


def drop_capabilities() -> None:
    """Empty every capability set, lock securebits where we may, verify.

    The bounding set can only be emptied with CAP_SETPCAP.  A process that
    lacks it (pynox run by an ordinary user) has empty effective and
    permitted sets already, and with no_new_privs and no execve it can never
    gain what its bounding set still lists, so that case is accepted.
    """
    last = last_capability()
    data = _capget()
    privileged = any(d.effective or d.permitted for d in data)
    if privileged:
        for cap in range(last + 1):
            try:
                prctl(PR_CAPBSET_DROP, cap)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: cap unknown to this kernel
                    raise
        prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN)
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_CAP_VERSION_3, 0)
    empty = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), empty) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    if any(d.effective or d.permitted or d.inheritable for d in _capget()):
        raise OSError(errno.EPERM, "capabilities remain after capset")
    if privileged and _bounding_set() != 0:
        raise OSError(errno.EPERM, "bounding set not empty")


def _bounding_set() -> int:
    # One read of /proc instead of a prctl per capability: this runs per job.
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"CapBnd:"):
                return int(line.split()[1], 16)
    raise OSError(errno.ENOENT, "no CapBnd line in /proc/self/status")
