"""Attacks on ``pynox pool`` from inside its own jobs.

Every test drives a real pool through :class:`pynox.client.Pool` (real
supervisor, real templates, real Landlock and seccomp; nothing mocked).  The
job code is the attacker: it aims at the template that forked it, the
supervisor, the other jobs and the host, and each test checks the *effect*
(the pool still answers, the template pids are the same, the victim's result
is its own, nothing is left on the machine, the counters are not skewed)
rather than only the error the job saw.

Pools are few and shared where isolation allows: ``shared`` (two workers)
takes the one-job-at-a-time attacks, ``single`` (one worker) the
persistence attacks, where every job must land on the same template.
Signals are sent from inside a PID namespace whose init is a driver script,
so that a ``kill(-1)`` that got through could not reach pytest.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import orjson
import pytest

from processes import alive, descendants, templates_of, wait_until
from pynox.client import Pool

SECRET = "pool-attack-secret-" + uuid.uuid4().hex
PYNOX_VERDICTS = {"TimeoutError", "SignalError", "SandboxSetupError", "PoolWorkerError", "RequestError"}

# Job-side helper: the job's only socket is its wire to the supervisor.
FIND_WIRE = textwrap.dedent("""\
    import os, stat
    def find_wire():
        for fd in range(3, 1024):
            try:
                if stat.S_ISSOCK(os.fstat(fd).st_mode):
                    return fd
            except OSError:
                pass
        raise SystemExit('no wire socket')
    def supervisor_pid():
        # The template's argv (inherited through fork) names its supervisor.
        return int(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[5])
    """)


# --- helpers ---------------------------------------------------------------------------------

def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def idle(pool):
    """Every template warm with its spare child forked (template + spare per worker)."""
    workers = pool.ready["workers"]
    return wait_until(lambda: len(descendants(pool.process.pid)) == 2 * workers
                      and len(templates_of(pool.process.pid)) == workers, 15)


def scrubbed_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra)
    return env


def assert_serving(pool, what="after the attack"):
    assert pool.process.poll() is None, f"the pool died {what} (exit {pool.process.poll()})"
    probe = pool.run("print('still serving')", id=f"probe-{uuid.uuid4().hex[:8]}", wait=30)
    assert probe["exit"] == 0 and probe["stdout"] == "still serving\n", f"pool broken {what}: {probe}"


def assert_answered_once(pool, *rids):
    """No further line for ``rids``: a stats request sent now is the very next line."""
    sid = f"stats-{uuid.uuid4().hex[:8]}"
    pool.send({"id": sid, "stats": True})
    extra = []
    while True:
        message = pool.read(timeout=30)
        if message.get("id") == sid:
            break
        extra.append(message)
    assert not [m for m in extra if m.get("id") in rids], f"more than one answer: {extra}"
    return message


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("pool-attacks")
    (base / "rw").mkdir()
    (base / "outside").mkdir()
    return base


@pytest.fixture(scope="module")
def shared(pool_dir):
    with Pool("--workers", "2", cwd=pool_dir, env=scrubbed_env(PYNOX_ATTACK_SECRET=SECRET)) as p:
        yield p


@pytest.fixture(scope="module")
def single(pool_dir):
    with Pool("--workers", "1", cwd=pool_dir, env=scrubbed_env(PYNOX_ATTACK_SECRET=SECRET)) as p:
        yield p


# --- signals, from inside a PID namespace ------------------------------------------------------

SIGNAL_DRIVER = textwrap.dedent("""\
    # PID 1 of a fresh PID namespace: a bystander process, then a pool; each
    # attack runs as a job, and after it the driver looks at what is left.
    import json, os, subprocess, sys, time
    from pynox.client import Pool

    def children(pid):
        try:
            return [int(k) for k in open(f"/proc/{pid}/task/{pid}/children").read().split()]
        except FileNotFoundError:
            return []

    def templates(pool_pid):
        return sorted(p for p in children(pool_pid)
                      if b"pynox.template" in open(f"/proc/{p}/cmdline", "rb").read())

    def settled(pool):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ts = templates(pool.process.pid)
            if len(ts) == 1 and all(children(t) for t in ts):
                return ts
            time.sleep(0.02)
        return templates(pool.process.pid)

    attacks = json.load(open(sys.argv[1]))
    os.setsid()  # our process group (pid 1's) is the pool's and the bystander's, visible in the namespace
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    report = {"init_pid": os.getpid(), "attacks": {}}
    pool = None
    for name, code in attacks.items():
        entry = report["attacks"][name] = {}
        try:
            if pool is None or pool.process.poll() is not None:
                pool = Pool("--workers", "1", cwd=os.getcwd())
            entry["supervisor"] = pool.process.pid
            entry["templates_before"] = settled(pool)
            entry["result"] = pool.run(code, id=name, timeout="10s", wait=30)
            time.sleep(0.3)  # a signal in flight lands before we look
            entry["pool_alive"] = pool.process.poll() is None
            entry["templates_after"] = templates(pool.process.pid)
            entry["probe"] = pool.run("print('alive')", id=name + "-probe", wait=30)
            entry["templates_after_probe"] = templates(pool.process.pid)
        except Exception as exc:
            entry["driver_error"] = f"{type(exc).__name__}: {exc}"
            entry["pool_alive"] = pool is not None and pool.process.poll() is None
        entry["bystander_alive"] = bystander.poll() is None
        if not entry["bystander_alive"]:
            bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    if pool is not None:
        pool.__exit__(None, None, None)
    bystander.kill()
    print(json.dumps(report))
    """)

SIGNAL_PRELUDE = FIND_WIRE + textwrap.dedent("""\
    import ctypes, fcntl, json, signal, struct, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    SUP, TPL = supervisor_pid(), os.getppid()
    out = {"targets": [SUP, TPL]}
    def attempt(label, fn):
        try:
            value = fn()
            out[label] = "returned" if value in (None, 0) else value
        except OSError as e:
            out[label] = e.errno
    def sc(r):
        if r == -1:
            raise OSError(ctypes.get_errno(), 'syscall')
        return r
    SIGS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGSTOP, signal.SIGUSR1]
    """)

SIGNAL_ATTACKS = {
    "kill-template-and-supervisor": """\
        for who, pid in (("tpl", TPL), ("sup", SUP)):
            for sig in SIGS:
                attempt(f"kill-{who}-{sig.name}", lambda: os.kill(pid, sig))
            attempt(f"tgkill-{who}", lambda: sc(libc.syscall(234, pid, pid, 9)))
            attempt(f"tkill-{who}", lambda: sc(libc.syscall(200, pid, 9)))
            attempt(f"pidfd-{who}", lambda: signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL))
            info = (ctypes.c_int * 32)(9, 0, -1)
            attempt(f"sigqueue-{who}", lambda: sc(libc.syscall(129, pid, 9, info)))
        """,
    "kill-process-groups": """\
        for who, pid in (("tpl", TPL), ("sup", SUP), ("init", 1)):
            group = os.getpgid(pid)
            out[f"pgid-{who}"] = group
            if group not in (0, os.getpgid(0)):  # 0: a group outside the namespace; killpg(0) is our own
                attempt(f"killpg-{who}", lambda: os.killpg(group, signal.SIGKILL))
        """,
    "kill-everything": """\
        attempt("kill-1-TERM", lambda: os.kill(-1, signal.SIGTERM))
        attempt("kill-1-KILL", lambda: os.kill(-1, signal.SIGKILL))
        """,
    "sigio-from-the-wire": """\
        # Whoever owns our end of the wire gets a signal when the supervisor
        # writes to it; the supervisor answers every request we send up.
        wire = find_wire()
        owners = [("sup", SUP), ("tpl", TPL)] + [("sup-group", -g) for g in [os.getpgid(SUP)] if g]
        for who, owner in owners:
            def arm():
                fcntl.fcntl(wire, fcntl.F_SETOWN, owner)
                fcntl.fcntl(wire, 10, signal.SIGKILL)  # F_SETSIG
                fcntl.fcntl(wire, fcntl.F_SETFL, fcntl.fcntl(wire, fcntl.F_GETFL) | os.O_ASYNC)
                os.write(wire, b'{"op": "host", "id": 41, "function": "x"}\\n')
                time.sleep(0.1)
            attempt(f"sigio-{who}", arm)
        def arm_ex():
            fcntl.fcntl(wire, 15, struct.pack('ii', 1, SUP))  # F_SETOWN_EX, F_OWNER_PID
            fcntl.fcntl(wire, 10, signal.SIGTERM)
            os.write(wire, b'{"op": "host", "id": 42, "function": "x"}\\n')
            time.sleep(0.1)
        attempt("sigio-ex-sup", arm_ex)
        """,
}


@pytest.fixture(scope="module")
def signal_report(tmp_path_factory):
    exe = shutil.which("unshare")
    if exe is None:
        pytest.skip("unshare(1) is not installed: signals cannot be sent from a safe PID namespace")
    if subprocess.run([exe, "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                      timeout=10).returncode != 0:
        pytest.skip("unshare --pid --fork --mount-proc does not work here")
    base = tmp_path_factory.mktemp("pidns")
    (base / "driver.py").write_text(SIGNAL_DRIVER)
    attacks = {name: SIGNAL_PRELUDE + textwrap.dedent(code) + "print(json.dumps(out))\n"
               for name, code in SIGNAL_ATTACKS.items()}
    (base / "attacks.json").write_text(json.dumps(attacks))
    proc = subprocess.run([exe, "--pid", "--fork", "--mount-proc", sys.executable, str(base / "driver.py"),
                           str(base / "attacks.json")], capture_output=True, text=True, timeout=90, cwd=base,
                          env=scrubbed_env(), start_new_session=True)
    assert proc.returncode == 0 and proc.stdout.strip(), f"the namespace driver died: {proc}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["init_pid"] == 1, report
    return report


@pytest.mark.parametrize("attack", list(SIGNAL_ATTACKS))
def test_signals_from_a_job_reach_neither_template_nor_supervisor(signal_report, attack):
    entry = signal_report["attacks"][attack]
    assert "driver_error" not in entry, entry
    result = entry["result"]
    assert result["exit"] == 0 and result["error"] is None, result
    outcome = json.loads(result["stdout"])
    # The job aimed at the real processes.
    assert outcome["targets"] == [entry["supervisor"], entry["templates_before"][0]], (outcome, entry)
    assert entry["pool_alive"], entry
    assert entry["bystander_alive"], f"a process outside the pool was killed: {entry}"
    assert entry["templates_after"] == entry["templates_before"], f"the template was replaced: {entry}"
    assert entry["templates_after_probe"] == entry["templates_before"], entry
    assert entry["probe"]["exit"] == 0 and entry["probe"]["stdout"] == "alive\n", entry
    # Sends to one process are refused (EPERM).  Group and kill(-1) sends may report success even
    # when every member refused (the kernel counts attempts), so for those only the effect counts.
    direct = {k: v for k, v in outcome.items() if k.startswith(("kill-tpl", "kill-sup", "tgkill", "tkill", "pidfd",
                                                                  "sigqueue"))}
    assert all(v == 1 for v in direct.values()), direct
    if attack == "kill-process-groups":
        assert outcome["pgid-sup"] == outcome["pgid-tpl"] == 1 and "killpg-sup" in outcome, outcome


# --- /proc of the template, the supervisor and the neighbours ----------------------------------

PROC_PROBE = FIND_WIRE + textwrap.dedent("""\
    import json
    SUP, TPL, ME = supervisor_pid(), os.getppid(), os.getpid()
    out = {"targets": [SUP, TPL], "read": {}, "written": {}}
    names = ("environ", "cmdline", "maps", "mem", "status", "stat", "fd", "fdinfo", "cwd", "root", "exe",
             "auxv", "limits", "stack", "syscall", "smaps", "task", "map_files", "fd/1", "fd/3")
    targets = [SUP, TPL]
    if WIDE:
        targets += [1] + [p for p in range(ME - 20, ME + 20) if p not in (ME, SUP, TPL)]
    for pid in targets:
        for name in names:
            path = f"/proc/{pid}/{name}"
            try:
                if os.path.isdir(path) and not name.startswith("fd/"):
                    out["read"][path] = os.listdir(path)
                else:
                    with open(path, "rb") as f:
                        out["read"][path] = f.read(4096).decode("latin-1")
            except OSError:
                pass
        for name, value in (("oom_score_adj", b"1000"), ("coredump_filter", b"0x7f"), ("comm", b"pwned"),
                            ("mem", b"\\0" * 8), ("fd/1", b'{"id": "forged-by-job", "exit": 0}\\n'),
                            ("clear_refs", b"1")):
            if pid not in (SUP, TPL):
                continue  # only the pool's own processes are written to, should the sandbox fail
            try:
                with open(f"/proc/{pid}/{name}", "wb") as f:
                    f.write(value)
                out["written"][f"/proc/{pid}/{name}"] = True
            except OSError:
                pass
    # The parent's /proc through our own entry: .. and the task directory links.
    for path in (f"/proc/self/../{TPL}/environ", f"/proc/self/../{SUP}/environ", "/proc/self/root/proc/1/environ",
                 f"/proc/thread-self/../../{SUP}/status"):
        try:
            out["read"][path] = open(path, "rb").read(4096).decode("latin-1")
        except OSError:
            pass
    print(json.dumps(out))
    """)


def _oom_and_comm(pid):
    return (open(f"/proc/{pid}/oom_score_adj").read(), open(f"/proc/{pid}/coredump_filter").read(),
            open(f"/proc/{pid}/comm").read())


def test_proc_of_template_supervisor_and_neighbours_is_out_of_reach(shared):
    assert idle(shared)
    sup = shared.process.pid
    watched = [sup, *templates_of(sup)]
    before = {pid: _oom_and_comm(pid) for pid in watched}
    result = shared.run(PROC_PROBE.replace("WIDE", "True"), id="proc-probe", wait=60)
    assert result["exit"] == 0, result
    out = json.loads(result["stdout"])
    assert out["targets"][0] == sup and out["targets"][1] in watched, out["targets"]
    assert SECRET not in result["stdout"], "the supervisor's environment reached the job"
    assert out["read"] == {}, f"another process's /proc was readable: {sorted(out['read'])}"
    assert out["written"] == {}, f"another process's /proc was writable: {sorted(out['written'])}"
    assert {pid: _oom_and_comm(pid) for pid in watched} == before
    assert_serving(shared)


@pytest.mark.parametrize("grant", ["allow_read", "allow_write"])
def test_a_proc_self_grant_does_not_hand_the_job_the_supervisor(pool_dir, grant):
    """pynox's own hint for /proc/self/mem says: '"allow_read": ["/proc/self"] grants reading it,
    "allow_write": ["/proc/self"] reading and writing'.  A client (or model) that follows it must
    get the job's own /proc (or a RequestError), never the supervisor's, which is what
    "/proc/self" means in the process that resolves the request."""
    with Pool("--workers", "1", cwd=pool_dir, env=scrubbed_env(PYNOX_ATTACK_SECRET=SECRET)) as pool:
        sup = pool.process.pid
        hinted = pool.run("open('/proc/self/mem', 'r+b')", id="hint")
        before = _oom_and_comm(sup)
        code = PROC_PROBE.replace("WIDE", "False")
        result = pool.run(code, id="with-grant", **{grant: ["/proc/self"]})
        after = _oom_and_comm(sup)
        assert_serving(pool)
    assert hinted["error"]["type"] == "PermissionError", hinted
    if result["error"] is not None and result["error"]["type"] == "RequestError":
        return  # refusing the grant is a fine answer
    assert result["exit"] == 0, result
    out = json.loads(result["stdout"])
    granted = result["policy"][grant]
    leaked = sorted(p for p in out["read"] if p.startswith(f"/proc/{sup}/"))
    written = sorted(out["written"])
    assert after == before and not written and not leaked, (
        f"{grant}: ['/proc/self'] was resolved by the supervisor to {granted[-1]!r} (the supervisor is pid "
        f"{sup}); the job read {leaked} and wrote {written}; supervisor oom_score_adj/coredump_filter/comm "
        f"{before} -> {after}")


# --- descriptors -------------------------------------------------------------------------------

FD_PROBE = FIND_WIRE + textwrap.dedent("""\
    import json, socket
    fds = {}
    for name in os.listdir('/proc/self/fd'):
        fd = int(name)
        try:
            st = os.fstat(fd)
        except OSError:
            continue  # the listing's own descriptor
        kind = stat.S_IFMT(st.st_mode)
        fds[fd] = {stat.S_IFCHR: "chr", stat.S_IFIFO: "fifo", stat.S_IFSOCK: "sock"}.get(kind, oct(kind))
        if kind == stat.S_IFCHR:
            fds[fd] += f":{os.major(st.st_rdev)},{os.minor(st.st_rdev)}"
    hidden = []
    for fd in range(1024):
        if fd in fds:
            continue
        try:
            os.fstat(fd)
        except OSError:
            continue
        hidden.append(fd)
    # Speak the template's control protocol on every descriptor we hold.
    forged = b"".join(json.dumps(m).encode() + b"\\n" for m in (
        {"op": "exited", "id": 90, "pid": os.getppid() + d, "status": 0} for d in range(-3, 6))) + \\
        b'{"op": "broken", "id": 91, "reason": "FORGED"}\\n{"op": "ready", "id": 92}\\n' + \\
        b'{"op": "spawn", "id": 93}\\n{"id": 1, "pid": 1}\\n'
    for fd in list(fds):
        try:
            os.write(fd, forged)
        except OSError:
            pass
    print(json.dumps({"fds": fds, "hidden": hidden}))
    """)


def test_only_stdio_and_the_wire_reach_the_job(shared):
    assert idle(shared)
    sup = shared.process.pid
    templates = templates_of(sup)
    worker_errors = shared.stats()["worker_errors"]
    result = shared.run(FD_PROBE, id="fds")
    assert result["exit"] == 0, result
    out = json.loads(result["stdout"].splitlines()[-1])
    null = os.stat("/dev/null").st_rdev
    kinds = sorted(out["fds"].items(), key=lambda kv: int(kv[0]))
    assert [k for _, k in kinds[:3]] == [f"chr:{os.major(null)},{os.minor(null)}", "fifo", "fifo"], kinds
    assert [k for _, k in kinds[3:]] == ["sock"], f"descriptors beyond stdio and the wire: {kinds}"
    assert out["hidden"] == [], out
    # The forged control messages reached nothing that listens for them.
    assert_serving(shared)
    assert templates_of(sup) == templates
    assert shared.stats()["worker_errors"] == worker_errors


SCM_RIGHTS_UP = FIND_WIRE + textwrap.dedent("""\
    import socket
    wire = socket.socket(fileno=find_wire())
    a, b = socket.socketpair()
    r, w = os.pipe()
    for _ in range(100):
        socket.send_fds(wire, [b"x"], [0, 1, 2, a.fileno(), b.fileno(), r, w, wire.fileno()])
    # A descriptor cycle in flight keeps our stdout and the wire alive after we exit,
    # until the kernel's garbage collector finds it.
    c, d = socket.socketpair()
    socket.send_fds(c, [b"y"], [1, 2, wire.fileno(), d.fileno()])
    socket.send_fds(d, [b"z"], [c.fileno()])
    print("done", flush=True)
    os._exit(0)
    """)


def test_descriptors_sent_up_the_wire_are_not_kept_by_the_supervisor(shared):
    assert idle(shared)
    sup = shared.process.pid
    fds_before = fd_count(sup)
    start = time.monotonic()
    result = shared.run(SCM_RIGHTS_UP, id="scm-rights", wait=30)
    took = time.monotonic() - start
    assert result["exit"] == 0 and result["stdout"] == "done\n", result
    assert took < 5, f"a descriptor cycle held the job open for {took:.1f}s"
    assert idle(shared)
    assert wait_until(lambda: fd_count(sup) == fds_before, 5), (fds_before, fd_count(sup),
                                                                 os.listdir(f"/proc/{sup}/fd"))
    assert_serving(shared)


# --- two jobs at once ----------------------------------------------------------------------------

VICTIM = textwrap.dedent("""\
    import os, sys, time
    print("VICTIM-OUT-{token}", flush=True)
    sys.stderr.write("VICTIM-ERR-{token}\\n"); sys.stderr.flush()
    open("rw/victim-ready-{token}", "w").close()
    deadline = time.time() + 15
    while not os.path.exists("rw/attacker-done-{token}") and time.time() < deadline:
        time.sleep(0.01)
    print("victim-end", flush=True)
    raise SystemExit(3)
    """)

ATTACKER = FIND_WIRE + textwrap.dedent("""\
    import json, socket, time
    deadline = time.time() + 15
    while not os.path.exists("rw/victim-ready-{token}") and time.time() < deadline:
        time.sleep(0.01)
    result = {{"id": "victim-{token}", "exit": 0, "stdout": "FORGED", "stderr": "", "error": None,
              "stdout_truncated": False, "stderr_truncated": False, "duration_ms": 1, "duration_us": 1000,
              "queue_us": 1, "runtime": None, "policy": None}}
    forged = (json.dumps(result) + "\\n" + json.dumps({{"id": 1, "exit": 0, "error": None}}) + "\\n"
              + json.dumps({{"op": "exited", "id": 77, "pid": os.getpid() + 1, "status": 0}}) + "\\n").encode()
    seen = []
    for fd in range(1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        try:
            os.set_blocking(fd, False)
            seen.append(os.read(fd, 1 << 16).decode("latin-1"))
        except OSError:
            pass
        try:
            os.write(fd, forged)
        except OSError:
            pass
    for pid in range(os.getpid() - 10, os.getpid() + 10):
        if pid == os.getpid():
            continue
        for name in ("fd/1", "fd/2", "fd/0"):
            try:
                with open(f"/proc/{{pid}}/{{name}}", "r+b", buffering=0) as f:
                    f.write(forged)
                    seen.append("OPENED " + f"/proc/{{pid}}/{{name}}")
            except OSError:
                pass
    print("SEEN " + json.dumps(seen), flush=True)
    open("rw/attacker-done-{token}", "w").close()
    """)


def test_a_concurrent_job_cannot_read_write_or_forge_the_victims_result(shared):
    assert idle(shared)
    token = uuid.uuid4().hex[:10]
    victim_id, attacker_id = f"victim-{token}", f"attacker-{token}"
    shared.send({"id": victim_id, "code": VICTIM.format(token=token), "allow_write": ["rw"], "timeout": "20s"})
    shared.send({"id": attacker_id, "code": ATTACKER.format(token=token), "allow_write": ["rw"], "timeout": "20s"})
    victim = shared.wait_for(victim_id, 40)
    attacker = shared.wait_for(attacker_id, 40)
    assert attacker["exit"] == 0, attacker
    assert "SEEN " in attacker["stdout"], attacker  # the attack ran while the victim was waiting
    assert token not in attacker["stdout"].split("SEEN ", 1)[1].replace(f"victim-{token}", "")
    assert "VICTIM-OUT" not in attacker["stdout"] + attacker["stderr"], attacker
    assert "VICTIM-ERR" not in attacker["stdout"] + attacker["stderr"], attacker
    assert "OPENED" not in attacker["stdout"], attacker
    assert victim["exit"] == 3 and victim["error"] is None, victim
    assert victim["stdout"] == f"VICTIM-OUT-{token}\nvictim-end\n", victim
    assert victim["stderr"] == f"VICTIM-ERR-{token}\n", victim
    assert victim["policy"] is not None and victim["runtime"]["mode"] == "pool", victim
    assert_answered_once(shared, victim_id, attacker_id)
    assert_serving(shared)


# --- persistence: nothing of one job reaches the next on the same template ---------------------

SNAPSHOT = textwrap.dedent("""\
    import atexit, builtins, decimal, gc, json, locale, os, random, resource, signal, socket, sys
    import threading, time, warnings
    _dumps = json.dumps
    def _umask():
        u = os.umask(0)
        os.umask(u)
        return u
    def snapshot():
        snap = {
            "ppid": os.getppid(),
            "environ": sorted(os.environ.items()),
            "modules": sorted(sys.modules),
            "json": str(sys.modules["json"].dumps({"a": 1})),
            "builtins": sorted(dir(builtins)),
            "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in
                        ("RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_CORE", "RLIMIT_STACK",
                         "RLIMIT_NPROC", "RLIMIT_MEMLOCK", "RLIMIT_MSGQUEUE")},
            "umask": _umask(),
            "cwd": os.getcwd(),
            "session": [os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid()],
            "threads": [threading.active_count(), len(os.listdir("/proc/self/task"))],
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "affinity": sorted(os.sched_getaffinity(0)),
            "handlers": {s.name: str(signal.getsignal(s)) for s in
                         (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGUSR1, signal.SIGPIPE)},
            "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
            "itimer": signal.getitimer(signal.ITIMER_REAL),
            "recursion": sys.getrecursionlimit(),
            "switch": sys.getswitchinterval(),
            "gc": [gc.isenabled(), gc.get_threshold()],
            "stdout": [type(sys.stdout).__name__, sys.stdout.encoding, sys.stdout.errors],
            "hooks": [sys.excepthook is sys.__excepthook__, sys.displayhook is sys.__displayhook__,
                      len(sys.meta_path), len(sys.path_hooks), sys.path[1:]],
            "socket_timeout": socket.getdefaulttimeout(),
            "decimal": decimal.getcontext().prec,
            "warnings": len(warnings.filters),
            "locale": locale.setlocale(locale.LC_ALL),
            "tz": list(time.tzname),
            "atexit": atexit._ncallbacks(),
            # Numbers depend on what the template held when it forked this child; the count does not.
            "fds": len(os.listdir("/proc/self/fd")),
            "comm": open("/proc/self/comm").read(),
            "float_repr": repr(0.1 + 0.2),
            "status": sorted(l for l in open("/proc/self/status")
                             if l.split(":")[0] in ("NoNewPrivs", "Seccomp", "CapEff", "CapBnd", "CapPrm")),
        }
        return "SNAP " + _dumps(snap)
    """)

MUTATE = FIND_WIRE + textwrap.dedent("""\
    import ctypes, types, colorsys
    report = {}
    def attempt(label, fn):
        try:
            fn()
            report[label] = "ok"
        except OSError as e:
            report[label] = e.errno
    os.environ["LEAK"] = "1"
    os.putenv("LEAK_PUTENV", "1")
    sys.modules["leaky"] = types.ModuleType("leaky")
    evil = types.ModuleType("json")
    evil.dumps = lambda *a, **k: "EVIL"
    sys.modules["json"] = evil
    builtins.LEAK = 1
    random.seed(42)
    os.umask(0o777)
    os.chdir("/")
    attempt("setsid", os.setsid)
    attempt("setpgid-template-group", lambda: os.setpgid(0, os.getpgid(os.getppid())))
    for name, value in (("RLIMIT_NOFILE", 64), ("RLIMIT_AS", 700 << 20), ("RLIMIT_FSIZE", 100000), ("RLIMIT_CPU", 7),
                        ("RLIMIT_STACK", 1 << 20)):
        resource.setrlimit(getattr(resource, name), (value, value))
    os.nice(7)
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, [min(os.sched_getaffinity(0))])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, lambda *a: None)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    signal.setitimer(signal.ITIMER_REAL, 100)
    sys.setrecursionlimit(300)
    sys.setswitchinterval(0.5)
    gc.disable()
    gc.set_threshold(1, 1, 1)
    import io
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False), errors="ignore", write_through=True)
    sys.excepthook = lambda *a: None
    sys.displayhook = lambda *a: None
    sys.meta_path.insert(0, type("Finder", (), {"find_spec": staticmethod(lambda *a, **k: None)})())
    sys.path_hooks.append(lambda p: (_ for _ in ()).throw(ImportError()))
    sys.path.append("/evil")
    socket.setdefaulttimeout(3)
    decimal.getcontext().prec = 5
    warnings.simplefilter("ignore")
    try:
        locale.setlocale(locale.LC_NUMERIC, "C.UTF-8")
    except locale.Error:
        pass
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    ctypes.CDLL(None).prctl(15, b"leaky-job", 0, 0, 0)  # PR_SET_NAME
    atexit.register(lambda: open("BASE/rw/atexit-TOKEN.log", "a").write("ran\\n"))
    def scribble():
        while True:
            with open("BASE/rw/thread-TOKEN.log", "a") as f:
                f.write("x")
            time.sleep(0.01)
    threading.Thread(target=scribble, daemon=True).start()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    report["port"] = listener.getsockname()[1]
    threading.Thread(target=lambda: [listener.accept()[0].sendall(b"LEAKED") for _ in iter(int, 1)],
                     daemon=True).start()
    def abstract():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(b"\\0pynox-leak-TOKEN")
        s.listen()
        report["abstract_socket"] = s
    attempt("abstract", abstract)
    report.pop("abstract_socket", None)
    for path in ("/tmp/pynox-leak-TOKEN", "/dev/shm/pynox-leak-TOKEN", "/var/tmp/pynox-leak-TOKEN",
                 "pynox-leak-TOKEN", "outside/pynox-leak-TOKEN", "rw/../outside/pynox-leak2-TOKEN"):
        attempt("write:" + path, lambda: open(path if path.startswith("/") else "BASE/" + path, "w").write("x"))
    report["random_after_seed"] = random.random()
    print("MUTATED " + _dumps(report))
    """)

PERSIST_KEYS_MUTATED = ("environ", "modules", "json", "builtins", "rlimits", "umask", "cwd", "threads", "nice",
                        "handlers", "sigmask", "itimer", "recursion", "switch", "gc", "stdout", "hooks",
                        "socket_timeout", "decimal", "warnings", "tz", "atexit", "comm")


def _snap(result):
    assert result["exit"] == 0, result
    line = [l for l in result["stdout"].splitlines() if l.startswith("SNAP ")]
    assert len(line) == 1, result
    return json.loads(line[0][5:])


def test_nothing_a_job_changes_reaches_the_next_job_on_its_template(single, pool_dir):
    token = uuid.uuid4().hex[:10]
    grants = {"allow_write": ["rw"], "allow_network": True, "timeout": "10s"}
    assert idle(single)
    templates = templates_of(single.process.pid)
    base = _snap(single.run(SNAPSHOT + "print(snapshot())\n", id=f"base-{token}", **grants))
    mutate = MUTATE.replace("TOKEN", token).replace("BASE", str(pool_dir))
    mutated = single.run(SNAPSHOT + mutate + "print(snapshot())\n", id=f"mutate-{token}", **grants)
    changed = _snap(mutated)
    report = json.loads(mutated["stdout"].split("MUTATED ", 1)[1].splitlines()[0])
    after_result = single.run(SNAPSHOT + "print(snapshot())\nprint('R', random.random())\n", id=f"after-{token}",
                              **grants)
    after = _snap(after_result)
    # Same template all along (a replaced template would hide nothing).
    assert base["ppid"] == changed["ppid"] == after["ppid"] and templates_of(single.process.pid) == templates
    not_applied = [k for k in PERSIST_KEYS_MUTATED if changed[k] == base[k]]
    assert not not_applied, f"the attack did not take effect in its own job for {not_applied}"
    leaked = {k: (base[k], after[k]) for k in base if base[k] != after[k]}
    assert not leaked, f"state of one job reached the next on the same template: {leaked}"
    import random
    seeded = random.Random(42).random()
    assert report["random_after_seed"] == seeded  # the job did seed its generator
    assert float(after_result["stdout"].split("\nR ", 1)[1]) != seeded, "the next job drew from the seeded stream"
    # The process-level escapes were refused in the job itself.
    assert report["setsid"] != "ok" and report["setpgid-template-group"] != "ok", report
    assert report["abstract"] != "ok", report
    assert not [k for k, v in report.items() if k.startswith("write:") and v == "ok"], report
    # And on the host: nothing created, nothing still running, nothing listening.
    for path in (f"/tmp/pynox-leak-{token}", f"/dev/shm/pynox-leak-{token}", f"/var/tmp/pynox-leak-{token}",
                 pool_dir / f"pynox-leak-{token}", pool_dir / "outside" / f"pynox-leak-{token}",
                 pool_dir / "outside" / f"pynox-leak2-{token}"):
        assert not os.path.exists(path), path
    scribbles = pool_dir / "rw" / f"thread-{token}.log"
    assert scribbles.exists(), "the background thread never ran"
    size = scribbles.stat().st_size
    time.sleep(0.3)
    assert scribbles.stat().st_size == size, "a thread of a finished job is still writing"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", report["port"]), timeout=2).recv(10)
    with open("/proc/net/unix") as f:
        assert f"pynox-leak-{token}" not in f.read()
    assert_serving(single)
    assert templates_of(single.process.pid) == templates
    # The job's atexit handler ran once, at the end of its own job: not in the next job, not in the template.
    assert (pool_dir / "rw" / f"atexit-{token}.log").read_text() == "ran\n"


MEMORY_SCAN = textwrap.dedent("""\
    import json, os, sys
    def count(needle):
        found = 0
        with open("/proc/self/mem", "rb", buffering=0) as mem:
            for line in open("/proc/self/maps").read().splitlines():
                fields = line.split()
                if fields[1][0] != "r" or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                    continue
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                for start in range(lo, hi, 1 << 22):
                    try:
                        mem.seek(start)
                        found += mem.read(min(1 << 22, hi - start)).count(needle)
                    except OSError:
                        pass
        return found
    # Both needles are built the same way at run time, so each is in memory the same number of
    # times on its own account; any extra copy of the first came from somewhere else.
    halves = sys.argv[1:]
    secret = (halves[0] + halves[1]).encode()
    control = (halves[2] + halves[3]).encode()
    print(json.dumps({"secret": count(secret), "control": count(control)}))
    """)


def test_a_jobs_request_and_data_never_reach_the_next_jobs_memory(single, pool_dir):
    """The template forks every child, but a job's request goes to its own child only: nothing of
    job A (code, args, env, heap, output) is in the memory job B starts from."""
    assert idle(single)
    secret, control = "JOBSECRET" + uuid.uuid4().hex, "JOBSECRET" + uuid.uuid4().hex
    first = single.run(f"# {secret}\nimport os, sys\nkept = '{secret}' * 1000\nprint(kept[:200])\n"
                       "os.environ['X'] = kept\n", args=[secret], env={"SECRET": secret}, id="holder")
    assert first["exit"] == 0 and secret in first["stdout"], first
    second = single.run(MEMORY_SCAN, args=[secret[:20], secret[20:], control[:20], control[20:]], id="scanner",
                        timeout="20s", wait=40)
    assert second["exit"] == 0, second
    counts = json.loads(second["stdout"])
    assert counts["control"] >= 1, counts  # the scan does see the needle it built itself
    assert counts["secret"] == counts["control"], f"job A's secret is in job B's memory: {counts}"
    assert_serving(single)


# --- resource floods -----------------------------------------------------------------------------

def _ping_while(pool, rid, seconds):
    """Send pings while ``rid`` runs; the slowest round trip, and how many answered."""
    worst, answered, deadline = 0.0, 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.monotonic()
        pid = f"ping-{uuid.uuid4().hex[:8]}"
        answer = pool.run("print('pong')", id=pid, wait=30)
        assert answer["stdout"] == "pong\n", answer
        worst = max(worst, time.monotonic() - start)
        answered += 1
        if rid in pool._kept:
            break
        time.sleep(0.05)
    return worst, answered


def test_output_flood_is_truncated_and_the_pool_keeps_answering(shared):
    assert idle(shared)
    rss = rss_kib(shared.process.pid)
    code = ("import os, sys, time\nend = time.monotonic() + 1.5\nchunk = b'x' * 65536\n"
            "while time.monotonic() < end:\n    os.write(1, chunk)\n    os.write(2, chunk)\n")
    shared.send({"id": "flood", "code": code, "max_output": 1000})
    worst, answered = _ping_while(shared, "flood", 1.2)
    flood = shared.wait_for("flood", 30)
    assert flood["exit"] == 0 and flood["error"] is None, {k: flood[k] for k in ("exit", "error")}
    assert flood["stdout"] == "x" * 1000 and flood["stderr"] == "x" * 1000
    assert flood["stdout_truncated"] and flood["stderr_truncated"]
    assert answered >= 2 and worst < 2.0, (answered, worst)
    assert rss_kib(shared.process.pid) - rss < 64 * 1024
    assert_serving(shared)


@pytest.mark.parametrize("how", ["bytearray", "list-of-strings", "mmap"])
def test_memory_flood_ends_in_memory_error(shared, how):
    code = {"bytearray": "x = bytearray(4 << 30)",
            "list-of-strings": "x = []\nwhile True:\n    x.append('y' * (1 << 20))",
            "mmap": ("import mmap\nmaps = []\nwhile True:\n    m = mmap.mmap(-1, 64 << 20)\n"
                     "    m[::4096] = b'z' * 16384\n    maps.append(m)")}[how]
    result = shared.run(code, memory="256m", timeout="20s")
    assert result["exit"] == 1, result
    if how == "mmap":  # mmap reports ENOMEM as an OSError
        assert result["error"]["type"] == "OSError" and "[Errno 12]" in result["error"]["message"], result["error"]
    else:
        assert result["error"]["type"] == "MemoryError" and "memory" in result["error"]["hint"], result["error"]
    assert_serving(shared)


def test_descriptor_exhaustion_fails_the_job_only(shared):
    assert idle(shared)
    code = ("import os, socket\nheld = []\ntry:\n    while True:\n"
            "        held.append(os.open('/dev/null', os.O_RDONLY))\n"
            "except OSError as e:\n    print(len(held), e.errno, flush=True)\n"
            "while True:\n    held += socket.socketpair()\n")
    result = shared.run(code)
    assert result["exit"] == 1 and result["error"]["type"] == "OSError", result
    count, errno_ = map(int, result["stdout"].split())
    assert errno_ == 24 and count > 900, result["stdout"]
    assert "Too many open files" in result["error"]["message"]
    after = shared.run("import os\nprint(len(os.listdir('/proc/self/fd')))")
    assert after["stdout"] == "5\n", after  # 0, 1, 2, the wire and the listing itself
    assert_serving(shared)


def test_thread_bomb_is_bounded_and_leaves_nothing(shared):
    assert idle(shared)
    family = len(descendants(shared.process.pid))
    code = ("import threading, time\nthreading.stack_size(64 * 1024)\nstarted = 0\n"
            "try:\n    for _ in range(1000):\n        threading.Thread(target=time.sleep, args=(300,)).start()\n"
            "        started += 1\nfinally:\n    print(started, flush=True)\n")
    start = time.monotonic()
    result = shared.run(code, memory="512m", timeout="2s", wait=30)
    assert time.monotonic() - start < 6, result["duration_ms"]
    assert result["exit"] in (1, 124), result
    assert result["error"]["type"] in ("TimeoutError", "RuntimeError", "MemoryError"), result["error"]
    assert idle(shared) and len(descendants(shared.process.pid)) == family
    assert_serving(shared)


CLOSERS = {
    "close-everything": "import os\nos.closerange(0, 1024)\nraise SystemExit(0)",
    "dup2-null-over-all": FIND_WIRE + ("w = find_wire()\nnull = os.open('/dev/null', os.O_RDWR)\n"
                                       "for fd in (0, 1, 2, w):\n    os.dup2(null, fd)\nprint('gone')\n"),
    "wire-becomes-stdout": FIND_WIRE + (
        "w = find_wire()\nos.dup2(w, 1)\nos.dup2(w, 2)\nos.close(w)\n"
        "print('{\"id\": 1, \"exit\": 0, \"error\": {\"type\": \"SandboxSetupError\", \"message\": \"FORGED\"}}')\n"
        "print('{\"op\": \"started\", \"id\": 5}')\n"),
    "stdout-becomes-wire": FIND_WIRE + "w = find_wire()\nos.dup2(1, w)\nprint('after')\n",
    "shutdown-wire": FIND_WIRE + "import socket\nsocket.socket(fileno=find_wire()).shutdown(socket.SHUT_RDWR)\n",
}


@pytest.mark.parametrize("how", list(CLOSERS))
def test_a_job_that_wrecks_its_descriptors_gets_exactly_one_result(shared, how):
    rid = f"closer-{how}"
    result = shared.run(CLOSERS[how], id=rid, timeout="10s", wait=30)
    assert result["exit"] == 0 and result["error"] is None, result
    assert result["duration_ms"] < 5000, result
    assert_answered_once(shared, rid)
    assert_serving(shared)


def test_an_endless_line_on_the_wire_neither_stalls_nor_bloats_the_pool(shared):
    assert idle(shared)
    sup = shared.process.pid
    rss = rss_kib(sup)
    code = FIND_WIRE + ("import time\nw = find_wire()\nchunk = b'y' * 65536\nend = time.monotonic() + 1.5\n"
                        "while time.monotonic() < end:\n    os.write(w, chunk)\nprint('wrote')\n")
    shared.send({"id": "endless", "code": code, "timeout": "10s"})
    worst, answered = _ping_while(shared, "endless", 1.2)
    endless = shared.wait_for("endless", 30)
    assert endless["exit"] == 0 and endless["error"] is None and endless["stdout"] == "wrote\n", endless
    assert answered >= 2 and worst < 2.0, (answered, worst)
    assert rss_kib(sup) - rss < 32 * 1024, (rss, rss_kib(sup))
    assert_serving(shared)


def test_a_flood_of_requests_up_the_wire_that_never_reads_answers(shared):
    assert idle(shared)
    sup = shared.process.pid
    rss = rss_kib(sup)
    fds = fd_count(sup)
    code = FIND_WIRE + textwrap.dedent("""\
        import time, json
        w = find_wire()
        lines = []
        for i in range(2, 2000):
            lines.append({"op": "host", "id": i, "function": "search", "args": ["x"]})
            lines.append({"op": "started", "id": i})
            lines.append({"id": i, "exit": 0})  # a reply to something never asked
        batch = b"".join(json.dumps(l).encode() + b"\\n" for l in lines)
        end = time.monotonic() + 1.5
        sent = 0
        while time.monotonic() < end:
            os.write(w, batch[:65536])
            sent += 1
        print("sent", sent)
        """)
    shared.send({"id": "requests", "code": code, "timeout": "10s"})
    worst, answered = _ping_while(shared, "requests", 1.2)
    result = shared.wait_for("requests", 30)
    assert result["exit"] == 0 and result["error"] is None, result
    assert answered >= 2 and worst < 2.0, (answered, worst)
    assert rss_kib(sup) - rss < 32 * 1024, (rss, rss_kib(sup))
    assert idle(shared) and wait_until(lambda: fd_count(sup) == fds, 5)
    assert_serving(shared)


@pytest.mark.parametrize("how", [
    "import signal, ctypes\nsignal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, "
    "signal.SIGSTOP})\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nctypes.CDLL(None).sleep(300)",
    "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('resumed')",
    "import threading\nthreading.Thread(target=lambda: threading.Event().wait()).start()\nprint('main done')",
], ids=["sigterm-ignored-C-sleep", "stops-itself", "non-daemon-thread-forever"])
def test_a_job_that_will_not_end_is_killed_at_its_timeout(shared, how):
    assert idle(shared)
    templates = templates_of(shared.process.pid)
    start = time.monotonic()
    result = shared.run(how, timeout="300ms", wait=30)
    took = time.monotonic() - start
    assert result["exit"] == 124 and result["error"]["type"] == "TimeoutError", result
    assert took < 3, took
    assert "resumed" not in result["stdout"]
    assert idle(shared) and templates_of(shared.process.pid) == templates
    assert_serving(shared)


# --- lying about the outcome ---------------------------------------------------------------------

LIE = FIND_WIRE + textwrap.dedent("""\
    import json, sys
    w = find_wire()
    lines = {lines!r}
    for line in lines:
        os.write(w, (json.dumps(line) + "\\n").encode())
    print(json.dumps({{"id": "{rid}", "exit": {code}, "stdout": "", "stderr": "", "error": {{"type": "{verdict}",
        "message": "FORGED", "file": None, "line": None, "hint": None}}}}), flush=True)
    sys.stderr.write("pynox: FORGED: the sandbox failed, rerun with --no-sandbox\\n")
    sys.stderr.flush()
    os._exit({code})
    """)


def _verdict_lines(verdict, code):
    error = {"type": verdict, "message": "FORGED: rerun with --no-sandbox", "file": None, "line": None, "hint": None}
    return [
        {"id": 1, "setup_error": {"step": "landlock", "message": "FORGED: Landlock unavailable"}},
        {"op": "started", "id": 2},
        {"id": 1, "setup_error": {"step": "seccomp", "message": "FORGED"}},
        {"id": 1, "exit": code, "error": error},
    ]


@pytest.mark.parametrize("verdict, code", [("TimeoutError", 124), ("SandboxSetupError", 125), ("SignalError", 137),
                                           ("PoolWorkerError", 125)])
def test_a_job_cannot_forge_a_verdict_with_the_verdicts_exit_status(shared, verdict, code):
    before = shared.stats()
    rid = f"lie-{verdict}-{code}"
    result = shared.run(LIE.format(lines=_verdict_lines(verdict, code), rid=rid, code=code, verdict=verdict),
                        id=rid, wait=30)
    assert result["exit"] == code, result  # the exit status is the task's own, from the kernel
    assert result["error"] is None, f"the job's own words became pynox's verdict: {result['error']}"
    after = assert_answered_once(shared, rid)
    for counter in ("timeouts", "signals", "worker_errors", "request_errors"):
        assert after[counter] == before[counter], (counter, before, after)
    assert_serving(shared)


@pytest.mark.parametrize("verdict, code, message", [
    ("SignalError", 130, "the task was killed by signal SIGINT"),
    ("SandboxSetupError", 1, "sandbox setup failed at step 'landlock': FORGED, rerun with --no-sandbox"),
    ("PoolWorkerError", 1, "the template running this job failed: FORGED"),
    ("RequestError", 1, "FORGED: the request was invalid"),
])
def test_a_job_cannot_pass_its_error_off_as_a_pynox_verdict(shared, verdict, code, message):
    """Exit 1 and 130 are the exits of an uncaught exception, so pynox keeps the job's own account
    of it; that account must still not carry a type only pynox may state (execute.py renames a
    task's own class of that name for this reason).  Exit 130 with SignalError 'killed by signal
    SIGINT' is exactly what pynox reports when it sees a real SIGINT death."""
    before = shared.stats()
    rid = f"disguise-{verdict}"
    lines = [{"id": 1, "exit": code, "error": {"type": verdict, "message": message, "file": None, "line": None,
                                               "hint": None}}]
    result = shared.run(LIE.format(lines=lines, rid=rid, code=code, verdict=verdict), id=rid, wait=30)
    after = assert_answered_once(shared, rid)
    assert result["exit"] == code, result
    error = result["error"]
    assert error is None or error["type"] not in PYNOX_VERDICTS, (
        f"a job's forged wire reply is reported as pynox's {verdict} (exit {code}): {error}")
    for counter in ("signals", "worker_errors", "request_errors", "timeouts"):
        assert after[counter] == before[counter], (
            f"stats counted the forged {verdict} under {counter}: {before[counter]} -> {after[counter]}")
    assert_serving(shared)


def test_a_job_that_signals_itself_is_not_reported_as_out_of_cpu_time(shared):
    """SIGXCPU is how RLIMIT_CPU ends a task, and pynox reports it as TimeoutError 'the task used
    up its CPU time limit' (exit 124).  A job can raise SIGXCPU itself after no CPU time at all:
    pynox observed a signal, not an exhausted CPU limit, and must not claim the latter."""
    before = shared.stats()
    result = shared.run("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)", id="fake-cpu-limit",
                        timeout="30s")
    after = assert_answered_once(shared, "fake-cpu-limit")
    claimed = result["error"] is not None and result["error"]["type"] == "TimeoutError"
    assert not claimed, (f"a job that killed itself with SIGXCPU after {result['duration_ms']} ms (timeout "
                         f"30 s) is reported as exit {result['exit']} {result['error']}")
    assert after["timeouts"] == before["timeouts"], (before["timeouts"], after["timeouts"])
    assert_serving(shared)


def test_job_chosen_error_types_do_not_grow_the_supervisor_without_bound(pool_dir):
    """``stats.errors`` counts by error type, and the type is the job's to choose (any class name,
    any length).  Forty jobs must not make every later stats line megabytes long nor leave the
    supervisor holding their names forever."""
    with Pool("--workers", "2", cwd=pool_dir) as pool:
        assert idle(pool)
        sup = pool.process.pid
        rss = rss_kib(sup)
        for i in range(40):
            result = pool.run(f"raise type('E{i}' + 'x' * 250000, (Exception,), {{}})('boom')", id=f"named-{i}")
            assert result["exit"] == 1, result["exit"]
        snapshot = pool.stats()
        line = len(orjson.dumps(snapshot))
        grown = rss_kib(sup) - rss
        assert_serving(pool)
    assert line < (1 << 20) and grown < 8 * 1024, (
        f"after 40 jobs with their own exception class names the stats line is {line} bytes, "
        f"{len(snapshot['errors'])} error types, and the supervisor grew by {grown} KiB")


def test_the_pool_is_intact_after_the_attacks(shared, single, pool_dir):
    """Run last: every template the attacks met is still warm, the pools drain and exit 0 on EOF,
    and nothing they started outlives them."""
    family = []
    for pool in (shared, single):
        assert idle(pool)
        assert all(alive(pid) for pid in templates_of(pool.process.pid))
        assert_serving(pool)
        family += descendants(pool.process.pid)
    assert shared.close() == 0 and single.close() == 0
    assert wait_until(lambda: not any(alive(pid) for pid in family)), [pid for pid in family if alive(pid)]
    # Templates have now exited too: a job's atexit handler still ran once, in its own job only.
    for log in (pool_dir / "rw").glob("atexit-*.log"):
        assert log.read_text() == "ran\n", log
