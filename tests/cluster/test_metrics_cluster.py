"""Metrics of a three-broker cluster (each broker with its HTTP endpoint): exactly one
broker reports itself the active controller, followers' fetch sessions are counted at
their leaders, under-replicated partitions are reported
while a broker is down and cleared once it is back, and /health/ready follows the
restarted broker's registration."""

from __future__ import annotations

import pytest

from fastlog.testing import make_chroot, wait_until
from tests.cluster.harness import ClusterHarness
from tests.server.scrape import get, http_overrides, scrape, value

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

RM = "kafka_server_replicamanager_"
CONTROLLER = "kafka_controller_kafkacontroller_"
SESSIONS = "kafka_server_fetchsessioncache_numincrementalfetchsessions"


def total(ports, name) -> float:
    return sum(value(scrape(p), name) for p in ports)


def cluster_with_http(zk_server, tmp_path, **extra) -> tuple[ClusterHarness, dict[int, int]]:
    """A three-broker cluster (not started) whose brokers each open an HTTP endpoint, and
    the endpoints' ports by broker id."""
    c = ClusterHarness(tmp_path, make_chroot(zk_server.hosts), **extra)
    ports = {}
    for i, b in c.brokers.items():
        props, ports[i] = http_overrides()
        b.overrides.update(props)
    return c, ports


def test_controller_count_and_under_replicated_partitions(zk_server, tmp_path):
    c, ports = cluster_with_http(zk_server, tmp_path, **{"replica.lag.time.max.ms": 2000})
    try:
        c.start()
        wait_until(lambda: total(ports.values(), CONTROLLER + "activecontrollercount") == 1,
                   15, what="one active controller")
        ctl = c.controller()
        assert value(scrape(ports[ctl]), CONTROLLER + "activecontrollercount") == 1

        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic("mrep", 3, 3)], operation_timeout=10)["mrep"].result(15)
        c.wait_leaders("mrep", 3)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(30):
            p.produce("mrep", value=b"v%d" % i, partition=i % 3)
        assert p.flush(20) == 0
        wait_until(lambda: total(ports.values(), RM + "underreplicatedpartitions") == 0, 20,
                   what="every partition fully replicated")
        # followers fetch through fetch sessions (KIP-227): a leader's two followers, two
        wait_until(lambda: total(ports.values(), SESSIONS) >= 2, 20,
                   what="followers' fetch sessions at their leaders")
        m = scrape(ports[ctl])
        assert value(m, CONTROLLER + "globaltopiccount") >= 1
        assert value(m, CONTROLLER + "globalpartitioncount") >= 3
        assert value(m, CONTROLLER + "offlinepartitionscount") == 0
        assert sum(value(scrape(p), RM + "partitioncount") for p in ports.values()) >= 9

        down = next(i for i in c.brokers if i != ctl)
        c.kill(down)
        live = [ports[i] for i in c.brokers if i != down]
        # every partition has a replica on the dead broker: each live leader reports its own
        wait_until(lambda: total(live, RM + "underreplicatedpartitions") == 3, 30,
                   what="3 under-replicated partitions reported")
        assert total(live, CONTROLLER + "activecontrollercount") == 1
        assert value(scrape(ports[ctl]), CONTROLLER + "offlinepartitionscount") == 0
        assert sum(value(scrape(p), RM + "leadercount") for p in live) >= 3

        c.start_broker(down)
        wait_until(lambda: get(ports[down], "/health/ready")[0] == 200, 20,
                   what="the restarted broker ready")
        wait_until(lambda: total(ports.values(), RM + "underreplicatedpartitions") == 0, 30,
                   what="under-replicated partitions cleared")
        assert total(ports.values(), CONTROLLER + "activecontrollercount") == 1
        assert sum(value(scrape(p), RM + "isrexpands_total") for p in ports.values()) >= 3
    except AssertionError:
        for i, b in c.brokers.items():  # shown with the failure
            print(f"broker {i} log tail:\n{b.log_tail(60)}")
        raise
    finally:
        c.close()


def test_consumer_lag_covers_partitions_led_by_other_brokers(zk_server, tmp_path):
    """The group's coordinator exports lag for every partition the group committed, also
    for those it hosts no replica of (their high watermark asked of their leader)."""
    from confluent_kafka import Consumer, TopicPartition
    c, ports = cluster_with_http(zk_server, tmp_path)
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        # one replica per partition, spread over the three brokers
        admin.create_topics([NewTopic("spread", 3, 1)], operation_timeout=10)["spread"].result(15)
        c.wait_leaders("spread", 3)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(60):
            p.produce("spread", value=b"v%d" % i, partition=i % 3)  # 20 per partition
        assert p.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "spread-group",
                             "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition("spread", i, 5 * (i + 1)) for i in range(3)],
                            asynchronous=False)
        finally:
            consumer.close()
        desc = admin.describe_consumer_groups(["spread-group"])["spread-group"].result(15)
        coordinator = desc.coordinator.id
        leaders = c.wait_leaders("spread", 3)
        assert set(leaders.values()) != {coordinator}  # some live only on other brokers

        def lags():
            m = scrape(ports[coordinator])
            return [value(m, "kafka_consumergroup_lag", consumergroup="spread-group",
                          topic="spread", partition=i) for i in range(3)]

        seen = []
        try:
            wait_until(lambda: seen.append(lags()) or seen[-1] == [15, 10, 5], 20,
                       what="lag of all three partitions")
        except TimeoutError:
            raise AssertionError(f"lag of the three partitions: last seen {seen[-1]}") from None
        assert value(scrape(ports[coordinator]), "kafka_consumergroup_lag_sum",
                     consumergroup="spread-group", topic="spread") == 30
    except AssertionError:
        for i, b in c.brokers.items():
            print(f"broker {i} log tail:\n{b.log_tail(60)}")
        raise
    finally:
        c.close()
