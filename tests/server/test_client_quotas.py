"""DescribeClientQuotas / AlterClientQuotas on a real fastlog-server through fastlog's
admin client and raw wire requests: round trip at each entity level, removal, validate
only, Kafka's INVALID_REQUEST per entity for bad keys, values and entities, describe
filters (exact, default, any; strict), SCRAM credentials of a user kept beside its quotas,
quotas surviving a restart, and CLUSTER_AUTHORIZATION_FAILED without AlterConfigs /
DescribeConfigs on the cluster."""

from __future__ import annotations

import pytest

from fastlog.client.errors import KafkaError
from fastlog.client.sync import SyncAdmin
from fastlog.protocol import ApiKey, Errors
from fastlog.security.quota import DEFAULT, MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED
from tests.server.test_authz import authz_overrides, wire_as
from tests.server.wire import Wire

P, C, R = "producer_byte_rate", "consumer_byte_rate", "request_percentage"


def alter_raw(w, entries, validate_only=False, version=1):
    return w.call(ApiKey.ALTER_CLIENT_QUOTAS, version, {
        "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                     "ops": [{"key": k, "value": v, "remove": rm} for k, v, rm in ops]}
                    for entity, ops in entries],
        "validate_only": validate_only})


def describe_raw(w, components, strict=False, version=1):
    return w.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {
        "components": [{"entity_type": t, "match_type": m, "match": n}
                       for t, m, n in components], "strict": strict})


def test_round_trip_every_entity_level(broker_factory):
    b = broker_factory()
    with SyncAdmin(b.bootstrap) as admin:
        admin.alter_client_quotas([
            (("alice", None), {P: 1024, C: 2048}),
            (("alice", "app"), {P: 4096}),
            (("alice", DEFAULT), {R: 12.5}),
            ((DEFAULT, None), {C: 100}),
            ((DEFAULT, DEFAULT), {P: 300}),
            ((None, "app"), {P: 5000}),
            ((None, DEFAULT), {C: 7000}),
        ])
        got = admin.describe_client_quotas()
        assert got == {("alice", None): {P: 1024.0, C: 2048.0}, ("alice", "app"): {P: 4096.0},
                       ("alice", DEFAULT): {R: 12.5}, (DEFAULT, None): {C: 100.0},
                       (DEFAULT, DEFAULT): {P: 300.0}, (None, "app"): {P: 5000.0},
                       (None, DEFAULT): {C: 7000.0}}
        assert admin.describe_client_quotas([("user", MATCH_EXACT, "alice")], strict=True) == {
            ("alice", None): {P: 1024.0, C: 2048.0}}
        assert set(admin.describe_client_quotas([("client-id", MATCH_DEFAULT, None)])) == {
            ("alice", DEFAULT), (DEFAULT, DEFAULT), (None, DEFAULT)}
        assert set(admin.describe_client_quotas([("user", MATCH_SPECIFIED, None)], True)) == {
            ("alice", None), (DEFAULT, None)}
        # remove one key, then the last key of an entity: it is gone from describe
        admin.alter_client_quotas([(("alice", None), {P: None}), ((None, "app"), {P: None})])
        got = admin.describe_client_quotas()
        assert got[("alice", None)] == {C: 2048.0}
        assert (None, "app") not in got
        # validate_only changes nothing
        admin.alter_client_quotas([(("bob", None), {P: 10})], validate_only=True)
        assert ("bob", None) not in admin.describe_client_quotas()
    # everything survives a restart
    b.restart()
    with SyncAdmin(b.bootstrap) as admin:
        assert admin.describe_client_quotas([("user", MATCH_EXACT, "alice")]) == {
            ("alice", None): {C: 2048.0}, ("alice", "app"): {P: 4096.0},
            ("alice", DEFAULT): {R: 12.5}}


def test_bad_entries_get_invalid_request_each(broker_factory):
    b = broker_factory()
    w = Wire(b)
    try:
        resp = alter_raw(w, [
            ([("user", "ok")], [(P, 1000.0, False)]),
            ([("user", "x")], [("retention.ms", 5.0, False)]),
            ([("user", "x")], [(P, 10.5, False)]),
            ([("user", "x")], [(C, -1.0, False)]),
            ([("ip", "1.2.3.4")], [("connection_creation_rate", 5.0, False)]),
            ([("user", "x")], [("connection_creation_rate", 5.0, False)]),
            ([("group", "g")], [(P, 5.0, False)]),
            ([], [(P, 5.0, False)]),
            ([("user", "x")], [(P, 5.0, False), (P, 6.0, False)]),
        ])
        codes = [e.error_code for e in resp.entries]
        assert codes == [Errors.NONE] + [Errors.INVALID_REQUEST] * 8
        assert all(e.error_message for e in resp.entries[1:])
        assert "whole number" in resp.entries[2].error_message
        assert resp.entries[0].entity[0].entity_name == "ok"
        # only the good entry was stored
        got = describe_raw(w, [], strict=False)
        assert got.error_code == Errors.NONE
        assert [[(e.entity_type, e.entity_name) for e in entry.entity]
                for entry in got.entries] == [[("user", "ok")]]
        bad = describe_raw(w, [("user", MATCH_EXACT, None)])
        assert bad.error_code == Errors.INVALID_REQUEST and bad.error_message
        # v0 (not flexible) answers too
        assert describe_raw(w, [("user", MATCH_EXACT, "ok")], version=0).entries[0].values[0].value == 1000.0
    finally:
        w.close()
    with SyncAdmin(b.bootstrap) as admin, pytest.raises(KafkaError, match="whole number"):
        admin.alter_client_quotas([(("carol", None), {P: 1.5})])


def test_scram_credentials_and_quotas_share_the_user(broker_factory):
    b = broker_factory()
    with SyncAdmin(b.bootstrap) as admin:
        admin.alter_user_scram_credentials([("dora", "SCRAM-SHA-256", "pw-123456", 4096)])
        admin.alter_client_quotas([(("dora", None), {P: 4000})])
        assert admin.describe_user_scram_credentials(["dora"]) == {
            "dora": [("SCRAM-SHA-256", 4096)]}
        admin.alter_client_quotas([(("dora", None), {P: None})])
        assert admin.describe_user_scram_credentials(["dora"]) == {
            "dora": [("SCRAM-SHA-256", 4096)]}
        assert admin.describe_client_quotas() == {}


def test_authorization_asks_for_cluster_configs_rights(broker_factory):
    b = broker_factory(authz_overrides())
    w = wire_as(b, "alice")
    try:
        resp = alter_raw(w, [([("user", "alice")], [(P, 1.0, False)])])
        assert [e.error_code for e in resp.entries] == [Errors.CLUSTER_AUTHORIZATION_FAILED]
        assert describe_raw(w, []).error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    finally:
        w.close()
    admin_wire = wire_as(b, "admin")   # a super user
    try:
        resp = alter_raw(admin_wire, [([("user", "alice")], [(P, 1000.0, False)])])
        assert [e.error_code for e in resp.entries] == [Errors.NONE]
        assert describe_raw(admin_wire, []).entries[0].values[0].value == 1000.0
    finally:
        admin_wire.close()
