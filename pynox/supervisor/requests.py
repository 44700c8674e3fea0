"""Validate one pool request and turn it into a job, or a RequestError.

Runs in the supervisor before anything is queued: unknown fields, wrong
types, both or neither of script and code, paths outside the ceiling and
limits above it all fail here with a message naming the field, so nothing
runs unless the whole request is acceptable.  Profiles are applied first,
then the request's own fields, then the ceiling.
"""

import os
from dataclasses import dataclass

from pynox.child.execute import Task
from pynox.errors import RequestError, UsageError
from pynox.policy import (DEFAULT_MAX_FILE_SIZE, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY, DEFAULT_TIMEOUT_MS, Policy,
                          beneath, resolve_path)
from pynox.supervisor.config import PoolConfig
from pynox.units import parse_duration_ms, parse_size

JOB_FIELDS = {"id", "code", "script", "name", "args", "allow_read", "allow_write", "package_dirs", "env",
              "allow_network", "timeout", "memory", "max_output", "max_file_size", "profile"}
# Named so that a client using them learns they are not served yet, rather
# than reading "unknown field".
NOT_YET = {"session": "sessions", "close": "sessions", "functions": "host functions",
           "reply": "host function replies"}
LIST_FIELDS = ("allow_read", "allow_write", "package_dirs")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    id: object
    task: Task
    policy: Policy


def request_id(obj):
    """The id a reply to ``obj`` must carry: a string or integer, else None."""
    if not isinstance(obj, dict):
        return None
    rid = obj.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        return None
    return rid


def _fail(message):
    raise RequestError(message)


def _str_list(value, name):
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _fail(f"{name} must be a list of strings")
    return value


def _env(value, name):
    if not isinstance(value, dict):
        _fail(f"{name} must be an object of strings")
    for key, item in value.items():
        if not isinstance(item, str) or not key or "=" in key or "\0" in key or "\0" in item:
            _fail(f"{name}: {key!r} is not a KEY with a string value")
    return value


def _merged(obj, config: PoolConfig) -> dict:
    """Profile fields, then the request's own on top (lists add up)."""
    fields = {}
    profile_name = obj.get("profile")
    if profile_name is not None:
        if not isinstance(profile_name, str):
            _fail("profile must be a string")
        if profile_name not in config.profiles:
            _fail(f"unknown profile {profile_name!r}; known: {sorted(config.profiles)}")
        fields.update(config.profiles[profile_name])
    for key, value in obj.items():
        if key in LIST_FIELDS:
            fields[key] = list(fields.get(key, [])) + _str_list(value, key)
        elif key == "env":
            fields[key] = {**fields.get("env", {}), **_env(value, key)}
        else:
            fields[key] = value
    return fields


def _limit(fields, key, parse, default, ceiling):
    value = fields.get(key)
    if value is None:
        if ceiling is None:
            return default
        # A file-size ceiling is the size for requests that set none.
        return ceiling if key == "max_file_size" else min(default, ceiling)
    try:
        number = parse(value)
    except ValueError as exc:
        _fail(f"{key}: {exc}")
    if ceiling is not None and number > ceiling:
        _fail(f"{key} {value!r} is above the pool's limit ({ceiling})")
    return number


def _within(paths, ceiling, key):
    if ceiling is None:
        return
    for path in paths:
        if not any(beneath(path, root) for root in ceiling):
            _fail(f"{key}: {path} is outside the pool's limits")


def validate(obj, config: PoolConfig, cwd: str) -> JobSpec:
    """A JobSpec for a job request ``obj``; raises RequestError saying what is wrong."""
    rid = request_id(obj)
    for key, value in obj.items():
        if value is None and key in JOB_FIELDS:
            _fail(f"{key} is null; leave it out for the default")
        if key in NOT_YET:
            _fail(f"{key!r}: {NOT_YET[key]} are not supported by this pool yet")
        if key not in JOB_FIELDS:
            _fail(f"unknown field {key!r}")
    if ("code" in obj) == ("script" in obj):
        _fail("exactly one of 'code' and 'script' is required")
    fields = _merged(obj, config)
    name = fields.get("name", "<string>")
    if not isinstance(name, str) or not name or "\0" in name:
        _fail("name must be a non-empty string")
    args = tuple(_str_list(fields.get("args", []), "args"))
    implicit = ()
    if "code" in fields:
        if not isinstance(fields["code"], str):
            _fail("code must be a string")
        task = Task(kind="code", target=fields["code"], name=name, args=args)
    else:
        if not isinstance(fields["script"], str):
            _fail("script must be a string")
        try:
            script = resolve_path(fields["script"], cwd)
        except ValueError as exc:
            _fail(f"script: {exc}")
        if not os.path.isfile(script):
            _fail(f"script: {script} is not a file")
        task = Task(kind="script", target=script, name=script, args=args)
        implicit = (script,)
    resolved = {}
    for key in LIST_FIELDS:
        try:
            resolved[key] = tuple(dict.fromkeys(resolve_path(p, cwd) for p in fields.get(key, [])))
        except ValueError as exc:
            _fail(f"{key}: {exc}")
    limits = config.limits
    # A write grant reads too, so reading beneath a write limit is within the ceiling.
    readable = None if limits.allow_read is None else limits.allow_read + (limits.allow_write or ())
    _within(resolved["allow_read"], readable, "allow_read")
    _within(resolved["package_dirs"], readable, "package_dirs")
    _within(implicit, readable, "script")
    _within(resolved["allow_write"], limits.allow_write, "allow_write")
    network = fields.get("allow_network", False)
    if not isinstance(network, bool):
        _fail("allow_network must be true or false")
    if network and not limits.allow_network:
        _fail("allow_network: the pool's limits do not allow the network")
    env = _env(fields.get("env", {}), "env")
    policy = Policy(
        allow_read=resolved["allow_read"],
        allow_write=resolved["allow_write"],
        package_dirs=config.package_dirs + resolved["package_dirs"],
        implicit_read=implicit,
        network=network,
        timeout_ms=_limit(fields, "timeout", parse_duration_ms, DEFAULT_TIMEOUT_MS, limits.timeout_ms),
        memory_bytes=_limit(fields, "memory", parse_size, DEFAULT_MEMORY, limits.memory_bytes),
        max_output=_limit(fields, "max_output", parse_size, DEFAULT_MAX_OUTPUT, limits.max_output),
        max_file_size=_limit(fields, "max_file_size", parse_size, DEFAULT_MAX_FILE_SIZE, limits.max_file_size),
        env=dict(env),
    )
    try:
        policy.check()
    except ValueError as exc:
        _fail(str(exc))
    return JobSpec(id=rid, task=task, policy=policy)


def check_profiles(config: PoolConfig, cwd: str) -> None:
    """Apply each profile to an empty job now, so a bad value stops the pool at
    start (naming the profile) rather than failing every request that uses it."""
    for name in [None, *config.profiles]:
        request = {"id": 0, "code": ""} if name is None else {"id": 0, "code": "", "profile": name}
        try:
            validate(request, config, cwd)
        except RequestError as exc:
            where = "pool" if name is None else f"profiles.{name}"
            raise UsageError(f"{config.path or 'pynox pool'}: {where}: {exc}") from exc
