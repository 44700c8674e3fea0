"""Every conversation in spec/*.jsonl replays against the real pool, and the matcher is strict.

The transcripts are the conformance suite for third-party clients
(spec/README.md); here they run against ``pynox pool`` itself, so a
transcript that stops describing the pool fails this test.  The matcher is
tested on its own too, because a matcher that accepted everything would make
every transcript pass.
"""

from pathlib import Path

import pytest

from transcripts import SPEC_DIR, Mismatch, TranscriptError, load, matches, mismatch, oversized_line, replay

TRANSCRIPTS = sorted(SPEC_DIR.glob("*.jsonl"))
EXPECTED = {"ready", "result", "script", "permission_error", "timeout", "stats", "request_errors",
            "ceiling_and_profiles", "exit_codes"}


def test_the_spec_has_every_transcript():
    assert EXPECTED <= {p.stem for p in TRANSCRIPTS}
    assert (SPEC_DIR / "README.md").is_file()


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.stem for p in TRANSCRIPTS])
def test_transcript_replays_against_the_real_pool(path):
    entries = load(path)
    recvs = sum(1 for e in entries if "recv" in e)
    assert recvs >= 1
    assert replay(path) == recvs


@pytest.mark.parametrize("pattern, value", [
    ({"a": 1}, {"a": 1}),
    ("$int", 5),
    ("$int", -(2 ** 63)),
    ("$number", 1.5),
    ("$number", 3),
    ("$str", ""),
    ("$bool", False),
    ("$any", None),
    ("$any", {"x": [1]}),
    ("$list", []),
    ("$object", {}),
    ("$str~abc", "xabcx"),
    ("$str~abc", "abc"),
    ("$str~", ""),
    ([1, "$str", None], [1, "a", None]),
    ({"a": {"b": ["$int", "$str~/out"]}}, {"a": {"b": [7, "/tmp/x/out"]}}),
    (1, 1.0),
    (None, None),
    ("plain", "plain"),
])
def test_matcher_accepts(pattern, value):
    assert matches(pattern, value), mismatch(pattern, value)


@pytest.mark.parametrize("pattern, value", [
    ({"a": 1}, {"a": 1, "b": 2}),  # an extra key
    ({"a": 1, "b": 2}, {"a": 1}),  # a missing key
    ({"a": 1}, {"a": 2}),
    ({"a": "$any"}, {}),  # $any still needs the key
    ("$int", "x"),
    ("$int", True),  # booleans are not numbers
    ("$int", 1.5),
    ("$number", "1"),
    ("$number", False),
    ("$str", 1),
    ("$str", None),
    ("$bool", 0),
    ("$bool", None),
    ("$list", {}),
    ("$list", "[]"),
    ("$object", []),
    ("$object", None),
    ("$str~abc", "ab c"),
    ("$str~abc", ["abc"]),
    ("$str~abc", None),
    ([1, 2], [1, 2, 3]),
    ([1, 2], [2, 1]),
    (["$any"], []),
    ([], {}),
    (True, 1),
    (1, True),
    (0, False),
    (None, 0),
    (None, "null"),
    ("null", None),
    ("1", 1),
    ({"a": {"b": ["$int"]}}, {"a": {"b": ["7"]}}),
])
def test_matcher_rejects(pattern, value):
    assert not matches(pattern, value)
    assert isinstance(mismatch(pattern, value), str)


def test_mismatch_names_the_path():
    problem = mismatch({"error": {"type": "RequestError"}}, {"error": {"type": "ValueError"}})
    assert problem.startswith("$.error.type:")
    assert mismatch([0, {"a": "$int"}], [0, {"a": "x"}]).startswith("$[1].a:")


def test_oversized_line_has_the_requested_length():
    line = oversized_line((1 << 20) + 1)
    assert len(line) == (1 << 20) + 1 and line.startswith(b'{"id": "big", "code": "') and line.endswith(b'"}')


@pytest.mark.parametrize("text", [
    '{"recv": {}}\n',  # pool must come first
    '{"pool": {"args": [], "config": null, "files": {}}}\n{"pool": {"args": [], "config": null, "files": {}}}\n',
    '{"pool": {"args": [], "config": null, "files": {}}, "recv": 1}\n',
    '{"pool": {"args": [], "config": null, "files": {}}}\n{"bogus": 1}\n',
    '{"pool": {"args": [], "config": null, "files": {}}}\n{"send_hex": "0a"}\n',
    '{"pool": {"args": [], "config": null, "files": {}}}\n{"send_hex": "zz"}\n',
    '{"pool": {"args": [], "config": null, "files": {}}}\n{"send": [1]}\n',
    '{"pool": {"args": [], "config": null, "files": {"../x": ""}}}\n',
    '{"pool": {"args": [], "files": {}}}\n',
])
def test_malformed_transcripts_are_refused(tmp_path, text):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(TranscriptError):
        load(path)


def test_replay_fails_when_a_recv_does_not_match(tmp_path):
    good = [line for line in (SPEC_DIR / "exit_codes.jsonl").read_text().splitlines() if line.strip()]
    bad = [line.replace('"exit": 3', '"exit": 4', 1) for line in good]
    assert bad != good
    path = tmp_path / "wrong.jsonl"
    path.write_text("\n".join(bad) + "\n")
    with pytest.raises(Mismatch, match=r"\$\.exit: expected 4, got 3"):
        replay(path)


def test_replay_fails_when_the_pool_writes_an_unexpected_line(tmp_path):
    path = tmp_path / "unread.jsonl"
    path.write_text(Path(SPEC_DIR / "ready.jsonl").read_text() + '{"send": {"id": "x", "code": "print(1)"}}\n')
    with pytest.raises(Mismatch, match="does not expect"):
        replay(path)
