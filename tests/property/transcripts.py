"""Replay the conversations in ``spec/*.jsonl`` against a real ``pynox pool``.

A transcript is one conversation with a pool, one JSON object per line, each
with exactly one key (spec/README.md is the reference):

* ``pool``: first line only; ``args`` after ``pynox pool``, ``config`` (TOML
  text or null) and ``files`` to create in a fresh working directory.
* ``send`` / ``send_text`` / ``send_hex`` / ``send_oversized``: one line to
  the pool's stdin (an object, verbatim text, hex bytes, or an N-byte line).
* ``recv``: a pattern the next line the pool writes must match.

After the last entry stdin is closed: the pool must write nothing more and
exit 0, so a transcript accounts for every line the pool wrote.

The matcher is deliberately small and strict so that client authors in any
language can reimplement it; :func:`mismatch` returns None when a value
matches, else a sentence naming the first place it does not.
"""

import os
import tempfile
from pathlib import Path

import orjson

from pynox.client import Pool, PoolClosed

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
SEND_KEYS = ("send", "send_text", "send_hex", "send_oversized")
ENTRY_KEYS = ("pool", "recv", *SEND_KEYS)
OVERSIZED_HEAD = b'{"id": "big", "code": "'
OVERSIZED_TAIL = b'"}'
CONFIG_NAME = "pynox.toml"
RECV_TIMEOUT = 60.0

# Placeholder strings and the values they match.  bool is an int subclass in
# Python but never a number in JSON, so it is excluded explicitly.
KINDS = {
    "$any": lambda v: True,
    "$int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "$number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "$str": lambda v: isinstance(v, str),
    "$bool": lambda v: isinstance(v, bool),
    "$list": lambda v: isinstance(v, list),
    "$object": lambda v: isinstance(v, dict),
}
CONTAINS = "$str~"


class TranscriptError(Exception):
    """The transcript file itself is malformed (not a pool failure)."""


class Mismatch(AssertionError):
    """A line from the pool did not match the transcript's pattern."""


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def mismatch(pattern, value, path: str = "$"):
    """None if ``value`` matches ``pattern``; otherwise where and why it does not."""
    if isinstance(pattern, str):
        if pattern in KINDS:
            return None if KINDS[pattern](value) else f"{path}: expected {pattern}, got {value!r}"
        if pattern.startswith(CONTAINS):
            needle = pattern[len(CONTAINS):]
            if isinstance(value, str) and needle in value:
                return None
            return f"{path}: expected a string containing {needle!r}, got {value!r}"
        return None if value == pattern and isinstance(value, str) else f"{path}: expected {pattern!r}, got {value!r}"
    if isinstance(pattern, dict):
        if not isinstance(value, dict):
            return f"{path}: expected an object, got {_kind(value)} {value!r}"
        missing = [k for k in pattern if k not in value]
        extra = [k for k in value if k not in pattern]
        if missing or extra:
            return f"{path}: keys differ (missing {missing}, unexpected {extra})"
        for key, sub in pattern.items():
            problem = mismatch(sub, value[key], f"{path}.{key}")
            if problem:
                return problem
        return None
    if isinstance(pattern, list):
        if not isinstance(value, list):
            return f"{path}: expected a list, got {_kind(value)} {value!r}"
        if len(pattern) != len(value):
            return f"{path}: expected {len(pattern)} elements, got {len(value)}: {value!r}"
        for index, (sub, item) in enumerate(zip(pattern, value)):
            problem = mismatch(sub, item, f"{path}[{index}]")
            if problem:
                return problem
        return None
    # null, booleans and numbers: equal values of the same JSON kind (1 and
    # true differ; 1 and 1.0 are the same JSON number).
    if _kind(pattern) != _kind(value) or pattern != value:
        return f"{path}: expected {pattern!r}, got {value!r}"
    return None


def matches(pattern, value) -> bool:
    return mismatch(pattern, value) is None


def load(path) -> list:
    """The entries of a transcript, checked for shape; raises TranscriptError."""
    path = Path(path)
    entries = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path.name}:{number}"
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise TranscriptError(f"{where}: not JSON: {exc}") from None
        if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in ENTRY_KEYS:
            raise TranscriptError(f"{where}: expected an object with exactly one of {ENTRY_KEYS}")
        key, value = next(iter(entry.items()))
        if (key == "pool") != (not entries):
            raise TranscriptError(f"{where}: 'pool' must be the first line, and only the first")
        if key == "pool":
            if not isinstance(value, dict) or set(value) != {"args", "config", "files"}:
                raise TranscriptError(f"{where}: pool needs exactly args, config and files")
            if not all(isinstance(a, str) for a in value["args"]):
                raise TranscriptError(f"{where}: pool.args must be strings")
            if value["config"] is not None and not isinstance(value["config"], str):
                raise TranscriptError(f"{where}: pool.config must be TOML text or null")
            for name, content in value["files"].items():
                if os.path.isabs(name) or ".." in Path(name).parts or not isinstance(content, str):
                    raise TranscriptError(f"{where}: files maps relative paths to text, got {name!r}")
        elif key == "send" and not isinstance(value, dict):
            raise TranscriptError(f"{where}: send takes an object (use send_text for anything else)")
        elif key == "send_text" and (not isinstance(value, str) or "\n" in value):
            raise TranscriptError(f"{where}: send_text takes a string without a newline")
        elif key == "send_hex":
            try:
                data = bytes.fromhex(value)
            except (TypeError, ValueError):
                raise TranscriptError(f"{where}: send_hex takes hex digits") from None
            if b"\n" in data:
                raise TranscriptError(f"{where}: send_hex bytes may not contain a newline")
        elif key == "send_oversized" and (isinstance(value, bool) or not isinstance(value, int)
                                          or value < len(OVERSIZED_HEAD) + len(OVERSIZED_TAIL)):
            raise TranscriptError(f"{where}: send_oversized takes a byte count")
        entries.append(entry)
    if not entries:
        raise TranscriptError(f"{path.name}: empty transcript")
    return entries


def oversized_line(size: int) -> bytes:
    """A request line of exactly ``size`` bytes (without its newline)."""
    padding = size - len(OVERSIZED_HEAD) - len(OVERSIZED_TAIL)
    return OVERSIZED_HEAD + b"a" * padding + OVERSIZED_TAIL


def line_for(key, value) -> bytes:
    """The bytes (without the newline) a send entry writes."""
    if key == "send":
        return orjson.dumps(value)
    if key == "send_text":
        return value.encode("utf-8")
    if key == "send_hex":
        return bytes.fromhex(value)
    if key == "send_oversized":
        return oversized_line(value)
    raise TranscriptError(f"not a send entry: {key}")


def prepare(directory: Path, setup: dict) -> list:
    """Create the files and config in ``directory``; the pool's command-line args."""
    for name, content in setup["files"].items():
        target = directory / name
        if name.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    args = list(setup["args"])
    if setup["config"] is not None:
        (directory / CONFIG_NAME).write_text(setup["config"])
        args += ["--config", str(directory / CONFIG_NAME)]
    return args


def replay(path, directory=None, recv_timeout: float = RECV_TIMEOUT) -> int:
    """Run the transcript at ``path`` against a real pool; the number of lines matched.

    Raises Mismatch naming the transcript line when the pool's output differs.
    """
    path = Path(path)
    entries = load(path)
    with tempfile.TemporaryDirectory(prefix="pynox-spec-") as scratch:
        cwd = Path(directory) if directory is not None else Path(scratch)
        args = prepare(cwd, entries[0]["pool"])
        with Pool(*args, cwd=cwd) as pool:
            # The client consumes the ready line itself; it is the pool's first line.
            unread = [pool.ready]
            matched = 0
            for number, entry in enumerate(entries[1:], 2):
                key, value = next(iter(entry.items()))
                if key != "recv":
                    pool.send_line(line_for(key, value))
                    continue
                try:
                    got = unread.pop(0) if unread else pool.read(recv_timeout)
                except (TimeoutError, PoolClosed) as exc:
                    raise Mismatch(f"{path.name} entry {number}: no line from the pool ({exc})") from None
                problem = mismatch(value, got)
                if problem:
                    raise Mismatch(f"{path.name} entry {number}: {problem}\n  line: {orjson.dumps(got).decode()}")
                matched += 1
            if unread:
                raise Mismatch(f"{path.name}: the transcript never reads the ready event")
            pool.process.stdin.close()
            try:
                extra = pool.read(recv_timeout)
            except PoolClosed:
                extra = None
            if extra is not None:
                raise Mismatch(f"{path.name}: the pool wrote a line the transcript does not expect: {extra!r}")
            code = pool.close()
            if code != 0:
                raise Mismatch(f"{path.name}: the pool exited {code} after EOF, not 0")
            return matched
