"""A pool template: a warm, single-threaded interpreter that forks children.

The supervisor starts each template with exec (never by forking itself, it
may have threads) and a minimal environment.  The template imports the
operator's preloads, verifies it is still single-threaded with no stray
descriptors, compiles the seccomp programs once, and announces itself.  It
then serves one loop over its control socket and its children's pidfds:

* ``spawn`` (request from the supervisor, with three descriptors attached:
  the child's stdout, stderr and wire socket) forks a child, which waits for
  its job on that socket, and replies with the pid plus a pidfd attached;
* a child's pidfd becoming readable means it exited: the template reaps it
  and sends an ``exited`` request up with the raw wait status;
* EOF on the control socket ends the template; its children die with it
  (parent-death signal).

A preload that fails, or a template that leaves extra threads or descriptors,
is reported as ``broken`` with the reason and the template exits: it never
runs jobs in a state the operator did not ask for.
"""

import importlib
import os
import platform
import selectors
import signal
import socket
import sys
import threading

from pynox.child import landlock, seccomp
from pynox.child.privileges import set_parent_death_signal
from pynox.child.serve import Context, serve, warm
from pynox.wire import EOF, NEED_DATA, Connection, ProtocolError, Request

# Exit status meaning "do not restart me, my start itself is broken".
BOOT_ERROR = 3
_FDS_PER_SPAWN = 3


class Broken(Exception):
    """The template cannot serve; the message is the reason the operator reads."""


def _preload(modules, package_dirs):
    import site

    for directory in package_dirs:
        site.addsitedir(directory)
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            raise Broken(f"preload {name!r} failed: {type(exc).__name__}: {exc}") from exc
        loaded.append(name)
    _check_threads()
    return loaded


def _check_threads():
    threads = threading.active_count()
    tasks = len(os.listdir("/proc/self/task"))
    if threads != 1 or tasks != 1:
        raise Broken(f"preloading left {max(threads, tasks) - 1} extra thread(s); a template must stay "
                     f"single-threaded to fork safely")


def _check_descriptors(control_fd):
    extra = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in (0, 1, 2, control_fd):
            continue
        try:
            os.fstat(fd)
        except OSError:
            continue  # the listing's own descriptor, already closed
        extra.append(fd)
    if extra:
        raise Broken(f"preloading left open descriptors {sorted(extra)}; a template must not pass them to jobs")


def _compile(abi):
    try:
        return {network: seccomp.Program(seccomp.compile_filter(seccomp.plan_rules(network=network,
                                                                                   landlock_abi=abi)))
                for network in (False, True)}
    except OSError as exc:
        raise Broken(f"cannot compile the seccomp filter with libseccomp: {exc}") from exc


class Template:
    def __init__(self, control: socket.socket, ctx: Context):
        self.control = control
        self.ctx = ctx
        self.conn = Connection()
        self.pending_fds = []
        self.children = {}  # pidfd -> pid
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ)

    def send(self, data: bytes, fds=()):
        if fds:
            socket.send_fds(self.control, [data], list(fds))
        else:
            self.control.sendall(data)

    def request(self, op, **body):
        _, data = self.conn.send_request(op, **body)
        self.send(data)

    def serve_forever(self):
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.control:
                    if not self._read_control():
                        return
                else:
                    self._reap(key.fd)

    def _read_control(self) -> bool:
        data, fds, _, _ = socket.recv_fds(self.control, 1 << 16, 16)
        self.pending_fds.extend(fds)
        self.conn.receive_data(data)
        while True:
            event = self.conn.next_event()
            if event is NEED_DATA:
                return True
            if event is EOF:
                return False
            if isinstance(event, Request):
                self._handle(event)
            elif isinstance(event, ProtocolError):
                raise Broken(f"supervisor sent a malformed message: {event.message}")
            # A Reply acknowledges one of our ``exited`` notices: nothing to do.

    def _handle(self, request: Request):
        if request.op == "spawn":
            self._spawn(request)
        elif request.op == "ping":
            self.send(self.conn.send_reply(request, pong=True))
        else:
            self.send(self.conn.send_reply(request, error=f"unknown op {request.op!r}"))

    def _spawn(self, request: Request):
        if len(self.pending_fds) < _FDS_PER_SPAWN:
            self.send(self.conn.send_reply(request, error="spawn arrived without its descriptors"))
            return
        stdout_fd, stderr_fd, wire_fd = self.pending_fds[:_FDS_PER_SPAWN]
        del self.pending_fds[:_FDS_PER_SPAWN]
        pid = os.fork()
        if pid == 0:
            self._become_child(stdout_fd, stderr_fd, wire_fd)
        for fd in (stdout_fd, stderr_fd, wire_fd):
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = pid
        self.selector.register(pidfd, selectors.EVENT_READ)
        self.send(self.conn.send_reply(request, pid=pid), fds=(pidfd,))

    def _become_child(self, stdout_fd, stderr_fd, wire_fd):
        try:
            self.selector.close()
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(stdout_fd, 1)
            os.dup2(stderr_fd, 2)
            _reseed()
            sock = socket.socket(fileno=wire_fd)
        except BaseException:
            os._exit(125)
        serve(sock, self.ctx)

    def _reap(self, pidfd):
        pid = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        self.request("exited", pid=pid, status=status)


def _reseed():
    """Fresh random state for each child: nothing of one job's RNG reaches the next."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    control_fd, supervisor_pid = int(argv[0]), int(argv[1])
    preload = [m for m in argv[2].split(",") if m]
    package_dirs = [d for d in argv[3].split(os.pathsep) if d]
    control = socket.socket(fileno=control_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when templates stop
    conn_for_boot = Connection()
    try:
        set_parent_death_signal(signal.SIGKILL, supervisor_pid)
    except OSError:
        return BOOT_ERROR  # the supervisor is gone: nobody to serve
    try:
        abi = landlock.abi_version()
        if abi < 1:
            raise Broken("the kernel does not offer Landlock (see `pynox doctor`)")
        loaded = _preload(preload, package_dirs)
        programs = _compile(abi)
        _check_descriptors(control_fd)
    except Broken as exc:
        _, data = conn_for_boot.send_request("broken", reason=str(exc))
        try:
            control.sendall(data)
        except OSError:
            pass  # the supervisor is gone already; the exit status still says why
        return BOOT_ERROR
    ctx = Context(landlock_abi=abi, seccomp_programs=programs, parent_pid=os.getpid(), new_session=True,
                  hint_style="pool")
    warm(ctx)
    template = Template(control, ctx)
    template.conn = conn_for_boot
    try:
        template.request("ready", preloaded_modules=loaded, python=platform.python_version(), landlock_abi=abi)
        template.serve_forever()
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the supervisor went away: so do we, and our children with us
    except Broken as exc:
        print(f"pynox template: {exc}", file=sys.stderr)
        return BOOT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
