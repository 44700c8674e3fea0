"""Where the kernel refuses a confinement mechanism, pynox refuses to run: never unconfined.

A wrapper installs a seccomp filter that makes one mechanism's system calls
fail (as a kernel without Landlock, or a container runtime that blocks
seccomp, would) and then executes pynox under it; filters survive exec.
"""

import json
import subprocess
import sys
import textwrap

import pytest

WRAPPER = textwrap.dedent("""\
    import errno, os, sys
    from pynox.child import privileges, seccomp
    name, _, option = sys.argv[1].partition(":")  # "prctl:38" blocks one prctl option only
    args = ((0, seccomp.CMP_EQ, int(option), 0),) if option else ()
    rules = [seccomp.Rule(action=seccomp.errno_action(getattr(errno, sys.argv[2])), syscall=name, args=args)]
    privileges.set_no_new_privs()
    seccomp.install(seccomp.Program(seccomp.compile_filter(rules)))
    os.execv(sys.executable, [sys.executable, "-m", "pynox", *sys.argv[3:]])
    """)

MARKER_CODE = "open({marker!r}, 'w').write('ran')"

CASES = {
    "no-landlock": ("landlock_create_ruleset", "ENOSYS", "landlock"),
    "landlock-disabled": ("landlock_create_ruleset", "EOPNOTSUPP", "landlock"),
    "landlock-restrict-blocked": ("landlock_restrict_self", "EPERM", "landlock"),
    "seccomp-blocked": ("seccomp", "EPERM", "seccomp"),
    "capset-blocked": ("capset", "EPERM", "capabilities"),
    "no-new-privs-blocked": ("prctl:38", "EPERM", "no-new-privs"),
}


def under(blocked, code, *args, cwd):
    return subprocess.run([sys.executable, "-c", WRAPPER, blocked, code, *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


@pytest.mark.parametrize("case", CASES)
def test_single_run_fails_closed(tmp_path, case):
    blocked, code, step = CASES[case]
    marker = tmp_path / "ran"
    run = under(blocked, code, "--json", "--allow-write", str(tmp_path), "-c",
                MARKER_CODE.format(marker=str(marker)), cwd=tmp_path)
    assert run.returncode == 125, (run.stdout, run.stderr)
    result = json.loads(run.stdout)
    assert result["error"]["type"] == "SandboxSetupError" and result["exit"] == 125
    if step is not None:
        assert step in result["error"]["message"], result["error"]
    assert not marker.exists(), "the task ran although the sandbox could not be set up"


@pytest.mark.parametrize("case", ["no-landlock", "seccomp-blocked"])
def test_doctor_says_why(tmp_path, case):
    blocked, code, step = CASES[case]
    run = under(blocked, code, "doctor", cwd=tmp_path)
    report = json.loads(run.stdout)
    assert run.returncode != 0
    assert report["sandbox_supported"] is False and report["runtime_supported"] is True
    assert any(step in reason.lower() for reason in report["sandbox_unavailable_reasons"]), report


def test_pool_refuses_to_start_without_landlock(tmp_path):
    run = under("landlock_create_ruleset", "ENOSYS", "pool", cwd=tmp_path)
    assert run.returncode == 1 and "Landlock" in run.stderr and run.stdout == ""


def test_pool_answers_setup_failures_as_data(tmp_path):
    marker = tmp_path / "ran"
    request = json.dumps({"id": "j", "code": MARKER_CODE.format(marker=str(marker)), "allow_write": [str(tmp_path)]})
    run = subprocess.run([sys.executable, "-c", WRAPPER, "landlock_restrict_self", "EPERM", "pool", "--workers", "1"],
                         input=request + "\n", capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert lines[0]["event"] == "ready" and len(lines) == 2, run
    assert lines[1]["id"] == "j" and lines[1]["error"]["type"] == "SandboxSetupError" and lines[1]["exit"] == 125
    assert "landlock" in lines[1]["error"]["message"]
    assert not marker.exists()
