"""Filesystem attacks: reads and writes outside the grants, and the tricks
(symlinks, hard links, renames, metadata calls) that try to get around them.

Every denied operation is checked by its effect: the target's bytes, mode,
owner, mtime, inode, link count and xattrs are unchanged, nothing new
appeared, and the secret never reached the task's output.
"""

import os
import uuid
from pathlib import Path

import pytest

OUTSIDE_SECRET = "outside secret"


# --- reading outside the grants ---------------------------------------------------------------

READ_TARGETS = {
    "etc-passwd": ("'/etc/passwd'", "root:x:0:0"),
    "tmp-file-not-granted": ("OUTSIDE_FILE", OUTSIDE_SECRET),
    "home-dir-file": ("'/root/.bashrc'", None),
    "proc-self-root-escape": ("'/proc/self/root/etc/passwd'", "root:x:0:0"),
    "proc-self-root-tmp-escape": ("'/proc/self/root' + OUTSIDE_FILE", OUTSIDE_SECRET),
}


@pytest.mark.parametrize("name", list(READ_TARGETS))
def test_read_outside_grants_is_denied(pynox, fs, name):
    expr, secret = READ_TARGETS[name]
    code = f"OUTSIDE_FILE = {str(fs.outside_file)!r}\nprint(open({expr}).read())\n"
    result = pynox.task(code, **fs.grants)
    assert result["exit"] == 1, result
    assert result["error"]["type"] == "PermissionError", result
    if secret is not None:
        assert secret not in result["stdout"] + result["stderr"]
    assert result["stdout"] == ""


@pytest.mark.parametrize("where", ["outside-dir", "home-dir", "root-dir", "tmp-dir", "cwd"])
def test_listing_directories_outside_grants_is_denied(pynox, fs, where):
    path = {"outside-dir": str(fs.outside), "home-dir": "/root", "root-dir": "/", "tmp-dir": "/tmp",
            "cwd": "."}[where]
    result = pynox.task(f"import os\nprint(os.listdir({path!r}))", **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    assert "secret.txt" not in result["stdout"]
    assert result["stdout"] == ""


def test_read_hint_names_the_grant(pynox, fs):
    result = pynox.task(f"open({str(fs.outside_file)!r}).read()", **fs.grants)
    hint = result["error"]["hint"]
    assert hint and "--allow-read" in hint and str(fs.outside) in hint, result


def test_granted_read_works_and_is_the_positive_control(pynox, fs):
    result = pynox.task(f"print(open({str(fs.ro_file)!r}).read(), end='')", **fs.grants)
    assert result["exit"] == 0, result
    assert result["stdout"] == "read-only content\n"


# --- writing outside the grants ----------------------------------------------------------------

def test_create_file_outside_grants_is_denied(pynox, fs, tree):
    before = tree(fs.outside)
    target = fs.outside / "new.txt"
    result = pynox.task(f"open({str(target)!r}, 'w').write('pwned')", **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    assert not target.exists()
    assert tree(fs.outside) == before


def test_overwrite_file_outside_grants_is_denied(pynox, fs, snapshot):
    before = snapshot(fs.outside_file)
    result = pynox.task(f"open({str(fs.outside_file)!r}, 'w').write('pwned')", **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    assert snapshot(fs.outside_file) == before


def test_mkdir_outside_grants_is_denied(pynox, fs):
    target = fs.outside / "newdir"
    result = pynox.task(f"import os\nos.mkdir({str(target)!r})", **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    assert not target.exists()


def test_write_hint_names_the_grant(pynox, fs):
    result = pynox.task(f"open({str(fs.outside / 'x')!r}, 'w')", **fs.grants)
    hint = result["error"]["hint"]
    assert hint and "--allow-write" in hint, result


# --- writing beneath a read-only grant ---------------------------------------------------------

WRITE_UNDER_RO = {
    "create-file": "open(RO + '/new.txt', 'w').write('pwned')",
    "mkdir": "os.mkdir(RO + '/newdir')",
    "symlink": "os.symlink('/etc/passwd', RO + '/link')",
    "mkfifo": "os.mkfifo(RO + '/fifo')",
    "overwrite-existing": "open(RO + '/data.txt', 'w').write('pwned')",
    "rmdir-grant-itself": "os.rmdir(RO)",
}


@pytest.mark.parametrize("op", list(WRITE_UNDER_RO))
def test_write_beneath_read_only_grant_is_denied(pynox, fs, op, snapshot, tree):
    before_tree = tree(fs.ro)
    before = snapshot(fs.ro_file)
    code = f"import os\nRO = {str(fs.ro)!r}\n{WRITE_UNDER_RO[op]}\n"
    result = pynox.task(code, **fs.grants)
    assert result["exit"] == 1, result
    assert result["error"]["type"] in ("PermissionError", "OSError"), result
    assert tree(fs.ro) == before_tree
    assert snapshot(fs.ro_file) == before


def test_read_only_hint_says_read_only(pynox, fs):
    result = pynox.task(f"open({str(fs.ro_file)!r}, 'w')", **fs.grants)
    hint = result["error"]["hint"]
    assert hint and "read-only" in hint and "--allow-write" in hint, result


# --- symlinks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("who_links", ["task-made-link", "preexisting-link"])
@pytest.mark.parametrize("mode", ["read", "write", "append", "truncate"])
def test_symlink_in_write_grant_to_outside_file(pynox, fs, who_links, mode, snapshot):
    link = fs.rw / "link"
    if who_links == "preexisting-link":
        link.symlink_to(fs.outside_file)
    before = snapshot(fs.outside_file)
    make = f"os.symlink({str(fs.outside_file)!r}, {str(link)!r})\n" if who_links == "task-made-link" else ""
    action = {
        "read": f"print(open({str(link)!r}).read())",
        "write": f"open({str(link)!r}, 'w').write('pwned')",
        "append": f"open({str(link)!r}, 'a').write('pwned')",
        "truncate": f"os.truncate({str(link)!r}, 0)",
    }[mode]
    result = pynox.task(f"import os\n{make}{action}\n", **fs.grants)
    assert result["error"] is not None and result["error"]["type"] == "PermissionError", result
    assert OUTSIDE_SECRET not in result["stdout"] + result["stderr"]
    assert snapshot(fs.outside_file) == before
    assert link.is_symlink()  # the link itself was allowed; only its target is out of reach


def test_symlink_in_write_grant_to_read_only_file_cannot_write(pynox, fs, snapshot):
    link = fs.rw / "link"
    before = snapshot(fs.ro_file)
    code = f"import os\nos.symlink({str(fs.ro_file)!r}, {str(link)!r})\nopen({str(link)!r}, 'w').write('pwned')\n"
    result = pynox.task(code, **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    assert snapshot(fs.ro_file) == before


def test_symlinked_directory_to_outside_is_not_a_grant(pynox, fs):
    link = fs.rw / "dirlink"
    link.symlink_to(fs.outside, target_is_directory=True)
    code = (f"import os\nprint(open({str(link / 'secret.txt')!r}).read())\n")
    result = pynox.task(code, **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    assert OUTSIDE_SECRET not in result["stdout"]
    result = pynox.task(f"open({str(link / 'dropped.txt')!r}, 'w').write('x')", **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    assert not (fs.outside / "dropped.txt").exists()


# --- hard links --------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["read-only-file", "outside-file"])
def test_hardlink_into_write_grant_is_denied(pynox, fs, source, snapshot):
    src = fs.ro_file if source == "read-only-file" else fs.outside_file
    dst = fs.rw / "hardlink"
    before = snapshot(src)
    code = (f"import os\n"
            f"try:\n    os.link({str(src)!r}, {str(dst)!r})\n"
            f"except OSError as e:\n    print('link-denied', e.errno)\n"
            f"open({str(src)!r}, 'r+').write('pwned')\n")
    result = pynox.task(code, **fs.grants)
    assert "link-denied" in result["stdout"], result
    assert result["error"]["type"] == "PermissionError", result
    assert not os.path.lexists(dst)
    assert snapshot(src) == before  # nlink included: no new name for the inode anywhere


# --- renames -----------------------------------------------------------------------------------

RENAMES = {
    # (source, destination) relative to the fs fixture
    "ro-file-into-write-dir": ("ro/data.txt", "rw/moved.txt"),
    "ro-file-within-ro-dir": ("ro/data.txt", "ro/renamed.txt"),
    "ro-file-out-to-outside": ("ro/data.txt", "outside/moved.txt"),
    "rw-file-into-ro-dir": ("rw/mine.txt", "ro/planted.txt"),
    "rw-file-over-ro-file": ("rw/mine.txt", "ro/data.txt"),
    "rw-file-out-to-outside": ("rw/mine.txt", "outside/planted.txt"),
    "outside-file-into-write-dir": ("outside/secret.txt", "rw/stolen.txt"),
    "rw-file-over-outside-file": ("rw/mine.txt", "outside/secret.txt"),
}


@pytest.mark.parametrize("name", list(RENAMES))
def test_rename_across_grant_boundaries_is_denied(pynox, fs, name, snapshot, tree):
    (fs.rw / "mine.txt").write_text("mine\n")
    root = fs.ro.parent
    src, dst = (root / p for p in RENAMES[name])
    before_src = snapshot(src)
    before_dst = snapshot(dst) if dst.exists() else None
    before_trees = {d: tree(d) for d in (fs.ro, fs.rw, fs.outside)}
    result = pynox.task(f"import os\nos.rename({str(src)!r}, {str(dst)!r})\n", **fs.grants)
    assert result["exit"] == 1, result
    assert result["error"]["type"] in ("PermissionError", "OSError"), result
    assert snapshot(src) == before_src
    assert (snapshot(dst) if dst.exists() else None) == before_dst
    assert {d: tree(d) for d in before_trees} == before_trees


def test_rename_within_write_grant_works(pynox, fs, tree):
    (fs.rw / "a.txt").write_text("a\n")
    result = pynox.task(f"import os\nos.rename({str(fs.rw / 'a.txt')!r}, {str(fs.rw / 'b.txt')!r})", **fs.grants)
    assert result["exit"] == 0, result
    assert tree(fs.rw) == ["b.txt"]
    assert (fs.rw / "b.txt").read_text() == "a\n"


# --- metadata and content changes to a read-only file ------------------------------------------

RO_FILE_OPS = {
    "os.truncate": "os.truncate(F, 0)",
    "open-r+": "open(F, 'r+').write('pwned')",
    "open-w": "open(F, 'w').write('pwned')",
    "open-a": "open(F, 'a').write('pwned')",
    "os.open-O_TRUNC": "os.open(F, os.O_RDONLY | os.O_TRUNC)",
    "ftruncate-readonly-fd": "os.ftruncate(os.open(F, os.O_RDONLY), 0)",
    "chmod": "os.chmod(F, 0o777)",
    "fchmod-readonly-fd": "os.fchmod(os.open(F, os.O_RDONLY), 0o777)",
    "chmod-nofollow": "os.chmod(F, 0o777, follow_symlinks=False)",
    "chown": "os.chown(F, 1, 1)",
    "fchown-readonly-fd": "os.fchown(os.open(F, os.O_RDONLY), 1, 1)",
    "lchown": "os.lchown(F, 1, 1)",
    "utime": "os.utime(F, (0, 0))",
    "utime-now": "os.utime(F)",
    "futime-readonly-fd": "os.utime(os.open(F, os.O_RDONLY), (0, 0))",
    "setxattr": "os.setxattr(F, 'user.pwned', b'1')",
    "fsetxattr-readonly-fd": "os.setxattr(os.open(F, os.O_RDONLY), 'user.pwned', b'1')",
    "lsetxattr": "os.setxattr(F, 'user.pwned', b'1', follow_symlinks=False)",
    "unlink": "os.unlink(F)",
    "unlink-via-dir-fd": "os.unlink('data.txt', dir_fd=os.open(RO, os.O_RDONLY))",
    "rename-onto-itself-dir": "os.rename(F, RO + '/x')",
    "mmap-shared-write": ("import mmap\nfd = os.open(F, os.O_RDONLY)\n"
                          "m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)\nm[0:1] = b'X'"),
    "proc-self-fd-reopen-for-write": "fd = os.open(F, os.O_RDONLY)\nopen(f'/proc/self/fd/{fd}', 'w').write('x')",
}


@pytest.mark.parametrize("op", list(RO_FILE_OPS))
def test_read_only_file_cannot_be_changed(pynox, fs, op, snapshot, tree):
    before = snapshot(fs.ro_file)
    before_tree = tree(fs.ro)
    code = f"import os\nF = {str(fs.ro_file)!r}\nRO = {str(fs.ro)!r}\n{RO_FILE_OPS[op]}\n"
    result = pynox.task(code, **fs.grants)
    assert result["exit"] != 0, result
    assert result["error"] is not None, result
    assert result["error"]["type"] in ("PermissionError", "OSError"), result
    assert snapshot(fs.ro_file) == before
    assert tree(fs.ro) == before_tree


def test_removexattr_on_read_only_file_is_denied(pynox, fs, snapshot):
    os.setxattr(fs.ro_file, "user.keep", b"yes")
    before = snapshot(fs.ro_file)
    result = pynox.task(f"import os\nos.removexattr({str(fs.ro_file)!r}, 'user.keep')", **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    assert snapshot(fs.ro_file) == before
    assert os.getxattr(fs.ro_file, "user.keep") == b"yes"


def test_read_only_directory_metadata_cannot_be_changed(pynox, fs, snapshot):
    before = snapshot(fs.ro)
    code = (f"import os\nD = {str(fs.ro)!r}\nfailed = 0\n"
            "for f in (lambda: os.chmod(D, 0o777), lambda: os.utime(D, (0, 0)), lambda: os.chown(D, 1, 1),\n"
            "          lambda: os.setxattr(D, 'user.x', b'1')):\n"
            "    try:\n        f()\n    except OSError:\n        failed += 1\n"
            "print(failed)\n")
    result = pynox.task(code, **fs.grants)
    assert result["stdout"] == "4\n", result
    assert snapshot(fs.ro) == before


# --- shared scratch places ---------------------------------------------------------------------

@pytest.mark.parametrize("place", ["/tmp", "/dev/shm", "/var/tmp"])
@pytest.mark.parametrize("how", ["file", "mkdir"])
def test_shared_tmp_dirs_are_not_writable(pynox, fs, place, how):
    if not os.path.isdir(place):
        pytest.skip(f"{place} does not exist here")
    target = Path(place) / f"pynox-e2e-{uuid.uuid4().hex}"
    action = f"open({str(target)!r}, 'w').write('x')" if how == "file" else f"import os; os.mkdir({str(target)!r})"
    try:
        result = pynox.task(action, **fs.grants)
        assert result["error"]["type"] == "PermissionError", result
        assert not os.path.lexists(target)
    finally:
        if target.is_dir():
            target.rmdir()
        elif os.path.lexists(target):
            target.unlink()


# --- other processes' /proc --------------------------------------------------------------------

def _proc_probe(path_expr):
    return ("import os, json\n"
            f"path = {path_expr}\n"
            "try:\n    data = open(path, 'rb').read()\n    print(json.dumps({'read': len(data)}))\n"
            "except OSError as e:\n    print(json.dumps({'errno': e.errno}))\n")


@pytest.mark.parametrize("target", ["init-environ", "pytest-cmdline", "pytest-environ", "launcher-environ",
                                    "launcher-cmdline", "launcher-mem", "launcher-maps", "thread-self-parent"])
def test_other_processes_proc_is_unreadable(pynox, fs, target):
    me = os.getpid()
    expr = {
        "init-environ": "'/proc/1/environ'",
        "pytest-cmdline": f"'/proc/{me}/cmdline'",
        "pytest-environ": f"'/proc/{me}/environ'",
        "launcher-environ": "f'/proc/{os.getppid()}/environ'",
        "launcher-cmdline": "f'/proc/{os.getppid()}/cmdline'",
        "launcher-mem": "f'/proc/{os.getppid()}/mem'",
        "launcher-maps": "f'/proc/{os.getppid()}/maps'",
        "thread-self-parent": "f'/proc/self/../{os.getppid()}/status'",
    }[target]
    result = pynox.task(_proc_probe(expr), **fs.grants)
    assert result["exit"] == 0, result
    assert "errno" in result["stdout"], result


def test_proc_listing_is_denied(pynox, fs):
    result = pynox.task("import os\nprint(os.listdir('/proc'))", **fs.grants)
    assert result["error"]["type"] == "PermissionError", result


def test_own_proc_status_is_readable(pynox, fs):
    result = pynox.task("print(open('/proc/self/status').read())", **fs.grants)
    assert result["exit"] == 0, result
    assert "Name:" in result["stdout"]


# --- positive control: the write grant does work -----------------------------------------------

def test_writes_inside_write_grant_work(pynox, fs, tree):
    code = (f"import os\nW = {str(fs.rw)!r}\n"
            "open(W + '/a.txt', 'w').write('hello\\n')\n"
            "open(W + '/a.txt', 'a').write('again\\n')\n"
            "os.makedirs(W + '/sub/deeper')\n"
            "open(W + '/sub/deeper/b.bin', 'wb').write(bytes(range(256)))\n"
            "open(W + '/gone.txt', 'w').close(); os.unlink(W + '/gone.txt')\n"
            "os.truncate(W + '/sub/deeper/b.bin', 128)\n"
            "os.symlink('a.txt', W + '/link')\n"
            "print(open(W + '/link').read(), end='')\n")
    result = pynox.task(code, **fs.grants)
    assert result["exit"] == 0, result
    assert result["stdout"] == "hello\nagain\n"
    assert (fs.rw / "a.txt").read_text() == "hello\nagain\n"
    assert (fs.rw / "sub/deeper/b.bin").read_bytes() == bytes(range(128))
    assert not (fs.rw / "gone.txt").exists()
    assert tree(fs.rw) == ["a.txt", "link", "sub", "sub/deeper", "sub/deeper/b.bin"]
