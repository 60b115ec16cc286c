"""The group APIs on the wire, version by version, through a real fastlog-server: the
error codes Kafka returns where clients depend on them, and the APIs real consumers do
not exercise in the client tests (LeaveGroup v3 batches, OffsetDelete, OffsetFetch of
everything, FindCoordinator for transactional ids)."""

from __future__ import annotations

import asyncio

from fastlog.client import Cluster
from fastlog.protocol import ApiKey, Errors
from tests.server.group.clients import Member, create_topic, wait_until
from tests.server.group.test_group_clients import fresh

SUB = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def connect(bootstrap):
    cluster = Cluster(bootstrap, client_id="wire-test")
    conn = await cluster.bootstrap_connection()
    return cluster, conn


def join_body(group, member_id="", protocols=(("range", SUB),), session=6000, instance=None):
    return {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": 3000,
            "member_id": member_id, "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocols": [{"name": n, "metadata": m} for n, m in protocols]}


def test_join_sync_heartbeat_leave_error_codes(group_broker):
    group = fresh("g-wire")
    # Offsets are committed only for partitions that exist (Kafka's OffsetCommit).
    create_topic(group_broker.bootstrap, "t", 2)
    create_topic(group_broker.bootstrap, "u", 1)

    async def main():
        cluster, conn = await connect(group_broker.bootstrap)
        try:
            fc = await conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0},
                                    version=2)
            assert fc.error_code == Errors.NONE and fc.port == int(
                group_broker.bootstrap.rsplit(":", 1)[1])
            txn = await conn.request(ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 1},
                                     version=1)
            assert txn.error_code == Errors.NONE and txn.node_id == fc.node_id
            v3 = await conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0},
                                    version=3)   # flexible
            assert (v3.error_code, v3.node_id, v3.port) == (Errors.NONE, fc.node_id, fc.port)
            # v4 (KIP-699): a batch of keys, each answered on its own
            batch = await conn.request(ApiKey.FIND_COORDINATOR, {
                "key_type": 0, "coordinator_keys": [group, "", "other"]}, version=4)
            assert [(c.key, c.error_code, c.node_id, c.port) for c in batch.coordinators] == [
                (group, Errors.NONE, fc.node_id, fc.port),
                ("", Errors.INVALID_REQUEST, -1, -1),
                ("other", Errors.NONE, fc.node_id, fc.port)]
            bad_type = await conn.request(ApiKey.FIND_COORDINATOR, {
                "key_type": 7, "coordinator_keys": ["tx"]}, version=4)
            assert [c.error_code for c in bad_type.coordinators] == [Errors.INVALID_REQUEST]
            txns = await conn.request(ApiKey.FIND_COORDINATOR, {
                "key_type": 1, "coordinator_keys": ["tx", "ty"]}, version=4)
            assert [(c.key, c.error_code) for c in txns.coordinators] == [
                ("tx", Errors.NONE), ("ty", Errors.NONE)]
            # v4+: the first join only hands out a member id
            first = await conn.request(ApiKey.JOIN_GROUP, join_body(group), version=5)
            assert first.error_code == Errors.MEMBER_ID_REQUIRED and first.member_id
            joined = await conn.request(ApiKey.JOIN_GROUP,
                                        join_body(group, first.member_id), version=5)
            assert joined.error_code == Errors.NONE and joined.generation_id == 1
            assert joined.leader == joined.member_id and joined.protocol_name == "range"
            assert [m.member_id for m in joined.members] == [joined.member_id]
            me = joined.member_id
            bad = await conn.request(ApiKey.JOIN_GROUP, join_body(
                group, protocols=(("roundrobin", SUB),)), version=0)
            assert bad.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
            short = await conn.request(ApiKey.JOIN_GROUP, join_body(group, session=10),
                                       version=5)
            assert short.error_code == Errors.INVALID_SESSION_TIMEOUT
            sync = await conn.request(ApiKey.SYNC_GROUP, {
                "group_id": group, "generation_id": 1, "member_id": me,
                "assignments": [{"member_id": me, "assignment": b"ASSIGN"}]}, version=3)
            assert sync.error_code == Errors.NONE and bytes(sync.assignment) == b"ASSIGN"
            for gen, member, code in ((1, me, Errors.NONE), (5, me, Errors.ILLEGAL_GENERATION),
                                      (1, "ghost", Errors.UNKNOWN_MEMBER_ID)):
                hb = await conn.request(ApiKey.HEARTBEAT, {
                    "group_id": group, "generation_id": gen, "member_id": member}, version=3)
                assert hb.error_code == code
            # OffsetCommit v7 / OffsetFetch v5 carry the leader epoch; v1 fetch has none
            oc = await conn.request(ApiKey.OFFSET_COMMIT, {
                "group_id": group, "generation_id_or_member_epoch": 1, "member_id": me,
                "topics": [{"name": "t", "partitions": [
                    {"partition_index": 0, "committed_offset": 42,
                     "committed_leader_epoch": 9, "committed_metadata": "md"},
                    {"partition_index": 1, "committed_offset": 7,
                     "committed_leader_epoch": -1, "committed_metadata": None}]},
                    {"name": "u", "partitions": [
                        {"partition_index": 0, "committed_offset": 1,
                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
                version=7)
            assert {p.error_code for t in oc.topics for p in t.partitions} == {Errors.NONE}
            of = await conn.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None},
                                    version=5)
            got = {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch,
                                                 p.metadata)
                   for t in of.topics for p in t.partitions}
            assert got == {("t", 0): (42, 9, "md"), ("t", 1): (7, -1, ""), ("u", 0): (1, -1, "")}
            of1 = await conn.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": [
                {"name": "t", "partition_indexes": [0, 5]}]}, version=1)
            assert [(p.partition_index, p.committed_offset) for p in of1.topics[0].partitions
                    ] == [(0, 42), (5, -1)]
            # OffsetDelete: the subscribed topic is refused, the other deleted
            od = await conn.request(ApiKey.OFFSET_DELETE, {"group_id": group, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0}]},
                {"name": "u", "partitions": [{"partition_index": 0}]}]}, version=0)
            codes = {t.name: t.partitions[0].error_code for t in od.topics}
            assert codes == {"t": Errors.GROUP_SUBSCRIBED_TO_TOPIC, "u": Errors.NONE}
            dg = await conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group, "nope"]},
                                    version=4)
            mine, other = dg.groups
            assert mine.group_state == "Stable" and mine.protocol_data == "range"
            assert bytes(mine.members[0].member_assignment) == b"ASSIGN"
            assert other.error_code == Errors.NONE and other.group_state == "Dead"
            dl = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": [group]}, version=1)
            assert dl.results[0].error_code == Errors.NON_EMPTY_GROUP
            # LeaveGroup v3: a batch with one unknown member
            lv = await conn.request(ApiKey.LEAVE_GROUP, {"group_id": group, "members": [
                {"member_id": me, "group_instance_id": None},
                {"member_id": "ghost", "group_instance_id": None}]}, version=3)
            assert lv.error_code == Errors.NONE
            assert [m.error_code for m in lv.members] == [Errors.NONE, Errors.UNKNOWN_MEMBER_ID]
            lg = await conn.request(ApiKey.LIST_GROUPS, {}, version=2)
            assert (group, "consumer") in [(g.group_id, g.protocol_type) for g in lg.groups]
            dl = await conn.request(ApiKey.DELETE_GROUPS, {"groups_names": [group]}, version=1)
            assert dl.results[0].error_code == Errors.NONE
            hb = await conn.request(ApiKey.HEARTBEAT, {
                "group_id": group, "generation_id": 1, "member_id": me}, version=0)
            assert hb.error_code == Errors.UNKNOWN_MEMBER_ID
        finally:
            await cluster.close()
    run(main())


def test_static_member_restart_keeps_its_partitions(group_broker):
    topic, group = fresh("static"), fresh("g-static")
    create_topic(group_broker.bootstrap, topic, 4)
    a = Member("confluent", group_broker.bootstrap, group, topic, instance_id="a",
               session_ms=6000)
    b = Member("confluent", group_broker.bootstrap, group, topic, instance_id="b",
               session_ms=6000)
    try:
        wait_until(lambda: a.assignment and b.assignment
                   and len(a.assignment | b.assignment) == 4, 30, "a two-way split")
        before = b.assignment
        b.close()  # a static member leaves no LeaveGroup behind
        b = Member("confluent", group_broker.bootstrap, group, topic, instance_id="b",
                   session_ms=6000)
        wait_until(lambda: b.assignment, 30, "the restarted static member's assignment")
        assert b.assignment == before
        assert a.assignment | b.assignment == frozenset(range(4))
    finally:
        for m in (a, b):
            m.close()


def test_offsets_topic_is_compacted_internal_with_configured_partitions(group_broker):
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
    md = admin.list_topics(timeout=10)
    assert len(md.topics["__consumer_offsets"].partitions) == 4  # the fixture's override
    res = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    configs = admin.describe_configs([res])[res].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
