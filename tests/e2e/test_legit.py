"""Legitimate work the sandbox must not break: threads, granted files,
the standard library, numpy, randomness, scripts, modules, stdin, the
environment and extra package directories.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest


def test_threads_compute_and_join(pynox):
    code = textwrap.dedent("""\
        import threading, hashlib
        results = [None] * 10
        def work(i):
            h = hashlib.sha256()
            for k in range(2000):
                h.update(f"{i}:{k}".encode())
            results[i] = (i, sum(range(i * 1000)), h.hexdigest()[:8])
        threads = [threading.Thread(target=work, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(all(r is not None for r in results), [r[1] for r in results] == [sum(range(i * 1000)) for i in range(10)],
              threading.active_count())
        """)
    result = pynox.json("-c", code)
    assert result["exit"] == 0, result
    assert result["stdout"] == "True True 1\n"


def test_thread_pool_and_asyncio(pynox):
    code = textwrap.dedent("""\
        import asyncio, concurrent.futures as cf
        with cf.ThreadPoolExecutor(4) as ex:
            squares = sum(ex.map(lambda x: x * x, range(100)))
        async def main():
            await asyncio.sleep(0.01)
            return await asyncio.gather(*(asyncio.sleep(0, result=i) for i in range(5)))
        print(squares, asyncio.run(main()))
        """)
    result = pynox.json("-c", code)
    assert result["exit"] == 0, result
    assert result["stdout"] == "328350 [0, 1, 2, 3, 4]\n"


def test_granted_read_and_write_workflow(pynox, fs, tree):
    (fs.ro / "input.csv").write_text("a,b\n1,2\n3,4\n")
    code = textwrap.dedent(f"""\
        import csv, os
        RO, RW = {str(fs.ro)!r}, {str(fs.rw)!r}
        rows = list(csv.DictReader(open(os.path.join(RO, 'input.csv'))))
        print(sorted(os.listdir(RO)))
        with open(os.path.join(RW, 'draft.txt'), 'w') as f:
            f.write(str(sum(int(r['a']) + int(r['b']) for r in rows)))
        os.rename(os.path.join(RW, 'draft.txt'), os.path.join(RW, 'total.txt'))
        os.mkdir(os.path.join(RW, 'scratch'))
        open(os.path.join(RW, 'scratch', 'tmp'), 'w').close()
        os.remove(os.path.join(RW, 'scratch', 'tmp'))
        os.rmdir(os.path.join(RW, 'scratch'))
        print(open(os.path.join(RW, 'total.txt')).read())
        """)
    result = pynox.task(code, **fs.grants)
    assert result["exit"] == 0, result
    assert result["stdout"] == "['data.txt', 'input.csv']\n10\n"
    assert tree(fs.rw) == ["total.txt"]
    assert (fs.rw / "total.txt").read_text() == "10"


def test_stdlib_in_memory(pynox):
    code = textwrap.dedent("""\
        import json, re, datetime, sqlite3, zoneinfo, decimal, fractions, statistics, collections, zlib, pickle
        db = sqlite3.connect(':memory:')
        db.execute('create table t (k text, v integer)')
        db.executemany('insert into t values (?, ?)', [('a', 1), ('b', 2), ('a', 3)])
        rows = db.execute('select k, sum(v) from t group by k order by k').fetchall()
        when = datetime.datetime(2024, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo('Europe/Paris'))
        out = {
            'sql': rows,
            're': re.findall(r'\\d+', 'a1b22c333'),
            'json': json.loads(json.dumps({'x': [1, 2.5, None]})),
            'utc': when.astimezone(datetime.timezone.utc).isoformat(),
            'decimal': str(decimal.Decimal('1.1') + decimal.Decimal('2.2')),
            'fraction': str(fractions.Fraction(1, 3) * 3),
            'mean': statistics.mean([1, 2, 3, 4]),
            'counter': collections.Counter('abracadabra').most_common(1),
            'zlib': zlib.decompress(zlib.compress(b'x' * 1000)) == b'x' * 1000,
            'pickle': pickle.loads(pickle.dumps({1, 2})) == {1, 2},
        }
        print(json.dumps(out))
        """)
    result = pynox.json("-c", code)
    assert result["exit"] == 0, result
    assert json.loads(result["stdout"]) == {
        "sql": [["a", 4], ["b", 2]], "re": ["1", "22", "333"], "json": {"x": [1, 2.5, None]},
        "utc": "2024-07-01T10:00:00+00:00", "decimal": "3.3", "fraction": "1", "mean": 2.5,
        "counter": [["a", 5]], "zlib": True, "pickle": True,
    }


def test_sqlite_file_in_write_grant(pynox, fs):
    db = fs.rw / "data.db"
    code = (f"import sqlite3\ndb = sqlite3.connect({str(db)!r})\n"
            "db.execute('create table t (v)')\ndb.execute('insert into t values (42)')\ndb.commit()\n"
            "print(db.execute('select v from t').fetchone()[0])")
    result = pynox.task(code, rw=[fs.rw])
    assert result["exit"] == 0, result
    assert result["stdout"] == "42\n"
    import sqlite3
    assert sqlite3.connect(db).execute("select v from t").fetchone() == (42,)


def test_numpy(pynox):
    code = ("import numpy as np\na = np.arange(12, dtype=float).reshape(3, 4)\n"
            "print(a.sum(), (a @ a.T).trace(), np.linalg.norm(np.ones(4)))")
    result = pynox.json("-c", code)
    assert result["exit"] == 0, result
    assert result["stdout"] == "66.0 506.0 2.0\n"


def test_randomness_and_hashing(pynox):
    code = textwrap.dedent("""\
        import os, random, hashlib, secrets, uuid
        a, b = os.urandom(32), os.urandom(32)
        random.seed(1)
        r = [random.randint(0, 100) for _ in range(3)]
        print(len(a), a != b, r == [17, 72, 97], len(secrets.token_hex(16)), uuid.uuid4().version,
              hashlib.sha256(b'abc').hexdigest()[:16], hashlib.md5(b'').hexdigest()[:8])
        """)
    result = pynox.json("-c", code)
    assert result["exit"] == 0, result
    assert result["stdout"] == "32 True True 32 4 ba7816bf8f01cfea d41d8cd9\n"


def test_script_with_args(pynox, tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    script = scripts / "prog.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:], __file__ == sys.argv[0])\n")
    result = pynox.json(script, "one", "--two", "-c", "3")
    assert result["exit"] == 0, result
    assert result["stdout"] == "__main__ ['one', '--two', '-c', '3'] True\n"


def test_script_imports_a_sibling_when_its_directory_is_granted(pynox, tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "helper.py").write_text("VALUE = 'from helper'\n")
    (scripts / "main.py").write_text("import helper\nprint(helper.VALUE)\n")
    result = pynox.json("--allow-read", scripts, scripts / "main.py")
    assert result["exit"] == 0, result
    assert result["stdout"] == "from helper\n"


def test_script_inside_its_write_grant(pynox, fs):
    """The everyday agent loop: write a script into the workspace, run it there, let it write results."""
    script = fs.rw / "job.py"
    script.write_text(f"open({str(fs.rw / 'result.txt')!r}, 'w').write('42')\nprint('job ran')\n")
    result = pynox.json("--allow-write", fs.rw, script)
    assert result["exit"] == 0, result
    assert result["stdout"] == "job ran\n"
    assert (fs.rw / "result.txt").read_text() == "42"


def test_module_in_a_writable_working_directory(pynox, fs):
    (fs.rw / "workmod.py").write_text("import os\nopen('out.txt', 'w').write('from -m')\nprint(os.getcwd())\n")
    result = pynox.json("--allow-write", ".", "-m", "workmod", cwd=fs.rw)
    assert result["exit"] == 0, result
    assert result["stdout"] == f"{fs.rw}\n"
    assert (fs.rw / "out.txt").read_text() == "from -m"


def test_write_grant_nested_in_a_read_grant(pynox, fs, snapshot):
    outer = fs.outside  # granted read-only below, with a writable subdirectory
    inner = outer / "scratch"
    inner.mkdir()
    before = snapshot(fs.outside_file)
    code = (f"print(open({str(fs.outside_file)!r}).read(), end='')\n"
            f"open({str(inner / 'made.txt')!r}, 'w').write('ok')\n"
            f"open({str(fs.outside_file)!r}, 'a').write('pwned')\n")
    result = pynox.json("--allow-read", outer, "--allow-write", inner, "-c", code)
    assert result["stdout"] == "outside secret\n", result
    assert (inner / "made.txt").read_text() == "ok"
    assert result["error"]["type"] == "PermissionError", result
    assert snapshot(fs.outside_file) == before


def test_module_json_tool_on_a_granted_file(pynox, fs):
    (fs.ro / "in.json").write_text('{"b": 1, "a": [1, 2]}')
    result = pynox.json("--allow-read", fs.ro, "-m", "json.tool", "--sort-keys", fs.ro / "in.json")
    assert result["exit"] == 0, result
    assert json.loads(result["stdout"]) == {"a": [1, 2], "b": 1}
    assert result["stdout"].startswith('{\n    "a"')


def test_module_json_tool_cannot_read_an_ungranted_file(pynox, fs):
    result = pynox.json("-m", "json.tool", fs.outside_file)
    assert result["exit"] != 0, result
    assert "outside secret" not in result["stdout"]


def test_code_from_stdin(pynox):
    result = pynox.json("-", "arg1", input="import sys\nprint('from stdin', sys.argv[1:])\n")
    assert result["exit"] == 0, result
    assert result["stdout"] == "from stdin ['arg1']\n"


def test_env_option_is_visible_and_the_rest_is_scrubbed(pynox):
    code = "import os, json\nprint(json.dumps(dict(os.environ)))"
    result = pynox.json("--env", "GREETING=hello world", "--env", "EMPTY=", "-c", code,
                        env={"PYNOX_SECRET": "1", "AWS_SECRET_ACCESS_KEY": "leak"})
    assert result["exit"] == 0, result
    env = json.loads(result["stdout"])
    assert env["GREETING"] == "hello world"
    assert env["EMPTY"] == ""
    assert "PYNOX_SECRET" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert "HOME" not in env
    assert "leak" not in result["stdout"]


def test_tempfile_works_with_tmpdir_in_a_write_grant(pynox, fs):
    code = ("import tempfile\nwith tempfile.NamedTemporaryFile('w', delete=False) as f:\n    f.write('t')\n"
            "print(f.name.startswith(" + repr(str(fs.rw)) + "))")
    result = pynox.task(code, rw=[fs.rw], extra=["--env", f"TMPDIR={fs.rw}"])
    assert result["exit"] == 0, result
    assert result["stdout"] == "True\n"


def test_package_dir_adds_an_importable_module(pynox, tmp_path):
    pkgs = tmp_path / "site"
    (pkgs / "mylib").mkdir(parents=True)
    (pkgs / "mylib" / "__init__.py").write_text("def answer():\n    return 42\n")
    (pkgs / "single.py").write_text("NAME = 'single'\n")
    result = pynox.json("--package-dir", pkgs, "-c", "import mylib, single\nprint(mylib.answer(), single.NAME)")
    assert result["exit"] == 0, result
    assert result["stdout"] == "42 single\n"


def test_module_in_package_dir_runs_with_dash_m(pynox, tmp_path):
    """A tool installed into a --package-dir runs with -m, as ``python -m`` would run it from site-packages."""
    pkgs = tmp_path / "site"
    pkgs.mkdir()
    (pkgs / "tool.py").write_text("import sys\nprint('tool', sys.argv[1:])\n")
    result = pynox.run("--package-dir", pkgs, "-m", "tool", "x")
    assert result.returncode == 0, result
    assert result.stdout == "tool ['x']\n"


def test_module_in_the_working_directory_runs_with_dash_m(pynox):
    (pynox.cwd / "local_tool.py").write_text("import sys\nprint('local', sys.argv[1:])\n")
    result = pynox.run("-m", "local_tool", "y")
    assert result.returncode == 0, result
    assert result.stdout == "local ['y']\n"


def test_module_in_the_working_directory_runs_with_dash_m_from_the_console_script(pynox):
    """The installed ``pynox`` command, not ``python -m pynox``: CPython's ``-m`` finds modules in the
    working directory, and the task itself would (it puts the cwd first on sys.path)."""
    script = os.path.join(os.path.dirname(sys.executable), "pynox")
    if not os.path.exists(script):
        pytest.skip("the pynox console script is not installed beside this interpreter")
    (pynox.cwd / "local_tool.py").write_text("import sys\nprint('local', sys.argv[1:])\n")
    proc = subprocess.run([script, "-m", "local_tool", "y"], capture_output=True, text=True, cwd=pynox.cwd,
                          timeout=30)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "local ['y']\n"


def test_package_dir_is_read_only(pynox, tmp_path, snapshot):
    pkgs = tmp_path / "site"
    pkgs.mkdir()
    module = pkgs / "victim.py"
    module.write_text("X = 1\n")
    before = snapshot(module)
    result = pynox.json("--package-dir", pkgs, "-c", f"open({str(module)!r}, 'w').write('X = 2')")
    assert result["error"]["type"] == "PermissionError", result
    assert snapshot(module) == before


def test_unicode_output(pynox):
    result = pynox.json("-c", "print('h\u00e9llo \u4e16\u754c \U0001F600')")
    assert result["stdout"] == "h\u00e9llo \u4e16\u754c \U0001F600\n"


def test_dev_null_and_urandom_are_usable(pynox):
    code = ("open('/dev/null', 'w').write('discard')\nprint(len(open('/dev/urandom', 'rb').read(16)),"
            " open('/dev/zero', 'rb').read(4))")
    result = pynox.json("-c", code)
    assert result["exit"] == 0, result
    assert result["stdout"] == "16 b'\\x00\\x00\\x00\\x00'\n"


# --- interpreter shutdown, as CPython does it ----------------------------------------------------
# A task's program ends the way `python -c CODE` would end it: CPython joins
# non-daemon threads, runs atexit handlers and flushes C stdio at exit.  Each
# case below is checked against the same code run by plain CPython first.

SHUTDOWN = {
    "atexit-handler": ("import atexit\natexit.register(print, 'atexit ran')\nprint('main done')",
                       "main done\natexit ran\n"),
    "non-daemon-thread": ("import threading, time\n"
                          "def late():\n    time.sleep(0.2)\n    print('thread finished')\n"
                          "threading.Thread(target=late).start()\nprint('main done')",
                          "main done\nthread finished\n"),
    "executor-without-with": ("import time\nfrom concurrent.futures import ThreadPoolExecutor\n"
                              "pool = ThreadPoolExecutor(2)\n"
                              "pool.submit(lambda: (time.sleep(0.2), print('job finished', flush=True)))\n"
                              "print('main done', flush=True)",
                              "main done\njob finished\n"),
    "c-stdio-output": ("import ctypes\nctypes.CDLL(None).puts(b'from C stdio')\n", "from C stdio\n"),
}


@pytest.mark.parametrize("name, mode", [(name, "json") for name in SHUTDOWN] + [("c-stdio-output", "passthrough")])
def test_shutdown_behaves_like_cpython(pynox, name, mode):
    code, expected = SHUTDOWN[name]
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert plain.stdout == expected, f"the control itself differs: {plain}"
    if mode == "json":
        result = pynox.json("-c", code)
        assert result["exit"] == 0, result
        assert result["stdout"] == expected, f"pynox lost output CPython prints: {result['stdout']!r}"
    else:
        run = pynox.run("-c", code)
        assert run.returncode == 0, run
        assert run.stdout == expected, f"pynox lost output CPython prints: {run.stdout!r}"
