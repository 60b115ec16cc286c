"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455) in a three-broker
ZooKeeper cluster, through kafka-python's admin client: a partition moves to other
brokers (the new replica catches up, the controller elects among the targets and records
the new assignment); a move that cannot finish (its new broker died) is listed with the
replicas being added and, cancelled, goes back to the replicas it had; a second
cancellation finds no reassignment in progress; a broker that is not the controller
answers NOT_CONTROLLER."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import NoReassignmentInProgressError

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import wait_until
from tests.server.wire import Wire


def _create(c, name, replicas):
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(name, 1, replica_assignment=[replicas])],
                        operation_timeout=10)[name].result(15)
    c.wait_leaders(name, 1)


def _assignment(c, name):
    return c.json(f"/brokers/topics/{name}")


def test_move_cancel_and_list_through_the_admin_api(fresh_cluster):
    c = fresh_cluster()
    controller = c.controller()
    others = [b for b in sorted(c.brokers) if b != controller]
    spare = others[0]                       # the broker that is added (and later dies)
    a, b = [x for x in sorted(c.brokers) if x != spare]
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=15000)
    try:
        # A move that completes.
        _create(c, "api-mv", [a, b])
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(50):
            p.produce("api-mv", value=b"v%d" % i)
        assert p.flush(20) == 0
        tp = TopicPartition("api-mv", 0)
        assert admin.alter_partition_reassignments({tp: [b, spare]}) == {tp: None}
        wait_until(lambda: _assignment(c, "api-mv")["partitions"]["0"] == [b, spare]
                   and not admin.list_partition_reassignments(), 30,
                   what="the move finished")
        # The replica moved away may still be in the ISR a moment after the assignment
        # changed (the leader drops it when it learns of the new replica list).
        wait_until(lambda: sorted(c.state("api-mv", 0)["isr"]) == sorted([b, spare]), 30,
                   what="the ISR of the target replicas")
        assert _assignment(c, "api-mv")["adding_replicas"] == {}

        # A move that cannot finish: its new broker dies (its session lives on for a
        # moment, so the controller still counts it live).
        _create(c, "api-stuck", [a, b])
        stuck = TopicPartition("api-stuck", 0)
        c.kill(spare)
        assert admin.alter_partition_reassignments({stuck: [a, b, spare]}) == {stuck: None}
        ongoing = wait_until(lambda: admin.list_partition_reassignments(), 10,
                             what="the move listed")
        assert ongoing == {stuck: {"replicas": [a, b, spare], "adding_replicas": [spare],
                                   "removing_replicas": []}}
        assert admin.list_partition_reassignments([tp]) == {}
        assert admin.alter_partition_reassignments({stuck: None}) == {stuck: None}
        wait_until(lambda: _assignment(c, "api-stuck")["partitions"]["0"] == [a, b]
                   and not admin.list_partition_reassignments(), 30,
                   what="the cancelled move back where it was")
        assert _assignment(c, "api-stuck").get("adding_replicas") in ({}, None)
        assert admin.alter_partition_reassignments({stuck: None}) == {
            stuck: NoReassignmentInProgressError}
    finally:
        admin.close()

    # Another broker than the controller refuses, so clients go to the controller.
    w = Wire(c.brokers[next(x for x in (a, b) if x != c.controller())])
    try:
        r = w.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 5000, "topics": None})
        assert r.error_code == Errors.NOT_CONTROLLER
    finally:
        w.close()


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_reassign_partitions_tool_through_the_brokers(fresh_cluster, tmp_path):
    from tests.client_fixture import run_fastlog

    c = fresh_cluster()
    controller = c.controller()
    spare = next(b for b in sorted(c.brokers) if b != controller)
    a, b = [x for x in sorted(c.brokers) if x != spare]
    _create(c, "cli-mv", [a, b])
    _create(c, "cli-stuck", [a, b])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "cli-mv", "partition": 0, "replicas": [b, spare]}]}))
    args = ("reassign-partitions", "--bootstrap-server", c.bootstrap,
            "--reassignment-json-file", str(plan))
    r = run_fastlog(*args, "--execute")
    assert r.returncode == 0, r.stderr
    assert json.dumps({"version": 1, "partitions": [
        {"topic": "cli-mv", "partition": 0, "replicas": [a, b]}]}) in r.stdout
    assert "Successfully started partition reassignments for cli-mv-0" in r.stdout
    wait_until(lambda: run_fastlog(*args, "--verify").returncode == 0, 30,
               what="the tool saying the move is complete")
    assert "Reassignment of partition cli-mv-0 is completed." in \
        run_fastlog(*args, "--verify").stdout

    stuck = tmp_path / "stuck.json"
    stuck.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "cli-stuck", "partition": 0, "replicas": [a, b, spare]}]}))
    args = ("reassign-partitions", "--bootstrap-server", c.bootstrap,
            "--reassignment-json-file", str(stuck))
    c.kill(spare)
    assert run_fastlog(*args, "--execute").returncode == 0
    r = run_fastlog(*args, "--verify")
    assert r.returncode == 1
    assert "Reassignment of partition cli-stuck-0 is still in progress." in r.stdout
    r = run_fastlog(*args, "--cancel")
    assert r.returncode == 0, r.stderr
    assert "Successfully cancelled partition reassignments for: cli-stuck-0" in r.stdout
    wait_until(lambda: _assignment(c, "cli-stuck")["partitions"]["0"] == [a, b], 30,
               what="the cancelled move back where it was")
    r = run_fastlog(*args, "--cancel")
    assert r.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in r.stderr
    r = run_fastlog(*args, "--verify")
    assert "There is no active reassignment of partition cli-stuck-0, but replica set " \
           f"is {[a, b]} rather than {[a, b, spare]}." in r.stdout
