"""What is running under a pool, read from /proc: for tests that check what a pool leaves behind."""

import os
import time


def children_of(pid):
    """Direct children of ``pid``, whichever of its threads forked them."""
    kids = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
        except FileNotFoundError:
            continue
    return kids


def descendants(pid):
    """Every live descendant pid of ``pid``."""
    found, todo = [], [pid]
    while todo:
        kids = children_of(todo.pop())
        found += kids
        todo += kids
    return found


def templates_of(pool_pid):
    """The pool's template processes: its direct children (their forks share the cmdline)."""
    out = []
    for pid in children_of(pool_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"pynox.template" in f.read():
                    out.append(pid)
        except FileNotFoundError:
            pass
    return sorted(out)


def alive(pid):
    """Running, and not a zombie (the command name may hold spaces or parentheses)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()
