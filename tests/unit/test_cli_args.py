"""The command line: parse_args, load_permissions and build_policy."""

import os
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynox.cli import build_policy, load_permissions, parse_args
from pynox.errors import UsageError
from pynox.policy import DEFAULT_MAX_FILE_SIZE, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY, DEFAULT_TIMEOUT_MS

EMPTY_LISTS = {"allow_read": [], "allow_write": [], "env": [], "package_dirs": []}


def program(argv):
    options = parse_args(argv)
    return options["program"], options["args"]


# parse_args: programs ------------------------------------------------------------


def test_code():
    assert program(["-c", "print(1)"]) == (("code", "print(1)"), [])


def test_code_attached():
    assert program(["-cprint(1)", "x"]) == (("code", "print(1)"), ["x"])


def test_module_with_args():
    assert program(["-m", "json.tool", "a", "b"]) == (("module", "json.tool"), ["a", "b"])


def test_module_attached():
    assert program(["-mjson.tool", "a"]) == (("module", "json.tool"), ["a"])


def test_script_with_args():
    assert program(["script.py", "1", "2"]) == (("script", "script.py"), ["1", "2"])


def test_stdin():
    assert program(["-", "a"]) == (("stdin", None), ["a"])


@pytest.mark.parametrize(
    "argv, args",
    [
        (["script.py", "--json"], ["--json"]),
        (["script.py", "--allow-read", "/etc"], ["--allow-read", "/etc"]),
        (["script.py", "-O", "-W", "error", "--no-sandbox"], ["-O", "-W", "error", "--no-sandbox"]),
        (["-c", "pass", "--json", "-m", "x"], ["--json", "-m", "x"]),
        (["-m", "mod", "-c", "code"], ["-c", "code"]),
        (["-", "--timeout", "1s"], ["--timeout", "1s"]),
    ],
)
def test_arguments_after_the_program_belong_to_it(argv, args):
    options = parse_args(argv)
    assert options["args"] == args
    assert "json" not in options
    assert "timeout" not in options
    assert options["allow_read"] == []


def test_options_before_c():
    options = parse_args(["--allow-read", "/a", "--allow-read=/b", "--allow-write", "/w", "--allow-network",
                          "--json", "--timeout", "5s", "--memory=1g", "--max-output", "100",
                          "--max-file-size=1m", "--env", "A=1", "--env=B=2", "--package-dir", "/p",
                          "--config=c.toml", "-c", "pass"])
    assert options["allow_read"] == ["/a", "/b"]
    assert options["allow_write"] == ["/w"]
    assert options["allow_network"] is True
    assert options["json"] is True
    assert options["timeout"] == "5s"
    assert options["memory"] == "1g"
    assert options["max_output"] == "100"
    assert options["max_file_size"] == "1m"
    assert options["env"] == ["A=1", "B=2"]
    assert options["package_dirs"] == ["/p"]
    assert options["config"] == "c.toml"
    assert options["program"] == ("code", "pass")


def test_equals_and_space_forms_agree():
    spaced = parse_args(["--timeout", "5s", "--allow-read", "/x", "-c", "pass"])
    joined = parse_args(["--timeout=5s", "--allow-read=/x", "-c", "pass"])
    assert spaced == joined


def test_value_with_equals_and_empty_value():
    options = parse_args(["--env=A=b=c", "--timeout=", "-c", "pass"])
    assert options["env"] == ["A=b=c"]
    assert options["timeout"] == ""


def test_value_that_looks_like_an_option_is_taken_as_value():
    options = parse_args(["--allow-read", "--json", "-c", "pass"])
    assert options["allow_read"] == ["--json"]
    assert "json" not in options


def test_later_value_option_wins():
    assert parse_args(["--timeout", "1s", "--timeout", "2s", "-c", "x"])["timeout"] == "2s"


def test_default_option_lists():
    options = parse_args(["-c", "pass"])
    for key, value in EMPTY_LISTS.items():
        assert options[key] == value


@pytest.mark.parametrize("flag", ["-I", "-E", "-s", "-S", "-u", "-B"])
def test_noop_flags_individually(flag):
    assert program([flag, "-c", "pass"]) == (("code", "pass"), [])
    assert program([flag, "script.py"]) == (("script", "script.py"), [])


@pytest.mark.parametrize("argv", [["-IsB", "-c", "pass"], ["-I", "-E", "-s", "-S", "-u", "-B", "-c", "pass"],
                                  ["-IEsSuB", "-c", "pass"], ["-Ic", "pass"], ["-IsBcpass"]])
def test_noop_flags_combined(argv):
    assert program(argv) == (("code", "pass"), [])


def test_noop_flags_then_module():
    assert program(["-Bm", "json.tool", "f"]) == (("module", "json.tool"), ["f"])


@given(flags=st.text(alphabet="IEsSuB", max_size=8), letter=st.sampled_from("cm"),
       attached=st.booleans(), value=st.text(alphabet="abc.()=", min_size=1, max_size=10))
def test_noop_flags_never_change_the_program(flags, letter, attached, value):
    argv = [f"-{flags}{letter}{value}"] if attached else [f"-{flags}{letter}", value]
    kind = "code" if letter == "c" else "module"
    assert program(argv + ["--x", "-y"]) == ((kind, value), ["--x", "-y"])


@pytest.mark.parametrize("argv", [["-O", "-c", "pass"], ["-W", "error", "-c", "pass"], ["-X", "dev", "-c", "pass"],
                                  ["-i", "-c", "pass"], ["-OO", "x.py"], ["-Wdefault", "x.py"], ["-IO", "x.py"],
                                  ["-q", "x.py"], ["-b", "x.py"], ["-d", "x.py"], ["-v", "x.py"], ["-x", "x.py"]])
def test_other_interpreter_options_refused(argv):
    with pytest.raises(UsageError, match="--no-sandbox"):
        parse_args(argv)


def test_no_sandbox_first_returns_the_rest_unchanged():
    rest = ["-O", "-W", "error", "-X", "dev", "-i", "script.py", "--json"]
    assert parse_args(["--no-sandbox", *rest]) == {"no_sandbox": rest}
    assert parse_args(["--no-sandbox"]) == {"no_sandbox": []}


@pytest.mark.parametrize("argv", [["--json", "--no-sandbox", "x.py"], ["-I", "--no-sandbox", "x.py"],
                                  ["--timeout", "1s", "--no-sandbox", "-c", "pass"]])
def test_no_sandbox_after_other_options_refused(argv):
    with pytest.raises(UsageError, match="--no-sandbox"):
        parse_args(argv)


@pytest.mark.parametrize("option", ["--allow-read", "--allow-write", "--env", "--package-dir", "--timeout",
                                    "--memory", "--max-output", "--max-file-size", "--config"])
def test_missing_value(option):
    with pytest.raises(UsageError, match="needs a value"):
        parse_args([option])


@pytest.mark.parametrize("argv", [["-c"], ["-m"], ["-Ic"], ["--json", "-m"]])
def test_missing_code_or_module(argv):
    with pytest.raises(UsageError, match="needs an argument"):
        parse_args(argv)


@pytest.mark.parametrize("arg", ["--bogus", "--allow-net", "--json=1", "--allow-network=yes", "--", "--verbose"])
def test_unknown_long_option(arg):
    with pytest.raises(UsageError, match="unknown option"):
        parse_args([arg, "-c", "pass"])


@pytest.mark.parametrize("argv", [[], ["--json"], ["-I"], ["-IsB", "--allow-network"], ["--timeout", "5s"]])
def test_nothing_to_run(argv):
    with pytest.raises(UsageError, match="nothing to run"):
        parse_args(argv)


def test_help_and_version():
    assert parse_args(["-h"]) == {"help": True}
    assert parse_args(["--help", "x"]) == {"help": True}
    assert parse_args(["--version"]) == {"version": True}


# build_policy -------------------------------------------------------------------


def policy_for(argv, cwd, **kwargs):
    return build_policy(parse_args([*argv, "-c", "pass"]), str(cwd), **kwargs)


def test_defaults(tmp_path):
    p = policy_for([], tmp_path)
    assert p.allow_read == ()
    assert p.allow_write == ()
    assert p.network is False
    assert p.timeout_ms == DEFAULT_TIMEOUT_MS
    assert p.memory_bytes == DEFAULT_MEMORY
    assert p.max_output == DEFAULT_MAX_OUTPUT
    assert p.max_file_size == DEFAULT_MAX_FILE_SIZE
    assert p.env == {}


def test_limits_and_network(tmp_path):
    p = policy_for(["--timeout", "300ms", "--memory", "512m", "--max-output", "64k", "--max-file-size=1m",
                    "--allow-network"], tmp_path)
    assert p.timeout_ms == 300
    assert p.memory_bytes == 512 << 20
    assert p.max_output == 64 << 10
    assert p.max_file_size == 1 << 20
    assert p.network is True


@pytest.mark.parametrize("argv", [["--timeout", "5x"], ["--timeout", "0s"], ["--memory", "0"],
                                  ["--max-output", "1.5g"], ["--max-file-size", "-1"]])
def test_bad_limits(tmp_path, argv):
    with pytest.raises(UsageError, match=argv[0]):
        policy_for(argv, tmp_path)


def test_huge_timeout_is_a_usage_error(tmp_path):
    # Exit 2 with a message, not a traceback.
    with pytest.raises(UsageError, match="--timeout"):
        policy_for(["--timeout", "9" * 400 + "s"], tmp_path)


@pytest.mark.parametrize("argv", [["--memory", "16777216t"], ["--max-file-size", str(2**64)],
                                  ["--max-output", "99999999999999999999999g"],
                                  ["--timeout", "1000000000000000000000000s"]])
def test_limits_beyond_64_bits_are_usage_errors(tmp_path, argv):
    # Such a policy cannot cross the wire to the child (orjson: "Integer
    # exceeds 64-bit range") nor become an rlimit; it must be refused here.
    with pytest.raises(UsageError, match=argv[0]):
        policy_for(argv, tmp_path)


def test_relative_paths_resolved_against_cwd(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "pkgs").mkdir()
    p = policy_for(["--allow-read", "in", "--allow-write", "./out/../out", "--package-dir", "pkgs"], tmp_path)
    assert p.allow_read == (str(tmp_path / "in"),)
    assert p.allow_write == (str(tmp_path / "out"),)
    assert p.package_dirs == (str(tmp_path / "pkgs"),)


def test_relative_paths_do_not_use_process_cwd(tmp_path, monkeypatch):
    (tmp_path / "a" / "x").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    assert policy_for(["--allow-read", "x"], tmp_path / "a").allow_read == (str(tmp_path / "a" / "x"),)


def test_duplicate_paths_collapse(tmp_path):
    (tmp_path / "in").mkdir()
    p = policy_for(["--allow-read", "in", "--allow-read", str(tmp_path / "in")], tmp_path)
    assert p.allow_read == (str(tmp_path / "in"),)


@pytest.mark.parametrize("option", ["--allow-read", "--allow-write", "--package-dir"])
def test_nonexistent_path(tmp_path, option):
    with pytest.raises(UsageError, match=option):
        policy_for([option, "missing"], tmp_path)


def test_symlinked_dir_resolved_to_real_path(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    p = policy_for(["--allow-read", "link", "--allow-write", str(tmp_path / "link")], tmp_path)
    assert p.allow_read == (str(real),)
    assert p.allow_write == (str(real),)


def test_dangling_symlink_is_nonexistent(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError):
        policy_for(["--allow-read", "dangling"], tmp_path)


@pytest.mark.parametrize("target", [sys.prefix, sys.base_prefix, "/usr/lib", "/", os.path.dirname(os.__file__)])
def test_write_grant_overlapping_the_runtime(tmp_path, target):
    if not os.path.exists(target):
        pytest.skip(f"{target} missing")
    with pytest.raises(UsageError, match="overlaps|kernel interface"):
        policy_for(["--allow-write", target], tmp_path)


@pytest.mark.parametrize("option", ["--allow-read", "--allow-write", "--package-dir"])
@pytest.mark.parametrize("target", ["/proc/self", "/proc", "/sys/kernel", "/dev", "/dev/shm", "/"])
def test_grants_never_reach_kernel_interfaces(tmp_path, option, target):
    # /proc/self would resolve here, in the trusted launcher, to the launcher itself.
    with pytest.raises(UsageError, match="kernel interface"):
        policy_for([option, target], tmp_path)


def test_write_grant_through_symlink_into_the_runtime(tmp_path):
    (tmp_path / "sneaky").symlink_to(sys.prefix)
    with pytest.raises(UsageError, match="overlaps"):
        policy_for(["--allow-write", "sneaky"], tmp_path)


def test_write_grant_overlapping_a_package_dir(tmp_path):
    (tmp_path / "pkgs").mkdir()
    with pytest.raises(UsageError, match="overlaps"):
        policy_for(["--package-dir", "pkgs", "--allow-write", "."], tmp_path)


def test_read_grant_on_the_runtime_is_fine(tmp_path):
    assert policy_for(["--allow-read", "/usr/lib"], tmp_path).allow_read == (os.path.realpath("/usr/lib"),)


def test_implicit_read_is_kept(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("")
    assert policy_for([], tmp_path, implicit_read=(str(script),)).implicit_read == (str(script),)


# --env --------------------------------------------------------------------------


def test_env_pairs(tmp_path):
    p = policy_for(["--env", "KEY=VALUE", "--env=EMPTY=", "--env", "EQ=a=b", "--env", "_UNDER_1=x",
                    "--env", "KEY=second"], tmp_path)
    assert p.env == {"KEY": "second", "EMPTY": "", "EQ": "a=b", "_UNDER_1": "x"}
    assert p.environ()["KEY"] == "second"


@pytest.mark.parametrize("item", ["NOEQUALS", "=1", "A B=1", "A-B=1", "A.B=1", "A\0=1", "A=\0", "A\t=1", "="])
def test_env_invalid(tmp_path, item):
    with pytest.raises(UsageError, match="KEY=VALUE"):
        policy_for(["--env", item], tmp_path)


# config files ---------------------------------------------------------------------


def write_config(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_config_paths_relative_to_the_file(tmp_path):
    conf_dir = tmp_path / "conf"
    (conf_dir / "data").mkdir(parents=True)
    (conf_dir / "out").mkdir()
    (tmp_path / "cwd" / "data").mkdir(parents=True)
    config = write_config(conf_dir / "pynox.toml", """
[permissions]
allow_read = ["data"]
allow_write = ["out"]
allow_network = true
timeout = "2s"
memory = "256m"
max_output = 1000
max_file_size = "1m"
env = { FROM_FILE = "1", SHARED = "file" }
""")
    p = policy_for(["--config", config, "--allow-read", "data", "--env", "SHARED=cli"], tmp_path / "cwd")
    assert p.allow_read == (str(conf_dir / "data"), str(tmp_path / "cwd" / "data"))
    assert p.allow_write == (str(conf_dir / "out"),)
    assert p.network is True
    assert p.timeout_ms == 2000
    assert p.memory_bytes == 256 << 20
    assert p.max_output == 1000
    assert p.max_file_size == 1 << 20
    assert p.env == {"FROM_FILE": "1", "SHARED": "cli"}


def test_command_line_limits_override_the_file(tmp_path):
    config = write_config(tmp_path / "c.toml", '[permissions]\ntimeout = "2s"\nmemory = "256m"\n')
    p = policy_for(["--config", config, "--timeout", "3s"], tmp_path)
    assert p.timeout_ms == 3000
    assert p.memory_bytes == 256 << 20


def test_config_without_permissions_section(tmp_path):
    config = write_config(tmp_path / "c.toml", "[other]\nx = 1\n")
    assert load_permissions(config) == ({}, str(tmp_path))
    assert policy_for(["--config", config], tmp_path).allow_read == ()


def test_load_permissions_returns_section_and_dir(tmp_path):
    config = write_config(tmp_path / "sub" / "c.toml", '[permissions]\nallow_read = ["x"]\n')
    assert load_permissions(config) == ({"allow_read": ["x"]}, str(tmp_path / "sub"))


def test_config_unknown_key_named(tmp_path):
    config = write_config(tmp_path / "c.toml", "[permissions]\nallow_reed = []\n")
    with pytest.raises(UsageError, match="allow_reed"):
        load_permissions(config)
    with pytest.raises(UsageError, match="allow_reed"):
        policy_for(["--config", config], tmp_path)


@pytest.mark.parametrize(
    "body",
    [
        'allow_read = "/etc"',
        "allow_read = [1]",
        'allow_write = {a = "b"}',
        "package_dirs = [true]",
        'allow_network = "yes"',
        "allow_network = 1",
        'env = ["A=1"]',
        "env = { A = 1 }",
        'env = { "A B" = "1" }',
        'env = { "" = "1" }',
        "timeout = true",
        'timeout = "soon"',
        "memory = 1.5",
        'max_output = "lots"',
        "max_file_size = 0",
    ],
)
def test_config_wrong_types(tmp_path, body):
    config = write_config(tmp_path / "c.toml", f"[permissions]\n{body}\n")
    with pytest.raises(UsageError):
        policy_for(["--config", config], tmp_path)


def test_config_env_key_with_equals_refused(tmp_path):
    # "A=B" is not a plain key; it must not silently become A with value "B=c".
    config = write_config(tmp_path / "c.toml", '[permissions]\nenv = { "A=B" = "c" }\n')
    with pytest.raises(UsageError):
        policy_for(["--config", config], tmp_path)


def test_config_permissions_not_a_table(tmp_path):
    config = write_config(tmp_path / "c.toml", "permissions = 5\n")
    with pytest.raises(UsageError, match="table"):
        load_permissions(config)


def test_config_missing_file(tmp_path):
    with pytest.raises(UsageError, match="--config"):
        load_permissions(str(tmp_path / "nope.toml"))


def test_config_invalid_toml(tmp_path):
    config = write_config(tmp_path / "c.toml", "[permissions\n")
    with pytest.raises(UsageError, match="--config"):
        load_permissions(config)


def test_config_nonexistent_path(tmp_path):
    config = write_config(tmp_path / "c.toml", '[permissions]\nallow_read = ["missing"]\n')
    with pytest.raises(UsageError, match="missing"):
        policy_for(["--config", config], tmp_path)


def test_config_write_grant_on_runtime(tmp_path):
    config = write_config(tmp_path / "c.toml", f'[permissions]\nallow_write = ["{sys.prefix}"]\n')
    with pytest.raises(UsageError, match="overlaps"):
        policy_for(["--config", config], tmp_path)
