"""Fixtures for the end-to-end suite: every test runs the real ``pynox``.

Nothing here is mocked.  ``pynox`` runs as ``python -m pynox`` in a
subprocess, and tests check the *effect* of what the task tried (file bytes,
mode and mtime unchanged, nothing created, no connection accepted, the
launcher alive) rather than only the error the task saw.

pytest's ``tmp_path`` lives under /tmp, which the sandbox hides unless
granted.  The ``fs`` fixture makes three sibling directories there: ``ro``
(granted with --allow-read), ``rw`` (granted with --allow-write) and
``outside`` (never granted), so "outside" targets are real files right next
to the grants.
"""

import ctypes
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

PYNOX = [sys.executable, "-m", "pynox"]
DEFAULT_TIMEOUT = 30  # seconds for subprocess.run; every test is far quicker
RESULT_KEYS = {"exit", "stdout", "stderr", "error", "stdout_truncated", "stderr_truncated", "duration_ms",
               "duration_us", "runtime", "policy"}
ERROR_KEYS = {"type", "message", "file", "line", "hint"}


@dataclass(repr=False)
class Run:
    """One finished ``pynox`` process."""

    args: list
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def result(self) -> dict:
        """The ``--json`` result: exactly one JSON object on stdout."""
        lines = self.stdout.splitlines()
        assert len(lines) == 1, f"expected one JSON line on stdout, got {self.stdout!r} (stderr {self.stderr!r})"
        result = json.loads(lines[0])
        assert RESULT_KEYS <= set(result), f"result lacks keys {RESULT_KEYS - set(result)}: {result}"
        if result["error"] is not None:
            assert ERROR_KEYS <= set(result["error"]), result["error"]
        assert self.returncode == result["exit"], (self.returncode, result)
        return result

    def __repr__(self):
        return (f"pynox {self.args!r} -> {self.returncode} in {self.seconds:.2f}s\n"
                f"stdout: {self.stdout[-3000:]!r}\nstderr: {self.stderr[-3000:]!r}")


def scrubbed_env(extra=None) -> dict:
    """The test's environment, minus anything that would change how Python starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra or {})
    return env


class Pynox:
    """Runs ``python -m pynox ARGS`` from a working directory nobody granted."""

    def __init__(self, cwd: Path):
        self.cwd = cwd

    def run(self, *args, input=None, env=None, cwd=None, timeout=DEFAULT_TIMEOUT, prefix=(), **popen) -> Run:
        """Run ``[*prefix, python, -m, pynox, *args]``; ``popen`` goes to subprocess.run."""
        argv = [*prefix, *PYNOX, *map(str, args)]
        start = time.monotonic()
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, errors="replace",
                              cwd=str(cwd or self.cwd), env=scrubbed_env(env), timeout=timeout, **popen)
        return Run(args=[str(a) for a in args], returncode=proc.returncode, stdout=proc.stdout,
                   stderr=proc.stderr, seconds=time.monotonic() - start)

    def run_many(self, argvs, workers=3, **kwargs) -> list:
        """Run independent invocations concurrently (each its own pynox process); results in order."""
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda args: self.run(*args, **kwargs), argvs))

    def json(self, *args, **kwargs) -> dict:
        """Run with ``--json`` and return the parsed result (checked for shape)."""
        return self.run("--json", *args, **kwargs).result

    def task(self, code, *, ro=(), rw=(), extra=(), **kwargs) -> dict:
        """``pynox --json`` running ``code`` with the given read and write grants."""
        grants = [x for p in ro for x in ("--allow-read", p)] + [x for p in rw for x in ("--allow-write", p)]
        return self.json(*grants, *extra, "-c", code, **kwargs)


    def batch(self, probes: dict, *, prelude="", ro=(), rw=(), extra=(), **kwargs):
        """Run many independent probes in ONE confined task (see BATCH_DRIVER).

        Returns ``(result, outcomes)``: the --json result, and for each probe
        name that finished, ``{"ok": bool, "value": ..., "type", "errno",
        "message"}``.  A probe missing from ``outcomes`` never finished (the
        task died or hung before it), which a test reports as a failure.
        Probes share nothing but the prelude's names, and each targets its
        own files, so their effects can still be checked one by one.
        """
        code = BATCH_DRIVER.format(prelude=prelude, probes=list(probes.items()))
        result = self.task(code, ro=ro, rw=rw, extra=extra, **kwargs)
        outcomes = {}
        for line in result["stdout"].splitlines():
            if line.startswith(BATCH_MARK):
                outcome = json.loads(line[len(BATCH_MARK):])
                outcomes[outcome.pop("name")] = outcome
        return result, outcomes

    def group(self, probes: dict, **kwargs) -> "Group":
        """Like :meth:`batch` for ``{name: (code, watched paths)}``: the state of
        each probe's watched paths is recorded before the run, so a test can
        check that *its* probe changed nothing."""
        before = {name: state(watched) for name, (_, watched) in probes.items()}
        result, outcomes = self.batch({name: code for name, (code, _) in probes.items()}, **kwargs)
        return Group(result=result, outcomes=outcomes, before=before,
                     watched={name: list(watched) for name, (_, watched) in probes.items()})


def state(paths) -> dict:
    """The snapshot of each path, or None where nothing exists."""
    return {str(p): (snapshot(p) if os.path.lexists(p) else None) for p in paths}


@dataclass
class Group:
    """The outcome of a batch of probes, checked one probe at a time."""

    result: dict
    outcomes: dict
    before: dict
    watched: dict

    def outcome(self, name) -> dict:
        assert name in self.outcomes, f"probe {name!r} never reported (the task ended early): {self.result}"
        return self.outcomes[name]

    def assert_unchanged(self, name):
        after = state(self.watched[name])
        for path, was in self.before[name].items():
            assert after[path] == was, f"probe {name!r} changed {path}: {was} -> {after[path]}"

    def assert_denied(self, name, types=("PermissionError",)) -> dict:
        """The probe raised one of ``types`` and left its watched paths as they were."""
        outcome = self.outcome(name)
        assert outcome["ok"] is False, f"probe {name!r} succeeded: {outcome}"
        assert outcome["type"] in types, f"probe {name!r} failed, but not as a denial: {outcome}"
        self.assert_unchanged(name)
        return outcome


BATCH_MARK = "@@probe "
# Each probe runs in a fresh namespace seeded with the prelude's names; its
# outcome is printed (and flushed) as soon as it finishes, so a probe that
# kills the task still leaves the earlier outcomes behind.
BATCH_DRIVER = """\
import json as _json, sys as _sys
{prelude}
_base = dict(globals())
for _name, _code in {probes!r}:
    _ns = dict(_base)
    try:
        exec(compile(_code, _name, "exec"), _ns)
        _out = {{"ok": True, "value": _ns.get("value")}}
    except BaseException as _e:
        _out = {{"ok": False, "type": type(_e).__name__, "errno": getattr(_e, "errno", None), "message": str(_e)}}
    _out["name"] = _name
    _sys.stdout.write("@@probe " + _json.dumps(_out, default=repr) + "\\n")
    _sys.stdout.flush()
"""


@pytest.fixture
def pynox(tmp_path) -> Pynox:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return Pynox(cwd)


@pytest.fixture(scope="module")
def module_pynox(tmp_path_factory) -> Pynox:
    """A runner for module-scoped fixtures that batch many probes into one run."""
    return Pynox(tmp_path_factory.mktemp("cwd"))


@dataclass
class Dirs:
    ro: Path  # granted read-only
    rw: Path  # granted read-write
    outside: Path  # not granted at all
    ro_file: Path
    outside_file: Path

    @property
    def grants(self) -> dict:
        return {"ro": [self.ro], "rw": [self.rw]}


@pytest.fixture
def fs(tmp_path) -> Dirs:
    return make_dirs(tmp_path)


@pytest.fixture(scope="module")
def make_fs(tmp_path_factory):
    """Factory for a fresh ``fs`` layout in module-scoped fixtures: ``make_fs("name")``."""
    return lambda name: make_dirs(tmp_path_factory.mktemp(name))


def make_dirs(base: Path) -> Dirs:
    ro, rw, outside = base / "ro", base / "rw", base / "outside"
    for d in (ro, rw, outside):
        d.mkdir()
    ro_file = ro / "data.txt"
    ro_file.write_text("read-only content\n")
    ro_file.chmod(0o644)
    outside_file = outside / "secret.txt"
    outside_file.write_text("outside secret\n")
    # An old, distinctive mtime makes any touch visible.
    for f in (ro_file, outside_file):
        os.utime(f, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    return Dirs(ro=ro, rw=rw, outside=outside, ro_file=ro_file, outside_file=outside_file)


def snapshot(path: Path) -> dict:
    """Everything about a file a confined task must not be able to change."""
    st = os.lstat(path)
    try:
        xattrs = {name: os.getxattr(path, name) for name in os.listxattr(path, follow_symlinks=False)}
    except OSError:
        xattrs = None
    return {
        "content": Path(path).read_bytes() if stat.S_ISREG(st.st_mode) else None,
        "mode": st.st_mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ino": st.st_ino,
        "nlink": st.st_nlink,
        "xattrs": xattrs,
    }


@pytest.fixture(name="snapshot")
def snapshot_fixture():
    """``snapshot(path)``: the state of a file a denied operation must leave unchanged."""
    return snapshot


def tree(path: Path) -> list:
    """Sorted relative paths of everything beneath ``path``."""
    return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*"))


@pytest.fixture(name="tree")
def tree_fixture():
    """``tree(dir)``: what exists beneath a directory, to show nothing was created or removed."""
    return tree


class Listener:
    """A loopback server in a thread that records every connection and datagram."""

    def __init__(self, sock: socket.socket, kind: str):
        self.sock = sock
        self.kind = kind
        self.connections = []  # (peer, bytes received)
        self.datagrams = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                if self.kind == "dgram":
                    data, peer = self.sock.recvfrom(65536)
                    self.datagrams.append((peer, data))
                    continue
                conn, peer = self.sock.accept()
            except (socket.timeout, BlockingIOError):
                continue
            except OSError:
                return
            conn.settimeout(1.0)
            chunks = []
            try:
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
            except OSError:
                pass
            conn.close()
            self.connections.append((peer, b"".join(chunks)))

    def stop(self, grace=0.15):
        """Stop after one more bounded wait, so a late connection is still seen."""
        time.sleep(grace)
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    @property
    def saw_anything(self) -> bool:
        return bool(self.connections or self.datagrams)


def start_listener(family, type_, address) -> Listener:
    sock = socket.socket(family, type_)
    sock.bind(address)
    if type_ == socket.SOCK_STREAM:
        sock.listen(16)
    return Listener(sock, "dgram" if type_ == socket.SOCK_DGRAM else "stream")


def _listen_factory():
    started = []

    def start(family, type_, address):
        listener = start_listener(family, type_, address)
        started.append(listener)
        return listener

    return start, started


@pytest.fixture
def listen():
    """Factory: ``listen(family, type, address)`` -> a started Listener; stopped at teardown."""
    start, started = _listen_factory()
    yield start
    for listener in started:
        if listener._thread.is_alive():
            listener.stop()


@pytest.fixture(scope="module")
def module_listen():
    """``listen`` for module-scoped fixtures."""
    start, started = _listen_factory()
    yield start
    for listener in started:
        if listener._thread.is_alive():
            listener.stop()


@pytest.fixture(scope="module")
def short_dir(tmp_path_factory) -> Path:
    """A tmp directory with a short path, for unix socket addresses (108-byte limit)."""
    path = tmp_path_factory.mktemp("u")
    assert len(str(path)) < 80, path
    return path


@pytest.fixture(scope="session")
def libc():
    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    return lib
