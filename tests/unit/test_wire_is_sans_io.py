"""pynox.wire must stay sans-IO: no module in it may reach for I/O machinery."""

import ast
import subprocess
import sys
from pathlib import Path

import pynox.wire

FORBIDDEN = {"socket", "os", "selectors", "asyncio", "subprocess", "threading"}
WIRE_DIR = Path(pynox.wire.__file__).parent
PROJECT_ROOT = WIRE_DIR.parent.parent


def imported_modules(source: str) -> set[str]:
    """Top-level names of every module a source file imports, dynamically or not."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Name) and node.id == "__import__":
            names.add("__import__")
    return names


def test_the_checker_notices_forbidden_imports():
    source = "import os.path\nfrom socket import socket\nimport threading as t\n__import__('asyncio')\n"
    assert imported_modules(source) >= {"os", "socket", "threading", "__import__"}


def test_no_wire_module_imports_io_machinery():
    modules = sorted(WIRE_DIR.glob("*.py"))
    assert {path.name for path in modules} >= {"__init__.py", "framing.py", "codec.py", "messages.py", "connection.py"}
    for path in modules:
        banned = imported_modules(path.read_text()) & (FORBIDDEN | {"importlib", "__import__"})
        assert not banned, f"{path.name} imports {sorted(banned)}"


def test_importing_wire_loads_no_io_modules():
    # os is already loaded by site at start-up, so only the AST test can see
    # it; the rest must not appear in a fresh interpreter.
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(PROJECT_ROOT)!r})\n"
        "before = set(sys.modules)\n"
        "import pynox.wire\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    gained = set(result.stdout.split())
    assert "pynox.wire" in gained
    assert not gained & (FORBIDDEN - {"os"})
