"""`fastlog transactions` against a real broker: --list (with --state) and --describe of
transactional ids a confluent-kafka transactional producer uses, an open transaction's
partitions, an unknown id in one sentence, and bad command lines refused with exit 2."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def test_list_and_describe(fastlog, bootstrap, topic_name):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(20)
    done, open_ = f"cli-done-{uuid.uuid4().hex[:6]}", f"cli-open-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": done})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic_name, b"x", partition=0)
    p.commit_transaction(30)
    q = Producer({"bootstrap.servers": bootstrap, "transactional.id": open_})
    q.init_transactions(30)
    q.begin_transaction()
    q.produce(topic_name, b"y", partition=1)
    assert q.flush(10) == 0

    r = fastlog("transactions", "--bootstrap-server", bootstrap, "--list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                "TransactionState"]
    states = {line.split()[0]: line.split()[3] for line in lines[1:]}
    assert states[done] == "CompleteCommit" and states[open_] == "Ongoing"
    r = fastlog("transactions", "--bootstrap-server", bootstrap, "--list", "--state", "Ongoing")
    assert open_ in r.stdout and done not in r.stdout

    r = fastlog("transactions", "--bootstrap-server", bootstrap, "--describe",
                "--transactional-id", open_)
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()
    fields = dict(zip(header.split(), row.split(), strict=True))
    assert fields["TransactionState"] == "Ongoing" and fields["ProducerEpoch"] == "0"
    assert fields["TopicPartitions"] == f"{topic_name}-1"
    assert int(fields["TransactionDurationMs"]) >= 0
    q.abort_transaction(30)
    r = fastlog("transactions", "--bootstrap-server", bootstrap, "--describe",
                "--transactional-id", done)
    assert "CompleteCommit" in r.stdout and r.stdout.splitlines()[1].split()[6] == "None"


def test_unknown_id_and_bad_command_lines(fastlog, bootstrap):
    r = fastlog("transactions", "--bootstrap-server", bootstrap, "--describe",
                "--transactional-id", "cli-never-used")
    assert r.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    for args in (["--describe"], ["--list", "--transactional-id", "x"],
                 ["--describe", "--transactional-id", "x", "--state", "Ongoing"],
                 ["--list", "--state", "Bogus"], []):
        r = fastlog("transactions", "--bootstrap-server", bootstrap, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr
