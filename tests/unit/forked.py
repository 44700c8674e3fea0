"""Run a probe in a forked child, so the kernel restrictions it applies end with it."""

import ast
import os


def run_in_child(body):
    """Run ``body()`` in a forked child; return the dict it produced."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            os.close(r)
            try:
                result = body()
            except BaseException as exc:  # noqa: BLE001
                result = {"setup_error": repr(exc)}
            os.write(w, repr(result).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    return ast.literal_eval(b"".join(chunks).decode())


def outcome(fn):
    try:
        value = fn()
    except OSError as exc:
        return ("error", type(exc).__name__, exc.errno)
    return ("ok", value)
