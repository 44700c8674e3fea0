"""A first task: computes, reads its own arguments, and tries to leave the sandbox."""

import json
import sys

print(json.dumps({"ok": True, "args": sys.argv[1:]}))
try:
    open("/etc/passwd").read()
except PermissionError as exc:
    print("denied as expected:", exc)
