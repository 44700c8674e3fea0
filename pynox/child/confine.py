"""The confinement, as one linear checklist a freshly forked child runs.

The child does not care how it was made (the single-run launcher and a pool
template both fork it); it receives a :class:`Plan` prepared by its trusted
parent and applies it step by step.  Each step either completes or raises
:class:`~pynox.errors.SandboxSetupError` naming itself, and nothing runs
after a failed step: the caller reports the error and exits.  Seccomp comes
last because it forbids calls the earlier steps make.
"""

import os
import signal
from dataclasses import dataclass

from pynox.child import landlock, limits, privileges, seccomp
from pynox.errors import SandboxSetupError


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Everything one child needs to confine itself, prepared before fork."""

    ruleset: landlock.Ruleset
    seccomp_program: bytes
    rlimits: dict
    environ: dict
    keep_fds: tuple  # descriptors besides 0, 1, 2 that survive
    parent_pid: int
    new_session: bool  # pool children leave the terminal's process group


def _close_inherited(keep):
    keep = sorted({0, 1, 2, *keep})
    low = 0
    for fd in keep:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _session(plan):
    if plan.new_session:
        os.setsid()


def _environment(plan):
    os.environ.clear()
    os.environ.update(plan.environ)


def steps(plan):
    return (
        ("parent-death-signal", lambda: privileges.set_parent_death_signal(signal.SIGKILL, plan.parent_pid)),
        ("close-descriptors", lambda: _close_inherited(plan.keep_fds)),
        ("process-group", lambda: _session(plan)),
        ("rlimits", lambda: limits.apply(plan.rlimits)),
        ("environment", lambda: _environment(plan)),
        ("no-new-privs", privileges.set_no_new_privs),
        ("landlock", lambda: landlock.restrict_self(plan.ruleset)),
        ("capabilities", privileges.drop_capabilities),
        ("seccomp", lambda: seccomp.install(plan.seccomp_program)),
    )


STEP_NAMES = tuple(name for name, _ in steps(None))


def apply(plan: Plan) -> None:
    """Confine the calling (single-threaded, freshly forked) process."""
    for name, step in steps(plan):
        try:
            step()
        except Exception as exc:  # every failure is fatal and named
            raise SandboxSetupError(name, f"{type(exc).__name__}: {exc}") from exc
