"""Resource limits: memory, output, wall-clock time and file size.

The checks are on what the launcher observed and what is left on disk:
the error type and hint, the exit status, bounded captured output, a bounded
return time, and the real size of a file written past the limit.
"""

import json
import os
import sys
import textwrap
import time

import pytest


# --- memory ------------------------------------------------------------------------------------

MEMORY_FLOODS = {
    "one-2GiB-bytearray": "b = bytearray(2 * 1024**3)",
    "list-append-loop": "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))",
    "string-doubling": "s = 'x'\nwhile True:\n    s = s + s",
    "numpy-huge-zeros": "import numpy\na = numpy.ones((1 << 30,), dtype='u1')",
}


@pytest.fixture(scope="module")
def floods(module_pynox):
    """Every flood at once, each in its own pynox process (they are independent)."""
    argvs = [["--json", "--memory", "256m", "--timeout", "10s", "-c", code] for code in MEMORY_FLOODS.values()]
    return dict(zip(MEMORY_FLOODS, module_pynox.run_many(argvs, workers=len(argvs))))


@pytest.mark.parametrize("name", list(MEMORY_FLOODS))
def test_memory_flood_ends_in_memory_error(floods, name):
    run = floods[name]
    result = run.result
    assert run.seconds < 10, run
    assert result["exit"] == 1, result
    assert result["error"]["type"] == "MemoryError", result
    hint = result["error"]["hint"] or ""
    assert "memory" in hint and "--memory" in hint, result
    assert result["policy"]["memory_bytes"] == 256 << 20


def test_memory_limit_is_the_address_space_limit(pynox, fs):
    code = "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS))"
    result = pynox.task(code, extra=["--memory", "300m"])
    assert result["stdout"] == f"({300 << 20}, {300 << 20})\n", result


def test_memory_limit_cannot_be_raised_by_the_task(pynox, fs):
    code = ("import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n    print('raised')\n"
            "except (ValueError, OSError) as e:\n    print('refused')\nb = bytearray(512 * 1024**2)")
    result = pynox.task(code, extra=["--memory", "256m"])
    assert result["stdout"] == "refused\n", result
    assert result["error"]["type"] == "MemoryError", result


def test_numpy_works_under_512m(pynox, fs):
    code = textwrap.dedent("""\
        import json
        import numpy as np
        rng = np.random.default_rng(0)
        a = rng.standard_normal((500, 500))
        b = np.linalg.inv(a)
        c = a @ b
        print(json.dumps({"shape": list(c.shape), "close": bool(np.allclose(c, np.eye(500)))}))
        """)
    result = pynox.task(code, extra=["--memory", "512m"])
    assert result["exit"] == 0, result
    assert json.loads(result["stdout"]) == {"shape": [500, 500], "close": True}


# --- output ------------------------------------------------------------------------------------

def test_output_flood_is_truncated_and_bounded(pynox, fs, tmp_path):
    # Run pynox under a small Python wrapper that reports the peak RSS of its
    # children (the launcher and the task), so a launcher that buffered the
    # whole flood would show up.
    wrapper = tmp_path / "rss.py"
    wrapper.write_text(textwrap.dedent("""\
        import json, resource, subprocess, sys
        proc = subprocess.run(sys.argv[1:], capture_output=True, timeout=20)
        sys.stdout.buffer.write(proc.stdout)
        print(json.dumps({"rc": proc.returncode,
                          "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
        """))
    start = time.monotonic()
    run = pynox.run("--json", "--max-output", "10000", "--timeout", "2s", "-c", "while True: print('x' * 1000)",
                    prefix=[sys.executable, wrapper])
    elapsed = time.monotonic() - start
    assert elapsed < 2 + 4, f"took {elapsed:.1f}s"
    result_line, usage_line = run.stdout.splitlines()
    result, usage = json.loads(result_line), json.loads(usage_line)
    assert usage["rc"] == result["exit"] == 124, result
    assert result["error"]["type"] == "TimeoutError"
    assert 0 < len(result["stdout"]) <= 10000
    assert len(result["stdout"].encode()) <= 10000
    assert result["stdout_truncated"] is True
    assert result["stderr_truncated"] is False
    assert usage["maxrss_kib"] < 200 * 1024, f"pynox peaked at {usage['maxrss_kib']} KiB"


def test_stderr_flood_is_truncated(pynox, fs):
    result = pynox.json("--max-output", "5000", "-c",
                        "import sys\nfor _ in range(2000): sys.stderr.write('e' * 999 + '\\n')")
    assert result["exit"] == 0, result
    assert len(result["stderr"].encode()) <= 5000
    assert result["stderr_truncated"] is True
    assert result["stdout_truncated"] is False


def test_output_under_the_limit_is_kept_whole(pynox, fs):
    result = pynox.json("--max-output", "10000", "-c", "print('y' * 9000)")
    assert result["exit"] == 0
    assert result["stdout"] == "y" * 9000 + "\n"
    assert result["stdout_truncated"] is False


def test_raw_bytes_on_fd1_are_replaced_not_fatal(pynox, fs):
    code = "import os\nos.write(1, b'\\xff\\xfe ok \\xc3\\x28 \\xed\\xa0\\x80 end\\n')\nos.write(2, b'\\x80err\\n')"
    result = pynox.json("-c", code)
    assert result["exit"] == 0, result
    assert "ok" in result["stdout"] and "end" in result["stdout"]
    assert "\ufffd" in result["stdout"]
    assert result["stderr"] == "\ufffderr\n"


def test_split_utf8_across_the_truncation_point_stays_valid(pynox, fs):
    # 3-byte characters cut at a byte limit that is not a multiple of 3.
    result = pynox.json("--max-output", "1000", "-c", "print('\u20ac' * 2000)")
    assert result["stdout_truncated"] is True
    assert len(result["stdout"].encode()) <= 1000 + 3
    assert set(result["stdout"]) <= {"\u20ac", "\ufffd"}


def test_task_closing_its_report_channel_still_gets_an_exit_status(pynox, fs):
    """The task may close every descriptor, the launcher's socket included."""
    result = pynox.json("-c", "import os, sys\nos.closerange(3, 1024)\nsys.exit(7)")
    assert result["exit"] == 7, result


def test_forged_report_on_the_wire_does_not_change_the_outcome(pynox, fs):
    """The task can write to the launcher's socket; the exit status still comes from the kernel."""
    code = textwrap.dedent("""\
        import os, stat, sys
        for fd in range(3, 64):
            try:
                if stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.write(fd, b'{"id":1,"exit":0,"error":null}\\n')
            except OSError:
                pass
        os._exit(9)
        """)
    result = pynox.json("-c", code)
    assert result["exit"] == 9, result


# --- wall-clock timeout ------------------------------------------------------------------------

TIMEOUTS = {
    "busy-loop": "print('before', flush=True)\nwhile True:\n    pass",
    "sleep-ignoring-SIGTERM": "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(100)",
    "blocked-on-stdin": "import sys\nsys.stdin.read()",
    "threads-spinning-with-signals-blocked": (
        "import signal, threading\nsignal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))\n"
        "for _ in range(4):\n    threading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()\n"
        "threading.Event().wait()"),
}


@pytest.fixture(scope="module")
def timeouts(module_pynox):
    """Every scenario at once, each in its own pynox process; the timeout is wall-clock, per task."""
    read_end, write_end = os.pipe()  # stdin that never reaches EOF while the tasks run
    try:
        argvs = [["--json", "--timeout", "1s", "-c", code] for code in TIMEOUTS.values()]
        runs = module_pynox.run_many(argvs, workers=len(argvs), stdin=read_end, timeout=15)
    finally:
        os.close(read_end)
        os.close(write_end)
    return dict(zip(TIMEOUTS, runs))


@pytest.mark.parametrize("name", list(TIMEOUTS))
def test_timeout_kills_within_bounds(timeouts, name):
    run = timeouts[name]
    result = run.result
    assert run.seconds < 3.5, f"{name} took {run.seconds:.1f}s"
    assert result["exit"] == 124, result
    assert result["error"]["type"] == "TimeoutError", result
    assert 1000 <= result["duration_ms"] < 3000, result
    if name == "busy-loop":
        assert result["stdout"] == "before\n", result  # output from before the kill is kept


# --- file size ---------------------------------------------------------------------------------

def test_max_file_size_stops_a_big_write(pynox, fs):
    target = fs.rw / "big.bin"
    code = f"with open({str(target)!r}, 'wb') as f:\n    f.write(b'z' * (2 * 1024 * 1024))\n"
    result = pynox.task(code, rw=[fs.rw], extra=["--max-file-size", "1m"])
    assert result["exit"] == 1, result
    assert result["error"]["type"] in ("OSError", "IOError"), result
    assert "File too large" in result["error"]["message"] or "27" in result["error"]["message"], result
    assert "--max-file-size" in (result["error"]["hint"] or ""), result
    assert target.stat().st_size <= 1024 * 1024
    assert result["policy"]["max_file_size"] == 1024 * 1024


def test_max_file_size_stops_seek_and_write_past_the_limit(pynox, fs):
    target = fs.rw / "sparse.bin"
    code = (f"import os\nfd = os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\n"
            "os.lseek(fd, 5 * 1024 * 1024, 0)\nos.write(fd, b'x')")
    result = pynox.task(code, rw=[fs.rw], extra=["--max-file-size", "1m"])
    assert result["exit"] == 1, result
    assert target.stat().st_size <= 1024 * 1024


def test_max_file_size_stops_truncate_growth(pynox, fs):
    target = fs.rw / "grown.bin"
    target.write_bytes(b"")
    result = pynox.task(f"import os\nos.truncate({str(target)!r}, 10 * 1024 * 1024)", rw=[fs.rw],
                        extra=["--max-file-size", "1m"])
    assert result["exit"] == 1, result
    assert target.stat().st_size == 0


def test_writes_below_max_file_size_work(pynox, fs):
    target = fs.rw / "ok.bin"
    result = pynox.task(f"open({str(target)!r}, 'wb').write(b'z' * 500_000)", rw=[fs.rw],
                        extra=["--max-file-size", "1m"])
    assert result["exit"] == 0, result
    assert target.stat().st_size == 500_000
