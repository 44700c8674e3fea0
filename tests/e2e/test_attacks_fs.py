"""Filesystem attacks: reads and writes outside the grants, and the tricks
(symlinks, hard links, renames, metadata calls) that try to get around them.

Every denied operation is checked by its effect: the target's bytes, mode,
owner, mtime, inode, link count and xattrs are unchanged, nothing new
appeared, and the secret never reached the task's output.

To stay fast, each group of probes runs in ONE confined task (the
``Pynox.group`` batch in conftest): every probe has targets of its own, its
outcome is reported on its own line, and each probe is still its own test
with its own effect check.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

PYNOX = [sys.executable, "-m", "pynox"]

OUTSIDE_SECRET = "outside secret"
OLD_NS = 1_000_000_000_000_000_000  # a distinctive mtime, so any touch shows


def make_file(path: Path, text: str = "untouchable\n") -> Path:
    path.write_text(text)
    path.chmod(0o644)
    os.utime(path, ns=(OLD_NS, OLD_NS))
    return path


def q(path) -> str:
    return repr(str(path))


# --- reading outside the grants ---------------------------------------------------------------

@pytest.fixture(scope="module")
def reads(module_pynox, make_fs):
    d = make_fs("reads")
    home = Path.home()
    home_files = sorted(p for p in home.iterdir() if p.is_file() and not p.is_symlink()) if home.is_dir() else []
    # A real file of the home directory (names that do not exist fail before any sandbox check).
    home_file = home_files[0] if home_files else home
    probes = {
        "etc-passwd": "value = open('/etc/passwd').read()",
        "tmp-file-not-granted": f"value = open({q(d.outside_file)}).read()",
        "home-dir-file": f"value = open({q(home_file)}).read()",
        "proc-self-root-escape": "value = open('/proc/self/root/etc/passwd').read()",
        "proc-self-root-tmp-escape": f"value = open('/proc/self/root' + {q(d.outside_file)}).read()",
        "proc-self-cwd-escape": "value = os.listdir('/proc/self/cwd')",
        "list-outside-dir": f"value = os.listdir({q(d.outside)})",
        "list-home-dir": f"value = os.listdir({q(home)})",
        "list-root-dir": "value = os.listdir('/')",
        "list-tmp": "value = os.listdir('/tmp')",
        "list-cwd": "value = os.listdir('.')",
        "scandir-parent-of-grant": f"value = [e.name for e in os.scandir({q(d.ro.parent)})]",
        "openat-dotdot-from-grant": (f"fd = os.open({q(d.ro)}, os.O_RDONLY)\n"
                                     "value = os.read(os.open('../outside/secret.txt', os.O_RDONLY, dir_fd=fd), 100)"),
        # positive controls: the batch itself can read what is granted
        "control-granted-read": f"value = open({q(d.ro_file)}).read()",
        "control-granted-list": f"value = sorted(os.listdir({q(d.ro)}))",
    }
    group = module_pynox.group({name: (code, []) for name, code in probes.items()}, prelude="import os",
                               ro=[d.ro], rw=[d.rw])
    return group, d


READ_PROBES = ["etc-passwd", "tmp-file-not-granted", "home-dir-file", "proc-self-root-escape",
               "proc-self-root-tmp-escape", "proc-self-cwd-escape", "list-outside-dir", "list-home-dir",
               "list-root-dir", "list-tmp", "list-cwd", "scandir-parent-of-grant", "openat-dotdot-from-grant"]


@pytest.mark.parametrize("name", READ_PROBES)
def test_read_outside_grants_is_denied(reads, name):
    group, d = reads
    group.assert_denied(name)
    out = group.result["stdout"] + group.result["stderr"]
    assert OUTSIDE_SECRET not in out
    assert "root:x:0:0" not in out


def test_granted_reads_work_in_the_same_task(reads):
    group, d = reads
    assert group.outcome("control-granted-read") == {"ok": True, "value": "read-only content\n"}
    assert group.outcome("control-granted-list") == {"ok": True, "value": ["data.txt"]}


def test_read_hint_names_the_grant(pynox, fs):
    result = pynox.task(f"open({q(fs.outside_file)}).read()", **fs.grants)
    assert result["error"]["type"] == "PermissionError", result
    hint = result["error"]["hint"]
    assert hint and "--allow-read" in hint and str(fs.outside) in hint, result


def test_file_names_outside_grants_do_not_leak_through_inotify(pynox, fs):
    """Listing an ungranted directory is denied; watching it must not reveal the
    same names (here: a file the test creates there while the task watches)."""
    ready = fs.rw / "ready"
    code = textwrap.dedent(f"""\
        import ctypes, json, os, select
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(0)
        wd = libc.inotify_add_watch(fd, {q(fs.outside)}.encode(), 0xfff) if fd >= 0 else -1
        err = ctypes.get_errno()
        open({q(ready)}, 'w').close()
        names = []
        if wd >= 0 and select.select([fd], [], [], 3)[0]:
            data, pos = os.read(fd, 65536), 0
            while pos + 16 <= len(data):  # struct inotify_event: wd, mask, cookie, len, name[len]
                size = int.from_bytes(data[pos + 12:pos + 16], 'little')
                names.append(data[pos + 16:pos + 16 + size].rstrip(b'\\0').decode())
                pos += 16 + size
        print(json.dumps({{"fd": fd, "wd": wd, "errno": err, "events": names}}))
        """)
    secret_name = f"secret-name-{uuid.uuid4().hex}.txt"
    proc = subprocess.Popen([*PYNOX, "--json", "--allow-write", str(fs.rw), "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=pynox.cwd)
    try:
        deadline = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        (fs.outside / secret_name).write_text("x")
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    result = json.loads(out)
    assert result["exit"] == 0, result
    report = json.loads(result["stdout"])
    assert secret_name not in report["events"], f"inotify revealed a name in an ungranted directory: {report}"
    assert report["wd"] == -1, f"the task could watch an ungranted directory: {report}"


# --- writing outside the grants, and beneath a read-only grant --------------------------------

@pytest.fixture(scope="module")
def writes(module_pynox, make_fs):
    d = make_fs("writes")
    make_file(d.outside / "overwrite.txt")
    make_file(d.ro / "overwrite.txt")
    (d.ro / "emptydir").mkdir()
    probes = {
        "outside-create-file": (f"open({q(d.outside / 'new.txt')}, 'w').write('pwned')", [d.outside / "new.txt"]),
        "outside-overwrite": (f"open({q(d.outside / 'overwrite.txt')}, 'w').write('pwned')",
                              [d.outside / "overwrite.txt"]),
        "outside-mkdir": (f"os.mkdir({q(d.outside / 'newdir')})", [d.outside / "newdir"]),
        "outside-os-open-creat": (f"os.open({q(d.outside / 'creat')}, os.O_WRONLY | os.O_CREAT | os.O_EXCL)",
                                  [d.outside / "creat"]),
        "ro-create-file": (f"open({q(d.ro / 'new.txt')}, 'w').write('pwned')", [d.ro / "new.txt"]),
        "ro-mkdir": (f"os.mkdir({q(d.ro / 'newdir')})", [d.ro / "newdir"]),
        "ro-symlink": (f"os.symlink('/etc/passwd', {q(d.ro / 'link')})", [d.ro / "link"]),
        "ro-mkfifo": (f"os.mkfifo({q(d.ro / 'fifo')})", [d.ro / "fifo"]),
        "ro-mknod-socket": (f"os.mknod({q(d.ro / 'sock')}, 0o600 | __import__('stat').S_IFSOCK)", [d.ro / "sock"]),
        "ro-overwrite-existing": (f"open({q(d.ro / 'overwrite.txt')}, 'w').write('pwned')", [d.ro / "overwrite.txt"]),
        "ro-rmdir": (f"os.rmdir({q(d.ro / 'emptydir')})", [d.ro / "emptydir"]),
        "ro-rmdir-grant-itself": (f"os.rmdir({q(d.ro)})", [d.ro]),
        # Device nodes give raw hardware access (1,1 is /dev/mem; 8,0 the first disk): not even in a write grant.
        "rw-mknod-char-device": (f"os.mknod({q(d.rw / 'mem')}, 0o666 | stat.S_IFCHR, os.makedev(1, 1))",
                                 [d.rw / "mem"]),
        "rw-mknod-block-device": (f"os.mknod({q(d.rw / 'sda')}, 0o666 | stat.S_IFBLK, os.makedev(8, 0))",
                                  [d.rw / "sda"]),
    }
    return module_pynox.group(probes, prelude="import os, stat", ro=[d.ro], rw=[d.rw]), d


@pytest.mark.parametrize("name", ["outside-create-file", "outside-overwrite", "outside-mkdir", "outside-os-open-creat"])
def test_write_outside_grants_is_denied(writes, name):
    writes[0].assert_denied(name)


@pytest.mark.parametrize("name", ["ro-create-file", "ro-mkdir", "ro-symlink", "ro-mkfifo", "ro-mknod-socket",
                                  "ro-overwrite-existing", "ro-rmdir", "ro-rmdir-grant-itself",
                                  "rw-mknod-char-device", "rw-mknod-block-device"])
def test_write_beneath_read_only_grant_is_denied(writes, name):
    writes[0].assert_denied(name, types=("PermissionError", "OSError"))


def test_write_hints_name_the_grant(pynox, fs):
    result = pynox.task(f"open({q(fs.outside / 'x')}, 'w')", **fs.grants)
    assert "--allow-write" in (result["error"]["hint"] or ""), result
    result = pynox.task(f"open({q(fs.ro_file)}, 'w')", **fs.grants)
    hint = result["error"]["hint"] or ""
    assert "read-only" in hint and "--allow-write" in hint, result


# --- symlinks ----------------------------------------------------------------------------------

SYMLINK_ACTIONS = {
    "read": "value = open(LINK).read()",
    "write": "open(LINK, 'w').write('pwned')",
    "append": "open(LINK, 'a').write('pwned')",
    "truncate": "os.truncate(LINK, 0)",
    "chmod-through-link": "os.chmod(LINK, 0o777)",
}


@pytest.fixture(scope="module")
def symlinks(module_pynox, make_fs):
    d = make_fs("symlinks")
    probes = {}
    for who in ("task-made", "preexisting"):
        for action, code in SYMLINK_ACTIONS.items():
            name = f"{who}-{action}"
            target = make_file(d.outside / f"target-{name}.txt", OUTSIDE_SECRET + "\n")
            link = d.rw / f"link-{name}"
            if who == "preexisting":
                link.symlink_to(target)
                make = ""
            else:
                make = f"os.symlink({q(target)}, LINK)\n"
            probes[name] = (f"LINK = {q(link)}\n{make}{code}", [target])
    ro_target = make_file(d.ro / "ro-target.txt")
    probes["to-read-only-file-write"] = (
        f"LINK = {q(d.rw / 'link-ro')}\nos.symlink({q(ro_target)}, LINK)\nopen(LINK, 'w').write('pwned')", [ro_target])
    dirlink = d.rw / "dirlink"
    dirlink.symlink_to(d.outside, target_is_directory=True)
    probes["dir-link-read"] = (f"value = open({q(dirlink / 'secret.txt')}).read()", [d.outside_file])
    probes["dir-link-create"] = (f"open({q(dirlink / 'dropped.txt')}, 'w').write('x')", [d.outside / "dropped.txt"])
    probes["control-link-within-grant"] = (
        f"open({q(d.rw / 'real.txt')}, 'w').write('ok')\nos.symlink('real.txt', {q(d.rw / 'rel-link')})\n"
        f"value = open({q(d.rw / 'rel-link')}).read()", [])
    return module_pynox.group(probes, prelude="import os", ro=[d.ro], rw=[d.rw]), d


@pytest.mark.parametrize("who", ["task-made", "preexisting"])
@pytest.mark.parametrize("action", list(SYMLINK_ACTIONS))
def test_symlink_in_write_grant_to_outside_file(symlinks, who, action):
    group, d = symlinks
    group.assert_denied(f"{who}-{action}")
    assert OUTSIDE_SECRET not in group.result["stdout"]
    assert (d.rw / f"link-{who}-{action}").is_symlink()  # the link itself is allowed; its target is not


@pytest.mark.parametrize("name", ["to-read-only-file-write", "dir-link-read", "dir-link-create"])
def test_symlink_tricks_are_denied(symlinks, name):
    group, d = symlinks
    group.assert_denied(name)
    assert OUTSIDE_SECRET not in group.result["stdout"]


def test_symlink_within_write_grant_works(symlinks):
    assert symlinks[0].outcome("control-link-within-grant") == {"ok": True, "value": "ok"}


# --- hard links --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hardlinks(module_pynox, make_fs):
    d = make_fs("hardlinks")
    probes = {}
    for name, src in (("from-read-only-file", make_file(d.ro / "hl-src.txt")),
                      ("from-outside-file", make_file(d.outside / "hl-src.txt"))):
        dst = d.rw / f"hl-{name}"
        code = (f"S, D = {q(src)}, {q(dst)}\n"
                "try:\n    os.link(S, D)\n    linked = 'LINKED'\nexcept OSError as e:\n    linked = e.errno\n"
                "try:\n    open(S, 'r+').write('pwned')\n    wrote = 'WROTE'\n"
                "except OSError as e:\n    wrote = e.errno\n"
                "try:\n    open(D, 'r+').write('pwned')\n    via = 'WROTE'\nexcept OSError as e:\n    via = e.errno\n"
                "value = [linked, wrote, via]")
        probes[name] = (code, [src, dst])
    return module_pynox.group(probes, prelude="import os", ro=[d.ro], rw=[d.rw]), d


@pytest.mark.parametrize("name", ["from-read-only-file", "from-outside-file"])
def test_hardlink_into_write_grant_is_denied(hardlinks, name):
    group, d = hardlinks
    outcome = group.outcome(name)
    linked, wrote, via = outcome["value"]
    assert linked != "LINKED", f"os.link succeeded: {outcome}"
    assert wrote != "WROTE" and via != "WROTE", outcome
    group.assert_unchanged(name)  # the source's nlink is in the snapshot: no new name anywhere


# --- renames -----------------------------------------------------------------------------------

RENAMES = {
    # name: (source dir, destination dir, destination already exists)
    "ro-file-into-write-dir": ("ro", "rw", False),
    "ro-file-within-ro-dir": ("ro", "ro", False),
    "ro-file-out-to-outside": ("ro", "outside", False),
    "rw-file-into-ro-dir": ("rw", "ro", False),
    "rw-file-over-ro-file": ("rw", "ro", True),
    "rw-file-out-to-outside": ("rw", "outside", False),
    "outside-file-into-write-dir": ("outside", "rw", False),
    "rw-file-over-outside-file": ("rw", "outside", True),
    "ro-file-over-rw-file": ("ro", "rw", True),
}


@pytest.fixture(scope="module")
def renames(module_pynox, make_fs):
    d = make_fs("renames")
    probes = {}
    for name, (src_dir, dst_dir, exists) in RENAMES.items():
        src = make_file(getattr(d, src_dir) / f"src-{name}.txt")
        dst = getattr(d, dst_dir) / f"dst-{name}.txt"
        if exists:
            make_file(dst, "victim\n")
        probes[name] = (f"os.rename({q(src)}, {q(dst)})", [src, dst])
    (d.rw / "mine.txt").write_text("mine\n")
    probes["control-rename-within-write-dir"] = (f"os.rename({q(d.rw / 'mine.txt')}, {q(d.rw / 'yours.txt')})", [])
    exchange = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "r = libc.renameat2(-100, {a}, -100, {b}, 2)  # RENAME_EXCHANGE\n"
                "if r != 0:\n    e = ctypes.get_errno()\n    raise OSError(e, os.strerror(e))")
    src, dst = make_file(d.ro / "xchg-ro.txt"), make_file(d.rw / "xchg-rw.txt", "writable\n")
    probes["exchange-ro-and-rw-files"] = (exchange.format(a=f"{q(src)}.encode()", b=f"{q(dst)}.encode()"), [src, dst])
    return module_pynox.group(probes, prelude="import os", ro=[d.ro], rw=[d.rw]), d


@pytest.mark.parametrize("name", [*RENAMES, "exchange-ro-and-rw-files"])
def test_rename_across_grant_boundaries_is_denied(renames, name):
    renames[0].assert_denied(name, types=("PermissionError", "OSError"))


def test_rename_within_write_grant_works(renames):
    group, d = renames
    assert group.outcome("control-rename-within-write-dir")["ok"] is True
    assert (d.rw / "yours.txt").read_text() == "mine\n" and not (d.rw / "mine.txt").exists()


# --- content and metadata changes to a read-only file ------------------------------------------

RO_FILE_OPS = {
    "os.truncate": "os.truncate(F, 0)",
    "open-r+": "open(F, 'r+').write('pwned')",
    "open-w": "open(F, 'w').write('pwned')",
    "open-a": "open(F, 'a').write('pwned')",
    "os.open-O_TRUNC": "os.open(F, os.O_RDONLY | os.O_TRUNC)",
    "ftruncate-readonly-fd": "os.ftruncate(os.open(F, os.O_RDONLY), 0)",
    "chmod": "os.chmod(F, 0o777)",
    "fchmod-readonly-fd": "os.fchmod(os.open(F, os.O_RDONLY), 0o777)",
    "fchmod-O_PATH-fd": "os.chmod(f'/proc/self/fd/{os.open(F, os.O_PATH)}', 0o777)",
    "chown": "os.chown(F, 1, 1)",
    "fchown-readonly-fd": "os.fchown(os.open(F, os.O_RDONLY), 1, 1)",
    "lchown": "os.lchown(F, 1, 1)",
    "utime": "os.utime(F, (0, 0))",
    "utime-now": "os.utime(F)",
    "futime-readonly-fd": "os.utime(os.open(F, os.O_RDONLY), (0, 0))",
    "setxattr": "os.setxattr(F, 'user.pwned', b'1')",
    "fsetxattr-readonly-fd": "os.setxattr(os.open(F, os.O_RDONLY), 'user.pwned', b'1')",
    "lsetxattr": "os.setxattr(F, 'user.pwned', b'1', follow_symlinks=False)",
    "removexattr": "os.removexattr(F, 'user.keep')",
    "unlink": "os.unlink(F)",
    "unlink-via-dir-fd": "os.unlink(os.path.basename(F), dir_fd=os.open(os.path.dirname(F), os.O_RDONLY))",
    "rename-within-ro-dir": "os.rename(F, F + '.moved')",
    "mmap-shared-write": ("import mmap\nfd = os.open(F, os.O_RDONLY)\n"
                          "m = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)\nm[0:1] = b'X'"),
    "proc-self-fd-reopen-for-write": "fd = os.open(F, os.O_RDONLY)\nopen(f'/proc/self/fd/{fd}', 'w').write('x')",
    "fallocate-readonly-fd": "os.posix_fallocate(os.open(F, os.O_RDONLY), 0, 1 << 20)",
}
RO_DIR_OPS = {
    "dir-chmod": "os.chmod(F, 0o777)",
    "dir-utime": "os.utime(F, (0, 0))",
    "dir-chown": "os.chown(F, 1, 1)",
    "dir-setxattr": "os.setxattr(F, 'user.pwned', b'1')",
}


@pytest.fixture(scope="module")
def ro_ops(module_pynox, make_fs):
    d = make_fs("ro_ops")
    probes = {}
    for i, (name, code) in enumerate(RO_FILE_OPS.items()):
        f = make_file(d.ro / f"file-{i}.txt")
        os.setxattr(f, "user.keep", b"yes")
        probes[name] = (f"F = {q(f)}\n{code}", [f, Path(str(f) + ".moved")])
    for i, (name, code) in enumerate(RO_DIR_OPS.items()):
        sub = d.ro / f"dir-{i}"
        sub.mkdir()
        os.utime(sub, ns=(OLD_NS, OLD_NS))
        probes[name] = (f"F = {q(sub)}\n{code}", [sub])
    return module_pynox.group(probes, prelude="import os", ro=[d.ro], rw=[d.rw]), d


@pytest.mark.parametrize("op", [*RO_FILE_OPS, *RO_DIR_OPS])
def test_read_only_file_cannot_be_changed(ro_ops, op):
    ro_ops[0].assert_denied(op, types=("PermissionError", "OSError"))


# --- shared scratch places ---------------------------------------------------------------------

SHARED = [(place, how) for place in ("/tmp", "/dev/shm", "/var/tmp") for how in ("file", "mkdir")]


@pytest.fixture(scope="module")
def shared_dirs(module_pynox, make_fs):
    d = make_fs("shared")
    probes, targets = {}, []
    for place, how in SHARED:
        if not os.path.isdir(place):
            continue
        target = Path(place) / f"pynox-e2e-{uuid.uuid4().hex}"
        targets.append(target)
        code = f"open({q(target)}, 'w').write('x')" if how == "file" else f"os.mkdir({q(target)})"
        probes[f"{place}-{how}"] = (code, [target])
    yield module_pynox.group(probes, prelude="import os", ro=[d.ro], rw=[d.rw])
    for target in targets:
        if target.is_dir():
            target.rmdir()
        elif os.path.lexists(target):
            target.unlink()


@pytest.mark.parametrize("place, how", SHARED)
def test_shared_tmp_dirs_are_not_writable(shared_dirs, place, how):
    if not os.path.isdir(place):
        pytest.skip(f"{place} does not exist here")
    shared_dirs.assert_denied(f"{place}-{how}")


# --- other processes' /proc --------------------------------------------------------------------

PROC_TARGETS = {
    "init-environ": "'/proc/1/environ'",
    "pytest-cmdline": "f'/proc/{PYTEST}/cmdline'",
    "pytest-environ": "f'/proc/{PYTEST}/environ'",
    "launcher-environ": "f'/proc/{os.getppid()}/environ'",
    "launcher-cmdline": "f'/proc/{os.getppid()}/cmdline'",
    "launcher-mem": "f'/proc/{os.getppid()}/mem'",
    "launcher-maps": "f'/proc/{os.getppid()}/maps'",
    "launcher-status-via-self-dotdot": "f'/proc/self/../{os.getppid()}/status'",
    "launcher-fd-dir": "f'/proc/{os.getppid()}/fd/0'",
}


@pytest.fixture(scope="module")
def proc_reads(module_pynox, make_fs):
    d = make_fs("proc")
    probes = {name: f"value = len(open({expr}, 'rb').read())" for name, expr in PROC_TARGETS.items()}
    probes["list-proc"] = "value = os.listdir('/proc')"
    probes["control-own-status"] = "value = open('/proc/self/status').read()"
    probes["control-own-thread-status"] = "value = open(f'/proc/self/task/{os.getpid()}/status').read()"
    group = module_pynox.group({name: (code, []) for name, code in probes.items()},
                               prelude=f"import os\nPYTEST = {os.getpid()}", ro=[d.ro], rw=[d.rw])
    return group


@pytest.mark.parametrize("name", [*PROC_TARGETS, "list-proc"])
def test_other_processes_proc_is_unreadable(proc_reads, name):
    proc_reads.assert_denied(name)


@pytest.mark.parametrize("name", ["control-own-status", "control-own-thread-status"])
def test_own_proc_status_is_readable(proc_reads, name):
    outcome = proc_reads.outcome(name)
    assert outcome["ok"] is True and "Name:" in outcome["value"], outcome


# --- grants that overlap ------------------------------------------------------------------------

def test_read_only_grant_inside_a_write_grant_stays_read_only(pynox, fs, snapshot):
    """``--allow-read PATH`` promises read-only access beneath PATH.  Landlock adds
    rights up the tree, so beneath a write grant it cannot take them away: pynox
    must then refuse the combination (exit 2) rather than silently allow writes."""
    ref = fs.rw / "reference"
    ref.mkdir()
    data = make_file(ref / "data.txt", "reference data\n")
    before = snapshot(data)
    run = pynox.run("--json", "--allow-write", fs.rw, "--allow-read", ref, "-c",
                    f"open({q(data)}, 'w').write('changed')")
    assert snapshot(data) == before, f"a file beneath --allow-read {ref} was changed: {run}"
    if run.returncode != 2:
        assert run.result["error"]["type"] == "PermissionError", run


def test_single_file_grants(pynox, fs, snapshot, tree):
    single = make_file(fs.outside / "single.txt", "just this file\n")
    sibling = make_file(fs.outside / "sibling.txt", "not this one\n")
    result = pynox.task(f"print(open({q(single)}).read(), end='')\nopen({q(sibling)}).read()", ro=[single])
    assert result["stdout"] == "just this file\n", result
    assert result["error"]["type"] == "PermissionError", result
    before_sibling, before_tree = snapshot(sibling), tree(fs.outside)
    code = (f"import os\nopen({q(single)}, 'a').write('appended\\n')\nfailed = []\n"
            f"for f in (lambda: os.unlink({q(single)}), lambda: os.rename({q(single)}, {q(fs.outside / 'moved')}),\n"
            f"          lambda: open({q(fs.outside / 'new.txt')}, 'w'), lambda: open({q(sibling)}, 'a')):\n"
            "    try:\n        f()\n    except OSError:\n        failed.append(1)\nprint(len(failed))")
    result = pynox.task(code, rw=[single])
    assert result["stdout"] == "4\n", result
    assert single.read_text() == "just this file\nappended\n"
    assert snapshot(sibling) == before_sibling and tree(fs.outside) == before_tree


# --- positive control: the write grant does work -----------------------------------------------

def test_writes_inside_write_grant_work(pynox, fs, tree):
    code = (f"import os\nW = {q(fs.rw)}\n"
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
    assert tree(fs.rw) == ["a.txt", "link", "sub", "sub/deeper", "sub/deeper/b.bin"]
