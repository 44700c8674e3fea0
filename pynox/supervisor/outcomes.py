"""Results the pool makes itself, and the counters a stats request reads.

Results of jobs that ran come from :func:`pynox.single_run.result`; this
module adds the shapes of requests that never ran (RequestError) or that
the pool failed (PoolWorkerError), in the same shape so a client parses one
kind of line, and counts every answer by outcome and error type.
"""

import time
from collections import Counter

from pynox.errors import error_dict

REQUEST_ERROR_EXIT = 2
WORKER_ERROR_EXIT = 125
TIMEOUT_EXIT = 124
MAX_ERROR_TYPES = 256
OTHER_ERRORS = "(other)"


def _shape(rid, code, error, runtime, policy):
    return {"id": rid, "exit": code, "stdout": "", "stderr": "", "error": error,
            "stdout_truncated": False, "stderr_truncated": False, "duration_ms": 0, "duration_us": 0,
            "queue_us": 0, "runtime": runtime, "policy": policy}


def request_error(rid, message, runtime) -> dict:
    """Nothing ran: the request itself was wrong (``policy`` is null)."""
    return _shape(rid, REQUEST_ERROR_EXIT, error_dict("RequestError", message), runtime, None)


def worker_error(message, policy, backend, runtime) -> dict:
    """The pool lost the job's template; the job is not retried."""
    body = _shape(None, WORKER_ERROR_EXIT, error_dict("PoolWorkerError", message), runtime, policy.describe(backend))
    del body["id"], body["queue_us"]
    return body


class Stats:
    def __init__(self, workers: int):
        self.started = time.monotonic()
        self.workers = workers
        self.counts = Counter()
        self.errors = Counter()
        self.duration_ms_total = 0
        self.queue_us_total = 0

    def record(self, error_type, code, duration_ms=0, queue_us=0) -> None:
        """Count one answered request; the outcome counters are disjoint."""
        self.counts["jobs"] += 1
        if error_type == "RequestError":
            outcome = "request_errors"
        elif error_type in ("PoolWorkerError", "SandboxSetupError"):
            outcome = "worker_errors"
        elif error_type == "TimeoutError" and code == TIMEOUT_EXIT:
            outcome = "timeouts"
        elif error_type == "SignalError":
            outcome = "signals"
        elif error_type is None and code == 0:
            outcome = "ok"
        else:
            outcome = "failed"
        self.counts[outcome] += 1
        if error_type is not None:
            # Task-chosen class names are bounded in length and in number, so
            # the counters (and every stats answer) stay small.
            if error_type in self.errors or len(self.errors) < MAX_ERROR_TYPES:
                self.errors[error_type] += 1
            else:
                self.errors[OTHER_ERRORS] += 1
        self.duration_ms_total += duration_ms
        self.queue_us_total += queue_us

    def snapshot(self, sessions_active=0) -> dict:
        names = ("jobs", "ok", "failed", "timeouts", "signals", "request_errors", "worker_errors")
        return {"uptime_ms": int((time.monotonic() - self.started) * 1000), "workers": self.workers,
                "sessions_active": sessions_active, **{n: self.counts[n] for n in names},
                "duration_ms_total": self.duration_ms_total, "queue_us_total": self.queue_us_total,
                "errors": dict(self.errors)}
