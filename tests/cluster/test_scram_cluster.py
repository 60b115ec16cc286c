"""SCRAM credentials in cluster mode: created through one broker, stored where Kafka keeps
them (/config/users/<user> and a /config/changes notification, Kafka's JSON), and used to
authenticate on another broker within seconds; a changed password takes over there too."""

from __future__ import annotations

import json
import secrets

from kazoo.client import KazooClient

from fastlog.testing import wait_until
from tests.security.test_sasl_broker import add_scram_user, authenticate, sasl_overrides, sasl_wire


def _authenticates(broker, mechanism, user, password) -> bool:
    w = sasl_wire(broker)
    try:
        return authenticate(w, mechanism, user, password).error_code == 0
    finally:
        w.close()


def test_scram_user_added_on_one_broker_authenticates_on_another(fresh_cluster):
    extra = sasl_overrides(secrets.token_urlsafe(12))
    extra["inter.broker.listener.name"] = "PLAINTEXT"
    c = fresh_cluster(ids=(1, 2), **extra)
    first, second = c.brokers[1], c.brokers[2]
    user, password = "dana", secrets.token_urlsafe(12)
    add_scram_user(first.bootstrap, "SCRAM-SHA-512", user, password, iterations=8192)
    wait_until(lambda: _authenticates(second, "SCRAM-SHA-512", user, password), 10,
               what="the new user accepted by the other broker")

    zk = KazooClient(hosts=c.zk_hosts)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(f"/config/users/{user}")
        doc = json.loads(data)
        assert doc["version"] == 1 and set(doc["config"]) == {"SCRAM-SHA-512"}
        assert doc["config"]["SCRAM-SHA-512"].startswith("salt=")
        assert doc["config"]["SCRAM-SHA-512"].endswith(",iterations=8192")
        assert password not in data.decode()
        changes = [json.loads(zk.get(f"/config/changes/{n}")[0])
                   for n in sorted(zk.get_children("/config/changes"))]
        assert {"version": 2, "entity_path": f"users/{user}"} in changes
    finally:
        zk.stop()
        zk.close()

    new_password = secrets.token_urlsafe(12)
    add_scram_user(second.bootstrap, "SCRAM-SHA-512", user, new_password)
    wait_until(lambda: _authenticates(first, "SCRAM-SHA-512", user, new_password), 10,
               what="the changed password accepted by the first broker")
    assert not _authenticates(first, "SCRAM-SHA-512", user, password)
