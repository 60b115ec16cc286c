"""The web console's overview of a three-broker ZooKeeper cluster: every broker with its
rack and the controller marked, a healthy verdict, each broker's log dir, and a topic's
size on its leaders and with its replicas; once a broker is killed, the overview shows it
missing and the cluster degraded."""

import re

from fastlog.client import SyncAdmin, SyncProducer
from fastlog.testing import ConsoleProcess, make_chroot, wait_until
from tests.cluster.harness import ClusterHarness
from tests.console.test_console_http import _cells


def _verdict(console) -> str:
    _, body, _ = console.get("/")
    found = re.search(r'id="verdict">(.*?)</p>', body)
    return found.group(1) if found else ""


def test_overview_shows_a_missing_broker(zk_server, tmp_path):
    cluster = ClusterHarness(tmp_path, make_chroot(zk_server.hosts),
                             rack_of=lambda i: f"rack-{i}",
                             **{"replica.lag.time.max.ms": 2000})
    console = None
    try:
        cluster.start()
        with SyncAdmin(cluster.bootstrap) as admin:
            admin.create_topic("replicated", 3, 3)
        cluster.wait_leaders("replicated", 3)
        console = ConsoleProcess(cluster.bootstrap, "--sample-interval", "1").start()
        wait_until(lambda: _verdict(console).startswith("Healthy: 3 brokers"), 20,
                   interval=0.5, what="a healthy overview")
        _, body, _ = console.get("/")
        for i in (1, 2, 3):
            assert f"rack-{i}" in body
        assert body.count('<span class="badge">controller</span>') == 1
        assert sorted(row[0] for row in _cells(body, "log-dirs")) == ["1", "2", "3"]

        with SyncProducer(cluster.bootstrap, acks="all") as producer:
            for i in range(3):
                producer.send("replicated", b"r" * 2000, partition=i).result(30)

        def sizes():
            _, body, _ = console.get("/topics", q="replicated")
            ((_, _, _, size, with_replicas, _),) = _cells(body, "topics")
            return size, with_replicas

        # Every copy holds the same batches once the followers caught up: three times the
        # leaders' size (shown rounded, so compared as numbers).
        def tripled():
            size, with_replicas = sizes()
            return (size.endswith(" KiB") and with_replicas.endswith(" KiB")
                    and abs(3 * float(size.split()[0])
                            - float(with_replicas.split()[0])) <= 0.2)
        wait_until(tripled, 20, interval=0.5, what="the replicas' sizes")
        assert float(sizes()[0].split()[0]) >= 5.8

        victim = 3 if cluster.controller() != 3 else 2
        cluster.kill(victim)
        wait_until(lambda: _verdict(console).startswith("Degraded"), 30, interval=0.5,
                   what="a degraded overview")
        _, body, _ = console.get("/")
        assert re.search(rf"<td>{victim}</td><td><span class=\"bad\">missing", body), body
        assert f"broker {victim} missing" in _verdict(console)
    finally:
        if console is not None:
            console.stop()
        cluster.close()
