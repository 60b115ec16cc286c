"""`fastlog reassign-partitions` on a real cluster: a partition on two brokers moves to
one of them and the third while an idempotent acks=all producer keeps writing; the new replica catches up
and joins the ISR, the controller elects among the targets and drops the other one,
whose log goes; nothing acknowledged is lost and the new replicas' logs are identical."""

from __future__ import annotations

import json
import time

import pytest

from tests.client_fixture import run_fastlog
from tests.replication.cluster import Load, read_all

pytestmark = pytest.mark.slow

TOPIC = "mv"


def test_reassign_partition_to_other_brokers_under_load(cluster_factory, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = cluster_factory(**{"min.insync.replicas": "1"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(30)
    st = cluster.wait(lambda: (lambda s: len(s["isr"]) == 2 and s)(cluster.states(TOPIC, 1)[0]),
                      30, "an ISR of 2")
    old = sorted(st["isr"])
    gone, kept = old[0], old[1]
    new = next(b for b in cluster.brokers if b not in old)
    load = Load(cluster.bootstrap, TOPIC, 1, rate=200).start()
    try:
        load.wait_acked(200)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": [kept, new]}]}))
        args = ("reassign-partitions", "--zookeeper", cluster.zk_hosts,
                "--reassignment-json-file", plan)
        r = run_fastlog(*args, "--execute")
        assert r.returncode == 0, r.stderr
        assert '"replicas": [' in r.stdout  # the rollback plan
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = run_fastlog(*args, "--verify")
            if r.returncode == 0:
                break
            time.sleep(0.5)
        assert "is completed" in r.stdout, (r.stdout, r.stderr)
        seen = []

        def target_isr():
            s = cluster.states(TOPIC, 1)[0]
            seen.append(s)
            return sorted(s["isr"]) == sorted([kept, new]) and s

        try:
            st = cluster.wait(target_isr, 30, "the ISR of the target replicas")
        except AssertionError as e:
            # Say what the partition and the brokers were doing, not only "timed out".
            logs = "\n".join(f"--- broker {i}:\n{b.log_tail(30)}"
                             for i, b in cluster.brokers.items())
            raise AssertionError(f"{e}; target {[kept, new]}, last partition states "
                                 f"{seen[-3:]}\n{logs}") from None
        assert st["leader"] in (kept, new)
        load.wait_acked(200)
    finally:
        load.stop()
    assert not load.failed, list(load.failed.items())[:3]
    got, ends = read_all(cluster.bootstrap, TOPIC, 1)
    values = [v for _, v in got[0]]
    assert sorted(set(values)) == values and set(load.acked) <= set(values)
    cluster.wait(lambda: cluster.batch_crcs(kept, TOPIC, 0, ends[0])
                 == cluster.batch_crcs(new, TOPIC, 0, ends[0]) != [], 30, "identical replicas")
    cluster.wait(lambda: not (cluster.brokers[gone].data_dir / f"{TOPIC}-0").exists(), 30,
                 "the log of the replica moved away deleted")
