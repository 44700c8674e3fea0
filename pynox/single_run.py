"""One sandboxed run for the command line: fork, feed, watch, reap, report.

The launcher is the child's trusted parent: it compiles the seccomp program,
forks, hands the child its job over the wire, enforces the wall-clock
timeout with a pidfd (no pid-reuse race), drains captured output within
bounds, and turns the exit status and the child's reply into one outcome.
Exit status comes from the kernel, never from what the task wrote.
"""

import os
import platform
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass

from pynox.capture import BoundedBuffer
from pynox.child import landlock, seccomp
from pynox.child.execute import PYNOX_ERROR_TYPES, Task
from pynox.child.serve import SETUP_FAILED, Context, run_request, serve
from pynox.errors import SandboxSetupError, error_dict
from pynox.policy import Policy
from pynox.report import ChildReport
from pynox.wire import Connection

TIMEOUT_EXIT = 124
SETUP_EXIT = 125
# After the child is gone, output still in the pipes is drained for at most
# this long; nothing else can hold the write ends, so it is only a guard.
DRAIN_S = 1.0


def backend_name(abi: int) -> str:
    return f"landlock-abi{abi}+seccomp"


def prepare(network: bool, *, hint_style: str, new_session: bool) -> Context:
    """Probe Landlock and compile seccomp in the trusted parent, or fail closed."""
    abi = landlock.abi_version()
    if abi < 1:
        raise SandboxSetupError("landlock", "the kernel does not offer Landlock (see `pynox doctor`)")
    try:
        program = seccomp.Program(seccomp.compile_filter(seccomp.plan_rules(network=network, landlock_abi=abi)))
    except OSError as exc:
        raise SandboxSetupError("seccomp", f"cannot compile the filter with libseccomp: {exc}") from exc
    return Context(landlock_abi=abi, seccomp_programs={network: program}, parent_pid=os.getpid(),
                   new_session=new_session, hint_style=hint_style)


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """What the launcher observed of one child."""

    status: int  # as from waitpid
    timed_out: bool
    report: ChildReport | None  # what the child said, weighed by what it could know
    stdout: BoundedBuffer | None
    stderr: BoundedBuffer | None
    duration_us: int


class Interrupted(Exception):
    """The launcher itself was asked to stop while a task ran."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def _child(ctx, child_sock, parent_sock, stdio):
    parent_sock.close()
    if stdio is not None:
        os.dup2(stdio[0], 1)
        os.dup2(stdio[1], 2)
    serve(child_sock, ctx)


def launch(ctx: Context, policy: Policy, task: Task, *, capture: bool, cwd: str) -> Finished:
    """Fork a child for ``task`` and watch it to the end."""
    parent_sock, child_sock = socket.socketpair()
    pipes = (os.pipe(), os.pipe()) if capture else None
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic_ns()
    pid = os.fork()
    if pid == 0:
        _child(ctx, child_sock, parent_sock, (pipes[0][1], pipes[1][1]) if capture else None)
    child_sock.close()
    buffers = {}
    if capture:
        for (read_end, write_end), buffer in zip(pipes, (BoundedBuffer(policy.max_output),
                                                         BoundedBuffer(policy.max_output))):
            os.close(write_end)
            buffers[read_end] = buffer
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    if not capture:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the task gets the terminal's ^C
    pidfd = os.pidfd_open(pid)
    try:
        conn = Connection()
        run_id, data = run_request(conn, task, policy, cwd)
        parent_sock.sendall(data)
        report = ChildReport(conn, run_id)
        timed_out = _watch(pidfd, parent_sock, report, buffers, start + policy.timeout_ms * 1_000_000)
    except Interrupted:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(pidfd)
        parent_sock.close()
        for fd in buffers:
            os.close(fd)
    _, status = os.waitpid(pid, 0)
    duration_us = (time.monotonic_ns() - start) // 1000
    values = list(buffers.values())
    return Finished(status=status, timed_out=timed_out, report=report, duration_us=duration_us,
                    stdout=values[0] if values else None, stderr=values[1] if values else None)


def _watch(pidfd, sock, report, buffers, deadline_ns):
    """Drain output and the report until the child is gone; kill it at the deadline."""
    selector = selectors.DefaultSelector()
    selector.register(pidfd, selectors.EVENT_READ)
    selector.register(sock, selectors.EVENT_READ)
    for fd in buffers:
        selector.register(fd, selectors.EVENT_READ)
    timed_out = False
    exited_at = None
    open_streams = set(buffers) | {sock.fileno()}
    while True:
        now = time.monotonic_ns()
        if exited_at is not None and (not open_streams or now - exited_at > DRAIN_S * 1e9):
            break
        if exited_at is None and now >= deadline_ns:
            if not timed_out:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                timed_out = True
            wait = None
        elif exited_at is None:
            wait = (deadline_ns - now) / 1e9
        else:
            wait = max(0.0, DRAIN_S - (now - exited_at) / 1e9)
        for key, _ in selector.select(wait):
            fd = key.fd
            if fd == pidfd:
                selector.unregister(pidfd)
                exited_at = time.monotonic_ns()
                continue
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                data = b""
            if fd in buffers:
                buffers[fd].feed(data)
            else:
                report.take(data, sock)
            if not data:
                selector.unregister(fd)
                open_streams.discard(fd)
    selector.close()
    return timed_out


# Exit statuses with which a task's uncaught exception ends (KeyboardInterrupt: 130).
EXCEPTION_EXITS = (1, 130)


def outcome(finished: Finished, policy: Policy) -> tuple:
    """(exit code, error dict or None, verdict) from what the launcher observed.

    ``verdict`` is True when the error is pynox's own finding (timeout,
    signal, setup failure), which only the parent's observation can make.
    The task's account is kept only where it is consistent with the kernel's
    exit status: an uncaught exception, exit 1 (or 130), reported as such.
    """
    report = finished.report
    if finished.timed_out:
        return TIMEOUT_EXIT, error_dict("TimeoutError", f"the task exceeded its timeout of {policy.timeout_ms} ms"), True
    setup = report.setup_error if report is not None else None
    if setup is not None and os.WIFEXITED(finished.status) and os.WEXITSTATUS(finished.status) == SETUP_FAILED:
        return SETUP_EXIT, error_dict("SandboxSetupError",
                                  f"sandbox setup failed at step {setup.get('step')!r}: {setup.get('message')}"), True
    if os.WIFSIGNALED(finished.status):
        # SIGXCPU included: the CPU rlimit is a backstop set loose enough that
        # the wall-clock timeout always comes first, and a task may send
        # itself SIGXCPU; either way the kernel only says "killed by signal".
        signum = os.WTERMSIG(finished.status)
        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
        return 128 + signum, error_dict("SignalError", f"the task was killed by signal {name}"), True
    code = os.WEXITSTATUS(finished.status)
    final = report.final if report is not None else None
    error = None
    if final is not None and code in EXCEPTION_EXITS and final.get("exit") == code:
        error = _task_error(final.get("error"))
    return code, error, False


# Bounds on what a task's own report may put in a result and in the counters.
MAX_TYPE_CHARS = 200
MAX_TEXT_CHARS = 64 * 1024


def _text(value, limit):
    return value[:limit] if isinstance(value, str) else None


def _task_error(error):
    """The task's own error, with known keys, bounded sizes, and never a pynox verdict.

    A genuine report names a task class that shares a pynox error type's name
    with its module (``__main__.SignalError``), so a bare pynox type can only
    be a line the task forged: such a report is not believed at all.
    """
    if not isinstance(error, dict) or not isinstance(error.get("type"), str):
        return None
    if error["type"] in PYNOX_ERROR_TYPES:
        return None
    line = error.get("line")
    return {
        "type": error["type"][:MAX_TYPE_CHARS],
        "message": _text(error.get("message"), MAX_TEXT_CHARS) or "",
        "file": _text(error.get("file"), MAX_TEXT_CHARS),
        "line": line if isinstance(line, int) and not isinstance(line, bool) else None,
        "hint": _text(error.get("hint"), MAX_TEXT_CHARS),
    }


def runtime_info(mode: str) -> dict:
    return {"name": "pynox", "python": platform.python_version(), "mode": mode}


def result(finished: Finished, policy: Policy, backend: str, runtime: dict | None = None) -> dict:
    """The ``--json`` result: the pool's result shape less the request fields."""
    code, error, _ = outcome(finished, policy)
    return {
        "exit": code,
        "stdout": finished.stdout.text() if finished.stdout else "",
        "stderr": finished.stderr.text() if finished.stderr else "",
        "error": error,
        "stdout_truncated": bool(finished.stdout and finished.stdout.truncated),
        "stderr_truncated": bool(finished.stderr and finished.stderr.truncated),
        "duration_ms": finished.duration_us // 1000,
        "duration_us": finished.duration_us,
        "runtime": runtime or runtime_info("run"),
        "policy": policy.describe(backend),
    }


def setup_failure(exc: SandboxSetupError, policy: Policy) -> dict:
    """The ``--json`` result of a run that never started: the sandbox was unavailable."""
    report = ChildReport(Connection(), 0)
    report.setup_error = {"step": exc.step, "message": exc.detail}
    finished = Finished(status=SETUP_FAILED << 8, timed_out=False, duration_us=0, stdout=None, stderr=None,
                        report=report)
    return result(finished, policy, "unavailable")
