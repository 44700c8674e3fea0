"""``pynox pool --config``: the limits ceiling, profiles, and refusals at start."""

import subprocess
import sys

import pytest

from pynox.client import Pool


def write_config(tmp_path, text):
    path = tmp_path / "pynox.toml"
    path.write_text(text)
    return path


@pytest.fixture
def tree(tmp_path):
    for name in ("data", "work", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "data" / "orders.csv").write_text("a,b\n1,2\n")
    (tmp_path / "conf").mkdir()
    return tmp_path


CONFIG = """
[pool]
workers = 1

[pool.limits]
allow_read = ["../data"]
allow_write = ["../work"]
allow_network = false
timeout = "5s"
memory = "512m"
max_output = 1000
max_file_size = "1m"

[profiles.analysis]
allow_read = ["../data"]
allow_write = ["../work"]
"""


@pytest.fixture
def limited(tree):
    config = write_config(tree / "conf", CONFIG)
    with Pool("--config", str(config), cwd=tree) as p:
        yield p


def test_ready_names_the_config_and_profiles(limited, tree):
    assert limited.ready["config"] == str(tree / "conf" / "pynox.toml")
    assert limited.ready["profiles"] == ["analysis"]


@pytest.mark.parametrize("fields, needle", [
    ({"allow_read": ["other"]}, "outside"),
    ({"allow_read": ["data/../other"]}, "outside"),
    ({"allow_write": ["data"]}, "outside"),
    ({"allow_network": True}, "network"),
    ({"timeout": "10s"}, "timeout"),
    ({"memory": "1g"}, "memory"),
    ({"max_output": 5000}, "max_output"),
    ({"max_file_size": "2m"}, "max_file_size"),
])
def test_requests_above_the_ceiling_are_refused_before_running(limited, tree, fields, needle):
    marker = tree / "work" / "ran"
    result = limited.run(f"open({str(marker)!r}, 'w')", **fields)
    assert result["error"]["type"] == "RequestError" and needle in result["error"]["message"]
    assert not marker.exists()


def test_symlink_out_of_the_ceiling_is_refused(limited, tree):
    (tree / "data" / "escape").symlink_to(tree / "other")
    result = limited.run("print(1)", allow_read=["data/escape"])
    assert result["error"]["type"] == "RequestError"


def test_profile_grants_and_ceiling_defaults_apply(limited, tree):
    result = limited.run("print(open('data/orders.csv').read()); open('work/out.txt', 'w').write('x')",
                         profile="analysis")
    assert result["exit"] == 0, result
    assert (tree / "work" / "out.txt").read_text() == "x"
    assert result["policy"]["max_file_size"] == 1 << 20
    assert result["policy"]["timeout_ms"] == 5000


def test_max_file_size_ceiling_applies_without_a_request_value(limited, tree):
    result = limited.run("open('work/big', 'wb').write(b'x' * (2 << 20))", profile="analysis")
    assert result["exit"] == 1 and result["error"]["type"] == "OSError"
    assert (tree / "work" / "big").stat().st_size <= 1 << 20


def run_pool(config, cwd):
    return subprocess.run([sys.executable, "-m", "pynox", "pool", "--config", str(config)], input=b"",
                          capture_output=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("text, needle", [
    ("[pool]\nworkerz = 2\n", b"pool.workerz"),
    ("[pool]\nworkers = 'two'\n", b"pool.workers"),
    ("[pool.limits]\ntimeout = 'forever'\n", b"pool.limits.timeout"),
    ("[pool.limits]\nallow_read = ['../nope']\n", b"pool.limits.allow_read"),
    ("[profiles.x]\nallow_everything = true\n", b"profiles.x.allow_everything"),
    ("[pool]\nlog = 'xml'\n", b"pool.log"),
    ("[pool\n", b"pynox.toml"),
])
def test_a_bad_config_stops_the_pool_naming_the_key(tree, text, needle):
    proc = run_pool(write_config(tree / "conf", text), tree)
    assert proc.returncode == 2 and needle in proc.stderr and proc.stdout == b""


def test_a_config_beneath_its_own_write_grant_is_refused(tree):
    config = write_config(tree / "work", "[pool.limits]\nallow_write = ['.']\n")
    proc = run_pool(config, tree)
    assert proc.returncode == 2 and b"configuration file" in proc.stderr


def test_write_grants_over_the_runtime_are_refused(tree):
    config = write_config(tree / "conf", f"[profiles.bad]\nallow_write = [{sys.prefix!r}]\n")
    proc = run_pool(config, tree)
    assert proc.returncode == 2 and b"runtime" in proc.stderr


def test_reading_beneath_a_write_limit_is_within_the_ceiling(limited, tree):
    (tree / "work" / "note.txt").write_text("n")
    result = limited.run("print(open('work/note.txt').read())", allow_read=["work"])
    assert result["exit"] == 0 and result["stdout"] == "n\n", result


def test_a_limits_table_without_allow_network_denies_it(tree):
    config = write_config(tree / "conf", "[pool.limits]\ntimeout = '5s'\n")
    with Pool("--config", str(config), cwd=tree) as p:
        result = p.run("import socket; socket.socket()", allow_network=True)
    assert result["error"]["type"] == "RequestError" and "network" in result["error"]["message"]


@pytest.mark.parametrize("fields", [{"package_dirs": ["other"]}, {"script": "other/s.py", "code": None}])
def test_package_dirs_and_scripts_stay_within_the_ceiling(limited, tree, fields):
    (tree / "other" / "s.py").write_text("print('escaped')\n")
    fields = {k: v for k, v in fields.items() if v is not None}
    result = limited.run(None if "script" in fields else "print('escaped')", **fields)
    assert result["error"]["type"] == "RequestError" and "outside" in result["error"]["message"], result
    assert "escaped" not in result["stdout"]


def test_a_grant_swapped_for_a_symlink_after_validation_is_refused(tree):
    """Job A, already running, replaces a directory that job B's queued request
    names with a symlink to elsewhere: B must not get the new target."""
    config = write_config(tree / "conf", CONFIG)
    (tree / "work" / "d").mkdir()
    (tree / "other" / "secret.txt").write_text("topsecret")
    with Pool("--config", str(config), cwd=tree) as p:
        p.send({"id": "a", "allow_write": ["work"], "code":
                "import os, time\ntime.sleep(1)\nos.rmdir('work/d')\n"
                f"os.symlink({str(tree / 'other')!r}, 'work/d')\n"})
        p.send({"id": "b", "allow_write": ["work/d"],
                "code": "print(open('work/d/secret.txt').read()); open('work/d/target.txt', 'w').write('x')"})
        answers = {m["id"]: m for m in (p.read(30), p.read(30))}
    assert answers["a"]["exit"] == 0, answers["a"]
    b = answers["b"]
    assert "topsecret" not in b["stdout"] and not (tree / "other" / "target.txt").exists(), b
    assert b["error"]["type"] == "SandboxSetupError" and "changed" in b["error"]["message"], b


@pytest.mark.parametrize("text, needle", [
    ("[profiles.p]\ntimeout = 'bogus'\n", b"profiles.p"),
    ("[profiles.p]\nallow_network = 'yes'\n", b"profiles.p"),
    ("pool = 5\n", b"pool"),
    ("[pool]\npackage_dirs = ['/proc']\n", b"kernel interface"),
])
def test_bad_profiles_and_tables_stop_the_pool_at_start(tree, text, needle):
    proc = run_pool(write_config(tree / "conf", text), tree)
    assert proc.returncode == 2 and needle in proc.stderr and proc.stdout == b""
