"""Dynamic broker configs in cluster mode: a cluster-wide default set through one broker is
stored where Kafka keeps it (/config/brokers/<default> and a /config/changes notification,
Kafka's JSON) and applies on the other broker within seconds; a per-broker value applies on
its broker only."""

from __future__ import annotations

import json

from fastlog.protocol import ApiKey
from fastlog.testing import wait_until
from tests.server.wire import Wire

DYNAMIC_BROKER, DYNAMIC_DEFAULT = 2, 3


def _alter(broker, name, key, value):
    w = Wire(broker)
    try:
        r = w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 4, "resource_name": name,
            "configs": [{"name": key, "config_operation": 0, "value": value}]}],
            "validate_only": False})
        return r.responses[0]
    finally:
        w.close()


def _described(broker, node_id, key):
    w = Wire(broker)
    try:
        r = w.call(ApiKey.DESCRIBE_CONFIGS, 3, {"resources": [{
            "resource_type": 4, "resource_name": str(node_id), "configuration_keys": [key]}],
            "include_synonyms": False, "include_documentation": False})
        c = r.results[0].configs[0]
        return c.value, c.config_source
    finally:
        w.close()


def test_default_set_through_one_broker_applies_on_the_other(fresh_cluster):
    c = fresh_cluster(ids=(1, 2))
    first, second = c.brokers[1], c.brokers[2]
    assert _alter(first, "", "log.retention.ms", "7200000").error_code == 0
    wait_until(lambda: _described(second, 2, "log.retention.ms") == ("7200000",
                                                                      DYNAMIC_DEFAULT),
               10, what="the default applied on the other broker")
    assert c.json("/config/brokers/<default>") == {
        "version": 1, "config": {"log.retention.ms": "7200000"}}
    zk = c.zk
    changes = [json.loads(zk.get(f"/config/changes/{n}")[0])
               for n in sorted(zk.get_children("/config/changes"))]
    assert {"version": 2, "entity_path": "brokers/<default>"} in changes

    # A per-broker value is for that broker alone, and wins over the default there.
    assert _alter(second, "2", "log.retention.ms", "60000").error_code == 0
    assert _described(second, 2, "log.retention.ms") == ("60000", DYNAMIC_BROKER)
    assert c.json("/config/brokers/2") == {"version": 1,
                                           "config": {"log.retention.ms": "60000"}}
    assert _described(first, 1, "log.retention.ms") == ("7200000", DYNAMIC_DEFAULT)
    # A broker answers for its own id only, as Kafka's brokers do.
    assert _alter(first, "2", "log.retention.ms", "1").error_code != 0

    # Restarted, a broker reads its values back from ZooKeeper.
    c.stop(2)
    c.start_broker(2)
    assert _described(c.brokers[2], 2, "log.retention.ms") == ("60000", DYNAMIC_BROKER)
