"""A Python tool an agent can call, backed by ``pynox pool``.

    .venv/bin/python examples/agent_tool.py

``run_python`` sends the model's code to a warm pool and answers in a short
text a model can act on: the output, then the error with its location and
the hint that says which grant or limit would have allowed it.
"""

import json

from pynox.client import Pool


def describe(result: dict) -> str:
    parts = []
    if result["stdout"]:
        parts.append(result["stdout"].rstrip())
    error = result["error"]
    if error:
        where = f" at {error['file']}:{error['line']}" if error.get("line") else ""
        parts.append(f"{error['type']}{where}: {error['message']}")
        if error.get("hint"):
            parts.append(f"hint: {error['hint']}")
    if result["stdout_truncated"]:
        parts.append("(output truncated)")
    return "\n".join(parts) or f"(no output, exit {result['exit']})"


class PythonTool:
    """One pool for the agent's lifetime; one fresh confined process per call."""

    description = "Run Python 3 code in a sandbox (no network, no files outside the granted data directory)."

    def __init__(self, *pool_args: str, **grants):
        self.pool = Pool(*pool_args)
        self.grants = grants

    def run_python(self, code: str) -> str:
        return describe(self.pool.run(code, **self.grants))

    def close(self) -> None:
        self.pool.close()


if __name__ == "__main__":
    tool = PythonTool("--workers", "2", allow_read=["examples/data"], timeout="5s")
    try:
        for code in ("print(sum(range(10)))",
                     "import csv\nprint(len(list(csv.reader(open('examples/data/orders.csv')))))",
                     "open('/etc/shadow')",
                     "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9')"):
            print(json.dumps(code), "->")
            print("  " + tool.run_python(code).replace("\n", "\n  "))
    finally:
        tool.close()
