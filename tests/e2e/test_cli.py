"""The command line in passthrough mode (exit codes, the task's own
stderr, ``pynox:`` lines), option handling, --config, the --json shape and
``pynox doctor``.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def pynox_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("pynox: ")]


# --- exit codes and stderr in passthrough mode -------------------------------------------------

EXIT_CASES = {"sys.exit(3)": ("import sys; sys.exit(3)", 3), "sys.exit()": ("import sys; sys.exit()", 0),
              "os._exit(42)": ("import os; os._exit(42)", 42), "sys.exit(261)": ("import sys; sys.exit(256 + 5)", 5)}
UNSUPPORTED = {"-O": ["-O", "-c", "pass"], "-OO": ["-OO", "-c", "pass"], "-W": ["-W", "error", "-c", "pass"],
               "-X": ["-X", "dev", "-c", "pass"], "-b": ["-b", "-c", "pass"]}
UNKNOWN = {"--frobnicate": ["--frobnicate", "-c", "pass"], "--allow-network=yes": ["--allow-network=yes", "-c", "pass"],
           "--json=1": ["--json=1", "-c", "pass"]}
FLAGS = {"separate": ["-I", "-E", "-s", "-S", "-u", "-B", "-c", "print('ran')"],
         "combined": ["-IEsSuB", "-c", "print('ran')"], "combined-with-c": ["-Ic", "print('ran')"]}
MISSING = {"absolute-script": (["/definitely/missing/script.py"], 2), "relative-script": (["missing_relative.py"], 2),
           "module": (["-m", "no_such_module_pynox_e2e"], 1), "nothing": ([], 2)}
INVALID = {
    "allow-read-missing": ["--allow-read", "/nonexistent/pynox-e2e"],
    "allow-write-missing": ["--allow-write", "/nonexistent/pynox-e2e"],
    "package-dir-missing": ["--package-dir", "/nonexistent/pynox-e2e"],
    "timeout-word": ["--timeout", "soon"],
    "timeout-zero": ["--timeout", "0s"],
    "memory-word": ["--memory", "lots"],
    "max-output-negative": ["--max-output", "-1"],
    "max-file-size-unit": ["--max-file-size", "1x"],
    "env-no-equals": ["--env", "NOEQUALS"],
    "env-bad-key": ["--env", "BAD KEY=1"],
    "write-grant-over-runtime": ["--allow-write", os.path.dirname(sys.executable)],
    "write-grant-over-root": ["--allow-write", "/"],
    "no-sandbox-not-first": ["--json", "--no-sandbox"],
}
BAD_CONFIGS = {"list-not-a-list": '[permissions]\nallow_read = "not-a-list"\n', "toml-syntax": "[permissions\n",
               "wrong-type": '[permissions]\nallow_network = "yes"\n', "not-a-table": "permissions = 3\n",
               "unknown-key": '[permissions]\nallow_read = []\nallow_everything = true\n'}


@pytest.fixture(scope="module")
def cases(module_pynox, tmp_path_factory):
    """Every simple invocation of this module, run concurrently once (each its own pynox process)."""
    configs = tmp_path_factory.mktemp("configs")
    argvs = {}
    for name, (code, _) in EXIT_CASES.items():
        argvs[f"exit:{name}"] = ["-c", code]
    for table, prefix in ((UNSUPPORTED, "unsupported"), (UNKNOWN, "unknown"), (FLAGS, "flags")):
        for name, args in table.items():
            argvs[f"{prefix}:{name}"] = args
    for name, (args, _) in MISSING.items():
        argvs[f"missing:{name}"] = args
    for name, args in INVALID.items():
        argvs[f"invalid:{name}"] = [*args, "-c", "print('ran')"]
    argvs["invalid:value-missing"] = ["--timeout"]
    (configs / "pkgs" / "sub").mkdir(parents=True)
    argvs["invalid:write-grant-over-package-dir"] = ["--allow-write", configs / "pkgs", "--package-dir",
                                                     configs / "pkgs" / "sub", "-c", "print('ran')"]
    argvs["missing-config"] = ["--config", configs / "nope.toml", "-c", "print('ran')"]
    for name, text in BAD_CONFIGS.items():
        path = configs / f"{name}.toml"
        path.write_text(text)
        argvs[f"config:{name}"] = ["--config", path, "-c", "print('ran')"]
    runs = module_pynox.run_many(list(argvs.values()))
    return dict(zip(argvs, runs))


@pytest.mark.parametrize("name", list(EXIT_CASES))
def test_exit_status_is_the_tasks(cases, name):
    run = cases[f"exit:{name}"]
    assert run.returncode == EXIT_CASES[name][1], run
    assert run.stderr == "", run


def test_sys_exit_with_a_message(pynox):
    run = pynox.run("-c", "import sys; sys.exit('bad input')")
    assert run.returncode == 1, run
    assert run.stderr == "bad input\n"


def test_uncaught_exception_prints_a_clean_traceback(pynox):
    run = pynox.run("-c", "def f():\n    raise ValueError('boom')\nf()")
    assert run.returncode == 1, run
    assert run.stderr.startswith("Traceback (most recent call last):\n"), run
    assert "pynox/" not in run.stderr and "runpy" not in run.stderr, run
    assert run.stderr.splitlines()[-1] == "ValueError: boom"
    assert 'File "<string>", line 3, in <module>' in run.stderr
    assert 'File "<string>", line 2, in f' in run.stderr
    assert pynox_lines(run.stderr) == []  # no grant explains a ValueError
    assert run.stdout == ""


def test_exception_from_a_script_and_the_stdlib_has_no_pynox_frames(pynox, tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import json\n\ndef load():\n    return json.loads('{not json')\n\nload()\n")
    run = pynox.run(script)
    assert run.returncode == 1, run
    assert run.stderr.startswith("Traceback (most recent call last):\n"), run
    assert "pynox/" not in run.stderr, run
    assert f'File "{script}", line 6, in <module>' in run.stderr
    assert "json.decoder.JSONDecodeError" in run.stderr.splitlines()[-1]


def test_exception_in_a_module_run_with_dash_m(pynox):
    (pynox.cwd / "crashy.py").write_text("raise KeyError('k')\n")
    run = pynox.run("-m", "crashy")
    assert run.returncode == 1, run
    assert run.stderr.startswith("Traceback (most recent call last):\n"), run
    assert "pynox/" not in run.stderr and "runpy" not in run.stderr, run
    assert run.stderr.splitlines()[-1] == "KeyError: 'k'"


def test_syntax_error(pynox):
    run = pynox.run("-c", "def (:")
    assert run.returncode == 1, run
    assert "SyntaxError" in run.stderr.splitlines()[-1]
    assert "pynox/" not in run.stderr


def test_permission_error_ends_with_a_pynox_hint_line(pynox, fs):
    run = pynox.run("--allow-read", fs.ro, "-c", f"open({str(fs.outside_file)!r}).read()")
    assert run.returncode == 1, run
    lines = run.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-2].startswith("PermissionError: [Errno 13]"), run
    assert lines[-1].startswith("pynox: "), run
    assert "--allow-read" in lines[-1]
    assert len(pynox_lines(run.stderr)) == 1
    assert "outside secret" not in run.stdout + run.stderr


def test_timeout_exits_124_with_one_pynox_line(pynox):
    start = time.monotonic()
    run = pynox.run("--timeout", "1s", "-c", "print('started', flush=True)\nwhile True: pass")
    assert time.monotonic() - start < 4
    assert run.returncode == 124, run
    assert run.stdout == "started\n"
    lines = pynox_lines(run.stderr)
    assert len(lines) == 1 and "timeout" in lines[0], run
    assert run.stderr.strip() == lines[0]


def test_tasks_own_timeout_error_is_not_reported_as_a_pynox_timeout(pynox):
    """Python's builtin TimeoutError, raised by the task itself, is the task's
    error (exit 1, its traceback); pynox has nothing to add about it."""
    run = pynox.run("-c", "raise TimeoutError('the database did not answer')")
    assert run.returncode == 1, run
    assert run.stderr.startswith("Traceback (most recent call last):"), run
    assert pynox_lines(run.stderr) == [], f"pynox spoke for the task's own exception: {pynox_lines(run.stderr)}"


def test_killed_by_seccomp_reports_the_signal(pynox):
    code = "import ctypes\nctypes.CDLL(None).syscall(0x40000000 | 39)"
    run = pynox.run("-c", code)
    assert run.returncode == 128 + signal.SIGSYS, run
    assert len(pynox_lines(run.stderr)) == 1 and "SIGSYS" in run.stderr, run


def test_memory_error_hint_line(pynox):
    run = pynox.run("--memory", "256m", "-c", "b = bytearray(2 * 1024**3)")
    assert run.returncode == 1, run
    assert run.stderr.splitlines()[-2] == "MemoryError"
    assert run.stderr.splitlines()[-1].startswith("pynox: ") and "--memory" in run.stderr.splitlines()[-1]


def test_passthrough_output_is_raw_bytes(pynox):
    code = "import os, sys\nos.write(1, b'\\xff\\xfeA\\n')\nsys.stdout.write('after\\n')"
    proc = subprocess.run([sys.executable, "-m", "pynox", "-c", code], capture_output=True, cwd=pynox.cwd, timeout=20)
    assert proc.returncode == 0, proc
    assert proc.stdout == b"\xff\xfeA\nafter\n"


def test_ctrl_c_reaches_the_task(pynox):
    """In passthrough mode the terminal's ^C (SIGINT to the foreground group) is the task's KeyboardInterrupt."""
    proc = subprocess.Popen([sys.executable, "-m", "pynox", "-c", "import time\nprint('ready', flush=True)\n"
                             "time.sleep(30)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=pynox.cwd, start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.startswith("Traceback (most recent call last):") and err.splitlines()[-1] == "KeyboardInterrupt", err


def test_stdin_reaches_the_task(pynox):
    run = pynox.run("-c", "import sys\nprint(input().upper(), sys.stdin.read().split())", input="typed\nmore words\n")
    assert run.returncode == 0, run
    assert run.stdout == "TYPED ['more', 'words']\n"


def test_launcher_sigterm_stops_the_task(pynox, fs):
    pidfile = fs.rw / "pid"
    code = f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-m", "pynox", "--allow-write", str(fs.rw), "-c", code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=pynox.cwd)
    try:
        deadline = time.monotonic() + 10
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        task_pid = int(pidfile.read_text())
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=5)
        assert rc == 128 + signal.SIGTERM, (rc, proc.stderr.read())
        assert not os.path.exists(f"/proc/{task_pid}") or "Z" in open(f"/proc/{task_pid}/stat").read().split()[2]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# --- options -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_interpreter_option_points_to_no_sandbox(cases, name):
    run = cases[f"unsupported:{name}"]
    assert run.returncode == 2, run
    assert run.stderr.startswith("pynox: ") and "--no-sandbox" in run.stderr, run
    assert run.stdout == ""


@pytest.mark.parametrize("name", list(UNKNOWN))
def test_unknown_long_option(cases, name):
    run = cases[f"unknown:{name}"]
    assert run.returncode == 2, run
    assert run.stderr.startswith("pynox: ") and name.split("=")[0] in run.stderr, run
    assert run.stdout == ""


@pytest.mark.parametrize("name", list(FLAGS))
def test_isolation_flags_are_accepted(cases, name):
    run = cases[f"flags:{name}"]
    assert run.returncode == 0, run
    assert run.stdout == "ran\n"


def test_no_sandbox_runs_unconfined(pynox):
    run = pynox.run("--no-sandbox", "-c", "import os; print(open('/etc/passwd').read().startswith('root:'), "
                    "os.path.isdir('/proc/1'))")
    assert run.returncode == 0, run
    assert run.stdout == "True True\n"
    if os.path.exists("/etc/hostname"):
        run = pynox.run("--no-sandbox", "-c", "print(open('/etc/hostname').read(), end='')")
        assert run.returncode == 0 and run.stdout == open("/etc/hostname").read(), run


@pytest.mark.parametrize("name", list(MISSING))
def test_missing_program(cases, name):
    run = cases[f"missing:{name}"]
    assert run.returncode == MISSING[name][1], run
    assert run.stderr.startswith("pynox: "), run
    assert run.stdout == ""


@pytest.mark.parametrize("name", [*INVALID, "value-missing", "write-grant-over-package-dir"])
def test_invalid_options_exit_2_before_running(cases, name):
    run = cases[f"invalid:{name}"]
    assert run.returncode == 2, run
    assert run.stdout == "", run  # the task never ran
    assert run.stderr.startswith("pynox: "), run
    if name in ("write-grant-over-runtime", "write-grant-over-package-dir"):
        assert "overlaps" in run.stderr, run
    if name == "no-sandbox-not-first":
        assert "--no-sandbox" in run.stderr


def test_help_and_version(pynox):
    run = pynox.run("--help")
    assert run.returncode == 0 and "usage: pynox" in run.stdout, run
    run = pynox.run("--version")
    assert run.returncode == 0 and run.stdout.startswith("pynox "), run


# --- --config ----------------------------------------------------------------------------------

def test_config_grants_allow_read(pynox, fs, tmp_path):
    config = tmp_path / "pynox.toml"
    config.write_text(f'[permissions]\nallow_read = ["{fs.ro}"]\ntimeout = "5s"\n')
    code = f"print(open({str(fs.ro_file)!r}).read(), end='')"
    run = pynox.run("--config", config, "-c", code)
    assert run.returncode == 0, run
    assert run.stdout == "read-only content\n"
    # Without the config the same read is denied: the grant came from the file.
    assert pynox.run("-c", code).returncode == 1


def test_config_paths_are_relative_to_the_config_file(pynox, fs):
    config = fs.ro.parent / "rel.toml"
    config.write_text('[permissions]\nallow_read = ["ro"]\n')
    result = pynox.json("--config", config, "-c", f"print(open({str(fs.ro_file)!r}).read(), end='')")
    assert result["exit"] == 0, result
    assert str(fs.ro) in result["policy"]["allow_read"]


def test_config_and_command_line_combine(pynox, fs, tmp_path):
    config = tmp_path / "pynox.toml"
    config.write_text(f'[permissions]\nallow_read = ["{fs.ro}"]\nmemory = "300m"\n[other]\nignored = 1\n')
    result = pynox.json("--config", config, "--allow-write", fs.rw, "--memory", "400m", "-c", "pass")
    assert result["exit"] == 0, result
    assert str(fs.ro) in result["policy"]["allow_read"]
    assert result["policy"]["allow_write"] == [str(fs.rw)]
    assert result["policy"]["memory_bytes"] == 400 << 20  # the command line wins


def test_config_unknown_key_exits_2_naming_it(cases):
    run = cases["config:unknown-key"]
    assert run.returncode == 2, run
    assert "allow_everything" in run.stderr and run.stderr.startswith("pynox: "), run
    assert run.stdout == ""


@pytest.mark.parametrize("name", [n for n in BAD_CONFIGS if n != "unknown-key"])
def test_config_malformed_exits_2(cases, name):
    run = cases[f"config:{name}"]
    assert run.returncode == 2, run
    assert run.stdout == ""
    assert run.stderr.startswith("pynox: "), run


def test_config_missing_file_exits_2(cases):
    run = cases["missing-config"]
    assert run.returncode == 2, run
    assert run.stdout == ""


# --- --json shape ------------------------------------------------------------------------------

def test_json_result_shape(pynox, fs):
    result = pynox.json("--allow-read", fs.ro, "--allow-write", fs.rw, "--timeout", "7s", "--memory", "700m",
                        "--max-file-size", "3m", "-c", "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert set(result) >= {"exit", "stdout", "stderr", "error", "stdout_truncated", "stderr_truncated",
                           "duration_ms", "duration_us", "runtime", "policy"}
    assert result["exit"] == 0 and result["error"] is None
    assert result["stdout"] == "out\n" and result["stderr"] == "err\n"
    assert result["stdout_truncated"] is False and result["stderr_truncated"] is False
    assert isinstance(result["duration_ms"], int) and isinstance(result["duration_us"], int)
    assert result["duration_ms"] == result["duration_us"] // 1000
    assert result["runtime"]["name"] == "pynox"
    policy = result["policy"]
    assert policy["backend"].startswith("landlock"), policy
    assert str(fs.ro) in policy["allow_read"] and policy["allow_write"] == [str(fs.rw)]
    assert policy["network"] == "deny" and policy["subprocesses"] == "deny"
    assert policy["timeout_ms"] == 7000 and policy["memory_bytes"] == 700 << 20
    assert policy["max_file_size"] == 3 << 20


def test_json_error_shape(pynox):
    result = pynox.json("-c", "x = 1\nraise RuntimeError('bad')")
    assert result["exit"] == 1
    assert result["error"] == {"type": "RuntimeError", "message": "bad", "file": "<string>", "line": 2, "hint": None}
    assert result["stderr"].startswith("Traceback (most recent call last):")
    assert "pynox/" not in result["stderr"]


def test_json_usage_error_is_not_json(pynox):
    run = pynox.run("--json", "--frobnicate", "-c", "pass")
    assert run.returncode == 2 and run.stdout == "", run


# --- doctor ------------------------------------------------------------------------------------

def test_doctor_reports_a_supported_sandbox(pynox):
    run = pynox.run("doctor")
    assert run.returncode == 0, run
    report = json.loads(run.stdout)
    assert report["sandbox_supported"] is True, report
    assert report["landlock"]["abi"] >= 1
    assert report["backend"].startswith("landlock")
    assert report["sandbox_unavailable_reasons"] == []
    assert all(step["ok"] for step in report["confinement_steps"]), report["confinement_steps"]


def test_doctor_rejects_arguments(pynox):
    run = pynox.run("doctor", "--verbose")
    assert run.returncode == 2, run
