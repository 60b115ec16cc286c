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


@pytest.mark.parametrize("args, expect", [
    (("topics", "--create", "--topic", "t", "--partitions", "99999999999999999999"),
     "argument --partitions: '99999999999999999999' must be at most 2147483647"),
    (("topics", "--create", "--topic", "t", "--partitions", "2147483648"),
     "argument --partitions: '2147483648' must be at most 2147483647"),
    (("topics", "--create", "--topic", "t", "--replication-factor", "99999"),
     "argument --replication-factor: '99999' must be at most 32767"),
    (("topics", "--alter", "--topic", "t", "--partitions", "99999999999"),
     "argument --partitions: '99999999999' must be at most 2147483647"),
    (("consume", "--topic", "t", "--partition", "0", "--offset", "99999999999999999999999"),
     "argument --offset: '99999999999999999999999' must be at most 9223372036854775807"),
    (("consume", "--topic", "t", "--partition", "0", "--offset", "-1"),
     "argument --offset: '-1' must not be negative"),
    (("consume", "--topic", "t", "--partition", "2147483648"),
     "argument --partition: '2147483648' must be at most 2147483647"),
    (("produce", "--topic", "t", "--partition", "2147483648"),
     "argument --partition: '2147483648' must be at most 2147483647"),
    (("consumer-groups", "--reset-offsets", "--group", "g", "--topic", "t",
      "--to-offset", "9223372036854775808"),
     "argument --to-offset: '9223372036854775808' must be at most 9223372036854775807"),
    (("consumer-groups", "--reset-offsets", "--group", "g", "--topic", "t:2147483648",
      "--to-earliest"), "'2147483648' must be at most 2147483647"),
])
def test_numbers_beyond_kafka_field_bounds_are_refused(fastlog, args, expect):
    r = fastlog(*args)
    assert r.returncode == 2
    assert expect in _one_sentence(r)


@pytest.mark.parametrize("command", ["consume", "consumer-groups"])
def test_group_id_longer_than_kafka_strings_is_refused(fastlog, command):
    args = ("--topic", "t") if command == "consume" else ("--describe",)
    r = fastlog(command, *args, "--group", "g" * 40000)
    assert r.returncode == 2
    line = _one_sentence(r)
    assert "argument --group: must be at most 32767 bytes long, not 40000" in line
    assert "g" * 100 not in line


@pytest.mark.parametrize("command", ["consume", "consumer-groups"])
def test_empty_group_id_is_refused(fastlog, command):
    args = ("--topic", "t") if command == "consume" else ("--describe",)
    r = fastlog(command, *args, "--group", "")
    assert r.returncode == 2
    assert "argument --group: must not be empty" in _one_sentence(r)


def test_bounds_accept_the_largest_wire_values():
    from fastlog.cli import main

    assert main.partition_count("2147483647") == 2147483647
    assert main.replication_factor("32767") == 32767
    assert main.partition_index("0") == 0
    assert main.offset_value("9223372036854775807") == 9223372036854775807
    assert main.topic_name("a" * 249) == "a" * 249
    assert main.group_id("g" * 32767) == "g" * 32767


_TOPIC_COMMANDS = [
    ("produce",),
    ("consume",),
    ("topics", "--describe"),
    ("topics", "--create"),
    ("consumer-groups", "--reset-offsets", "--group", "g", "--to-earliest"),
]


@pytest.mark.parametrize("name", ["a b", ".", "..", "t" * 250, "a/b", "caf\u00e9", ""])
@pytest.mark.parametrize("command", _TOPIC_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_illegal_topic_name_is_refused_before_asking_a_broker(fastlog, closed_port,
                                                               command, name):
    r = fastlog(command[0], "--bootstrap-server", f"127.0.0.1:{closed_port}", *command[1:],
                "--topic", name)
    assert r.returncode == 2
    line = _one_sentence(r)
    assert "is not a legal topic name" in line and "1-249 characters" in line
    assert "does not exist" not in line and "connection refused" not in line


@pytest.mark.parametrize("args, expect", [
    (("--list", "--topic", "good"), "--topic does not apply to --list"),
    (("--list", "--partitions", "4"), "--partitions does not apply to --list"),
    (("--describe", "--replication-factor", "1"),
     "--replication-factor does not apply to --describe"),
    (("--delete", "--topic", "t", "--config", "a=b"), "--config does not apply to --delete"),
    (("--create", "--topic", "t", "--if-exists"), "--if-exists does not apply to --create"),
    (("--alter", "--topic", "t", "--partitions", "2", "--exclude-internal"),
     "--exclude-internal does not apply to --alter"),
])
def test_topics_refuses_options_that_do_not_apply_to_the_action(fastlog, closed_port,
                                                                 args, expect):
    r = fastlog("topics", "--bootstrap-server", f"127.0.0.1:{closed_port}", *args)
    assert r.returncode == 2
    assert _one_sentence(r) == f"fastlog topics: {expect}"


def test_consumer_groups_list_refuses_a_group(fastlog, closed_port):
    r = fastlog("consumer-groups", "--bootstrap-server", f"127.0.0.1:{closed_port}", "--list",
                "--group", "g")
    assert r.returncode == 2
    assert _one_sentence(r) == "fastlog consumer-groups: --group does not apply to --list"
