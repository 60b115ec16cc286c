"""Bad input to `fastlog` gives one sentence on stderr, a non-zero exit, no traceback."""

import pytest


def _one_sentence(r):
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_help_lists_commands(fastlog):
    r = fastlog("--help")
    assert r.returncode == 0
    for command in ("topics", "produce", "consume", "dump-log", "consumer-groups"):
        assert command in r.stdout


@pytest.mark.parametrize("command", ["topics", "produce", "consume"])
def test_each_command_has_help(fastlog, command):
    r = fastlog(command, "--help")
    assert r.returncode == 0
    assert "--bootstrap-server" in r.stdout


@pytest.mark.parametrize("args", [
    ("topics", "--list"),
    ("consume", "--topic", "t", "--from-beginning", "--max-messages", "1"),
    ("produce", "--topic", "t"),
])
def test_unreachable_broker(fastlog, closed_port, args):
    line = _one_sentence(fastlog(*args[:1], "--bootstrap-server", f"127.0.0.1:{closed_port}",
                                 *args[1:], input=b"x\n"))
    assert f"127.0.0.1:{closed_port}" in line and "connection refused" in line


@pytest.mark.parametrize("args, expect", [
    (("topics", "--create", "--topic", "t", "--partitions", "zero"), "--partitions"),
    (("topics", "--create", "--topic", "t", "--partitions", "0"), "at least 1"),
    (("topics", "--list", "--describe"), "not allowed"),
    (("topics", "--create"), "--topic"),
    (("consume", "--topic", "t", "--offset", "soon"), "--offset"),
    (("produce", "--topic", "t", "--compression", "brotli"), "--compression"),
    (("produce", "--topic", "t", "--property", "nonsense"), "KEY=VALUE"),
    (("topics", "--bootstrap-server", "nohostport:xx", "--list"), "bootstrap"),
    (("no-such-command",), "invalid choice"),
])
def test_bad_flag_values(fastlog, args, expect):
    line = _one_sentence(fastlog(*args))
    assert expect in line


def test_consume_missing_topic(fastlog, bootstrap):
    line = _one_sentence(fastlog("consume", "--bootstrap-server", bootstrap, "--topic",
                                 "no-such-topic-here", "--from-beginning",
                                 "--max-messages", 1))
    assert line == "fastlog consume: topic 'no-such-topic-here' does not exist"


def test_produce_line_without_key_separator(fastlog, bootstrap, topic_name):
    fastlog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic_name)
    line = _one_sentence(fastlog("produce", "--bootstrap-server", bootstrap, "--topic",
                                 topic_name, "--property", "parse.key=true",
                                 input=b"no separator here\n"))
    assert "separator" in line
