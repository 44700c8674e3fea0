"""Bounded capture of a task's output.

A task may print gigabytes or write raw bytes to fd 1; the reader keeps the
first ``limit`` bytes, counts the rest as truncated, and keeps draining so
the task never stalls on a full pipe and pynox never holds more than the
limit.
"""


class BoundedBuffer:
    def __init__(self, limit: int):
        self._limit = limit
        self._chunks = []
        self._size = 0
        self.truncated = False

    def feed(self, data: bytes) -> None:
        room = self._limit - self._size
        if len(data) > room:
            self.truncated = True
            data = data[:room]
        if data:
            self._chunks.append(data)
            self._size += len(data)

    def text(self) -> str:
        """The kept bytes as text; bytes that are not UTF-8 are replaced."""
        return b"".join(self._chunks).decode("utf-8", "replace")
