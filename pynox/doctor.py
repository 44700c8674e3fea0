"""``pynox doctor``: can this machine run the sandbox, and if not, what to change.

Every probe that would change a process (no_new_privs, dropping
capabilities, Landlock, seccomp) runs in a forked child that applies the
real confinement checklist and reports step by step; pynox's own process
only asks questions that change nothing.  The report is JSON on stdout;
the exit status is 0 exactly when the sandbox is supported.
"""

import errno
import os
import platform
import sys

import orjson

from pynox import __version__
from pynox.child import confine, landlock, limits, seccomp
from pynox.policy import Policy

SUPPORTED_MACHINES = ("x86_64", "aarch64")

_LANDLOCK_REASONS = {
    errno.ENOSYS: "the kernel was built without Landlock (CONFIG_SECURITY_LANDLOCK, Linux 5.13 or newer), "
                  "or a container runtime's seccomp profile blocks the landlock_* system calls",
    errno.EOPNOTSUPP: "Landlock is built into the kernel but not enabled: add 'landlock' to the lsm= boot "
                      "parameter (or CONFIG_LSM)",
    errno.EPERM: "a container runtime's seccomp profile blocks the landlock_* system calls: allow them",
}
_STEP_REASONS = {
    "seccomp": "seccomp filters cannot be installed: the kernel lacks CONFIG_SECCOMP_FILTER or a container "
               "runtime forbids seccomp(2); allow it (e.g. a seccomp profile that permits seccomp)",
    "no-new-privs": "prctl(PR_SET_NO_NEW_PRIVS) failed: a container runtime or LSM forbids prctl",
    "capabilities": "capabilities could not be dropped: allow capset and prctl(PR_CAPBSET_DROP)",
    "landlock": "Landlock refused the ruleset",
    "rlimits": "hard resource limits could not be set",
}


def _lsm_list():
    try:
        with open("/sys/kernel/security/lsm") as f:
            return f.read().strip()
    except OSError:
        return None


def _probe_pidfd():
    try:
        os.close(os.pidfd_open(os.getpid()))
        return {"ok": True}
    except (OSError, AttributeError) as exc:
        return {"ok": False, "error": str(exc)}


def _probe_confinement(abi):
    """Apply the whole checklist in a forked child; return each step's result."""
    policy = Policy(timeout_ms=10_000)
    try:
        program = seccomp.Program(seccomp.compile_filter(seccomp.plan_rules(network=False,
                                                                           landlock_abi=max(abi, 1))))
    except (OSError, ValueError) as exc:
        return [{"step": "seccomp-compile", "ok": False, "error": f"libseccomp: {exc}"}]
    read_end, write_end = os.pipe()
    prep = confine.Preparation(keep_fds=(write_end,), parent_pid=os.getpid(), new_session=True)
    plan = confine.Plan(
        ruleset=policy.ruleset(max(abi, 1)), seccomp_program=program,
        rlimits=limits.rlimits_for(memory_bytes=policy.memory_bytes, max_file_size=policy.max_file_size,
                                   timeout_ms=policy.timeout_ms),
        environ=policy.environ())
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            for name, step in confine.early_steps(prep) + confine.job_steps(plan):
                try:
                    step()
                    line = {"step": name, "ok": True}
                except BaseException as exc:
                    line = {"step": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
                os.write(write_end, orjson.dumps(line) + b"\n")
                if not line["ok"]:
                    break
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 1 << 16):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return [orjson.loads(line) for line in b"".join(chunks).splitlines()]


def report() -> dict:
    abi, landlock_errno = landlock.probe()
    machine = platform.machine()
    reasons = []
    runtime_supported = sys.platform == "linux" and sys.version_info >= (3, 10) and machine in SUPPORTED_MACHINES
    if not runtime_supported:
        reasons.append(f"pynox needs Linux on {' or '.join(SUPPORTED_MACHINES)} with Python 3.10+, "
                       f"not {sys.platform} {machine} Python {platform.python_version()}")
    if abi < 1:
        reasons.append("Landlock unavailable: " + _LANDLOCK_REASONS.get(landlock_errno, os.strerror(landlock_errno)))
    lsm = _lsm_list()
    if abi < 1 and lsm is not None and "landlock" not in lsm.split(","):
        reasons.append(f"the active LSM list is {lsm!r}, which omits landlock")
    libseccomp = seccomp.library_version()
    if libseccomp is None:
        reasons.append("libseccomp.so.2 is missing: install the libseccomp2 package")
    pidfd = _probe_pidfd()
    if not pidfd["ok"]:
        reasons.append(f"pidfd_open is unavailable (Linux 5.3+ needed): {pidfd['error']}")
    steps = _probe_confinement(abi) if runtime_supported and libseccomp is not None else []
    for step in steps:
        if not step["ok"] and not (step["step"] == "landlock" and abi < 1):
            reasons.append(f"{_STEP_REASONS.get(step['step'], step['step'])} ({step['error']})")
    complete = [s["step"] for s in steps if s["ok"]] == list(confine.STEP_NAMES)
    with open("/proc/self/status") as f:
        status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
    return {
        "pynox": __version__,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "machine": machine,
        "libseccomp": ".".join(map(str, libseccomp)) if libseccomp else None,
        "landlock": {"abi": abi, "error": os.strerror(landlock_errno) if landlock_errno else None, "lsm": lsm},
        "seccomp": {"ok": any(s["step"] == "seccomp" and s["ok"] for s in steps),
                    "pynox_process_mode": int(status.get("Seccomp", "0").strip() or 0)},
        "no_new_privs": {"ok": any(s["step"] == "no-new-privs" and s["ok"] for s in steps)},
        "capabilities": {"ok": any(s["step"] == "capabilities" and s["ok"] for s in steps)},
        "pidfd_open": pidfd,
        "confinement_steps": steps,
        "backend": f"landlock-abi{abi}+seccomp" if abi else None,
        "runtime_supported": runtime_supported,
        "sandbox_supported": runtime_supported and complete and abi >= 1 and pidfd["ok"],
        "sandbox_unavailable_reasons": reasons,
    }


def main(argv) -> int:
    if argv:
        print(f"pynox doctor: takes no arguments, got {' '.join(argv)}", file=sys.stderr)
        return 2
    result = report()
    sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    return 0 if result["sandbox_supported"] else 1
