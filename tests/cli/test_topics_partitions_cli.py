"""`fastlog topics --alter --partitions` against a real broker that serves CreatePartitions:
the topic grows, --describe lists every partition, and a count that does not grow it is
refused in one sentence."""


def _describe(fastlog, bootstrap, topic):
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_alter_partitions_then_describe_shows_them(fastlog, bootstrap, topic_name):
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic_name,
                "--partitions", 2)
    assert r.returncode == 0, r.stderr
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
                "--partitions", 5)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"Topic {topic_name} now has 5 partitions."
    lines = _describe(fastlog, bootstrap, topic_name)
    assert "PartitionCount: 5" in lines[0]
    assert [ln.split("\t")[2] for ln in lines[1:]] == [f"Partition: {p}" for p in range(5)]


def test_alter_to_fewer_is_refused_and_same_count_changes_nothing(fastlog, bootstrap, topic_name):
    fastlog("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic_name,
            "--partitions", 3)
    r = fastlog("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
                "--partitions", 1)
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    fastlog("topics", "--bootstrap-server", bootstrap, "--alter", "--topic", topic_name,
            "--partitions", 3)
    assert "PartitionCount: 3" in _describe(fastlog, bootstrap, topic_name)[0]
