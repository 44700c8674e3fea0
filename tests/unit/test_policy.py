"""Policy: implicit runtime grants, the runtime-overlap check, and what a result reports."""

import os
import sys

import pytest

import pynox
from pynox import policy as policy_module
from pynox.child import landlock
from pynox.policy import (BASE_ENV, NETWORK_FILES, SYSTEM_RUNTIME, THREAD_ENV, Policy, overlaps, resolve_path,
                          runtime_paths)

PYNOX_DIR = os.path.realpath(os.path.dirname(os.path.abspath(pynox.__file__)))


def test_runtime_paths_include_python_and_pynox():
    paths = runtime_paths()
    assert os.path.realpath(sys.base_prefix) in paths
    assert os.path.realpath(sys.prefix) in paths
    assert PYNOX_DIR in paths


def test_runtime_paths_are_real_existing_and_unique():
    paths = runtime_paths()
    assert len(paths) == len(set(paths))
    for path in paths:
        assert os.path.isabs(path)
        assert os.path.realpath(path) == path
        assert os.path.exists(path)


def test_runtime_paths_cover_the_stdlib():
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    assert any(policy_module.beneath(stdlib, root) for root in runtime_paths())


def test_check_accepts_a_tmp_dir(tmp_path):
    Policy(allow_write=(str(tmp_path),)).check()
    Policy(allow_write=(str(tmp_path / "a"), str(tmp_path / "b"))).check()


@pytest.mark.parametrize("runtime", [sys.base_prefix, sys.prefix, PYNOX_DIR, "/usr/lib", "/lib"])
def test_check_refuses_write_grants_on_the_runtime(runtime):
    real = os.path.realpath(runtime)
    with pytest.raises(ValueError, match="overlaps the runtime"):
        Policy(allow_write=(real,)).check()


def test_check_refuses_write_grant_beneath_the_runtime():
    with pytest.raises(ValueError):
        Policy(allow_write=(os.path.join(PYNOX_DIR, "child"),)).check()


@pytest.mark.parametrize("ancestor", ["/", "/usr"])
def test_check_refuses_write_grant_containing_the_runtime(ancestor):
    with pytest.raises(ValueError):
        Policy(allow_write=(ancestor,)).check()


def test_check_refuses_write_grant_overlapping_package_dirs(tmp_path):
    pkgs = tmp_path / "site"
    pkgs.mkdir()
    with pytest.raises(ValueError, match="overlaps"):
        Policy(allow_write=(str(tmp_path),), package_dirs=(str(pkgs),)).check()
    with pytest.raises(ValueError, match="overlaps"):
        Policy(allow_write=(str(pkgs / "inner"),), package_dirs=(str(pkgs),)).check()
    Policy(allow_write=(str(tmp_path / "other"),), package_dirs=(str(pkgs),)).check()


def test_check_ignores_read_grants_on_the_runtime():
    Policy(allow_read=("/usr/lib", PYNOX_DIR)).check()


def test_sibling_with_a_common_prefix_does_not_overlap():
    assert not overlaps("/usr/lib-extra", "/usr/lib")
    assert not overlaps("/usr/lib", "/usr/lib-extra")
    assert overlaps("/usr/lib/x", "/usr/lib")
    assert overlaps("/usr", "/usr/lib")
    assert overlaps("/", "/usr/lib")


def test_read_paths_network_files_only_with_network(tmp_path):
    existing = [p for p in NETWORK_FILES if os.path.exists(p)]
    assert existing, "expected at least one name-resolution file on this machine"
    without = Policy(allow_read=(str(tmp_path),)).read_paths()
    with_net = Policy(allow_read=(str(tmp_path),), network=True).read_paths()
    assert not set(NETWORK_FILES) & set(without)
    for path in existing:
        assert path in with_net
    missing = [p for p in NETWORK_FILES if not os.path.exists(p)]
    assert not set(missing) & set(with_net)


def test_read_paths_contents_and_order(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("")
    pkgs = tmp_path / "pkgs"
    pkgs.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    paths = Policy(allow_read=(str(data), str(data)), package_dirs=(str(pkgs),),
                   implicit_read=(str(script),)).read_paths()
    assert len(paths) == len(set(paths))
    assert paths[:len(runtime_paths())] == runtime_paths()
    assert paths[-3:] == (str(pkgs), str(script), str(data))
    for path in SYSTEM_RUNTIME:
        assert (path in paths) == os.path.exists(path)


@pytest.mark.parametrize("network", [False, True])
def test_describe(tmp_path, network):
    p = Policy(allow_read=(str(tmp_path),), allow_write=(str(tmp_path / "out"),), network=network,
               timeout_ms=1234, memory_bytes=5 << 20, max_file_size=7 << 20)
    d = p.describe("landlock-7+seccomp")
    assert set(d) >= {"allow_read", "allow_write", "network", "subprocesses", "timeout_ms", "memory_bytes",
                      "backend"}
    assert d["allow_read"] == list(p.read_paths())
    assert str(tmp_path) in d["allow_read"]
    assert d["allow_write"] == [str(tmp_path / "out")]
    assert d["network"] == ("allow" if network else "deny")
    assert d["subprocesses"] == "deny"
    assert d["timeout_ms"] == 1234
    assert d["memory_bytes"] == 5 << 20
    assert d["max_file_size"] == 7 << 20
    assert d["backend"] == "landlock-7+seccomp"
    assert isinstance(d["allow_read"], list) and isinstance(d["allow_write"], list)


def test_environ_is_scrubbed(monkeypatch):
    monkeypatch.setenv("PYNOX_TEST_SECRET", "hunter2")
    monkeypatch.setenv("PATH", "/evil/bin")
    monkeypatch.setenv("LANG", "xx_XX")
    env = Policy().environ()
    assert env["PATH"] == BASE_ENV["PATH"]
    assert env["LANG"] == BASE_ENV["LANG"]
    assert "PYNOX_TEST_SECRET" not in env
    assert "HOME" not in env
    assert set(env) == set(BASE_ENV) | set(THREAD_ENV)
    assert "hunter2" not in env.values()


def test_environ_task_env_overrides(monkeypatch):
    monkeypatch.setenv("PYNOX_TEST_SECRET", "hunter2")
    env = Policy(env={"PATH": "/opt/bin", "MY_VAR": "1", "OMP_NUM_THREADS": "1"}).environ()
    assert env["PATH"] == "/opt/bin"
    assert env["MY_VAR"] == "1"
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["LANG"] == "C.UTF-8"
    assert "PYNOX_TEST_SECRET" not in env
    assert set(env) == set(BASE_ENV) | set(THREAD_ENV) | {"MY_VAR"}


def test_environ_does_not_alias_policy_env():
    p = Policy(env={"A": "1"})
    env = p.environ()
    env["A"] = "2"
    env["B"] = "3"
    assert p.env == {"A": "1"}
    assert p.environ()["A"] == "1"


def test_thread_env_is_capped():
    for key in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        assert 1 <= int(THREAD_ENV[key]) <= 4


@pytest.mark.parametrize("abi", [1, 4, 7])
@pytest.mark.parametrize("network", [False, True])
def test_ruleset_matches_the_grants(tmp_path, abi, network):
    out = tmp_path / "out"
    out.mkdir()
    p = Policy(allow_read=(str(tmp_path),), allow_write=(str(out),), network=network)
    ruleset = p.ruleset(abi)
    rules = dict(ruleset.rules)
    assert rules[str(out)] & landlock.FS.WRITE_FILE
    assert not rules[str(tmp_path)] & landlock.FS.WRITE_FILE
    assert rules[PYNOX_DIR] & landlock.FS.EXECUTE
    assert not rules[PYNOX_DIR] & landlock.FS.WRITE_FILE
    assert ("/etc/resolv.conf" in rules) == network
    assert ruleset.handled_net == (3 if abi >= 4 and not network else 0)


def test_resolve_path(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert resolve_path("link", str(tmp_path)) == str(tmp_path / "real")
    assert resolve_path("real/../real", str(tmp_path)) == str(tmp_path / "real")
    assert resolve_path(str(tmp_path / "real"), "/") == str(tmp_path / "real")
    for bad in ("", "a\0b", None, 5):
        with pytest.raises(ValueError):
            resolve_path(bad, str(tmp_path))
    with pytest.raises(ValueError, match="no such file"):
        resolve_path("missing", str(tmp_path))


def test_read_grant_beneath_a_write_grant_is_refused(tmp_path):
    (tmp_path / "ref").mkdir()
    with pytest.raises(ValueError, match="read-only"):
        Policy(allow_read=(str(tmp_path / "ref"),), allow_write=(str(tmp_path),)).check()
    Policy(allow_read=(str(tmp_path),), allow_write=(str(tmp_path),)).check()
    Policy(allow_read=(str(tmp_path),), allow_write=(str(tmp_path / "ref"),)).check()
