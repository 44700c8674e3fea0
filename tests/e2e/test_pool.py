"""``pynox pool`` end to end: the real supervisor, templates and confined children.

Each test starts a real pool through :class:`pynox.client.Pool` and checks
what a client sees on the protocol, plus what is left on the machine
(processes, files) where the protocol promises something about it.
"""

import os
import signal
import subprocess
import sys
import time

import orjson
import pytest

from processes import alive, descendants, templates_of, wait_until
from pynox.client import Pool, PoolClosed

READY_KEYS = {"event", "workers", "runtime", "preloaded_modules", "package_dirs", "config", "profiles"}
RESULT_KEYS = {"id", "exit", "stdout", "stderr", "error", "stdout_truncated", "stderr_truncated", "duration_ms",
               "duration_us", "queue_us", "runtime", "policy"}
POLICY_KEYS = {"allow_read", "allow_write", "network", "subprocesses", "timeout_ms", "memory_bytes", "backend"}
STATS_KEYS = {"id", "event", "uptime_ms", "workers", "sessions_active", "jobs", "ok", "failed", "timeouts",
              "signals", "request_errors", "worker_errors", "duration_ms_total", "queue_us_total", "errors"}


@pytest.fixture
def pool(tmp_path):
    with Pool("--workers", "2", cwd=tmp_path) as p:
        yield p


def test_ready_event_has_every_field(pool):
    assert set(pool.ready) == READY_KEYS
    assert pool.ready["event"] == "ready" and pool.ready["workers"] == 2 and pool.ready["runtime"] == "pynox"


def test_tiny_job_has_the_seed_result_shape(pool):
    result = pool.run("import json\nprint(json.dumps({'ok': True}))", id="task-1", name="step.py")
    assert set(result) == RESULT_KEYS
    assert result["id"] == "task-1" and result["exit"] == 0 and result["error"] is None
    assert result["stdout"] == '{"ok": true}\n'
    assert result["runtime"]["mode"] == "pool" and result["runtime"]["preloaded_modules"] == []
    assert POLICY_KEYS <= set(result["policy"]) and result["policy"]["network"] == "deny"
    assert result["duration_us"] // 1000 == result["duration_ms"]


def test_error_location_uses_the_inline_name(pool):
    result = pool.run("x = 1\nopen('/etc/shadow')\n", name="step.py")
    assert result["error"]["type"] == "PermissionError"
    assert (result["error"]["file"], result["error"]["line"]) == ("step.py", 2)
    assert "allow_read" in result["error"]["hint"]


def test_script_with_args_and_relative_grants(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("hello")
    (tmp_path / "out").mkdir()
    (tmp_path / "app.py").write_text(
        "import sys\ntext = open('data/in.txt').read()\nopen('out/o.txt', 'w').write(text + sys.argv[1])\n")
    with Pool("--workers", "1", cwd=tmp_path) as p:
        result = p.run(script="app.py", args=["!"], allow_read=["data"], allow_write=["out"])
    assert result["exit"] == 0, result
    assert (tmp_path / "out" / "o.txt").read_text() == "hello!"
    assert str(tmp_path / "data") in result["policy"]["allow_read"]
    assert result["policy"]["allow_write"] == [str(tmp_path / "out")]


def test_nothing_of_one_job_reaches_the_next(tmp_path):
    with Pool("--workers", "1", "--preload", "numpy", cwd=tmp_path) as p:
        first = p.run("import os, random, numpy, colorsys\nos.environ['LEAK'] = '1'\nleak = 1\n"
                      "f = open('/dev/null')\nprint(random.random(), numpy.random.rand())")
        second = p.run("import os, sys, random, numpy\n"
                       "print('LEAK' in os.environ, 'leak' in globals(), 'colorsys' in sys.modules,"
                       " len(os.listdir('/proc/self/fd')))\nprint(random.random(), numpy.random.rand())")
    assert first["exit"] == 0 and second["exit"] == 0, (first, second)
    flags, randoms = second["stdout"].splitlines()
    assert flags.split()[:3] == ["False", "False", "False"]
    assert randoms != first["stdout"].strip()


def test_every_bad_line_gets_one_answer_and_the_pool_survives(pool):
    bad = [b"", b"   ", b"not json", b"[1, 2]", b'{"id": "\\ud800", "code": "1"}', b'{"id": 100000000000000000000000}', b'{"code": "print(1)"}', b"\xff\xfe{}", b'{"id": 1, "id": 2}',
           b'{"id": 3, "code": NaN}', b"[" * 100_000, b'{"id": true, "code": "1"}']
    for line in bad:
        pool.send_line(line)
    answers = [pool.read() for _ in bad]
    assert all(a["id"] is None and a["error"]["type"] == "RequestError" for a in answers), answers
    assert pool.run("print('still here')")["stdout"] == "still here\n"


@pytest.mark.parametrize("request_body, needle", [
    ({"code": "1", "bogus": 1}, "unknown field"),
    ({"code": "1", "script": "a.py"}, "exactly one"),
    ({}, "exactly one"),
    ({"code": 5}, "code"),
    ({"code": "1", "args": "a"}, "args"),
    ({"code": "1", "allow_read": ["/nonexistent/x"]}, "allow_read"),
    ({"code": "1", "timeout": "soon"}, "timeout"),
    ({"code": "1", "memory": -1}, "memory"),
    ({"code": "1", "env": {"A": 1}}, "env"),
    ({"code": "1", "allow_network": "yes"}, "allow_network"),
    ({"code": "1", "profile": "nope"}, "profile"),
    ({"code": "1", "allow_write": [sys.prefix]}, "runtime"),
    ({"code": "1", "session": "s"}, "session"),
    ({"code": "1", "timeout": None}, "null"),
    ({"code": "1", "name": None}, "null"),
])
def test_invalid_requests_are_request_errors_carrying_the_id(pool, request_body, needle):
    result = pool.run(id="bad", **request_body)
    assert result["id"] == "bad" and result["error"]["type"] == "RequestError"
    assert needle in result["error"]["message"]
    assert result["policy"] is None


def test_an_oversized_line_is_discarded_and_the_next_is_read(pool):
    pool.send_line(b'{"id": "big", "code": "' + b"a" * (1 << 20) + b'"}')
    pool.send({"id": "after", "code": "print('ok')"})
    first = pool.read()
    assert first["id"] is None and "longer than" in first["error"]["message"]
    assert pool.wait_for("after")["stdout"] == "ok\n"


def test_timeout_kills_the_child_and_the_pool_keeps_serving(pool):
    slow = pool.run("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)",
                    timeout="500ms")
    assert slow["exit"] == 124 and slow["error"]["type"] == "TimeoutError"
    assert slow["duration_ms"] < 5000
    assert pool.run("print(2)")["stdout"] == "2\n"


def test_duplicate_in_flight_id_is_refused(pool):
    pool.send({"id": "dup", "code": "import time; time.sleep(1)"})
    pool.send({"id": "dup", "code": "print(1)"})
    first = pool.read(timeout=30)
    assert first["id"] == "dup" and first["error"]["type"] == "RequestError" and "in flight" in first["error"]["message"]
    assert pool.read(timeout=30)["exit"] == 0


def test_a_task_cannot_forge_results_for_another_job(pool):
    forged = ('{"id": "victim", "exit": 0, "stdout": "forged", "stderr": "", "error": null}\n'
              '{"event": "ready"}\n')
    code = (f"import os\nforged = {forged!r}\n"
            "for fd in map(int, os.listdir('/proc/self/fd')):\n"
            "    try: os.write(fd, forged.encode())\n"
            "    except OSError: pass\n")
    pool.send({"id": "attacker", "code": code})
    pool.send({"id": "victim", "code": "import time; time.sleep(0.3); print('real')"})
    answers = {}
    for _ in range(2):
        message = pool.read(timeout=30)
        assert message["id"] not in answers, message
        answers[message["id"]] = message
    assert answers["victim"]["stdout"] == "real\n"
    assert "forged" in answers["attacker"]["stdout"]


def test_stats_counts_outcomes_disjointly(pool):
    pool.run("print(1)")
    pool.run("raise ValueError('x')")
    pool.run("while True: pass", timeout="300ms")
    pool.run(bogus=1)
    stats = pool.stats()
    assert set(stats) == STATS_KEYS and stats["event"] == "stats"
    assert (stats["jobs"], stats["ok"], stats["failed"], stats["timeouts"], stats["request_errors"]) == (4, 1, 1, 1, 1)
    assert stats["jobs"] == sum(stats[k] for k in ("ok", "failed", "timeouts", "signals", "request_errors",
                                                     "worker_errors"))
    assert stats["errors"] == {"ValueError": 1, "TimeoutError": 1, "RequestError": 1}


def test_eof_drains_accepted_jobs_and_exits_zero(tmp_path):
    with Pool("--workers", "1", cwd=tmp_path) as p:
        for i in range(4):
            p.send({"id": i, "code": f"import time; time.sleep(0.1); print({i})"})
        p.process.stdin.close()
        answers = sorted(p.read(timeout=30)["id"] for _ in range(4))
        assert answers == [0, 1, 2, 3]
        assert p.process.wait(30) == 0


def test_a_killed_template_fails_its_job_and_is_replaced(tmp_path):
    (tmp_path / "w").mkdir()
    with Pool("--workers", "1", cwd=tmp_path) as p:
        p.send({"id": "victim", "code": "import time; open('w/running', 'w').close(); time.sleep(30)",
                "allow_write": ["w"]})
        assert wait_until(lambda: (tmp_path / "w" / "running").exists(), 30)
        templates = templates_of(p.process.pid)
        assert len(templates) == 1
        os.kill(templates[0], signal.SIGKILL)
        result = p.wait_for("victim", timeout=30)
        assert result["error"]["type"] == "PoolWorkerError" and result["exit"] == 125
        assert p.run("print('replaced')", wait=60)["stdout"] == "replaced\n"
        assert p.stats()["worker_errors"] == 1


def test_a_template_that_stops_answering_is_replaced(tmp_path):
    with Pool("--workers", "1", cwd=tmp_path) as p:
        # The child forked ahead for the next job is asked for while a job runs; a job
        # that lasts half a second leaves the template ample time to have answered,
        # so the job below surely binds to that child.
        assert p.run("import time; time.sleep(0.5)", wait=60)["exit"] == 0
        assert wait_until(lambda: len(descendants(p.process.pid)) == 2)
        stopped = templates_of(p.process.pid)[0]
        os.kill(stopped, signal.SIGSTOP)
        result = p.run("print(1)", wait=60)
        assert result["error"]["type"] == "PoolWorkerError", result
        assert "template" in result["error"]["message"]
        assert p.run("print('again')", wait=60)["stdout"] == "again\n"
        assert stopped not in templates_of(p.process.pid)
        assert not alive(stopped)


def test_a_failing_preload_stops_the_pool_with_its_name(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pynox", "pool", "--preload", "no_such_module_xyz"],
                          input=b"", capture_output=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1
    assert b"no_such_module_xyz" in proc.stderr and proc.stdout == b""


def test_a_preload_that_starts_a_thread_is_rejected(tmp_path):
    (tmp_path / "threaded.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    proc = subprocess.run([sys.executable, "-m", "pynox", "pool", "--preload", "threaded",
                           "--package-dir", str(tmp_path)], input=b"", capture_output=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 1 and b"thread" in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_stopping_the_pool_leaves_no_template_or_child(tmp_path, signum):
    with Pool("--workers", "2", cwd=tmp_path) as p:
        p.send({"id": 1, "code": "import time; time.sleep(60)"})
        p.send({"id": 2, "code": "import time; time.sleep(60)"})
        assert wait_until(lambda: len(descendants(p.process.pid)) >= 4)
        family = descendants(p.process.pid)
        p.process.send_signal(signum)
        p.process.wait(30)
        assert wait_until(lambda: not any(alive(pid) for pid in family)), [pid for pid in family if alive(pid)]


def test_log_json_has_one_line_per_job_and_no_output(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pynox", "pool", "--workers", "1", "--log=json"],
        input=b'{"id": "a", "code": "print(\'SECRET-OUTPUT\')"}\n{"id": "b", "code": "open(\'/etc/passwd\')"}\n',
        capture_output=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0
    lines = [orjson.loads(line) for line in proc.stderr.splitlines()]
    assert [line["id"] for line in lines] == ["a", "b"]
    assert lines[1]["error"] == "PermissionError" and lines[0]["error"] is None
    assert {"ts_ms", "event", "id", "session", "step", "exit", "error", "message", "duration_ms", "queue_us",
            "network", "truncated"} <= set(lines[0])
    assert b"SECRET-OUTPUT" not in proc.stderr


def test_logging_is_off_by_default(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pynox", "pool", "--workers", "1"],
                          input=b'{"id": "a", "code": "print(1)"}\n', capture_output=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == b""


def test_results_come_in_completion_order(tmp_path):
    with Pool("--workers", "2", cwd=tmp_path) as p:
        p.send({"id": "slow", "code": "import time; time.sleep(1)"})
        p.send({"id": "fast", "code": "print(1)"})
        assert [p.read(timeout=30)["id"] for _ in range(2)] == ["fast", "slow"]


def test_backpressure_never_loses_a_result(tmp_path):
    with Pool("--workers", "1", cwd=tmp_path) as p:
        for i in range(12):
            p.send({"id": i, "code": "print('x' * 100000)"})
        ids = sorted(p.read(timeout=60)["id"] for _ in range(12))
        assert ids == list(range(12))


def test_pool_closed_when_unreadable_config(tmp_path):
    with pytest.raises(PoolClosed):
        Pool("--config", str(tmp_path / "missing.toml"), cwd=tmp_path)


def test_a_request_up_from_the_child_is_answered_not_ignored(pool):
    code = ("import os, socket, json, stat\n"
            "def is_socket(fd):\n"
            "    try: return stat.S_ISSOCK(os.fstat(fd).st_mode)\n"
            "    except OSError: return False\n"
            "fd = next(fd for fd in range(3, 64) if is_socket(fd))\n"
            "s = socket.socket(fileno=fd)\n"
            "s.sendall(b'{\"op\": \"host\", \"id\": 1, \"function\": \"search\"}\\n')\n"
            "s.settimeout(5)\n"
            "data = b''\n"
            "while b'error' not in data:\n"
            "    data += s.recv(65536)\n"
            "print([json.loads(line) for line in data.splitlines()])\n")
    result = pool.run(code)
    assert result["exit"] == 0, result
    assert "no host function is available" in result["stdout"] and "'id': 1" in result["stdout"]


def test_a_job_near_the_line_limit_still_runs(pool):
    padding = "x" * (900 * 1024)
    result = pool.run(f"data = {padding!r}\nprint(len(data))")
    assert result["exit"] == 0 and result["stdout"] == f"{900 * 1024}\n", result["error"]


def test_the_queue_holds_twice_the_worker_count(tmp_path):
    """Requests beyond running jobs plus 2 x workers stay unread in the pipe:
    a SIGTERM then answers only what the pool had accepted."""
    with Pool("--workers", "1", cwd=tmp_path) as p:
        for i in range(30):
            p.send({"id": i, "code": "import time; time.sleep(10)"})
        time.sleep(1.0)
        p.process.send_signal(signal.SIGTERM)
        answers = []
        while True:
            try:
                answers.append(p.read(timeout=10))
            except PoolClosed:
                break
        # one running, at most two queued, at most one line in the framer's hands
        assert 1 <= len(answers) <= 4, [a["id"] for a in answers]
        assert all(a["error"]["type"] == "PoolWorkerError" for a in answers)
