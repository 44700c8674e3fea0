"""A task's effective policy: its grants and limits, resolved and checked.

Both the single-run launcher and the pool turn user input into a
:class:`Policy` here, so a path means the same thing in both, implicit grants
are computed once, and the policy a result reports is exactly the one the
child applied.  Everything runs in trusted processes before any fork.
"""

import functools
import os
import site
import sys
from dataclasses import dataclass, field

import pynox
from pynox.child import landlock

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MEMORY = 1 << 30
DEFAULT_MAX_OUTPUT = 1 << 20
DEFAULT_MAX_FILE_SIZE = 256 << 20

# System libraries the interpreter and its extension modules link against,
# and the read-only files of the runtime that need no grant to be harmless.
SYSTEM_RUNTIME = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo", "/sys/devices/system/cpu")
# Resolved in the child after fork: its own /proc entry, never another's.
OWN_PROC = "/proc/self"
# Never granted by request: pynox grants the few harmless parts itself.
KERNEL_INTERFACES = ("/proc", "/sys", "/dev")
DEVICES_READ = ("/dev/zero", "/dev/urandom", "/dev/random")
DEVICES_WRITE = ("/dev/null", "/dev/full")
# What name resolution and TLS read when the network is allowed; nothing
# else of /etc.
NETWORK_FILES = (
    "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
    "/etc/services", "/etc/protocols", "/etc/ssl", "/etc/pki", "/etc/ca-certificates",
    "/usr/share/ca-certificates", "/usr/local/share/ca-certificates",
)

BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
}
# Numeric libraries size per-thread buffers by core count; capping threads
# keeps a many-core host from exhausting a modest memory limit at import.
THREAD_CAP = str(min(4, os.cpu_count() or 1))
THREAD_ENV = {"OPENBLAS_NUM_THREADS": THREAD_CAP, "OMP_NUM_THREADS": THREAD_CAP, "MKL_NUM_THREADS": THREAD_CAP}


@functools.lru_cache(maxsize=None)
def runtime_paths() -> tuple:
    """The Python runtime, the site-packages pynox runs from, and pynox itself."""
    paths = [sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix,
             os.path.dirname(os.path.abspath(pynox.__file__))]
    paths += site.getsitepackages()
    paths += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    resolved = []
    for path in paths:
        real = os.path.realpath(path)
        if os.path.exists(real) and real not in resolved:
            resolved.append(real)
    return tuple(resolved)


@functools.lru_cache(maxsize=None)
def runtime_rule_paths() -> tuple:
    """The runtime and system paths as few Landlock rules need them: real paths,
    existing, and none beneath another (/lib is often /usr/lib)."""
    paths = sorted({os.path.realpath(p) for p in runtime_paths() + SYSTEM_RUNTIME if os.path.exists(p)})
    kept = []
    for path in paths:
        if not any(beneath(path, root) for root in kept):
            kept.append(path)
    return tuple(kept)


@functools.lru_cache(maxsize=None)
def _existing(paths: tuple) -> tuple:
    """The implicit paths this machine has; asked once per process, not per result."""
    return tuple(p for p in paths if os.path.exists(p))


def beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def overlaps(a: str, b: str) -> bool:
    return beneath(a, b) or beneath(b, a)


def resolve_path(path: str, base: str) -> str:
    """Absolute, ``..``-free, symlink-free form of ``path``; it must exist."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise ValueError(f"not a path: {path!r}")
    real = os.path.realpath(os.path.join(base, path))
    if not os.path.exists(real):
        raise ValueError(f"{path}: no such file or directory")
    return real


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Resolved grants and limits of one task (absolute, existing paths)."""

    allow_read: tuple = ()
    allow_write: tuple = ()
    package_dirs: tuple = ()
    implicit_read: tuple = ()  # the script or module file itself
    network: bool = False
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    memory_bytes: int = DEFAULT_MEMORY
    max_output: int = DEFAULT_MAX_OUTPUT
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    env: dict = field(default_factory=dict)

    def check(self) -> None:
        """Refuse grants that would fail open or that Landlock cannot honour as written."""
        self._check_kernel_interfaces()
        self._check_nesting()
        self._check_runtime()

    def _check_kernel_interfaces(self) -> None:
        """No grant may reach /proc, /sys or /dev: a path like /proc/self resolves in
        the trusted parent to the parent itself, and /dev holds raw disks."""
        for grant in self.allow_read + self.allow_write + self.package_dirs + self.implicit_read:
            for interface in KERNEL_INTERFACES:
                if overlaps(grant, interface):
                    raise ValueError(f"grant {grant} would expose the kernel interface {interface}; "
                                     f"grant a directory that does not contain it")

    def _check_nesting(self) -> None:
        """A read grant may not lie strictly beneath a write grant: Landlock adds
        rights down the tree and cannot take write access away beneath it (the
        same path granted both ways is simply writable)."""
        for read in self.allow_read:
            for write in self.allow_write:
                if read != write and beneath(read, write):
                    raise ValueError(f"read-only grant {read} lies beneath write grant {write}, "
                                     f"where it could not stay read-only")

    def _check_runtime(self) -> None:
        """Write grants may not overlap the runtime that later tasks trust."""
        for write in self.allow_write:
            for runtime in runtime_paths() + SYSTEM_RUNTIME + self.package_dirs:
                if overlaps(write, runtime):
                    raise ValueError(f"write grant {write} overlaps the runtime path {runtime}")

    def read_paths(self) -> tuple:
        """Every read-only path, implicit ones included, as results report them."""
        paths = list(_existing(runtime_paths() + SYSTEM_RUNTIME))
        paths += list(self.package_dirs) + list(self.implicit_read) + list(self.allow_read)
        if self.network:
            paths += list(_existing(NETWORK_FILES))
        return tuple(dict.fromkeys(paths))

    def environ(self) -> dict:
        return {**BASE_ENV, **THREAD_ENV, **self.env}

    def ruleset(self, abi: int) -> landlock.Ruleset:
        runtime = list(runtime_rule_paths()) + list(self.package_dirs)
        read = list(self.implicit_read) + list(self.allow_read) + [OWN_PROC, *DEVICES_READ]
        if self.network:
            read += list(NETWORK_FILES)
        checked = self.allow_read + self.allow_write + self.package_dirs + self.implicit_read
        return landlock.plan_rules(abi=abi, read=read, write=list(self.allow_write), runtime=runtime,
                                   network=self.network, devices=DEVICES_WRITE, exact=frozenset(checked))

    def describe(self, backend: str) -> dict:
        """The ``policy`` object of a result."""
        return {
            "allow_read": list(self.read_paths()),
            "allow_write": list(self.allow_write),
            "network": "allow" if self.network else "deny",
            "subprocesses": "deny",
            "timeout_ms": self.timeout_ms,
            "memory_bytes": self.memory_bytes,
            "max_file_size": self.max_file_size,
            "backend": backend,
        }
