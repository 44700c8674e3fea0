"""Hints that turn a sandbox denial into the next thing to try.

A model reading ``PermissionError: [Errno 13]`` cannot tell a sandbox grant
from a file mode; the hint names the grant (or limit) that would have
allowed the operation, in the vocabulary of the caller: command-line flags
for ``pynox``, request fields for the pool.  Pure functions only.
"""

import errno
import os
from dataclasses import dataclass

from pynox.policy import KERNEL_INTERFACES
from pynox.units import format_size

FLAGS = {
    "cli": {"read": "--allow-read {}", "write": "--allow-write {}", "network": "--allow-network",
            "memory": "--memory SIZE", "file_size": "--max-file-size SIZE"},
    "pool": {"read": '"allow_read": ["{}"]', "write": '"allow_write": ["{}"]', "network": '"allow_network": true',
             "memory": '"memory"', "file_size": '"max_file_size"'},
}

_PROCESS_WORDS = ("fork", "spawn", "exec", "system(", "popen", "subprocess", "Popen", "clone")
_NETWORK_WORDS = ("socket", "connect", "urlopen", "create_connection", "getaddrinfo", "http")


@dataclass(frozen=True, slots=True, kw_only=True)
class Grants:
    """What the task was given, to compare a denied path against."""

    read: tuple
    write: tuple
    network: bool
    memory_bytes: int
    max_file_size: int
    style: str = "cli"


def _beneath(path: str, roots) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _grant_dir(path: str) -> str:
    return path if os.path.isdir(path) else os.path.dirname(path) or "/"


def hint_for(exc: BaseException, grants: Grants, source_line: str = "") -> str | None:
    """A one-line hint for ``exc`` or the error it wraps, or None where no grant or limit explains it.

    Libraries wrap denials (urllib's URLError keeps the OSError as ``reason``,
    others chain it as the cause), so the chain is followed a few links deep.
    """
    for link in _chain(exc):
        hint = _hint_one(link, grants, source_line)
        if hint is not None:
            return hint
    return None


def _chain(exc, depth=4):
    seen = []
    while isinstance(exc, BaseException) and exc not in seen and len(seen) < depth:
        seen.append(exc)
        reason = getattr(exc, "reason", None)
        exc = reason if isinstance(reason, BaseException) else exc.__cause__ or exc.__context__
    return seen


def _hint_one(exc: BaseException, grants: Grants, source_line: str) -> str | None:
    flags = FLAGS[grants.style]
    if isinstance(exc, MemoryError):
        return (f"the task reached its memory limit ({format_size(grants.memory_bytes)}); "
                f"{flags['memory']} raises it")
    if not isinstance(exc, OSError):
        return None
    if exc.errno == errno.EFBIG:
        return (f"a file reached the size limit ({format_size(grants.max_file_size)}); "
                f"{flags['file_size']} raises it")
    if exc.errno not in (errno.EACCES, errno.EPERM, errno.EXDEV, errno.EROFS):
        return None
    if exc.filename is not None and isinstance(exc.filename, (str, bytes)):
        path = os.path.abspath(os.fsdecode(exc.filename))
        if any(_beneath(path, (root,)) for root in KERNEL_INTERFACES):
            return f"{path} is a kernel interface the sandbox does not grant"
        if _beneath(path, grants.write):
            return None  # a real file mode, not the sandbox
        target = _grant_dir(path)
        if _beneath(path, grants.read):
            return f"{path} is read-only in the sandbox; {flags['write'].format(target)} would allow changing it"
        return (f"{path} is outside the sandbox; {flags['read'].format(target)} grants reading it, "
                f"{flags['write'].format(target)} reading and writing")
    if any(word in source_line for word in _PROCESS_WORDS):
        return "the sandbox does not allow starting processes (subprocess, fork, exec)"
    if not grants.network and any(word in source_line for word in _NETWORK_WORDS):
        return f"network access is denied; {flags['network']} allows it"
    return None
