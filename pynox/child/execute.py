"""Run the task's code as ``__main__`` inside the confined child.

The child is a fork of a trusted interpreter, not a new one, so this module
does what CPython's own startup would: a fresh ``__main__`` module, argv and
``sys.path[0]`` for a script, ``-c`` code or ``-m`` module, SystemExit
semantics, and a traceback without pynox's frames.  It returns the outcome
as data (exit code and error dict) for the caller to report.
"""

import atexit
import ctypes
import linecache
import os
import runpy
import sys
import threading
import traceback
import types
from dataclasses import dataclass

import pynox
from pynox.child.hints import Grants, hint_for

_libc = ctypes.CDLL(None)
_INTERNAL_FILES = (os.path.dirname(pynox.__file__) + os.sep, runpy.__file__, "<frozen runpy>")


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """What to run: exactly one of code, script or module."""

    kind: str  # "code", "script" or "module"
    target: str  # the code text, the script's absolute path, or the module name
    name: str  # the file name tracebacks show for code
    args: tuple


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    exit: int
    error: dict | None


def _is_internal(filename: str) -> bool:
    return filename.startswith(_INTERNAL_FILES)


def _strip_internal(tb):
    while tb is not None and _is_internal(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _fresh_main(filename: str) -> dict:
    main = types.ModuleType("__main__")
    main.__file__ = filename
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    return main.__dict__


def _run(task: Task) -> None:
    if task.kind == "code":
        sys.argv = ["-c", *task.args]
        sys.path[0:1] = [""]
        namespace = _fresh_main(task.name)
        # Tracebacks (and hints) then quote the task's own lines.
        linecache.cache[task.name] = (len(task.target), None, task.target.splitlines(True), task.name)
        code = compile(task.target, task.name, "exec")
        exec(code, namespace)
    elif task.kind == "script":
        sys.argv = [task.target, *task.args]
        sys.path[0:1] = [os.path.dirname(task.target)]
        namespace = _fresh_main(task.target)
        with open(task.target, "rb") as f:
            source = f.read()
        exec(compile(source, task.target, "exec"), namespace)
    elif task.kind == "module":
        sys.argv = [task.target, *task.args]
        sys.path[0:1] = [os.getcwd()]
        runpy.run_module(task.target, run_name="__main__", alter_sys=True)
    else:
        raise ValueError(f"unknown task kind {task.kind!r}")


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _location(exc: BaseException, frames, task: Task):
    main_file = task.name if task.kind == "code" else task.target
    if isinstance(exc, SyntaxError) and exc.filename:
        return exc.filename, exc.lineno
    for frame in reversed(frames):
        if frame.filename == main_file:
            return frame.filename, frame.lineno
    if frames:
        return frames[-1].filename, frames[-1].lineno
    return None, None


# Error types only pynox itself reports; a task's class of the same name is
# reported with its module, so it can never pass for pynox's verdict.
PYNOX_ERROR_TYPES = frozenset({"RequestError", "SignalError", "SandboxSetupError", "PoolWorkerError"})


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    if cls.__name__ in PYNOX_ERROR_TYPES:
        return f"{cls.__module__}.{cls.__qualname__}"
    return cls.__name__


def _describe(exc: BaseException, grants: Grants, task: Task) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)
    context = " ".join(f"{f.filename} {f.line or ''}" for f in frames)
    file, line = _location(exc, frames, task)
    return {
        "type": _type_name(exc),
        "message": str(exc),
        "file": file,
        "line": line,
        "hint": hint_for(exc, grants, context),
    }


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream has nothing left to lose
            pass


def _finalize():
    """What CPython does after ``__main__`` returns, in its order.

    The child leaves through ``os._exit``, which skips interpreter shutdown:
    so wait for the task's non-daemon threads, run its atexit handlers, flush
    Python's streams and then C's stdio buffers, as ``Py_FinalizeEx`` and
    ``exit()`` would.
    """
    try:
        threading._shutdown()
    except BaseException:  # an interrupted wait must not lose the output so far
        pass
    atexit._run_exitfuncs()
    _flush()
    _libc.fflush(None)


def run_task(task: Task, grants: Grants) -> Outcome:
    """Run ``task`` here and now; print its traceback like Python would."""
    sys.dont_write_bytecode = True
    atexit._clear()  # handlers of the trusted parent are not the task's
    try:
        _run(task)
    except SystemExit as exc:
        outcome = Outcome(exit=_exit_code(exc), error=None)
    except BaseException as exc:  # the task's own failure, reported as data
        exc.__traceback__ = _strip_internal(exc.__traceback__)
        error = _describe(exc, grants, task)
        try:
            traceback.print_exception(exc)
        except Exception:
            print(f"{error['type']}: {error['message']}", file=sys.stderr)
        if error["hint"] and grants.style == "cli":
            # On a terminal the hint follows the traceback; the pool puts it in the result only.
            print(f"pynox: {error['hint']}", file=sys.stderr)
        outcome = Outcome(exit=130 if isinstance(exc, KeyboardInterrupt) else 1, error=error)
    else:
        outcome = Outcome(exit=0, error=None)
    _finalize()
    return outcome
