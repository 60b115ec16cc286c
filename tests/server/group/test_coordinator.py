"""GroupCoordinator driven directly (no network) over an in-memory __consumer_offsets:
rebalances, error codes where Kafka returns them, timers, offsets, reload (which hands the
loop back as it goes and is dropped when leadership moves under it)."""

import asyncio

from fastlog.protocol.errors import Errors
from fastlog.server.group.coordinator import LOAD_YIELD_RECORDS, GroupCoordinator
from fastlog.server.group.offsets import MemoryGroupStore, partition_for
from fastlog.server.group.schemas import (
    OffsetAndMetadata,
    encode_offset_key,
    encode_offset_value,
)


class FakeBroker:
    def __init__(self, **overrides):
        self.config = {
            "offsets.topic.num.partitions": 5,
            "group.initial.rebalance.delay.ms": 50,
            "group.min.session.timeout.ms": 100,
            "group.max.session.timeout.ms": 60000,
            "offsets.retention.minutes": 1,
            "offsets.retention.check.interval.ms": 3600_000,
        }
        self.config.update(overrides)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def started(store=None, **overrides):
    c = GroupCoordinator(FakeBroker(**overrides), store or MemoryGroupStore())
    await c.startup()
    for _ in range(100):
        if not c.loading:
            break
        await asyncio.sleep(0.01)
    return c


def join(c, group, member_id="", protocols=(("range", b"m"),), session=10000, rebalance=2000,
         instance=None, require_known=False, client="cli"):
    return c.join_group(group, member_id, instance, require_known, client, "/127.0.0.1",
                        rebalance, session, "consumer", list(protocols))


async def join_new(c, group, **kw):
    """A KIP-394 first join: MEMBER_ID_REQUIRED, then the join with that id."""
    first = await join(c, group, require_known=True, **kw)
    assert first.error == Errors.MEMBER_ID_REQUIRED and first.member_id
    return await join(c, group, member_id=first.member_id, require_known=True, **kw)


async def stable_group(c, group, n=2, session=10000):
    results = await asyncio.gather(*[join_new(c, group, session=session) for _ in range(n)])
    assert all(r.error == Errors.NONE for r in results)
    leader = next(r for r in results if r.leader_id == r.member_id)
    assignment = {r.member_id: r.member_id.encode() for r in results}
    syncs = await asyncio.gather(*[
        c.sync_group(group, r.generation_id, r.member_id, None, None, None,
                     assignment if r is leader else {}) for r in results])
    assert [s.assignment for s in syncs] == [r.member_id.encode() for r in results]
    return results


def test_two_members_join_one_generation_leader_sees_all():
    async def main():
        c = await started()
        results = await stable_group(c, "g")
        gens = {r.generation_id for r in results}
        assert gens == {1}
        leader = [r for r in results if r.members]
        assert len(leader) == 1 and len(leader[0].members) == 2
        assert c.groups["g"].state.value == "Stable"
        await c.shutdown()
    run(main())


def test_protocol_chosen_is_common_to_all():
    async def main():
        c = await started()
        a, b = await asyncio.gather(
            join(c, "g", protocols=[("range", b"1"), ("roundrobin", b"2")]),
            join(c, "g", protocols=[("roundrobin", b"3")]))
        assert a.protocol_name == b.protocol_name == "roundrobin"
        bad = await join(c, "g", protocols=[("sticky", b"")])
        assert bad.error == Errors.INCONSISTENT_GROUP_PROTOCOL
        await c.shutdown()
    run(main())


def test_heartbeat_errors_where_kafka_returns_them():
    async def main():
        c = await started()
        a, b = await stable_group(c, "g")
        assert await c.heartbeat("g", a.member_id, None, 1) == Errors.NONE
        assert await c.heartbeat("g", a.member_id, None, 7) == Errors.ILLEGAL_GENERATION
        assert await c.heartbeat("g", "nobody", None, 1) == Errors.UNKNOWN_MEMBER_ID
        assert await c.heartbeat("other", "x", None, 1) == Errors.UNKNOWN_MEMBER_ID
        assert await c.heartbeat("", "x", None, 1) == Errors.INVALID_GROUP_ID
        # a third member joining puts the group into a rebalance
        t = asyncio.ensure_future(join_new(c, "g"))
        await asyncio.sleep(0.05)
        assert await c.heartbeat("g", a.member_id, None, 1) == Errors.REBALANCE_IN_PROGRESS
        # everyone rejoins: the rebalance completes
        ra, rb = await asyncio.gather(join(c, "g", member_id=a.member_id),
                                      join(c, "g", member_id=b.member_id))
        rc = await t
        assert ra.generation_id == rb.generation_id == rc.generation_id == 2
        await c.shutdown()
    run(main())


def test_leave_triggers_rebalance_and_remaining_member_gets_new_generation():
    async def main():
        c = await started()
        a, b = await stable_group(c, "g")
        err, per = await c.leave_group("g", [(b.member_id, None)])
        assert err == Errors.NONE and per[0][2] == Errors.NONE
        assert await c.heartbeat("g", a.member_id, None, 1) == Errors.REBALANCE_IN_PROGRESS
        ra = await join(c, "g", member_id=a.member_id)
        assert ra.error == Errors.NONE and ra.generation_id == 2
        assert [m[0] for m in ra.members] == [a.member_id]
        await c.shutdown()
    run(main())


def test_session_expiry_removes_a_silent_member():
    async def main():
        c = await started()
        a, b = await stable_group(c, "g", session=300)
        # keep a alive, let b die
        for _ in range(6):
            await asyncio.sleep(0.1)
            await c.heartbeat("g", a.member_id, None, 1)
        assert b.member_id not in c.groups["g"].members
        ra = await join(c, "g", member_id=a.member_id, session=300)
        assert ra.generation_id == 2 and len(ra.members) == 1
        await c.shutdown()
    run(main())


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    async def main():
        c = await started()
        a, b = await stable_group(c, "g")
        t = asyncio.ensure_future(join(c, "g", member_id=a.member_id, rebalance=300))
        ra = await t  # b never rejoins; the rebalance timeout of 300 ms ends the wait
        assert ra.error == Errors.NONE and ra.generation_id == 2
        assert list(c.groups["g"].members) == [a.member_id]
        await c.shutdown()
    run(main())


def test_sync_group_errors():
    async def main():
        c = await started()
        a, b = await stable_group(c, "g")
        s = await c.sync_group("g", 9, a.member_id, None, None, None, {})
        assert s.error == Errors.ILLEGAL_GENERATION
        s = await c.sync_group("g", 1, "zz", None, None, None, {})
        assert s.error == Errors.UNKNOWN_MEMBER_ID
        s = await c.sync_group("g", 1, a.member_id, None, "consumer", "roundrobin", {})
        assert s.error == Errors.INCONSISTENT_GROUP_PROTOCOL
        s = await c.sync_group("g", 1, a.member_id, None, "consumer", "range", {})
        assert s.error == Errors.NONE and s.protocol_name == "range"
        await c.shutdown()
    run(main())


def test_invalid_session_timeout():
    async def main():
        c = await started()
        r = await join(c, "g", session=10)
        assert r.error == Errors.INVALID_SESSION_TIMEOUT
        await c.shutdown()
    run(main())


def test_commit_and_fetch_offsets_round_trip_metadata_and_epoch():
    async def main():
        store = MemoryGroupStore()
        c = await started(store)
        a, b = await stable_group(c, "g")
        res = await c.commit_offsets("g", a.member_id, None, 1, {
            ("t", 0): OffsetAndMetadata(10, 3, "hello"),
            ("t", 1): OffsetAndMetadata(20, -1, None)})
        assert set(res.values()) == {Errors.NONE}
        err, got = await c.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)])
        assert err == Errors.NONE
        assert (got[("t", 0)].offset, got[("t", 0)].leader_epoch, got[("t", 0)].metadata) == (
            10, 3, "hello")
        assert got[("t", 1)].offset == 20 and got[("t", 2)] is None
        bad = await c.commit_offsets("g", a.member_id, None, 5, {("t", 0): OffsetAndMetadata(1)})
        assert bad[("t", 0)] == Errors.ILLEGAL_GENERATION
        bad = await c.commit_offsets("g", "who", None, 1, {("t", 0): OffsetAndMetadata(1)})
        assert bad[("t", 0)] == Errors.UNKNOWN_MEMBER_ID
        big = await c.commit_offsets("g", a.member_id, None, 1,
                                     {("t", 0): OffsetAndMetadata(1, -1, "x" * 5000)})
        assert big[("t", 0)] == Errors.OFFSET_METADATA_TOO_LARGE
        await c.shutdown()
    run(main())


def test_commit_is_not_acknowledged_when_the_write_fails():
    async def main():
        store = MemoryGroupStore()
        c = await started(store)
        store.fail_with = Errors.NOT_ENOUGH_REPLICAS
        res = await c.commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(5)})
        assert res[("t", 0)] == Errors.NOT_ENOUGH_REPLICAS
        err, got = await c.fetch_offsets("g", [("t", 0)])
        assert got[("t", 0)] is None
        await c.shutdown()
    run(main())


def test_state_survives_reload_from_the_store():
    async def main():
        store = MemoryGroupStore()
        c = await started(store)
        a, b = await stable_group(c, "g")
        await c.commit_offsets("g", a.member_id, None, 1,
                               {("t", 0): OffsetAndMetadata(7, 2, "md")})
        await c.commit_offsets("simple", "", None, -1, {("t", 1): OffsetAndMetadata(3)})
        await c.shutdown()
        c2 = await started(store)
        g = c2.groups["g"]
        assert g.state.value == "Stable" and g.generation_id == 1
        assert g.get(a.member_id).assignment == a.member_id.encode()
        err, got = await c2.fetch_offsets("g", [("t", 0)])
        assert (got[("t", 0)].offset, got[("t", 0)].leader_epoch, got[("t", 0)].metadata) == (
            7, 2, "md")
        err, got = await c2.fetch_offsets("simple", None)
        assert got[("t", 1)].offset == 3
        # the old members can heartbeat at once
        assert await c2.heartbeat("g", a.member_id, None, 1) == Errors.NONE
        await c2.shutdown()
    run(main())


def test_load_in_progress_answers_coordinator_load_in_progress():
    async def main():
        c = GroupCoordinator(FakeBroker(), MemoryGroupStore())
        await c.startup(load=False)
        c.loading.add(c.partition_for("g"))
        assert await c.heartbeat("g", "m", None, 1) == Errors.COORDINATOR_LOAD_IN_PROGRESS
        r = await join(c, "g")
        assert r.error == Errors.COORDINATOR_LOAD_IN_PROGRESS
        await c.shutdown()
    run(main())


def test_delete_group_only_when_empty_and_tombstones_survive_reload():
    async def main():
        store = MemoryGroupStore()
        c = await started(store)
        a, b = await stable_group(c, "g")
        await c.commit_offsets("g", a.member_id, None, 1, {("t", 0): OffsetAndMetadata(7)})
        assert (await c.delete_groups(["g"]))["g"] == Errors.NON_EMPTY_GROUP
        assert (await c.delete_groups(["nope"]))["nope"] == Errors.GROUP_ID_NOT_FOUND
        await c.leave_group("g", [(a.member_id, None), (b.member_id, None)])
        assert c.groups["g"].state.value == "Empty"
        assert (await c.delete_groups(["g"]))["g"] == Errors.NONE
        await c.shutdown()
        c2 = await started(store)
        assert "g" not in c2.groups
        await c2.shutdown()
    run(main())


def test_static_member_restart_keeps_assignment_without_rebalance():
    async def main():
        c = await started()
        r1, r2 = await asyncio.gather(join(c, "g", instance="i1"), join(c, "g", instance="i2"))
        assert r1.error == r2.error == Errors.NONE
        leader = r1 if r1.leader_id == r1.member_id else r2
        await asyncio.gather(*[
            c.sync_group("g", r.generation_id, r.member_id, inst, None, None,
                         {r1.member_id: b"A1", r2.member_id: b"A2"} if r is leader else {})
            for r, inst in ((r1, "i1"), (r2, "i2"))])
        follower, finst = (r2, "i2") if leader is r1 else (r1, "i1")
        gen = c.groups["g"].generation_id
        again = await join(c, "g", instance=finst)  # restarted without its member id
        assert again.error == Errors.NONE and again.generation_id == gen
        assert again.member_id != follower.member_id
        s = await c.sync_group("g", gen, again.member_id, finst, None, None, {})
        assert s.assignment in (b"A1", b"A2")
        # the old incarnation is fenced
        assert (await c.heartbeat("g", follower.member_id, finst, gen)
                == Errors.FENCED_INSTANCE_ID)
        await c.shutdown()
    run(main())


def test_expired_offsets_are_removed_with_tombstones():
    async def main():
        store = MemoryGroupStore()
        c = await started(store)
        await c.commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(1)})
        assert await c.expire_offsets(now=10**15) == 1
        assert "g" not in c.groups
        await c.shutdown()
        c2 = await started(store)
        assert "g" not in c2.groups
        await c2.shutdown()
    run(main())


def test_delete_offsets_refuses_subscribed_topics():
    async def main():
        c = await started()
        sub = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
        r = await join(c, "g", protocols=[("range", sub)])
        await c.sync_group("g", r.generation_id, r.member_id, None, None, None, {})
        await c.commit_offsets("g", r.member_id, None, r.generation_id, {
            ("t", 0): OffsetAndMetadata(1), ("u", 0): OffsetAndMetadata(2)})
        err, per = await c.delete_offsets("g", [("t", 0), ("u", 0)])
        assert err == Errors.NONE
        assert per == {("t", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): Errors.NONE}
        assert ("u", 0) not in c.groups["g"].offsets
        await c.shutdown()
    run(main())


def test_resigned_partition_answers_not_coordinator_and_reelection_reloads():
    async def main():
        store = MemoryGroupStore()
        c = await started(store)
        a, b = await stable_group(c, "g")
        await c.commit_offsets("g", a.member_id, None, 1, {("t", 0): OffsetAndMetadata(4)})
        p = c.partition_for("g")
        c.on_resigned(p)
        assert await c.heartbeat("g", a.member_id, None, 1) == Errors.NOT_COORDINATOR
        assert not c.is_coordinator_for("g")
        c.on_elected(p)
        for _ in range(100):
            if p not in c.loading:
                break
            await asyncio.sleep(0.01)
        err, got = await c.fetch_offsets("g", [("t", 0)])
        assert err == Errors.NONE and got[("t", 0)].offset == 4
        await c.shutdown()
    run(main())


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout():
    async def main():
        c = await started()
        a, b = await asyncio.gather(join_new(c, "g", rebalance=400),
                                    join_new(c, "g", rebalance=400))
        leader, follower = (a, b) if a.leader_id == a.member_id else (b, a)
        # the follower syncs and waits; the leader keeps heartbeating but never syncs
        parked = asyncio.ensure_future(c.sync_group("g", 1, follower.member_id, None, None,
                                                    None, {}))
        for _ in range(6):
            await asyncio.sleep(0.1)
            await c.heartbeat("g", leader.member_id, None, 1)
        res = await parked
        assert res.error == Errors.REBALANCE_IN_PROGRESS
        assert leader.member_id not in c.groups["g"].members
        rejoin = await join(c, "g", member_id=follower.member_id, rebalance=400)
        assert rejoin.error == Errors.NONE and rejoin.generation_id == 2
        assert rejoin.leader_id == follower.member_id
        await c.shutdown()
    run(main())


def _big_partition(store, group, n):
    """n offset commits of `group` (50 partitions of topic t, offsets 0..n-1) in its
    __consumer_offsets partition; returns that partition."""
    p = partition_for(group, FakeBroker().config["offsets.topic.num.partitions"])
    store.partitions[p] = [(encode_offset_key(group, "t", i % 50),
                            encode_offset_value(OffsetAndMetadata(i))) for i in range(n)]
    return p


def _over_big_partition(n=10 * LOAD_YIELD_RECORDS):
    """A coordinator (not started) whose store holds n commits of group g; (c, p, n)."""
    store = MemoryGroupStore()
    p = _big_partition(store, "g", n)
    return GroupCoordinator(FakeBroker(), store), p, n


async def _reload_under_way():
    """A started coordinator re-elected for g's partition, its load of the n commits under
    way (it yields every LOAD_YIELD_RECORDS records); (c, p, n)."""
    c, p, n = _over_big_partition()
    await c.startup(load=False)
    c.on_resigned(p)
    c.on_elected(p)
    for _ in range(3):
        await asyncio.sleep(0)
    return c, p, n


async def _until_loaded(c, p):
    for _ in range(500):
        if p not in c.loading:
            return
        await asyncio.sleep(0.01)


def test_large_partition_load_hands_the_loop_back_and_keeps_the_last_offsets():
    async def main():
        c, p, n = _over_big_partition()
        turns_while_loading = 0
        done = asyncio.Event()

        async def other_work():
            nonlocal turns_while_loading
            while not done.is_set():
                if p in c.loading:
                    turns_while_loading += 1
                await asyncio.sleep(0)

        worker = asyncio.create_task(other_work())
        await c.startup()
        for _ in range(500):
            if not c.loading:
                break
            await asyncio.sleep(0.01)
        done.set()
        await worker
        assert not c.loading
        assert turns_while_loading >= n // LOAD_YIELD_RECORDS - 1
        err, got = await c.fetch_offsets("g", [("t", 0), ("t", 49)])
        assert err == Errors.NONE
        assert (got[("t", 0)].offset, got[("t", 49)].offset) == (n - 50, n - 1)
        await c.shutdown()
    run(main())


def test_load_of_a_partition_resigned_meanwhile_installs_nothing():
    async def main():
        c, p, n = await _reload_under_way()
        assert p in c.loading
        c.on_resigned(p)            # leadership moves away in the middle of it
        await asyncio.sleep(0.3)
        assert "g" not in c.groups and p not in c.loading
        assert await c.heartbeat("g", "m", None, 1) == Errors.NOT_COORDINATOR
        c.on_elected(p)             # and back: a fresh load serves the group
        await asyncio.sleep(0)
        assert p in c.loading
        await _until_loaded(c, p)
        err, got = await c.fetch_offsets("g", [("t", 0)])
        assert err == Errors.NONE and got[("t", 0)].offset == n - 50
        await c.shutdown()
    run(main())


def test_reelection_during_a_load_keeps_the_partition_loading_until_the_new_load_ends():
    async def main():
        c, p, n = await _reload_under_way()   # load A
        c.on_resigned(p)
        c.on_elected(p)             # load B: A is void and must not end the loading state
        for _ in range(100 * n):
            if p not in c.loading:
                break
            await asyncio.sleep(0)
        # the first turn the partition serves, its groups are there
        assert p not in c.loading and "g" in c.groups
        err, got = await c.fetch_offsets("g", [("t", 49)])
        assert err == Errors.NONE and got[("t", 49)].offset == n - 1
        await c.shutdown()
    run(main())
