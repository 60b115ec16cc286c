"""ElectLeaders through the controller of a three-broker ZooKeeper cluster (automatic
leader rebalancing off, so only the request moves leaders): a preferred election gives
leadership back to the first replica once it is in sync again, an unclean one revives a
partition whose in-sync replicas are all gone with a live out-of-sync replica; both
through confluent-kafka and `fastlog leader-election`."""

from __future__ import annotations

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fastlog.testing import wait_until
from tests.client_fixture import run_fastlog

NO_REBALANCE = {"auto.leader.rebalance.enable": "false"}


def test_preferred_and_unclean_elections_on_demand(fresh_cluster):
    c = fresh_cluster(**NO_REBALANCE)
    ctl = c.controller()
    a, b = [i for i in sorted(c.brokers) if i != ctl]
    bootstrap = c.brokers[ctl].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in ("el-pref", "el-unclean"):
        admin.create_topics([NewTopic(name, 1, replica_assignment=[[a, b]])],
                            operation_timeout=10)[name].result(15)
        assert c.wait_leaders(name, 1) == {0: a}
        wait_until(lambda name=name: sorted(c.state(name, 0)["isr"]) == sorted([a, b]), 15,
                   what=f"{name} fully in sync")

    # Preferred: a goes away, b leads; back in sync, a leads again only when asked.
    c.kill(a)
    wait_until(lambda: c.state("el-pref", 0)["leader"] == b, 15, what="b leading")
    c.start_broker(a)
    wait_until(lambda: a in c.state("el-pref", 0)["isr"], 30, what="a back in the ISR")
    assert c.state("el-pref", 0)["leader"] == b
    got = admin.elect_leaders(ElectionType.PREFERRED,
                              [TopicPartition("el-pref", 0)]).result(15)
    assert [e for e in got.values()] == [None]
    assert c.state("el-pref", 0)["leader"] == a
    r = run_fastlog("leader-election", "--bootstrap-server", c.brokers[a].bootstrap,
                    "--election-type", "preferred", "--topic", "el-pref", "--partition", "0")
    assert r.returncode == 0, r.stderr
    assert "Valid replica already elected for partitions el-pref-0" in r.stdout

    # Unclean: b leaves the ISR, then the leader a dies; b alone is back, out of sync.
    c.kill(b)
    wait_until(lambda: c.state("el-unclean", 0)["isr"] == [a], 15, what="the ISR down to a")
    c.kill(a)
    wait_until(lambda: c.state("el-unclean", 0)["leader"] == -1, 15, what="el-unclean offline")
    c.start_broker(b)
    assert c.state("el-unclean", 0)["leader"] == -1  # unclean.leader.election.enable=false
    got = admin.elect_leaders(ElectionType.PREFERRED,
                              [TopicPartition("el-unclean", 0)]).result(15)
    assert [e.code() for e in got.values()] == [KafkaError.PREFERRED_LEADER_NOT_AVAILABLE]
    r = run_fastlog("leader-election", "--bootstrap-server", bootstrap,
                    "--election-type", "unclean", "--topic", "el-unclean", "--partition", "0")
    assert r.returncode == 0, r.stderr
    assert "Successfully completed leader election (UNCLEAN) for partitions el-unclean-0" \
        in r.stdout
    assert c.state("el-unclean", 0)["leader"] == b
    assert c.state("el-unclean", 0)["isr"] == [b]
