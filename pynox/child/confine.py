"""The confinement, as one linear checklist a freshly forked child runs.

The child does not care how it was made (the single-run launcher and a pool
template both fork it).  It applies the request-independent half of the
checklist (:class:`Preparation`) as soon as it exists and the job's half
(:class:`Plan`) once its job arrives, step by step.  Each step either completes or raises
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
class Preparation:
    """The request-independent part, applied while the child waits for its job."""

    keep_fds: tuple  # descriptors besides 0, 1, 2 that survive
    parent_pid: int
    new_session: bool  # pool children leave the terminal's process group


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The part that depends on the job, applied once its data has arrived."""

    ruleset: landlock.Ruleset
    seccomp_program: seccomp.Program
    rlimits: dict
    environ: dict


def _close_inherited(keep):
    keep = sorted({0, 1, 2, *keep})
    low = 0
    for fd in keep:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _session(prep):
    if prep.new_session:
        os.setsid()


def set_environment(environ: dict) -> None:
    """Make os.environ exactly ``environ``, changing only what differs."""
    for key in [key for key in os.environ if key not in environ]:
        del os.environ[key]
    for key, value in environ.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def early_steps(prep: Preparation):
    """Steps that need nothing from the job: done before it arrives, off its critical path.

    Capabilities go here, before Landlock opens the grant paths, so those
    paths are opened with no more privilege than the task will have.
    """
    return (
        ("parent-death-signal", lambda: privileges.set_parent_death_signal(signal.SIGKILL, prep.parent_pid)),
        ("close-descriptors", lambda: _close_inherited(prep.keep_fds)),
        ("process-group", lambda: _session(prep)),
        ("no-new-privs", privileges.set_no_new_privs),
        ("capabilities", privileges.drop_capabilities),
    )


def job_steps(plan: Plan):
    """Steps shaped by the job; seccomp last, because it forbids calls the others make."""
    return (
        ("rlimits", lambda: limits.apply(plan.rlimits)),
        ("environment", lambda: set_environment(plan.environ)),
        ("landlock", lambda: landlock.restrict_self(plan.ruleset)),
        ("seccomp", lambda: seccomp.install(plan.seccomp_program)),
    )


STEP_NAMES = tuple(name for name, _ in early_steps(None) + job_steps(None))


def _run(steps) -> None:
    for name, step in steps:
        try:
            step()
        except Exception as exc:  # every failure is fatal and named
            raise SandboxSetupError(name, f"{type(exc).__name__}: {exc}") from exc


def prepare(prep: Preparation) -> None:
    """The first half of the checklist, in a freshly forked single-threaded child."""
    _run(early_steps(prep))


def apply(plan: Plan) -> None:
    """The second half; after it returns the child is fully confined."""
    _run(job_steps(plan))
