"""The seccomp half of the confinement, compiled by libseccomp.

libseccomp is the library Docker, systemd and Podman trust to turn a policy
into BPF: it checks the architecture, handles the x86-64/x32 split and
orders comparisons.  We bind the handful of functions we need with ctypes
over ``libseccomp.so.2`` (present wherever systemd or apt is) rather than
depend on a binding that needs a compiler.  The policy is a pure table
(:func:`plan_rules`), compiled once per (network, Landlock ABI) in the trusted
parent (:func:`compile_filter`) and installed last in the child
(:func:`install`) from a :class:`Program` laid out before the fork, so the
child needs neither libseccomp nor allocation.

The model is a deny list over a default of allow: the task is ordinary
CPython with numpy and friends, and the listed calls are the ones that reach
outside the process or into the kernel's larger attack surfaces.  Expected
denials answer EPERM, so Python raises an ordinary PermissionError the model
can act on; foreign ABIs (i386 ``int 0x80``, x32) kill the process.
"""

import ctypes
import ctypes.util
import errno
import os
import platform
import socket
from dataclasses import dataclass

ACT_KILL_PROCESS = 0x80000000
ACT_ALLOW = 0x7FFF0000
_ACT_ERRNO = 0x00050000

ATTR_ACT_BADARCH = 2
ATTR_CTL_NNP = 3

CMP_NE, CMP_LT, CMP_LE, CMP_EQ, CMP_GE, CMP_GT, CMP_MASKED_EQ = 1, 2, 3, 4, 5, 6, 7

SECCOMP_SET_MODE_FILTER = 1
PR_GET_SECCOMP = 21
PR_SET_PDEATHSIG = 1

CLONE_THREAD = 0x00010000
CLONE_NEW_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

F_SETOWN = 8
F_SETOWN_EX = 15
TIOCSTI = 0x5412
TIOCLINUX = 0x541C

AF_NETLINK = 16
NETLINK_ROUTE = 0
AF_MAX = 46
# What a networked task may open: TCP/UDP over IPv4 and IPv6, and the
# routing netlink glibc's getaddrinfo reads for AI_ADDRCONFIG.  Never AF_UNIX:
# Landlock below ABI 9 does not guard connect() to pathname unix sockets.
NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6, AF_NETLINK)


def errno_action(code: int) -> int:
    return _ACT_ERRNO | (code & 0xFFFF)


EPERM = errno_action(errno.EPERM)
ENOSYS = errno_action(errno.ENOSYS)

# Calls no task needs that reach other processes, the kernel's wider attack
# surface, or memory that rlimits do not count.
DENIED = (
    # new processes
    "fork", "vfork", "execve", "execveat",
    # other processes' memory and tracing
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # kernel attack surface
    "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "userfaultfd",
    "perf_event_open", "keyctl", "add_key", "request_key", "fanotify_init",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "uselib",
    # mounts, namespaces and roots
    "mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
    "open_tree", "open_tree_attr", "mount_setattr", "statmount", "listmount",
    "unshare", "setns", "chroot", "pivot_root",
    # the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
    "vhangup", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname", "lsm_set_self_attr",
    # memory that escapes RLIMIT_AS accounting when not mapped, and SysV IPC
    # objects, which live in the host's IPC namespace beside other programs'
    "shmget", "shmat", "shmctl", "shmdt", "memfd_create", "memfd_secret",
    "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "migrate_pages", "move_pages",
    # watching a directory reveals the names created in it, granted or not
    "inotify_add_watch", "fanotify_mark",
    # metadata Landlock does not guard: a file under a read grant stays unchanged
    "chmod", "fchmod", "fchmodat", "fchmodat2",
    "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "utimensat", "futimesat",
    "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
    "removexattr", "lremovexattr", "fremovexattr", "removexattrat",
)

# Calls newer than the syscall table of the libseccomp 2.5 that stable
# distributions ship: we name them by number so a deny list cannot silently
# miss them.
_LATE_SYSCALLS = {
    "x86_64": {"fchmodat2": 452, "statmount": 457, "listmount": 458, "lsm_set_self_attr": 460,
               "setxattrat": 463, "removexattrat": 466, "open_tree_attr": 467},
    "aarch64": {"fchmodat2": 452, "statmount": 457, "listmount": 458, "lsm_set_self_attr": 460,
                "setxattrat": 463, "removexattrat": 466, "open_tree_attr": 467},
}
_SECCOMP_SYSCALL = {"x86_64": 317, "aarch64": 277}


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One libseccomp rule: ``action`` when every (arg, op, a, b) comparison holds."""

    action: int
    syscall: str
    args: tuple = ()


def _when(arg, op, a, b=0):
    return (arg, op, a, b)


def plan_rules(*, network: bool, landlock_abi: int) -> tuple:
    """Pure: the rules for a task with or without network at this Landlock ABI."""
    rules = [Rule(action=EPERM, syscall=name) for name in DENIED]
    rules.append(Rule(action=ENOSYS, syscall="clone3"))  # libc falls back to clone
    # clone only for threads, and never into a new namespace.
    rules.append(Rule(action=EPERM, syscall="clone", args=(_when(0, CMP_MASKED_EQ, CLONE_THREAD, 0),)))
    for flag in CLONE_NEW_FLAGS.values():
        rules.append(Rule(action=EPERM, syscall="clone", args=(_when(0, CMP_MASKED_EQ, flag, flag),)))
    if network:
        for family in range(AF_MAX):
            if family not in NETWORK_FAMILIES:
                rules.append(Rule(action=EPERM, syscall="socket", args=(_when(0, CMP_EQ, family),)))
        rules.append(Rule(action=EPERM, syscall="socket", args=(_when(0, CMP_GE, AF_MAX),)))
        rules.append(Rule(action=EPERM, syscall="socket",
                          args=(_when(0, CMP_EQ, AF_NETLINK), _when(2, CMP_NE, NETLINK_ROUTE))))
    else:
        rules.append(Rule(action=EPERM, syscall="socket"))
    # Only the caller itself: pid (or "who") 0 means the calling process.
    for name in ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr"):
        rules.append(Rule(action=EPERM, syscall=name, args=(_when(0, CMP_NE, 0),)))
    rules.append(Rule(action=EPERM, syscall="setpriority", args=(_when(0, CMP_NE, 0),)))  # PRIO_PROCESS
    rules.append(Rule(action=EPERM, syscall="setpriority", args=(_when(1, CMP_NE, 0),)))
    rules.append(Rule(action=EPERM, syscall="ioprio_set", args=(_when(0, CMP_NE, 1),)))  # IOPRIO_WHO_PROCESS
    rules.append(Rule(action=EPERM, syscall="ioprio_set", args=(_when(1, CMP_NE, 0),)))
    rules.append(Rule(action=EPERM, syscall="personality", args=(_when(0, CMP_NE, 0xFFFFFFFF),)))
    # Typing into the terminal the task shares with its user: the kernel reads
    # the request as 32 bits, so the comparison masks the upper half.
    for request in (TIOCSTI, TIOCLINUX):
        rules.append(Rule(action=EPERM, syscall="ioctl", args=(_when(1, CMP_MASKED_EQ, 0xFFFFFFFF, request),)))
    # The parent-death signal is what kills an orphaned child; it stays set.
    rules.append(Rule(action=EPERM, syscall="prctl", args=(_when(0, CMP_EQ, PR_SET_PDEATHSIG),)))
    if landlock_abi < 3:
        # Landlock cannot deny truncate() before ABI 3.
        rules.append(Rule(action=EPERM, syscall="truncate"))
    if landlock_abi < 6:
        # Without Landlock's signal scope nothing tells the task's own pid
        # from another's (and on the command line the task shares the
        # launcher's process group), so no signal may be sent at all, not
        # even SIGIO through a descriptor's owner.
        for name in ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal"):
            rules.append(Rule(action=EPERM, syscall=name))
        for command in (F_SETOWN, F_SETOWN_EX):
            rules.append(Rule(action=EPERM, syscall="fcntl", args=(_when(1, CMP_EQ, command),)))
    return tuple(rules)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_library():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_exact_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def library_version():
    """libseccomp's (major, minor, micro), or None where it cannot be loaded."""
    try:
        lib = _load_library()
    except OSError:
        return None
    lib.seccomp_version.restype = ctypes.POINTER(ctypes.c_uint * 3)
    return tuple(lib.seccomp_version().contents)


def resolve(lib, name: str) -> int:
    """Syscall number of ``name`` on this machine, or -1 where it has none."""
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:
        number = _LATE_SYSCALLS.get(platform.machine(), {}).get(name, -1)
    return number


def compile_filter(rules) -> bytes:
    """Compile ``rules`` to a BPF program with libseccomp; raises OSError."""
    lib = _load_library()
    ctx = lib.seccomp_init(ACT_ALLOW)
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    try:
        for attr, value in ((ATTR_ACT_BADARCH, ACT_KILL_PROCESS), (ATTR_CTL_NNP, 0)):
            rc = lib.seccomp_attr_set(ctx, attr, value)
            if rc < 0:
                raise OSError(-rc, f"seccomp_attr_set({attr}): {os.strerror(-rc)}")
        for rule in rules:
            number = resolve(lib, rule.syscall)
            if number < 0:
                continue  # this architecture has no such call
            cmps = (_ArgCmp * max(1, len(rule.args)))(*[_ArgCmp(*a) for a in rule.args])
            rc = lib.seccomp_rule_add_exact_array(ctx, rule.action, number, len(rule.args), cmps)
            if rc < 0:
                raise OSError(-rc, f"rule for {rule.syscall}: {os.strerror(-rc)}")
        fd = os.memfd_create("pynox-seccomp", os.MFD_CLOEXEC)
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc < 0:
                raise OSError(-rc, f"seccomp_export_bpf: {os.strerror(-rc)}")
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class Program:
    """A compiled filter, laid out for ``seccomp(2)`` once in the parent.

    The child then installs it with one system call and touches no memory
    of its own, so nothing is copied after fork for it.
    """

    def __init__(self, bpf: bytes):
        if not bpf or len(bpf) % 8:
            raise ValueError("empty or malformed BPF program")
        self.bpf = bpf
        self._buffer = ctypes.create_string_buffer(bpf, len(bpf))
        self.fprog = _SockFprog(len(bpf) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))


def install(program: Program) -> None:
    """Install a compiled program on the calling thread; needs no_new_privs."""
    number = _SECCOMP_SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"seccomp syscall number unknown for {platform.machine()}")
    if _libc.syscall(ctypes.c_long(number), ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
                     ctypes.c_uint(0), ctypes.byref(program.fprog)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp(SET_MODE_FILTER): {os.strerror(err)}")
    if _libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 2:
        raise OSError(errno.EPERM, "the kernel does not report the filter as enforced")
