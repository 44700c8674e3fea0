"""The pool's event loop: requests in, jobs through templates, results out.

One thread, one selector, in the manner of gunicorn's arbiter: wait for
readiness or the nearest deadline, handle what is ready, enforce deadlines,
replace broken templates, finish jobs.  Signal handlers only wake the loop.
Every request line gets exactly one answer carrying its id (or null when it
has none); a job's result is built from what the kernel and the template
report (exit status, pidfd) plus what its own child wrote, so a task can
never speak for another job.
"""

import os
import resource
import selectors
import signal
import socket
import time
from dataclasses import dataclass

import orjson

from pynox.capture import BoundedBuffer
from pynox.child.serve import run_request
from pynox.errors import RequestError, error_dict
from pynox.single_run import DRAIN_S, Finished, backend_name, result, runtime_info
from pynox.supervisor import outcomes
from pynox.supervisor.config import PoolConfig
from pynox.supervisor.machines import JobState, TemplateState, job_lifecycle
from pynox.supervisor.requests import JobSpec, request_id, validate
from pynox.report import ChildReport
from pynox.supervisor.templates import CONTROL_BOUND_S, TemplateProcess
from pynox.wire import EOF, NEED_DATA, Connection, DecodeError, Line, LineFramer, Oversized, ProtocolError, Reply, \
    Request, decode

MAX_REQUEST_LINE = 1 << 20
OUTPUT_HIGH_WATER = 1 << 20  # pending result bytes above which intake pauses
MAX_BOOT_FAILURES = 3


class PoolStartError(Exception):
    """The pool cannot start (or keep) its templates; the message says why."""


class Job:
    def __init__(self, spec: JobSpec):
        self.spec = spec
        self.life = job_lifecycle()
        self.queued_ns = time.monotonic_ns()
        self.started_ns = None
        self.template = None
        self.pid = None
        self.pidfd = None
        self.sock = None
        self.report = None  # ChildReport once the job is sent
        self.streams = {}  # fd -> BoundedBuffer, stdout first
        self.open_fds = set()  # of streams, not yet at EOF
        self.status = None
        self.exited_ns = None
        self.deadline_ns = None
        self.timed_out = False

    @property
    def state(self) -> JobState:
        return self.life.state


@dataclass(slots=True, kw_only=True)
class Spare:
    """A child forked ahead of its job: its stdout, stderr and socket, then its pid and pidfd."""

    out_r: int
    err_r: int
    sock: socket.socket
    pid: int | None = None
    pidfd: int | None = None

    def close(self) -> None:
        for fd in (self.out_r, self.err_r, self.pidfd):
            if fd is not None:
                os.close(fd)
        self.sock.close()


class Pool:
    def __init__(self, config: PoolConfig, *, stdin_fd=0, stdout_fd=1, log=None, cwd=None):
        self.config = config
        self.cwd = cwd or os.getcwd()
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.log = log
        # poll, not epoll: stdin and stdout may be regular files (``< requests.jsonl``),
        # which epoll refuses and poll reports as always ready.
        self.selector = selectors.PollSelector()
        self.framer = LineFramer(MAX_REQUEST_LINE)
        self.stdin_open = True
        self.stdin_registered = False
        self.queue = []
        self.in_flight = {}  # request id -> Job (queued or running)
        self.templates = []
        self.pending_out = bytearray()
        self.stats = outcomes.Stats(workers=config.workers)
        self.boot_failures = 0
        self.stop_signal = None
        self.abi = None
        self.preloaded = []
        self.ready_sent = False  # no request is read before the ready event
        self.lines_waiting = False  # the framer may hold lines not yet acted on

    # -- start and stop -------------------------------------------------

    def start(self) -> None:
        # Each job holds five descriptors here; use all the process may have.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # an unlimited hard limit the kernel will not take: keep the soft one
        os.set_blocking(self.stdout_fd, False)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake_r = wake_r
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.selector.register(wake_r, selectors.EVENT_READ, self._on_wake)
        for index in range(self.config.workers):
            self._start_template(index)
        while any(t.state is TemplateState.STARTING for t in self.templates):
            self._turn()
            if self.stop_signal is not None:
                raise PoolStartError(f"stopped by signal {self.stop_signal} while starting")
        self.preloaded = self.templates[0].preloaded
        self.ready_sent = True
        self._emit({"event": "ready", "workers": self.config.workers, "runtime": "pynox",
                    "preloaded_modules": list(self.preloaded), "package_dirs": list(self.config.package_dirs),
                    "config": self.config.path, "profiles": sorted(self.config.profiles)})

    def _on_signal(self, signum, frame):
        self.stop_signal = signum

    def _on_wake(self, _mask):
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _start_template(self, index):
        template = TemplateProcess(index, self.config.preload, self.config.package_dirs, self.cwd)
        self.templates.append(template)
        self.selector.register(template.sock, selectors.EVENT_READ, lambda _m, t=template: self._on_control(t))
        self.selector.register(template.pidfd, selectors.EVENT_READ,
                               lambda _m, t=template: self._template_failed(t, "the template process died"))

    def shutdown(self) -> None:
        """Kill every child and template; nothing outlives the pool."""
        for job in list(self.in_flight.values()):
            self._kill_child(job)
        # The list holds only live templates: a broken one leaves it when replaced.
        for template in self.templates:
            self._unregister(template.sock)
            self._unregister(template.pidfd)
            template.life.fire("stop")
            if self.stop_signal is None:
                template.stop()
            else:
                template.kill()
        self.templates.clear()
        self._flush_blocking()

    # -- the loop -------------------------------------------------------

    def serve(self) -> int:
        """Run until stdin ends and every accepted job is answered; the exit status."""
        try:
            while True:
                if self.stop_signal is not None:
                    self._abandon(f"the pool was stopped by {signal.Signals(self.stop_signal).name}")
                    return 128 + self.stop_signal
                self._take_lines()
                self._dispatch()
                if not self.stdin_open and not self.in_flight and not self.pending_out:
                    return 0
                self._turn()
        except PoolStartError as exc:
            self._abandon(f"the pool stopped: {exc}")
            raise

    def _abandon(self, reason: str) -> None:
        """Answer every accepted job before stopping: none is dropped silently."""
        for job in list(self.in_flight.values()):
            if job.state is JobState.QUEUED:
                job.life.fire("refuse")
                body = outcomes.worker_error(reason, job.spec.policy, backend_name(self.abi), self._runtime())
                self._complete(job, body)
            elif job.state in (JobState.DISPATCHED, JobState.RUNNING):
                self._crash(job, reason)
        self.queue.clear()

    def _turn(self):
        self._update_intake()
        timeout = self._next_deadline()
        for key, mask in self.selector.select(timeout):
            # A handler earlier in this batch may have closed (and the kernel
            # reused) this descriptor: only a still-current registration runs.
            current = self.selector.get_map().get(key.fd)
            if current is not None and current.data is key.data:
                key.data(mask)
        self._enforce_deadlines()

    def _update_intake(self):
        want = (self.ready_sent and self.stdin_open and not self.lines_waiting and self._queue_has_room()
                and self.stop_signal is None)
        if want and not self.stdin_registered:
            self.selector.register(self.stdin_fd, selectors.EVENT_READ, self._on_stdin)
        elif not want and self.stdin_registered:
            self.selector.unregister(self.stdin_fd)
        self.stdin_registered = want
        if self.pending_out:
            self._modify_stdout(True)

    def _queue_has_room(self) -> bool:
        return len(self.queue) < 2 * self.config.workers and len(self.pending_out) < OUTPUT_HIGH_WATER

    def _modify_stdout(self, want):
        try:
            self.selector.get_key(self.stdout_fd)
            if not want:
                self.selector.unregister(self.stdout_fd)
        except KeyError:
            if want:
                self.selector.register(self.stdout_fd, selectors.EVENT_WRITE, self._on_stdout)

    def _next_deadline(self):
        now = time.monotonic()
        deadlines = [t.control_deadline for t in self.templates if t.control_deadline is not None]
        for job in self.in_flight.values():
            if job.deadline_ns is not None and not job.timed_out:
                deadlines.append(job.deadline_ns / 1e9)
            if job.exited_ns is not None:
                deadlines.append(job.exited_ns / 1e9 + (DRAIN_S if job.status is not None else CONTROL_BOUND_S))
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - now)

    def _enforce_deadlines(self):
        now_ns = time.monotonic_ns()
        for template in list(self.templates):
            if template.control_deadline is not None and now_ns / 1e9 >= template.control_deadline:
                self._template_failed(template, "the template stopped answering its control messages")
        for job in list(self.in_flight.values()):
            if job.deadline_ns is not None and not job.timed_out and now_ns >= job.deadline_ns:
                job.timed_out = True
                self._kill_child(job)
            if job.status is None and job.exited_ns is not None and now_ns - job.exited_ns > CONTROL_BOUND_S * 1e9:
                self._template_failed(job.template, "the template did not report its child's exit")
            self._maybe_finish(job)

    # -- stdin and stdout -------------------------------------------------

    def _on_stdin(self, _mask):
        try:
            data = os.read(self.stdin_fd, 1 << 16)
        except BlockingIOError:
            return
        self.framer.feed(data)
        self.lines_waiting = True
        self._take_lines()

    def _take_lines(self):
        """Act on buffered request lines while the queue has room; the rest wait
        in the framer, and stdin is not read again until they are taken."""
        while self.lines_waiting and self._queue_has_room():
            frame = self.framer.next_frame()
            if frame is NEED_DATA:
                self.lines_waiting = False
                return
            if frame is EOF:
                self.lines_waiting = False
                self.stdin_open = False
                return
            if isinstance(frame, Oversized):
                self._request_error(None, f"request line longer than {MAX_REQUEST_LINE} bytes was discarded")
            elif isinstance(frame, Line):
                self._on_request_line(frame.data)

    def _on_request_line(self, line: bytes):
        try:
            obj = decode(line)
        except DecodeError as exc:
            self._request_error(None, f"invalid request: {exc.message}")
            return
        rid = request_id(obj)
        if rid is None:
            self._request_error(None, "request has no id (a string or an integer)")
            return
        if "stats" in obj:
            if obj.get("stats") is not True or set(obj) != {"id", "stats"}:
                self._request_error(rid, 'a stats request is exactly {"id": ..., "stats": true}')
            else:
                self._emit({"id": rid, "event": "stats", **self.stats.snapshot()})
            return
        if rid in self.in_flight:
            self._request_error(rid, f"id {rid!r} is already in flight")
            return
        try:
            spec = validate(obj, self.config, self.cwd)
        except RequestError as exc:
            self._request_error(rid, str(exc))
            return
        job = Job(spec)
        self.in_flight[rid] = job
        self.queue.append(job)

    def _on_stdout(self, _mask):
        try:
            written = os.write(self.stdout_fd, self.pending_out)
        except BlockingIOError:
            return
        except OSError:  # a closed pipe or a full device: nobody can read results
            self.pending_out.clear()
            self.stdin_open = False  # so stop taking work
            self.lines_waiting = False
            return
        del self.pending_out[:written]
        if not self.pending_out:
            self._modify_stdout(False)

    def _emit(self, obj):
        try:
            line = orjson.dumps(obj)
        except orjson.JSONEncodeError as exc:
            # Decoding refuses what cannot be encoded back, so this is a pynox
            # bug; the client still gets one answer and the pool lives on.
            rid = obj.get("id")
            fallback = outcomes.request_error(None, f"pynox could not encode an answer: {exc}", self._runtime())
            fallback.update(exit=outcomes.WORKER_ERROR_EXIT, error=error_dict("PoolWorkerError",
                                                                                    fallback["error"]["message"]))
            try:
                fallback["id"] = orjson.loads(orjson.dumps(rid))
            except (orjson.JSONEncodeError, TypeError):
                pass
            line = orjson.dumps(fallback)
        self.pending_out += line + b"\n"
        self._modify_stdout(True)

    def _flush_blocking(self):
        if self.pending_out:
            os.set_blocking(self.stdout_fd, True)
            try:
                os.write(self.stdout_fd, self.pending_out)
            except OSError:
                pass
            self.pending_out.clear()

    def _request_error(self, rid, message):
        self.stats.record("RequestError", None)
        self._emit(outcomes.request_error(rid, message, self._runtime()))
        self._log_line(rid, 2, "RequestError", message, 0, 0, False, False)

    # -- dispatch -------------------------------------------------------
    #
    # Each warm template keeps one child forked ahead of any request: the
    # child waits on its socket, knowing nothing, until a job is bound to it
    # and its data sent.  Forking is then off the request's critical path.

    def _dispatch(self):
        while self.queue:
            template = next((t for t in self.templates if t.idle), None)
            if template is None:
                return
            self._bind(self.queue.pop(0), template)

    def _prepare(self, template: TemplateProcess):
        """Ask ``template`` to fork its next child, with that child's stdio and socket attached."""
        if template.state is not TemplateState.WARM or template.spare is not None or template.spawning is not None:
            return
        try:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            ours, theirs = socket.socketpair()
            ours.setblocking(False)
        except OSError as exc:
            # The supervisor itself is out of descriptors: stopping with the reason
            # (every job answered) beats queueing jobs no child will ever take.
            raise PoolStartError(f"cannot create a child's pipes: {exc}") from exc
        template.spawning = Spare(out_r=out_r, err_r=err_r, sock=ours)
        try:
            _, data = template.conn.send_request("spawn")
            template.control_deadline = time.monotonic() + CONTROL_BOUND_S
            template.send(data, fds=(out_w, err_w, theirs.fileno()))
        except OSError as exc:
            self._template_failed(template, f"cannot reach the template: {exc}")
        finally:
            os.close(out_w)
            os.close(err_w)
            theirs.close()

    def _on_spawned(self, template: TemplateProcess, reply: Reply):
        spare, template.spawning = template.spawning, None
        template.control_deadline = None
        if spare is None or "pid" not in reply.body or not template.received_fds:
            if spare is not None:
                spare.close()
            self._template_failed(template, f"spawn failed: {reply.body.get('error', 'no pidfd')}")
            return
        spare.pid = reply.body["pid"]
        spare.pidfd = template.received_fds.pop(0)
        template.spare = spare

    def _bind(self, job: Job, template: TemplateProcess):
        """Give ``job`` the template's waiting child and send it the job."""
        spare, template.spare = template.spare, None
        job.life.fire("dispatch")
        job.template = template
        template.job = job
        job.pid, job.pidfd, job.sock = spare.pid, spare.pidfd, spare.sock
        job.streams = {spare.out_r: BoundedBuffer(job.spec.policy.max_output),
                       spare.err_r: BoundedBuffer(job.spec.policy.max_output)}
        job.open_fds = set(job.streams)
        for fd in job.streams:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, lambda _m, j=job, f=fd: self._on_stream(j, f))
        self.selector.register(job.pidfd, selectors.EVENT_READ, lambda _m, j=job: self._on_child_exit(j))
        conn = Connection()
        run_id, data = run_request(conn, job.spec.task, job.spec.policy, self.cwd)
        job.report = ChildReport(conn, run_id)
        job.started_ns = time.monotonic_ns()
        job.deadline_ns = job.started_ns + job.spec.policy.timeout_ms * 1_000_000
        job.life.fire("start")
        try:
            try:
                sent = job.sock.send(data)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                # Only a job near the 1 MiB line limit is larger than the socket
                # buffer; the waiting child is trusted and reads it at once.
                job.sock.settimeout(CONTROL_BOUND_S)
                job.sock.sendall(data[sent:])
                job.sock.setblocking(False)
        except OSError:
            pass  # the child died before its job arrived; its exit status tells the rest
        self.selector.register(job.sock, selectors.EVENT_READ, lambda _m, j=job: self._on_child_wire(j))
        self._prepare(template)

    # -- template control ----------------------------------------------

    def _on_control(self, template: TemplateProcess):
        try:
            data = template.receive()
        except BlockingIOError:
            return
        except OSError as exc:
            self._template_failed(template, f"control socket failed: {exc}")
            return
        if not data:
            self._template_failed(template, "the template closed its control socket")
            return
        template.conn.receive_data(data)
        while template.state in (TemplateState.STARTING, TemplateState.WARM):
            event = template.conn.next_event()
            if event is NEED_DATA or event is EOF:
                return
            if isinstance(event, ProtocolError):
                self._template_failed(template, f"malformed control message: {event.message}")
            elif isinstance(event, Reply):
                self._on_spawned(template, event)
            elif event.op == "ready" and template.state is TemplateState.STARTING:
                template.preloaded = event.body.get("preloaded_modules", [])
                self.abi = event.body.get("landlock_abi")
                template.control_deadline = None
                template.life.fire("ready")
                self.boot_failures = 0
                self._prepare(template)
            elif event.op == "broken":
                self._template_failed(template, str(event.body.get("reason")), boot=True)
            elif event.op == "exited":
                self._on_exited(template, event)
            else:
                self._template_failed(template, f"unexpected control request {event.op!r}")

    def _on_exited(self, template: TemplateProcess, event: Request):
        job, pid = template.job, event.body.get("pid")
        if job is not None and job.pid == pid:
            job.status = event.body.get("status")
            job.exited_ns = job.exited_ns or time.monotonic_ns()
            self._maybe_finish(job)
        elif template.spare is not None and template.spare.pid == pid:
            self._template_failed(template, "a child died while waiting for its job")
            return
        try:
            template.send(template.conn.send_reply(event))
        except OSError as exc:
            self._template_failed(template, f"cannot reach the template: {exc}")

    def _template_failed(self, template: TemplateProcess, reason: str, boot: bool = False):
        if template.state not in (TemplateState.STARTING, TemplateState.WARM):
            return
        was_starting = template.state is TemplateState.STARTING
        template.life.fire("fail")
        self._unregister(template.sock)
        self._unregister(template.pidfd)
        job = template.job
        for spare in (template.spare, template.spawning):
            if spare is not None:
                spare.close()
        template.spare = template.spawning = None
        template.kill()
        if job is not None:
            self._crash(job, f"the template running this job failed: {reason}")
        template.life.fire("replace")
        self.templates.remove(template)
        if was_starting or boot:
            self.boot_failures += 1
            if not self.ready_sent or self.boot_failures >= MAX_BOOT_FAILURES:
                raise PoolStartError(f"template failed to start: {reason}")
        self._start_template(template.index)

    # -- job streams and completion ------------------------------------

    def _on_stream(self, job: Job, fd: int):
        if fd not in job.open_fds:
            return
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        job.streams[fd].feed(data)
        if not data:
            self._unregister(fd)
            os.close(fd)
            job.open_fds.discard(fd)
            self._maybe_finish(job)

    def _on_child_wire(self, job: Job):
        try:
            data = job.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        job.report.take(data, job.sock)
        if not data:
            self._unregister(job.sock)
            job.sock.close()
            job.sock = None
            self._maybe_finish(job)

    def _on_child_exit(self, job: Job):
        self._unregister(job.pidfd)
        job.exited_ns = job.exited_ns or time.monotonic_ns()

    def _kill_child(self, job: Job):
        if job.pidfd is not None:
            try:
                signal.pidfd_send_signal(job.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _maybe_finish(self, job: Job):
        if job.state is not JobState.RUNNING or job.status is None:
            return
        drained = not job.open_fds and job.sock is None
        if not drained and time.monotonic_ns() - job.exited_ns < DRAIN_S * 1e9:
            return
        finished = Finished(status=job.status, timed_out=job.timed_out, report=job.report,
                            stdout=list(job.streams.values())[0], stderr=list(job.streams.values())[1],
                            duration_us=(job.exited_ns - job.started_ns) // 1000)
        job.life.fire("time_out" if job.timed_out else "finish")
        body = result(finished, job.spec.policy, backend_name(self.abi), self._runtime())
        self._complete(job, body)

    def _crash(self, job: Job, message: str):
        self._kill_child(job)
        job.life.fire("crash")
        body = outcomes.worker_error(message, job.spec.policy, backend_name(self.abi), self._runtime())
        self._complete(job, body)

    def _complete(self, job: Job, body: dict):
        queue_us = ((job.started_ns or time.monotonic_ns()) - job.queued_ns) // 1000
        ordered = {"id": job.spec.id, **body, "queue_us": queue_us}
        self._emit(ordered)
        error = body["error"]
        self.stats.record(error["type"] if error else None, body["exit"], body["duration_ms"], queue_us)
        self._log_line(job.spec.id, body["exit"], error["type"] if error else None,
                       error["message"] if error else None, body["duration_ms"], queue_us,
                       job.spec.policy.network, body["stdout_truncated"] or body["stderr_truncated"])
        self._release(job)

    def _release(self, job: Job):
        for fd in job.open_fds:
            self._unregister(fd)
            os.close(fd)
        job.open_fds.clear()
        if job.sock is not None:
            self._unregister(job.sock)
            job.sock.close()
            job.sock = None
        if job.pidfd is not None:
            self._unregister(job.pidfd)
            os.close(job.pidfd)
            job.pidfd = None
        if job.template is not None and job.template.job is job:
            job.template.job = None
        self.in_flight.pop(job.spec.id, None)

    # -- helpers --------------------------------------------------------

    def _unregister(self, fileobj):
        try:
            self.selector.unregister(fileobj)
        except (KeyError, ValueError):
            pass

    def _runtime(self):
        return {**runtime_info("pool"), "preloaded_modules": list(self.preloaded)}

    def _log_line(self, rid, code, error_type, message, duration_ms, queue_us, network, truncated):
        if self.log is None:
            return
        line = {"ts_ms": int(time.time() * 1000), "event": "job", "id": rid, "session": None, "step": None,
                "exit": code, "error": error_type, "message": message, "duration_ms": duration_ms,
                "queue_us": queue_us, "network": "allow" if network else "deny", "truncated": truncated}
        try:
            self.log.write(orjson.dumps(line) + b"\n")
            self.log.flush()
        except OSError:
            pass
