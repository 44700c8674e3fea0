"""Error types shared by the launcher, the pool and the child.

They cross process boundaries as data (``{"type": ..., "message": ...}``), so
each carries the ``type`` name a client sees in a result.
"""


class PynoxError(Exception):
    """Base class for errors pynox itself raises (never the task's own)."""

    type_name = "PynoxError"


class UsageError(PynoxError):
    """Invalid pynox options or configuration: exit 2 on the command line."""

    type_name = "UsageError"


class RequestError(PynoxError):
    """A pool request that cannot run as written; nothing ran."""

    type_name = "RequestError"


class SandboxSetupError(PynoxError):
    """A confinement step could not be applied, so the task did not run."""

    type_name = "SandboxSetupError"

    def __init__(self, step: str, detail: str):
        super().__init__(f"sandbox setup failed at step {step!r}: {detail}")
        self.step = step
        self.detail = detail
