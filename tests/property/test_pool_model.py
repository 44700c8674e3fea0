"""A model of the pool protocol, checked against one real pool with generated requests.

:class:`PoolModel` drives a single ``pynox pool --workers 2`` per state
machine run.  Every rule writes one line and reads exactly one answer, then
compares it with :func:`predict`, a pure function of the line alone (plus
the counters the model keeps for stats): the answer's id is the request's
id, or null when the line has no usable id; its outcome is ok, failed with
exit k, RequestError, or a stats event with exact counters.

Invalid requests carry code that would print a fresh token if it ever ran.
The token is assembled at run time, so it appears in output only if the code
executed; no answer may ever contain one: nothing runs before validation.

Ids are unique per step so answers are unambiguous.  Integer ids stay within
what the pool can echo (-2**63 .. 2**64-1); values it cannot echo have their
own test at the end of this file.
"""

import itertools
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pynox.client import Pool, PoolClosed

# The seed's request fields (pool protocol, "Requests" and "Sessions"): a key
# outside these must be refused.  Session and host-function fields are named
# by the seed, so they are not "unknown" and are not generated as such.
JOB_FIELDS = {"id", "code", "script", "name", "args", "allow_read", "allow_write", "package_dirs", "env",
              "allow_network", "timeout", "memory", "max_output", "max_file_size", "profile"}
SEED_NAMES = JOB_FIELDS | {"stats", "session", "close", "functions", "reply"}
RESULT_KEYS = {"id", "exit", "stdout", "stderr", "error", "stdout_truncated", "stderr_truncated", "duration_ms",
               "duration_us", "queue_us", "runtime", "policy"}
ERROR_KEYS = {"type", "message", "file", "line", "hint"}
STATS_KEYS = {"id", "event", "uptime_ms", "workers", "sessions_active", "jobs", "ok", "failed", "timeouts",
              "signals", "request_errors", "worker_errors", "duration_ms_total", "queue_us_total", "errors"}
WORKERS = 2
READ_TIMEOUT = 60.0
MIN_ID, MAX_ID = -(2 ** 63), 2 ** 64 - 1  # what a JSON encoder using 64-bit integers can write back


# -- the model -------------------------------------------------------------

@dataclass(frozen=True)
class Expected:
    """What the pool must answer to one line."""

    id: Any  # the request's id, or None
    kind: str  # "ok", "failed", "request_error" or "stats"
    exit: int | None = None  # for ok and failed
    stdout: str | None = None  # when known exactly
    error_type: str | None = None  # for failed jobs that raised


def usable_id(obj):
    """The id an answer to ``obj`` carries: a string or an integer, else None."""
    if not isinstance(obj, dict):
        return None
    rid = obj.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        return None
    return rid


def predict(line: bytes, job: dict | None = None) -> Expected:
    """The answer the seed spec promises for ``line``.

    ``job`` is what the request's code does if it runs: {"kind": "print",
    "value": n}, {"kind": "raise"} or {"kind": "exit", "code": k}.  It only
    matters when the line is a valid job request; None says the generator
    meant the request to be invalid, and a valid one then predicts "ran".
    """
    try:
        obj = json.loads(line.decode("utf-8"), object_pairs_hook=_no_duplicates,
                         parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError):
        return Expected(id=None, kind="request_error")
    rid = usable_id(obj)
    if rid is None:
        return Expected(id=None, kind="request_error")
    if "stats" in obj:
        valid = obj["stats"] is True and set(obj) == {"id", "stats"}
        return Expected(id=rid, kind="stats" if valid else "request_error")
    if not valid_job(obj):
        return Expected(id=rid, kind="request_error")
    if job is None:
        return Expected(id=rid, kind="ran")
    if job["kind"] == "print":
        return Expected(id=rid, kind="ok", exit=0, stdout=f"{job['value']}\n")
    if job["kind"] == "raise":
        return Expected(id=rid, kind="failed", exit=1, stdout="", error_type="ValueError")
    code = job["code"]
    return Expected(id=rid, kind="ok" if code == 0 else "failed", exit=code, stdout="")


DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}
SIZE = re.compile(r"(\d+)([kmgt]?)(i?b)?", re.IGNORECASE)
MAX_DURATION_MS = 7 * 24 * 3_600_000
MAX_SIZE = 1 << 62


def _is_str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _duration_ok(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return False
    match = DURATION.fullmatch(value.strip() if isinstance(value, str) else repr(value))
    if not match:
        return False
    ms = float(match.group(1)) * DURATION_MS[match.group(2)]
    return 0 < round(ms) and ms < MAX_DURATION_MS + 1


def _size_ok(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 < value <= MAX_SIZE
    if isinstance(value, str) and (match := SIZE.fullmatch(value.strip())):
        return 0 < int(match.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[match.group(2).lower()] <= MAX_SIZE
    return False


def _env_ok(value) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, str) and k and "=" not in k and "\0" not in k and "\0" not in v for k, v in value.items())


def valid_job(obj: dict) -> bool:
    """Whether a job request passes validation in a pool started without a configuration.

    Only what the machine generates is modelled: no paths are granted (any
    path list must be empty), and no profile exists.
    """
    if not set(obj) <= JOB_FIELDS or ("code" in obj) == ("script" in obj):
        return False
    if "script" in obj or not isinstance(obj["code"], str):
        return False  # the machine never creates a script file
    checks = {
        "name": lambda v: isinstance(v, str) and v != "" and "\0" not in v,
        "args": _is_str_list,
        "allow_read": lambda v: v == [],
        "allow_write": lambda v: v == [],
        "package_dirs": lambda v: v == [],
        "env": _env_ok,
        "allow_network": lambda v: isinstance(v, bool),
        "timeout": _duration_ok,
        "memory": _size_ok,
        "max_output": _size_ok,
        "max_file_size": _size_ok,
        "profile": lambda v: False,
    }
    return all(checks[key](value) for key, value in obj.items() if key in checks)


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def _no_constant(name):
    raise ValueError(name)


# -- strategies ------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(MIN_ID, 2 ** 63 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
no_digits = st.text(alphabet=st.characters(blacklist_categories=("Nd", "Cs")), max_size=6)
non_str = st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.lists(st.text(max_size=3), max_size=2) | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)
non_str_list = (st.none() | st.booleans() | st.integers(MIN_ID, MAX_ID) | st.text(max_size=5)
                | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)
                | st.lists(st.text(max_size=3), max_size=2).flatmap(
                    lambda items: st.tuples(st.just(items), non_str.filter(lambda v: not isinstance(v, str)),
                                            st.integers(0, len(items))).map(lambda t: t[0][:t[2]] + [t[1]] + t[0][t[2]:])))
# Bad durations and sizes.  null is left out: the pool treats a null limit as
# absent (see the report), which is not the point of this machine.
bad_duration = (st.booleans() | st.integers(max_value=0) | st.integers(min_value=7 * 24 * 3600 + 1, max_value=2 ** 62)
                | no_digits | st.sampled_from(["soon", "5 sec", "-1s", "1d", "0ms", "1000h"])
                | st.lists(st.integers(1, 5), max_size=2) | st.dictionaries(st.text(max_size=2), st.integers(MIN_ID, MAX_ID), max_size=1))
bad_size = (st.booleans() | st.integers(min_value=MIN_ID, max_value=0) | st.integers(min_value=2 ** 62 + 1, max_value=MAX_ID)
            | st.floats(allow_nan=False, allow_infinity=False) | no_digits
            | st.sampled_from(["lots", "1x", "-5", "1.5g", "0"]) | st.lists(st.integers(1, 5), max_size=2))
bad_env = (st.none() | st.booleans() | st.integers(MIN_ID, MAX_ID) | st.text(max_size=5) | st.lists(st.text(max_size=3), max_size=2)
           | st.dictionaries(st.from_regex(r"[A-Z]{1,4}", fullmatch=True), non_str.filter(lambda v: not isinstance(v, str)),
                             min_size=1, max_size=2)
           | st.sampled_from([{"": "x"}, {"A=B": "x"}, {"A": "x\0y"}, {"A\0": "x"}]))
WRONG = {
    "name": non_str.filter(lambda v: not isinstance(v, str)) | st.just("") | st.just("a\0b"),
    "args": non_str_list,
    "allow_read": non_str_list,
    "allow_write": non_str_list,
    "package_dirs": non_str_list,
    "env": bad_env,
    "allow_network": non_str.filter(lambda v: not isinstance(v, bool)) | st.sampled_from(["true", "yes", 0, 1]),
    "timeout": bad_duration,
    "memory": bad_size,
    "max_output": bad_size,
    "max_file_size": bad_size,
    # The pool is started without a configuration, so every profile name is unknown.
    "profile": st.text(max_size=8) | non_str.filter(lambda v: v is not None and not isinstance(v, str)),
}
unknown_keys = st.text(min_size=1, max_size=12).filter(lambda k: k not in SEED_NAMES)
bad_ids = st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) \
    | st.lists(st.integers(0, 3), max_size=2) | st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=1)
junk_text = st.text(max_size=40).map(lambda s: s.replace("\n", " ").encode("utf-8"))
junk_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" "))
valid_names = st.from_regex(r"[a-z][a-z0-9_]{0,7}\.py", fullmatch=True)
valid_args = st.lists(st.text(max_size=6), max_size=3)
valid_env = st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,5}", fullmatch=True),
                            st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
                                    max_size=6), max_size=2)


class PoolModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self._pool = None
        self._dir = None
        self.steps = itertools.count(1)
        self.used_ids = set()
        self.tokens = []  # printed only if code that must never run ran
        self.counts = {"jobs": 0, "ok": 0, "failed": 0, "request_errors": 0}
        self.errors = {}

    # -- plumbing ---------------------------------------------------------

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            self._dir = tempfile.mkdtemp(prefix="pynox-model-")
            self._pool = Pool("--workers", str(WORKERS), cwd=self._dir)
            assert self._pool.ready["event"] == "ready" and self._pool.ready["workers"] == WORKERS
        return self._pool

    def teardown(self):
        if self._pool is None:
            return
        try:
            self._pool.process.stdin.close()
            try:
                extra = self._pool.read(READ_TIMEOUT)
            except PoolClosed:
                extra = None
            assert extra is None, f"the pool wrote a line nobody asked for: {extra!r}"
            assert self._pool.close() == 0
        finally:
            self._pool.__exit__(None, None, None)
            shutil.rmtree(self._dir, ignore_errors=True)

    def fresh_id(self, drawn):
        """``drawn`` if unused, else a new unique string."""
        rid = drawn if drawn not in self.used_ids else f"{drawn!r}#{next(self.steps)}"
        self.used_ids.add(rid)
        return rid

    def token_code(self) -> str:
        """Code that prints a fresh token; the literal token is never in the source."""
        token = f"RAN-{len(self.tokens):04d}-{next(self.steps):06d}-NEVER"
        self.tokens.append(token)
        return f"print({token[:4]!r} + {token[4:]!r})"

    def exchange(self, line: bytes, job: dict | None = None) -> dict:
        """Send one line, read one answer, check it against the model."""
        expected = predict(line, job)
        assert expected.kind != "ran", f"generator bug: a request meant to be invalid is valid: {line!r}"
        self.pool.send_line(line)
        answer = self.pool.read(READ_TIMEOUT)
        raw = orjson.dumps(answer).decode()
        for token in self.tokens:
            assert token not in raw, f"code of an invalid request ran: {token} in {raw}"
        assert "id" in answer and answer["id"] == expected.id and type(answer["id"]) is type(expected.id), \
            (line, expected, answer)
        if expected.kind == "stats":
            self.check_stats(answer)
            return answer
        assert set(answer) == RESULT_KEYS, (line, answer)
        error = answer["error"]
        assert error is None or set(error) == ERROR_KEYS, answer
        self.counts["jobs"] += 1
        if expected.kind == "request_error":
            assert error is not None and error["type"] == "RequestError", (line, answer)
            assert answer["exit"] == 2 and answer["policy"] is None, answer
            assert answer["stdout"] == answer["stderr"] == "", answer
            assert answer["duration_ms"] == answer["duration_us"] == answer["queue_us"] == 0, answer
            self.counts["request_errors"] += 1
            self.errors["RequestError"] = self.errors.get("RequestError", 0) + 1
            return answer
        assert answer["exit"] == expected.exit, (line, expected, answer)
        assert answer["stdout"] == expected.stdout, (line, expected, answer)
        assert isinstance(answer["policy"], dict), answer
        if expected.error_type is None:
            assert error is None, (line, answer)
        else:
            assert error is not None and error["type"] == expected.error_type, (line, answer)
            self.errors[expected.error_type] = self.errors.get(expected.error_type, 0) + 1
        self.counts[expected.kind] += 1
        return answer

    def check_stats(self, answer):
        assert set(answer) == STATS_KEYS, answer
        assert answer["event"] == "stats" and answer["workers"] == WORKERS and answer["sessions_active"] == 0
        for name, value in self.counts.items():
            assert answer[name] == value, (name, answer, self.counts)
        assert answer["timeouts"] == answer["signals"] == answer["worker_errors"] == 0, answer
        assert answer["errors"] == self.errors, (answer, self.errors)
        for name in ("uptime_ms", "duration_ms_total", "queue_us_total"):
            assert isinstance(answer[name], int) and answer[name] >= 0, answer

    def request(self, rid, **fields) -> bytes:
        return orjson.dumps({"id": rid, **fields})

    # -- rules ------------------------------------------------------------

    ids = st.integers(MIN_ID, MAX_ID) | st.text(max_size=10)

    @rule(rid=ids, value=st.integers(-(10 ** 30), 10 ** 30), name=st.none() | valid_names,
          args=st.none() | valid_args, env=st.none() | valid_env)
    def valid_print(self, rid, value, name, args, env):
        extra = {k: v for k, v in (("name", name), ("args", args), ("env", env)) if v is not None}
        line = self.request(self.fresh_id(rid), code=f"print({value})", **extra)
        self.exchange(line, {"kind": "print", "value": value})

    @rule(rid=ids, message=st.text(alphabet="abcdefghij XYZ", max_size=10))
    def valid_raise(self, rid, message):
        answer = self.exchange(self.request(self.fresh_id(rid), code=f"raise ValueError({message!r})"),
                               {"kind": "raise", "message": message})
        assert answer["error"]["message"] == message and answer["error"]["line"] == 1, answer

    @rule(rid=ids, code=st.integers(0, 120))
    def valid_exit(self, rid, code):
        self.exchange(self.request(self.fresh_id(rid), code=f"import sys\nsys.exit({code})"),
                      {"kind": "exit", "code": code})

    @rule(rid=ids, key=unknown_keys, value=json_values)
    def unknown_field(self, rid, key, value):
        self.exchange(self.request(self.fresh_id(rid), code=self.token_code(), **{key: value}))

    @rule(rid=ids, data=st.data())
    def wrong_type(self, rid, data):
        field = data.draw(st.sampled_from(sorted(WRONG)), label="field")
        value = data.draw(WRONG[field], label="value")
        self.exchange(self.request(self.fresh_id(rid), code=self.token_code(), **{field: value}))

    @rule(rid=ids, code=non_str)
    def code_not_a_string(self, rid, code):
        self.exchange(self.request(self.fresh_id(rid), code=code))

    @rule(rid=ids, script=st.text(max_size=10) | non_str)
    def code_and_script(self, rid, script):
        self.exchange(self.request(self.fresh_id(rid), code=self.token_code(), script=script))

    @rule(rid=ids, name=st.none() | valid_names)
    def neither_code_nor_script(self, rid, name):
        self.exchange(self.request(self.fresh_id(rid)) if name is None else self.request(self.fresh_id(rid), name=name))

    @rule(bad=st.none() | bad_ids, missing=st.booleans())
    def without_usable_id(self, bad, missing):
        body = {"code": self.token_code()}
        if not missing:
            body["id"] = bad
        self.exchange(orjson.dumps(body))

    @rule(line=junk_text | junk_bytes)
    def not_a_request_object(self, line):
        # Blank lines are skipped without an answer; a line that happens to be
        # a JSON object is some other rule's business.
        if not line.strip():
            line = b"?" + line
        try:
            if isinstance(json.loads(line.decode("utf-8")), dict):
                line = b"#" + line
        except (UnicodeDecodeError, ValueError):
            pass
        self.exchange(line)

    @rule(rid=ids)
    def stats(self, rid):
        self.exchange(self.request(self.fresh_id(rid), stats=True))

    @rule(rid=ids, value=json_values, extra=st.none() | unknown_keys)
    def malformed_stats(self, rid, value, extra):
        body = {"stats": value}
        if value is True:
            body[extra or "code"] = self.token_code() if extra is None else 1
        self.exchange(self.request(self.fresh_id(rid), **body))

    @invariant()
    def pool_is_alive(self):
        if self._pool is not None:
            assert self._pool.process.poll() is None, f"the pool exited {self._pool.process.returncode}"


PoolModel.TestCase.settings = settings(max_examples=15, stateful_step_count=10, deadline=None, database=None,
                                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestPoolModel = PoolModel.TestCase


# -- the model itself ------------------------------------------------------

@pytest.mark.parametrize("line, expected", [
    (b'{"id": 1, "code": "print(5)"}', Expected(id=1, kind="ok", exit=0, stdout="5\n")),
    (b'{"id": "a", "code": "1", "bogus": 1}', Expected(id="a", kind="request_error")),
    (b'{"id": "a", "code": "1", "script": "x"}', Expected(id="a", kind="request_error")),
    (b'{"id": "a"}', Expected(id="a", kind="request_error")),
    (b'{"code": "1"}', Expected(id=None, kind="request_error")),
    (b'{"id": true, "code": "1"}', Expected(id=None, kind="request_error")),
    (b'{"id": 1, "id": 2, "code": "1"}', Expected(id=None, kind="request_error")),
    (b'{"id": 1, "code": NaN}', Expected(id=None, kind="request_error")),
    (b'[1]', Expected(id=None, kind="request_error")),
    (b'\xff', Expected(id=None, kind="request_error")),
    (b'{"id": "s", "stats": true}', Expected(id="s", kind="stats")),
    (b'{"id": "s", "stats": true, "x": 1}', Expected(id="s", kind="request_error")),
    (b'{"id": "s", "stats": 1}', Expected(id="s", kind="request_error")),
    (b'{"id": 2, "code": "1", "timeout": "soon"}', Expected(id=2, kind="request_error")),
    (b'{"id": 2, "code": "1", "timeout": "1.5s", "memory": "512m"}', Expected(id=2, kind="ok", exit=0, stdout="5\n")),
    (b'{"id": 2, "code": "1", "memory": 0}', Expected(id=2, kind="request_error")),
    (b'{"id": 2, "code": "1", "env": {"A": 1}}', Expected(id=2, kind="request_error")),
    (b'{"id": 2, "code": "1", "args": ["a", 1]}', Expected(id=2, kind="request_error")),
    (b'{"id": 2, "code": "1", "allow_network": 1}', Expected(id=2, kind="request_error")),
    (b'{"id": 2, "code": "1", "name": ""}', Expected(id=2, kind="request_error")),
    (b'{"id": 2, "code": "1", "profile": "p"}', Expected(id=2, kind="request_error")),
])
def test_predict(line, expected):
    assert predict(line, {"kind": "print", "value": 5}) == expected


def test_predict_outcomes_of_valid_jobs():
    line = b'{"id": "j", "code": "..."}'
    assert predict(line, {"kind": "exit", "code": 0}) == Expected(id="j", kind="ok", exit=0, stdout="")
    assert predict(line, {"kind": "exit", "code": 3}) == Expected(id="j", kind="failed", exit=3, stdout="")
    assert predict(line, {"kind": "raise"}).error_type == "ValueError"
    assert predict(line).kind == "ran"


# -- values the pool cannot echo ----------------------------------------------
#
# Found while writing this machine: an integer id outside 64 bits, or a lone
# surrogate escape (in the id, code, args, env or name), used to crash the
# whole pool (orjson refused to encode the answer or the job; exit 1, every
# in-flight job lost; for the big integer id the job even ran first).  A
# correct pool refuses such a line with one RequestError, runs nothing, and
# serves the next request.

UNENCODABLE_LINES = {
    "integer id above 2**64": b'{"id": 100000000000000000000000, "code": "print(\'RAN\' + \'-BIG\')"}',
    "integer id below -2**63 (stats)": b'{"id": -9223372036854775809, "stats": true}',
    "integer field value above 2**64": b'{"id": "m", "code": "print(1)", "memory": 100000000000000000000000}',
    "lone surrogate in id": b'{"id": "\\ud800", "code": "print(\'RAN\' + \'-ID\')"}',
    "lone surrogate in code": b'{"id": "c", "code": "print(\'\\ud800\')"}',
    "lone surrogate in args": b'{"id": "a", "code": "print(\'RAN\' + \'-ARGS\')", "args": ["\\ud800"]}',
    "lone surrogate in env": b'{"id": "e", "code": "print(\'RAN\' + \'-ENV\')", "env": {"A": "\\udfff"}}',
    "lone surrogate in name": b'{"id": "n", "code": "print(\'RAN\' + \'-NAME\')", "name": "\\ud800.py"}',
    "lone surrogate in an unknown key": b'{"id": "k", "code": "print(1)", "\\ud800": 1}',
}


@pytest.mark.parametrize("line", list(UNENCODABLE_LINES.values()), ids=list(UNENCODABLE_LINES))
def test_unencodable_values_are_refused_and_the_pool_lives_on(tmp_path, line):
    with Pool("--workers", "1", cwd=tmp_path) as pool:
        pool.send_line(line)
        first = pool.read(30)
        assert first["error"] is not None and first["error"]["type"] == "RequestError", first
        assert first["policy"] is None and "RAN-" not in orjson.dumps(first).decode(), first
        assert pool.run("print('after')", id="after", wait=30)["stdout"] == "after\n"
        assert pool.close() == 0
