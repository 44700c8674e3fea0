"""The pool's configuration: ``[pool]``, the ``[pool.limits]`` ceiling, ``[profiles]``.

Loaded once at start; any mistake stops the pool with a message naming the
key, because a pool that silently ignored a limit would fail open.  Relative
paths resolve against the file's directory, limits are parsed to numbers
here so requests compare against numbers, and the file may not lie beneath
one of its own write grants (a task could otherwise rewrite its ceiling).
"""

import os
import sys
from dataclasses import dataclass, field

from pynox.errors import UsageError
from pynox.policy import SYSTEM_RUNTIME, beneath, overlaps, resolve_path, runtime_paths
from pynox.units import parse_duration_ms, parse_size

POOL_KEYS = {"workers", "preload", "package_dirs", "log", "max_sessions", "session_idle"}
LIMIT_KEYS = {"allow_read", "allow_write", "allow_network", "timeout", "memory", "max_output", "max_file_size"}
PROFILE_KEYS = LIMIT_KEYS | {"package_dirs", "env"}
PATH_KEYS = ("allow_read", "allow_write", "package_dirs")
DEFAULT_WORKERS = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The ceiling: None means the key was not limited."""

    allow_read: tuple | None = None
    allow_write: tuple | None = None
    allow_network: bool = True
    timeout_ms: int | None = None
    memory_bytes: int | None = None
    max_output: int | None = None
    max_file_size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolConfig:
    workers: int = DEFAULT_WORKERS
    preload: tuple = ()
    package_dirs: tuple = ()
    log: str | None = None
    max_sessions: int = 16
    session_idle_ms: int = 600_000
    limits: Limits = field(default_factory=Limits)
    profiles: dict = field(default_factory=dict)  # name -> dict of request fields, paths resolved
    path: str | None = None


def _fail(where, message):
    raise UsageError(f"{where}: {message}")


def _str_list(value, where):
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _fail(where, "must be a list of strings")
    return value


def _paths(value, base, where):
    try:
        return tuple(resolve_path(p, base) for p in _str_list(value, where))
    except ValueError as exc:
        _fail(where, str(exc))


def _number(value, parse, where):
    try:
        return parse(value)
    except ValueError as exc:
        _fail(where, str(exc))


def _check_table(table, allowed, where):
    if not isinstance(table, dict):
        _fail(where, "must be a table")
    for key in table:
        if key not in allowed:
            _fail(f"{where}.{key}", "unknown key")


def _limits(table, base, where) -> Limits:
    """A ceiling table; absent keys are unlimited, except the network, which a
    present table allows only when it says ``allow_network = true``."""
    if table is None:
        return Limits()
    _check_table(table, LIMIT_KEYS, where)
    values = {"allow_network": False}
    for key in ("allow_read", "allow_write"):
        if key in table:
            values[key] = _paths(table[key], base, f"{where}.{key}")
    if "allow_network" in table:
        if not isinstance(table["allow_network"], bool):
            _fail(f"{where}.allow_network", "must be true or false")
        values["allow_network"] = table["allow_network"]
    for key, name, parse in (("timeout", "timeout_ms", parse_duration_ms), ("memory", "memory_bytes", parse_size),
                             ("max_output", "max_output", parse_size), ("max_file_size", "max_file_size", parse_size)):
        if key in table:
            values[name] = _number(table[key], parse, f"{where}.{key}")
    return Limits(**values)


def _profile(table, base, where) -> dict:
    _check_table(table, PROFILE_KEYS, where)
    profile = dict(table)
    for key in PATH_KEYS:
        if key in profile:
            profile[key] = list(_paths(profile[key], base, f"{where}.{key}"))
    return profile


def load(path: str | None, overrides: dict) -> PoolConfig:
    """Read ``path`` (may be None) and apply command-line ``overrides``."""
    data, base, where = {}, os.getcwd(), "pynox pool"
    if path is not None:
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib
        path = os.path.realpath(path)
        where = path
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            _fail(path, exc.strerror)
        except tomllib.TOMLDecodeError as exc:
            _fail(path, str(exc))
        base = os.path.dirname(path)
    _check_table(data, {"pool", "profiles"}, where)
    _check_table(data.get("pool", {}), POOL_KEYS | {"limits"}, f"{where}: pool")
    pool = dict(data.get("pool", {}))
    limits_table = pool.pop("limits", None)
    pool.update({k: v for k, v in overrides.items() if v is not None})
    workers = pool.get("workers", DEFAULT_WORKERS)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
        _fail(f"{where}: pool.workers", "must be an integer from 1 to 256")
    preload = tuple(_str_list(pool.get("preload", []), f"{where}: pool.preload"))
    for name in preload:
        if not all(part.isidentifier() for part in name.split(".")):
            _fail(f"{where}: pool.preload", f"{name!r} is not a module name")
    log = pool.get("log")
    if log not in (None, "json"):
        _fail(f"{where}: pool.log", 'must be "json"')
    max_sessions = pool.get("max_sessions", 16)
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        _fail(f"{where}: pool.max_sessions", "must be a positive integer")
    session_idle = _number(pool.get("session_idle", "10m"), parse_duration_ms, f"{where}: pool.session_idle")
    package_dirs = _paths(pool.get("package_dirs", []), base if "package_dirs" not in overrides else os.getcwd(),
                          f"{where}: pool.package_dirs")
    limits = _limits(limits_table, base, f"{where}: pool.limits")
    profiles_table = data.get("profiles", {})
    _check_table(profiles_table, set(profiles_table), f"{where}: profiles")
    profiles = {name: _profile(table, base, f"{where}: profiles.{name}") for name, table in profiles_table.items()}
    config = PoolConfig(workers=workers, preload=preload, package_dirs=package_dirs, log=log,
                        max_sessions=max_sessions, session_idle_ms=session_idle, limits=limits,
                        profiles=profiles, path=path)
    _check_write_grants(config, where)
    return config


def _check_write_grants(config: PoolConfig, where: str) -> None:
    grants = [("pool.limits.allow_write", p) for p in config.limits.allow_write or ()]
    for name, profile in config.profiles.items():
        grants += [(f"profiles.{name}.allow_write", p) for p in profile.get("allow_write", [])]
    protected = runtime_paths() + SYSTEM_RUNTIME + config.package_dirs
    for key, grant in grants:
        if config.path is not None and beneath(config.path, grant):
            _fail(f"{where}: {key}", f"{grant} contains this configuration file; a task could rewrite its limits")
        for runtime in protected:
            if overlaps(grant, runtime):
                _fail(f"{where}: {key}", f"{grant} overlaps the runtime path {runtime}")
