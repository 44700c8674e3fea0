"""Hints that name the grant or limit behind a sandbox denial."""

import errno
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynox.child.hints import Grants, hint_for


def grants(tmp_path, *, network=False, style="cli", memory=512 << 20, max_file_size=256 << 20):
    read = tmp_path / "ro"
    write = tmp_path / "rw"
    read.mkdir(exist_ok=True)
    write.mkdir(exist_ok=True)
    return Grants(read=(str(read),), write=(str(write),), network=network, memory_bytes=memory,
                  max_file_size=max_file_size, style=style)


def denied(path=None, code=errno.EACCES):
    if path is None:
        return PermissionError(code, os.strerror(code))
    return PermissionError(code, os.strerror(code), path)


# limits ----------------------------------------------------------------------------


def test_memory_error_names_the_limit_and_flag(tmp_path):
    hint = hint_for(MemoryError(), grants(tmp_path, memory=512 << 20))
    assert hint is not None
    assert "512 MiB" in hint
    assert "memory limit" in hint
    assert "--memory" in hint


def test_memory_error_pool_style(tmp_path):
    hint = hint_for(MemoryError(), grants(tmp_path, memory=1 << 30, style="pool"))
    assert "1 GiB" in hint
    assert '"memory"' in hint
    assert "--memory" not in hint


def test_efbig_names_max_file_size(tmp_path):
    exc = OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    hint = hint_for(exc, grants(tmp_path, max_file_size=64 << 10))
    assert hint is not None
    assert "--max-file-size" in hint
    assert "64 KiB" in hint


def test_efbig_pool_style(tmp_path):
    exc = OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(tmp_path / "rw" / "big"))
    hint = hint_for(exc, grants(tmp_path, style="pool"))
    assert '"max_file_size"' in hint
    assert "--" not in hint


# paths ----------------------------------------------------------------------------


def test_write_under_read_grant_says_read_only(tmp_path):
    g = grants(tmp_path)
    target = tmp_path / "ro" / "data.txt"
    target.write_text("x")
    hint = hint_for(denied(str(target)), g)
    assert hint is not None
    assert "read-only" in hint
    assert str(target) in hint
    assert f"--allow-write {tmp_path / 'ro'}" in hint
    assert "--allow-read" not in hint


def test_read_only_hint_for_a_directory_names_the_directory_itself(tmp_path):
    g = grants(tmp_path)
    sub = tmp_path / "ro" / "sub"
    sub.mkdir()
    hint = hint_for(denied(str(sub)), g)
    assert f"--allow-write {sub}" in hint


def test_read_grant_root_itself(tmp_path):
    g = grants(tmp_path)
    hint = hint_for(denied(str(tmp_path / "ro")), g)
    assert "read-only" in hint
    assert f"--allow-write {tmp_path / 'ro'}" in hint


def test_outside_all_grants_suggests_allow_read(tmp_path):
    g = grants(tmp_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    target = other / "secret.txt"
    hint = hint_for(denied(str(target)), g)
    assert hint is not None
    assert "outside the sandbox" in hint
    assert f"--allow-read {other}" in hint
    assert f"--allow-write {other}" in hint


def test_sibling_with_common_prefix_is_outside(tmp_path):
    g = grants(tmp_path)
    sibling = tmp_path / "ro-other"  # shares the string prefix of the "ro" grant
    sibling.mkdir()
    hint = hint_for(denied(str(sibling / "f")), g)
    assert "outside the sandbox" in hint
    assert "read-only" not in hint


def test_under_write_grant_is_not_the_sandbox(tmp_path):
    g = grants(tmp_path)
    assert hint_for(denied(str(tmp_path / "rw" / "file")), g) is None
    assert hint_for(denied(str(tmp_path / "rw")), g) is None
    assert hint_for(denied(str(tmp_path / "rw" / "a" / "b")), g) is None


def test_relative_filename_is_resolved_against_cwd(tmp_path, monkeypatch):
    g = grants(tmp_path)
    monkeypatch.chdir(tmp_path / "ro")
    hint = hint_for(denied("data.txt"), g)
    assert "read-only" in hint
    assert str(tmp_path / "ro" / "data.txt") in hint


def test_bytes_filename(tmp_path):
    g = grants(tmp_path)
    hint = hint_for(denied(os.fsencode(str(tmp_path / "ro" / "f"))), g)
    assert "read-only" in hint


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS, errno.EXDEV])
def test_denial_errnos_get_path_hints(tmp_path, code):
    exc = OSError(code, os.strerror(code), str(tmp_path / "ro" / "f"))
    assert "read-only" in hint_for(exc, grants(tmp_path))


@pytest.mark.parametrize("code", [errno.ENOENT, errno.EEXIST, errno.EISDIR, errno.ENOSPC])
def test_other_errnos_get_no_hint(tmp_path, code):
    exc = OSError(code, os.strerror(code), str(tmp_path / "ro" / "f"))
    assert hint_for(exc, grants(tmp_path), "subprocess.run(['ls'])") is None


@pytest.mark.parametrize("exc", [ValueError("x"), KeyError("k"), RuntimeError(), ZeroDivisionError()])
def test_non_os_errors_get_no_hint(tmp_path, exc):
    assert hint_for(exc, grants(tmp_path), "socket.socket(") is None


def test_pool_style_uses_request_fields(tmp_path):
    g = grants(tmp_path, style="pool")
    other = tmp_path / "elsewhere"
    other.mkdir()
    hint = hint_for(denied(str(other / "f")), g)
    assert f'"allow_read": ["{other}"]' in hint
    assert f'"allow_write": ["{other}"]' in hint
    assert "--allow" not in hint
    hint = hint_for(denied(str(tmp_path / "ro" / "f")), g)
    assert f'"allow_write": ["{tmp_path / "ro"}"]' in hint


# no filename: the source line decides -----------------------------------------------


@pytest.mark.parametrize("line", ["subprocess.run(['ls'])", "os.fork()", "os.system('ls')",
                                  "subprocess.Popen(cmd)", "os.execv('/bin/sh', [])", "os.posix_spawn(p, a, e)"])
def test_process_hint(tmp_path, line):
    for network in (False, True):
        hint = hint_for(denied(code=errno.EPERM), grants(tmp_path, network=network), line)
        assert hint is not None
        assert "starting processes" in hint


def test_network_hint_when_denied(tmp_path):
    hint = hint_for(denied(code=errno.EPERM), grants(tmp_path, network=False), "s = socket.socket()")
    assert hint is not None
    assert "--allow-network" in hint
    assert "network" in hint


def test_network_hint_pool_style(tmp_path):
    hint = hint_for(denied(code=errno.EPERM), grants(tmp_path, style="pool"), "urllib.request.urlopen(u)")
    assert '"allow_network": true' in hint


def test_no_network_hint_when_network_allowed(tmp_path):
    assert hint_for(denied(code=errno.EPERM), grants(tmp_path, network=True), "s = socket.socket()") is None


def test_no_hint_for_unrelated_line(tmp_path):
    assert hint_for(denied(code=errno.EPERM), grants(tmp_path), "x = compute(1, 2)") is None
    assert hint_for(denied(code=errno.EPERM), grants(tmp_path)) is None


def test_filename_takes_precedence_over_source_line(tmp_path):
    g = grants(tmp_path)
    hint = hint_for(denied(str(tmp_path / "ro" / "f")), g, "subprocess.run(x); socket.socket()")
    assert "read-only" in hint


@given(name=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0/"),
                    min_size=1, max_size=20))
def test_any_name_under_a_grant_is_classified(tmp_path_factory, name):
    base = tmp_path_factory.getbasetemp() / "hints-any"
    (base / "ro").mkdir(parents=True, exist_ok=True)
    (base / "rw").mkdir(exist_ok=True)
    g = Grants(read=(str(base / "ro"),), write=(str(base / "rw"),), network=False,
               memory_bytes=1 << 30, max_file_size=1 << 20)
    if name in (".", ".."):
        return
    assert hint_for(denied(str(base / "rw" / name)), g) is None
    assert "read-only" in hint_for(denied(str(base / "ro" / name)), g)
