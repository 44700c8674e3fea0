"""Error types shared by the launcher, the pool and the child.

They cross process boundaries as data: :func:`error_dict` is the one shape
of an ``error`` in every result, whoever found it.
"""


def error_dict(type_name: str, message: str, hint: str | None = None) -> dict:
    """An ``error`` object found by pynox itself (no task file or line)."""
    return {"type": type_name, "message": message, "file": None, "line": None, "hint": hint}


class PynoxError(Exception):
    """Base class for errors pynox itself raises (never the task's own)."""


class UsageError(PynoxError):
    """Invalid pynox options or configuration: exit 2 on the command line."""



class RequestError(PynoxError):
    """A pool request that cannot run as written; nothing ran."""



class SandboxSetupError(PynoxError):
    """A confinement step could not be applied, so the task did not run."""


    def __init__(self, step: str, detail: str):
        super().__init__(f"sandbox setup failed at step {step!r}: {detail}")
        self.step = step
        self.detail = detail
