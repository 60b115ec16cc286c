"""Inter-broker security in a three-broker ZooKeeper-mode cluster: followers fetch from
their leaders over a SASL_SSL listener (TLS checked against the listener's truststore and
the leader's host name, SASL PLAIN with the broker's own user from the listener's JAAS
line), so an acks=all topic of replication factor 3 survives its leader's SIGKILL with
every acknowledged record; and a SASL inter-broker listener the broker has no credentials
for stops it at startup with one sentence (exit 2)."""

import secrets
import subprocess
import time

import pytest

from fastlog.testing import make_chroot, server_command, wait_until
from tests.cluster.harness import SESSION_TIMEOUT_MS
from tests.security.conftest import certs  # noqa: F401 - the session's certificates

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

FAILOVER_S = SESSION_TIMEOUT_MS / 1000 + 10
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
RECORDS = 300


def sasl_ssl_inter_broker(certs, password):  # noqa: F811 - the fixture's value
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.keystore,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.dir / "ca.pem"),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        # the broker's own user (username/password) is also one the listener accepts
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f'{PLAIN_MODULE} required username="broker" password="{password}" '
            f'user_broker="{password}";',
        "min.insync.replicas": "2",
    }


def test_sasl_ssl_inter_broker_listener_replicates_and_fails_over(
        fresh_cluster, certs):  # noqa: F811
    c = fresh_cluster(**sasl_ssl_inter_broker(certs, secrets.token_urlsafe(16)))
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("secured", 1, 3)], operation_timeout=10)["secured"].result(15)
    leader = c.wait_leaders("secured", 1)[0]
    assert sorted(c.state("secured", 0)["isr"]) == [1, 2, 3]

    # acks=all over the client (PLAINTEXT) listener: acknowledged once the followers,
    # fetching over SASL_SSL, have the records.
    acked, failed = [], []

    def delivered(err, msg):
        (failed if err is not None else acked).append(err or msg.offset())
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 30000})
    for i in range(RECORDS):
        producer.produce("secured", value=b"v%d" % i, on_delivery=delivered)
    assert producer.flush(40) == 0
    assert not failed and len(acked) == RECORDS
    assert sorted(c.state("secured", 0)["isr"]) == [1, 2, 3]

    # The leader dies; a follower takes over with everything acknowledged, which it can
    # only have fetched through the secured listener.
    epoch = c.state("secured", 0)["leader_epoch"]
    c.kill(leader)
    state = wait_until(lambda: (st := c.state("secured", 0))["leader"] not in (leader, -1)
                       and st, FAILOVER_S, what="a new leader of the secured partition")
    assert state["leader_epoch"] > epoch and leader not in state["isr"]

    bootstrap = ",".join(b.bootstrap for i, b in c.brokers.items() if b.alive())
    # Read by assignment: no group coordinator needed (__consumer_offsets has one replica
    # here, perhaps on the killed broker).
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "secured-check",
                         "enable.auto.commit": False})
    seen = set()
    try:
        consumer.assign([TopicPartition("secured", 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
    finally:
        consumer.close()
    assert seen == {b"v%d" % i for i in range(RECORDS)}

    # The killed broker comes back and catches up over the same listener.
    c.start_broker(leader)
    wait_until(lambda: sorted(c.state("secured", 0)["isr"]) == [1, 2, 3], FAILOVER_S,
               what="the restarted broker back in the ISR")


@pytest.mark.parametrize("change, needle", [
    ({}, 'needs its own username="..." password="..." in '
         "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"},
     "sasl.mechanism.inter.broker.protocol names GSSAPI, which fastlog does not serve"),
])
def test_sasl_inter_broker_listener_without_credentials_is_one_sentence_and_exit_2(
        zk_server, tmp_path, change, needle):
    password = secrets.token_urlsafe(16)
    props = {
        "broker.id": "1", "zookeeper.connect": make_chroot(zk_server.hosts),
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        # users for clients, but no username/password of the broker itself
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f'{PLAIN_MODULE} required user_alice="{password}";',
        **change,
    }
    args = server_command()
    for k, v in props.items():
        args += ["--override", f"{k}={v}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert password not in r.stderr


def test_with_an_authorizer_the_brokers_super_user_principal_replicates(fresh_cluster):
    """The brokers log in to each other as User:broker, a super user: its replica fetches
    (ClusterAction) are allowed with no ACL granting them, so acks=all succeeds."""
    from tests.cluster.test_acl_cluster import _metadata_error
    from tests.server.test_authz import (
        USERS,
        acl,
        admin_client,
        authz_overrides,
        client_conf,
        create_acls,
    )

    password = secrets.token_urlsafe(16)
    users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    c = fresh_cluster(ids=(1, 2), **authz_overrides(**{
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f'{PLAIN_MODULE} required username="broker" password="{password}" '
            f'user_broker="{password}" {users};',
        "super.users": "User:admin;User:broker",
    }))
    topic = "acl-secured"
    admin = admin_client(c.brokers[1])
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(15)
    c.wait_leaders(topic, 1)
    create_acls(c.brokers[1], [acl("TOPIC", topic, "User:alice", "WRITE")])

    def alice_may_write_everywhere():
        return all(_metadata_error(b, "alice", topic) == 0 for b in c.brokers.values())
    wait_until(alice_may_write_everywhere, 10, what="alice's ACL on both brokers")
    producer = Producer({**client_conf(c.brokers[2], "alice"), "acks": "all",
                         "message.timeout.ms": 20000})
    errors = []
    for i in range(5):
        producer.produce(topic, b"v%d" % i, on_delivery=lambda err, _: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None] * 5
    assert sorted(c.state(topic, 0)["isr"]) == [1, 2]
