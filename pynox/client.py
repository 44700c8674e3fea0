"""A small Python client for ``pynox pool``: spawn it, send requests, read results.

It speaks only the public JSON Lines protocol, exactly as a client in any
other language would: wait for the ready event, write one request per line,
read lines until the matching id arrives (results come in completion order,
so others are kept for later).
"""

import itertools
import os
import select
import subprocess
import sys
import time

import orjson


class PoolClosed(Exception):
    """The pool exited or closed its stdout before answering."""


class Pool:
    def __init__(self, *args: str, cwd=None, env=None, start_timeout: float = 60.0):
        self.process = subprocess.Popen([sys.executable, "-m", "pynox", "pool", *args], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, cwd=cwd, env=env)
        self._buffer = b""
        self._kept = {}
        self._ids = itertools.count(1)
        self.ready = self.read(timeout=start_timeout)
        if self.ready.get("event") != "ready":
            raise PoolClosed(f"expected the ready event, got {self.ready!r}")

    def send_line(self, line: bytes) -> None:
        self.process.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        self.process.stdin.flush()

    def send(self, request: dict) -> None:
        self.send_line(orjson.dumps(request))

    def read(self, timeout: float = 60.0) -> dict:
        """The next line the pool writes, parsed."""
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError(f"no line from the pool within {timeout}s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise PoolClosed(f"the pool closed its output (exit {self.process.poll()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return orjson.loads(line)

    def wait_for(self, rid, timeout: float = 60.0) -> dict:
        """The answer whose id is ``rid``; other answers are kept for later."""
        deadline = time.monotonic() + timeout
        while rid not in self._kept:
            message = self.read(max(0.0, deadline - time.monotonic()))
            self._kept[message.get("id")] = message
        return self._kept.pop(rid)

    def run(self, code: str | None = None, *, wait: float = 60.0, **fields) -> dict:
        """Send one job (``fields`` are request fields) and return its result within ``wait`` seconds."""
        rid = fields.pop("id", None) or f"py-{next(self._ids)}"
        request = {"id": rid, **fields}
        if code is not None:
            request["code"] = code
        self.send(request)
        return self.wait_for(rid, wait)

    def stats(self) -> dict:
        rid = f"stats-{next(self._ids)}"
        self.send({"id": rid, "stats": True})
        return self.wait_for(rid)

    def close(self, timeout: float = 30.0) -> int:
        """EOF on stdin: the pool drains accepted jobs and exits."""
        if not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
