"""Client quotas in cluster mode: set through one broker, stored where Kafka keeps them
(/config/clients/<id>, /config/users/<user>/clients/<id>, <default> unsanitized, Kafka's
JSON, a /config/changes notification each) and enforced by the other broker within
seconds; a removal there is heard back on the first; a restarted broker reads them."""

from __future__ import annotations

from fastlog.client.sync import SyncAdmin
from fastlog.protocol import ApiKey
from fastlog.security.quota import DEFAULT
from fastlog.testing import wait_until
from tests.server.wire import Wire, batch


def _throttle_of_produce(broker) -> int:
    """throttle_time_ms of a 20 kB produce (client id "wire-test") on a fresh connection;
    the partition need not be led there: its bytes count all the same, as in Kafka."""
    w = Wire(broker)
    try:
        resp = w.call(ApiKey.PRODUCE, 8, {
            "transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": "quota-cluster", "partition_data": [
                {"index": 0, "records": batch([b"q" * 20_000])}]}]})
        return resp.throttle_time_ms
    finally:
        w.close()


def _describe(broker):
    with SyncAdmin(broker.bootstrap) as admin:
        return admin.describe_client_quotas()


def test_quota_set_on_one_broker_is_enforced_by_another(fresh_cluster):
    c = fresh_cluster(ids=(1, 2), **{"quota.window.num": "2"})
    first, second = c.brokers[1], c.brokers[2]
    assert _throttle_of_produce(second) == 0   # no quota yet
    with SyncAdmin(first.bootstrap) as admin:
        admin.alter_client_quotas([
            (("ANONYMOUS", "wire-test"), {"producer_byte_rate": 1000}),
            ((None, DEFAULT), {"consumer_byte_rate": 5000}),
            (("ANONYMOUS", None), {"request_percentage": 50}),
        ])
    wait_until(lambda: _throttle_of_produce(second) > 0, 15,
               what="the quota set through broker 1 enforced by broker 2")

    assert c.json("/config/users/ANONYMOUS/clients/wire-test") == {
        "version": 1, "config": {"producer_byte_rate": "1000"}}
    assert c.json(f"/config/clients/{DEFAULT}") == {
        "version": 1, "config": {"consumer_byte_rate": "5000"}}
    assert c.json("/config/users/ANONYMOUS") == {
        "version": 1, "config": {"request_percentage": "50.0"}}
    changes = [c.json(f"/config/changes/{n}")
               for n in sorted(c.zk.get_children("/config/changes"))]
    for entity in ("users/ANONYMOUS/clients/wire-test", f"clients/{DEFAULT}", "users/ANONYMOUS"):
        assert {"version": 2, "entity_path": entity} in changes

    # removed through broker 2: broker 1 no longer lists it
    with SyncAdmin(second.bootstrap) as admin:
        admin.alter_client_quotas([(("ANONYMOUS", "wire-test"), {"producer_byte_rate": None})])
    wait_until(lambda: ("ANONYMOUS", "wire-test") not in _describe(first), 15,
               what="the removal heard by broker 1")

    # a broker started afresh reads every quota from ZooKeeper
    c.stop(2)
    c.start_broker(2)
    assert _describe(second) == {(None, DEFAULT): {"consumer_byte_rate": 5000.0},
                                 ("ANONYMOUS", None): {"request_percentage": 50.0}}
