"""Hard resource limits a confined task cannot raise.

Soft and hard limits are set together: without CAP_SYS_RESOURCE (dropped
right after) a process can lower a hard limit but never raise one.
"""

import os
import resource


def rlimits_for(*, memory_bytes: int, max_file_size: int, timeout_ms: int) -> dict:
    """Pure: the rlimits of one task.

    RLIMIT_AS bounds every mapping, anonymous or shared; RLIMIT_CPU is a
    backstop behind the parent's wall-clock timeout, loose enough that every
    core busy for the whole timeout still ends as a timeout; message queues get no
    memory; no core dump may write the task's memory anywhere.
    """
    cpu_seconds = (timeout_ms // 1000 + 2) * (os.cpu_count() or 1)
    return {
        resource.RLIMIT_AS: memory_bytes,
        resource.RLIMIT_FSIZE: max_file_size,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_CPU: cpu_seconds,
        resource.RLIMIT_MSGQUEUE: 0,
        resource.RLIMIT_NOFILE: 1024,
        resource.RLIMIT_MEMLOCK: 0,
    }


def apply(limits: dict) -> None:
    for which, value in limits.items():
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))
        if resource.getrlimit(which) != (value, value):
            raise OSError(f"rlimit {which} did not stick")
