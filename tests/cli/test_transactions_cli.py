"""`fastlog transactions` against a real broker: --list (with --state) and --describe of
transactional ids a confluent-kafka transactional producer uses, an open transaction's
partitions, an unknown id in one sentence, and bad command lines refused with exit 2;
--describe-producers, --find-hanging and --abort on a hanging transaction."""

from __future__ import annotations

import time
import types
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fastlog import _codec
from fastlog.testing import Wire
from tests.client_fixture import bootstrap_fixture
from tests.server.wire import batch, init_pid, list_offset, produce

# A hanging transaction is one written without its coordinator's knowledge, which Kafka
# 3.6+ refuses (KIP-890) unless the check is off, as here.
bootstrap = bootstrap_fixture({"transaction.partition.verification.enable": "false"})


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


def _wire(bootstrap):
    host, port = bootstrap.rsplit(":", 1)
    return Wire(types.SimpleNamespace(host=host, port=int(port)))


def _lso(w, topic):
    return list_offset(w, topic, 1)


def _table_rows(stdout):
    lines = stdout.splitlines()
    return [dict(zip(lines[0].split(), line.split(), strict=True)) for line in lines[1:]]


def test_find_and_abort_a_hanging_transaction(fastlog, bootstrap, topic_name):
    """A transactional batch written without a coordinator (InitProducerId without a
    transactional id, a raw transactional Produce, no EndTxn) an hour old: found by
    --find-hanging, shown by --describe-producers, aborted by --abort; then the LSO passes
    it and a read_committed consumer reads past it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
    w = _wire(bootstrap)
    try:
        assert produce(w, topic_name, batch([b"before"])).error_code == 0
        pid, epoch = init_pid(w)
        old = int(time.time() * 1000) - 3_600_000
        hanging = _codec.build_batch([(old, None, b"h1"), (old, None, b"h2")],
                                     producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                     is_transactional=True)
        r = produce(w, topic_name, hanging, transactional_id=f"raw-{topic_name}")
        assert r.error_code == 0 and r.base_offset == 1
        assert produce(w, topic_name, batch([b"after"])).error_code == 0
        assert _lso(w, topic_name) == 1

        # a live transaction its coordinator knows is not hanging, however old
        live = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"live-{topic_name}"})
        live.init_transactions(30)
        live.begin_transaction()
        live.produce(topic_name, b"live", partition=0)
        assert live.flush(10) == 0
        r = fastlog("transactions", "--bootstrap-server", bootstrap, "--find-hanging",
                    "--broker-id", "0", "--max-transaction-timeout", "0")
        assert r.returncode == 0, r.stderr
        rows = [row for row in _table_rows(r.stdout) if row["Topic"] == topic_name]
        assert [(row["Partition"], row["ProducerId"], row["StartOffset"]) for row in rows] == [
            ("0", str(pid), "1")]
        assert int(rows[0]["Duration(min)"]) >= 59
        live.abort_transaction(30)
        # with the default 15 minutes only the hour-old one is a candidate too
        r = fastlog("transactions", "--bootstrap-server", bootstrap, "--find-hanging",
                    "--broker-id", "0")
        assert r.returncode == 0 and str(pid) in r.stdout, r.stderr

        r = fastlog("transactions", "--bootstrap-server", bootstrap, "--describe-producers",
                    "--topic", topic_name, "--partition", "0")
        assert r.returncode == 0, r.stderr
        mine = [row for row in _table_rows(r.stdout) if row["ProducerId"] == str(pid)]
        assert mine and mine[0]["CurrentTransactionStartOffset"] == "1"
        assert mine[0]["ProducerEpoch"] == str(epoch) and mine[0]["LastSequence"] == "1"

        r = fastlog("transactions", "--bootstrap-server", bootstrap, "--abort",
                    "--topic", topic_name, "--partition", "0", "--start-offset", "1")
        assert r.returncode == 0, r.stderr
        assert f"producer {pid}" in r.stdout
        end = _lso(w, topic_name)
        assert end > 3   # past the aborted batch, the later record and both markers
        r = fastlog("transactions", "--bootstrap-server", bootstrap, "--find-hanging",
                    "--broker-id", "0", "--max-transaction-timeout", "0")
        assert r.returncode == 0 and topic_name not in r.stdout, r.stdout
        # nothing starts at 1 any more: one sentence, non-zero exit
        r = fastlog("transactions", "--bootstrap-server", bootstrap, "--abort",
                    "--topic", topic_name, "--partition", "0", "--start-offset", "1")
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "offset 1" in r.stderr
    finally:
        w.close()

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic_name}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic_name, 0, 0)])
    seen = []
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(m.value())
    c.close()
    assert seen == [b"before", b"after"]


def test_abort_by_producer_id(fastlog, bootstrap, topic_name):
    """--abort naming the producer, its epoch and a coordinator epoch (Kafka's other form)
    ends a hanging transaction; an older coordinator epoch than the partition has seen is
    refused in one sentence."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(20)
    w = _wire(bootstrap)
    try:
        pid, epoch = init_pid(w)
        r = produce(w, topic_name, batch([b"h"], producer_id=pid, epoch=epoch, seq=0,
                                         is_transactional=True),
                    transactional_id=f"raw-{topic_name}")
        assert r.error_code == 0 and _lso(w, topic_name) == 0
        base = ["transactions", "--bootstrap-server", bootstrap, "--abort", "--topic",
                topic_name, "--partition", "0", "--producer-id", pid, "--producer-epoch",
                epoch]
        r = fastlog(*base, "--coordinator-epoch", "4")
        assert r.returncode == 0, r.stderr
        assert _lso(w, topic_name) == 2
        r = fastlog(*base, "--coordinator-epoch", "3")
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "TRANSACTION_COORDINATOR_FENCED" in r.stderr
    finally:
        w.close()


def test_producer_tools_bad_input(fastlog, bootstrap):
    for args in (["--abort", "--topic", "t", "--partition", "0", "--start-offset", "1",
                  "--producer-id", "5"],
                 ["--abort", "--topic", "t", "--partition", "0", "--producer-id", "5",
                  "--producer-epoch", "0"],
                 ["--describe-producers", "--topic", "t", "--partition", "0",
                  "--producer-id", "5"],
                 ["--abort", "--topic", "t", "--partition", "0", "--producer-id", "-5",
                  "--producer-epoch", "0", "--coordinator-epoch", "0"],["--abort", "--topic", "t", "--partition", "0"],
                 ["--describe-producers", "--topic", "t"],
                 ["--describe-producers", "--topic", "t", "--partition", "0",
                  "--broker-id", "0"],
                 ["--find-hanging"], ["--list", "--topic", "t"],
                 ["--abort", "--topic", "t", "--partition", "0", "--start-offset", "-1"],
                 ["--find-hanging", "--broker-id", "0", "--state", "Ongoing"]):
        r = fastlog("transactions", "--bootstrap-server", bootstrap, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr
    for args in (["--find-hanging", "--broker-id", "99"],
                 ["--describe-producers", "--topic", "no-such-topic-here", "--partition", "0"]):
        r = fastlog("transactions", "--bootstrap-server", bootstrap, *args)
        assert r.returncode == 1, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
