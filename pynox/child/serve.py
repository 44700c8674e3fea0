"""The life of one child: await its job, confine, run, report, exit.

A child is forked before it knows its job (so a pool can fork ahead of
requests); its trusted parent then sends one ``run`` request over the wire
socket with the resolved task and policy.  The child confines itself with
what the parent compiled before the fork, runs the task, replies once, and
always leaves through ``os._exit`` so no parent state (atexit handlers,
buffered files) runs twice.  After confinement the socket is reachable by
the task too: the parent trusts nothing it reads there beyond this job.
"""

import os
import site
import socket
import sys
from dataclasses import dataclass

from pynox.child import confine, limits
from pynox.child.execute import Task, run_task
from pynox.child.hints import Grants
from pynox.errors import SandboxSetupError
from pynox.policy import Policy
from pynox.wire import EOF, NEED_DATA, Connection, Request

# Exit status of a child whose confinement failed; its reply says which step.
SETUP_FAILED = 125


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What the forking parent prepared for every child it makes."""

    landlock_abi: int
    seccomp_programs: dict  # network allowed (bool) -> seccomp.Program
    parent_pid: int
    new_session: bool
    hint_style: str  # "cli" or "pool"


# Imported once by a template rather than by every job: a job that imports
# them finds them loaded, and a job cannot change what the next one sees.
COMMON_STDLIB = ("json", "re", "math", "random", "collections", "itertools", "functools", "datetime", "string",
                 "textwrap", "dataclasses", "typing", "pathlib", "base64", "hashlib", "statistics", "csv", "io")


def warm(ctx: Context) -> None:
    """Do once in the forking parent what every child would otherwise redo."""
    import importlib

    import gc

    from pynox.child import landlock, privileges
    from pynox.policy import runtime_rule_paths

    runtime_rule_paths()
    landlock.handled_fs(ctx.landlock_abi)
    privileges.last_capability()
    for name in COMMON_STDLIB:
        importlib.import_module(name)
    # Objects that exist now are the template's: a child's collector never
    # walks them, so it does not dirty (copy) their pages after fork.
    gc.collect()
    gc.freeze()


def run_request(conn: Connection, task: Task, policy: Policy, cwd: str) -> tuple:
    """(id, bytes) of the ``run`` request a parent sends a waiting child: the one
    job message, shaped here beside :func:`_serve`, which reads it."""
    return conn.send_request("run", task={"kind": task.kind, "target": task.target, "name": task.name,
                                          "args": list(task.args)},
                             policy=policy_to_wire(policy), cwd=cwd)


def policy_to_wire(policy: Policy) -> dict:
    return {name: getattr(policy, name) for name in Policy.__slots__}


def policy_from_wire(data: dict) -> Policy:
    fields = {name: tuple(value) if isinstance(value, list) else value for name, value in data.items()}
    return Policy(**fields)


def clean_text(text: str) -> str:
    """Text that always encodes: lone surrogates become U+FFFD."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _await_run(sock: socket.socket, conn: Connection) -> Request:
    while True:
        event = conn.next_event()
        if event is NEED_DATA:
            conn.receive_data(sock.recv(1 << 16))
        elif event is EOF:
            raise EOFError("parent closed before sending a job")
        elif isinstance(event, Request) and event.op == "run":
            return event
        else:
            raise RuntimeError(f"unexpected message before the job: {event!r}")


def _prime_finder(directory: str) -> None:
    """List ``directory`` for the import system before confinement hides it.

    ``-m`` finds a module beside the working directory, whose listing the
    sandbox denies; the module's own files are granted, and a finder primed
    here knows their names.
    """
    for hook in sys.path_hooks:
        try:
            finder = hook(directory)
        except ImportError:
            continue
        finder.find_spec("__pynox_prime__")
        sys.path_importer_cache[directory] = finder
        return


def plan_for(policy: Policy, ctx: Context) -> confine.Plan:
    return confine.Plan(
        ruleset=policy.ruleset(ctx.landlock_abi),
        seccomp_program=ctx.seccomp_programs[policy.network],
        rlimits=limits.rlimits_for(memory_bytes=policy.memory_bytes, max_file_size=policy.max_file_size,
                                   timeout_ms=policy.timeout_ms),
        environ=policy.environ(),
    )


def _rehearse(ctx: Context) -> None:
    """Walk the job's path once on a default policy while no job waits.

    After fork every first write to a page shared with the template copies
    it (reference counts make even reading Python objects a write), and each
    copy costs microseconds on a virtual machine; taking them here moves
    them off the job's critical path.  Nothing here is applied.
    """
    policy = Policy(network=next(iter(ctx.seccomp_programs)))  # a variant this parent compiled
    plan = plan_for(policy_from_wire(policy_to_wire(policy)), ctx)
    confine.set_environment(plan.environ)
    Grants(read=policy.read_paths(), write=(), network=False, memory_bytes=policy.memory_bytes,
           max_file_size=policy.max_file_size, style=ctx.hint_style)
    compile("import json\nprint(json.dumps({'ok': [1, 2.0, None]}))\n", "<rehearsal>", "exec")


# A job's code may fill a whole 1 MiB request line; its run message adds the
# resolved policy on top.
RUN_MESSAGE_MAX = 4 << 20


def _serve(sock: socket.socket, ctx: Context) -> int:
    conn = Connection(max_line=RUN_MESSAGE_MAX)
    early_failure = None
    try:
        confine.prepare(confine.Preparation(keep_fds=(sock.fileno(),), parent_pid=ctx.parent_pid,
                                            new_session=ctx.new_session))
        _rehearse(ctx)
    except SandboxSetupError as exc:
        early_failure = exc  # reported as the answer to the job, when it comes
    except Exception as exc:  # a bug in pynox, still answered as data
        early_failure = SandboxSetupError("rehearsal", f"{type(exc).__name__}: {exc}")
    request = _await_run(sock, conn)
    policy = policy_from_wire(request.body["policy"])
    task = Task(**{k: tuple(v) if k == "args" else v for k, v in request.body["task"].items()})
    try:
        if early_failure is not None:
            raise early_failure
        try:
            os.chdir(request.body["cwd"])
        except OSError as exc:
            raise SandboxSetupError("working-directory", f"{exc.strerror}: {request.body['cwd']}") from exc
        if task.kind == "module":
            _prime_finder(os.getcwd())
        confine.apply(plan_for(policy, ctx))
    except SandboxSetupError as exc:
        sock.sendall(conn.send_reply(request, setup_error={"step": exc.step, "message": clean_text(exc.detail)}))
        return SETUP_FAILED
    # Said before the task runs, so the parent knows any later line is the task's.
    _, started = conn.send_request("started")
    sock.sendall(started)
    for directory in policy.package_dirs:
        site.addsitedir(directory)
    grants = Grants(read=policy.read_paths(), write=policy.allow_write, network=policy.network,
                    memory_bytes=policy.memory_bytes, max_file_size=policy.max_file_size, style=ctx.hint_style)
    outcome = run_task(task, grants)
    error = outcome.error
    if error is not None:
        error = {k: clean_text(v) if isinstance(v, str) else v for k, v in error.items()}
    try:
        sock.sendall(conn.send_reply(request, exit=outcome.exit, error=error))
    except OSError:
        pass  # the task closed or broke its own report channel; the exit status still counts
    return outcome.exit


def serve(sock: socket.socket, ctx: Context):
    """Run one job in this freshly forked process; never returns."""
    code = SETUP_FAILED
    try:
        code = _serve(sock, ctx)
    except BaseException as exc:  # nothing may escape into the parent's code
        try:
            os.write(2, f"pynox: child failed before running the task: {exc!r}\n".encode())
        except OSError:
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)
