"""The supervisor's handle on one template process.

It owns the process (started with exec, never a fork of the threaded
supervisor), the control socket with its sans-IO connection, the pidfds the
template passes up, and the template's lifecycle machine.  Control messages
are bounded: a template that does not answer in time is broken.
"""

import errno
import os
import signal
import socket
import subprocess
import sys
import time

from pynox.policy import BASE_ENV, THREAD_ENV
from pynox.supervisor.machines import TemplateState, template_lifecycle
from pynox.wire import Connection

START_BOUND_S = 120.0  # preloading pandas on a cold disk can take seconds
CONTROL_BOUND_S = 5.0


class TemplateProcess:
    def __init__(self, index: int, preload, package_dirs, cwd: str):
        self.index = index
        self.life = template_lifecycle()
        self.conn = Connection()
        self.received_fds = []
        self.job = None
        self.spawning = None  # the Spare whose spawn request awaits its reply
        self.spare = None  # a child forked ahead, waiting for a job
        self.preloaded = []
        ours, theirs = socket.socketpair()
        # BLAS pools started at import would make the template multi-threaded,
        # and forking a threaded process is unsafe: preloaded numpy runs on one thread.
        env = {**BASE_ENV, **{name: "1" for name in THREAD_ENV}}
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-m", "pynox.template", str(theirs.fileno()), str(os.getpid()),
             ",".join(preload), os.pathsep.join(package_dirs)],
            pass_fds=[theirs.fileno()], env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.pidfd = os.pidfd_open(self.process.pid)
        self.control_deadline = time.monotonic() + START_BOUND_S

    @property
    def state(self) -> TemplateState:
        return self.life.state

    @property
    def idle(self) -> bool:
        """Warm, free, and with a child already forked for the next job."""
        return self.state is TemplateState.WARM and self.job is None and self.spare is not None

    def send(self, data: bytes, fds=()) -> None:
        """Send one control message without blocking the supervisor.

        Control messages are a few hundred bytes; a template whose socket
        cannot take one whole has stopped reading, and raises OSError here
        for the caller to treat it as broken.
        """
        sent = socket.send_fds(self.sock, [data], list(fds)) if fds else self.sock.send(data)
        if sent != len(data):
            raise OSError(errno.EAGAIN, "the template is not reading its control socket")

    def receive(self) -> bytes:
        data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 8)
        self.received_fds.extend(fds)
        return data

    def kill(self) -> None:
        """Kill and reap; its children die with it (parent-death signal)."""
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.close()

    def stop(self) -> None:
        """Closing the control socket ends a healthy template; a slow one is killed."""
        self.sock.close()
        try:
            self.process.wait(timeout=CONTROL_BOUND_S)
        except subprocess.TimeoutExpired:
            self.kill()
        self.close()

    def close(self) -> None:
        for fd in self.received_fds:
            os.close(fd)
        self.received_fds.clear()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        self.sock.close()
