"""``pynox pool``: parse the command line, load the configuration, serve.

A configuration mistake or a template that cannot start stops the pool
before the ready event, with one ``pynox pool:`` line naming the cause and
exit status 1 (2 for invalid options).
"""

import os
import sys

from pynox.errors import UsageError
from pynox.supervisor import config as pool_config
from pynox.supervisor.pool import Pool, PoolStartError
from pynox.supervisor.requests import check_profiles

USAGE = "usage: pynox pool [--workers N] [--preload MOD,MOD] [--package-dir DIR] [--config FILE] [--log json]"
OPTIONS = {"--workers": "workers", "--preload": "preload", "--package-dir": "package_dirs", "--config": "config",
           "--log": "log"}


def parse_args(argv) -> dict:
    options = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            return {"help": True}
        name, eq, value = arg.partition("=")
        if name not in OPTIONS:
            raise UsageError(f"unknown option {arg!r}\n{USAGE}")
        if not eq:
            if i + 1 >= len(argv):
                raise UsageError(f"{name} needs a value")
            i += 1
            value = argv[i]
        key = OPTIONS[name]
        if key == "workers":
            try:
                value = int(value)
            except ValueError:
                raise UsageError(f"--workers: not an integer: {value!r}") from None
        elif key == "preload":
            value = [m.strip() for m in value.split(",") if m.strip()]
        elif key == "package_dirs":
            value = options.get("package_dirs", []) + [value]
        options[key] = value
        i += 1
    return options


def main(argv) -> int:
    try:
        options = parse_args(argv)
    except UsageError as exc:
        print(f"pynox pool: {exc}", file=sys.stderr)
        return 2
    if options.pop("help", False):
        print(USAGE)
        return 0
    path = options.pop("config", None)
    try:
        config = pool_config.load(path, options)
        check_profiles(config, os.getcwd())
    except UsageError as exc:
        print(f"pynox pool: {exc}", file=sys.stderr)
        return 2
    pool = Pool(config, log=sys.stderr.buffer if config.log == "json" else None)
    try:
        pool.start()
        return pool.serve()
    except PoolStartError as exc:
        print(f"pynox pool: {exc}", file=sys.stderr)
        return 1
    finally:
        pool.shutdown()
