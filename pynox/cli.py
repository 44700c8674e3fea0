"""The ``pynox`` command line: ``pynox [options] (SCRIPT | -c CODE | -m MODULE) [ARGS...]``.

pynox's own options are long options CPython does not use, so they can
precede Python's.  The isolation and buffering flags ``-I -E -s -S -u -B``
are accepted as no-ops (the sandbox already isolates, and output is flushed
at exit); any other interpreter option is refused with a pointer to
``--no-sandbox``, which hands the rest of the line to CPython unchanged.
Subcommands: ``pynox doctor`` and ``pynox pool``.
"""

import importlib.machinery
import importlib.util
import os
import sys

import orjson

from pynox import __version__
from pynox.child.execute import Task
from pynox.errors import SandboxSetupError, UsageError
from pynox.policy import (BASE_ENV, DEFAULT_MAX_FILE_SIZE, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY, DEFAULT_TIMEOUT_MS,
                          THREAD_ENV, Policy, resolve_path, runtime_paths)
from pynox.units import parse_duration_ms, parse_size

USAGE = """\
usage: pynox [options] (SCRIPT | -c CODE | -m MODULE | -) [ARGS...]
       pynox doctor
       pynox pool [--workers N] [--preload MODS] [--package-dir DIR] [--config FILE] [--log json]

Runs Python confined by Landlock and seccomp: no reads or writes outside the
grants, no network, no subprocesses, bounded memory, time and output.

options:
  --allow-read PATH      read-only access beneath PATH (repeatable)
  --allow-write PATH     read-write access beneath PATH (repeatable)
  --allow-network        allow TCP/UDP over IPv4 and IPv6, and name resolution
  --timeout DURATION     wall-clock limit, e.g. 300ms, 5s, 2m (default 30s)
  --memory SIZE          address-space limit, e.g. 512m, 1g (default 1g)
  --max-output BYTES     captured bytes kept per stream with --json (default 1048576)
  --max-file-size SIZE   largest file the task may write (default 256m)
  --env KEY=VALUE        add to the task's scrubbed environment (repeatable)
  --package-dir DIR      extra site-packages directory, read-only (repeatable)
  --config FILE          TOML file whose [permissions] section gives defaults
  --json                 capture output and print one JSON result
  --no-sandbox           run the rest of the command line with plain CPython
  -I -E -s -S -u -B      accepted and ignored
exit status: the task's; 124 timeout; 125 launcher or sandbox setup failure;
2 invalid pynox options.
"""

LIST_OPTIONS = {"--allow-read": "allow_read", "--allow-write": "allow_write", "--env": "env",
                "--package-dir": "package_dirs"}
VALUE_OPTIONS = {"--timeout": "timeout", "--memory": "memory", "--max-output": "max_output",
                 "--max-file-size": "max_file_size", "--config": "config"}
FLAG_OPTIONS = {"--allow-network": "allow_network", "--json": "json"}
NOOP_FLAGS = set("IEsSuB")
PERMISSION_KEYS = {"allow_read", "allow_write", "allow_network", "timeout", "memory", "max_output",
                   "max_file_size", "env", "package_dirs"}


def parse_args(argv):
    """Split argv into pynox options and the program; raises UsageError."""
    options = {key: [] for key in LIST_OPTIONS.values()}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--no-sandbox":
            if i:
                raise UsageError("--no-sandbox must come first: it hands the whole rest of the line to CPython")
            return {"no_sandbox": argv[i + 1:]}
        if arg in ("-h", "--help"):
            return {"help": True}
        if arg == "--version":
            return {"version": True}
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name in LIST_OPTIONS or name in VALUE_OPTIONS:
                if not eq:
                    if i + 1 >= len(argv):
                        raise UsageError(f"{name} needs a value")
                    i += 1
                    value = argv[i]
                if name in LIST_OPTIONS:
                    options[LIST_OPTIONS[name]].append(value)
                else:
                    options[VALUE_OPTIONS[name]] = value
            elif name in FLAG_OPTIONS and not eq:
                options[FLAG_OPTIONS[name]] = True
            else:
                raise UsageError(f"unknown option {name}; Python's own options need --no-sandbox")
            i += 1
            continue
        if arg == "-":
            return {**options, "program": ("stdin", None), "args": argv[i + 1:]}
        if arg.startswith("-") and len(arg) > 1:
            letters = arg[1:]
            for pos, letter in enumerate(letters):
                if letter in NOOP_FLAGS:
                    continue
                if letter in "cm":
                    rest = letters[pos + 1:]
                    if rest:
                        value, args = rest, argv[i + 1:]
                    elif i + 1 < len(argv):
                        value, args = argv[i + 1], argv[i + 2:]
                    else:
                        raise UsageError(f"-{letter} needs an argument")
                    return {**options, "program": ("code" if letter == "c" else "module", value), "args": args}
                raise UsageError(f"option -{letter} is not supported in the sandbox; "
                                 f"use pynox --no-sandbox to pass it to Python")
            i += 1
            continue
        return {**options, "program": ("script", arg), "args": argv[i + 1:]}
    raise UsageError("nothing to run: give a SCRIPT, -c CODE or -m MODULE (see pynox --help)")


def load_permissions(path: str) -> tuple:
    """The ``[permissions]`` table of a TOML file and the directory it is relative to."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise UsageError(f"--config {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path}: {exc}") from exc
    section = data.get("permissions", {})
    if not isinstance(section, dict):
        raise UsageError(f"--config {path}: [permissions] must be a table")
    for key in section:
        if key not in PERMISSION_KEYS:
            raise UsageError(f"--config {path}: unknown key permissions.{key}")
    return section, os.path.dirname(os.path.abspath(path))


def _plain_key(key: str) -> bool:
    return bool(key) and key.replace("_", "a").isalnum() and key.isascii()


def _env_pairs(values, where):
    env = {}
    for item in values:
        key, eq, value = item.partition("=")
        if not eq or not _plain_key(key) or "\0" in item:
            raise UsageError(f"{where}: expected KEY=VALUE with a plain KEY, got {item!r}")
        env[key] = value
    return env


def _check_type(section, key, kind, where):
    value = section.get(key)
    if value is not None and not isinstance(value, kind):
        raise UsageError(f"{where}: permissions.{key} has the wrong type")
    return value


def build_policy(options, cwd, implicit_read=()) -> Policy:
    """Merge the config file's defaults and the command line into a checked Policy."""
    section, base = ({}, cwd)
    where = "--config"
    if options.get("config"):
        section, base = load_permissions(options["config"])
        where = f"--config {options['config']}"
    for key in ("allow_read", "allow_write", "package_dirs"):
        items = _check_type(section, key, list, where) or []
        if not all(isinstance(item, str) for item in items):
            raise UsageError(f"{where}: permissions.{key} must be a list of paths")
    env_table = _check_type(section, "env", dict, where) or {}
    if not all(isinstance(v, str) for v in env_table.values()):
        raise UsageError(f"{where}: permissions.env values must be strings")

    def paths(key):
        try:
            from_file = [resolve_path(p, base) for p in section.get(key, [])]
            from_cli = [resolve_path(p, cwd) for p in options[key]]
        except ValueError as exc:
            raise UsageError(f"--{key.replace('_', '-').rstrip('s')}: {exc}") from exc
        return tuple(dict.fromkeys(from_file + from_cli))

    def limit(key, parse, default):
        value = options.get(key, section.get(key))
        if value is None:
            return default
        try:
            return parse(value)
        except ValueError as exc:
            raise UsageError(f"--{key.replace('_', '-')}: {exc}") from exc

    network = options.get("allow_network", _check_type(section, "allow_network", bool, where) or False)
    for key, value in env_table.items():
        if not _plain_key(key) or "\0" in value:
            raise UsageError(f"{where}: permissions.env: {key!r} is not a plain KEY with a string value")
    env = {**env_table, **_env_pairs(options["env"], "--env")}
    policy = Policy(
        allow_read=paths("allow_read"),
        allow_write=paths("allow_write"),
        package_dirs=paths("package_dirs"),
        implicit_read=tuple(implicit_read),
        network=bool(network),
        timeout_ms=limit("timeout", parse_duration_ms, DEFAULT_TIMEOUT_MS),
        memory_bytes=limit("memory", parse_size, DEFAULT_MEMORY),
        max_output=limit("max_output", parse_size, DEFAULT_MAX_OUTPUT),
        max_file_size=limit("max_file_size", parse_size, DEFAULT_MAX_FILE_SIZE),
        env=env,
    )
    try:
        policy.check()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return policy


class ProgramError(Exception):
    """The program cannot be found, as Python would report it (with its exit code)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def build_task(program, args, cwd, package_dirs=()) -> tuple:
    """The Task and the implicit read grants its program needs.

    ``-m`` looks in the working directory and the package dirs first, as the
    child will, then in the runtime's own path.
    """
    kind, value = program
    if kind == "stdin":
        return Task(kind="code", target=sys.stdin.read(), name="<stdin>", args=tuple(args)), ()
    if kind == "code":
        return Task(kind="code", target=value, name="<string>", args=tuple(args)), ()
    if kind == "script":
        path = os.path.realpath(os.path.join(cwd, value))
        if not os.path.isfile(path):
            raise ProgramError(f"can't open file {os.path.abspath(value)!r}: [Errno 2] No such file or directory", 2)
        return Task(kind="script", target=path, name=path, args=tuple(args)), (path,)
    # Only the top-level name is looked up, which imports nothing: a parent
    # package's __init__ would otherwise run here, outside the sandbox.
    top = value.split(".")[0]
    spec = None
    if top and top.isidentifier():
        spec = (importlib.machinery.PathFinder.find_spec(top, [cwd, *package_dirs])
                or importlib.util.find_spec(top))
    if spec is None:
        raise ProgramError(f"No module named {value}", 1)
    grants = ()
    if spec.origin and os.path.isabs(spec.origin):
        location = spec.submodule_search_locations
        grant = os.path.realpath(list(location)[0] if location else spec.origin)
        if not any(grant == root or grant.startswith(root + os.sep) for root in runtime_paths()):
            grants = (grant,)
    return Task(kind="module", target=value, name=value, args=tuple(args)), grants


def _print_json(obj):
    sys.stdout.buffer.write(orjson.dumps(obj) + b"\n")
    sys.stdout.flush()


def _fail(message, code):
    print(f"pynox: {message}", file=sys.stderr)
    return code


# The launcher's whole environment after it re-executes itself.  Whether it
# did is known from how it was started (the bootstrap below), never from a
# variable a caller could set.
LAUNCHER_ENV = {**BASE_ENV, **THREAD_ENV}


def _reexec_scrubbed(argv):
    """Start over in a fresh interpreter whose environment is already the task's base.

    The child is a fork of this process, and a process's initial environment
    stays in its memory (and in /proc/self/environ) however os.environ is
    edited later; the caller's secrets must never be in the memory a task
    can read.  Pool templates get the same treatment by being exec'd with a
    minimal environment.
    """
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bootstrap = (f"import sys; sys.path.insert(0, {package_root!r}); "
                 "from pynox.cli import main; sys.exit(main(scrubbed=True))")
    os.execve(sys.executable, [sys.executable, "-I", "-c", bootstrap, *argv], LAUNCHER_ENV)


def run_command(argv, scrubbed=False) -> int:
    from pynox import single_run

    try:
        options = parse_args(argv)
    except UsageError as exc:
        return _fail(exc, 2)
    if options.get("help"):
        sys.stdout.write(USAGE)
        return 0
    if options.get("version"):
        print(f"pynox {__version__}")
        return 0
    if "no_sandbox" in options:
        os.execv(sys.executable, [sys.executable, *options["no_sandbox"]])
    if not scrubbed:
        _reexec_scrubbed(argv)
    cwd = os.getcwd()
    try:
        package_dirs = [os.path.join(cwd, d) for d in options["package_dirs"]]
        task, implicit = build_task(options["program"], options["args"], cwd, package_dirs)
        policy = build_policy(options, cwd, implicit)
    except UsageError as exc:
        return _fail(exc, 2)
    except ProgramError as exc:
        return _fail(exc, exc.code)
    capture = bool(options.get("json"))
    try:
        ctx = single_run.prepare(policy.network, hint_style="cli", new_session=False)
    except SandboxSetupError as exc:
        if capture:
            _print_json(single_run.setup_failure(exc, policy))
        return _fail(exc, single_run.SETUP_EXIT)
    try:
        finished = single_run.launch(ctx, policy, task, capture=capture, cwd=cwd)
    except single_run.Interrupted as exc:
        return 128 + exc.signum
    if capture:
        result = single_run.result(finished, policy, single_run.backend_name(ctx.landlock_abi))
        _print_json(result)
        return result["exit"]
    code, error, verdict = single_run.outcome(finished, policy)
    if verdict:
        _fail(error["message"], code)  # the task's own hint line was printed by the task's side
    return code


def main(argv=None, scrubbed=False) -> int:
    """``scrubbed`` is passed only by the launcher's own re-execution bootstrap."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["doctor"]:
        from pynox.doctor import main as doctor_main

        return doctor_main(argv[1:])
    if argv[:1] == ["pool"]:
        from pynox.supervisor.main import main as pool_main

        return pool_main(argv[1:])
    return run_command(argv, scrubbed)


if __name__ == "__main__":
    sys.exit(main())
